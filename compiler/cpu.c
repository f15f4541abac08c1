/* cpu back end: lowered module -> host ELF shared object exporting __kiln_wg_K for each
 * kernel, __kiln_cpu_abi_version, and __kiln_kernels (the kernel table as text, so that a
 * kiln-made shared object can be uploaded again as a prebuilt cpu-so). */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"
#include "protocol/cpu_abi.h"

static bool is_wg_function(LLVMValueRef f) {
  size_t len;
  return strncmp(LLVMGetValueName2(f, &len), KILN_CPU_WG_PREFIX, strlen(KILN_CPU_WG_PREFIX)) == 0;
}

static void add_constant(kc_job_t *job, const char *name, LLVMValueRef init) {
  LLVMValueRef g = LLVMAddGlobal(job->mod, LLVMTypeOf(init), name);
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMExternalLinkage);
  LLVMSetVisibility(g, LLVMDefaultVisibility);
}

/* Path of a C library this process has loaded, so the shared object records it as needed
 * (libm for expf and friends, libc for memcpy/memset that loop idioms become). */
static bool loaded_library(const char *soname, char *out, size_t cap) {
  void *h = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return false;
  struct link_map *lm = NULL;
  bool ok = dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0];
  if (ok) snprintf(out, cap, "%s", lm->l_name);
  dlclose(h);
  return ok;
}

kiln_status_t kc_cpu_build(kc_job_t *job, kiln_artifact_t *out) {
  char *desc = kc_cpu_descriptor(job);
  if (!desc) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  add_constant(job, "__kiln_kernels", LLVMConstStringInContext2(job->ctx, desc, strlen(desc), 0));
  free(desc);
  add_constant(job, KILN_CPU_ABI_SYMBOL, LLVMConstInt(LLVMInt32TypeInContext(job->ctx), KILN_CPU_ABI_VERSION, 0));
  kc_internalize(job, is_wg_function);
  KILN_RETURN_IF_ERROR(kc_optimize(job, "the IR of the work-group functions", &out->llvm_ir));

  uint8_t *obj = NULL;
  size_t obj_len = 0;
  kiln_status_t s = kc_emit_object_and_assembly(job, &obj, &obj_len, &out->assembly);
  if (!s) {
    char libm[512], libc[512];
    const char *extra[4];
    size_t n = 0;
    extra[n++] = "--as-needed";
    if (loaded_library("libm.so.6", libm, sizeof(libm))) extra[n++] = libm;
    if (loaded_library("libc.so.6", libc, sizeof(libc))) extra[n++] = libc;
    s = kc_link_shared(job, obj, obj_len, extra, n, &out->code, &out->code_size);
  }
  if (!s) s = kc_cpu_check_imports(out->code, out->code_size);
  free(obj);
  KILN_RETURN_IF_ERROR(s);
  out->format = KILN_FORMAT_CPU_SO;
  return kc_kernel_table_from_signatures(job, out);
}
