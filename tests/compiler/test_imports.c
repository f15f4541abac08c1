/* What a kernel may reach outside its module (compiler/imports.c). Every way of naming a
 * host symbol, assembly or code that runs at load is E_COMPILE naming it, on every target;
 * what kernels legitimately use still compiles everywhere: every intrinsic of the
 * allow-list, and the C path (clang -emit-llvm with kernel.h) for every documented math
 * function at several flag settings, run on the cpu against libm. The second layer (the
 * linked cpu shared object) is checked on shared objects built here with clang. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler/internal.h"
#include "tests/compiler/harness.h"
#include "tests/compiler/te_json.h"

static const char *const all_targets[] = {"cpu", "gfx942", "sm_90"};

/* One compiler for a whole test: target machines are reused, which keeps the intrinsic
 * sweep below to a few seconds. */
static kiln_compiler_t *compiler;
static void create(void) { cr_assert(!kiln_compiler_create(NULL, &compiler)); }
static void destroy(void) { kiln_compiler_destroy(compiler); }
TestSuite(imports, .init = create, .fini = destroy, .timeout = 300);

static kiln_status_t compile(const void *payload, size_t len, const char *target, kiln_artifact_t *out) {
  kiln_compile_request_t req = {.payload = payload, .payload_size = len, .kind = KILN_PAYLOAD_AUTO,
                                .target = target, .options = kiln_compile_options_default()};
  kiln_artifact_t a;
  kiln_status_t s = kiln_compiler_compile(compiler, &req, &a);
  if (!s && out) *out = a;
  else if (!s) kiln_artifact_deinit(&a);
  return s;
}

/* E_COMPILE on every target with `needle` in the message. */
static void refused(const char *what, const char *ir, const char *needle) {
  for (size_t t = 0; t < sizeof(all_targets) / sizeof(all_targets[0]); t++) {
    kiln_status_t s = compile(ir, strlen(ir), all_targets[t], NULL);
    cr_assert(s, "%s: compiled for %s, expected E_COMPILE", what, all_targets[t]);
    cr_assert_eq(kiln_status_code(s), KILN_E_COMPILE, "%s on %s: %s: %s", what, all_targets[t],
                 kiln_code_name(kiln_status_code(s)), kiln_status_message(s));
    cr_assert(strstr(kiln_status_message(s), needle), "%s on %s: message lacks '%s': %s", what, all_targets[t],
              needle, kiln_status_message(s));
    kiln_status_free(s);
  }
}

#define KERNEL_HEAD "define void @k(ptr %p, ptr %q, i64 %n) section \"kiln.kernel\" {\n"

/* ---- refused: each way to reach outside the module ---------------------------------- */

Test(imports, calls_to_host_functions) {
  refused("direct call",
          "declare ptr @popen(ptr, ptr)\n" KERNEL_HEAD
          "  %f = call ptr @popen(ptr %p, ptr %q)\n  store ptr %f, ptr %q\n  ret void\n}\n",
          "function 'k' calls 'popen', which is not defined in the module");
  /* The callee declared with one type and called with another (what a bitcast of the
   * function was before opaque pointers; old bitcode is upgraded to this). */
  refused("call with another signature",
          "declare void @system()\n" KERNEL_HEAD "  %r = call i32 @system(ptr %p)\n  ret void\n}\n",
          "calls 'system'");
  refused("call from a helper",
          "declare i32 @system(ptr)\n"
          "define internal i32 @helper(ptr %c) noinline {\n  %r = call i32 @system(ptr %c)\n  ret i32 %r\n}\n"
          KERNEL_HEAD "  %r = call i32 @helper(ptr %p)\n  store i32 %r, ptr %q\n  ret void\n}\n",
          "function 'helper' calls 'system'");
  refused("extern_weak",
          "declare extern_weak void @abort()\n" KERNEL_HEAD
          "  %c = icmp ne ptr @abort, null\n  br i1 %c, label %y, label %z\ny:\n  call void @abort()\n  br label %z\n"
          "z:\n  ret void\n}\n",
          "'abort'");
  refused("a libc function through a math-looking name is still refused",
          "declare ptr @getenv(ptr)\n" KERNEL_HEAD "  %e = call ptr @getenv(ptr %p)\n  store ptr %e, ptr %q\n"
          "  ret void\n}\n",
          "calls 'getenv'");
}

Test(imports, host_function_addresses) {
  refused("function pointer stored to memory",
          "declare i32 @system(ptr)\n" KERNEL_HEAD "  store ptr @system, ptr %q\n  ret void\n}\n",
          "function 'k' takes the address of 'system'");
  refused("function pointer called indirectly",
          "declare i32 @system(ptr)\n" KERNEL_HEAD
          "  store volatile ptr @system, ptr %q\n  %f = load volatile ptr, ptr %q\n  %r = call i32 %f(ptr %p)\n"
          "  ret void\n}\n",
          "'system'");
  refused("address in a global's initial value",
          "declare i32 @system(ptr)\n@table = internal global [2 x ptr] [ptr null, ptr @system]\n" KERNEL_HEAD
          "  %f = load volatile ptr, ptr getelementptr ([2 x ptr], ptr @table, i64 0, i64 1)\n"
          "  %r = call i32 %f(ptr %p)\n  ret void\n}\n",
          "a global's initial value takes the address of 'system'");
  refused("address in a constant expression",
          "declare i32 @system(ptr)\n" KERNEL_HEAD "  store i64 ptrtoint (ptr @system to i64), ptr %q\n  ret void\n}\n",
          "takes the address of 'system'");
}

Test(imports, host_globals) {
  refused("environ", "@environ = external global ptr\n" KERNEL_HEAD
          "  %e = load ptr, ptr @environ\n  store ptr %e, ptr %q\n  ret void\n}\n",
          "function 'k' uses 'environ', a global variable the module does not define");
  refused("extern_weak global", "@__libc_stack_end = extern_weak global ptr\n" KERNEL_HEAD
          "  store ptr @__libc_stack_end, ptr %q\n  ret void\n}\n",
          "'__libc_stack_end'");
  refused("thread_local", "@t = internal thread_local global i32 0\n" KERNEL_HEAD
          "  %a = call ptr @llvm.threadlocal.address.p0(ptr @t)\n  store i32 1, ptr %a\n  ret void\n}\n"
          "declare ptr @llvm.threadlocal.address.p0(ptr)\n",
          "thread-local");
}

Test(imports, aliases_and_ifuncs) {
  refused("alias", "define internal void @impl(ptr %q) { store i32 1, ptr %q\n ret void }\n"
          "@a = alias void (ptr), ptr @impl\n" KERNEL_HEAD "  call void @a(ptr %q)\n  ret void\n}\n",
          "alias 'a'");
  refused("ifunc", "define internal ptr @resolve() { ret ptr null }\n@f = ifunc void (), ptr @resolve\n" KERNEL_HEAD
          "  call void @f()\n  ret void\n}\n",
          "ifunc 'f'");
}

Test(imports, assembly) {
  /* Before this check, inline asm on cpu ended the compile worker (LLVM's fatal error: no
   * asm parser was initialised). */
  refused("inline asm syscall", KERNEL_HEAD
          "  %r = call i64 asm sideeffect \"mov $$39, %rax; syscall\", \"={rax},~{rcx},~{r11}\"()\n"
          "  store i64 %r, ptr %q\n  ret void\n}\n",
          "function 'k' contains inline assembly");
  refused("inline asm in a helper", "define internal void @h() { call void asm sideeffect \"nop\", \"\"()\n ret void }\n"
          KERNEL_HEAD "  call void @h()\n  ret void\n}\n",
          "function 'h' contains inline assembly");
  refused("asm goto", KERNEL_HEAD "  callbr void asm \"\", \"!i\"() to label %a [label %b]\na:\n  ret void\nb:\n  ret void\n}\n",
          "inline assembly");
  refused("module asm", "module asm \".globl evil\"\nmodule asm \"evil: ret\"\n" KERNEL_HEAD "  ret void\n}\n",
          "module-level assembly");
}

Test(imports, code_at_load) {
  refused("constructor", "@llvm.global_ctors = appending global [1 x { i32, ptr, ptr }] "
          "[{ i32, ptr, ptr } { i32 65535, ptr @init, ptr null }]\n"
          "define internal void @init() { ret void }\n" KERNEL_HEAD "  ret void\n}\n",
          "llvm.global_ctors");
  refused("destructor", "@llvm.global_dtors = appending global [1 x { i32, ptr, ptr }] "
          "[{ i32, ptr, ptr } { i32 65535, ptr @fini, ptr null }]\n"
          "define internal void @fini() { ret void }\n" KERNEL_HEAD "  ret void\n}\n",
          "llvm.global_dtors");
  refused(".init_array", "define internal void @init() { ret void }\n"
          "@ia = internal global ptr @init, section \".init_array\"\n" KERNEL_HEAD
          "  %v = load volatile ptr, ptr @ia\n  store ptr %v, ptr %q\n  ret void\n}\n",
          "section \".init_array\"");
  refused("function section", "define internal void @h() section \".init\" { ret void }\n" KERNEL_HEAD
          "  call void @h()\n  ret void\n}\n",
          "function 'h' is placed in section \".init\"");
  /* Prologue data is machine code placed at the function's entry: 0f 05 is `syscall`. */
  refused("prologue data", "define void @k(ptr %p) section \"kiln.kernel\" prologue <{ i8, i8 }> <{ i8 15, i8 5 }> {\n"
          "  ret void\n}\n",
          "prologue data");
  refused("prefix data", "define void @k(ptr %p) section \"kiln.kernel\" prefix i32 123 {\n  ret void\n}\n",
          "prefix data");
  refused("personality", "declare i32 @__gxx_personality_v0(...)\n"
          "define void @k(ptr %p) section \"kiln.kernel\" personality ptr @__gxx_personality_v0 {\n  ret void\n}\n",
          "personality");
  refused("gc", "define void @k(ptr %p) section \"kiln.kernel\" gc \"shadow-stack\" {\n  ret void\n}\n",
          "garbage collector");
  refused("dependent libraries", "!llvm.dependent-libraries = !{!0}\n!0 = !{!\"z\"}\n" KERNEL_HEAD "  ret void\n}\n",
          "llvm.dependent-libraries");
  refused("linker options", "!llvm.linker.options = !{!0}\n!0 = !{!\"-lz\"}\n" KERNEL_HEAD "  ret void\n}\n",
          "llvm.linker.options");
}

Test(imports, intrinsics_outside_the_allow_list) {
  static const char *const irs[][2] = {
      {"declare ptr @llvm.returnaddress(i32)\n" KERNEL_HEAD
       "  %r = call ptr @llvm.returnaddress(i32 0)\n  store ptr %r, ptr %q\n  ret void\n}\n",
       "llvm.returnaddress"},
      {"declare ptr @llvm.frameaddress.p0(i32)\n" KERNEL_HEAD
       "  %r = call ptr @llvm.frameaddress.p0(i32 0)\n  store ptr %r, ptr %q\n  ret void\n}\n",
       "llvm.frameaddress"},
      {"declare i64 @llvm.read_register.i64(metadata)\n" KERNEL_HEAD
       "  %r = call i64 @llvm.read_register.i64(metadata !0)\n  store i64 %r, ptr %q\n  ret void\n}\n!0 = !{!\"rsp\"}\n",
       "llvm.read_register"},
      {"declare void @llvm.clear_cache(ptr, ptr)\n" KERNEL_HEAD
       "  call void @llvm.clear_cache(ptr %p, ptr %q)\n  ret void\n}\n",
       "llvm.clear_cache"},
      {"declare void @llvm.init.trampoline(ptr, ptr, ptr)\n"
       "define internal void @f(ptr nest %x) { ret void }\n" KERNEL_HEAD
       "  call void @llvm.init.trampoline(ptr %p, ptr @f, ptr %q)\n  ret void\n}\n",
       "llvm.init.trampoline"},
      /* a memset that lowers to __llvm_memset_element_unordered_atomic_4, not memset */
      {"declare void @llvm.memset.element.unordered.atomic.p0.i64(ptr, i8, i64, i32 immarg)\n" KERNEL_HEAD
       "  call void @llvm.memset.element.unordered.atomic.p0.i64(ptr align 4 %q, i8 0, i64 16, i32 4)\n"
       "  ret void\n}\n",
       "llvm.memset.element.unordered.atomic"},
      {"declare void @llvm.va_start.p0(ptr)\n"
       "define internal void @h(...) {\n  %l = alloca ptr\n  call void @llvm.va_start.p0(ptr %l)\n  ret void\n}\n"
       KERNEL_HEAD "  call void (...) @h(i32 1)\n  ret void\n}\n",
       "llvm.va_start"},
  };
  for (size_t i = 0; i < sizeof(irs) / sizeof(irs[0]); i++) {
    char needle[128];
    snprintf(needle, sizeof(needle), "the IR calls %s", irs[i][1]);
    refused(irs[i][1], irs[i][0], needle);
  }
  /* The host's own instruction-set intrinsics (x86 has `int`, wrfsbase, rdpid ...) are
   * refused on cpu; on the GPU targets they are another architecture's. */
  static const char x86[] = "declare i64 @llvm.x86.rdtsc()\n" KERNEL_HEAD
                            "  %t = call i64 @llvm.x86.rdtsc()\n  store i64 %t, ptr %q\n  ret void\n}\n";
  kiln_status_t s = compile(x86, strlen(x86), "cpu", NULL);
  cr_assert(s && kiln_status_code(s) == KILN_E_COMPILE);
#if defined(__x86_64__)
  cr_assert(strstr(kiln_status_message(s), "intrinsic of the host's instruction set"), "%s", kiln_status_message(s));
#endif
  kiln_status_free(s);
  s = compile(x86, strlen(x86), "gfx942", NULL);
  cr_assert(s && strstr(kiln_status_message(s), "another architecture"), "%s", s ? kiln_status_message(s) : "");
  kiln_status_free(s);
}

Test(imports, host_triple_ir_is_the_dialect) {
  /* IR for the host triple is the dialect (clang writes it); no other host "target IR"
   * exists, so the same refusals hold. */
  refused("host triple", "target triple = \"x86_64-pc-linux-gnu\"\ndeclare ptr @popen(ptr, ptr)\n" KERNEL_HEAD
          "  %f = call ptr @popen(ptr %p, ptr %q)\n  store ptr %f, ptr %q\n  ret void\n}\n",
          "calls 'popen'");
  static const char no_kernel[] = "target triple = \"x86_64-pc-linux-gnu\"\ndeclare ptr @popen(ptr, ptr)\n"
                                  "define void @run(ptr %p) {\n  %f = call ptr @popen(ptr %p, ptr %p)\n  ret void\n}\n";
  kiln_status_t s = compile(no_kernel, strlen(no_kernel), "cpu", NULL);
  cr_assert(s && kiln_status_code(s) == KILN_E_COMPILE && strstr(kiln_status_message(s), "defines no kernels"));
  kiln_status_free(s);
}

Test(imports, gpu_target_ir_is_checked_too) {
  static const char amd[] = "target triple = \"amdgcn-amd-amdhsa\"\ndeclare ptr @popen(ptr, ptr)\n"
                            "define amdgpu_kernel void @k(ptr %p) {\n  %f = call ptr @popen(ptr %p, ptr %p)\n"
                            "  store ptr %f, ptr %p\n  ret void\n}\n";
  kiln_status_t s = compile(amd, strlen(amd), "gfx942", NULL);
  cr_assert(s && strstr(kiln_status_message(s), "calls 'popen'"), "%s", s ? kiln_status_message(s) : "compiled");
  kiln_status_free(s);
  static const char nv[] = "target triple = \"nvptx64-nvidia-cuda\"\n"
                           "define ptx_kernel void @k(ptr %p) {\n  call void asm sideeffect \"exit;\", \"\"()\n"
                           "  ret void\n}\n";
  s = compile(nv, strlen(nv), "sm_90", NULL);
  cr_assert(s && strstr(kiln_status_message(s), "inline assembly"), "%s", s ? kiln_status_message(s) : "compiled");
  kiln_status_free(s);
  /* A GPU's own intrinsics and its extern dynamic shared memory stay legal in target IR. */
  static const char own[] = "target triple = \"amdgcn-amd-amdhsa\"\n"
                            "@dyn = external addrspace(3) global [0 x i32]\n"
                            "declare i32 @llvm.amdgcn.workitem.id.x()\n"
                            "define amdgpu_kernel void @k(ptr addrspace(1) %p) {\n"
                            "  %i = call i32 @llvm.amdgcn.workitem.id.x()\n"
                            "  %s = getelementptr i32, ptr addrspace(3) @dyn, i32 %i\n  store i32 %i, ptr addrspace(3) %s\n"
                            "  %v = load i32, ptr addrspace(3) @dyn\n  store i32 %v, ptr addrspace(1) %p\n  ret void\n}\n";
  s = compile(own, strlen(own), "gfx942", NULL);
  cr_assert(!s, "%s", s ? kiln_status_message(s) : "");
}

Test(imports, te_programs_reach_only_math) {
  /* te names math functions from its own list; its IR goes through the same checks. */
  msgpack_sbuffer sb = te_json_to_msgpack(
      "{'te': 1, 'tensors': ["
      " {'name': 'A', 'op': 'placeholder', 'dtype': 'float32', 'shape': [4]},"
      " {'name': 'B', 'op': 'compute', 'dtype': 'float32', 'shape': [4], 'axes': ['i'],"
      "  'body': ['call', 'system', [['load', 'A', [['var', 'i']]]]]}],"
      " 'kernels': [{'name': 'k', 'args': ['A', 'B']}]}");
  kiln_compile_request_t req = {.payload = (const uint8_t *)sb.data, .payload_size = sb.size,
                                .kind = KILN_PAYLOAD_TE, .target = "cpu", .options = kiln_compile_options_default()};
  kiln_artifact_t a;
  kiln_status_t s = kiln_compiler_compile(compiler, &req, &a);
  cr_assert(s && kiln_status_code(s) == KILN_E_COMPILE, "%s", s ? kiln_status_message(s) : "compiled");
  cr_assert(strstr(kiln_status_message(s), "system"), "%s", kiln_status_message(s));
  kiln_status_free(s);
  msgpack_sbuffer_destroy(&sb);
}

/* ---- accepted: the module's own code, whatever its names ----------------------------- */

static void run_cpu_1(const kiln_artifact_t *a, void *p, void *q) {
  th_cpu_module_t m;
  th_cpu_load(a, &m);
  uint64_t n = 1;
  void *args[3] = {&p, &q, &n};
  th_cpu_run(&m, a, "k", (uint32_t[3]){1, 1, 1}, (uint32_t[3]){1, 1, 1}, 0, args);
  th_cpu_unload(&m);
}

Test(imports, own_definitions_with_libc_names_run_their_own_body) {
  /* available_externally ("a definition exists elsewhere", C99's plain inline) with a call
   * the optimiser keeps: left alone, the call would bind to libc's getenv. kiln makes the
   * body the definition; the cpu layer would refuse an import of getenv. */
  static const char ir[] = "define available_externally i32 @getenv(ptr %x) noinline { ret i32 4242 }\n"
                           "define internal i32 @system(ptr %x) noinline { ret i32 77 }\n" KERNEL_HEAD
                           "  %a = call i32 @getenv(ptr %p)\n  %b = call i32 @system(ptr %p)\n  %c = add i32 %a, %b\n"
                           "  store i32 %c, ptr %q\n  ret void\n}\n";
  for (size_t t = 0; t < sizeof(all_targets) / sizeof(all_targets[0]); t++) {
    kiln_artifact_t a;
    kiln_status_t s = compile(ir, strlen(ir), all_targets[t], &a);
    cr_assert(!s, "%s: %s", all_targets[t], s ? kiln_status_message(s) : "");
    if (t == 0) {
      int32_t out = 0;
      run_cpu_1(&a, &out, &out);
      cr_assert_eq(out, 4242 + 77);
    }
    kiln_artifact_deinit(&a);
  }
}

/* ---- accepted: every intrinsic of the allow-list, on every target --------------------- */

/* One module per intrinsic: a kernel that loads its inputs from %p and stores the result to
 * %q, so that nothing is folded away. */
static const struct {
  const char *decl, *body;
} intrinsic_uses[] = {
#define FUN1(N)                                                                                                     \
  {"declare float @llvm." N ".f32(float)\ndeclare double @llvm." N ".f64(double)\n",                               \
   "%x = load float, ptr %p\n%r = call float @llvm." N ".f32(float %x)\nstore float %r, ptr %q\n"                  \
   "%y = load double, ptr %p\n%s = call double @llvm." N ".f64(double %y)\nstore double %s, ptr %q\n"}
#define FUN2(N)                                                                                                     \
  {"declare float @llvm." N ".f32(float, float)\ndeclare double @llvm." N ".f64(double, double)\n",                \
   "%x = load float, ptr %p\n%r = call float @llvm." N ".f32(float %x, float %x)\nstore float %r, ptr %q\n"         \
   "%y = load double, ptr %p\n%s = call double @llvm." N ".f64(double %y, double %y)\nstore double %s, ptr %q\n"}
#define INT1(N, EXTRA)                                                                                              \
  {"declare i32 @llvm." N ".i32(i32" EXTRA ")\n",                                                                  \
   "%x = load i32, ptr %p\n%r = call i32 @llvm." N ".i32(i32 %x" EXTRA " false)\nstore i32 %r, ptr %q\n"}
#define INT1N(N)                                                                                                    \
  {"declare i32 @llvm." N ".i32(i32)\n", "%x = load i32, ptr %p\n%r = call i32 @llvm." N ".i32(i32 %x)\nstore i32 %r, ptr %q\n"}
#define INT2(N)                                                                                                     \
  {"declare i32 @llvm." N ".i32(i32, i32)\n",                                                                      \
   "%x = load i32, ptr %p\n%r = call i32 @llvm." N ".i32(i32 %x, i32 %x)\nstore i32 %r, ptr %q\n"}
#define OVF(N)                                                                                                      \
  {"declare {i32, i1} @llvm." N ".with.overflow.i32(i32, i32)\n",                                                 \
   "%x = load i32, ptr %p\n%o = call {i32, i1} @llvm." N ".with.overflow.i32(i32 %x, i32 %x)\n"                    \
   "%r = extractvalue {i32, i1} %o, 0\nstore i32 %r, ptr %q\n"}
#define RED(N, T, V)                                                                                                \
  {"declare " T " @llvm.vector.reduce." N "." V "(<4 x " T ">)\n",                                                 \
   "%x = load <4 x " T ">, ptr %p\n%r = call " T " @llvm.vector.reduce." N "." V "(<4 x " T "> %x)\nstore " T " %r, ptr %q\n"}
    FUN1("sqrt"), FUN1("fabs"), FUN1("floor"), FUN1("ceil"), FUN1("trunc"), FUN1("round"), FUN1("roundeven"),
    FUN1("rint"), FUN1("nearbyint"), FUN1("canonicalize"), FUN1("exp"), FUN1("exp2"), FUN1("exp10"), FUN1("log"),
    FUN1("log2"), FUN1("log10"), FUN1("sin"), FUN1("cos"), FUN1("tan"), FUN1("asin"), FUN1("acos"), FUN1("atan"),
    FUN1("sinh"), FUN1("cosh"), FUN1("tanh"), FUN2("minnum"), FUN2("maxnum"), FUN2("minimum"), FUN2("maximum"),
    FUN2("minimumnum"), FUN2("maximumnum"), FUN2("copysign"), FUN2("pow"), FUN2("atan2"),
    {"declare float @llvm.fma.f32(float, float, float)\ndeclare double @llvm.fmuladd.f64(double, double, double)\n",
     "%x = load float, ptr %p\n%r = call float @llvm.fma.f32(float %x, float %x, float %x)\nstore float %r, ptr %q\n"
     "%y = load double, ptr %p\n%s = call double @llvm.fmuladd.f64(double %y, double %y, double %y)\n"
     "store double %s, ptr %q\n"},
    {"declare i1 @llvm.is.fpclass.f32(float, i32 immarg)\n",
     "%x = load float, ptr %p\n%c = call i1 @llvm.is.fpclass.f32(float %x, i32 3)\n%r = zext i1 %c to i32\n"
     "store i32 %r, ptr %q\n"},
    {"declare i32 @llvm.fptosi.sat.i32.f32(float)\ndeclare i32 @llvm.fptoui.sat.i32.f64(double)\n",
     "%x = load float, ptr %p\n%r = call i32 @llvm.fptosi.sat.i32.f32(float %x)\nstore i32 %r, ptr %q\n"
     "%y = load double, ptr %p\n%s = call i32 @llvm.fptoui.sat.i32.f64(double %y)\nstore i32 %s, ptr %q\n"},
    INT1("abs", ", i1"), INT1("ctlz", ", i1"), INT1("cttz", ", i1"), INT1N("bswap"), INT1N("bitreverse"),
    INT1N("ctpop"), INT2("smax"), INT2("smin"), INT2("umax"), INT2("umin"), INT2("sadd.sat"), INT2("uadd.sat"),
    INT2("ssub.sat"), INT2("usub.sat"), INT2("sshl.sat"), INT2("ushl.sat"),
    {"declare i32 @llvm.fshl.i32(i32, i32, i32)\ndeclare i32 @llvm.fshr.i32(i32, i32, i32)\n",
     "%x = load i32, ptr %p\n%r = call i32 @llvm.fshl.i32(i32 %x, i32 %x, i32 %x)\n"
     "%s = call i32 @llvm.fshr.i32(i32 %r, i32 %x, i32 %x)\nstore i32 %s, ptr %q\n"},
    OVF("sadd"), OVF("uadd"), OVF("ssub"), OVF("usub"), OVF("smul"), OVF("umul"),
    {"declare i8 @llvm.scmp.i8.i32(i32, i32)\ndeclare i8 @llvm.ucmp.i8.i32(i32, i32)\n",
     "%x = load i32, ptr %p\n%r = call i8 @llvm.scmp.i8.i32(i32 %x, i32 7)\n%s = call i8 @llvm.ucmp.i8.i32(i32 %x, i32 7)\n"
     "%t = add i8 %r, %s\nstore i8 %t, ptr %q\n"},
    {"declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\ndeclare void @llvm.memmove.p0.p0.i64(ptr, ptr, i64, i1)\n"
     "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)\n",
     "call void @llvm.memcpy.p0.p0.i64(ptr %q, ptr %p, i64 %n, i1 false)\n"
     "call void @llvm.memmove.p0.p0.i64(ptr %q, ptr %p, i64 %n, i1 false)\n"
     "call void @llvm.memset.p0.i64(ptr %q, i8 0, i64 %n, i1 false)\n"},
    {"declare void @llvm.memcpy.inline.p0.p0.i64(ptr, ptr, i64 immarg, i1)\n"
     "declare void @llvm.memset.inline.p0.i64(ptr, i8, i64 immarg, i1)\n",
     "call void @llvm.memcpy.inline.p0.p0.i64(ptr %q, ptr %p, i64 32, i1 false)\n"
     "call void @llvm.memset.inline.p0.i64(ptr %p, i8 0, i64 32, i1 false)\n"},
    {"declare <4 x float> @llvm.masked.load.v4f32.p0(ptr, i32, <4 x i1>, <4 x float>)\n"
     "declare void @llvm.masked.store.v4f32.p0(<4 x float>, ptr, i32, <4 x i1>)\n",
     "%v = call <4 x float> @llvm.masked.load.v4f32.p0(ptr %p, i32 4, <4 x i1> <i1 1, i1 0, i1 1, i1 0>, <4 x float> zeroinitializer)\n"
     "call void @llvm.masked.store.v4f32.p0(<4 x float> %v, ptr %q, i32 4, <4 x i1> <i1 1, i1 1, i1 0, i1 0>)\n"},
    {"declare <4 x float> @llvm.masked.gather.v4f32.v4p0(<4 x ptr>, i32, <4 x i1>, <4 x float>)\n"
     "declare void @llvm.masked.scatter.v4f32.v4p0(<4 x float>, <4 x ptr>, i32, <4 x i1>)\n",
     "%a = insertelement <4 x ptr> poison, ptr %p, i32 0\n%b = shufflevector <4 x ptr> %a, <4 x ptr> poison, <4 x i32> zeroinitializer\n"
     "%v = call <4 x float> @llvm.masked.gather.v4f32.v4p0(<4 x ptr> %b, i32 4, <4 x i1> <i1 1, i1 1, i1 1, i1 1>, <4 x float> zeroinitializer)\n"
     "%c = insertelement <4 x ptr> poison, ptr %q, i32 0\n%d = shufflevector <4 x ptr> %c, <4 x ptr> poison, <4 x i32> zeroinitializer\n"
     "call void @llvm.masked.scatter.v4f32.v4p0(<4 x float> %v, <4 x ptr> %d, i32 4, <4 x i1> <i1 1, i1 0, i1 0, i1 0>)\n"},
    {"declare <4 x float> @llvm.masked.expandload.v4f32(ptr, <4 x i1>, <4 x float>)\n"
     "declare void @llvm.masked.compressstore.v4f32(<4 x float>, ptr, <4 x i1>)\n",
     "%v = call <4 x float> @llvm.masked.expandload.v4f32(ptr %p, <4 x i1> <i1 1, i1 0, i1 1, i1 0>, <4 x float> zeroinitializer)\n"
     "call void @llvm.masked.compressstore.v4f32(<4 x float> %v, ptr %q, <4 x i1> <i1 1, i1 0, i1 1, i1 1>)\n"},
    {"declare void @llvm.lifetime.start.p0(ptr)\ndeclare void @llvm.lifetime.end.p0(ptr)\n",
     "%a = alloca [16 x i32]\ncall void @llvm.lifetime.start.p0(ptr %a)\n%e = getelementptr i32, ptr %a, i64 %n\n"
     "store i32 1, ptr %e\n%v = load i32, ptr %a\nstore i32 %v, ptr %q\ncall void @llvm.lifetime.end.p0(ptr %a)\n"},
    {"declare ptr @llvm.invariant.start.p0(i64 immarg, ptr)\ndeclare void @llvm.invariant.end.p0(ptr, i64 immarg, ptr)\n",
     "%i = call ptr @llvm.invariant.start.p0(i64 4, ptr %p)\n%v = load i32, ptr %p\nstore i32 %v, ptr %q\n"
     "call void @llvm.invariant.end.p0(ptr %i, i64 4, ptr %p)\n"},
    {"declare ptr @llvm.launder.invariant.group.p0(ptr)\ndeclare ptr @llvm.strip.invariant.group.p0(ptr)\n",
     "%a = call ptr @llvm.launder.invariant.group.p0(ptr %p)\n%b = call ptr @llvm.strip.invariant.group.p0(ptr %a)\n"
     "%v = load i32, ptr %b\nstore i32 %v, ptr %q\n"},
    {"declare ptr @llvm.ptrmask.p0.i64(ptr, i64)\n",
     "%a = call ptr @llvm.ptrmask.p0.i64(ptr %p, i64 -16)\n%v = load i32, ptr %a\nstore i32 %v, ptr %q\n"},
    {"declare void @llvm.prefetch.p0(ptr, i32 immarg, i32 immarg, i32 immarg)\n",
     "call void @llvm.prefetch.p0(ptr %p, i32 0, i32 3, i32 1)\n"},
    {"declare i64 @llvm.objectsize.i64.p0(ptr, i1 immarg, i1 immarg, i1 immarg)\n",
     "%s = call i64 @llvm.objectsize.i64.p0(ptr %p, i1 false, i1 false, i1 false)\nstore i64 %s, ptr %q\n"},
    {"declare ptr @llvm.stacksave.p0()\ndeclare void @llvm.stackrestore.p0(ptr)\n",
     "%s = call ptr @llvm.stacksave.p0()\n%a = alloca i32, i64 %n\nstore i32 1, ptr %a\n%v = load volatile i32, ptr %a\n"
     "store i32 %v, ptr %q\ncall void @llvm.stackrestore.p0(ptr %s)\n"},
    RED("add", "i32", "v4i32"), RED("mul", "i32", "v4i32"), RED("and", "i32", "v4i32"), RED("or", "i32", "v4i32"),
    RED("xor", "i32", "v4i32"), RED("smax", "i32", "v4i32"), RED("smin", "i32", "v4i32"),
    RED("umax", "i32", "v4i32"), RED("umin", "i32", "v4i32"), RED("fmax", "float", "v4f32"),
    RED("fmin", "float", "v4f32"), RED("fmaximum", "float", "v4f32"), RED("fminimum", "float", "v4f32"),
    {"declare float @llvm.vector.reduce.fadd.v4f32(float, <4 x float>)\n"
     "declare float @llvm.vector.reduce.fmul.v4f32(float, <4 x float>)\n",
     "%x = load <4 x float>, ptr %p\n%r = call float @llvm.vector.reduce.fadd.v4f32(float 0.0, <4 x float> %x)\n"
     "%s = call float @llvm.vector.reduce.fmul.v4f32(float %r, <4 x float> %x)\nstore float %s, ptr %q\n"},
    {"declare <4 x float> @llvm.vector.insert.v4f32.v2f32(<4 x float>, <2 x float>, i64 immarg)\n"
     "declare <2 x float> @llvm.vector.extract.v2f32.v4f32(<4 x float>, i64 immarg)\n",
     "%x = load <4 x float>, ptr %p\n%h = call <2 x float> @llvm.vector.extract.v2f32.v4f32(<4 x float> %x, i64 2)\n"
     "%r = call <4 x float> @llvm.vector.insert.v4f32.v2f32(<4 x float> %x, <2 x float> %h, i64 0)\n"
     "store <4 x float> %r, ptr %q\n"},
    {"declare <4 x float> @llvm.vector.reverse.v4f32(<4 x float>)\n",
     "%x = load <4 x float>, ptr %p\n%r = call <4 x float> @llvm.vector.reverse.v4f32(<4 x float> %x)\n"
     "store <4 x float> %r, ptr %q\n"},
    {"declare <4 x float> @llvm.vector.splice.v4f32(<4 x float>, <4 x float>, i32 immarg)\n",
     "%x = load <4 x float>, ptr %p\n%r = call <4 x float> @llvm.vector.splice.v4f32(<4 x float> %x, <4 x float> %x, i32 1)\n"
     "store <4 x float> %r, ptr %q\n"},
    {"declare <8 x float> @llvm.vector.interleave2.v8f32(<4 x float>, <4 x float>)\n"
     "declare {<4 x float>, <4 x float>} @llvm.vector.deinterleave2.v8f32(<8 x float>)\n",
     "%x = load <4 x float>, ptr %p\n%r = call <8 x float> @llvm.vector.interleave2.v8f32(<4 x float> %x, <4 x float> %x)\n"
     "%d = call {<4 x float>, <4 x float>} @llvm.vector.deinterleave2.v8f32(<8 x float> %r)\n"
     "%e = extractvalue {<4 x float>, <4 x float>} %d, 1\nstore <4 x float> %e, ptr %q\n"},
    {"declare <4 x i32> @llvm.stepvector.v4i32()\ndeclare <4 x i1> @llvm.get.active.lane.mask.v4i1.i32(i32, i32)\n",
     "%s = call <4 x i32> @llvm.stepvector.v4i32()\n%x = load i32, ptr %p\n"
     "%m = call <4 x i1> @llvm.get.active.lane.mask.v4i1.i32(i32 %x, i32 9)\n"
     "%r = select <4 x i1> %m, <4 x i32> %s, <4 x i32> zeroinitializer\nstore <4 x i32> %r, ptr %q\n"},
    {"declare void @llvm.assume(i1)\ndeclare i32 @llvm.expect.i32(i32, i32)\n"
     "declare i32 @llvm.expect.with.probability.i32(i32, i32, double immarg)\ndeclare i1 @llvm.is.constant.i32(i32)\n",
     "%x = load i32, ptr %p\n%c = icmp sgt i32 %x, -5\ncall void @llvm.assume(i1 %c)\n"
     "%e = call i32 @llvm.expect.i32(i32 %x, i32 1)\n%f = call i32 @llvm.expect.with.probability.i32(i32 %e, i32 1, double 0.5)\n"
     "%k = call i1 @llvm.is.constant.i32(i32 %f)\n%z = zext i1 %k to i32\n%r = add i32 %f, %z\nstore i32 %r, ptr %q\n"},
    {"declare void @llvm.experimental.noalias.scope.decl(metadata)\n",
     "call void @llvm.experimental.noalias.scope.decl(metadata !0)\n%v = load i32, ptr %p, !alias.scope !0\n"
     "store i32 %v, ptr %q, !noalias !0\n"},
    {"@s = private unnamed_addr constant [2 x i8] c\"a\\00\"\n"
     "declare i32 @llvm.annotation.i32.p0(i32, ptr, ptr, i32)\ndeclare void @llvm.var.annotation.p0.p0(ptr, ptr, ptr, i32, ptr)\n"
     "declare ptr @llvm.ptr.annotation.p0.p0(ptr, ptr, ptr, i32, ptr)\n",
     "%x = load i32, ptr %p\n%a = call i32 @llvm.annotation.i32.p0(i32 %x, ptr @s, ptr @s, i32 1)\n"
     "%l = alloca i32\ncall void @llvm.var.annotation.p0.p0(ptr %l, ptr @s, ptr @s, i32 2, ptr null)\n"
     "%r = call ptr @llvm.ptr.annotation.p0.p0(ptr %q, ptr @s, ptr @s, i32 3, ptr null)\nstore i32 %a, ptr %r\n"},
    {"declare void @llvm.sideeffect()\ndeclare void @llvm.donothing()\ndeclare void @llvm.fake.use(...)\n",
     "call void @llvm.sideeffect()\ncall void @llvm.donothing()\n%x = load i32, ptr %p\n"
     "call void (...) @llvm.fake.use(i32 %x)\n"},
    {"declare void @llvm.trap()\n",
     "%x = load i32, ptr %p\n%c = icmp eq i32 %x, 12345\nbr i1 %c, label %t, label %f\nt:\ncall void @llvm.trap()\n"
     "unreachable\nf:\n"},
};

Test(imports, every_allowed_intrinsic_compiles_on_every_target) {
  for (size_t i = 0; i < sizeof(intrinsic_uses) / sizeof(intrinsic_uses[0]); i++) {
    char ir[4096];
    snprintf(ir, sizeof(ir), "%s%s%s%s", intrinsic_uses[i].decl, KERNEL_HEAD, intrinsic_uses[i].body,
             "  ret void\n}\n!0 = !{!1}\n!1 = distinct !{!1, !2}\n!2 = distinct !{!2}\n");
    for (size_t t = 0; t < sizeof(all_targets) / sizeof(all_targets[0]); t++) {
      kiln_status_t s = compile(ir, strlen(ir), all_targets[t], NULL);
      cr_assert(!s, "%s on %s: %s: %s\n%s", intrinsic_uses[i].decl, all_targets[t],
                s ? kiln_code_name(kiln_status_code(s)) : "", s ? kiln_status_message(s) : "", ir);
    }
  }
}

/* ---- accepted: the C path for every documented math function -------------------------- */

/* docs/kernels.md §3, in one order for the kernel and the reference: U(name, arg) and
 * B(name, arg, arg); `a` lies in (0.05, 0.95) and `b` in (1.1, 3.5), inside every domain. */
#define MATH_LIST(U, B)                                                                                            \
  U(exp, a) U(exp2, a) U(exp10, a) U(expm1, a) U(log, a) U(log2, a) U(log10, a) U(log1p, a) B(pow, a, b) U(sin, a) \
  U(cos, a) U(tan, a) U(asin, a) U(acos, a) U(atan, a) B(atan2, a, b) U(sinh, a) U(cosh, a) U(tanh, a)            \
  U(asinh, a) U(acosh, b) U(atanh, a) U(erf, a) U(erfc, a) U(cbrt, a) B(hypot, a, b) B(fmod, b, a) U(sqrt, a)      \
  U(fabs, a) U(floor, b) U(ceil, b) U(trunc, b) U(round, b) U(rint, b) B(fmin, a, b) B(fmax, a, b)                \
  B(copysign, a, b)
#define KU(n, x) "  o[i++] = " #n "f(" #x "); d[j++] = " #n "((double)" #x ");\n"
#define KB(n, x, y) "  o[i++] = " #n "f(" #x ", " #y "); d[j++] = " #n "((double)" #x ", (double)" #y ");\n"
#define COUNT1(n, x) +1
#define COUNT2(n, x, y) +1
enum { NMATH = 0 MATH_LIST(COUNT1, COUNT2) + 1 /* fma */ };

static const char math_kernel[] =
    "#define _GNU_SOURCE\n#include <kiln/kernel.h>\n#include <math.h>\n"
    "KILN_KERNEL void allmath(const float *in, float *o, double *d) {\n"
    "  int t = kiln_global_id(0), i = 0, j = 0;\n"
    "  float a = in[2 * t], b = in[2 * t + 1];\n"
    "  o += 64 * t; d += 64 * t;\n" MATH_LIST(KU, KB)
    "  o[i++] = fmaf(a, b, a); d[j++] = fma((double)a, (double)b, (double)a);\n}\n";

static void math_reference(float a, float b, float *wf, double *wd) {
  int k = 0;
#define HU(n, x) wf[k] = n##f(x), wd[k] = n((double)x), k++;
#define HB(n, x, y) wf[k] = n##f(x, y), wd[k] = n((double)x, (double)y), k++;
  MATH_LIST(HU, HB)
  wf[k] = fmaf(a, b, a), wd[k] = fma((double)a, (double)b, (double)a), k++;
#undef HU
#undef HB
}

/* clang on `source` (C, or LLVM IR when it starts with "define") with `args`, which name the
 * kind of output; returns the output file's bytes. */
static uint8_t *clang_run(const char *source, const char *args, const char *out_suffix, size_t *out_len) {
  if (!KILN_TEST_CLANG[0]) cr_skip_test("clang was not found at configure time");
  char src[256], out[300], cmd[2048], log[4096];
  th_write_temp(source, strlen(source), strncmp(source, "define", 6) == 0 ? ".ll" : ".c", src, sizeof(src));
  snprintf(out, sizeof(out), "%s%s", src, out_suffix);
  snprintf(cmd, sizeof(cmd), "'%s' %s -I'%s' '%s' -o '%s' 2>&1", KILN_TEST_CLANG, args, KILN_TEST_INCLUDE, src, out);
  int rc = th_run(cmd, log, sizeof(log));
  cr_assert_eq(rc, 0, "clang %s failed: %s", args, log);
  FILE *f = fopen(out, "rb");
  cr_assert(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = malloc((size_t)n);
  cr_assert(p && fread(p, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  unlink(out);
  unlink(src);
  *out_len = (size_t)n;
  return p;
}

static uint8_t *clang_bc(const char *source, const char *flags, size_t *out_len) {
  char args[256];
  snprintf(args, sizeof(args), "%s -emit-llvm -c", flags);
  return clang_run(source, args, ".bc", out_len);
}

static bool close_enough(double got, double want, double rel) {
  if (isnan(want)) return isnan(got);
  return fabs(got - want) <= rel * fmax(fabs(want), 1e-30);
}

Test(imports, c_math_through_kernel_h_at_every_flag_setting) {
  /* clang turns the names into libm calls (-O2, -O0) or intrinsics (-fno-math-errno,
   * -ffast-math: llvm.asin.f32, ...): both forms must compile for every target and, on the
   * cpu, compute what libm computes. */
  static const struct {
    const char *flags;
    double rel_f32, rel_f64;
  } settings[] = {{"-O2", 1e-5, 1e-12}, {"-O0", 1e-5, 1e-12}, {"-O2 -fno-math-errno", 1e-5, 1e-12},
                  {"-O2 -ffast-math", 1e-4, 1e-9}};
  static const char *const targets[] = {"cpu", "gfx942", "gfx1100", "sm_90"};
  enum { ITEMS = 32 };
  float in[2 * ITEMS];
  unsigned seed = 7;
  for (int t = 0; t < ITEMS; t++) {
    in[2 * t] = 0.05f + 0.9f * (float)(rand_r(&seed) % 10000) / 10000.0f;
    in[2 * t + 1] = 1.1f + 2.4f * (float)(rand_r(&seed) % 10000) / 10000.0f;
  }
  for (size_t s = 0; s < sizeof(settings) / sizeof(settings[0]); s++) {
    size_t len;
    uint8_t *bc = clang_bc(math_kernel, settings[s].flags, &len);
    for (size_t t = 0; t < sizeof(targets) / sizeof(targets[0]); t++) {
      kiln_artifact_t a;
      kiln_status_t st = compile(bc, len, targets[t], &a);
      cr_assert(!st, "clang %s, target %s: %s: %s", settings[s].flags, targets[t],
                st ? kiln_code_name(kiln_status_code(st)) : "", st ? kiln_status_message(st) : "");
      if (t == 0) {
        float *o = calloc(64 * ITEMS, sizeof(float));
        double *d = calloc(64 * ITEMS, sizeof(double));
        th_cpu_module_t m;
        th_cpu_load(&a, &m);
        void *args[3] = {&(const float *){in}, &o, &d};
        th_cpu_run(&m, &a, "allmath", (uint32_t[3]){ITEMS / 8, 1, 1}, (uint32_t[3]){8, 1, 1}, 0, args);
        th_cpu_unload(&m);
        for (int w = 0; w < ITEMS; w++) {
          float wf[NMATH];
          double wd[NMATH];
          math_reference(in[2 * w], in[2 * w + 1], wf, wd);
          for (int k = 0; k < NMATH; k++) {
            cr_assert(close_enough(o[64 * w + k], wf[k], settings[s].rel_f32), "%s: float function %d of (%g, %g): %.9g, libm %.9g",
                      settings[s].flags, k, in[2 * w], in[2 * w + 1], o[64 * w + k], wf[k]);
            cr_assert(close_enough(d[64 * w + k], wd[k], settings[s].rel_f64), "%s: double function %d of (%g, %g): %.17g, libm %.17g",
                      settings[s].flags, k, in[2 * w], in[2 * w + 1], d[64 * w + k], wd[k]);
          }
        }
        free(o);
        free(d);
      }
      kiln_artifact_deinit(&a);
    }
    free(bc);
  }
}

/* ---- the second layer: the linked cpu shared object ------------------------------------ */

/* A shared object built by clang from `source` with `flags`, read into memory. */
static uint8_t *clang_so(const char *source, const char *flags, size_t *out_len) {
  char args[256];
  snprintf(args, sizeof(args), "-O1 -fPIC -shared -nostdlib %s", flags);
  return clang_run(source, args, ".so", out_len);
}

static void so_refused(const char *source, const char *flags, const char *needle) {
  size_t len;
  uint8_t *so = clang_so(source, flags, &len);
  kiln_status_t s = kc_cpu_check_imports(so, len);
  cr_assert(s, "accepted a shared object that should be refused (%s)", needle);
  cr_assert_eq(kiln_status_code(s), KILN_E_COMPILE);
  cr_assert(strstr(kiln_status_message(s), needle), "message lacks '%s': %s", needle, kiln_status_message(s));
  kiln_status_free(s);
  free(so);
}

Test(imports, cpu_shared_object_layer) {
  static const char good[] = "float expf(float); void *memcpy(void *, const void *, unsigned long);\n"
                             "float f(float *p, float *q) { memcpy(q, p, 64); return expf(*p); }\n";
  size_t len;
  uint8_t *so = clang_so(good, "", &len);
  kiln_status_t s = kc_cpu_check_imports(so, len);
  cr_assert(!s, "%s", s ? kiln_status_message(s) : "");
  free(so);
  so_refused("int system(const char *); int f(const char *c) { return system(c); }\n", "",
             "needs 'system' from the host's libraries");
  so_refused("extern char **environ; char *f(void) { return environ[0]; }\n", "", "needs 'environ'");
  so_refused("volatile int x; __attribute__((constructor)) static void init(void) { x = 1; }\n", "",
             "runs code at load");
  so_refused("static int impl(void) { return 1; } static void *resolve(void) { return (void *)impl; }\n"
             "int f(void) __attribute__((ifunc(\"resolve\")));\n",
             "", "ifunc 'f'");
  so_refused("int f(void) { return 1; }\n", "-Wl,--no-as-needed -lz", "needs library 'libz.so.1'");
  so_refused("int f(void) { return 1; }\n", "-Wl,-rpath,/tmp", "dynamic tag 0x1d");
  /* and bytes that are not ELF at all */
  s = kc_cpu_check_imports((const uint8_t *)"not an elf", 10);
  cr_assert(s && kiln_status_code(s) == KILN_E_COMPILE);
  kiln_status_free(s);
}

Test(imports, cpu_layer_catches_what_codegen_adds) {
  /* "probe-stack"="system" makes code generation call `system` for stack probing: a call
   * the IR never shows. kiln strips the attribute, so the kernel compiles and imports
   * nothing; the same IR built by clang with the attribute kept imports `system`, and the
   * shared-object layer refuses it. */
  static const char ir[] = "define void @k(ptr %p, i32 %i) section \"kiln.kernel\" {\n"
                           "  call void @rec(ptr %p, i32 %i)\n  ret void\n}\n"
                           "define internal void @rec(ptr %p, i32 %n) #0 {\n  %a = alloca [100000 x i8]\n"
                           "  %q = getelementptr i8, ptr %a, i32 %n\n  store volatile i8 1, ptr %q\n"
                           "  %v = load volatile i8, ptr %a\n  store i8 %v, ptr %p\n  %c = icmp eq i32 %n, 0\n"
                           "  br i1 %c, label %done, label %more\nmore:\n  %m = sub i32 %n, 1\n"
                           "  call void @rec(ptr %a, i32 %m)\n  br label %done\ndone:\n  ret void\n}\n"
                           "attributes #0 = { \"probe-stack\"=\"system\" }\n";
  kiln_artifact_t a;
  kiln_status_t s = compile(ir, strlen(ir), "cpu", &a);
  cr_assert(!s, "%s", s ? kiln_status_message(s) : "");
  kiln_artifact_deinit(&a);
#if defined(__x86_64__)
  so_refused(ir, "", "needs 'system'");
#endif
}
