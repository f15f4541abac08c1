/* C math names and math intrinsics -> what each GPU target can run (docs/kernels.md, "Math").
 *
 * AMDGPU: ROCm's ocml (__ocml_exp_f32 ...), linked from the device libraries afterwards.
 * NVPTX: kiln's own functions (__kiln_math_exp_f32 ..., compiler/mathlib), no libdevice.
 * Both: functions with a direct machine equivalent become LLVM intrinsics.
 * cpu: libm provides the names and LLVM lowers the intrinsics to libm; kc_math_pure_cpu only
 * declares the names free of errno. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"

/* Math functions by base name; `ar` is the number of floating-point arguments. */
static const struct {
  const char *base;
  int ar;
  const char *intrinsic; /* when the machine does it directly, else NULL */
} funcs[] = {
    {"sqrt", 1, "llvm.sqrt"},    {"fabs", 1, "llvm.fabs"},        {"floor", 1, "llvm.floor"},
    {"ceil", 1, "llvm.ceil"},    {"trunc", 1, "llvm.trunc"},      {"round", 1, "llvm.round"},
    {"rint", 1, "llvm.rint"},    {"fmin", 2, "llvm.minnum"},      {"fmax", 2, "llvm.maxnum"},
    {"fma", 3, "llvm.fma"},      {"copysign", 2, "llvm.copysign"}, {"exp", 1, NULL},
    {"exp2", 1, NULL},           {"exp10", 1, NULL},              {"expm1", 1, NULL},
    {"log", 1, NULL},            {"log2", 1, NULL},               {"log10", 1, NULL},
    {"log1p", 1, NULL},          {"pow", 2, NULL},                {"sin", 1, NULL},
    {"cos", 1, NULL},            {"tan", 1, NULL},                {"asin", 1, NULL},
    {"acos", 1, NULL},           {"atan", 1, NULL},               {"atan2", 2, NULL},
    {"sinh", 1, NULL},           {"cosh", 1, NULL},               {"tanh", 1, NULL},
    {"asinh", 1, NULL},          {"acosh", 1, NULL},              {"atanh", 1, NULL},
    {"erf", 1, NULL},            {"erfc", 1, NULL},               {"cbrt", 1, NULL},
    {"hypot", 2, NULL},          {"fmod", 2, NULL},
};

/* Intrinsics that must become library calls: the GPU back ends either cannot select them
 * (llvm.sin.f64 on AMDGPU) or select fast approximations (sin.approx on NVPTX). */
static const struct {
  const char *base;
  int ar;
  bool f32_on_amdgpu; /* AMDGPU selects the f32 form accurately: keep it */
} lib_intrinsics[] = {
    {"exp", 1, true},   {"exp2", 1, true},  {"exp10", 1, false}, {"log", 1, true},
    {"log2", 1, true},  {"log10", 1, true}, {"pow", 2, false},   {"sin", 1, false},
    {"cos", 1, false},  {"tan", 1, false},  {"asin", 1, false},  {"acos", 1, false},
    {"atan", 1, false}, {"atan2", 2, false}, {"sinh", 1, false}, {"cosh", 1, false},
    {"tanh", 1, false},
};

static void library_name(kc_job_t *job, const char *base, bool f64, char *out, size_t cap) {
  if (job->target.kind == KILN_TARGET_AMDGPU)
    snprintf(out, cap, "__ocml_%s_%s", base, f64 ? "f64" : "f32");
  else
    snprintf(out, cap, "__kiln_math_%s_%s", base, f64 ? "f64" : "f32");
}

/* True if `fn_type` is T(T, ...) with `ar` parameters of the floating type T. */
static bool has_signature(LLVMTypeRef fn_type, LLVMTypeRef t, int ar) {
  if (LLVMGetReturnType(fn_type) != t || (int)LLVMCountParamTypes(fn_type) != ar) return false;
  LLVMTypeRef params[3];
  LLVMGetParamTypes(fn_type, params);
  for (int i = 0; i < ar; i++)
    if (params[i] != t) return false;
  return true;
}

int kc_math_name(LLVMContextRef ctx, const char *name, LLVMTypeRef fn_type) {
  size_t n = strlen(name);
  for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++) {
    size_t bl = strlen(funcs[i].base);
    bool f32 = n == bl + 1 && name[bl] == 'f';
    if (strncmp(name, funcs[i].base, bl) != 0 || (n != bl && !f32)) continue;
    LLVMTypeRef t = f32 ? LLVMFloatTypeInContext(ctx) : LLVMDoubleTypeInContext(ctx);
    return has_signature(fn_type, t, funcs[i].ar) ? 1 : -1;
  }
  return 0;
}

/* What LLVM's code generator may call for the math set beyond its own names: sin and cos of
 * one value become sincos, and the rounding and exponent intrinsics become these. */
static const char *const libm_extra[] = {"sincos", "ldexp", "frexp", "modf", "nearbyint", "roundeven",
                                         "lrint", "llrint", "lround", "llround", "fminimum_num",
                                         "fmaximum_num", "fminimum", "fmaximum"};

bool kc_math_libm_symbol(const char *name) {
  size_t n = strlen(name);
  char base[32];
  if (n == 0 || n >= sizeof(base)) return false;
  memcpy(base, name, n + 1);
  for (int pass = 0; pass < 2; pass++) { /* the double name, then the float one without its 'f' */
    for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++)
      if (strcmp(base, funcs[i].base) == 0) return true;
    for (size_t i = 0; i < sizeof(libm_extra) / sizeof(libm_extra[0]); i++)
      if (strcmp(base, libm_extra[i]) == 0) return true;
    if (base[n - 1] != 'f') return false;
    base[--n] = 0;
  }
  return false;
}

/* Points every use of `from` at `to` (a declaration with the same type) and deletes `from`. */
static void redirect(LLVMValueRef from, LLVMValueRef to) {
  if (from == to) return;
  LLVMReplaceAllUsesWith(from, to);
  LLVMDeleteFunction(from);
}

static LLVMValueRef library_function(kc_job_t *job, const char *base, bool f64, LLVMTypeRef fn_type) {
  char name[64];
  library_name(job, base, f64, name, sizeof(name));
  LLVMValueRef f = kc_get_function(job->mod, name, fn_type);
  return f;
}

static kiln_status_t map_c_names(kc_job_t *job) {
  LLVMTypeRef types[2] = {LLVMFloatTypeInContext(job->ctx), LLVMDoubleTypeInContext(job->ctx)};
  char name[32];
  for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++) {
    for (int f64 = 0; f64 < 2; f64++) {
      snprintf(name, sizeof(name), "%s%s", funcs[i].base, f64 ? "" : "f");
      LLVMValueRef f = LLVMGetNamedFunction(job->mod, name);
      if (!f || !LLVMIsDeclaration(f)) continue;
      LLVMTypeRef fty = LLVMGlobalGetValueType(f);
      if (!has_signature(fty, types[f64], funcs[i].ar))
        return KC_COMPILE_ERROR("'%s' is declared with a signature that is not the C library's", name);
      LLVMValueRef to;
      if (funcs[i].intrinsic) {
        unsigned id = LLVMLookupIntrinsicID(funcs[i].intrinsic, strlen(funcs[i].intrinsic));
        to = LLVMGetIntrinsicDeclaration(job->mod, id, &types[f64], 1);
      } else {
        to = library_function(job, funcs[i].base, f64, fty);
      }
      redirect(f, to);
    }
  }
  return KILN_OK;
}

static void map_intrinsics(kc_job_t *job) {
  char name[48];
  for (size_t i = 0; i < sizeof(lib_intrinsics) / sizeof(lib_intrinsics[0]); i++) {
    for (int f64 = 0; f64 < 2; f64++) {
      if (!f64 && job->target.kind == KILN_TARGET_AMDGPU && lib_intrinsics[i].f32_on_amdgpu) continue;
      snprintf(name, sizeof(name), "llvm.%s.%s", lib_intrinsics[i].base, f64 ? "f64" : "f32");
      LLVMValueRef f = LLVMGetNamedFunction(job->mod, name);
      if (!f) continue;
      redirect(f, library_function(job, lib_intrinsics[i].base, f64, LLVMGlobalGetValueType(f)));
    }
  }
}

/* Vector forms (llvm.sin.v2f64, from a host vectoriser) become one scalar call per lane,
 * which map_intrinsics then sends where the scalar form goes. */
static void scalarize_vector_calls(kc_job_t *job) {
  LLVMBuilderRef b = LLVMCreateBuilderInContext(job->ctx);
  LLVMTypeRef i32 = LLVMInt32TypeInContext(job->ctx);
  LLVMValueRef next_fn;
  for (LLVMValueRef f = LLVMGetFirstFunction(job->mod); f; f = next_fn) {
    next_fn = LLVMGetNextFunction(f);
    size_t len;
    const char *name = LLVMGetValueName2(f, &len);
    LLVMTypeRef fty = LLVMGlobalGetValueType(f);
    LLVMTypeRef vty = LLVMGetReturnType(fty);
    if (strncmp(name, "llvm.", 5) != 0 || LLVMGetTypeKind(vty) != LLVMVectorTypeKind) continue;
    LLVMTypeRef ety = LLVMGetElementType(vty);
    bool f64 = LLVMGetTypeKind(ety) == LLVMDoubleTypeKind;
    if (!f64 && LLVMGetTypeKind(ety) != LLVMFloatTypeKind) continue;
    size_t k = 0, nlib = sizeof(lib_intrinsics) / sizeof(lib_intrinsics[0]);
    char scalar[48];
    for (; k < nlib; k++) {
      size_t bl = strlen(lib_intrinsics[k].base);
      if (strncmp(name + 5, lib_intrinsics[k].base, bl) == 0 && name[5 + bl] == '.') break;
    }
    if (k == nlib) continue;
    snprintf(scalar, sizeof(scalar), "llvm.%s.%s", lib_intrinsics[k].base, f64 ? "f64" : "f32");
    unsigned id = LLVMLookupIntrinsicID(scalar, strlen(scalar));
    LLVMValueRef sf = LLVMGetIntrinsicDeclaration(job->mod, id, &ety, 1);
    unsigned lanes = LLVMGetVectorSize(vty), nargs = LLVMCountParamTypes(fty);
    for (LLVMUseRef u; (u = LLVMGetFirstUse(f));) {
      LLVMValueRef call = LLVMGetUser(u);
      if (!LLVMIsACallInst(call) || nargs > 2) break;
      LLVMPositionBuilderBefore(b, call);
      LLVMValueRef v = LLVMGetPoison(vty);
      for (unsigned lane = 0; lane < lanes; lane++) {
        LLVMValueRef idx = LLVMConstInt(i32, lane, 0), args[2];
        for (unsigned a = 0; a < nargs; a++) args[a] = LLVMBuildExtractElement(b, LLVMGetOperand(call, a), idx, "");
        LLVMValueRef r = LLVMBuildCall2(b, LLVMGlobalGetValueType(sf), sf, args, nargs, "");
        v = LLVMBuildInsertElement(b, v, r, idx, "");
      }
      LLVMReplaceAllUsesWith(call, v);
      LLVMInstructionEraseFromParent(call);
    }
    if (!LLVMGetFirstUse(f)) LLVMDeleteFunction(f);
  }
  LLVMDisposeBuilder(b);
}

/* kiln's math never reads or sets errno (GPUs have none), so on the cpu the C math names are
 * declared memory(none): LLVM may then treat them as pure, turn sqrtf into llvm.sqrt and
 * vectorise it in a work-item loop, and move or merge the calls like any arithmetic. */
/* cpu: tanhf (and its intrinsic) becomes kiln's branch-free __kiln_math_tanh_f32
 * (mathlib/cpu_math.c), which LLVM inlines and vectorises in a work-item loop. */
static kiln_status_t cpu_own_functions(kc_job_t *job) {
  LLVMTypeRef f32 = LLVMFloatTypeInContext(job->ctx);
  static const char *const names[] = {"tanhf", "llvm.tanh.f32"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    LLVMValueRef f = LLVMGetNamedFunction(job->mod, names[i]);
    if (!f || !LLVMIsDeclaration(f)) continue;
    LLVMTypeRef fty = LLVMGlobalGetValueType(f);
    if (!has_signature(fty, f32, 1))
      return KC_COMPILE_ERROR("'%s' is declared with a signature that is not the C library's", names[i]);
    redirect(f, kc_get_function(job->mod, "__kiln_math_tanh_f32", fty));
  }
  return kc_link_cpu_math(job);
}

void kc_math_pure_cpu(kc_job_t *job) {
  unsigned memory = LLVMGetEnumAttributeKindForName("memory", 6);
  LLVMAttributeRef none = LLVMCreateEnumAttribute(job->ctx, memory, 0);
  LLVMTypeRef types[2] = {LLVMFloatTypeInContext(job->ctx), LLVMDoubleTypeInContext(job->ctx)};
  for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++) {
    for (int f64 = 0; f64 < 2; f64++) {
      char name[32];
      snprintf(name, sizeof(name), "%s%s", funcs[i].base, f64 ? "" : "f");
      LLVMValueRef fn = LLVMGetNamedFunction(job->mod, name);
      if (!fn || !LLVMIsDeclaration(fn) || !has_signature(LLVMGlobalGetValueType(fn), types[f64], funcs[i].ar))
        continue;
      LLVMRemoveEnumAttributeAtIndex(fn, LLVMAttributeFunctionIndex, memory);
      LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, none);
    }
  }
}

kiln_status_t kc_map_math_cpu(kc_job_t *job) {
  kc_math_pure_cpu(job);
  return cpu_own_functions(job);
}

kiln_status_t kc_map_math(kc_job_t *job) {
  if (job->target.kind == KILN_TARGET_CPU) return KILN_OK;
  KILN_RETURN_IF_ERROR(map_c_names(job));
  scalarize_vector_calls(job);
  map_intrinsics(job);
  return KILN_OK;
}
