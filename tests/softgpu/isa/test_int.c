/* Integer instructions with the VOP3 clamp bit, in assembly kernels: clamp on the carry-less
 * u32 and u16 adds and subtracts saturates (LLVM selects them for llvm.uadd.sat and
 * llvm.usub.sat: `v_add_u32_e64 v8, v8, -10 clamp` in a strided te convolution); without
 * clamp they wrap; clamp where the interpreter does not model it is refused by name. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "tests/softgpu/isa/asm.h"

static const sg_target_t targets[] = {SG_GFX942, SG_GFX90A};

/* {a, b}: wraps both ways, the edges, equal operands */
static const uint32_t pairs[][2] = {
  {5, 3}, {3, 5}, {0xfffffff0u, 0x10}, {0xfffffff0u, 0x0f}, {0xffffffffu, 0xffffffffu},
  {0, 1}, {0, 0}, {7, 7}, {20, 0xfffffff6u}, {9, 0xfffffff6u}, {0x80000000u, 0x80000000u},
};
enum { N = sizeof(pairs) / sizeof(pairs[0]) };

static sg_status_t run(sg_target_t t, const char *body, uint64_t d[64], sg_report_t *r) {
  sgt_ctx_t ctx;
  sgt_init(&ctx, t);
  sgt_asm_opts_t o = SGT_ASM_DEFAULT;
  sgt_asm_load(&ctx, body, &o);
  uint64_t A[64], B[64], C[64] = {0}, vcc;
  for (int l = 0; l < 64; l++) {
    A[l] = pairs[l < N ? l : 0][0];
    B[l] = pairs[l < N ? l : 0][1];
  }
  sg_status_t st = sgt_asm_run(&ctx, A, B, C, d, &vcc, r);
  sgt_deinit(&ctx);
  return st;
}

Test(softgpu_int, u32_add_sub_clamp_saturates) {
  for (int t = 0; t < 2; t++) {
    uint64_t d[64];
    sg_report_t r;
    /* v8 = a + b, v9 = a - b, each saturated */
    cr_assert_eq(run(targets[t], "v_add_u32_e64 v8, v2, v4 clamp\nv_sub_u32_e64 v9, v2, v4 clamp", d, &r), SG_OK,
                 "%s: %s", sgt_target_name(targets[t]), r.message);
    for (int i = 0; i < N; i++) {
      uint64_t a = pairs[i][0], b = pairs[i][1];
      uint32_t add = a + b > 0xffffffffu ? 0xffffffffu : (uint32_t)(a + b), sub = b > a ? 0 : (uint32_t)(a - b);
      cr_assert_eq((uint32_t)d[i], add, "%s: 0x%x + 0x%x clamp = 0x%x, want 0x%x", sgt_target_name(targets[t]),
                   (unsigned)a, (unsigned)b, (uint32_t)d[i], add);
      cr_assert_eq((uint32_t)(d[i] >> 32), sub, "%s: 0x%x - 0x%x clamp = 0x%x, want 0x%x",
                   sgt_target_name(targets[t]), (unsigned)a, (unsigned)b, (uint32_t)(d[i] >> 32), sub);
    }
    /* subrev (b - a) saturated, and the inline constant form LLVM emits */
    cr_assert_eq(run(targets[t], "v_subrev_u32_e64 v8, v2, v4 clamp\nv_add_u32_e64 v9, v2, -10 clamp", d, &r), SG_OK,
                 "%s: %s", sgt_target_name(targets[t]), r.message);
    for (int i = 0; i < N; i++) {
      uint64_t a = pairs[i][0], b = pairs[i][1];
      uint32_t rev = a > b ? 0 : (uint32_t)(b - a);
      uint32_t k = a + 0xfffffff6u > 0xffffffffu ? 0xffffffffu : (uint32_t)(a + 0xfffffff6u);
      cr_assert_eq((uint32_t)d[i], rev, "%s: subrev(0x%x, 0x%x) clamp", sgt_target_name(targets[t]), (unsigned)a,
                   (unsigned)b);
      cr_assert_eq((uint32_t)(d[i] >> 32), k, "%s: 0x%x + -10 clamp", sgt_target_name(targets[t]), (unsigned)a);
    }
    /* without clamp they wrap */
    cr_assert_eq(run(targets[t], "v_add_u32_e64 v8, v2, v4\nv_sub_u32_e64 v9, v2, v4", d, &r), SG_OK, "%s",
                 r.message);
    for (int i = 0; i < N; i++) {
      cr_assert_eq((uint32_t)d[i], pairs[i][0] + pairs[i][1]);
      cr_assert_eq((uint32_t)(d[i] >> 32), pairs[i][0] - pairs[i][1]);
    }
  }
}

Test(softgpu_int, u16_add_sub_clamp_saturates) {
  for (int t = 0; t < 2; t++) {
    uint64_t d[64];
    sg_report_t r;
    cr_assert_eq(run(targets[t], "v_add_u16_e64 v8, v2, v4 clamp\nv_sub_u16_e64 v9, v2, v4 clamp", d, &r), SG_OK,
                 "%s: %s", sgt_target_name(targets[t]), r.message);
    for (int i = 0; i < N; i++) {
      uint32_t a = pairs[i][0] & 0xffff, b = pairs[i][1] & 0xffff;
      uint32_t add = a + b > 0xffff ? 0xffff : a + b, sub = b > a ? 0 : a - b;
      /* a 16-bit result zeroes the high half (gfx9) */
      cr_assert_eq((uint32_t)d[i], add, "%s: u16 0x%x + 0x%x clamp = 0x%x", sgt_target_name(targets[t]), a, b,
                   (uint32_t)d[i]);
      cr_assert_eq((uint32_t)(d[i] >> 32), sub, "%s: u16 0x%x - 0x%x clamp = 0x%x", sgt_target_name(targets[t]), a,
                   b, (uint32_t)(d[i] >> 32));
    }
  }
}

Test(softgpu_int, clamp_not_modelled_is_refused_by_name) {
  /* the carry-out forms and the other integer operations keep refusing clamp (v_add3_u32 has
   * no clamp bit to set) */
  static const char *bodies[] = {"v_add_co_u32_e64 v8, s[0:1], v2, v4 clamp",
                                 "v_mad_u32_u24 v8, v2, v4, v6 clamp"};
  for (int t = 0; t < 2; t++) {
    for (unsigned k = 0; k < sizeof(bodies) / sizeof(bodies[0]); k++) {
      uint64_t d[64];
      sg_report_t r;
      sg_status_t st = run(targets[t], bodies[k], d, &r);
      cr_assert_neq(st, SG_OK, "%s: %s ran", sgt_target_name(targets[t]), bodies[k]);
      cr_assert(strstr(r.message, "clamp") != NULL, "%s: %s: %s", sgt_target_name(targets[t]), bodies[k],
                r.message);
    }
  }
}
