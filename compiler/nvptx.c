/* NVPTX back end: lowered module -> PTX text for the target's sm_ and PTX ISA version. The
 * CUDA driver JIT-compiles it at load. The kernel table comes from the IR signatures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"

static bool is_ptx_kernel(LLVMValueRef f) { return LLVMGetFunctionCallConv(f) == LLVMPTXKernelCallConv; }

kiln_status_t kc_nvptx_build(kc_job_t *job, kiln_artifact_t *out) {
  KILN_RETURN_IF_ERROR(kc_link_nvptx_math(job));
  kc_internalize(job, is_ptx_kernel);
  KILN_RETURN_IF_ERROR(kc_optimize(job, "the IR after linking kiln's math functions", &out->llvm_ir));
  uint8_t *ptx = NULL;
  size_t len = 0;
  KILN_RETURN_IF_ERROR(kc_emit(job, LLVMAssemblyFile, &ptx, &len));
  out->format = KILN_FORMAT_PTX;
  out->code = ptx;
  out->code_size = len + 1; /* with its NUL (kc_emit adds one): cuModuleLoadData wants a C string */
  out->assembly = strdup((const char *)ptx);
  if (!out->assembly) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  return kc_kernel_table_from_signatures(job, out);
}
