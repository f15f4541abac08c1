/* Single instructions in assembly kernels, against values the ISA defines: the class mask,
 * frexp, ldexp, med3, fract, div_fixup, conversions, the denormal and rounding modes of the
 * kernel descriptor, the transcendental unit's denormal flush (and its jitter when
 * SOFTGPU_JITTER is set), packed f32 with op_sel, VGPR indexing, lane moves and AGPRs.
 * The division sequences themselves run as LLVM emits them (kernels/arith.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/softgpu/isa/asm.h"

static const sg_target_t targets[] = {SG_GFX942, SG_GFX90A};

static uint32_t fu(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float uf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Assembles body with opts, runs it with a/b/c (lanes beyond n repeat lane 0), returns d. */
static void run(sg_target_t t, const char *body, sgt_asm_opts_t o, const uint64_t *a, const uint64_t *b,
                const uint64_t *c, int n, uint64_t d[64], uint64_t *vcc) {
  sgt_ctx_t ctx;
  sgt_init(&ctx, t);
  sgt_asm_load(&ctx, body, &o);
  uint64_t A[64], B[64], C[64], v;
  for (int l = 0; l < 64; l++) {
    int s = l < n ? l : 0;
    A[l] = a ? a[s] : 0;
    B[l] = b ? b[s] : 0;
    C[l] = c ? c[s] : 0;
  }
  sg_report_t r;
  sg_status_t st = sgt_asm_run(&ctx, A, B, C, d, vcc ? vcc : &v, &r);
  cr_assert_eq(st, SG_OK, "%s: %s", sgt_target_name(t), r.message);
  sgt_deinit(&ctx);
}

static bool jitter_on(void) { return getenv("SOFTGPU_JITTER") && *getenv("SOFTGPU_JITTER"); }

Test(softgpu_fp, class_mask) {
  static const uint32_t vals[10] = {0x7f800001, 0x7fc00000, 0xff800000, 0xbf800000, 0x80000001,
                                    0x80000000, 0x00000000, 0x00000001, 0x3f800000, 0x7f800000};
  for (int t = 0; t < 2; t++) {
    for (int k = 0; k < 10; k++) {
      uint64_t a[10], b[10], d[64], vcc;
      for (int i = 0; i < 10; i++) a[i] = vals[i], b[i] = 1u << k;
      run(targets[t], "v_cmp_class_f32_e64 vcc, v2, v4", SGT_ASM_DEFAULT, a, b, NULL, 10, d, &vcc);
      for (int i = 0; i < 10; i++)
        cr_assert_eq((vcc >> i) & 1, (uint64_t)(i == k), "%s: class(0x%08x) bit %d", sgt_target_name(targets[t]),
                     vals[i], k);
    }
  }
}

Test(softgpu_fp, frexp_and_ldexp) {
  static const float xs[] = {1.0f, 3.0f, -0.0f, 1e30f, -7.5e-3f, 0x1p-149f, 0x1.8p-140f, INFINITY, -INFINITY, NAN};
  enum { N = sizeof(xs) / sizeof(xs[0]) };
  for (int t = 0; t < 2; t++) {
    uint64_t a[N], d[64];
    for (int i = 0; i < N; i++) a[i] = fu(xs[i]);
    run(targets[t], "v_frexp_mant_f32_e32 v8, v2\nv_frexp_exp_i32_f32_e32 v9, v2", SGT_ASM_DEFAULT, a, NULL, NULL, N,
        d, NULL);
    for (int i = 0; i < N; i++) {
      uint32_t mant = (uint32_t)d[i], ex = (uint32_t)(d[i] >> 32);
      if (isinf(xs[i]) || isnan(xs[i])) {
        /* inf and NaN: the mantissa is the input (NaN quieted), the exponent 0 */
        cr_assert(isnan(xs[i]) ? isnan(uf(mant)) : mant == fu(xs[i]), "%s: frexp_mant(%g)", sgt_target_name(targets[t]), xs[i]);
        cr_assert_eq(ex, 0u);
      } else {
        int e;
        float m = frexpf(xs[i], &e);
        cr_assert_eq(mant, fu(m), "%s: frexp_mant(%a) = %a", sgt_target_name(targets[t]), xs[i], uf(mant));
        cr_assert_eq((int)ex, e, "%s: frexp_exp(%a) = %d", sgt_target_name(targets[t]), xs[i], (int)ex);
      }
    }
    /* ldexp: overflow to inf, the smallest denormal, ties to even below it */
    static const float ls[] = {1.0f, 1.0f, 1.0f, 1.0f, 1.5f, 3.0f, -1.0f, 0x1p-149f, 1.0f, 5.0f};
    static const int es[] = {127, 128, -149, -150, -149, -150, 1 << 30, 149, -(1 << 30), 0};
    enum { M = sizeof(ls) / sizeof(ls[0]) };
    uint64_t x[M], e[M];
    for (int i = 0; i < M; i++) x[i] = fu(ls[i]), e[i] = (uint32_t)es[i];
    run(targets[t], "v_ldexp_f32 v8, v2, v4", SGT_ASM_DEFAULT, x, e, NULL, M, d, NULL);
    for (int i = 0; i < M; i++)
      cr_assert_eq((uint32_t)d[i], fu(ldexpf(ls[i], es[i])), "%s: ldexp(%a, %d) = %a", sgt_target_name(targets[t]),
                   ls[i], es[i], uf((uint32_t)d[i]));
  }
}

Test(softgpu_fp, med3_min_max_ieee) {
  const uint32_t qn = 0x7fc00000, sn = 0x7f800001;
  /* {a, b, c, want}: the middle value; with a NaN the ISA takes min3, where IEEE mode returns
   * a signalling NaN quieted and a quiet NaN loses to a number */
  uint32_t tab[][4] = {
    {fu(1), fu(2), fu(3), fu(2)},   {fu(3), fu(2), fu(1), fu(2)}, {fu(2), fu(3), fu(1), fu(2)},
    {fu(-1), fu(-1), fu(5), fu(-1)}, {qn, fu(1), fu(2), fu(1)},    {fu(1), qn, fu(2), fu(1)},
    {fu(1), fu(2), qn, fu(1)},       {sn, fu(1), fu(2), fu(2)},    {fu(-4), fu(9), fu(0.5f), fu(0.5f)},
  };
  enum { N = sizeof(tab) / sizeof(tab[0]) };
  for (int t = 0; t < 2; t++) {
    uint64_t a[N], b[N], c[N], d[64];
    for (int i = 0; i < N; i++) a[i] = tab[i][0], b[i] = tab[i][1], c[i] = tab[i][2];
    run(targets[t], "v_med3_f32 v8, v2, v4, v6", SGT_ASM_DEFAULT, a, b, c, N, d, NULL);
    for (int i = 0; i < N; i++)
      cr_assert_eq((uint32_t)d[i], tab[i][3], "%s: med3(0x%x, 0x%x, 0x%x) = 0x%x, want 0x%x",
                   sgt_target_name(targets[t]), tab[i][0], tab[i][1], tab[i][2], (uint32_t)d[i], tab[i][3]);
    /* v_max_f32: a signalling NaN comes back quiet; +0 is above -0 */
    uint64_t x[3] = {sn, fu(-0.0f), fu(2)}, y[3] = {fu(1), fu(0.0f), qn};
    run(targets[t], "v_max_f32_e32 v8, v2, v4", SGT_ASM_DEFAULT, x, y, NULL, 3, d, NULL);
    cr_assert_eq((uint32_t)d[0], 0x7fc00001u);
    cr_assert_eq((uint32_t)d[1], fu(0.0f));
    cr_assert_eq((uint32_t)d[2], fu(2));
  }
}

Test(softgpu_fp, fract_and_conversions) {
  static const float xs[] = {1.25f, -1.25f, -1e-30f, 0.0f, INFINITY, -INFINITY, NAN, 1e20f, 3e9f, -3e9f, -1.9f};
  enum { N = sizeof(xs) / sizeof(xs[0]) };
  for (int t = 0; t < 2; t++) {
    uint64_t a[N], d[64];
    for (int i = 0; i < N; i++) a[i] = fu(xs[i]);
    run(targets[t], "v_fract_f32_e32 v8, v2\nv_cvt_i32_f32_e32 v9, v2", SGT_ASM_DEFAULT, a, NULL, NULL, N, d, NULL);
    const uint32_t fract_want[N] = {fu(0.25f), fu(0.75f), 0x3f7fffffu, 0, 0x7fc00000u, 0x7fc00000u, 0x7fc00000u, 0,
                                    0, 0, fu(0.100000024f)};
    const int32_t cvt_want[N] = {1, -1, 0, 0, INT32_MAX, INT32_MIN, 0, INT32_MAX, INT32_MAX, INT32_MIN, -1};
    for (int i = 0; i < N; i++) {
      cr_assert_eq((uint32_t)d[i], fract_want[i], "%s: fract(%g) = 0x%08x", sgt_target_name(targets[t]), xs[i],
                   (uint32_t)d[i]);
      cr_assert_eq((int32_t)(d[i] >> 32), cvt_want[i], "%s: cvt_i32(%g) = %d", sgt_target_name(targets[t]), xs[i],
                   (int32_t)(d[i] >> 32));
    }
  }
}

Test(softgpu_fp, div_fixup_special_cases) {
  const uint32_t inf = 0x7f800000, qn = 0x7fc00000;
  /* {quotient estimate, denominator, numerator, want} */
  uint32_t tab[][4] = {
    {fu(1), 0, 0, 0xffc00000u},             {fu(1), 0, fu(1), inf},          {fu(1), 0, fu(-1), inf | 0x80000000u},
    {fu(1), inf, inf, 0xffc00000u},         {fu(5), inf, fu(1), 0},          {fu(3), fu(2), fu(6), fu(3)},
    {fu(3), fu(-2), fu(6), fu(-3)},          {fu(1), fu(1), 0x7f800001u, 0x7fc00001u}, {fu(1), qn, fu(2), qn},
    {qn, fu(1e-20f), fu(1e20f), inf},        {fu(7), fu(0x1p100f), fu(0x1p-60f), 0},
  };
  enum { N = sizeof(tab) / sizeof(tab[0]) };
  for (int t = 0; t < 2; t++) {
    uint64_t a[N], b[N], c[N], d[64];
    for (int i = 0; i < N; i++) a[i] = tab[i][0], b[i] = tab[i][1], c[i] = tab[i][2];
    run(targets[t], "v_div_fixup_f32 v8, v2, v4, v6", SGT_ASM_DEFAULT, a, b, c, N, d, NULL);
    for (int i = 0; i < N; i++)
      cr_assert_eq((uint32_t)d[i], tab[i][3], "%s: case %d: div_fixup = 0x%08x, want 0x%08x",
                   sgt_target_name(targets[t]), i, (uint32_t)d[i], tab[i][3]);
  }
}

Test(softgpu_fp, denormal_modes_from_the_descriptor) {
  /* x2 of a denormal (input flush decides) and x0.5 of the smallest normal (output flush) */
  uint64_t a[4] = {0x00400000, 0x80400000, 0x00800000, 0x80800000};
  uint64_t b[4] = {fu(2.0f), fu(2.0f), fu(0.5f), fu(0.5f)};
  for (int t = 0; t < 2; t++) {
    for (int mode = 0; mode < 4; mode++) {
      bool flush_in = (mode & 1) == 0, flush_out = mode < 2;
      uint64_t d[64];
      sgt_asm_opts_t o = SGT_ASM_DEFAULT;
      o.denorm32 = mode;
      run(targets[t], "v_mul_f32_e32 v8, v2, v4", o, a, b, NULL, 4, d, NULL);
      uint32_t want[4] = {flush_in ? 0u : 0x00800000u, flush_in ? 0x80000000u : 0x80800000u,
                          flush_out ? 0u : 0x00400000u, flush_out ? 0x80000000u : 0x80400000u};
      for (int i = 0; i < 4; i++)
        cr_assert_eq((uint32_t)d[i], want[i], "%s: mode %d, case %d: 0x%08x, want 0x%08x", sgt_target_name(targets[t]),
                     mode, i, (uint32_t)d[i], want[i]);
    }
  }
}

Test(softgpu_fp, rounding_mode_from_the_descriptor) {
  uint64_t a[2] = {fu(1.0f), fu(-1.0f)}, b[2] = {fu(0x1.8p-24f), fu(-0x1.8p-24f)};
  for (int t = 0; t < 2; t++) {
    uint64_t d[64];
    run(targets[t], "v_add_f32_e32 v8, v2, v4", SGT_ASM_DEFAULT, a, b, NULL, 2, d, NULL);
    cr_assert_eq((uint32_t)d[0], fu(0x1.000002p0f), "%s: nearest even", sgt_target_name(targets[t]));
    cr_assert_eq((uint32_t)d[1], fu(-0x1.000002p0f));
    sgt_asm_opts_t o = SGT_ASM_DEFAULT;
    o.round32 = 3; /* toward zero */
    run(targets[t], "v_add_f32_e32 v8, v2, v4", o, a, b, NULL, 2, d, NULL);
    cr_assert_eq((uint32_t)d[0], fu(1.0f), "%s: toward zero", sgt_target_name(targets[t]));
    cr_assert_eq((uint32_t)d[1], fu(-1.0f));
  }
}

/* The transcendental unit flushes denormal inputs and outputs whatever the mode says; its
 * results are correctly rounded, or within 1 ulp of that with SOFTGPU_JITTER. */
Test(softgpu_fp, transcendentals) {
  struct { const char *op; float x; uint32_t want; bool exactly; } tab[] = {
    {"v_rcp_f32_e32", 0x1p-149f, 0x7f800000u, true},  {"v_rcp_f32_e32", -0x1p-149f, 0xff800000u, true},
    {"v_rcp_f32_e32", 0x1p127f, 0u, true},            {"v_rcp_f32_e32", 3.0f, 0x3eaaaaabu, false},
    {"v_exp_f32_e32", -130.0f, 0u, true},             {"v_exp_f32_e32", 0.5f, 0x3fb504f3u, false},
    {"v_sqrt_f32_e32", 0x1p-140f, 0u, true},          {"v_sqrt_f32_e32", -0.0f, 0x80000000u, true},
    {"v_sqrt_f32_e32", 2.0f, 0x3fb504f3u, false},     {"v_log_f32_e32", 0x1p-130f, 0xff800000u, true},
    {"v_log_f32_e32", 10.0f, 0x40549a78u, false},     {"v_rsq_f32_e32", 4.0f, 0x3f000000u, false},
    {"v_sin_f32_e32", 0.25f, 0x3f800000u, false},     {"v_cos_f32_e32", 0.5f, 0xbf800000u, false},
  };
  enum { N = sizeof(tab) / sizeof(tab[0]) };
  for (int t = 0; t < 2; t++) {
    for (int i = 0; i < N; i++) {
      char body[64];
      snprintf(body, sizeof(body), "%s v8, v2", tab[i].op);
      uint64_t a[1] = {fu(tab[i].x)}, d[64];
      run(targets[t], body, SGT_ASM_DEFAULT, a, NULL, NULL, 1, d, NULL);
      uint32_t got = (uint32_t)d[0];
      if (tab[i].exactly || !jitter_on())
        cr_assert_eq(got, tab[i].want, "%s: %s(%a) = 0x%08x, want 0x%08x", sgt_target_name(targets[t]), tab[i].op,
                     tab[i].x, got, tab[i].want);
      else
        cr_assert(got + 1 - tab[i].want <= 2, "%s: %s(%a) = 0x%08x, more than 1 ulp from 0x%08x",
                  sgt_target_name(targets[t]), tab[i].op, tab[i].x, got, tab[i].want);
    }
    if (jitter_on()) {
      /* the jitter moves some of 64 different inputs */
      uint64_t a[64], d[64];
      for (int l = 0; l < 64; l++) a[l] = fu(1.0f + (float)l / 64.0f);
      run(targets[t], "v_exp_f32_e32 v8, v2", SGT_ASM_DEFAULT, a, NULL, NULL, 64, d, NULL);
      int moved = 0;
      for (int l = 0; l < 64; l++) {
        uint32_t exact = fu((float)exp2((double)uf((uint32_t)a[l])));
        uint32_t got = (uint32_t)d[l];
        cr_assert(got + 1 - exact <= 2, "exp2 jitter beyond 1 ulp");
        moved += got != exact;
      }
      cr_assert_gt(moved, 0, "SOFTGPU_JITTER is set but no result moved");
    }
  }
}

Test(softgpu_fp, packed_f32_with_op_sel) {
  for (int t = 0; t < 2; t++) {
    uint64_t a[1] = {(uint64_t)fu(3.0f) << 32 | fu(2.0f)}, b[1] = {(uint64_t)fu(7.0f) << 32 | fu(5.0f)};
    uint64_t c[1] = {(uint64_t)fu(100.0f) << 32 | fu(10.0f)}, d[64];
    /* lo = a.hi * b.lo + c.lo; hi = a.hi * b.hi - c.hi */
    run(targets[t], "v_pk_fma_f32 v[8:9], v[2:3], v[4:5], v[6:7] op_sel:[1,0,0] op_sel_hi:[1,1,1] neg_hi:[0,0,1]",
        SGT_ASM_DEFAULT, a, b, c, 1, d, NULL);
    cr_assert_eq((uint32_t)d[0], fu(3.0f * 5.0f + 10.0f), "%s: lo %g", sgt_target_name(targets[t]), uf((uint32_t)d[0]));
    cr_assert_eq((uint32_t)(d[0] >> 32), fu(3.0f * 7.0f - 100.0f), "%s: hi %g", sgt_target_name(targets[t]),
                 uf((uint32_t)(d[0] >> 32)));
    /* a broadcast of the low half (op_sel_hi 0) and an inline constant in both halves */
    run(targets[t], "v_pk_mul_f32 v[8:9], v[2:3], 1.0 op_sel_hi:[0,1]", SGT_ASM_DEFAULT, a, b, c, 1, d, NULL);
    cr_assert_eq(d[0], (uint64_t)fu(2.0f) << 32 | fu(2.0f), "%s: 0x%016llx", sgt_target_name(targets[t]),
                 (unsigned long long)d[0]);
    /* v_pk_mov_b32 copies a pair with op_sel:[0,1] */
    run(targets[t], "v_pk_mov_b32 v[8:9], v[2:3], v[4:5] op_sel:[1,1]", SGT_ASM_DEFAULT, a, b, c, 1, d, NULL);
    cr_assert_eq(d[0], (uint64_t)fu(7.0f) << 32 | fu(3.0f));
  }
}

Test(softgpu_fp, vgpr_indexing_lanes_and_agprs) {
  for (int t = 0; t < 2; t++) {
    uint64_t a[64], b[64], d[64];
    for (int l = 0; l < 64; l++) a[l] = 1000 + l, b[l] = 2000 + l;
    /* SRC0 indexed by 2: v2 reads v4; then DST indexed by 6: v2 writes v8 */
    run(targets[t],
        "s_mov_b32 s20, 2\ns_set_gpr_idx_on s20, gpr_idx(SRC0)\nv_mov_b32_e32 v9, v2\ns_set_gpr_idx_off\n"
        "s_mov_b32 s20, 6\ns_set_gpr_idx_on s20, gpr_idx(DST)\nv_mov_b32_e32 v2, v2\ns_set_gpr_idx_off",
        SGT_ASM_DEFAULT, a, b, NULL, 64, d, NULL);
    for (int l = 0; l < 64; l++) {
      cr_assert_eq((uint32_t)(d[l] >> 32), 2000u + l, "%s: indexed source, lane %d", sgt_target_name(targets[t]), l);
      cr_assert_eq((uint32_t)d[l], 1000u + l, "%s: indexed destination, lane %d", sgt_target_name(targets[t]), l);
    }
    run(targets[t],
        "v_readlane_b32 s20, v2, 5\nv_mov_b32_e32 v8, s20\ns_movk_i32 s21, 0x4d\nv_writelane_b32 v8, s21, 7\n"
        "v_accvgpr_write_b32 a3, v4\nv_accvgpr_read_b32 v9, a3",
        SGT_ASM_DEFAULT, a, b, NULL, 64, d, NULL);
    for (int l = 0; l < 64; l++) {
      cr_assert_eq((uint32_t)d[l], l == 7 ? 0x4du : 1005u, "%s: readlane/writelane, lane %d", sgt_target_name(targets[t]), l);
      cr_assert_eq((uint32_t)(d[l] >> 32), 2000u + l, "%s: AGPR round trip, lane %d", sgt_target_name(targets[t]), l);
    }
  }
}

/* ---- LLVM's own expansions, compiled by kiln (kernels/arith.c) ------------------------------ */

static const uint32_t hard_f32[] = {
  0x00000001, 0x00800000, 0x007fffff, 0x7f7fffff, 0x3f800000, 0x40490fdb, 0x1e3ce508, 0x5f5e1000,
  0x0da24260, 0x72c2b88a, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x00000000, 0x33d6bf95,
};

Test(softgpu_fp, division_sequences_are_correctly_rounded) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "arith");
    enum { N = 4096 };
    static float a[N], b[N], q[N];
    unsigned seed = 9;
    for (int i = 0; i < N; i++) {
      if (i < 256) {
        a[i] = uf(hard_f32[i % 16]);
        b[i] = uf(hard_f32[i / 16]);
      } else {
        /* random bit patterns: every exponent, denormals included (NaN inputs skipped) */
        do a[i] = uf((uint32_t)rand_r(&seed) * 2654435761u); while (isnan(a[i]));
        do b[i] = uf((uint32_t)rand_r(&seed) * 2246822519u); while (isnan(b[i]));
      }
    }
    uint64_t va = sgt_upload(&c, a, sizeof(a)), vb = sgt_upload(&c, b, sizeof(b));
    uint64_t vq = sgt_alloc(&c, sizeof(q), SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t args[] = {SGA_PTR(va), SGA_PTR(vb), SGA_PTR(vq), SGA_I32(N)};
    uint32_t grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};
    sgt_run(&c, "fdiv", grid, block, 0, args, 4);
    sgt_download(&c, vq, q, sizeof(q));
    for (int i = 0; i < N; i++) {
      float want = a[i] / b[i];
      cr_assert(fu(q[i]) == fu(want) || (isnan(q[i]) && isnan(want)), "%s: %a / %a = %a, want %a",
                sgt_target_name(targets[t]), a[i], b[i], q[i], want);
    }
    /* f64 and integer division */
    static double da[N], db[N], dq[N];
    static int ia[N], ib[N], iq[N], ir[N];
    static unsigned long long ua[N], ub[N], uq[N];
    for (int i = 0; i < N; i++) {
      uint64_t x = ((uint64_t)rand_r(&seed) << 33) ^ ((uint64_t)rand_r(&seed) << 11) ^ (uint64_t)rand_r(&seed);
      uint64_t y = ((uint64_t)rand_r(&seed) << 35) ^ ((uint64_t)rand_r(&seed) << 9) ^ (uint64_t)rand_r(&seed);
      memcpy(&da[i], &x, 8);
      memcpy(&db[i], &y, 8);
      if (isnan(da[i])) da[i] = 1.0;
      if (isnan(db[i])) db[i] = 3.0;
      ia[i] = rand_r(&seed) - RAND_MAX / 2;
      ib[i] = (rand_r(&seed) % 2001 - 1000) >> (i % 8);
      if (ib[i] == 0) ib[i] = 7;
      ua[i] = x;
      ub[i] = (y >> (i % 60)) | 1;
    }
    uint64_t vda = sgt_upload(&c, da, sizeof(da)), vdb = sgt_upload(&c, db, sizeof(db));
    uint64_t vdq = sgt_alloc(&c, sizeof(dq), SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t dargs[] = {SGA_PTR(vda), SGA_PTR(vdb), SGA_PTR(vdq), SGA_I32(N)};
    sgt_run(&c, "ddiv", grid, block, 0, dargs, 4);
    sgt_download(&c, vdq, dq, sizeof(dq));
    for (int i = 0; i < N; i++) {
      double want = da[i] / db[i];
      cr_assert(memcmp(&dq[i], &want, 8) == 0 || (isnan(dq[i]) && isnan(want)), "%s: %a / %a = %a, want %a",
                sgt_target_name(targets[t]), da[i], db[i], dq[i], want);
    }
    uint64_t via = sgt_upload(&c, ia, sizeof(ia)), vib = sgt_upload(&c, ib, sizeof(ib));
    uint64_t viq = sgt_alloc(&c, sizeof(iq), SG_ACC_READ | SG_ACC_WRITE), vir = sgt_alloc(&c, sizeof(ir), SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t iargs[] = {SGA_PTR(via), SGA_PTR(vib), SGA_PTR(viq), SGA_PTR(vir), SGA_I32(N)};
    sgt_run(&c, "idivrem", grid, block, 0, iargs, 5);
    sgt_download(&c, viq, iq, sizeof(iq));
    sgt_download(&c, vir, ir, sizeof(ir));
    for (int i = 0; i < N; i++) {
      cr_assert_eq(iq[i], ia[i] / ib[i], "%s: %d / %d = %d", sgt_target_name(targets[t]), ia[i], ib[i], iq[i]);
      cr_assert_eq(ir[i], ia[i] % ib[i], "%s: %d %% %d = %d", sgt_target_name(targets[t]), ia[i], ib[i], ir[i]);
    }
    uint64_t vua = sgt_upload(&c, ua, sizeof(ua)), vub = sgt_upload(&c, ub, sizeof(ub));
    uint64_t vuq = sgt_alloc(&c, sizeof(uq), SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t uargs[] = {SGA_PTR(vua), SGA_PTR(vub), SGA_PTR(vuq), SGA_I32(N)};
    sgt_run(&c, "udiv64", grid, block, 0, uargs, 4);
    sgt_download(&c, vuq, uq, sizeof(uq));
    for (int i = 0; i < N; i++)
      cr_assert_eq(uq[i], ua[i] / ub[i], "%s: %llu / %llu = %llu", sgt_target_name(targets[t]), ua[i], ub[i], uq[i]);
    sgt_deinit(&c);
  }
}

/* frexp and ldexp have assembly tests above: kernels may not call llvm.frexp/llvm.ldexp */
Test(softgpu_fp, clamp_round_class_compiled) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "arith");
    enum { N = 1024 };
    static float x[N], y[4 * N];
    unsigned seed = 11;
    for (int i = 0; i < N; i++) x[i] = i < 16 ? uf(hard_f32[i]) : uf((uint32_t)rand_r(&seed) * 2654435761u);
    uint64_t vx = sgt_upload(&c, x, sizeof(x)), vy = sgt_alloc(&c, sizeof(y), SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t args[] = {SGA_PTR(vx), SGA_PTR(vy), SGA_I32(N)};
    uint32_t grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};
    sgt_run(&c, "fmisc", grid, block, 0, args, 3);
    sgt_download(&c, vy, y, sizeof(y));
    for (int i = 0; i < N; i++) {
      /* llvm.maxnum returns the number for any NaN (glibc's fmaxf answers NaN for a signalling one) */
      float clamp = isnan(x[i]) ? -1.5f : fminf(fmaxf(x[i], -1.5f), 2.0f);
      float want[4] = {clamp, floorf(x[i]), rintf(x[i]) + truncf(x[i]), (isnan(x[i]) || isinf(x[i])) ? 1.0f : 0.0f};
      for (int j = 0; j < 4; j++)
        cr_assert(fu(y[4 * i + j]) == fu(want[j]) || (isnan(y[4 * i + j]) && isnan(want[j])),
                  "%s: x = %a: result %d = %a, want %a", sgt_target_name(targets[t]), x[i], j, y[4 * i + j], want[j]);
    }
    sgt_deinit(&c);
  }
}
