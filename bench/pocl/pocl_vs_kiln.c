/* pocl_vs_kiln: the conformance kernels on kiln's cpu backend beside the same kernels in
 * OpenCL C (bench/pocl/kernels.cl) on PoCL, in one process and one run.
 *
 *   pocl_vs_kiln ARTIFACT_DIR KERNELS_CL
 *
 * For every kernel: the same sizes, inputs and work-group sizes on both; one run from the same
 * inputs whose outputs are compared (kiln against PoCL: exact for integer and data-movement
 * kernels, a few ulp for floating point where the two may fuse or round libm differently);
 * then WARMUP unmeasured and RUNS measured single launches on each. Device time is the
 * backend's own clock: kiln's launch(count 1, out_elapsed_ns), PoCL's profiling event
 * (COMMAND_END - COMMAND_START). Wall time is launch + wait on the host (kiln's launch
 * returns after completion; clEnqueueNDRangeKernel + clFinish). ratio = PoCL / kiln on the
 * minimum device time (> 1: kiln is faster). Also the host's memcpy bandwidth and the tiny
 * (1 work-item) launch round trip on both.
 *
 * Prints a markdown table on stdout (bench/pocl/run.sh puts it in
 * bench/results/devices_cpu.md); exits 1 if an output disagrees. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "device/launch.h"
#include "device/registry.h"
#include "device/timing.h"

#define WARMUP 3
#define RUNS 20

#define KDIE(s)                                                                    \
  do {                                                                             \
    kiln_status_t s_ = (s);                                                        \
    if (s_) {                                                                      \
      fprintf(stderr, "pocl_vs_kiln: kiln: %s (%s)\n", kiln_status_message(s_), #s); \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)
#define CLDIE(e)                                                                   \
  do {                                                                             \
    cl_int e_ = (e);                                                               \
    if (e_ != CL_SUCCESS) {                                                        \
      fprintf(stderr, "pocl_vs_kiln: OpenCL error %d at %s:%d (%s)\n", e_, __FILE__, __LINE__, #e); \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

/* ---- the problems ---- */

enum { MAXBUF = 3, MAXARG = 5 };
enum init_kind { INIT_ZERO, INIT_F_UNIT, INIT_F_RANGE, INIT_U_RANDOM, INIT_I_SMALL };
enum cmp_kind { CMP_EXACT, CMP_ULP };
typedef struct {
  size_t count; /* elements of 4 bytes */
  enum init_kind init;
  float lo, hi; /* INIT_F_RANGE */
} buf_spec_t;
typedef struct {
  char kind; /* 'b' buffer, 'i' int, 'f' float */
  int buf;
  int64_t i;
  double f;
} arg_spec_t;
typedef struct {
  const char *name;   /* kernel name in both */
  const char *kart;   /* artifact base name in ARTIFACT_DIR: <kart>.<arch>.kart */
  const char *size;   /* for the table */
  int dims;
  uint32_t groups[2], local[2];
  int nbufs;
  buf_spec_t bufs[MAXBUF];
  int nargs;
  arg_spec_t args[MAXARG];
  int out;            /* buffer compared */
  enum cmp_kind cmp;
  uint32_t max_ulp;   /* CMP_ULP: allowed distance (or |diff| <= 1e-6 near 0) */
  double bytes;       /* bytes moved per launch, for GB/s (0: not shown) */
} problem_t;

#define N24 (1u << 24)
#define N22 (1u << 22)
#define SIDE 4096u
#define B(n) {'b', n, 0, 0}
#define I(v) {'i', 0, v, 0}
#define F(v) {'f', 0, 0, v}
#define FR(n, a, b) {n, INIT_F_RANGE, a, b}
#define UNARY(nm, a, b, ulp)                                                                      \
  {nm, "math", "2^22", 1, {N22 / 256, 1}, {256, 1}, 2, {FR(N22, a, b), {N22, INIT_ZERO, 0, 0}}, 3, \
   {B(0), B(1), I(N22)}, 1, CMP_ULP, ulp, 8.0 * N22}

static const problem_t problems[] = {
    {"vadd", "vadd", "2^24", 1, {N24 / 256, 1}, {256, 1}, 3,
     {{N24, INIT_F_UNIT, 0, 0}, {N24, INIT_F_UNIT, 0, 0}, {N24, INIT_ZERO, 0, 0}}, 4,
     {B(0), B(1), B(2), I(N24)}, 2, CMP_EXACT, 0, 12.0 * N24},
    {"saxpy", "saxpy", "2^24", 1, {N24 / 256, 1}, {256, 1}, 2,
     {{N24, INIT_F_UNIT, 0, 0}, {N24, INIT_F_UNIT, 0, 0}}, 4, {F(2.5), B(0), B(1), I(N24)}, 1,
     CMP_ULP, 1, 12.0 * N24},
    {"transpose", "transpose", "4096x4096", 2, {SIDE / 16, SIDE / 16}, {16, 16}, 2,
     {{SIDE * SIDE, INIT_F_UNIT, 0, 0}, {SIDE * SIDE, INIT_ZERO, 0, 0}}, 4,
     {B(0), B(1), I(SIDE), I(SIDE)}, 1, CMP_EXACT, 0, 8.0 * SIDE * SIDE},
    {"reduce_sum", "reduce", "2^24", 1, {N24 / 256, 1}, {256, 1}, 2,
     {{N24, INIT_I_SMALL, 0, 0}, {N24 / 256, INIT_ZERO, 0, 0}}, 3, {B(0), B(1), I(N24)}, 1,
     CMP_EXACT, 0, 4.0 * N24},
    {"histogram", "histogram", "2^24, 256 bins", 1, {N24 / 256, 1}, {256, 1}, 2,
     {{N24, INIT_U_RANDOM, 0, 0}, {256, INIT_ZERO, 0, 0}}, 4, {B(0), B(1), I(N24), I(256)}, 1,
     CMP_EXACT, 0, 4.0 * N24},
    {"stencil5", "stencil", "4096x4096", 2, {SIDE / 16, SIDE / 16}, {16, 16}, 2,
     {{SIDE * SIDE, INIT_F_UNIT, 0, 0}, {SIDE * SIDE, INIT_ZERO, 0, 0}}, 4,
     {B(0), B(1), I(SIDE), I(SIDE)}, 1, CMP_ULP, 1, 8.0 * SIDE * SIDE},
    UNARY("math_exp", -10.f, 10.f, 4),
    UNARY("math_log", 1e-3f, 100.f, 4),
    UNARY("math_sqrt", 0.f, 100.f, 1),
    UNARY("math_tanh", -5.f, 5.f, 6),
    UNARY("math_erf", -3.f, 3.f, 16),
    UNARY("math_sin", -10.f, 10.f, 4),
    {"math_pow", "math", "2^22", 1, {N22 / 256, 1}, {256, 1}, 3,
     {FR(N22, 0.01f, 10.f), FR(N22, -3.f, 3.f), {N22, INIT_ZERO, 0, 0}}, 4,
     {B(0), B(1), B(2), I(N22)}, 2, CMP_ULP, 16, 12.0 * N22},
};
#define NPROB (sizeof problems / sizeof problems[0])

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

static void fill(void *p, const buf_spec_t *s) {
  float *f = p;
  uint32_t *u = p;
  int32_t *i = p;
  for (size_t k = 0; k < s->count; k++) {
    switch (s->init) {
      case INIT_ZERO: u[k] = 0; break;
      case INIT_F_UNIT: f[k] = (float)(next_u32() & 0xffffff) / 16777216.0f; break;
      case INIT_F_RANGE: f[k] = s->lo + (s->hi - s->lo) * ((float)(next_u32() & 0xffffff) / 16777216.0f); break;
      case INIT_U_RANDOM: u[k] = next_u32(); break;
      case INIT_I_SMALL: i[k] = (int32_t)(next_u32() % 201) - 100; break;
    }
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}
static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(*len + 1);
  if (fread(b, 1, *len, f) != *len) *len = 0;
  b[*len] = 0;
  fclose(f);
  return b;
}

/* Best-of-5 memcpy bandwidth over `bytes`, counted as read + write (as kiln-device-bench). */
static double memcpy_gbs(size_t bytes) {
  char *a = malloc(bytes), *b = malloc(bytes);
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double best = 0;
  for (int r = 0; r < 5; r++) {
    uint64_t t0 = kiln_now_ns();
    memcpy(b, a, bytes);
    double gbs = 2.0 * (double)bytes / (double)(kiln_now_ns() - t0);
    if (gbs > best) best = gbs;
  }
  free(a);
  free(b);
  return best;
}

/* Ordered-integer distance between two floats, in ulps. */
static uint64_t ulp_dist(float a, float b) {
  int32_t ia, ib;
  memcpy(&ia, &a, 4);
  memcpy(&ib, &b, 4);
  int64_t oa = ia < 0 ? (int64_t)INT32_MIN - ia : ia, ob = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
  return (uint64_t)(oa > ob ? oa - ob : ob - oa);
}

typedef struct {
  double min_ms, med_ms, wall_med_ms;
} timing_t;

static void summarize(double *dev_s, double *wall_s, timing_t *t) {
  qsort(dev_s, RUNS, sizeof *dev_s, cmp_dbl);
  qsort(wall_s, RUNS, sizeof *wall_s, cmp_dbl);
  t->min_ms = dev_s[0] * 1e3;
  t->med_ms = dev_s[RUNS / 2] * 1e3;
  t->wall_med_ms = wall_s[RUNS / 2] * 1e3;
}

/* ---- kiln ---- */

typedef struct {
  const kiln_backend_t *b;
  kiln_device_t *dev;
  const kiln_device_info_t *info;
  const char *dir;
} kiln_ctx_t;

typedef struct {
  kiln_artifact_t art;
  kiln_dmodule_t *mod;
  char name[64];
} kiln_mod_t;

static kiln_mod_t kmods[8];
static int nkmods;

static kiln_mod_t *kiln_module(kiln_ctx_t *c, const char *base) {
  for (int i = 0; i < nkmods; i++)
    if (!strcmp(kmods[i].name, base)) return &kmods[i];
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%.*s.kart", c->dir, base, (int)strcspn(c->info->arch, ":"), c->info->arch);
  size_t len;
  uint8_t *bytes = read_file(path, &len);
  if (!bytes) {
    fprintf(stderr, "pocl_vs_kiln: no %s\n", path);
    exit(1);
  }
  kiln_mod_t *m = &kmods[nkmods++];
  snprintf(m->name, sizeof m->name, "%s", base);
  KDIE(kiln_artifact_decode(bytes, len, &m->art));
  free(bytes);
  KDIE(c->b->module_load(c->dev, &m->art, &m->mod));
  return m;
}

/* Runs problem p once from `init` (outputs into out), then times it. */
static void kiln_run(kiln_ctx_t *c, const problem_t *p, void *const *init, void *out, timing_t *t) {
  const kiln_backend_t *b = c->b;
  kiln_mod_t *m = kiln_module(c, p->kart);
  const kiln_kernel_t *k = kiln_artifact_kernel(&m->art, p->name);
  if (!k) {
    fprintf(stderr, "pocl_vs_kiln: no kernel %s in %s\n", p->name, p->kart);
    exit(1);
  }
  kiln_dmem_t *mem[MAXBUF];
  for (int i = 0; i < p->nbufs; i++) {
    KDIE(b->mem_alloc(c->dev, p->bufs[i].count * 4, &mem[i]));
    KDIE(b->copy_in(c->dev, mem[i], 0, init[i], p->bufs[i].count * 4));
  }
  kiln_launch_arg_t in[MAXARG];
  for (int a = 0; a < p->nargs; a++) {
    const arg_spec_t *s = &p->args[a];
    if (s->kind == 'b') in[a] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = b->mem_address(c->dev, mem[s->buf])};
    else if (s->kind == 'i') in[a] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_INT, .i = s->i};
    else in[a] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_FLOAT, .f = s->f};
  }
  kiln_launch_values_t v;
  KDIE(kiln_launch_values_init(&v, k, in, (size_t)p->nargs));
  uint32_t grid[3] = {p->groups[0], p->groups[1], 1}, block[3] = {p->local[0], p->local[1], 1};
  kiln_launch_t l;
  KDIE(kiln_launch_prepare(k, c->info, grid, block, 0, v.ptrs, &l));
  KDIE(b->launch(c->dev, m->mod, &l, 1, 0, NULL));
  KDIE(b->copy_out(c->dev, mem[p->out], 0, out, p->bufs[p->out].count * 4));
  for (int i = 0; i < WARMUP; i++) KDIE(b->launch(c->dev, m->mod, &l, 1, 0, NULL));
  double dev_s[RUNS], wall_s[RUNS];
  for (int i = 0; i < RUNS; i++) {
    uint64_t ns = 0, t0 = kiln_now_ns();
    KDIE(b->launch(c->dev, m->mod, &l, 1, 0, &ns));
    wall_s[i] = (double)(kiln_now_ns() - t0) / 1e9;
    dev_s[i] = (double)ns / 1e9;
  }
  summarize(dev_s, wall_s, t);
  kiln_launch_values_deinit(&v);
  for (int i = 0; i < p->nbufs; i++) b->mem_free(c->dev, mem[i]);
}

/* ---- PoCL ---- */

typedef struct {
  cl_context ctx;
  cl_command_queue q;
  cl_program prog;
  cl_device_id dev;
} cl_ctx_t;

static void cl_run(cl_ctx_t *c, const problem_t *p, void *const *init, void *out, timing_t *t) {
  cl_int err;
  cl_kernel k = clCreateKernel(c->prog, p->name, &err);
  CLDIE(err);
  cl_mem mem[MAXBUF];
  for (int i = 0; i < p->nbufs; i++) {
    mem[i] = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, p->bufs[i].count * 4, NULL, &err);
    CLDIE(err);
    CLDIE(clEnqueueWriteBuffer(c->q, mem[i], CL_TRUE, 0, p->bufs[i].count * 4, init[i], 0, NULL, NULL));
  }
  for (int a = 0; a < p->nargs; a++) {
    const arg_spec_t *s = &p->args[a];
    if (s->kind == 'b') CLDIE(clSetKernelArg(k, (cl_uint)a, sizeof(cl_mem), &mem[s->buf]));
    else if (s->kind == 'i') {
      cl_int v = (cl_int)s->i;
      CLDIE(clSetKernelArg(k, (cl_uint)a, sizeof v, &v));
    } else {
      cl_float v = (cl_float)s->f;
      CLDIE(clSetKernelArg(k, (cl_uint)a, sizeof v, &v));
    }
  }
  size_t gs[2] = {(size_t)p->groups[0] * p->local[0], (size_t)p->groups[1] * p->local[1]};
  size_t ls[2] = {p->local[0], p->local[1]};
  CLDIE(clEnqueueNDRangeKernel(c->q, k, (cl_uint)p->dims, NULL, gs, ls, 0, NULL, NULL));
  CLDIE(clEnqueueReadBuffer(c->q, mem[p->out], CL_TRUE, 0, p->bufs[p->out].count * 4, out, 0, NULL, NULL));
  for (int i = 0; i < WARMUP; i++) CLDIE(clEnqueueNDRangeKernel(c->q, k, (cl_uint)p->dims, NULL, gs, ls, 0, NULL, NULL));
  CLDIE(clFinish(c->q));
  double dev_s[RUNS], wall_s[RUNS];
  for (int i = 0; i < RUNS; i++) {
    cl_event ev;
    uint64_t t0 = kiln_now_ns();
    CLDIE(clEnqueueNDRangeKernel(c->q, k, (cl_uint)p->dims, NULL, gs, ls, 0, NULL, &ev));
    CLDIE(clFinish(c->q));
    wall_s[i] = (double)(kiln_now_ns() - t0) / 1e9;
    cl_ulong s, e;
    CLDIE(clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof s, &s, NULL));
    CLDIE(clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof e, &e, NULL));
    dev_s[i] = (double)(e - s) / 1e9;
    clReleaseEvent(ev);
  }
  summarize(dev_s, wall_s, t);
  for (int i = 0; i < p->nbufs; i++) clReleaseMemObject(mem[i]);
  clReleaseKernel(k);
}

static void cl_setup(cl_ctx_t *c, const char *cl_path) {
  cl_platform_id plats[8];
  cl_uint np = 0;
  CLDIE(clGetPlatformIDs(8, plats, &np));
  cl_platform_id plat = NULL;
  for (cl_uint i = 0; i < np && !plat; i++) {
    char name[256] = "";
    clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    if (strstr(name, "Portable Computing Language")) plat = plats[i];
  }
  if (!plat) {
    fprintf(stderr, "pocl_vs_kiln: no PoCL platform (install pocl-opencl-icd)\n");
    exit(1);
  }
  CLDIE(clGetDeviceIDs(plat, CL_DEVICE_TYPE_CPU, 1, &c->dev, NULL));
  cl_int err;
  c->ctx = clCreateContext(NULL, 1, &c->dev, NULL, NULL, &err);
  CLDIE(err);
  c->q = clCreateCommandQueue(c->ctx, c->dev, CL_QUEUE_PROFILING_ENABLE, &err);
  CLDIE(err);
  size_t len;
  char *src = (char *)read_file(cl_path, &len);
  if (!src) {
    fprintf(stderr, "pocl_vs_kiln: no %s\n", cl_path);
    exit(1);
  }
  const char *srcs[1] = {src};
  c->prog = clCreateProgramWithSource(c->ctx, 1, srcs, NULL, &err);
  CLDIE(err);
  err = clBuildProgram(c->prog, 1, &c->dev, "", NULL, NULL);
  if (err != CL_SUCCESS) {
    char log[16384] = "";
    clGetProgramBuildInfo(c->prog, c->dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
    fprintf(stderr, "pocl_vs_kiln: build of %s failed:\n%s\n", cl_path, log);
    exit(1);
  }
  free(src);
}

/* Tiny launch (vadd of 1 element) round trip, p50 in us, on both. */
static void tiny(kiln_ctx_t *kc, cl_ctx_t *cc, double *kiln_us, double *cl_us) {
  enum { N = 2000 };
  static uint64_t lat[N];
  float z[1] = {0};
  /* kiln */
  kiln_mod_t *m = kiln_module(kc, "vadd");
  const kiln_kernel_t *k = kiln_artifact_kernel(&m->art, "vadd");
  kiln_dmem_t *mem[3];
  kiln_launch_arg_t in[4];
  for (int i = 0; i < 3; i++) {
    KDIE(kc->b->mem_alloc(kc->dev, 4, &mem[i]));
    KDIE(kc->b->copy_in(kc->dev, mem[i], 0, z, 4));
    in[i] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = kc->b->mem_address(kc->dev, mem[i])};
  }
  in[3] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_INT, .i = 1};
  kiln_launch_values_t v;
  KDIE(kiln_launch_values_init(&v, k, in, 4));
  uint32_t one[3] = {1, 1, 1};
  kiln_launch_t l;
  KDIE(kiln_launch_prepare(k, kc->info, one, one, 0, v.ptrs, &l));
  for (int i = 0; i < 100; i++) KDIE(kc->b->launch(kc->dev, m->mod, &l, 1, 0, NULL));
  for (int i = 0; i < N; i++) {
    uint64_t t0 = kiln_now_ns();
    KDIE(kc->b->launch(kc->dev, m->mod, &l, 1, 0, NULL));
    lat[i] = kiln_now_ns() - t0;
  }
  qsort(lat, N, sizeof lat[0], cmp_u64);
  *kiln_us = lat[N / 2] / 1e3;
  kiln_launch_values_deinit(&v);
  for (int i = 0; i < 3; i++) kc->b->mem_free(kc->dev, mem[i]);
  /* PoCL */
  cl_int err;
  cl_kernel ck = clCreateKernel(cc->prog, "vadd", &err);
  CLDIE(err);
  cl_mem cm[3];
  for (int i = 0; i < 3; i++) {
    cm[i] = clCreateBuffer(cc->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 4, z, &err);
    CLDIE(err);
    CLDIE(clSetKernelArg(ck, (cl_uint)i, sizeof(cl_mem), &cm[i]));
  }
  cl_int n1 = 1;
  CLDIE(clSetKernelArg(ck, 3, sizeof n1, &n1));
  size_t g1 = 1;
  for (int i = 0; i < 100; i++) {
    CLDIE(clEnqueueNDRangeKernel(cc->q, ck, 1, NULL, &g1, &g1, 0, NULL, NULL));
    CLDIE(clFinish(cc->q));
  }
  for (int i = 0; i < N; i++) {
    uint64_t t0 = kiln_now_ns();
    CLDIE(clEnqueueNDRangeKernel(cc->q, ck, 1, NULL, &g1, &g1, 0, NULL, NULL));
    CLDIE(clFinish(cc->q));
    lat[i] = kiln_now_ns() - t0;
  }
  qsort(lat, N, sizeof lat[0], cmp_u64);
  *cl_us = lat[N / 2] / 1e3;
  for (int i = 0; i < 3; i++) clReleaseMemObject(cm[i]);
  clReleaseKernel(ck);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: pocl_vs_kiln ARTIFACT_DIR KERNELS_CL\n");
    return 2;
  }
  kiln_ctx_t kc = {.dir = argv[1]};
  uint32_t index;
  KDIE(kiln_device_id_parse("cpu:0", &kc.b, &index));
  KDIE(kc.b->open(index, NULL, 0, &kc.dev));
  kc.info = kc.b->info(kc.dev);
  cl_ctx_t cc;
  cl_setup(&cc, argv[2]);

  char cl_name[256] = "", cl_ver[256] = "";
  cl_uint cus = 0;
  clGetDeviceInfo(cc.dev, CL_DEVICE_NAME, sizeof cl_name, cl_name, NULL);
  clGetDeviceInfo(cc.dev, CL_DEVICE_VERSION, sizeof cl_ver, cl_ver, NULL);
  clGetDeviceInfo(cc.dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
  printf("- kiln: %s (%s, %s)\n", kc.info->id, kc.info->name, kc.info->arch);
  printf("- PoCL: %s, %s, %u compute units\n", cl_name, cl_ver, cus);
  double mc = memcpy_gbs((size_t)N24 * 4 * 2);
  printf("- host memcpy (this run, 128 MiB, read + write): %.1f GB/s\n", mc);
  printf("- %d warm-up + %d measured single launches per kernel and implementation; ms = device-side "
         "time (kiln launch clock, PoCL profiling event), min and median; wall = launch + wait on the host, "
         "median; ratio = PoCL min / kiln min (> 1: kiln faster)\n\n",
         WARMUP, RUNS);
  printf("| kernel | size | work-group | kiln ms (min / med) | PoCL ms (min / med) | kiln wall ms | PoCL wall ms | ratio | kiln GB/s | outputs |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|\n");
  int bad = 0;
  char vadd_line[256] = "";
  for (size_t pi = 0; pi < NPROB; pi++) {
    const problem_t *p = &problems[pi];
    /* POCL_VS_KILN_ONLY=name runs one kernel (for perf record). */
    if (getenv("POCL_VS_KILN_ONLY") && strcmp(getenv("POCL_VS_KILN_ONLY"), p->name)) continue;
    void *init[MAXBUF];
    for (int i = 0; i < p->nbufs; i++) {
      init[i] = malloc(p->bufs[i].count * 4);
      fill(init[i], &p->bufs[i]);
    }
    size_t on = p->bufs[p->out].count;
    void *ko = malloc(on * 4), *co = malloc(on * 4);
    timing_t kt, ct;
    kiln_run(&kc, p, init, ko, &kt);
    cl_run(&cc, p, init, co, &ct);
    /* Compare kiln against PoCL. */
    char verdict[96];
    if (p->cmp == CMP_EXACT) {
      size_t diff = 0;
      for (size_t i = 0; i < on; i++) diff += ((uint32_t *)ko)[i] != ((uint32_t *)co)[i];
      if (diff) {
        bad = 1;
        snprintf(verdict, sizeof verdict, "**DIFFER** in %zu of %zu", diff, on);
      } else snprintf(verdict, sizeof verdict, "identical (%zu)", on);
    } else {
      uint64_t worst = 0;
      double worst_abs = 0;
      size_t over = 0, nonbit = 0;
      for (size_t i = 0; i < on; i++) {
        float a = ((float *)ko)[i], b = ((float *)co)[i];
        if (!memcmp(&a, &b, 4)) continue;
        nonbit++;
        uint64_t d = ulp_dist(a, b);
        if (d > worst) worst = d;
        if (fabs((double)a - b) > worst_abs) worst_abs = fabs((double)a - b);
        if (d > p->max_ulp && fabsf(a - b) > 1e-6f) over++;
      }
      if (over) {
        bad = 1;
        snprintf(verdict, sizeof verdict, "**DIFFER**: %zu beyond %u ulp (max %llu)", over, p->max_ulp,
                 (unsigned long long)worst);
      } else if (!nonbit) snprintf(verdict, sizeof verdict, "identical (%zu)", on);
      else
        snprintf(verdict, sizeof verdict, "%zu of %zu differ, max %llu ulp / %.1e abs", nonbit, on,
                 (unsigned long long)worst, worst_abs);
    }
    char gbs[32] = "";
    if (p->bytes > 0) snprintf(gbs, sizeof gbs, "%.1f", p->bytes / (kt.min_ms * 1e-3) / 1e9);
    char wg[32];
    if (p->dims == 2) snprintf(wg, sizeof wg, "%ux%u", p->local[0], p->local[1]);
    else snprintf(wg, sizeof wg, "%u", p->local[0]);
    printf("| %s | %s | %s | %.3f / %.3f | %.3f / %.3f | %.3f | %.3f | %.2fx | %s | %s |\n", p->name, p->size, wg,
           kt.min_ms, kt.med_ms, ct.min_ms, ct.med_ms, kt.wall_med_ms, ct.wall_med_ms, ct.min_ms / kt.min_ms, gbs,
           verdict);
    fflush(stdout);
    if (!strcmp(p->name, "vadd"))
      snprintf(vadd_line, sizeof vadd_line, "- vadd 2^24 in this run: kiln %.1f GB/s = %.0f%% of memcpy; PoCL %.1f GB/s = %.0f%% (min device time, 12 bytes per element)\n", p->bytes / (kt.min_ms * 1e-3) / 1e9,
              100.0 * p->bytes / (kt.min_ms * 1e-3) / 1e9 / mc, p->bytes / (ct.min_ms * 1e-3) / 1e9,
              100.0 * p->bytes / (ct.min_ms * 1e-3) / 1e9 / mc);
    for (int i = 0; i < p->nbufs; i++) free(init[i]);
    free(ko);
    free(co);
  }
  double kus, cus_;
  tiny(&kc, &cc, &kus, &cus_);
  printf("\n%s", vadd_line);
  printf("- tiny launch (vadd, 1 work-item) round trip, launch + wait, p50 of 2000: kiln %.1f us, PoCL %.1f us\n", kus, cus_);
  for (int i = 0; i < nkmods; i++) {
    kc.b->module_unload(kc.dev, kmods[i].mod);
    kiln_artifact_deinit(&kmods[i].art);
  }
  kc.b->close(kc.dev);
  clReleaseProgram(cc.prog);
  clReleaseCommandQueue(cc.q);
  clReleaseContext(cc.ctx);
  if (bad) fprintf(stderr, "pocl_vs_kiln: outputs differ between kiln and PoCL\n");
  return bad;
}
