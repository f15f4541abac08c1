/* The conformance suite: the same kernels (tests/device/kernels/, portable dialect, built
 * by the real compiler for each target) on every backend present, each result checked
 * against a reference computed here on the host. A backend without a device is skipped
 * with its probe's reason. Runs standalone: see tests/device/README.md. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conformance.h"
#include "device/timing.h"

#define PARAMS(name)                                             \
  ParameterizedTestParameters(conformance, name) {               \
    size_t n;                                                    \
    conf_param_t *p = conf_params(&n);                           \
    return cr_make_param_array(conf_param_t, p, n);              \
  }

/* A deterministic pseudo-random float in [lo, hi). */
static float frand(uint32_t *state, float lo, float hi) {
  *state = *state * 1664525u + 1013904223u;
  return lo + (hi - lo) * (float)(*state >> 8) / (float)(1u << 24);
}

static const uint32_t ONE[3] = {1, 1, 1};

PARAMS(vector_add)
ParameterizedTest(conf_param_t *p, conformance, vector_add) {
  conf_t c;
  conf_open(&c, p->kind);
  conf_load(&c, "vadd");
  enum { N = 1 << 20 };
  float *a = malloc(N * 4), *b = malloc(N * 4), *out = malloc(N * 4);
  uint32_t st = 1;
  for (int i = 0; i < N; i++) a[i] = frand(&st, -1e3f, 1e3f), b[i] = frand(&st, -1e3f, 1e3f);
  kiln_dmem_t *da = conf_upload(&c, a, N * 4), *db = conf_upload(&c, b, N * 4), *dc = conf_alloc(&c, N * 4);
  kiln_launch_arg_t args[] = {conf_tensor(&c, da), conf_tensor(&c, db), conf_tensor(&c, dc), conf_int(N)};
  uint32_t grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};
  conf_run(&c, "vadd", grid, block, 0, args, 4);
  conf_download(&c, dc, out, N * 4);
  for (int i = 0; i < N; i++) cr_assert_eq(out[i], a[i] + b[i], "c[%d] = %g, want %g", i, out[i], a[i] + b[i]);
  free(a), free(b), free(out);
  conf_close(&c);
}

PARAMS(saxpy_scalar_argument)
ParameterizedTest(conf_param_t *p, conformance, saxpy_scalar_argument) {
  conf_t c;
  conf_open(&c, p->kind);
  conf_load(&c, "saxpy");
  enum { N = 100000 };
  static float x[N], y[N], out[N];
  uint32_t st = 2;
  for (int i = 0; i < N; i++) x[i] = frand(&st, -10, 10), y[i] = frand(&st, -10, 10);
  kiln_dmem_t *dx = conf_upload(&c, x, sizeof x), *dy = conf_upload(&c, y, sizeof y);
  const float alpha = 2.5f;
  kiln_launch_arg_t args[] = {conf_float(alpha), conf_tensor(&c, dx), conf_tensor(&c, dy), conf_int(N)};
  uint32_t grid[3] = {(N + 127) / 128, 1, 1}, block[3] = {128, 1, 1};
  conf_run(&c, "saxpy", grid, block, 0, args, 4);
  conf_download(&c, dy, out, sizeof out);
  /* A fused multiply-add may or may not be used: allow its one rounding of difference. */
  for (int i = 0; i < N; i++) {
    float want = fmaf(alpha, x[i], y[i]);
    cr_assert_leq(conf_ulp_diff(out[i], want), 1, "y[%d] = %.9g, want %.9g", i, out[i], want);
  }
  conf_close(&c);
}

PARAMS(tiled_transpose_through_shared_memory)
ParameterizedTest(conf_param_t *p, conformance, tiled_transpose_through_shared_memory) {
  conf_t c;
  conf_open(&c, p->kind);
  conf_load(&c, "transpose");
  /* Not multiples of the 16x16 tile: partial work-groups in both dimensions. */
  enum { ROWS = 301, COLS = 517 };
  float *in = malloc(ROWS * COLS * 4), *out = malloc(ROWS * COLS * 4);
  for (int i = 0; i < ROWS * COLS; i++) in[i] = (float)i;
  kiln_dmem_t *din = conf_upload(&c, in, ROWS * COLS * 4), *dout = conf_alloc(&c, ROWS * COLS * 4);
  kiln_launch_arg_t args[] = {conf_tensor(&c, din), conf_tensor(&c, dout), conf_int(ROWS), conf_int(COLS)};
  uint32_t grid[3] = {(COLS + 15) / 16, (ROWS + 15) / 16, 1}, block[3] = {16, 16, 1};
  conf_run(&c, "transpose", grid, block, 0, args, 4);
  conf_download(&c, dout, out, ROWS * COLS * 4);
  for (int r = 0; r < ROWS; r++)
    for (int col = 0; col < COLS; col++)
      cr_assert_eq(out[col * ROWS + r], in[r * COLS + col], "out[%d][%d]", col, r);
  free(in), free(out);
  conf_close(&c);
}

PARAMS(block_reduction_with_barriers)
ParameterizedTest(conf_param_t *p, conformance, block_reduction_with_barriers) {
  conf_t c;
  conf_open(&c, p->kind);
  conf_load(&c, "reduce");
  enum { N = 1000003, B = 256, G = (N + B - 1) / B };
  int32_t *in = malloc(N * 4), partial[G];
  for (int i = 0; i < N; i++) in[i] = (i * 37) % 1001 - 500;
  kiln_dmem_t *din = conf_upload(&c, in, N * 4), *dp = conf_alloc(&c, sizeof partial);
  kiln_launch_arg_t args[] = {conf_tensor(&c, din), conf_tensor(&c, dp), conf_int(N)};
  uint32_t grid[3] = {G, 1, 1}, block[3] = {B, 1, 1};
  conf_run(&c, "reduce_sum", grid, block, 0, args, 3);
  conf_download(&c, dp, partial, sizeof partial);
  for (int g = 0; g < G; g++) {
    int64_t want = 0;
    for (int i = g * B; i < (g + 1) * B && i < N; i++) want += in[i];
    cr_assert_eq(partial[g], want, "group %d: %d, want %lld", g, partial[g], (long long)want);
  }
  free(in);
  conf_close(&c);
}

PARAMS(histogram_with_global_atomics)
ParameterizedTest(conf_param_t *p, conformance, histogram_with_global_atomics) {
  conf_t c;
  conf_open(&c, p->kind);
  conf_load(&c, "histogram");
  enum { N = 1 << 20, BINS = 97 };
  uint32_t *in = malloc(N * 4), bins[BINS] = {0}, want[BINS] = {0};
  uint32_t st = 3;
  for (int i = 0; i < N; i++) {
    st = st * 1664525u + 1013904223u;
    /* Skewed: a third of the values hit bin 0, so many work-items contend on one word. */
    in[i] = (st >> 9) % 3 == 0 ? 0 : st >> 7;
    want[in[i] % BINS]++;
  }
  kiln_dmem_t *din = conf_upload(&c, in, N * 4), *db = conf_upload(&c, bins, sizeof bins);
  kiln_launch_arg_t args[] = {conf_tensor(&c, din), conf_tensor(&c, db), conf_int(N), conf_int(BINS)};
  uint32_t grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};
  conf_run(&c, "histogram", grid, block, 0, args, 4);
  conf_download(&c, db, bins, sizeof bins);
  for (int b = 0; b < BINS; b++) cr_assert_eq(bins[b], want[b], "bin %d: %u, want %u", b, bins[b], want[b]);
  free(in);
  conf_close(&c);
}

PARAMS(stencil_5_point)
ParameterizedTest(conf_param_t *p, conformance, stencil_5_point) {
  conf_t c;
  conf_open(&c, p->kind);
  conf_load(&c, "stencil");
  enum { W = 1000, H = 777 };
  float *in = malloc(W * H * 4), *out = malloc(W * H * 4);
  uint32_t st = 4;
  for (int i = 0; i < W * H; i++) in[i] = frand(&st, 0, 1);
  kiln_dmem_t *din = conf_upload(&c, in, W * H * 4), *dout = conf_alloc(&c, W * H * 4);
  kiln_launch_arg_t args[] = {conf_tensor(&c, din), conf_tensor(&c, dout), conf_int(W), conf_int(H)};
  uint32_t grid[3] = {(W + 31) / 32, (H + 7) / 8, 1}, block[3] = {32, 8, 1};
  conf_run(&c, "stencil5", grid, block, 0, args, 4);
  conf_download(&c, dout, out, W * H * 4);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      int i = y * W + x;
      float want = in[i];
      if (x > 0 && y > 0 && x < W - 1 && y < H - 1)
        want = 0.5f * in[i] + 0.125f * (in[i - 1] + in[i + 1] + in[i - W] + in[i + W]);
      cr_assert_leq(conf_ulp_diff(out[i], want), 2, "(%d,%d): %.9g, want %.9g", x, y, out[i], want);
    }
  free(in), free(out);
  conf_close(&c);
}

/* One kernel per function. Bounds are OpenCL 1.2's full-profile ULP limits for float
 * (section 7.4), which every backend's library (ocml, libdevice-class code, libm) meets. */
typedef struct math_case {
  const char *kernel;
  double (*ref)(double);
  float lo, hi;
  uint32_t ulp;
} math_case_t;

static const math_case_t math_cases[] = {
    {"math_exp", exp, -80, 80, 3},   {"math_log", log, 1e-30f, 1e30f, 3},
    {"math_sqrt", sqrt, 0, 1e30f, 3}, {"math_tanh", tanh, -10, 10, 5},
    {"math_erf", erf, -5, 5, 16},    {"math_sin", sin, -100, 100, 4},
};

static void check_unary(conf_t *c, const math_case_t *m) {
  enum { N = 65536 };
  static float x[N], y[N];
  for (int i = 0; i < N; i++) {
    /* log-spaced for the wide positive ranges, linear otherwise */
    double t = (double)i / (N - 1);
    x[i] = m->lo > 0 ? (float)(m->lo * pow((double)m->hi / m->lo, t)) : (float)(m->lo + (m->hi - m->lo) * t);
  }
  kiln_dmem_t *dx = conf_upload(c, x, sizeof x), *dy = conf_alloc(c, sizeof y);
  kiln_launch_arg_t args[] = {conf_tensor(c, dx), conf_tensor(c, dy), conf_int(N)};
  uint32_t grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};
  conf_run(c, m->kernel, grid, block, 0, args, 3);
  conf_download(c, dy, y, sizeof y);
  uint32_t worst = 0;
  int worst_i = 0;
  for (int i = 0; i < N; i++) {
    uint32_t d = conf_ulp_diff(y[i], (float)m->ref(x[i]));
    if (d > worst) worst = d, worst_i = i;
  }
  cr_log_info("%s on %s: worst %u ulp at x = %.9g", m->kernel, c->info->id, worst, x[worst_i]);
  cr_expect_leq(worst, m->ulp, "%s(%.9g) = %.9g, want %.9g (%u ulp > %u)", m->kernel, x[worst_i],
                y[worst_i], (float)m->ref(x[worst_i]), worst, m->ulp);
  conf_free(c, dx);
  conf_free(c, dy);
}

PARAMS(math_functions_within_ulp_bounds)
ParameterizedTest(conf_param_t *p, conformance, math_functions_within_ulp_bounds) {
  conf_t c;
  conf_open(&c, p->kind);
  conf_load(&c, "math");
  for (size_t i = 0; i < sizeof math_cases / sizeof math_cases[0]; i++) check_unary(&c, &math_cases[i]);
  /* pow: two arguments, 16 ulp (OpenCL), where the result is a finite normal float. */
  enum { N = 65536 };
  static float x[N], e[N], y[N];
  uint32_t st = 5;
  for (int i = 0; i < N; i++) x[i] = frand(&st, 1e-3f, 100), e[i] = frand(&st, -10, 10);
  kiln_dmem_t *dx = conf_upload(&c, x, sizeof x), *de = conf_upload(&c, e, sizeof e), *dy = conf_alloc(&c, sizeof y);
  kiln_launch_arg_t args[] = {conf_tensor(&c, dx), conf_tensor(&c, de), conf_tensor(&c, dy), conf_int(N)};
  uint32_t grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};
  conf_run(&c, "math_pow", grid, block, 0, args, 4);
  conf_download(&c, dy, y, sizeof y);
  for (int i = 0; i < N; i++) {
    float want = (float)pow(x[i], e[i]);
    if (!isnormal(want)) continue;
    cr_expect_leq(conf_ulp_diff(y[i], want), 16, "pow(%.9g, %.9g) = %.9g, want %.9g", x[i], e[i], y[i], want);
  }
  conf_close(&c);
}

PARAMS(int64_indexing)
ParameterizedTest(conf_param_t *p, conformance, int64_indexing) {
  conf_t c;
  conf_open(&c, p->kind);
  conf_load(&c, "index64");
  /* Writes straddle byte offset 2^31 of a buffer just over 2 GiB: 32-bit index math would
   * wrap to a negative offset and fault or write the wrong bytes. */
  const uint64_t base = (1ull << 31) - 4096, size = (1ull << 31) + 8192;
  enum { N = 8192 };
  if (c.info->memory && c.info->memory < 4 * size) cr_skip_test("%s has too little memory for a 2 GiB buffer", c.info->id);
  kiln_dmem_t *buf = conf_alloc(&c, size);
  kiln_launch_arg_t args[] = {conf_tensor(&c, buf), conf_int((int64_t)base), conf_int(N)};
  uint32_t grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};
  conf_run(&c, "index64", grid, block, 0, args, 3);
  uint8_t got[N];
  cr_assert_eq(c.b->copy_out(c.dev, buf, base, got, N), KILN_OK);
  for (int i = 0; i < N; i++) cr_assert_eq(got[i], (uint8_t)(i * 7 + 1), "byte %llu", (unsigned long long)(base + i));
  conf_close(&c);
}

/* many_args(out, i0, f0, i1, f1, ..., i51, f51): 105 arguments of alternating types; the
 * kernel stores each where the host can see whether it arrived at the right place. */
PARAMS(kernel_with_105_arguments)
ParameterizedTest(conf_param_t *p, conformance, kernel_with_105_arguments) {
  conf_t c;
  conf_open(&c, p->kind);
  conf_load(&c, "many_args");
  enum { PAIRS = 52 };
  kiln_dmem_t *dout = conf_alloc(&c, 2 * PAIRS * 4);
  kiln_launch_arg_t args[1 + 2 * PAIRS];
  args[0] = conf_tensor(&c, dout);
  for (int i = 0; i < PAIRS; i++) {
    args[1 + 2 * i] = conf_int(-1000 * i - 7);
    args[2 + 2 * i] = conf_float(0.5 * i + 0.25);
  }
  conf_run(&c, "many_args", ONE, ONE, 0, args, 1 + 2 * PAIRS);
  float out[2 * PAIRS];
  conf_download(&c, dout, out, sizeof out);
  for (int i = 0; i < PAIRS; i++) {
    cr_expect_eq(out[2 * i], (float)(-1000 * i - 7), "int argument %d", i);
    cr_expect_eq(out[2 * i + 1], (float)(0.5 * i + 0.25), "float argument %d", i);
  }
  conf_close(&c);
}

PARAMS(partial_work_groups)
ParameterizedTest(conf_param_t *p, conformance, partial_work_groups) {
  conf_t c;
  conf_open(&c, p->kind);
  conf_load(&c, "vadd");
  /* n not a multiple of the block, and blocks of odd sizes: the kernel's bounds check must
   * keep the last group's extra work-items from writing past n. */
  const int sizes[] = {1, 63, 1000, 4099};
  const uint32_t blocks[] = {1, 64, 96, 250};
  for (size_t s = 0; s < 4; s++)
    for (size_t k = 0; k < 4; k++) {
      int n = sizes[s];
      float a[4200], b[4200], out[4200 + 64];
      for (int i = 0; i < n; i++) a[i] = (float)i, b[i] = 1;
      for (int i = 0; i < n + 64; i++) out[i] = -7;
      kiln_dmem_t *da = conf_upload(&c, a, n * 4), *db = conf_upload(&c, b, n * 4);
      kiln_dmem_t *dc = conf_upload(&c, out, (n + 64) * 4);
      kiln_launch_arg_t args[] = {conf_tensor(&c, da), conf_tensor(&c, db), conf_tensor(&c, dc), conf_int(n)};
      uint32_t grid[3] = {(n + blocks[k] - 1) / blocks[k], 1, 1}, block[3] = {blocks[k], 1, 1};
      conf_run(&c, "vadd", grid, block, 0, args, 4);
      conf_download(&c, dc, out, (n + 64) * 4);
      for (int i = 0; i < n; i++) cr_assert_eq(out[i], (float)i + 1, "n=%d block=%u: c[%d]", n, blocks[k], i);
      for (int i = n; i < n + 64; i++) cr_assert_eq(out[i], -7, "n=%d block=%u: wrote c[%d]", n, blocks[k], i);
      conf_free(&c, da), conf_free(&c, db), conf_free(&c, dc);
    }
  conf_close(&c);
}

PARAMS(timing_follows_time_evaluator)
ParameterizedTest(conf_param_t *p, conformance, timing_follows_time_evaluator) {
  conf_t c;
  conf_open(&c, p->kind);
  conf_load(&c, "vadd");
  enum { N = 1 << 16 };
  kiln_dmem_t *da = conf_alloc(&c, N * 4), *db = conf_alloc(&c, N * 4), *dc = conf_alloc(&c, N * 4);
  kiln_launch_arg_t in[] = {conf_tensor(&c, da), conf_tensor(&c, db), conf_tensor(&c, dc), conf_int(N)};
  const kiln_kernel_t *k = kiln_artifact_kernel(&c.art, "vadd");
  kiln_launch_values_t v;
  cr_assert_eq(kiln_launch_values_init(&v, k, in, 4), KILN_OK);
  uint32_t grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};
  kiln_launch_t l;
  cr_assert_eq(kiln_launch_prepare(k, c.info, grid, block, 0, v.ptrs, &l), KILN_OK);
  kiln_time_config_t cfg;
  kiln_time_config_default(&cfg);
  cfg.repeat = 3;
  cfg.min_repeat_ms = 20;
  cfg.flush = true;
  kiln_time_result_t r;
  kiln_status_t s = kiln_time_evaluate(c.b, c.dev, c.mod, &l, &cfg, &r);
  cr_assert_eq(s, KILN_OK, "%s", s ? kiln_status_message(s) : "");
  /* number grows until one repeat's calls fill min_repeat_ms; it stays 1 only where a single call
   * already fills it (kiln_time_evaluate), as on the software GPU under a loaded CPU */
  cr_expect(r.number > 1 || r.results[r.repeat - 1] * 1e3 >= cfg.min_repeat_ms,
            "number grew to fill min_repeat_ms (number %u, last repeat %.3g ms a call)", r.number,
            r.results[r.repeat - 1] * 1e3);
  cr_expect_eq(r.repeat, 3);
  for (uint32_t i = 0; i < r.repeat; i++) {
    cr_expect_gt(r.results[i], 0);
    cr_expect_lt(r.results[i], 1.0, "seconds per call");
  }
  cr_expect_leq(r.stats.min, r.stats.median);
  cr_log_info("%s: vadd 2^16: %u runs/repeat, min %.3g us, cv %.3f", c.info->id, r.number,
              r.stats.min * 1e6, r.stats.cv);
  kiln_time_result_deinit(&r);
  kiln_launch_values_deinit(&v);
  conf_close(&c);
}

/* A fault kills the process that runs it (SIGSEGV on cpu; on GPUs the context is lost
 * and the worker exits after reporting E_DEVICE_FAULT), so the faulting launch runs in a
 * forked child; the parent then opens the device afresh and runs a good kernel. */
static void fault_child(const char *kind) {
  conf_in_child = true;
  conf_t c;
  conf_open(&c, kind);
  conf_load(&c, "fault");
  kiln_dmem_t *m = conf_alloc(&c, 4096);
  /* 2^40 ints past a valid buffer: unmapped on every device. */
  kiln_launch_arg_t args[] = {conf_tensor(&c, m), conf_int(1ll << 40)};
  uint32_t grid[3] = {4, 1, 1}, block[3] = {64, 1, 1};
  kiln_status_t s = conf_try(&c, "fault", grid, block, 0, args, 2, 1, NULL);
  _exit(s ? (int)kiln_status_code(s) : 0);
}

/* The child's wait status; a child stuck in the driver fails the test instead of hanging
 * the suite. */
static int wait_child(pid_t pid, const char *kind) {
  int ws = 0;
  pid_t got = 0;
  for (int waited_ms = 0; (got = waitpid(pid, &ws, WNOHANG)) == 0 && waited_ms < 120000; waited_ms += 10)
    usleep(10000);
  if (got == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &ws, 0);
    cr_assert_fail("%s: the child did not end within 120 s", kind);
  }
  cr_assert_eq(got, pid);
  return ws;
}

PARAMS(fault_reported_and_next_launch_works)
ParameterizedTest(conf_param_t *p, conformance, fault_reported_and_next_launch_works) {
  /* Probe only (in a child of its own), so a backend without devices skips here and no
   * runtime is initialised in this process before the fork. */
  conf_require(p->kind);
  conf_t c;
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) fault_child(p->kind);
  int ws = wait_child(pid, p->kind);
  cr_expect(WIFSIGNALED(ws) || WEXITSTATUS(ws) != 101, "%s: the child's set-up failed (its stderr says why)", p->kind);
  cr_log_info("%s: faulting child %s %d", p->kind, WIFSIGNALED(ws) ? "died of signal" : "exited with",
              WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));
  if (WIFSIGNALED(ws))
    cr_expect(WTERMSIG(ws) == SIGSEGV || WTERMSIG(ws) == SIGBUS || WTERMSIG(ws) == SIGABRT,
              "child died of signal %d", WTERMSIG(ws));
  else
    cr_expect_eq(WEXITSTATUS(ws), KILN_E_DEVICE_FAULT, "child exited %d, not E_DEVICE_FAULT", WEXITSTATUS(ws));
  conf_open(&c, p->kind);
  conf_load(&c, "vadd");
  float a[256], b[256], out[256];
  for (int i = 0; i < 256; i++) a[i] = (float)i, b[i] = 1;
  kiln_dmem_t *da = conf_upload(&c, a, sizeof a), *db = conf_upload(&c, b, sizeof b), *dc = conf_alloc(&c, sizeof out);
  kiln_launch_arg_t args[] = {conf_tensor(&c, da), conf_tensor(&c, db), conf_tensor(&c, dc), conf_int(256)};
  uint32_t grid[3] = {1, 1, 1}, block[3] = {256, 1, 1};
  conf_run(&c, "vadd", grid, block, 0, args, 4);
  conf_download(&c, dc, out, sizeof out);
  for (int i = 0; i < 256; i++) cr_assert_eq(out[i], (float)i + 1);
  conf_close(&c);
}

/* ---- launch sequences (device.h seq_*) and device-to-device copies ---------------------- */

/* Skips unless the backend has launch sequences (the cpu runs graphs launch by launch). */
static void need_seq(conf_t *c) {
  if (!c->b->seq_create) {
    const char *kind = c->b->kind;
    conf_close(c);
    cr_skip_test("%s has no launch sequences: graphs on it launch one by one", kind);
  }
}

typedef struct seq_launches {
  kiln_launch_values_t *values;
  kiln_launch_t *launches;
  kiln_seq_item_t *items;
  uint32_t count;
} seq_launches_t;

/* `count` launches of kernel `names[i % nnames]` with the same arguments each (args[i %
 * nnames]), one work-group of 64; every `mark_every`-th item marked. */
static void seq_prepare(conf_t *c, seq_launches_t *s, uint32_t count, const char *const *names,
                        const kiln_launch_arg_t *const *args, const size_t *nargs, uint32_t nnames,
                        uint32_t mark_every) {
  s->count = count;
  s->values = calloc(count, sizeof *s->values);
  s->launches = calloc(count, sizeof *s->launches);
  s->items = calloc(count, sizeof *s->items);
  cr_assert(s->values && s->launches && s->items);
  uint32_t grid[3] = {1, 1, 1}, block[3] = {64, 1, 1};
  for (uint32_t i = 0; i < count; i++) {
    const kiln_kernel_t *k = kiln_artifact_kernel(&c->art, names[i % nnames]);
    cr_assert(k, "no kernel %s", names[i % nnames]);
    kiln_status_t st = kiln_launch_values_init(&s->values[i], k, args[i % nnames], nargs[i % nnames]);
    cr_assert_eq(st, KILN_OK, "%s", st ? kiln_status_message(st) : "");
    st = kiln_launch_prepare(k, c->info, grid, block, 0, s->values[i].ptrs, &s->launches[i]);
    cr_assert_eq(st, KILN_OK, "%s", st ? kiln_status_message(st) : "");
    s->items[i] = (kiln_seq_item_t){.mod = c->mod, .launch = &s->launches[i], .mark = (i + 1) % mark_every == 0};
  }
}

static void seq_release(seq_launches_t *s) {
  for (uint32_t i = 0; i < s->count; i++) kiln_launch_values_deinit(&s->values[i]);
  free(s->values), free(s->launches), free(s->items);
}

typedef struct progress_log {
  uint32_t calls, last;
  bool backwards;
} progress_log_t;

static void log_progress(void *ctx, uint32_t done) {
  progress_log_t *p = ctx;
  if (done < p->last) p->backwards = true;
  p->last = done;
  p->calls++;
}

PARAMS(launch_sequence_runs_in_order)
ParameterizedTest(conf_param_t *p, conformance, launch_sequence_runs_in_order) {
  conf_t c;
  conf_open(&c, p->kind);
  need_seq(&c);
  conf_load(&c, "seq");
  /* more launches than an AQL queue of 1024 packets holds: the submission waits for room */
  enum { N = 64, LAUNCHES = 1500 };
  float zero[N] = {0}, out[N];
  kiln_dmem_t *y = conf_upload(&c, zero, sizeof zero);
  const kiln_launch_arg_t a[] = {conf_tensor(&c, y), conf_int(N)};
  const char *names[] = {"bump"};
  const kiln_launch_arg_t *args[] = {a};
  size_t nargs[] = {2};
  seq_launches_t s;
  seq_prepare(&c, &s, LAUNCHES, names, args, nargs, 1, 7);
  kiln_dseq_t *seq;
  kiln_status_t st = c.b->seq_create(c.dev, s.items, s.count, &seq);
  cr_assert_eq(st, KILN_OK, "%s", st ? kiln_status_message(st) : "");
  for (int run = 1; run <= 2; run++) {
    progress_log_t log = {0};
    uint32_t at = 12345;
    st = c.b->seq_run(c.dev, seq, 30ull * 1000000000ull, log_progress, &log, &at);
    cr_assert_eq(st, KILN_OK, "%s", st ? kiln_status_message(st) : "");
    cr_expect_eq(at, 12345, "out_at is set on failure only");
    cr_expect(!log.backwards, "progress went backwards");
    cr_expect_eq(log.last, LAUNCHES, "the last progress report is the whole sequence");
    conf_download(&c, y, out, sizeof out);
    /* each launch read the one before's result: in order, none lost or doubled */
    for (int i = 0; i < N; i++) cr_assert_eq(out[i], (float)(run * LAUNCHES), "y[%d] = %g after run %d", i, out[i], run);
  }
  c.b->seq_destroy(c.dev, seq);
  seq_release(&s);
  conf_free(&c, y);
  conf_close(&c);
}

/* In a child: [bump x5, fault_far, bump x5] (or spin in place of the fault) as one sequence,
 * every item marked; exits with the status code when the failure is placed at item 5 (or,
 * on CUDA, which cannot tell which kernel faulted, not after it), else 150 + the item. */
static void seq_failure_child(const char *kind, bool hang) {
  conf_in_child = true;
  conf_t c;
  conf_open(&c, kind);
  conf_load(&c, "seq");
  kiln_dmem_t *y = conf_alloc(&c, 4096), *m = conf_alloc(&c, 4096);
  const kiln_launch_arg_t good[] = {conf_tensor(&c, y), conf_int(64)};
  const kiln_launch_arg_t bad[] = {conf_tensor(&c, m), conf_int(hang ? (1ll << 62) : (1ll << 40))};
  const char *names[11];
  const kiln_launch_arg_t *args[11];
  size_t nargs[11];
  for (int i = 0; i < 11; i++) names[i] = "bump", args[i] = good, nargs[i] = 2;
  names[5] = hang ? "spin" : "fault_far", args[5] = bad;
  seq_launches_t s;
  seq_prepare(&c, &s, 11, names, args, nargs, 11, 1);
  kiln_dseq_t *seq;
  kiln_status_t st = c.b->seq_create(c.dev, s.items, s.count, &seq);
  if (st) _exit(101);
  uint32_t at = 999;
  st = c.b->seq_run(c.dev, seq, hang ? 300ull * 1000000ull : 30ull * 1000000000ull, NULL, NULL, &at);
  if (!st) _exit(0);
  fprintf(stderr, "%s: placed at item %u: %s\n", kind, at, kiln_status_message(st));
  bool placed = at == 5 || (!hang && strcmp(kind, "cuda") == 0 && at < 5);
  _exit(placed ? (int)kiln_status_code(st) : 150 + (int)(at < 50 ? at : 50));
}

static void seq_failure(const char *kind, bool hang) {
  conf_require(kind);
  /* nothing opened here: a GPU runtime initialised before fork() is unusable in the child */
  if (!kiln_device_backend_find(kind)->seq_create)
    cr_skip_test("%s has no launch sequences: graphs on it launch one by one", kind);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) seq_failure_child(kind, hang);
  int ws = wait_child(pid, kind);
  cr_assert(WIFEXITED(ws), "%s: the child died of signal %d", kind, WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
  int code = WEXITSTATUS(ws);
  cr_expect_neq(code, 101, "%s: the child's set-up failed (its stderr says why)", kind);
  cr_expect_lt(code, 150, "%s: the failure was placed at item %d, not 5", kind, code - 150);
  cr_expect_eq(code, hang ? KILN_E_TIMEOUT : KILN_E_DEVICE_FAULT, "%s: the child exited %d", kind, code);
}

PARAMS(launch_sequence_fault_is_placed)
ParameterizedTest(conf_param_t *p, conformance, launch_sequence_fault_is_placed) { seq_failure(p->kind, false); }

PARAMS(launch_sequence_hang_is_stopped_and_placed)
ParameterizedTest(conf_param_t *p, conformance, launch_sequence_hang_is_stopped_and_placed) {
  seq_failure(p->kind, true);
}

PARAMS(device_to_device_copy)
ParameterizedTest(conf_param_t *p, conformance, device_to_device_copy) {
  conf_t c;
  conf_open(&c, p->kind);
  if (!c.b->copy_device) {
    conf_close(&c);
    cr_skip_test("%s has no device-to-device copy: the host addresses its memory", p->kind);
  }
  enum { N = 1 << 16 };
  uint32_t *src = malloc(N * 4), *out = malloc(N * 4);
  for (uint32_t i = 0; i < N; i++) src[i] = i * 2654435761u;
  kiln_dmem_t *a = conf_upload(&c, src, N * 4), *b = conf_alloc(&c, N * 4);
  memset(out, 0, N * 4);
  kiln_dmem_t *z = conf_upload(&c, out, N * 4);
  /* b zeroed, the middle half of a to b at an offset, then all of b back */
  kiln_status_t st = c.b->copy_device(c.dev, b, 0, z, 0, N * 4);
  cr_assert_eq(st, KILN_OK);
  st = c.b->copy_device(c.dev, b, 1024, a, N, N * 2);
  cr_assert_eq(st, KILN_OK, "%s", st ? kiln_status_message(st) : "");
  conf_download(&c, b, out, N * 4);
  for (uint32_t i = 0; i < N; i++) {
    uint32_t want = i >= 256 && i < 256 + N / 2 ? src[i - 256 + N / 4] : 0;
    cr_assert_eq(out[i], want, "b[%u] = %u, want %u", i, out[i], want);
  }
  /* out of range on either side: refused, nothing copied */
  st = c.b->copy_device(c.dev, b, N * 4 - 4, a, 0, 8);
  cr_expect_eq(kiln_status_code(st), KILN_E_INVALID_ARGUMENT);
  kiln_status_free(st);
  st = c.b->copy_device(c.dev, b, 0, a, N * 4 - 4, 8);
  cr_expect_eq(kiln_status_code(st), KILN_E_INVALID_ARGUMENT);
  kiln_status_free(st);
  free(src), free(out);
  conf_free(&c, a), conf_free(&c, b), conf_free(&c, z);
  conf_close(&c);
}
