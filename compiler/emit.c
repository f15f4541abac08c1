/* Target machines (cached per compiler), pass pipelines, and emission to memory. */
#include <llvm-c/Transforms/PassBuilder.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"

static LLVMCodeGenOptLevel codegen_level(uint32_t opt) {
  switch (opt) {
  case 0: return LLVMCodeGenLevelNone;
  case 1: return LLVMCodeGenLevelLess;
  case 2: return LLVMCodeGenLevelDefault;
  default: return LLVMCodeGenLevelAggressive;
  }
}

/* Target machines cost ~1 ms and hold subtarget tables: keep a few, least recently used out. */
kiln_status_t kc_target_machine(kc_job_t *job) {
  kiln_compiler_t *c = job->c;
  const kiln_target_t *t = &job->target;
  char key[256];
  /* Host features are long; the CPU name plus their length tell host variants apart well
   * enough inside one process, where the host does not change. */
  snprintf(key, sizeof(key), "%s|%s|%.100s|%zu|O%u", t->triple, t->cpu,
           t->kind == KILN_TARGET_CPU ? "host" : t->features, strlen(t->features),
           job->req->options.opt_level);
  c->tick++;
  kc_tm_entry_t *victim = &c->tms[0];
  for (size_t i = 0; i < sizeof(c->tms) / sizeof(c->tms[0]); i++) {
    kc_tm_entry_t *e = &c->tms[i];
    if (e->tm && strcmp(e->key, key) == 0) {
      e->last_used = c->tick;
      job->tm = e->tm;
      return KILN_OK;
    }
    if (!e->tm || (victim->tm && e->last_used < victim->last_used)) victim = e;
  }
  LLVMTargetRef target;
  char *err = NULL;
  if (LLVMGetTargetFromTriple(t->triple, &target, &err)) {
    kiln_status_t s = KILN_STATUS(KILN_E_INTERNAL, "LLVM has no target for %s: %s", t->triple, err);
    LLVMDisposeMessage(err);
    return s;
  }
  LLVMTargetMachineRef tm =
      LLVMCreateTargetMachine(target, t->triple, t->cpu, t->features,
                              codegen_level(job->req->options.opt_level), LLVMRelocPIC,
                              LLVMCodeModelDefault);
  if (!tm) return KILN_STATUS(KILN_E_INTERNAL, "LLVM could not create a target machine for %s", t->id);
  if (victim->tm) LLVMDisposeTargetMachine(victim->tm);
  snprintf(victim->key, sizeof(victim->key), "%s", key);
  victim->tm = tm;
  victim->last_used = c->tick;
  job->tm = tm;
  return KILN_OK;
}

/* GPU code objects link against nothing: a call to a function nobody defines (printf, a
 * libm name kiln does not map) is an error here rather than a linker or loader message. */
static kiln_status_t check_undefined(kc_job_t *job) {
  for (LLVMValueRef f = LLVMGetFirstFunction(job->mod); f; f = LLVMGetNextFunction(f)) {
    if (!LLVMIsDeclaration(f) || LLVMGetIntrinsicID(f) || !LLVMGetFirstUse(f)) continue;
    size_t len;
    return KC_COMPILE_ERROR("the kernel calls '%s', which is not defined and has no %s implementation: GPU "
                            "kernels can call only their own functions, kiln builtins and the math functions "
                            "of docs/kernels.md",
                            LLVMGetValueName2(f, &len), job->target.id);
  }
  return KILN_OK;
}

/* Verify, optimise (address spaces inferred first on GPUs), and keep the final IR text. */
kiln_status_t kc_optimize(kc_job_t *job, const char *stage, char **out_ir) {
  KILN_RETURN_IF_ERROR(kc_verify(job, stage));
  kc_mark(job, "lower");
  char pipeline[128];
  bool gpu = job->target.kind != KILN_TARGET_CPU;
  snprintf(pipeline, sizeof(pipeline), "%s%s%s", gpu ? "function(infer-address-spaces)," : "",
           kc_default_pipeline(job), job->req->options.opt_level == 0 ? ",globaldce" : "");
  KILN_RETURN_IF_ERROR(kc_run_passes(job, pipeline));
  kc_mark(job, "optimize");
  if (gpu) KILN_RETURN_IF_ERROR(check_undefined(job));
  KILN_RETURN_IF_ERROR(kc_print_module(job, out_ir));
  kc_mark(job, "print");
  return KILN_OK;
}

const char *kc_default_pipeline(kc_job_t *job) {
  static const char *const p[] = {"default<O0>", "default<O1>", "default<O2>", "default<O3>"};
  return p[job->req->options.opt_level > 3 ? 3 : job->req->options.opt_level];
}

kiln_status_t kc_run_passes(kc_job_t *job, const char *pipeline) {
  LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
  bool vectorize = job->req->options.opt_level >= 2;
  LLVMPassBuilderOptionsSetLoopVectorization(opts, vectorize);
  LLVMPassBuilderOptionsSetSLPVectorization(opts, vectorize);
  LLVMPassBuilderOptionsSetLoopUnrolling(opts, job->req->options.opt_level >= 1);
  LLVMErrorRef e = LLVMRunPasses(job->mod, pipeline, job->tm, opts);
  LLVMDisposePassBuilderOptions(opts);
  if (e) {
    char *msg = LLVMGetErrorMessage(e);
    kiln_status_t s = KILN_STATUS(KILN_E_INTERNAL, "pass pipeline '%s': %s", pipeline, msg);
    LLVMDisposeErrorMessage(msg);
    return s;
  }
  return kc_check_diagnostics(job, "optimisation");
}

kiln_status_t kc_emit(kc_job_t *job, LLVMCodeGenFileType type, uint8_t **out, size_t *out_len) {
  LLVMMemoryBufferRef mb = NULL;
  char *err = NULL;
  if (LLVMTargetMachineEmitToMemoryBuffer(job->tm, job->mod, type, &err, &mb)) {
    kiln_status_t s = KC_COMPILE_ERROR("code generation for %s failed: %s", job->target.id,
                                       err ? err : "unknown error");
    LLVMDisposeMessage(err);
    return s;
  }
  KILN_RETURN_IF_ERROR(kc_check_diagnostics(job, "code generation"));
  size_t n = LLVMGetBufferSize(mb);
  /* One spare NUL so assembly text can be used as a C string. */
  uint8_t *bytes = malloc(n + 1);
  if (!bytes) {
    LLVMDisposeMemoryBuffer(mb);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory holding %zu bytes of code", n);
  }
  memcpy(bytes, LLVMGetBufferStart(mb), n);
  bytes[n] = 0;
  LLVMDisposeMemoryBuffer(mb);
  *out = bytes;
  *out_len = n;
  return KILN_OK;
}

kiln_status_t kc_print_module(kc_job_t *job, char **out_text) {
  char *text = LLVMPrintModuleToString(job->mod);
  *out_text = strdup(text);
  LLVMDisposeMessage(text);
  if (!*out_text) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory printing the IR");
  return KILN_OK;
}

/* The assembly listing is the object disassembled (disasm.c): a second code generation
 * with LLVMAssemblyFile would cost as much as the first. */
kiln_status_t kc_emit_object_and_assembly(kc_job_t *job, uint8_t **out_obj, size_t *out_len, char **out_asm) {
  uint8_t *obj = NULL;
  size_t obj_len = 0;
  KILN_RETURN_IF_ERROR(kc_emit(job, LLVMObjectFile, &obj, &obj_len));
  kc_mark(job, "codegen");
  kiln_status_t s = kc_disassemble(job, obj, obj_len, out_asm);
  if (s) {
    free(obj);
    return s;
  }
  *out_obj = obj;
  *out_len = obj_len;
  return KILN_OK;
}
