/* The conformance kernels (tests/device/kernels, built for gfx942 and gfx90a by kiln's compiler)
 * run on the interpreter through the harness and checked against CPU references. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/softgpu/isa/harness.h"

static const sg_target_t targets[] = {SG_GFX942, SG_GFX90A};

static float frand(unsigned *seed) { return (float)((double)rand_r(seed) / RAND_MAX * 2.0 - 1.0); }

Test(softgpu_kernels, vadd) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "vadd");
    enum { N = 1000 };
    static float a[N], b[N], out[N];
    unsigned seed = 1;
    for (int i = 0; i < N; i++) a[i] = frand(&seed), b[i] = frand(&seed);
    uint64_t va = sgt_upload(&c, a, sizeof(a)), vb = sgt_upload(&c, b, sizeof(b));
    uint64_t vc = sgt_alloc(&c, sizeof(out), SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t args[] = {SGA_PTR(va), SGA_PTR(vb), SGA_PTR(vc), SGA_I32(N)};
    uint32_t grid[3] = {(N + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
    sgt_run(&c, "vadd", grid, block, 0, args, 4);
    sgt_download(&c, vc, out, sizeof(out));
    for (int i = 0; i < N; i++)
      cr_assert_eq(out[i], a[i] + b[i], "%s: c[%d] = %a, want %a", sgt_target_name(targets[t]), i, out[i], a[i] + b[i]);
    sgt_deinit(&c);
  }
}

Test(softgpu_kernels, saxpy) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "saxpy");
    enum { N = 777 };
    static float x[N], y[N], out[N];
    unsigned seed = 2;
    for (int i = 0; i < N; i++) x[i] = frand(&seed), y[i] = frand(&seed);
    uint64_t vx = sgt_upload(&c, x, sizeof(x)), vy = sgt_upload(&c, y, sizeof(y));
    sgt_arg_t args[] = {SGA_F32(2.5f), SGA_PTR(vx), SGA_PTR(vy), SGA_I32(N)};
    uint32_t grid[3] = {(N + 63) / 64, 1, 1}, block[3] = {64, 1, 1};
    sgt_run(&c, "saxpy", grid, block, 0, args, 4);
    sgt_download(&c, vy, out, sizeof(out));
    for (int i = 0; i < N; i++) {
      float want = fmaf(2.5f, x[i], y[i]), unfused = 2.5f * x[i] + y[i];
      /* LLVM contracts alpha * x + y into an fma or keeps it; either result is exact here */
      cr_assert(out[i] == want || out[i] == unfused, "%s: y[%d] = %a, want %a", sgt_target_name(targets[t]), i,
                out[i], want);
    }
    sgt_deinit(&c);
  }
}

Test(softgpu_kernels, vadd_partial_groups) {
  /* a grid that is not a multiple of the block: the last group has fewer work-items, its last
   * wave a partial EXEC, and hidden_remainder_x says how many */
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "vadd");
    enum { N = 1000, PAD = 64 };
    static float a[N], b[N], out[N + PAD];
    for (int i = 0; i < N; i++) a[i] = (float)i, b[i] = 0.5f;
    uint64_t va = sgt_upload(&c, a, sizeof(a)), vb = sgt_upload(&c, b, sizeof(b));
    uint64_t vc = sgt_alloc(&c, sizeof(out), SG_ACC_READ | SG_ACC_WRITE);
    /* n larger than the grid: only the launched work-items may write */
    sgt_arg_t args[] = {SGA_PTR(va), SGA_PTR(vb), SGA_PTR(vc), SGA_I32(N)};
    uint32_t items[3] = {N - 77, 1, 1}, block[3] = {256, 1, 1};
    sg_report_t r;
    cr_assert_eq(sgt_launch_items(&c, "vadd", items, block, 0, args, 4, &r), SG_OK, "%s", r.message);
    sgt_download(&c, vc, out, sizeof(out));
    for (int i = 0; i < N; i++) {
      if (i < N - 77) cr_assert_eq(out[i], a[i] + 0.5f, "%s: c[%d]", sgt_target_name(targets[t]), i);
      else {
        uint32_t u;
        memcpy(&u, &out[i], 4);
        cr_assert_eq(u, 0xcdcdcdcdu, "%s: c[%d] written by a work-item outside the grid", sgt_target_name(targets[t]), i);
      }
    }
    sgt_deinit(&c);
  }
}

Test(softgpu_kernels, vadd4) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "vadd4");
    enum { N4 = 300 };
    static float a[4 * N4], b[4 * N4], out[4 * N4];
    unsigned seed = 3;
    for (int i = 0; i < 4 * N4; i++) a[i] = frand(&seed), b[i] = frand(&seed);
    uint64_t va = sgt_upload(&c, a, sizeof(a)), vb = sgt_upload(&c, b, sizeof(b));
    uint64_t vc = sgt_alloc(&c, sizeof(out), SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t args[] = {SGA_PTR(va), SGA_PTR(vb), SGA_PTR(vc), SGA_I32(N4)};
    uint32_t grid[3] = {(N4 + 127) / 128, 1, 1}, block[3] = {128, 1, 1};
    sgt_run(&c, "vadd4", grid, block, 0, args, 4);
    sgt_download(&c, vc, out, sizeof(out));
    for (int i = 0; i < 4 * N4; i++) cr_assert_eq(out[i], a[i] + b[i], "%s: c[%d]", sgt_target_name(targets[t]), i);
    sgt_deinit(&c);
  }
}

Test(softgpu_kernels, tiled_transpose) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "transpose");
    enum { R = 37, C = 53 };
    static float in[R * C], out[C * R];
    for (int i = 0; i < R * C; i++) in[i] = (float)i;
    uint64_t vi = sgt_upload(&c, in, sizeof(in)), vo = sgt_alloc(&c, sizeof(out), SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t args[] = {SGA_PTR(vi), SGA_PTR(vo), SGA_I32(R), SGA_I32(C)};
    uint32_t grid[3] = {(C + 15) / 16, (R + 15) / 16, 1}, block[3] = {16, 16, 1};
    sgt_run(&c, "transpose", grid, block, 0, args, 4);
    sgt_download(&c, vo, out, sizeof(out));
    for (int y = 0; y < R; y++)
      for (int x = 0; x < C; x++)
        cr_assert_eq(out[x * R + y], in[y * C + x], "%s: out[%d][%d]", sgt_target_name(targets[t]), x, y);
    sgt_deinit(&c);
  }
}

Test(softgpu_kernels, block_reduction) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "reduce");
    enum { N = 256 * 9 - 100, G = 9 };
    static int in[N], part[G];
    for (int i = 0; i < N; i++) in[i] = (i * 37) % 1001 - 500;
    uint64_t vi = sgt_upload(&c, in, sizeof(in)), vp = sgt_alloc(&c, sizeof(part), SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t args[] = {SGA_PTR(vi), SGA_PTR(vp), SGA_I32(N)};
    uint32_t grid[3] = {G, 1, 1}, block[3] = {256, 1, 1};
    sgt_run(&c, "reduce_sum", grid, block, 0, args, 3);
    sgt_download(&c, vp, part, sizeof(part));
    for (int g = 0; g < G; g++) {
      int want = 0;
      for (int i = g * 256; i < (g + 1) * 256 && i < N; i++) want += in[i];
      cr_assert_eq(part[g], want, "%s: partial[%d]", sgt_target_name(targets[t]), g);
    }
    sgt_deinit(&c);
  }
}

Test(softgpu_kernels, histogram_with_global_atomics) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "histogram");
    enum { N = 50000, B = 37 };
    static unsigned in[N], bins[B], want[B];
    memset(want, 0, sizeof(want));
    unsigned seed = 4;
    for (int i = 0; i < N; i++) {
      in[i] = (unsigned)rand_r(&seed);
      want[in[i] % B]++;
    }
    uint64_t vi = sgt_upload(&c, in, sizeof(in));
    memset(bins, 0, sizeof(bins));
    uint64_t vb = sgt_upload(&c, bins, sizeof(bins));
    sgt_arg_t args[] = {SGA_PTR(vi), SGA_PTR(vb), SGA_I32(N), SGA_I32(B)};
    uint32_t grid[3] = {(N + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
    sgt_run(&c, "histogram", grid, block, 0, args, 4);
    sgt_download(&c, vb, bins, sizeof(bins));
    for (int b = 0; b < B; b++) cr_assert_eq(bins[b], want[b], "%s: bin %d", sgt_target_name(targets[t]), b);
    sgt_deinit(&c);
  }
}

Test(softgpu_kernels, stencil_5_point) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "stencil");
    enum { W = 45, H = 29 };
    static float in[W * H], out[W * H];
    unsigned seed = 5;
    for (int i = 0; i < W * H; i++) in[i] = frand(&seed);
    uint64_t vi = sgt_upload(&c, in, sizeof(in)), vo = sgt_alloc(&c, sizeof(out), SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t args[] = {SGA_PTR(vi), SGA_PTR(vo), SGA_I32(W), SGA_I32(H)};
    uint32_t grid[3] = {(W + 15) / 16, (H + 15) / 16, 1}, block[3] = {16, 16, 1};
    sgt_run(&c, "stencil5", grid, block, 0, args, 4);
    sgt_download(&c, vo, out, sizeof(out));
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        int i = y * W + x;
        float want = (x == 0 || y == 0 || x == W - 1 || y == H - 1)
                         ? in[i]
                         : 0.5f * in[i] + 0.125f * (in[i - 1] + in[i + 1] + in[i - W] + in[i + W]);
        cr_assert_leq(sgt_ulp_diff(out[i], want), 2, "%s: (%d,%d) = %a, want %a", sgt_target_name(targets[t]), x, y,
                      out[i], want);
      }
    sgt_deinit(&c);
  }
}

typedef struct math_case {
  const char *kernel;
  double (*ref)(double);
  float lo, hi;
  uint32_t ulp;
} math_case_t;

/* the bounds kiln's conformance suite asks of every device */
static const math_case_t math_cases[] = {
  {"math_exp", exp, -80, 80, 3},    {"math_log", log, 1e-30f, 1e30f, 3}, {"math_sqrt", sqrt, 0, 1e30f, 3},
  {"math_tanh", tanh, -10, 10, 5},  {"math_erf", erf, -5, 5, 16},        {"math_sin", sin, -100, 100, 4},
};

Test(softgpu_kernels, math_within_ulp_bounds) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "math");
    enum { N = 8192 };
    static float x[N], y[N];
    for (size_t m = 0; m < sizeof(math_cases) / sizeof(math_cases[0]); m++) {
      const math_case_t *mc = &math_cases[m];
      for (int i = 0; i < N; i++) {
        double u = (double)i / (N - 1);
        x[i] = mc->lo > 0 ? (float)(mc->lo * pow((double)mc->hi / mc->lo, u)) : (float)(mc->lo + (mc->hi - mc->lo) * u);
      }
      uint64_t vx = sgt_upload(&c, x, sizeof(x)), vy = sgt_alloc(&c, sizeof(y), SG_ACC_READ | SG_ACC_WRITE);
      sgt_arg_t args[] = {SGA_PTR(vx), SGA_PTR(vy), SGA_I32(N)};
      uint32_t grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};
      sgt_run(&c, mc->kernel, grid, block, 0, args, 3);
      sgt_download(&c, vy, y, sizeof(y));
      uint32_t worst = 0;
      int wi = 0;
      for (int i = 0; i < N; i++) {
        uint32_t d = sgt_ulp_diff(y[i], (float)mc->ref(x[i]));
        if (d > worst) worst = d, wi = i;
      }
      cr_expect_leq(worst, mc->ulp, "%s: %s(%.9g) = %.9g, want %.9g (%u ulp)", sgt_target_name(targets[t]), mc->kernel,
                    x[wi], y[wi], (float)mc->ref(x[wi]), worst);
    }
    sgt_deinit(&c);
  }
}

Test(softgpu_kernels, int64_indexing) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "index64");
    /* writes straddle byte 2^31 of a buffer just over 2 GiB (lazily zeroed host pages) */
    const uint64_t base = (1ull << 31) - 4096, size = (1ull << 31) + 8192;
    enum { N = 8192 };
    uint64_t vb = sgt_alloc(&c, size, SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t args[] = {SGA_PTR(vb), SGA_I64(base), SGA_I32(N)};
    uint32_t grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};
    sgt_run(&c, "index64", grid, block, 0, args, 3);
    const uint8_t *h = sgt_host(&c, vb);
    for (int i = 0; i < N; i++) cr_assert_eq(h[base + i], (uint8_t)(i * 7 + 1), "%s: byte %d", sgt_target_name(targets[t]), i);
    cr_assert_eq(h[base - 1], 0);
    cr_assert_eq(h[base + N], 0);
    sgt_deinit(&c);
  }
}

Test(softgpu_kernels, many_args) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "many_args");
    enum { PAIRS = 52 };
    static float out[2 * PAIRS];
    uint64_t vo = sgt_alloc(&c, sizeof(out), SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t args[1 + 2 * PAIRS];
    args[0] = SGA_PTR(vo);
    for (int i = 0; i < PAIRS; i++) {
      args[1 + 2 * i] = SGA_I32(i * 3 - 50);
      args[2 + 2 * i] = SGA_F32(0.25f * (float)i + 0.125f);
    }
    uint32_t one[3] = {1, 1, 1};
    sgt_run(&c, "many_args", one, one, 0, args, 1 + 2 * PAIRS);
    sgt_download(&c, vo, out, sizeof(out));
    for (int i = 0; i < PAIRS; i++) {
      cr_assert_eq(out[2 * i], (float)(i * 3 - 50), "%s: i%d", sgt_target_name(targets[t]), i);
      cr_assert_eq(out[2 * i + 1], 0.25f * (float)i + 0.125f, "%s: f%d", sgt_target_name(targets[t]), i);
    }
    sgt_deinit(&c);
  }
}
