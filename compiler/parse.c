/* LLVM IR text or bitcode -> module; what kind of IR it is; the verifier. */
#include <llvm-c/Analysis.h>
#include <llvm-c/IRReader.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"

#define PAYLOAD_NAME "payload"

static bool is_bitcode(const uint8_t *p, size_t n) {
  static const uint8_t raw[4] = {'B', 'C', 0xc0, 0xde};
  static const uint8_t wrapper[4] = {0xde, 0xc0, 0x17, 0x0b};
  return n >= 4 && (memcmp(p, raw, 4) == 0 || memcmp(p, wrapper, 4) == 0);
}

/* Text IR must be text: a NUL or most control bytes mean garbage, and the LLVM lexer
 * would only say "expected top-level entity" at 1:1. */
static bool looks_like_text(const uint8_t *p, size_t n) {
  size_t probe = n < 4096 ? n : 4096;
  for (size_t i = 0; i < probe; i++)
    if (p[i] == 0 || (p[i] < 0x20 && p[i] != '\n' && p[i] != '\r' && p[i] != '\t')) return false;
  return true;
}

static bool has_kernel_section(LLVMModuleRef m) {
  for (LLVMValueRef f = LLVMGetFirstFunction(m); f; f = LLVMGetNextFunction(f)) {
    const char *sec = LLVMGetSection(f);
    if (sec && strcmp(sec, KC_KERNEL_SECTION) == 0) return true;
  }
  return false;
}

static const char *ir_kind_name(kc_ir_kind_t k) {
  return k == KC_IR_AMDGPU ? "amdgcn-amd-amdhsa" : k == KC_IR_NVPTX ? "nvptx64-nvidia-cuda" : "dialect";
}

/* Dialect or target IR: functions in section "kiln.kernel" make it the dialect whatever the
 * triple (clang puts the host's triple on dialect kernels written in C). Without them, an
 * amdgcn or nvptx64 triple makes it target IR for that back end only. */
static kiln_status_t classify(kc_job_t *job) {
  const char *triple = LLVMGetTarget(job->mod);
  if (has_kernel_section(job->mod)) {
    job->ir_kind = KC_IR_DIALECT;
    return KILN_OK;
  }
  if (strncmp(triple, "amdgcn", 6) == 0) job->ir_kind = KC_IR_AMDGPU;
  else if (strncmp(triple, "nvptx64", 7) == 0) job->ir_kind = KC_IR_NVPTX;
  else
    return KC_COMPILE_ERROR(
        "the IR defines no kernels: mark each kernel as a void function in section \"%s\" "
        "(KILN_KERNEL in kiln/kernel.h), or send target IR for amdgcn-amd-amdhsa or "
        "nvptx64-nvidia-cuda",
        KC_KERNEL_SECTION);
  kiln_target_kind_t want = job->ir_kind == KC_IR_AMDGPU ? KILN_TARGET_AMDGPU : KILN_TARGET_NVPTX;
  if (want != job->target.kind)
    return KC_COMPILE_ERROR(
        "this is target IR for %s (triple \"%s\") and compiles only for %s targets, not for %s; "
        "send the portable kernel dialect (kernels in section \"%s\", any triple) to compile "
        "for every target",
        ir_kind_name(job->ir_kind), triple, want == KILN_TARGET_AMDGPU ? "gfx" : "sm_",
        job->target.id, KC_KERNEL_SECTION);
  return KILN_OK;
}

kiln_status_t kc_parse(kc_job_t *job) {
  const uint8_t *p = job->req->payload;
  size_t n = job->req->payload_size;
  bool bitcode = is_bitcode(p, n);
  if (!bitcode && !looks_like_text(p, n))
    return KC_COMPILE_ERROR("the payload is neither LLVM bitcode nor LLVM IR text nor a code "
                            "object (ELF or PTX): send IR (clang -O2 -emit-llvm -c), or set the "
                            "format explicitly");
  /* The copy is NUL-terminated, which the text parser needs. */
  LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRangeCopy((const char *)p, n, PAYLOAD_NAME);
  if (!mb) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory copying the payload");
  char *err = NULL;
  LLVMModuleRef m = NULL;
  if (LLVMParseIRInContext(job->ctx, mb, &m, &err)) { /* takes mb */
    /* Text errors read "payload:LINE:COL: error: what"; bitcode errors have no position. */
    kiln_status_t s = KC_COMPILE_ERROR("cannot parse the %s: %s", bitcode ? "LLVM bitcode" : "LLVM IR",
                                       err ? err : "unknown error");
    LLVMDisposeMessage(err);
    return s;
  }
  job->mod = m;
  KILN_RETURN_IF_ERROR(kc_check_diagnostics(job, "parsing"));
  return classify(job);
}

kiln_status_t kc_verify(kc_job_t *job, const char *stage) {
  char *msg = NULL;
  if (LLVMVerifyModule(job->mod, LLVMReturnStatusAction, &msg)) {
    size_t n = msg ? strlen(msg) : 0;
    while (n && msg[n - 1] == '\n') n--;
    /* The verifier prints whole functions at times; the first lines say what is wrong. */
    if (n > 4000) n = 4000;
    kiln_status_t s = KC_COMPILE_ERROR("%s does not pass the LLVM verifier: %.*s", stage, (int)n,
                                       msg ? msg : "");
    LLVMDisposeMessage(msg);
    return s;
  }
  LLVMDisposeMessage(msg);
  return KILN_OK;
}
