/* Target-independent preparation of a parsed module: find the kernels and their parameter
 * types, retarget the module (triple, data layout, target attributes), check the dialect's
 * builtins and what the module reaches outside itself (imports.c), apply fast-math. Lowering per target happens afterwards (lower_gpu.c,
 * lower_cpu.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <llvm-c/DebugInfo.h>

#include "compiler/internal.h"

static const char *const builtins[] = {
    "__kiln_group_id", "__kiln_local_id", "__kiln_group_size", "__kiln_num_groups",
    "__kiln_barrier",  "__kiln_dynamic_shared",
};

LLVMValueRef kc_get_function(LLVMModuleRef m, const char *name, LLVMTypeRef fn_type) {
  LLVMValueRef f = LLVMGetNamedFunction(m, name);
  return f ? f : LLVMAddFunction(m, name, fn_type);
}

size_t kc_collect_calls(LLVMModuleRef m, const char *name, LLVMValueRef *out, size_t cap) {
  LLVMValueRef f = LLVMGetNamedFunction(m, name);
  size_t n = 0;
  if (!f) return 0;
  for (LLVMUseRef u = LLVMGetFirstUse(f); u; u = LLVMGetNextUse(u)) {
    LLVMValueRef user = LLVMGetUser(u);
    if (LLVMIsACallInst(user) && LLVMGetCalledValue(user) == f && n < cap) out[n++] = user;
  }
  return n;
}

kiln_status_t kc_param_type(kc_job_t *job, LLVMTypeRef t, const char *kernel, uint32_t index,
                            kiln_arg_type_t *out) {
  switch (LLVMGetTypeKind(t)) {
  case LLVMPointerTypeKind: *out = KILN_ARG_PTR; return KILN_OK;
  case LLVMHalfTypeKind: *out = KILN_ARG_F16; return KILN_OK;
  case LLVMBFloatTypeKind: *out = KILN_ARG_BF16; return KILN_OK;
  case LLVMFloatTypeKind: *out = KILN_ARG_F32; return KILN_OK;
  case LLVMDoubleTypeKind: *out = KILN_ARG_F64; return KILN_OK;
  case LLVMIntegerTypeKind:
    switch (LLVMGetIntTypeWidth(t)) {
    case 8: *out = KILN_ARG_I8; return KILN_OK;
    case 16: *out = KILN_ARG_I16; return KILN_OK;
    case 32: *out = KILN_ARG_I32; return KILN_OK;
    case 64: *out = KILN_ARG_I64; return KILN_OK;
    default: break;
    }
    break;
  default: break;
  }
  char *ts = LLVMPrintTypeToString(t);
  kiln_status_t s = KC_COMPILE_ERROR(
      "kernel '%s' parameter %u has type %s: kernel parameters must be pointers, 8/16/32/64-bit "
      "integers, half, bfloat, float or double (pass aggregates through a pointer)",
      kernel, index, ts);
  LLVMDisposeMessage(ts);
  (void)job;
  return s;
}

static bool is_target_kernel(kc_job_t *job, LLVMValueRef f) {
  unsigned cc = LLVMGetFunctionCallConv(f);
  if (job->ir_kind == KC_IR_AMDGPU) return cc == LLVMAMDGPUKERNELCallConv;
  return cc == LLVMPTXKernelCallConv;
}

static kiln_status_t add_kernel(kc_job_t *job, LLVMValueRef f) {
  size_t len;
  const char *name = LLVMGetValueName2(f, &len);
  if (LLVMIsDeclaration(f))
    return KC_COMPILE_ERROR("kernel '%s' is declared but not defined", name);
  if (len == 0 || len >= sizeof(job->kernels[0].name))
    return KC_COMPILE_ERROR("a kernel needs a name of 1 to %zu bytes", sizeof(job->kernels[0].name) - 1);
  if (job->num_kernels == KC_MAX_KERNELS)
    return KC_COMPILE_ERROR("more than %d kernels in one module: split it", KC_MAX_KERNELS);
  LLVMTypeRef fty = LLVMGlobalGetValueType(f);
  if (LLVMGetTypeKind(LLVMGetReturnType(fty)) != LLVMVoidTypeKind)
    return KC_COMPILE_ERROR("kernel '%s' must return void (results go through pointer arguments)", name);
  if (LLVMIsFunctionVarArg(fty)) return KC_COMPILE_ERROR("kernel '%s' must not be variadic", name);
  unsigned np = LLVMCountParamTypes(fty);
  if (np > KC_MAX_PARAMS) return KC_COMPILE_ERROR("kernel '%s' has more than %d parameters", name, KC_MAX_PARAMS);
  kc_kernel_t *k = &job->kernels[job->num_kernels];
  memset(k, 0, sizeof(*k));
  memcpy(k->name, name, len);
  k->fn = f;
  k->num_params = np;
  LLVMTypeRef params[KC_MAX_PARAMS];
  LLVMGetParamTypes(fty, params);
  for (unsigned i = 0; i < np; i++) KILN_RETURN_IF_ERROR(kc_param_type(job, params[i], k->name, i, &k->params[i]));
  /* The names as written (%a, %n; "" for %0): the kernel table carries them to clients. They
   * are kept here because lowering replaces the function. */
  k->names = (uint32_t)job->param_names.len;
  for (unsigned i = 0; i < np; i++) {
    size_t nl;
    const char *pn = LLVMGetValueName2(LLVMGetParam(f, i), &nl);
    KILN_RETURN_IF_ERROR(kiln_buf_append(&job->param_names, pn, nl));
    KILN_RETURN_IF_ERROR(kiln_buf_append(&job->param_names, "", 1));
  }
  job->num_kernels++;
  return KILN_OK;
}

static kiln_status_t find_kernels(kc_job_t *job) {
  for (LLVMValueRef f = LLVMGetFirstFunction(job->mod); f; f = LLVMGetNextFunction(f)) {
    bool kernel;
    if (job->ir_kind == KC_IR_DIALECT) {
      const char *sec = LLVMGetSection(f);
      kernel = sec && strcmp(sec, KC_KERNEL_SECTION) == 0;
      if (kernel) LLVMSetSection(f, NULL);
    } else {
      kernel = is_target_kernel(job, f);
    }
    if (kernel) KILN_RETURN_IF_ERROR(add_kernel(job, f));
  }
  if (!job->num_kernels)
    return KC_COMPILE_ERROR("the module defines no kernels: %s",
                            job->ir_kind == KC_IR_DIALECT
                                ? "put each kernel in section \"kiln.kernel\""
                                : "target IR marks kernels with the amdgpu_kernel or ptx_kernel calling convention");
  return KILN_OK;
}

/* Host attributes a C compiler put on the functions: wrong or harmful for another target
 * (a stack protector would call __stack_chk_fail, which no GPU has). The second row names
 * functions that code generation would call (stack probes, -pg, -finstrument-functions,
 * -mfentry): a way to reach a host symbol without declaring it. */
void kc_strip_target_attributes(LLVMModuleRef m) {
  static const char *const strs[] = {"target-cpu", "target-features", "tune-cpu",
                                     "stack-protector-buffer-size", "min-legal-vector-width",
                                     "prefer-vector-width",
                                     "probe-stack", "stack-probe-size", "split-stack", "counting-function",
                                     "instrument-function-entry", "instrument-function-exit",
                                     "instrument-function-entry-inlined", "instrument-function-exit-inlined",
                                     "fentry-call"};
  static const char *const enums[] = {"ssp", "sspstrong", "sspreq", "uwtable"};
  unsigned enum_ids[4];
  for (size_t i = 0; i < 4; i++) enum_ids[i] = LLVMGetEnumAttributeKindForName(enums[i], strlen(enums[i]));
  for (LLVMValueRef f = LLVMGetFirstFunction(m); f; f = LLVMGetNextFunction(f)) {
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
      LLVMRemoveStringAttributeAtIndex(f, LLVMAttributeFunctionIndex, strs[i], (unsigned)strlen(strs[i]));
    for (size_t i = 0; i < 4; i++)
      if (enum_ids[i]) LLVMRemoveEnumAttributeAtIndex(f, LLVMAttributeFunctionIndex, enum_ids[i]);
  }
}

void kc_internalize(kc_job_t *job, bool (*is_entry)(LLVMValueRef fn)) {
  for (LLVMValueRef f = LLVMGetFirstFunction(job->mod); f; f = LLVMGetNextFunction(f)) {
    if (LLVMIsDeclaration(f) || is_entry(f)) continue;
    LLVMSetLinkage(f, LLVMInternalLinkage);
    LLVMSetVisibility(f, LLVMDefaultVisibility);
  }
  for (LLVMValueRef g = LLVMGetFirstGlobal(job->mod); g; g = LLVMGetNextGlobal(g)) {
    size_t len;
    const char *name = LLVMGetValueName2(g, &len);
    if (LLVMIsDeclaration(g) || strncmp(name, "__kiln_", 7) == 0) continue;
    LLVMSetLinkage(g, LLVMInternalLinkage);
    LLVMSetVisibility(g, LLVMDefaultVisibility);
  }
}

void kc_set_fast_math(LLVMModuleRef m) {
  static const char *const attrs[] = {"no-infs-fp-math", "no-nans-fp-math",
                                      "no-signed-zeros-fp-math", "approx-func-fp-math",
                                      "unsafe-fp-math"};
  LLVMContextRef ctx = LLVMGetModuleContext(m);
  for (LLVMValueRef f = LLVMGetFirstFunction(m); f; f = LLVMGetNextFunction(f)) {
    if (LLVMIsDeclaration(f)) continue;
    for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++)
      LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                              LLVMCreateStringAttribute(ctx, attrs[i], (unsigned)strlen(attrs[i]), "true", 4));
    for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(f); b; b = LLVMGetNextBasicBlock(b))
      for (LLVMValueRef i = LLVMGetFirstInstruction(b); i; i = LLVMGetNextInstruction(i))
        if (LLVMCanValueUseFastMathFlags(i)) LLVMSetFastMathFlags(i, LLVMFastMathAll);
  }
}

/* Functions named __kiln_* that are not builtins are typos; say so instead of leaving an
 * undefined symbol for the linker to complain about. */
static kiln_status_t check_builtins(kc_job_t *job) {
  for (LLVMValueRef f = LLVMGetFirstFunction(job->mod); f; f = LLVMGetNextFunction(f)) {
    size_t len;
    const char *name = LLVMGetValueName2(f, &len);
    if (strncmp(name, "__kiln_", 7) != 0) continue;
    bool known = false;
    for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++) known |= strcmp(builtins[i], name) == 0;
    if (!known)
      return KC_COMPILE_ERROR("unknown kiln builtin '%s': the builtins are __kiln_group_id, "
                              "__kiln_local_id, __kiln_group_size, __kiln_num_groups, "
                              "__kiln_barrier, __kiln_dynamic_shared (docs/kernels.md)",
                              name);
    if (!LLVMIsDeclaration(f)) return KC_COMPILE_ERROR("builtin '%s' must be declared, not defined", name);
  }
  return KILN_OK;
}

/* llvm.used / llvm.compiler.used (KILN_KERNEL's `used`) would pin the kernels' original
 * functions, which lowering replaces; kernels stay external entries without them. */
static void drop_used_lists(LLVMModuleRef m) {
  static const char *const names[] = {"llvm.used", "llvm.compiler.used"};
  for (size_t i = 0; i < 2; i++) {
    LLVMValueRef g = LLVMGetNamedGlobal(m, names[i]);
    if (g) LLVMDeleteGlobal(g);
  }
}

kiln_status_t kc_prepare(kc_job_t *job) {
  LLVMStripModuleDebugInfo(job->mod);
  KILN_RETURN_IF_ERROR(find_kernels(job));
  if (job->ir_kind == KC_IR_DIALECT) drop_used_lists(job->mod);
  if (job->ir_kind == KC_IR_DIALECT) KILN_RETURN_IF_ERROR(check_builtins(job));
  KILN_RETURN_IF_ERROR(kc_check_imports(job));
  LLVMSetTarget(job->mod, job->target.triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(job->tm);
  LLVMSetModuleDataLayout(job->mod, td);
  LLVMDisposeTargetData(td);
  kc_strip_target_attributes(job->mod);
  if (job->req->options.fast_math) kc_set_fast_math(job->mod);
  return KILN_OK;
}
