/* AMDGPU back end: lowered module -> HSACO (code object v5, ET_DYN) with its kernel table.
 * Device libraries, internalize, optimise, emit, link with lld, read the metadata note. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"

#define CODE_OBJECT_VERSION 500

static bool is_amdgpu_kernel(LLVMValueRef f) { return LLVMGetFunctionCallConv(f) == LLVMAMDGPUKERNELCallConv; }

static void set_code_object_version(kc_job_t *job) {
  /* The module flag decides the version (it beats command-line options, HSA.md §3); the ABI
   * device library linked must match it (devlibs.c links oclc_abi_version_500). */
  LLVMValueRef v = LLVMConstInt(LLVMInt32TypeInContext(job->ctx), CODE_OBJECT_VERSION, 0);
  if (!LLVMGetModuleFlag(job->mod, "amdhsa_code_object_version", 26))
    LLVMAddModuleFlag(job->mod, LLVMModuleFlagBehaviorError, "amdhsa_code_object_version", 26,
                      LLVMValueAsMetadata(v));
}

kiln_status_t kc_amdgpu_build(kc_job_t *job, kiln_artifact_t *out) {
  set_code_object_version(job);
  KILN_RETURN_IF_ERROR(kc_devlibs_link(job));
  kc_internalize(job, is_amdgpu_kernel);
  KILN_RETURN_IF_ERROR(kc_optimize(job, "the IR after linking device libraries", &out->llvm_ir));

  uint8_t *obj = NULL;
  size_t obj_len = 0;
  kiln_status_t s = kc_emit_object_and_assembly(job, &obj, &obj_len, &out->assembly);
  if (!s) s = kc_link_shared(job, obj, obj_len, NULL, 0, &out->code, &out->code_size);
  free(obj);
  KILN_RETURN_IF_ERROR(s);
  out->format = KILN_FORMAT_HSACO;
  char target[96];
  KILN_RETURN_IF_ERROR(kc_amdgpu_metadata_parse(out->code, out->code_size, job, out, target, sizeof(target)));
  return KILN_OK;
}
