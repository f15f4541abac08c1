/* kiln.topi's GPU schedules (te programs lowered by the Python client, built by kiln's compiler
 * for gfx942 and gfx90a) run on the interpreter against references computed here in double:
 * the 256^3 GEMMs (packed-f32 inner loops, LDS tiles, barriers; gfx90a spills to AGPRs and
 * scratch), matmul with partial tiles, conv2d, softmax (three kernels and temporaries) and
 * max pooling. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/softgpu/isa/harness.h"

static const sg_target_t targets[] = {SG_GFX942, SG_GFX90A};

static void fill(float *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (float)((double)rand_r(&seed) / RAND_MAX * 2.0 - 1.0);
}

static uint64_t out_buf(sgt_ctx_t *c, size_t bytes) { return sgt_alloc(c, bytes, SG_ACC_READ | SG_ACC_WRITE); }

/* |got - want| within fp32 accumulation error of a sum of n products of magnitude <= 1 */
static void close_to(const float *got, const double *want, size_t n, double tol, const char *what, sg_target_t t) {
  for (size_t i = 0; i < n; i++)
    cr_assert(fabs((double)got[i] - want[i]) <= tol * (1.0 + fabs(want[i])), "%s on %s: [%zu] = %.9g, want %.9g", what,
              sgt_target_name(t), i, got[i], want[i]);
}

static void matmul_check(sg_target_t t, const char *stem, int M, int N, int K) {
  sgt_ctx_t c;
  sgt_init(&c, t);
  sgt_load_kart(&c, stem);
  float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N), *o = malloc(sizeof(float) * M * N);
  double *want = malloc(sizeof(double) * M * N);
  cr_assert(a && b && o && want);
  fill(a, (size_t)M * K, 21);
  fill(b, (size_t)K * N, 22);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += (double)a[i * K + k] * b[k * N + j];
      want[i * N + j] = s;
    }
  uint64_t va = sgt_upload(&c, a, sizeof(float) * M * K), vb = sgt_upload(&c, b, sizeof(float) * K * N);
  uint64_t vo = out_buf(&c, sizeof(float) * M * N);
  sgt_arg_t args[] = {SGA_PTR(va), SGA_PTR(vb), SGA_PTR(vo)};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  sgt_run_te(&c, stem, args, 3);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  cr_log_info("%s on %s: %llu wave instructions in %.3f s", stem, sgt_target_name(t),
              (unsigned long long)c.last_instructions, s);
  sgt_download(&c, vo, o, sizeof(float) * M * N);
  close_to(o, want, (size_t)M * N, 1e-5 * K, stem, t);
  free(a), free(b), free(o), free(want);
  sgt_deinit(&c);
}

Test(softgpu_topi, gemm_256_default_knobs, .timeout = 300) {
  for (int t = 0; t < 2; t++) matmul_check(targets[t], "gemm256", 256, 256, 256);
}

Test(softgpu_topi, gemm_256_small_tiles, .timeout = 300) {
  for (int t = 0; t < 2; t++) matmul_check(targets[t], "gemm256_small", 256, 256, 256);
}

Test(softgpu_topi, matmul_partial_tiles) {
  for (int t = 0; t < 2; t++) matmul_check(targets[t], "topi_matmul", 67, 45, 77);
}

Test(softgpu_topi, conv2d) {
  enum { NB = 2, C = 5, H = 13, W = 11, O = 7, KH = 3, KW = 3 };
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "topi_conv2d");
    static float x[NB * C * H * W], w[O * C * KH * KW], o[NB * O * H * W];
    static double want[NB * O * H * W];
    fill(x, sizeof(x) / 4, 31);
    fill(w, sizeof(w) / 4, 32);
    /* stride 1, padding 1, dilation 1 */
    for (int n = 0; n < NB; n++)
      for (int oc = 0; oc < O; oc++)
        for (int y = 0; y < H; y++)
          for (int xx = 0; xx < W; xx++) {
            double s = 0;
            for (int ic = 0; ic < C; ic++)
              for (int ky = 0; ky < KH; ky++)
                for (int kx = 0; kx < KW; kx++) {
                  int iy = y + ky - 1, ix = xx + kx - 1;
                  if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                  s += (double)x[((n * C + ic) * H + iy) * W + ix] * w[((oc * C + ic) * KH + ky) * KW + kx];
                }
            want[((n * O + oc) * H + y) * W + xx] = s;
          }
    uint64_t vx = sgt_upload(&c, x, sizeof(x)), vw = sgt_upload(&c, w, sizeof(w)), vo = out_buf(&c, sizeof(o));
    sgt_arg_t args[] = {SGA_PTR(vx), SGA_PTR(vw), SGA_PTR(vo)};
    sgt_run_te(&c, "topi_conv2d", args, 3);
    sgt_download(&c, vo, o, sizeof(o));
    close_to(o, want, sizeof(o) / 4, 1e-5 * C * KH * KW, "conv2d", targets[t]);
    sgt_deinit(&c);
  }
}

Test(softgpu_topi, softmax_three_kernels) {
  enum { R = 9, L = 37 };
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "topi_softmax");
    static float x[R * L], o[R * L];
    static double want[R * L];
    fill(x, R * L, 41);
    for (int i = 0; i < R * L; i++) x[i] *= 4.0f;
    for (int r = 0; r < R; r++) {
      double m = -INFINITY, s = 0;
      for (int j = 0; j < L; j++) m = fmax(m, x[r * L + j]);
      for (int j = 0; j < L; j++) s += exp(x[r * L + j] - m);
      for (int j = 0; j < L; j++) want[r * L + j] = exp(x[r * L + j] - m) / s;
    }
    uint64_t vx = sgt_upload(&c, x, sizeof(x)), vo = out_buf(&c, sizeof(o));
    uint64_t vmax = out_buf(&c, R * 4), vsum = out_buf(&c, R * 4);
    sgt_arg_t args[] = {SGA_PTR(vx), SGA_PTR(vo), SGA_PTR(vmax), SGA_PTR(vsum)};
    sgt_run_te(&c, "topi_softmax_kernel0", args, 4);
    sgt_run_te(&c, "topi_softmax_kernel1", args, 4);
    sgt_run_te(&c, "topi_softmax_kernel2", args, 4);
    sgt_download(&c, vo, o, sizeof(o));
    close_to(o, want, R * L, 1e-5, "softmax", targets[t]);
    sgt_deinit(&c);
  }
}

Test(softgpu_topi, max_pool) {
  enum { NB = 2, C = 3, H = 11, W = 14, K = 3, S = 2, P = 1, OH = (H + 2 * P - K) / S + 1, OW = (W + 2 * P - K) / S + 1 };
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "topi_max_pool");
    static float x[NB * C * H * W], o[NB * C * OH * OW];
    static double want[NB * C * OH * OW];
    fill(x, sizeof(x) / 4, 51);
    for (int n = 0; n < NB * C; n++)
      for (int y = 0; y < OH; y++)
        for (int xx = 0; xx < OW; xx++) {
          double m = -INFINITY;
          for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
              int iy = y * S + ky - P, ix = xx * S + kx - P;
              if (iy >= 0 && iy < H && ix >= 0 && ix < W) m = fmax(m, x[(n * H + iy) * W + ix]);
            }
          want[(n * OH + y) * OW + xx] = m;
        }
    uint64_t vx = sgt_upload(&c, x, sizeof(x)), vo = out_buf(&c, sizeof(o));
    sgt_arg_t args[] = {SGA_PTR(vx), SGA_PTR(vo)};
    sgt_run_te(&c, "topi_max_pool", args, 2);
    sgt_download(&c, vo, o, sizeof(o));
    close_to(o, want, sizeof(o) / 4, 0, "max_pool", targets[t]);
    sgt_deinit(&c);
  }
}
