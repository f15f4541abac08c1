/* kiln's math functions for NVPTX (mathlib/kiln_math.c) and its few cpu replacements
 * (mathlib/cpu_math.c), built into bitcode at build time and embedded here, linked into a
 * module only when it calls them. */
#include <llvm-c/BitReader.h>
#include <llvm-c/Linker.h>
#include <string.h>

#include "compiler/internal.h"
#include "kiln_cpu_math_bc.h"
#include "kiln_math_bc.h"

#define PREFIX "__kiln_math_"

static bool calls_math(LLVMModuleRef m) {
  for (LLVMValueRef f = LLVMGetFirstFunction(m); f; f = LLVMGetNextFunction(f)) {
    size_t len;
    if (LLVMIsDeclaration(f) && strncmp(LLVMGetValueName2(f, &len), PREFIX, strlen(PREFIX)) == 0) return true;
  }
  return false;
}

/* Links embedded bitcode into the job's module. `strip_module`: the library's target
 * attributes give way to the target's by stripping the whole module (NVPTX, whose kernels
 * carry none of their own); otherwise only the library's functions are stripped (cpu). */
static kiln_status_t link_bitcode(kc_job_t *job, const unsigned char *bc, size_t len, bool strip_module) {
  LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRange((const char *)bc, len, "kiln_math", 0);
  LLVMModuleRef lib = NULL;
  if (LLVMGetBitcodeModuleInContext2(job->ctx, mb, &lib)) /* takes mb */
    return KILN_STATUS(KILN_E_INTERNAL, "the embedded math library does not load in LLVM %s", KILN_LLVM_VERSION);
  LLVMSetDataLayout(lib, LLVMGetDataLayoutStr(job->mod));
  LLVMSetTarget(lib, LLVMGetTarget(job->mod));
  if (!strip_module) kc_strip_target_attributes(lib);
  if (LLVMLinkModules2(job->mod, lib)) /* destroys lib */
    return KILN_STATUS(KILN_E_INTERNAL, "linking kiln's math library failed");
  if (strip_module) kc_strip_target_attributes(job->mod);
  return KILN_OK;
}

kiln_status_t kc_link_nvptx_math(kc_job_t *job) {
  if (!calls_math(job->mod)) return KILN_OK;
  /* The library was built for a generic sm_; the target's own attributes apply. */
  KILN_RETURN_IF_ERROR(link_bitcode(job, kiln_math_bc, sizeof(kiln_math_bc), true));
  for (LLVMValueRef f = LLVMGetFirstFunction(job->mod); f; f = LLVMGetNextFunction(f)) {
    size_t len;
    const char *name = LLVMGetValueName2(f, &len);
    if (LLVMIsDeclaration(f) && strncmp(name, PREFIX, strlen(PREFIX)) == 0)
      return KC_COMPILE_ERROR("%s has no NVPTX implementation in kiln (docs/kernels.md lists the math "
                              "functions per target)", name + strlen(PREFIX));
  }
  return KILN_OK;
}

kiln_status_t kc_link_cpu_math(kc_job_t *job) {
  if (!calls_math(job->mod)) return KILN_OK;
  return link_bitcode(job, kiln_cpu_math_bc, sizeof(kiln_cpu_math_bc), false);
}
