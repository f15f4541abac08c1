/* Bad input gets a typed status with a message that says what to do; nothing crashes. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/compiler/harness.h"

static void expect(const void *payload, size_t len, kiln_payload_kind_t kind, const char *target, kiln_code_t code,
                   const char *needle) {
  kiln_status_t s = th_compile_status(payload, len, kind, target);
  cr_assert(s, "expected %s for target %s", kiln_code_name(code), target);
  cr_assert_eq(kiln_status_code(s), code, "%s: %s", kiln_code_name(kiln_status_code(s)), kiln_status_message(s));
  cr_assert(strstr(kiln_status_message(s), needle), "message lacks '%s': %s", needle, kiln_status_message(s));
  kiln_status_free(s);
}

static void expect_all_targets(const char *ir, kiln_code_t code, const char *needle) {
  static const char *const targets[] = {"cpu", "gfx942", "sm_90"};
  for (int i = 0; i < 3; i++) expect(ir, strlen(ir), KILN_PAYLOAD_AUTO, targets[i], code, needle);
}

Test(errors, garbage) {
  uint8_t junk[256];
  for (int i = 0; i < 256; i++) junk[i] = (uint8_t)(i * 37 + 11);
  expect(junk, sizeof(junk), KILN_PAYLOAD_AUTO, "cpu", KILN_E_COMPILE, "neither LLVM bitcode");
  expect(junk, sizeof(junk), KILN_PAYLOAD_LLVM, "gfx942", KILN_E_COMPILE, "neither LLVM bitcode");
  expect("BC\xc0\xde garbage", 12, KILN_PAYLOAD_AUTO, "cpu", KILN_E_COMPILE, "cannot parse the LLVM bitcode");
  expect("hello", 5, KILN_PAYLOAD_AUTO, "cpu", KILN_E_COMPILE, "payload:1:1");
}

Test(errors, empty_payload) { expect("", 0, KILN_PAYLOAD_AUTO, "cpu", KILN_E_INVALID_ARGUMENT, "empty"); }

Test(errors, syntax_error_has_line_and_column) {
  static const char ir[] = "define void @k(ptr %p) section \"kiln.kernel\" {\n"
                           "  store float 1.0, ptr %p\n"
                           "  ret voidd\n"
                           "}\n";
  expect_all_targets(ir, KILN_E_COMPILE, "payload:3:7");
}

Test(errors, verifier_failure) {
  static const char ir[] = "define void @k(ptr %p) section \"kiln.kernel\" {\n"
                           "entry:\n"
                           "  br label %next\n"
                           "next:\n"
                           "  %x = add i32 %y, 1\n"
                           "  %y = add i32 %x, 1\n"
                           "  ret void\n"
                           "}\n";
  expect_all_targets(ir, KILN_E_COMPILE, "verifier");
}

Test(errors, target_ir_for_the_wrong_target) {
  static const char amd[] = "target triple = \"amdgcn-amd-amdhsa\"\n"
                            "define amdgpu_kernel void @k() { ret void }\n";
  expect(amd, strlen(amd), KILN_PAYLOAD_AUTO, "sm_90", KILN_E_COMPILE, "compiles only for gfx targets");
  expect(amd, strlen(amd), KILN_PAYLOAD_AUTO, "cpu", KILN_E_COMPILE, "portable kernel dialect");
  static const char nv[] = "target triple = \"nvptx64-nvidia-cuda\"\n"
                           "define ptx_kernel void @k() { ret void }\n";
  expect(nv, strlen(nv), KILN_PAYLOAD_AUTO, "gfx90a", KILN_E_COMPILE, "compiles only for sm_ targets");
}

Test(errors, unknown_targets) {
  static const char ir[] = "define void @k() section \"kiln.kernel\" { ret void }\n";
  static const char *const bad[] = {"gfx999", "sm_7", "tpu", "", "gfx90a:xnack", "gfx90a:wavefrontsize64+",
                                    "gfx1100:sramecc+", "gfx90a:xnack+:xnack-"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    expect(ir, strlen(ir), KILN_PAYLOAD_AUTO, bad[i], KILN_E_INVALID_ARGUMENT, "gfx942");
}

Test(errors, no_kernels) {
  static const char ir[] = "define void @helper() { ret void }\n";
  expect_all_targets(ir, KILN_E_COMPILE, "kiln.kernel");
}

Test(errors, bad_kernels) {
  static const char ret[] = "define i32 @k() section \"kiln.kernel\" { ret i32 0 }\n";
  expect_all_targets(ret, KILN_E_COMPILE, "must return void");
  static const char agg[] = "define void @k({i32, i32} %s) section \"kiln.kernel\" { ret void }\n";
  expect_all_targets(agg, KILN_E_COMPILE, "parameter 0 has type");
  static const char builtin[] = "declare i32 @__kiln_thread_id(i32)\n"
                                "define void @k(ptr %p) section \"kiln.kernel\" {\n"
                                "  %i = call i32 @__kiln_thread_id(i32 0)\n"
                                "  store i32 %i, ptr %p\n"
                                "  ret void\n"
                                "}\n";
  expect_all_targets(builtin, KILN_E_COMPILE, "unknown kiln builtin '__kiln_thread_id'");
}

Test(errors, code_object_kind_must_fit_target) {
  static const char ptx[] = ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n";
  expect(ptx, strlen(ptx), KILN_PAYLOAD_AUTO, "gfx942", KILN_E_INVALID_ARGUMENT, "cannot run on target gfx942");
  expect("\x7f" "ELF", 4, KILN_PAYLOAD_HSACO, "cpu", KILN_E_INVALID_ARGUMENT, "send it for a gfx target");
}

Test(errors, bad_options) {
  kiln_compiler_t *c;
  cr_assert(!kiln_compiler_create(NULL, &c));
  static const char ir[] = "define void @k() section \"kiln.kernel\" { ret void }\n";
  kiln_compile_request_t req = {.payload = (const uint8_t *)ir, .payload_size = strlen(ir), .target = "cpu",
                                .options = kiln_compile_options_default()};
  req.options.opt_level = 4;
  kiln_artifact_t a;
  kiln_status_t s = kiln_compiler_compile(c, &req, &a);
  cr_assert(s && kiln_status_code(s) == KILN_E_INVALID_ARGUMENT);
  kiln_status_free(s);
  req.options.opt_level = 3;
  req.options.max_block = 4096;
  s = kiln_compiler_compile(c, &req, &a);
  cr_assert(s && kiln_status_code(s) == KILN_E_INVALID_ARGUMENT);
  kiln_status_free(s);
  /* The compiler is still usable after errors. */
  req.options.max_block = 0;
  s = kiln_compiler_compile(c, &req, &a);
  cr_assert(!s, "%s", s ? kiln_status_message(s) : "");
  kiln_artifact_deinit(&a);
  kiln_compiler_destroy(c);

  uint32_t lvl;
  cr_assert(!kiln_compile_opt_level_parse("O2", &lvl) && lvl == 2);
  cr_assert(!kiln_compile_opt_level_parse("0", &lvl) && lvl == 0);
  kiln_status_t e = kiln_compile_opt_level_parse("O5", &lvl);
  cr_assert(e && kiln_status_code(e) == KILN_E_INVALID_ARGUMENT);
  kiln_status_free(e);
  kiln_payload_kind_t kind;
  cr_assert(!kiln_payload_kind_parse("cpu-so", &kind) && kind == KILN_PAYLOAD_CPU_SO);
  e = kiln_payload_kind_parse("spirv", &kind);
  cr_assert(e && strstr(kiln_status_message(e), "\"hsaco\""));
  kiln_status_free(e);
}

/* A compiler survives many failed jobs and then still compiles (no leaked state). */
Test(errors, many_failures_then_success) {
  kiln_compiler_t *c;
  cr_assert(!kiln_compiler_create(NULL, &c));
  static const char bad[] = "define void @k( {\n";
  static const char good[] = "define void @k(ptr %p) section \"kiln.kernel\" { store i32 1, ptr %p\n ret void }\n";
  static const char *const targets[] = {"cpu", "gfx942", "sm_90"};
  for (int i = 0; i < 30; i++) {
    kiln_compile_request_t req = {.payload = (const uint8_t *)bad, .payload_size = strlen(bad),
                                  .target = targets[i % 3], .options = kiln_compile_options_default()};
    kiln_artifact_t a;
    kiln_status_t s = kiln_compiler_compile(c, &req, &a);
    cr_assert(s);
    kiln_status_free(s);
    req.payload = (const uint8_t *)good;
    req.payload_size = strlen(good);
    s = kiln_compiler_compile(c, &req, &a);
    cr_assert(!s, "%s", s ? kiln_status_message(s) : "");
    kiln_artifact_deinit(&a);
  }
  kiln_compiler_destroy(c);
}

Test(errors, foreign_intrinsics_and_undefined_functions) {
  static const char x86[] = "declare void @llvm.x86.sse2.pause()\n"
                            "define void @k() section \"kiln.kernel\" { call void @llvm.x86.sse2.pause()\n ret void }\n";
  expect(x86, strlen(x86), KILN_PAYLOAD_AUTO, "gfx942", KILN_E_COMPILE, "intrinsic of another architecture");
  expect(x86, strlen(x86), KILN_PAYLOAD_AUTO, "sm_90", KILN_E_COMPILE, "llvm.x86.sse2.pause");
  static const char amd[] = "declare i32 @llvm.amdgcn.workitem.id.x()\n"
                            "define void @k(ptr %p) section \"kiln.kernel\" {\n"
                            "  %i = call i32 @llvm.amdgcn.workitem.id.x()\n  store i32 %i, ptr %p\n  ret void\n}\n";
  expect(amd, strlen(amd), KILN_PAYLOAD_AUTO, "cpu", KILN_E_COMPILE, "intrinsic of another architecture");
  static const char ext[] = "declare void @printf(ptr, ...)\n"
                            "define void @k(ptr %p) section \"kiln.kernel\" { call void (ptr, ...) @printf(ptr %p)\n ret void }\n";
  expect(ext, strlen(ext), KILN_PAYLOAD_AUTO, "gfx942", KILN_E_COMPILE, "printf");
  expect(ext, strlen(ext), KILN_PAYLOAD_AUTO, "sm_90", KILN_E_COMPILE, "calls 'printf'");
  static const char undef[] = "declare void @nowhere()\n"
                              "define void @k() section \"kiln.kernel\" { call void @nowhere()\n ret void }\n";
  expect(undef, strlen(undef), KILN_PAYLOAD_AUTO, "cpu", KILN_E_COMPILE, "nowhere");
}
