/* What a kernel may reach outside its own module, on every target: its own functions and
 * globals, kiln's builtins, kiln's math functions and an allow-list of LLVM intrinsics.
 * Nothing else: no other function or global of the host (popen, environ), no assembly, no
 * code that runs when the code object is loaded (constructors, ifunc resolvers, prologue
 * data), no libraries named by the module. kilnd runs kernels in its device workers, so on
 * the cpu these checks are what keeps a tenant's IR from calling into the C library.
 *
 * Two layers. kc_check_imports reads the IR as received (after parsing, before any
 * lowering), so the refusal names what the tenant wrote. kc_cpu_check_imports reads the
 * linked cpu shared object, which is what the dynamic loader will bind: every undefined
 * symbol must be math from libm, memcpy/memmove/memset or an arithmetic helper of the
 * compiler runtime, and nothing may run at load. The second layer catches what LLVM itself
 * adds in code generation and whatever the first one misses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"

#define AS_LOCAL 3

/* ---- intrinsics ---------------------------------------------------------------------- */

/* Target-independent intrinsics a kernel may call (names without "llvm." and without the
 * type suffix). Each one computes, moves memory the kernel can already reach, or is a hint;
 * none lowers to a call outside the math set, memcpy/memmove/memset and the compiler
 * runtime's arithmetic. Anything not listed (returnaddress, read_register, clear_cache,
 * init.trampoline, eh.*, va_*, coro.*, experimental.*, threadlocal.address, ...) is refused:
 * an allow-list, so intrinsics LLVM adds later are refused until someone looks at them. */
static const char *const allowed_intrinsics[] = {
    /* floating point; the transcendental ones are mapped to kiln's math per target */
    "sqrt", "fabs", "floor", "ceil", "trunc", "round", "roundeven", "rint", "nearbyint", "minnum", "maxnum",
    "minimum", "maximum", "minimumnum", "maximumnum", "fma", "fmuladd", "copysign", "canonicalize",
    "is.fpclass", "exp", "exp2", "exp10", "log", "log2", "log10", "pow", "sin", "cos", "tan", "asin", "acos",
    "atan", "atan2", "sinh", "cosh", "tanh", "fptosi.sat", "fptoui.sat",
    /* integers */
    "abs", "smax", "smin", "umax", "umin", "bswap", "bitreverse", "ctpop", "ctlz", "cttz", "fshl", "fshr",
    "sadd.with.overflow", "uadd.with.overflow", "ssub.with.overflow", "usub.with.overflow",
    "smul.with.overflow", "umul.with.overflow", "sadd.sat", "uadd.sat", "ssub.sat", "usub.sat", "sshl.sat",
    "ushl.sat", "scmp", "ucmp",
    /* memory the kernel reaches anyway */
    "memcpy", "memcpy.inline", "memmove", "memset", "memset.inline", "masked.load", "masked.store",
    "masked.gather", "masked.scatter", "masked.expandload", "masked.compressstore", "lifetime.start",
    "lifetime.end", "invariant.start", "invariant.end", "launder.invariant.group", "strip.invariant.group",
    "ptrmask", "prefetch", "objectsize", "stacksave", "stackrestore",
    /* vectors */
    "vector.reduce.add", "vector.reduce.mul", "vector.reduce.and", "vector.reduce.or", "vector.reduce.xor",
    "vector.reduce.smax", "vector.reduce.smin", "vector.reduce.umax", "vector.reduce.umin",
    "vector.reduce.fadd", "vector.reduce.fmul", "vector.reduce.fmax", "vector.reduce.fmin",
    "vector.reduce.fmaximum", "vector.reduce.fminimum", "vector.insert", "vector.extract", "vector.reverse",
    "vector.splice", "vector.splice.left", "vector.splice.right", "vector.interleave2", "vector.deinterleave2", "stepvector", "get.active.lane.mask",
    /* hints */
    "assume", "expect", "expect.with.probability", "is.constant", "experimental.noalias.scope.decl",
    "annotation", "var.annotation", "ptr.annotation", "sideeffect", "donothing", "fake.use", "trap",
};

/* By intrinsic id: the name of an overloaded intrinsic carries its types
 * (llvm.memset.p0.i64), and a prefix test would let llvm.memset.element.unordered.atomic
 * pass as llvm.memset. */
static bool intrinsic_allowed(unsigned id) {
  char name[64];
  for (size_t i = 0; i < sizeof(allowed_intrinsics) / sizeof(allowed_intrinsics[0]); i++) {
    int n = snprintf(name, sizeof(name), "llvm.%s", allowed_intrinsics[i]);
    if (LLVMLookupIntrinsicID(name, (size_t)n) == id) return true;
  }
  return false;
}

/* Prefixes of the target-specific intrinsic families LLVM has. */
static const char *const archs[] = {"x86", "aarch64", "arm", "amdgcn", "r600", "nvvm", "ppc", "riscv", "wasm",
                                    "hexagon", "mips", "s390", "loongarch", "spv", "dx", "bpf", "ve"};

static kiln_status_t check_intrinsic(kc_job_t *job, LLVMValueRef f) {
  size_t len;
  const char *name = LLVMGetValueName2(f, &len);
  if (intrinsic_allowed(LLVMGetIntrinsicID(f))) return KILN_OK;
  const char *b = name + 5; /* after "llvm." */
  const char *own = job->target.kind == KILN_TARGET_AMDGPU ? "amdgcn"
                    : job->target.kind == KILN_TARGET_NVPTX ? "nvvm"
                                                            : NULL;
  char host[32] = ""; /* the host's family: the triple's first component, x86_64 -> x86 */
  if (!own) {
    size_t n = strcspn(job->target.triple, "-");
    snprintf(host, sizeof(host), "%.*s", (int)n, job->target.triple);
    if (strcmp(host, "x86_64") == 0) snprintf(host, sizeof(host), "x86");
  }
  for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++) {
    size_t an = strlen(archs[i]);
    if (strncmp(b, archs[i], an) != 0 || b[an] != '.') continue;
    /* A GPU target's own family is what target IR (and the dialect for that target) is
     * for; GPU code reaches no host service through it. The host's own family is refused:
     * it holds instructions that reach the system (x86: int, wrfsbase, rdpid, ...). */
    if (own && strcmp(archs[i], own) == 0) return KILN_OK;
    if (!own && strcmp(archs[i], host) == 0)
      return KC_COMPILE_ERROR("the IR calls %s, an intrinsic of the host's instruction set: kernels on cpu use "
                              "portable IR only (LLVM vectorises it for the host)",
                              name);
    return KC_COMPILE_ERROR("the IR calls %s, an intrinsic of another architecture than %s: use target IR "
                            "for that target, or portable operations in the dialect",
                            name, job->target.id);
  }
  return KC_COMPILE_ERROR("the IR calls %s, an intrinsic that kernels may not use (it reaches outside the "
                          "kernel or is not supported on every target): docs/kernels.md lists the intrinsics "
                          "kiln accepts",
                          name);
}

/* ---- functions and globals declared but not defined -------------------------------- */

static bool is_builtin(const char *name) {
  static const char *const builtins[] = {"__kiln_group_id",   "__kiln_local_id", "__kiln_group_size",
                                         "__kiln_num_groups", "__kiln_barrier",  "__kiln_dynamic_shared"};
  for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++)
    if (strcmp(builtins[i], name) == 0) return true;
  return false;
}

/* "function 'f' calls 'x'", "function 'f' takes the address of 'x'", or "a global's initial
 * value takes the address of 'x'": where the first use of a declaration is. */
static void describe_use(LLVMValueRef decl, char *out, size_t cap) {
  size_t len;
  const char *name = LLVMGetValueName2(decl, &len);
  LLVMValueRef user = LLVMGetUser(LLVMGetFirstUse(decl));
  bool call = (LLVMIsACallInst(user) || LLVMIsAInvokeInst(user)) && LLVMGetCalledValue(user) == decl;
  LLVMValueRef fn = LLVMIsAInstruction(user) ? LLVMGetBasicBlockParent(LLVMGetInstructionParent(user))
                    : LLVMIsAFunction(user)   ? user
                                              : NULL;
  if (fn)
    snprintf(out, cap, "function '%.100s' %s '%.100s'", LLVMGetValueName2(fn, &len),
             call ? "calls" : LLVMIsAGlobalVariable(decl) ? "uses" : "takes the address of", name);
  else
    snprintf(out, cap, "a global's initial value takes the address of '%.100s'", name);
}

static kiln_status_t refuse_declaration(kc_job_t *job, LLVMValueRef f) {
  char what[256];
  describe_use(f, what, sizeof(what));
  return KC_COMPILE_ERROR("%s, which is not defined in the module: kernels can call only their own functions, "
                          "kiln builtins (__kiln_*) and the math functions of docs/kernels.md (nothing of the "
                          "host's libraries on %s)",
                          what, job->target.id);
}

static kiln_status_t check_declaration(kc_job_t *job, LLVMValueRef f) {
  if (!LLVMGetFirstUse(f)) return KILN_OK; /* never referenced: emits nothing */
  if (LLVMGetIntrinsicID(f)) return check_intrinsic(job, f);
  size_t len;
  const char *name = LLVMGetValueName2(f, &len);
  if (job->ir_kind == KC_IR_DIALECT && is_builtin(name)) return KILN_OK;
  int math = kc_math_name(job->ctx, name, LLVMGlobalGetValueType(f));
  if (math < 0) return KC_COMPILE_ERROR("'%s' is declared with a signature that is not the C library's", name);
  if (math > 0) return KILN_OK;
  /* ROCm's math library, which kiln maps the math names to anyway. */
  if (job->target.kind == KILN_TARGET_AMDGPU && strncmp(name, "__ocml_", 7) == 0) return KILN_OK;
  return refuse_declaration(job, f);
}

/* Function-level things that put code or references where the checks below cannot see
 * them: an EH personality routine (a host function the unwinder calls), prefix and
 * prologue data (bytes placed in front of or into the function's machine code), a garbage
 * collector strategy (its lowering references runtime symbols). */
static kiln_status_t check_function_extras(LLVMValueRef f) {
  size_t len;
  const char *name = LLVMGetValueName2(f, &len);
  bool personality = LLVMHasPersonalityFn(f), prefix, prologue;
#if LLVM_VERSION_MAJOR >= 20
  prefix = LLVMHasPrefixData(f);
  prologue = LLVMHasPrologueData(f);
#else
  /* personality, prefix and prologue are the function's three hung-off operands; unset ones
   * hold a null pointer constant. */
  int n = LLVMGetNumOperands(f);
  prefix = n > 1 && !LLVMIsNull(LLVMGetOperand(f, 1));
  prologue = n > 2 && !LLVMIsNull(LLVMGetOperand(f, 2));
#endif
  if (personality)
    return KC_COMPILE_ERROR("function '%s' has an exception-handling personality: kernels have no exceptions "
                            "(compile C++ with -fno-exceptions)",
                            name);
  if (prefix || prologue)
    return KC_COMPILE_ERROR("function '%s' has %s data, which places bytes into its machine code: kiln does not "
                            "accept it",
                            name, prefix ? "prefix" : "prologue");
  const char *gc = LLVMGetGC(f);
  if (gc && gc[0]) return KC_COMPILE_ERROR("function '%s' names a garbage collector (\"%s\"): kernels have none", name, gc);
  return KILN_OK;
}

static kiln_status_t check_function_body(LLVMValueRef f) {
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb))
    for (LLVMValueRef i = LLVMGetFirstInstruction(bb); i; i = LLVMGetNextInstruction(i)) {
      if (!LLVMIsACallInst(i) && !LLVMIsAInvokeInst(i) && !LLVMIsACallBrInst(i)) continue;
      if (LLVMIsAInlineAsm(LLVMGetCalledValue(i))) {
        size_t len;
        return KC_COMPILE_ERROR("function '%s' contains inline assembly: kiln compiles IR only, on every "
                                "target (write the operation in IR or C, or use an intrinsic that "
                                "docs/kernels.md lists)",
                                LLVMGetValueName2(f, &len));
      }
    }
  return KILN_OK;
}

static kiln_status_t check_functions(kc_job_t *job) {
  for (LLVMValueRef f = LLVMGetFirstFunction(job->mod); f; f = LLVMGetNextFunction(f)) {
    size_t len;
    const char *name = LLVMGetValueName2(f, &len);
    KILN_RETURN_IF_ERROR(check_function_extras(f));
    if (LLVMIsDeclaration(f)) {
      KILN_RETURN_IF_ERROR(check_declaration(job, f));
      continue;
    }
    /* find_kernels has already taken the dialect's "kiln.kernel" section off. */
    const char *sec = LLVMGetSection(f);
    if (sec && sec[0])
      return KC_COMPILE_ERROR("function '%s' is placed in section \"%s\": only kernels name a section "
                              "(\"" KC_KERNEL_SECTION "\"), and only in the dialect",
                              name, sec);
    /* "A definition exists elsewhere": it does not, so this body is the definition (C99's
     * plain `inline` gives this linkage; left alone, a call the optimiser does not inline
     * would become a call to a host symbol of the same name). */
    if (LLVMGetLinkage(f) == LLVMAvailableExternallyLinkage) LLVMSetLinkage(f, LLVMInternalLinkage);
    KILN_RETURN_IF_ERROR(check_function_body(f));
  }
  return KILN_OK;
}

/* Globals named llvm.* that the module may carry: the "keep this" lists (the dialect drops
 * them) and clang's annotation table. llvm.global_ctors/dtors would run code at load. */
static bool special_global_allowed(const char *name) {
  return strcmp(name, "llvm.used") == 0 || strcmp(name, "llvm.compiler.used") == 0 ||
         strcmp(name, "llvm.global.annotations") == 0;
}

static kiln_status_t check_globals(kc_job_t *job) {
  for (LLVMValueRef g = LLVMGetFirstGlobal(job->mod); g; g = LLVMGetNextGlobal(g)) {
    size_t len;
    const char *name = LLVMGetValueName2(g, &len);
    if (strncmp(name, "llvm.", 5) == 0) {
      if (special_global_allowed(name)) continue;
      return KC_COMPILE_ERROR("the module defines %s: kernels have no constructors, destructors or other "
                              "special globals",
                              name);
    }
    if (LLVMIsThreadLocal(g))
      return KC_COMPILE_ERROR("global '%s' is thread-local: kernels have work-group memory (address space 3) "
                              "and private variables, not threads' globals",
                              name);
    const char *sec = LLVMGetSection(g);
    if (sec && sec[0])
      return KC_COMPILE_ERROR("global '%s' is placed in section \"%s\": kernels' globals cannot choose a "
                              "section (.init_array would run code at load)",
                              name, sec);
    if (LLVMGetLinkage(g) == LLVMAvailableExternallyLinkage) LLVMSetLinkage(g, LLVMInternalLinkage);
    /* A declared work-group array is dynamic shared memory in GPU target IR; the dialect's
     * lowering says what to use instead. Neither is a host symbol. */
    if (!LLVMIsDeclaration(g) || !LLVMGetFirstUse(g) || LLVMGetPointerAddressSpace(LLVMTypeOf(g)) == AS_LOCAL)
      continue;
    char what[256];
    describe_use(g, what, sizeof(what));
    return KC_COMPILE_ERROR("%s, a global variable the module does not define: kernels can use only their own "
                            "globals (nothing of the host's on %s)",
                            what, job->target.id);
  }
  return KILN_OK;
}

kiln_status_t kc_check_imports(kc_job_t *job) {
  size_t len = 0;
  const char *asm_text = LLVMGetModuleInlineAsm(job->mod, &len);
  for (size_t i = 0; asm_text && i < len; i++)
    if (asm_text[i] != ' ' && asm_text[i] != '\t' && asm_text[i] != '\n')
      return KC_COMPILE_ERROR("the module has module-level assembly (module asm): kiln compiles IR only, on "
                              "every target");
  static const char *const link_lists[] = {"llvm.dependent-libraries", "llvm.linker.options"};
  for (size_t i = 0; i < 2; i++)
    if (LLVMGetNamedMetadata(job->mod, link_lists[i], strlen(link_lists[i])))
      return KC_COMPILE_ERROR("the module names libraries to link (%s): kernels link nothing", link_lists[i]);
  LLVMValueRef a = LLVMGetFirstGlobalAlias(job->mod);
  if (a) {
    return KC_COMPILE_ERROR("the module defines alias '%s': kiln does not accept aliases (call the function "
                            "itself)",
                            LLVMGetValueName2(a, &len));
  }
  LLVMValueRef ifn = LLVMGetFirstGlobalIFunc(job->mod);
  if (ifn)
    return KC_COMPILE_ERROR("the module defines ifunc '%s': its resolver would run when the code is loaded; "
                            "kiln does not accept ifuncs",
                            LLVMGetValueName2(ifn, &len));
  KILN_RETURN_IF_ERROR(check_globals(job));
  return check_functions(job);
}

/* ---- the linked cpu shared object --------------------------------------------------- */

/* libc's memory functions (llvm.memcpy and friends become calls to them) and the compiler
 * runtime's arithmetic helpers (128-bit integers, half and bfloat conversions, powi). */
static const char *const runtime_imports[] = {
    "memcpy",       "memmove",      "memset",       "__divti3",     "__modti3",     "__udivti3",
    "__umodti3",    "__multi3",     "__muloti4",    "__mulodi4",    "__divmodti4",  "__udivmodti4",
    "__ashlti3",    "__ashrti3",    "__lshrti3",    "__clzti2",     "__ctzti2",     "__popcountti2",
    "__powisf2",    "__powidf2",    "__extendhfsf2", "__extendhfdf2", "__truncsfhf2", "__truncdfhf2",
    "__truncsfbf2", "__truncdfbf2", "__extendbfsf2", "__gnu_h2f_ieee", "__gnu_f2h_ieee", "__fixsfti",
    "__fixdfti",    "__fixunssfti", "__fixunsdfti", "__floattisf",  "__floattidf",  "__floatuntisf",
    "__floatuntidf", "__fixhfti",   "__fixunshfti", "__floattihf",  "__floatuntihf",
};

static bool import_allowed(const char *name) {
  if (kc_math_libm_symbol(name)) return true;
  for (size_t i = 0; i < sizeof(runtime_imports) / sizeof(runtime_imports[0]); i++)
    if (strcmp(runtime_imports[i], name) == 0) return true;
  return false;
}

typedef struct so_check {
  char bad[160];
} so_check_t;

static bool check_undefined(void *ud, const char *name, uint8_t info) {
  so_check_t *c = ud;
  (void)info;
  if (!name[0] || import_allowed(name)) return false;
  snprintf(c->bad, sizeof(c->bad), "needs '%.100s' from the host's libraries", name);
  return true;
}

#define STT_GNU_IFUNC 10

static bool check_defined(void *ud, const char *name, uint8_t info) {
  so_check_t *c = ud;
  if ((info & 0xf) != STT_GNU_IFUNC) return false;
  snprintf(c->bad, sizeof(c->bad), "has an ifunc '%.100s', whose resolver runs at load", name);
  return true;
}

static bool check_symtab(void *ud, const char *name, uint8_t info, uint16_t shndx, uint64_t value) {
  (void)shndx, (void)value;
  return check_defined(ud, name, info);
}

/* Dynamic tags lld writes for kiln's objects; anything else (DT_INIT*, DT_FINI*,
 * DT_PREINIT_ARRAY, DT_RPATH/RUNPATH, DT_AUDIT, filters, DT_TEXTREL ...) is refused. */
static bool check_dynamic(void *ud, uint64_t tag, uint64_t value, const char *str) {
  so_check_t *c = ud;
  (void)value;
  static const uint64_t ok[] = {0,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 20, 23, 24, 30, 35, 36, 37,
                                0x6ffffef5, 0x6ffffff0, 0x6ffffff9, 0x6ffffffa, 0x6ffffffb, 0x6ffffffc,
                                0x6ffffffd, 0x6ffffffe, 0x6fffffff};
  if (tag == 1 /* DT_NEEDED */) {
    if (str && (strcmp(str, "libm.so.6") == 0 || strcmp(str, "libc.so.6") == 0)) return false;
    snprintf(c->bad, sizeof(c->bad), "needs library '%.100s'", str ? str : "?");
    return true;
  }
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
    if (ok[i] == tag) return false;
  const char *load = tag == 12 ? "DT_INIT" : tag == 13 ? "DT_FINI" : tag == 25 ? "DT_INIT_ARRAY"
                     : tag == 26 ? "DT_FINI_ARRAY" : tag == 32 ? "DT_PREINIT_ARRAY" : NULL;
  if (load) {
    snprintf(c->bad, sizeof(c->bad), "has %s, which runs code at load", load);
    return true;
  }
  snprintf(c->bad, sizeof(c->bad), "has dynamic tag 0x%llx, which kiln's objects never carry",
           (unsigned long long)tag);
  return true;
}

static bool check_section(void *ud, const kc_elf_section_t *s) {
  so_check_t *c = ud;
  static const char *const names[] = {".init", ".fini", ".init_array", ".fini_array", ".preinit_array",
                                      ".ctors", ".dtors"};
  bool bad = s->type == 14 || s->type == 15 || s->type == 16; /* SHT_INIT_ARRAY, FINI, PREINIT */
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) bad |= strcmp(s->name, names[i]) == 0;
  if (bad) snprintf(c->bad, sizeof(c->bad), "has section %.60s, which runs code at load", s->name);
  return bad;
}

kiln_status_t kc_cpu_check_imports(const uint8_t *so, size_t len) {
  kc_elf_t e;
  KILN_RETURN_IF_ERROR(kc_elf_open(so, len, &e));
  so_check_t c = {{0}};
  kc_elf_undefined(&e, check_undefined, &c);
  if (!c.bad[0]) kc_elf_dynsyms(&e, check_defined, &c);
  if (!c.bad[0]) kc_elf_symbols(&e, check_symtab, &c);
  if (!c.bad[0]) kc_elf_dynamic(&e, check_dynamic, &c);
  if (!c.bad[0]) kc_elf_sections(&e, check_section, &c);
  if (c.bad[0])
    return KC_COMPILE_ERROR("the cpu code object %s: kernels may import only math from libm, memcpy, memmove, "
                            "memset and the compiler runtime's arithmetic, and run nothing at load",
                            c.bad);
  return KILN_OK;
}
