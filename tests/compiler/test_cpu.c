/* cpu: dialect kernels compiled to work-group functions, loaded with dlopen and run over a
 * grid by the harness, checked against host references. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/compiler/harness.h"

static void build(const char *example, const kiln_compile_options_t *opts, kiln_artifact_t *a, th_cpu_module_t *m) {
  size_t n;
  uint8_t *bc = th_example_bc(example, &n);
  th_compile(bc, n, "cpu", opts, a);
  free(bc);
  th_cpu_load(a, m);
}

static void check_vadd(const kiln_compile_options_t *opts, uint32_t block) {
  kiln_artifact_t a;
  th_cpu_module_t m;
  build("vadd", opts, &a, &m);
  enum { N = 1000 };
  static float x[N], y[N], z[N];
  for (int i = 0; i < N; i++) {
    x[i] = (float)i * 0.5f;
    y[i] = 3.0f - (float)i;
    z[i] = -1.0f;
  }
  int n = N;
  void *px = x, *py = y, *pz = z;
  void *args[] = {&px, &py, &pz, &n};
  uint32_t grid[3] = {(N + block - 1) / block, 1, 1}, blk[3] = {block, 1, 1};
  th_cpu_run(&m, &a, "vadd", grid, blk, 0, args);
  for (int i = 0; i < N; i++) cr_assert_eq(z[i], x[i] + y[i], "z[%d] = %g", i, z[i]);
  th_cpu_unload(&m);
  kiln_artifact_deinit(&a);
}

Test(cpu, vadd_runs) { check_vadd(NULL, 64); }
Test(cpu, vadd_odd_block) { check_vadd(NULL, 7); }
Test(cpu, vadd_O0) {
  kiln_compile_options_t o = kiln_compile_options_default();
  o.opt_level = 0;
  check_vadd(&o, 32);
}
Test(cpu, vadd_fast_math) {
  kiln_compile_options_t o = kiln_compile_options_default();
  o.fast_math = true;
  check_vadd(&o, 128);
}

Test(cpu, vadd_is_vectorised) {
  size_t n;
  uint8_t *bc = th_example_bc("vadd", &n);
  kiln_artifact_t a;
  th_compile(bc, n, "cpu", NULL, &a);
  free(bc);
  cr_assert(strstr(a.llvm_ir, "define void @__kiln_wg_vadd"), "work-group function in the IR");
  cr_assert(strstr(a.llvm_ir, "x float>"), "the work-item loop was not vectorised:\n%s", a.llvm_ir);
  cr_assert(a.assembly && strstr(a.assembly, "__kiln_wg_vadd"));
  cr_assert_eq(a.kernels[0].num_args, 4);
  cr_assert_eq(a.kernels[0].args[3].type, KILN_ARG_I32);
  kiln_artifact_deinit(&a);
}

Test(cpu, transpose_with_shared_memory_and_barrier) {
  kiln_artifact_t a;
  th_cpu_module_t m;
  build("transpose", NULL, &a, &m);
  const kiln_kernel_t *k = kiln_artifact_kernel(&a, "transpose");
  cr_assert_eq(k->group_segment_size, 16 * 17 * 4, "one padded 16x17 float tile");
  enum { H = 37, W = 45 };
  static float in[H * W], out[W * H];
  for (int i = 0; i < H * W; i++) in[i] = (float)i;
  memset(out, 0, sizeof(out));
  int h = H, w = W;
  void *pi = in, *po = out;
  void *args[] = {&pi, &po, &h, &w};
  uint32_t grid[3] = {(W + 15) / 16, (H + 15) / 16, 1}, blk[3] = {16, 16, 1};
  th_cpu_run(&m, &a, "transpose", grid, blk, 0, args);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) cr_assert_eq(out[x * H + y], in[y * W + x], "out[%d][%d]", x, y);
  th_cpu_unload(&m);
  kiln_artifact_deinit(&a);
}

static void check_reduce(const char *kernel, uint32_t block) {
  kiln_artifact_t a;
  th_cpu_module_t m;
  build("reduce", NULL, &a, &m);
  enum { N = 5000 };
  static float in[N], out[N];
  for (int i = 0; i < N; i++) in[i] = (float)(i % 17) - 8.0f;
  int n = N;
  uint32_t groups = (N + block - 1) / block;
  void *pi = in, *po = out;
  void *args[] = {&pi, &po, &n};
  uint32_t grid[3] = {groups, 1, 1}, blk[3] = {block, 1, 1};
  bool dyn = strcmp(kernel, "reduce_dyn") == 0;
  th_cpu_run(&m, &a, kernel, grid, blk, dyn ? block * 4 : 0, args);
  for (uint32_t g = 0; g < groups; g++) {
    double want = 0;
    for (uint32_t i = g * block; i < (g + 1) * block && i < N; i++) want += in[i];
    cr_assert_float_eq(out[g], want, 1e-3, "%s group %u: %g, want %g", kernel, g, out[g], want);
  }
  th_cpu_unload(&m);
  kiln_artifact_deinit(&a);
}

Test(cpu, reduce_static_shared) { check_reduce("reduce", 256); }
Test(cpu, reduce_small_block) { check_reduce("reduce", 4); }
Test(cpu, reduce_dynamic_shared) { check_reduce("reduce_dyn", 128); }

Test(cpu, reduce_keeps_values_across_barriers) {
  kiln_artifact_t a;
  th_cpu_module_t m;
  build("reduce", NULL, &a, &m);
  const kiln_kernel_t *k = kiln_artifact_kernel(&a, "reduce");
  cr_assert_gt(k->private_segment_size, 0, "the loop counter lives across barriers");
  cr_assert_eq(kiln_artifact_kernel(&a, "reduce_dyn")->group_segment_size, 0);
  th_cpu_unload(&m);
  kiln_artifact_deinit(&a);
}

/* Barriers with nothing between them but straight-line code share one basic block (a te
 * cooperative load whose tiles divide exactly: no guard splits it). Each must still end its
 * region: every work-item writes the tile before any reads a neighbour's element. */
static const char straight_barriers_source[] =
    "#include <kiln/kernel.h>\n"
    "KILN_KERNEL void rotate(const float *in, float *out) {\n"
    "  static KILN_SHARED float t[64];\n"
    "  unsigned l = kiln_local_id(0), g = kiln_group_id(0) * 64 + l;\n"
    "  t[l] = in[g];\n"
    "  kiln_barrier();\n"
    "  float v = t[(l + 1) % 64];\n"
    "  kiln_barrier();\n"
    "  t[l] = v * 2.0f;\n"
    "  kiln_barrier();\n"
    "  out[g] = t[(l + 3) % 64];\n"
    "}\n";

static void check_barriers_in_one_block(bool text) {
  size_t n;
  uint8_t *ir;
  if (text) {
    /* clang declares __kiln_barrier after the kernel: the parser then resolves a forward
     * reference, which leaves the uses in program order. Declared first, the calls join
     * its use list in reverse program order, as when the te lowering builds them. */
    char *ll = th_source_ll(straight_barriers_source);
    char *decl = strstr(ll, "declare void @__kiln_barrier()"), *define = strstr(ll, "define ");
    cr_assert(decl && define && define < decl, "%s", ll);
    size_t dlen = strcspn(decl, "\n") + 1;
    n = strlen(ll);
    ir = malloc(n + 1);
    size_t head = (size_t)(define - ll);
    memcpy(ir, ll, head);
    memcpy(ir + head, decl, dlen);
    memcpy(ir + head + dlen, define, (size_t)(decl - define));
    strcpy((char *)ir + head + dlen + (size_t)(decl - define), decl + dlen);
    free(ll);
  } else {
    ir = th_source_bc(straight_barriers_source, &n);
  }
  kiln_artifact_t a;
  th_compile(ir, n, "cpu", NULL, &a);
  free(ir);
  th_cpu_module_t m;
  th_cpu_load(&a, &m);
  enum { G = 3, N = G * 64 };
  static float in[N], out[N];
  for (int i = 0; i < N; i++) {
    in[i] = (float)i;
    out[i] = -1.0f;
  }
  void *pi = in, *po = out;
  void *args[] = {&pi, &po};
  uint32_t grid[3] = {G, 1, 1}, blk[3] = {64, 1, 1};
  th_cpu_run(&m, &a, "rotate", grid, blk, 0, args);
  for (int i = 0; i < N; i++) {
    int base = i / 64 * 64, l = i % 64;
    float want = 2.0f * in[base + (l + 4) % 64];
    cr_assert_eq(out[i], want, "%s: out[%d] = %g, want %g", text ? "text" : "bitcode", i, out[i], want);
  }
  th_cpu_unload(&m);
  kiln_artifact_deinit(&a);
}

/* The barrier calls are found through the function's use list, in either order. */
Test(cpu, barriers_in_one_block_bitcode) { check_barriers_in_one_block(false); }
Test(cpu, barriers_in_one_block_text) { check_barriers_in_one_block(true); }

/* Every builtin in every dimension, and a private array that lives across a barrier. */
static const char ids_source[] =
    "#include <kiln/kernel.h>\n"
    "KILN_KERNEL void ids(unsigned *out) {\n"
    "  unsigned nx = kiln_global_size(0), ny = kiln_global_size(1);\n"
    "  unsigned gx = kiln_global_id(0), gy = kiln_global_id(1), gz = kiln_global_id(2);\n"
    "  unsigned *o = out + 8 * ((gz * ny + gy) * nx + gx);\n"
    "  unsigned priv[4];\n"
    "  for (int d = 0; d < 3; d++) priv[d] = kiln_local_id(d);\n"
    "  priv[3] = kiln_group_id(0) + kiln_group_id(1) + kiln_group_id(2);\n"
    "  kiln_barrier();\n"
    "  o[0] = priv[0]; o[1] = priv[1]; o[2] = priv[2]; o[3] = priv[3];\n"
    "  o[4] = kiln_group_size(0) * 100 + kiln_group_size(1) * 10 + kiln_group_size(2);\n"
    "  o[5] = kiln_num_groups(0) * 100 + kiln_num_groups(1) * 10 + kiln_num_groups(2);\n"
    "  o[6] = kiln_local_id(3) + kiln_group_size(3);\n"
    "  o[7] = 7;\n"
    "}\n";

Test(cpu, builtins_in_three_dimensions) {
  size_t n;
  uint8_t *bc = th_source_bc(ids_source, &n);
  kiln_artifact_t a;
  th_compile(bc, n, "cpu", NULL, &a);
  free(bc);
  th_cpu_module_t m;
  th_cpu_load(&a, &m);
  uint32_t grid[3] = {2, 3, 2}, blk[3] = {4, 2, 3};
  uint32_t nx = 8, ny = 6, nz = 6;
  unsigned *out = calloc(8 * nx * ny * nz, sizeof(unsigned));
  void *po = out;
  void *args[] = {&po};
  th_cpu_run(&m, &a, "ids", grid, blk, 0, args);
  for (uint32_t z = 0; z < nz; z++)
    for (uint32_t y = 0; y < ny; y++)
      for (uint32_t x = 0; x < nx; x++) {
        unsigned *o = out + 8 * ((z * ny + y) * nx + x);
        cr_assert_eq(o[0], x % 4);
        cr_assert_eq(o[1], y % 2);
        cr_assert_eq(o[2], z % 3);
        cr_assert_eq(o[3], x / 4 + y / 2 + z / 3);
        cr_assert_eq(o[4], 423u);
        cr_assert_eq(o[5], 232u);
        cr_assert_eq(o[6], 1u, "past the last dimension: id 0, size 1");
        cr_assert_eq(o[7], 7u);
      }
  free(out);
  th_cpu_unload(&m);
  kiln_artifact_deinit(&a);
}

Test(cpu, math_functions_match_libm) {
  kiln_artifact_t a;
  th_cpu_module_t m;
  build("math", NULL, &a, &m);
  enum { N = 64 };
  float x[N], y[8 * N];
  double xd[N], yd[4 * N];
  for (int i = 0; i < N; i++) xd[i] = x[i] = (float)(i - 32) * 0.37f;
  int n = N;
  void *px = x, *py = y, *pxd = xd, *pyd = yd;
  void *args32[] = {&px, &py, &n}, *args64[] = {&pxd, &pyd, &n};
  uint32_t grid[3] = {2, 1, 1}, blk[3] = {32, 1, 1};
  th_cpu_run(&m, &a, "math_f32", grid, blk, 0, args32);
  th_cpu_run(&m, &a, "math_f64", grid, blk, 0, args64);
  for (int i = 0; i < N; i++) {
    float v = x[i];
    float want[8] = {expf(v), logf(fabsf(v) + 1), tanhf(v), erff(v), sinf(v), cosf(v), powf(fabsf(v), 1.5f), sqrtf(fabsf(v))};
    for (int f = 0; f < 8; f++)
      cr_assert_float_eq(y[8 * i + f], want[f], 1e-6 * fmaxf(1.0f, fabsf(want[f])), "f32 fn %d at %g: %g vs %g", f, v,
                         y[8 * i + f], want[f]);
    double vd = xd[i];
    double wd[4] = {exp(vd), log(fabs(vd) + 1), tanh(vd), sin(vd)};
    for (int f = 0; f < 4; f++) cr_assert_float_eq(yd[4 * i + f], wd[f], 1e-14 * fmax(1.0, fabs(wd[f])));
  }
  th_cpu_unload(&m);
  kiln_artifact_deinit(&a);
}

/* Compiles for cpu a kernel `NAME(const float *x, float *y, int n)` doing y[i] = FN(x[i]). */
static void compile_unary(const char *name, const char *fn, kiln_artifact_t *a) {
  char src[512];
  snprintf(src, sizeof(src),
           "#include <kiln/kernel.h>\n#include <math.h>\n"
           "KILN_KERNEL void %s(const float *x, float *y, int n) {\n"
           "  int i = (int)kiln_global_id(0);\n  if (i < n) y[i] = %s(x[i]);\n}\n",
           name, fn);
  size_t n;
  uint8_t *bc = th_source_bc(src, &n);
  th_compile(bc, n, "cpu", NULL, a);
  free(bc);
}

/* The C math names are pure for kiln (no errno): sqrtf in a work-item loop becomes the
 * vector square root instead of one libm call per work-item. */
Test(cpu, sqrt_in_a_work_item_loop_is_vectorised) {
  kiln_artifact_t a;
  compile_unary("roots", "sqrtf", &a);
  cr_assert(strstr(a.llvm_ir, "@llvm.sqrt.v"), "sqrtf stayed a scalar call:\n%s", a.llvm_ir);
  th_cpu_module_t m;
  th_cpu_load(&a, &m);
  enum { N = 300 };
  float x[N], y[N];
  for (int i = 0; i < N; i++) x[i] = (float)i * 1.7f, y[i] = -1;
  int cnt = N - 5; /* the last 5 stay untouched */
  void *px = x, *py = y;
  void *args[] = {&px, &py, &cnt};
  uint32_t grid[3] = {3, 1, 1}, blk[3] = {100, 1, 1};
  th_cpu_run(&m, &a, "roots", grid, blk, 0, args);
  for (int i = 0; i < N; i++) cr_assert_eq(y[i], i < cnt ? sqrtf(x[i]) : -1.0f, "y[%d] = %g", i, y[i]);
  th_cpu_unload(&m);
  kiln_artifact_deinit(&a);
}

static int64_t float_order(float f) {
  int32_t i;
  memcpy(&i, &f, 4);
  return i < 0 ? (int64_t)INT32_MIN - i : i;
}

/* tanhf on the cpu is kiln's branch-free function (mathlib/cpu_math.c): inlined and
 * vectorised in the work-item loop, and within 2 ulp of the correctly rounded result. */
Test(cpu, tanh_is_vectorised_and_accurate) {
  kiln_artifact_t a;
  compile_unary("th", "tanhf", &a);
  cr_assert(!strstr(a.llvm_ir, "@tanhf"), "tanhf stayed a libm call:\n%s", a.llvm_ir);
  cr_assert(strstr(a.llvm_ir, "x float>"), "the tanh loop was not vectorised:\n%s", a.llvm_ir);
  th_cpu_module_t m;
  th_cpu_load(&a, &m);
  enum { N = 1 << 16 };
  static float x[N], y[N];
  unsigned seed = 5;
  for (int i = 0; i < N; i++) {
    /* wide magnitudes, both signs, the switch point and the edges */
    float mag = ldexpf((float)rand_r(&seed) / (float)RAND_MAX, (int)(rand_r(&seed) % 40) - 30);
    x[i] = rand_r(&seed) & 1 ? -mag : mag;
  }
  const float edges[] = {0.0f, -0.0f, 0.55f, -0.55f, 0.5499999f, 9.0f, 20.0f, -100.0f, INFINITY, -INFINITY, 1e-30f};
  memcpy(x, edges, sizeof(edges));
  x[sizeof(edges) / sizeof(edges[0])] = NAN;
  int cnt = N;
  void *px = x, *py = y;
  void *args[] = {&px, &py, &cnt};
  uint32_t grid[3] = {N / 256, 1, 1}, blk[3] = {256, 1, 1};
  th_cpu_run(&m, &a, "th", grid, blk, 0, args);
  for (int i = 0; i < N; i++) {
    float want = (float)tanh((double)x[i]);
    if (isnan(x[i])) {
      cr_assert(isnan(y[i]));
      continue;
    }
    int64_t d = float_order(y[i]) - float_order(want);
    cr_assert(d >= -2 && d <= 2, "tanhf(%.9g) = %.9g, want %.9g (%lld ulp)", x[i], y[i], want, (long long)d);
  }
  th_cpu_unload(&m);
  kiln_artifact_deinit(&a);
}
