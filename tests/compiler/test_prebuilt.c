/* Prebuilt code objects: what kiln produced goes back in as a payload and is validated and
 * stored as is; foreign or mismatched ones are refused with a reason. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/compiler/harness.h"

static void build(const char *target, kiln_artifact_t *a) {
  size_t n;
  uint8_t *bc = th_example_bc("reduce", &n);
  th_compile(bc, n, target, NULL, a);
  free(bc);
}

static void same_table(const kiln_artifact_t *x, const kiln_artifact_t *y) {
  cr_assert_eq(x->num_kernels, y->num_kernels);
  for (uint32_t i = 0; i < x->num_kernels; i++) {
    const kiln_kernel_t *a = &x->kernels[i], *b = kiln_artifact_kernel(y, a->name);
    cr_assert(b, "kernel %s", a->name);
    cr_assert_eq(a->num_args, b->num_args);
    cr_assert_eq(a->num_hidden, b->num_hidden);
    cr_assert_eq(a->kernarg_size, b->kernarg_size);
    cr_assert_eq(a->group_segment_size, b->group_segment_size);
    cr_assert_eq(a->private_segment_size, b->private_segment_size);
    for (uint32_t j = 0; j < a->num_args + a->num_hidden; j++) {
      cr_assert_eq(a->args[j].type, b->args[j].type);
      cr_assert_eq(a->args[j].hidden, b->args[j].hidden);
      cr_assert_eq(a->args[j].offset, b->args[j].offset);
    }
  }
}

static kiln_status_t revalidate(const kiln_artifact_t *a, size_t len, const char *target, kiln_artifact_t *out) {
  kiln_compiler_t *c;
  cr_assert(!kiln_compiler_create(NULL, &c));
  kiln_compile_request_t req = {.payload = a->code, .payload_size = len, .kind = KILN_PAYLOAD_AUTO, .target = target,
                                .options = kiln_compile_options_default()};
  kiln_status_t s = kiln_compiler_compile(c, &req, out);
  kiln_compiler_destroy(c);
  return s;
}

Test(prebuilt, hsaco_roundtrip) {
  kiln_artifact_t a, b;
  build("gfx942", &a);
  kiln_status_t s = revalidate(&a, a.code_size, "gfx942", &b);
  cr_assert(!s, "%s", s ? kiln_status_message(s) : "");
  cr_assert_eq(b.format, KILN_FORMAT_HSACO);
  cr_assert_eq(b.code_size, a.code_size);
  cr_assert(memcmp(a.code, b.code, a.code_size) == 0, "stored as is");
  same_table(&a, &b);
  kiln_artifact_deinit(&b);
  s = revalidate(&a, a.code_size, "gfx90a", &b);
  cr_assert(s && kiln_status_code(s) == KILN_E_COMPILE && strstr(kiln_status_message(s), "cannot run on gfx90a"));
  kiln_status_free(s);
  s = revalidate(&a, a.code_size / 2, "gfx942", &b);
  cr_assert(s && kiln_status_code(s) == KILN_E_COMPILE, "a truncated code object is refused");
  kiln_status_free(s);
  kiln_artifact_deinit(&a);
}

Test(prebuilt, hsaco_features_must_agree) {
  kiln_artifact_t a, b;
  build("gfx90a:xnack-", &a);
  kiln_status_t s = revalidate(&a, a.code_size, "gfx90a:xnack+", &b);
  cr_assert(s && strstr(kiln_status_message(s), "gfx90a:xnack-"), "%s", s ? kiln_status_message(s) : "accepted");
  kiln_status_free(s);
  s = revalidate(&a, a.code_size, "gfx90a", &b);
  cr_assert(!s, "%s", s ? kiln_status_message(s) : "");
  cr_assert_str_eq(b.target, "gfx90a:xnack-");
  kiln_artifact_deinit(&b);
  kiln_artifact_deinit(&a);
}

Test(prebuilt, ptx_roundtrip) {
  kiln_artifact_t a, b;
  build("sm_80", &a);
  kiln_status_t s = revalidate(&a, a.code_size, "sm_90", &b);
  cr_assert(!s, "sm_80 PTX runs on sm_90: %s", s ? kiln_status_message(s) : "");
  cr_assert_eq(b.format, KILN_FORMAT_PTX);
  same_table(&a, &b);
  kiln_artifact_deinit(&b);
  s = revalidate(&a, a.code_size, "sm_75", &b);
  cr_assert(s && strstr(kiln_status_message(s), "is for sm_80"));
  kiln_status_free(s);
  kiln_artifact_deinit(&a);
}

Test(prebuilt, ptx_parameter_types) {
  static const char ptx[] = "//\n// hand written\n//\n.version 7.0\n.target sm_80\n.address_size 64\n"
                            ".visible .entry k(\n  .param .u64 .ptr .global .align 4 k_p0,\n"
                            "  .param .f32 k_p1, .param .s64 k_p2, .param .u32 k_p3\n)\n{\n  ret;\n}\n";
  kiln_compiler_t *c;
  cr_assert(!kiln_compiler_create(NULL, &c));
  kiln_compile_request_t req = {.payload = (const uint8_t *)ptx, .payload_size = strlen(ptx), .target = "sm_80",
                                .options = kiln_compile_options_default()};
  kiln_artifact_t a;
  kiln_status_t s = kiln_compiler_compile(c, &req, &a);
  cr_assert(!s, "%s", s ? kiln_status_message(s) : "");
  const kiln_kernel_t *k = kiln_artifact_kernel(&a, "k");
  cr_assert(k && k->num_args == 4);
  cr_assert_eq(k->args[0].type, KILN_ARG_PTR);
  cr_assert_eq(k->args[1].type, KILN_ARG_F32);
  cr_assert_eq(k->args[2].type, KILN_ARG_I64);
  cr_assert_eq(k->args[2].offset, 16);
  cr_assert_eq(k->args[3].type, KILN_ARG_I32, ".u32 is C's int as compilers write it");
  kiln_artifact_deinit(&a);
  static const char agg[] = ".version 7.0\n.target sm_80\n.visible .entry k(.param .align 8 .b8 k_p0[16]) { ret; }\n";
  req.payload = (const uint8_t *)agg;
  req.payload_size = strlen(agg);
  s = kiln_compiler_compile(c, &req, &a);
  cr_assert(s && strstr(kiln_status_message(s), "aggregate"), "%s", s ? kiln_status_message(s) : "accepted");
  kiln_status_free(s);
  kiln_compiler_destroy(c);
}

Test(prebuilt, cpu_so_roundtrip_and_run) {
  kiln_artifact_t a, b;
  build("cpu", &a);
  kiln_status_t s = revalidate(&a, a.code_size, "cpu", &b);
  cr_assert(!s, "%s", s ? kiln_status_message(s) : "");
  cr_assert_eq(b.format, KILN_FORMAT_CPU_SO);
  same_table(&a, &b);
  kiln_artifact_deinit(&b);
  kiln_artifact_deinit(&a);
}

Test(prebuilt, foreign_shared_object_is_refused) {
  /* libm is an ELF shared object for this host, but not one kiln made. */
  FILE *f = fopen("/lib/x86_64-linux-gnu/libm.so.6", "rb");
  if (!f) cr_skip_test("no /lib/x86_64-linux-gnu/libm.so.6 on this host");
  static uint8_t buf[4 << 20];
  size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  kiln_status_t s = th_compile_status(buf, n, KILN_PAYLOAD_AUTO, "cpu");
  cr_assert(s && strstr(kiln_status_message(s), "must come from kiln"), "%s", s ? kiln_status_message(s) : "accepted");
  kiln_status_free(s);
  s = th_compile_status(buf, 100, KILN_PAYLOAD_CPU_SO, "cpu");
  cr_assert(s && kiln_status_code(s) == KILN_E_COMPILE);
  kiln_status_free(s);
}
