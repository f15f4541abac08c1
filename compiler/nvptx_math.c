/* kiln's math functions for NVPTX: linked into a module only when it calls them. */
#include <string.h>

#include "compiler/internal.h"

kiln_status_t kc_link_nvptx_math(kc_job_t *job) {
  for (LLVMValueRef f = LLVMGetFirstFunction(job->mod); f; f = LLVMGetNextFunction(f)) {
    size_t len;
    const char *name = LLVMGetValueName2(f, &len);
    if (LLVMIsDeclaration(f) && strncmp(name, "__kiln_math_", 12) == 0)
      return KC_COMPILE_ERROR("%s is not available on NVPTX yet", name + 12);
  }
  return KILN_OK;
}
