/* te programs (docs/te.md): compiled for cpu and run through the work-group harness against
 * references computed here on random inputs (odd sizes, partial tiles, symbolic shapes,
 * shared-memory GEMM), compiled for gfx942 and sm_90 (PTX through ptxas where present), and
 * the errors malformed programs get. The launch of every run comes from the kernel's launch
 * recipe, evaluated here the way a client would. Programs are written as JSON text and turned
 * into MessagePack by a small converter below. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/util.h"
#include "tests/compiler/harness.h"
#include "tests/compiler/te_json.h"

/* ---- compile ---------------------------------------------------------------------------- */

static uint32_t opt_level = 3;       /* of te_compile and te_compile_status */
static uint32_t parallel_groups = 0; /* launch_of: groups of a parallel dimension, 0: the recipe's grid */

static kiln_status_t te_compile_status(const char *json, const char *target, kiln_artifact_t *out) {
  msgpack_sbuffer sb = te_json_to_msgpack(json);
  kiln_compiler_t *c;
  kiln_status_t s = kiln_compiler_create(NULL, &c);
  cr_assert(!s);
  kiln_compile_request_t req = {.payload = (const uint8_t *)sb.data, .payload_size = sb.size,
                                .kind = KILN_PAYLOAD_TE, .target = target,
                                .options = kiln_compile_options_default()};
  req.options.opt_level = opt_level;
  kiln_artifact_t a;
  s = kiln_compiler_compile(c, &req, &a);
  if (!s && out) *out = a;
  else if (!s) kiln_artifact_deinit(&a);
  kiln_compiler_destroy(c);
  msgpack_sbuffer_destroy(&sb);
  return s;
}

static void te_compile(const char *json, const char *target, kiln_artifact_t *out) {
  kiln_status_t s = te_compile_status(json, target, out);
  cr_assert(!s, "te compile for %s: %s: %s", target, s ? kiln_code_name(kiln_status_code(s)) : "",
            s ? kiln_status_message(s) : "");
}

static void expect_error(const char *json, const char *needle) {
  kiln_status_t s = te_compile_status(json, "cpu", NULL);
  cr_assert(s, "compiled, expected an error containing '%s'", needle);
  cr_assert_eq(kiln_status_code(s), KILN_E_COMPILE, "code %s: %s", kiln_code_name(kiln_status_code(s)),
               kiln_status_message(s));
  cr_assert(strstr(kiln_status_message(s), needle), "message '%s' lacks '%s'", kiln_status_message(s), needle);
  kiln_status_free(s);
}

/* ---- the launch recipe, evaluated as a client does ------------------------------------ */

typedef struct shape_arg {
  int ndim;
  int64_t dims[4];
} shape_arg_t;

typedef struct launch {
  uint32_t grid[3], block[3];
  int nvars;
  char names[8][16];
  int64_t values[8];
  int arg[8];
  int nparallel; /* dimensions the recipe marks parallel */
} launch_t;

static int64_t eval(const msgpack_object *o, const launch_t *l) {
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) return (int64_t)o->via.u64;
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) return o->via.i64;
  cr_assert(o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size >= 2, "launch expression shape");
  const msgpack_object *a = o->via.array.ptr;
  char op[16] = {0};
  memcpy(op, a[0].via.str.ptr, a[0].via.str.size < 15 ? a[0].via.str.size : 15);
  if (strcmp(op, "var") == 0) {
    for (int i = 0; i < l->nvars; i++)
      if (strlen(l->names[i]) == a[1].via.str.size && memcmp(l->names[i], a[1].via.str.ptr, a[1].via.str.size) == 0)
        return l->values[i];
    cr_assert_fail("launch names an unknown var");
  }
  int64_t x = eval(&a[1], l), y = eval(&a[2], l);
  if (strcmp(op, "add") == 0) return x + y;
  if (strcmp(op, "sub") == 0) return x - y;
  if (strcmp(op, "mul") == 0) return x * y;
  if (strcmp(op, "floordiv") == 0) return x / y - (x % y != 0 && ((x < 0) != (y < 0)));
  if (strcmp(op, "floormod") == 0) return x - y * (x / y - (x % y != 0 && ((x < 0) != (y < 0))));
  if (strcmp(op, "min") == 0) return x < y ? x : y;
  if (strcmp(op, "max") == 0) return x > y ? x : y;
  cr_assert_fail("unknown launch op %s", op);
  return 0;
}

static const msgpack_object *field(const msgpack_object *m, const char *k) {
  for (uint32_t i = 0; i < m->via.map.size; i++)
    if (m->via.map.ptr[i].key.via.str.size == strlen(k) && memcmp(m->via.map.ptr[i].key.via.str.ptr, k, strlen(k)) == 0)
      return &m->via.map.ptr[i].val;
  cr_assert_fail("launch lacks %s", k);
  return NULL;
}

/* Reads the recipe of kernel `name` and computes grid, block and the var values from the
 * shapes of the tensor arguments (shapes[i] for argument i). */
static launch_t launch_of(const kiln_artifact_t *a, const char *name, const shape_arg_t *shapes) {
  const kiln_kernel_t *k = kiln_artifact_kernel(a, name);
  cr_assert(k && k->launch, "kernel %s has a launch recipe", name);
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  cr_assert_eq(msgpack_unpack_next(&u, (const char *)k->launch, k->launch_size, NULL), MSGPACK_UNPACK_SUCCESS);
  launch_t l = {0};
  const msgpack_object *vars = field(&u.data, "vars");
  l.nvars = (int)vars->via.array.size;
  for (int i = 0; i < l.nvars; i++) {
    const msgpack_object *v = &vars->via.array.ptr[i];
    const msgpack_object *nm = field(v, "name"), *from = field(v, "from");
    memcpy(l.names[i], nm->via.str.ptr, nm->via.str.size);
    l.arg[i] = (int)field(v, "arg")->via.u64;
    cr_assert(from->type == MSGPACK_OBJECT_ARRAY, "var %s has a source", l.names[i]);
    l.values[i] = shapes[from->via.array.ptr[0].via.u64].dims[from->via.array.ptr[1].via.u64];
  }
  const msgpack_object *grid = field(&u.data, "grid"), *block = field(&u.data, "block");
  for (int d = 0; d < 3; d++) {
    l.grid[d] = (uint32_t)eval(&grid->via.array.ptr[d], &l);
    l.block[d] = (uint32_t)eval(&block->via.array.ptr[d], &l);
  }
  /* Dimensions of parallel loops: a client may launch fewer groups (one per pool thread). */
  for (uint32_t i = 0; i < u.data.via.map.size; i++) {
    const msgpack_object_kv *kv = &u.data.via.map.ptr[i];
    if (kv->key.via.str.size != 8 || memcmp(kv->key.via.str.ptr, "parallel", 8) != 0) continue;
    for (uint32_t j = 0; j < kv->val.via.array.size; j++) {
      uint64_t d = kv->val.via.array.ptr[j].via.u64;
      cr_assert(d < 3);
      l.nparallel++;
      if (parallel_groups && l.grid[d] > parallel_groups) l.grid[d] = parallel_groups;
    }
  }
  msgpack_unpacked_destroy(&u);
  return l;
}

/* Runs kernel `name` of a cpu artifact: tensor args are pointers (ptrs[i]), var args come
 * from the recipe. */
static launch_t run_cpu(const kiln_artifact_t *a, const char *name, int ntensors, void **ptrs,
                        const shape_arg_t *shapes) {
  launch_t l = launch_of(a, name, shapes);
  th_cpu_module_t m;
  th_cpu_load(a, &m);
  void *args[16];
  int32_t vals[8];
  int64_t vals64[8];
  const kiln_kernel_t *k = kiln_artifact_kernel(a, name);
  for (int i = 0; i < ntensors; i++) args[i] = &ptrs[i];
  for (int i = 0; i < l.nvars; i++) {
    vals[i] = (int32_t)l.values[i];
    vals64[i] = l.values[i];
    bool wide = k->args[l.arg[i]].type == KILN_ARG_I64; /* index_dtype int64 */
    args[l.arg[i]] = wide ? (void *)&vals64[i] : (void *)&vals[i];
  }
  th_cpu_run(&m, a, name, l.grid, l.block, 0, args);
  th_cpu_unload(&m);
  return l;
}

static float *rand_floats(size_t n, unsigned *seed) {
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = (float)rand_r(seed) / (float)RAND_MAX * 2.0f - 1.0f;
  return p;
}

static void check_close(const float *got, const float *want, size_t n, float tol, const char *what) {
  for (size_t i = 0; i < n; i++)
    cr_assert(fabsf(got[i] - want[i]) <= tol * (1.0f + fabsf(want[i])), "%s[%zu] = %g, want %g", what, i, got[i],
              want[i]);
}

/* ---- elementwise -------------------------------------------------------------------------- */

#define VADD(SCHED)                                                                                          \
  "{\"te\": 1, \"vars\": [{\"name\": \"n\"}], \"tensors\": ["                                               \
  "{\"name\": \"A\", \"op\": \"placeholder\", \"dtype\": \"float32\", \"shape\": [[\"var\", \"n\"]]},"     \
  "{\"name\": \"B\", \"op\": \"placeholder\", \"dtype\": \"float32\", \"shape\": [[\"var\", \"n\"]]},"     \
  "{\"name\": \"C\", \"op\": \"compute\", \"dtype\": \"float32\", \"shape\": [[\"var\", \"n\"]], "         \
  "\"axes\": [\"i\"], \"body\": [\"add\", [\"load\", \"A\", [[\"var\", \"i\"]]], [\"load\", \"B\", [[\"var\", \"i\"]]]]}]," \
  "\"schedule\": [" SCHED "], \"kernels\": [{\"name\": \"vadd\", \"args\": [\"A\", \"B\", \"C\"]}]}"

#define GPU_SPLIT                                                                                         \
  "{\"op\": \"split\", \"stage\": \"C\", \"var\": \"i\", \"factor\": 64, \"outer\": \"bx\", \"inner\": \"tx\"}," \
  "{\"op\": \"bind\", \"stage\": \"C\", \"var\": \"bx\", \"thread\": \"blockIdx.x\"},"                     \
  "{\"op\": \"bind\", \"stage\": \"C\", \"var\": \"tx\", \"thread\": \"threadIdx.x\"}"

#define CPU_SPLIT                                                                                         \
  "{\"op\": \"split\", \"stage\": \"C\", \"var\": \"i\", \"factor\": 16},"                                  \
  "{\"op\": \"parallel\", \"stage\": \"C\", \"var\": \"i.outer\"},"                                         \
  "{\"op\": \"vectorize\", \"stage\": \"C\", \"var\": \"i.inner\"}"

static void vadd_check(const char *json, int n, uint32_t want_block) {
  kiln_artifact_t a;
  te_compile(json, "cpu", &a);
  unsigned seed = (unsigned)n * 7u + 1u;
  float *x = rand_floats((size_t)n + 1, &seed), *y = rand_floats((size_t)n + 1, &seed);
  float *z = calloc((size_t)n + 1, sizeof(float));
  z[n] = 12345.0f; /* past the end: must stay */
  void *ptrs[3] = {x, y, z};
  shape_arg_t shapes[3] = {{1, {n}}, {1, {n}}, {1, {n}}};
  launch_t l = run_cpu(&a, "vadd", 3, ptrs, shapes);
  cr_assert_eq(l.block[0], want_block);
  for (int i = 0; i < n; i++) cr_assert_eq(z[i], x[i] + y[i], "z[%d] = %g", i, z[i]);
  cr_assert_eq(z[n], 12345.0f, "the guard let a work-item write past the end");
  free(x);
  free(y);
  free(z);
  kiln_artifact_deinit(&a);
}

Test(te, vadd_gpu_schedule_runs_on_cpu) {
  vadd_check(VADD(GPU_SPLIT), 1000, 64); /* 1000 = 15*64 + 40: a partial tile */
  vadd_check(VADD(GPU_SPLIT), 64, 64);
  vadd_check(VADD(GPU_SPLIT), 1, 64);
}

Test(te, vadd_cpu_schedule) {
  vadd_check(VADD(CPU_SPLIT), 1003, 1);
  vadd_check(VADD(CPU_SPLIT), 4096, 1);
}

Test(te, vadd_unscheduled) { vadd_check(VADD(""), 77, 1); }

Test(te, vadd_launch_recipe) {
  kiln_artifact_t a;
  te_compile(VADD(GPU_SPLIT), "cpu", &a);
  shape_arg_t shapes[3] = {{1, {1000}}, {1, {1000}}, {1, {1000}}};
  launch_t l = launch_of(&a, "vadd", shapes);
  cr_assert_eq(l.grid[0], 16);
  cr_assert_eq(l.grid[1], 1);
  cr_assert_eq(l.block[0], 64);
  cr_assert_eq(l.nvars, 1);
  cr_assert_eq(l.arg[0], 3, "n is the trailing scalar");
  const kiln_kernel_t *k = kiln_artifact_kernel(&a, "vadd");
  cr_assert_eq(k->num_args, 4);
  cr_assert_eq(k->args[3].type, KILN_ARG_I32);
  /* The recipe survives the artifact encoding (the cache). */
  uint8_t *bytes;
  size_t len;
  cr_assert(!kiln_artifact_encode(&a, &bytes, &len));
  kiln_artifact_t b;
  cr_assert(!kiln_artifact_decode(bytes, len, &b));
  const kiln_kernel_t *kb = kiln_artifact_kernel(&b, "vadd");
  cr_assert(kb->launch && kb->launch_size == k->launch_size && memcmp(kb->launch, k->launch, k->launch_size) == 0);
  free(bytes);
  kiln_artifact_deinit(&b);
  kiln_artifact_deinit(&a);
}

Test(te, vadd_vectorize_metadata) {
  kiln_artifact_t a;
  te_compile(VADD(CPU_SPLIT), "cpu", &a);
  cr_assert(strstr(a.llvm_ir, "x float>"), "the vectorize loop was not vectorised:\n%s", a.llvm_ir);
  kiln_artifact_deinit(&a);
}

/* ---- reductions, several kernels, math, inline ------------------------------------------ */

#define ROWMAX_SOFTEXP(SCHED)                                                                               \
  "{'te': 1, 'vars': [{'name': 'n'}, {'name': 'm'}], 'tensors': ["                                         \
  " {'name': 'A', 'op': 'placeholder', 'dtype': 'float32', 'shape': [['var', 'n'], ['var', 'm']]},"        \
  " {'name': 'M', 'op': 'compute', 'dtype': 'float32', 'shape': [['var', 'n']], 'axes': ['i'],"            \
  "  'reduce_axes': [{'name': 'k', 'min': 0, 'extent': ['var', 'm']}],"                                   \
  "  'body': ['reduce', 'max', ['load', 'A', [['var', 'i'], ['var', 'k']]], ['k']]},"                     \
  " {'name': 'E', 'op': 'compute', 'dtype': 'float32', 'shape': [['var', 'n'], ['var', 'm']],"            \
  "  'axes': ['i', 'j'], 'body': ['call', 'exp', [['sub', ['load', 'A', [['var', 'i'], ['var', 'j']]],"   \
  "   ['load', 'M', [['var', 'i']]]]]]}],"                                                                  \
  " 'schedule': [" SCHED "],"                                                                              \
  " 'kernels': [{'name': 'rowmax', 'args': ['A', 'M']}, {'name': 'softexp', 'args': ['A', 'M', 'E']}]}"

static void rowmax_softexp(const char *json, int n, int m) {
  kiln_artifact_t a;
  te_compile(json, "cpu", &a);
  unsigned seed = (unsigned)(n * 31 + m);
  float *x = rand_floats((size_t)n * m, &seed), *mx = calloc((size_t)n, 4), *e = calloc((size_t)n * m, 4);
  float *want_e = malloc((size_t)n * m * 4), *want_m = malloc((size_t)n * 4);
  for (int i = 0; i < n; i++) {
    want_m[i] = -INFINITY;
    for (int j = 0; j < m; j++) want_m[i] = fmaxf(want_m[i], x[i * m + j]);
    for (int j = 0; j < m; j++) want_e[i * m + j] = expf(x[i * m + j] - want_m[i]);
  }
  shape_arg_t s1[2] = {{2, {n, m}}, {1, {n}}}, s2[3] = {{2, {n, m}}, {1, {n}}, {2, {n, m}}};
  void *p1[2] = {x, mx}, *p2[3] = {x, mx, e};
  run_cpu(&a, "rowmax", 2, p1, s1);
  check_close(mx, want_m, (size_t)n, 0, "rowmax");
  run_cpu(&a, "softexp", 3, p2, s2);
  check_close(e, want_e, (size_t)n * m, 1e-6f, "softexp");
  free(x), free(mx), free(e), free(want_e), free(want_m);
  kiln_artifact_deinit(&a);
}

Test(te, reduction_two_kernels_symbolic) {
  rowmax_softexp(ROWMAX_SOFTEXP(""), 5, 33);
  rowmax_softexp(ROWMAX_SOFTEXP(""), 1, 1);
}

Test(te, reduction_split_reduce_axis_and_bind) {
  const char *sched =
      "{'op': 'split', 'stage': 'M', 'var': 'k', 'factor': 8},"
      "{'op': 'split', 'stage': 'M', 'var': 'i', 'factor': 4, 'outer': 'bi', 'inner': 'ti'},"
      "{'op': 'bind', 'stage': 'M', 'var': 'bi', 'thread': 'blockIdx.x'},"
      "{'op': 'bind', 'stage': 'M', 'var': 'ti', 'thread': 'threadIdx.x'},"
      "{'op': 'unroll', 'stage': 'M', 'var': 'k.inner'},"
      "{'op': 'fuse', 'stage': 'E', 'vars': ['i', 'j'], 'fused': 'f'},"
      "{'op': 'split', 'stage': 'E', 'var': 'f', 'factor': 32, 'outer': 'fo', 'inner': 'fi'},"
      "{'op': 'bind', 'stage': 'E', 'var': 'fo', 'thread': 'blockIdx.x'},"
      "{'op': 'bind', 'stage': 'E', 'var': 'fi', 'thread': 'threadIdx.x'}";
  char json[4096];
  snprintf(json, sizeof(json), ROWMAX_SOFTEXP("%s"), sched);
  rowmax_softexp(json, 7, 29); /* 29 = 3*8 + 5: a partial reduce tile */
  rowmax_softexp(json, 8, 16);
}

Test(te, inline_select_cast_reorder) {
  /* D = A*2 is inlined into E = max(D + B, 0); F = select(E > 0.5, int(E*10), -1) as int32. */
  const char *json =
      "{'te': 1, 'vars': [{'name': 'n'}, {'name': 'm'}], 'tensors': ["
      " {'name': 'A', 'op': 'placeholder', 'dtype': 'float32', 'shape': [['var', 'n'], ['var', 'm']]},"
      " {'name': 'B', 'op': 'placeholder', 'dtype': 'float32', 'shape': [['var', 'n'], ['var', 'm']]},"
      " {'name': 'D', 'op': 'compute', 'dtype': 'float32', 'shape': [['var', 'n'], ['var', 'm']], 'axes': ['i', 'j'],"
      "  'body': ['mul', ['load', 'A', [['var', 'i'], ['var', 'j']]], 2.0]},"
      " {'name': 'E', 'op': 'compute', 'dtype': 'float32', 'shape': [['var', 'n'], ['var', 'm']], 'axes': ['i', 'j'],"
      "  'body': ['max', ['add', ['load', 'D', [['var', 'i'], ['var', 'j']]], ['load', 'B', [['var', 'i'], ['var', 'j']]]], 0.0]},"
      " {'name': 'F', 'op': 'compute', 'dtype': 'int32', 'shape': [['var', 'n'], ['var', 'm']], 'axes': ['i', 'j'],"
      "  'body': ['select', ['gt', ['load', 'E', [['var', 'i'], ['var', 'j']]], 0.5],"
      "           ['cast', 'int32', ['mul', ['load', 'E', [['var', 'i'], ['var', 'j']]], 10.0]], -1]}],"
      " 'schedule': [{'op': 'compute_inline', 'stage': 'D'}, {'op': 'compute_inline', 'stage': 'E'},"
      "  {'op': 'reorder', 'stage': 'F', 'vars': ['j', 'i']},"
      "  {'op': 'split', 'stage': 'F', 'var': 'j', 'nparts': 3},"
      "  {'op': 'parallel', 'stage': 'F', 'var': 'j.outer'}],"
      " 'kernels': [{'name': 'f', 'args': ['A', 'B', 'F']}]}";
  kiln_artifact_t a;
  te_compile(json, "cpu", &a);
  int n = 9, m = 13;
  unsigned seed = 5;
  float *x = rand_floats((size_t)n * m, &seed), *y = rand_floats((size_t)n * m, &seed);
  int32_t *f = calloc((size_t)n * m, 4);
  void *ptrs[3] = {x, y, f};
  shape_arg_t shapes[3] = {{2, {n, m}}, {2, {n, m}}, {2, {n, m}}};
  launch_t l = run_cpu(&a, "f", 3, ptrs, shapes);
  cr_assert_eq(l.grid[0], 3, "parallel became the work-groups");
  for (int i = 0; i < n * m; i++) {
    float e = fmaxf(x[i] * 2.0f + y[i], 0.0f);
    int32_t want = e > 0.5f ? (int32_t)(e * 10.0f) : -1;
    cr_assert_eq(f[i], want, "F[%d] = %d, want %d", i, f[i], want);
  }
  free(x), free(y), free(f);
  kiln_artifact_deinit(&a);
}

/* ---- GEMM: shared-memory tiles, local accumulators ------------------------------------------ */

#define GEMM(SCHED)                                                                                          \
  "{'te': 1, 'vars': [{'name': 'M'}, {'name': 'N'}, {'name': 'K'}], 'tensors': ["                           \
  " {'name': 'A', 'op': 'placeholder', 'dtype': 'float32', 'shape': [['var', 'M'], ['var', 'K']]},"         \
  " {'name': 'B', 'op': 'placeholder', 'dtype': 'float32', 'shape': [['var', 'K'], ['var', 'N']]},"         \
  " {'name': 'C', 'op': 'compute', 'dtype': 'float32', 'shape': [['var', 'M'], ['var', 'N']], 'axes': ['i', 'j']," \
  "  'reduce_axes': [{'name': 'k', 'extent': ['var', 'K']}],"                                              \
  "  'body': ['reduce', 'sum', ['mul', ['load', 'A', [['var', 'i'], ['var', 'k']]],"                      \
  "                                    ['load', 'B', [['var', 'k'], ['var', 'j']]]], ['k']]}],"             \
  " 'schedule': [" SCHED "], 'kernels': [{'name': 'gemm', 'args': ['A', 'B', 'C']}]}"

/* C tiled 8x8 per work-group, one element per work-item, k in steps of 8. */
#define GEMM_TILES_8X8                                                                                       \
  "{'op': 'tile', 'stage': 'C', 'x': 'i', 'y': 'j', 'x_factor': 8, 'y_factor': 8,"                        \
  "  'x_outer': 'bi', 'y_outer': 'bj', 'x_inner': 'ti', 'y_inner': 'tj'},"                                 \
  "{'op': 'split', 'stage': 'C', 'var': 'k', 'factor': 8, 'outer': 'ko', 'inner': 'ki'},"                 \
  "{'op': 'bind', 'stage': 'C', 'var': 'bi', 'thread': 'blockIdx.y'},"                                    \
  "{'op': 'bind', 'stage': 'C', 'var': 'bj', 'thread': 'blockIdx.x'},"                                    \
  "{'op': 'bind', 'stage': 'C', 'var': 'ti', 'thread': 'threadIdx.y'},"                                   \
  "{'op': 'bind', 'stage': 'C', 'var': 'tj', 'thread': 'threadIdx.x'}"
/* A and B tiles in shared memory, loaded cooperatively (one element per work-item) at each
 * step of k. */
#define GEMM_SHARED                                                                                          \
  "{'op': 'cache_read', 'tensor': 'A', 'scope': 'shared', 'readers': ['C'], 'name': 'AS'},"               \
  "{'op': 'cache_read', 'tensor': 'B', 'scope': 'shared', 'readers': ['C'], 'name': 'BS'},"               \
  GEMM_TILES_8X8 ","                                                                                         \
  "{'op': 'compute_at', 'stage': 'AS', 'parent': 'C', 'var': 'ko'},"                                      \
  "{'op': 'compute_at', 'stage': 'BS', 'parent': 'C', 'var': 'ko'},"                                      \
  "{'op': 'bind', 'stage': 'AS', 'var': 'ax0', 'thread': 'threadIdx.y'},"                                 \
  "{'op': 'bind', 'stage': 'AS', 'var': 'ax1', 'thread': 'threadIdx.x'},"                                 \
  "{'op': 'bind', 'stage': 'BS', 'var': 'ax0', 'thread': 'threadIdx.y'},"                                 \
  "{'op': 'bind', 'stage': 'BS', 'var': 'ax1', 'thread': 'threadIdx.x'}"

/* The GEMM with constant shapes: where every tile divides, no guard splits the cooperative
 * load's block, so its two barriers share one basic block (cpu_regions.c once lost the
 * second of them: each work-item read shared tiles its neighbours had not written yet). */
#define GEMM_FIXED(M, N, K, SCHED)                                                                          \
  "{'te': 1, 'vars': [], 'tensors': ["                                                                    \
  " {'name': 'A', 'op': 'placeholder', 'dtype': 'float32', 'shape': [" #M ", " #K "]},"                     \
  " {'name': 'B', 'op': 'placeholder', 'dtype': 'float32', 'shape': [" #K ", " #N "]},"                     \
  " {'name': 'C', 'op': 'compute', 'dtype': 'float32', 'shape': [" #M ", " #N "], 'axes': ['i', 'j'],"      \
  "  'reduce_axes': [{'name': 'k', 'extent': " #K "}],"                                                     \
  "  'body': ['reduce', 'sum', ['mul', ['load', 'A', [['var', 'i'], ['var', 'k']]],"                      \
  "                                    ['load', 'B', [['var', 'k'], ['var', 'j']]]], ['k']]}],"             \
  " 'schedule': [" SCHED "], 'kernels': [{'name': 'gemm', 'args': ['A', 'B', 'C']}]}"
#define GEMM_SHARED_A_ONLY                                                                                   \
  "{'op': 'cache_read', 'tensor': 'A', 'scope': 'shared', 'readers': ['C'], 'name': 'AS'},"               \
  GEMM_TILES_8X8 ","                                                                                         \
  "{'op': 'compute_at', 'stage': 'AS', 'parent': 'C', 'var': 'ko'},"                                      \
  "{'op': 'bind', 'stage': 'AS', 'var': 'ax0', 'thread': 'threadIdx.y'},"                                 \
  "{'op': 'bind', 'stage': 'AS', 'var': 'ax1', 'thread': 'threadIdx.x'}"

/* AS and BS filled at CL's ko; AS by 8 x 8 work-items over its fused elements. */
#define GEMM_TILES_AT_KO                                                                                     \
  "{'op': 'compute_at', 'stage': 'AS', 'parent': 'CL', 'var': 'ko'},"                                     \
  "{'op': 'compute_at', 'stage': 'BS', 'parent': 'CL', 'var': 'ko'},"                                     \
  "{'op': 'fuse', 'stage': 'AS', 'vars': ['ax0', 'ax1'], 'fused': 'af'},"                                  \
  "{'op': 'split', 'stage': 'AS', 'var': 'af', 'factor': 8, 'outer': 'ao', 'inner': 'ax'},"               \
  "{'op': 'split', 'stage': 'AS', 'var': 'ao', 'factor': 8, 'outer': 'aoo', 'inner': 'ay'},"              \
  "{'op': 'bind', 'stage': 'AS', 'var': 'ay', 'thread': 'threadIdx.y'},"                                  \
  "{'op': 'bind', 'stage': 'AS', 'var': 'ax', 'thread': 'threadIdx.x'}"

/* Each work-item accumulates a 2x2 block in local memory (cache_write), reading A and B
 * tiles of 16 rows/columns that the 8x8 work-items load together. */
#define GEMM_LOCAL                                                                                           \
  "{'op': 'cache_write', 'tensor': 'C', 'scope': 'local', 'name': 'CL'},"                                  \
  "{'op': 'cache_read', 'tensor': 'A', 'scope': 'shared', 'readers': ['CL'], 'name': 'AS'},"              \
  "{'op': 'cache_read', 'tensor': 'B', 'scope': 'shared', 'readers': ['CL'], 'name': 'BS'},"              \
  "{'op': 'tile', 'stage': 'C', 'x': 'i', 'y': 'j', 'x_factor': 16, 'y_factor': 16,"                      \
  "  'x_outer': 'bi', 'y_outer': 'bj', 'x_inner': 'ii', 'y_inner': 'jj'},"                                 \
  "{'op': 'tile', 'stage': 'C', 'x': 'ii', 'y': 'jj', 'x_factor': 2, 'y_factor': 2,"                      \
  "  'x_outer': 'ti', 'y_outer': 'tj', 'x_inner': 'ri', 'y_inner': 'rj'},"                                 \
  "{'op': 'bind', 'stage': 'C', 'var': 'bi', 'thread': 'blockIdx.y'},"                                    \
  "{'op': 'bind', 'stage': 'C', 'var': 'bj', 'thread': 'blockIdx.x'},"                                    \
  "{'op': 'bind', 'stage': 'C', 'var': 'ti', 'thread': 'threadIdx.y'},"                                   \
  "{'op': 'bind', 'stage': 'C', 'var': 'tj', 'thread': 'threadIdx.x'},"                                   \
  "{'op': 'compute_at', 'stage': 'CL', 'parent': 'C', 'var': 'tj'},"                                      \
  "{'op': 'split', 'stage': 'CL', 'var': 'k', 'factor': 4, 'outer': 'ko', 'inner': 'ki'},"                \
  "{'op': 'reorder', 'stage': 'CL', 'vars': ['ko', 'ki', 'i', 'j']},"                                      \
  GEMM_TILES_AT_KO ","                                                                                      \
  "{'op': 'split', 'stage': 'BS', 'var': 'ax0', 'factor': 8, 'outer': 'b0o', 'inner': 'b0i'},"            \
  "{'op': 'split', 'stage': 'BS', 'var': 'ax1', 'factor': 8, 'outer': 'b1o', 'inner': 'b1i'},"            \
  "{'op': 'bind', 'stage': 'BS', 'var': 'b0i', 'thread': 'threadIdx.y'},"                                 \
  "{'op': 'bind', 'stage': 'BS', 'var': 'b1i', 'thread': 'threadIdx.x'}"

/* A CPU schedule: rows spread over the pool, a 4-row block of C rows held while k runs,
 * the j loop vectorised. */
#define GEMM_CPU                                                                                             \
  "{'op': 'split', 'stage': 'C', 'var': 'i', 'factor': 4, 'outer': 'io', 'inner': 'ii'},"                 \
  "{'op': 'split', 'stage': 'C', 'var': 'j', 'factor': 64, 'outer': 'jo', 'inner': 'ji'},"                \
  "{'op': 'reorder', 'stage': 'C', 'vars': ['io', 'jo', 'k', 'ii', 'ji']},"                                \
  "{'op': 'parallel', 'stage': 'C', 'var': 'io'},"                                                        \
  "{'op': 'unroll', 'stage': 'C', 'var': 'ii'},"                                                          \
  "{'op': 'vectorize', 'stage': 'C', 'var': 'ji'}"

/* TVM's CPU GEMM recipe: a 32x32 block of C accumulated in a cache_write("global") stage
 * at the block, k split by 4 and unrolled, the j loop vectorised, blocks over the pool. */
#define GEMM_CPU_BLOCKED                                                                                     \
  "{'op': 'cache_write', 'tensor': 'C', 'scope': 'global', 'name': 'CC'},"                                 \
  "{'op': 'tile', 'stage': 'C', 'x': 'i', 'y': 'j', 'x_factor': 32, 'y_factor': 32,"                      \
  "  'x_outer': 'mo', 'y_outer': 'no', 'x_inner': 'mi', 'y_inner': 'ni'},"                                 \
  "{'op': 'compute_at', 'stage': 'CC', 'parent': 'C', 'var': 'no'},"                                      \
  "{'op': 'split', 'stage': 'CC', 'var': 'k', 'factor': 4, 'outer': 'ko', 'inner': 'ki'},"                \
  "{'op': 'reorder', 'stage': 'CC', 'vars': ['ko', 'i', 'ki', 'j']},"                                      \
  "{'op': 'vectorize', 'stage': 'CC', 'var': 'j'},"                                                       \
  "{'op': 'unroll', 'stage': 'CC', 'var': 'ki'},"                                                         \
  "{'op': 'vectorize', 'stage': 'C', 'var': 'ni'},"                                                       \
  "{'op': 'fuse', 'stage': 'C', 'vars': ['mo', 'no'], 'fused': 'blk'},"                                    \
  "{'op': 'parallel', 'stage': 'C', 'var': 'blk'}"

static void gemm_check(const char *json, int M, int N, int K) {
  kiln_artifact_t a;
  te_compile(json, "cpu", &a);
  unsigned seed = (unsigned)(M * 7 + N * 13 + K);
  float *x = rand_floats((size_t)M * K, &seed), *y = rand_floats((size_t)K * N, &seed);
  float *c = calloc((size_t)M * N, 4), *want = calloc((size_t)M * N, 4);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0;
      for (int k = 0; k < K; k++) acc += (double)x[i * K + k] * y[k * N + j];
      want[i * N + j] = (float)acc;
    }
  void *ptrs[3] = {x, y, c};
  shape_arg_t shapes[3] = {{2, {M, K}}, {2, {K, N}}, {2, {M, N}}};
  run_cpu(&a, "gemm", 3, ptrs, shapes);
  check_close(c, want, (size_t)M * N, 1e-4f, "C");
  free(x), free(y), free(c), free(want);
  kiln_artifact_deinit(&a);
}

Test(te, gemm_shared_tiles_run_on_cpu) {
  gemm_check(GEMM(GEMM_SHARED), 37, 29, 19); /* partial tiles everywhere */
  gemm_check(GEMM(GEMM_SHARED), 32, 16, 24);
}

Test(te, gemm_shared_tiles_constant_shapes) {
  gemm_check(GEMM_FIXED(8, 8, 8, GEMM_SHARED_A_ONLY), 8, 8, 8);
  gemm_check(GEMM_FIXED(16, 16, 16, GEMM_SHARED_A_ONLY), 16, 16, 16);
  gemm_check(GEMM_FIXED(40, 40, 40, GEMM_SHARED_A_ONLY), 40, 40, 40);
  gemm_check(GEMM_FIXED(24, 16, 32, GEMM_SHARED), 24, 16, 32);
  gemm_check(GEMM_FIXED(37, 29, 19, GEMM_SHARED), 37, 29, 19); /* guards: always worked */
}

Test(te, gemm_local_accumulators_shared_tiles) {
  gemm_check(GEMM(GEMM_LOCAL), 45, 50, 23);
  gemm_check(GEMM(GEMM_LOCAL), 64, 32, 16);
}

Test(te, gemm_cpu_schedule) {
  gemm_check(GEMM(GEMM_CPU), 70, 130, 33);
  gemm_check(GEMM(GEMM_CPU), 64, 128, 64);
  gemm_check(GEMM(""), 9, 11, 5);
  gemm_check(GEMM(GEMM_CPU_BLOCKED), 96, 64, 40);
  gemm_check(GEMM(GEMM_CPU_BLOCKED), 50, 70, 13);
}

/* vectorize is a promise: the marked loop becomes vector operations of its extent (here 32
 * floats), there are no gathers or scatters anywhere, and every loop the schedule did not
 * vectorize is closed to LLVM's loop vectoriser. */
Test(te, vectorize_emits_vectors_of_the_loop_extent) {
  kiln_artifact_t a;
  opt_level = 0;
  te_compile(GEMM(GEMM_CPU_BLOCKED), "cpu", &a);
  opt_level = 3;
  cr_assert(strstr(a.llvm_ir, "load <32 x float>") && strstr(a.llvm_ir, "@llvm.fmuladd.v32f32("),
            "the k step is one 32-wide vector statement:\n%s", a.llvm_ir);
  cr_assert(strstr(a.llvm_ir, "!\"llvm.loop.vectorize.enable\", i1 false"), "loops not marked are closed");
  cr_assert(!strstr(a.llvm_ir, "!\"llvm.loop.vectorize.enable\", i1 true"), "no loop is left to the vectoriser");
  kiln_artifact_deinit(&a);
  te_compile(GEMM(GEMM_CPU_BLOCKED), "cpu", &a);
  cr_assert(strstr(a.llvm_ir, "<32 x float>"));
  cr_assert(!strstr(a.llvm_ir, "masked.gather") && !strstr(a.llvm_ir, "masked.scatter"), "gathers:\n%s", a.llvm_ir);
  kiln_artifact_deinit(&a);
}

/* A loop the schedule did not vectorize is left to LLVM's cost model only where it is the
 * innermost loop of a CPU stage and every access in it is contiguous (stride 1 for the store,
 * 0 or 1 for loads): vectors there are plain loads and stores, as TVM's LLVM backend gets for
 * a parallel loop. A strided load (a transpose) or a lazy select over the var keeps the loop
 * closed, so no gather or scatter can come of it. */
#define TRANSPOSE(BODY)                                                                                      \
  "{'te': 1, 'vars': [{'name': 'n'}, {'name': 'm'}], 'tensors': ["                                        \
  " {'name': 'A', 'op': 'placeholder', 'dtype': 'float32', 'shape': [['var', 'm'], ['var', 'n']]},"         \
  " {'name': 'R', 'op': 'placeholder', 'dtype': 'float32', 'shape': [['var', 'n'], ['var', 'm']]},"         \
  " {'name': 'T', 'op': 'compute', 'dtype': 'float32', 'shape': [['var', 'n'], ['var', 'm']],"             \
  "  'axes': ['i', 'j'], 'body': " BODY "}],"                                                             \
  " 'schedule': [{'op': 'parallel', 'stage': 'T', 'var': 'i'}], 'kernels': [{'name': 't', 'args': ['A', 'R', 'T']}]}"
#define VADD_PAR "{'op': 'parallel', 'stage': 'C', 'var': 'i'}"
/* Compiled for this CPU at O3: no gathers or scatters anywhere; did LLVM make vectors? */
static bool vectorised(const char *json) {
  kiln_artifact_t a;
  te_compile(json, "cpu", &a);
  cr_assert(!strstr(a.llvm_ir, "masked.gather") && !strstr(a.llvm_ir, "masked.scatter"), "gathers:\n%s", a.llvm_ir);
  bool v = strstr(a.llvm_ir, "x float>") != NULL;
  kiln_artifact_deinit(&a);
  return v;
}

Test(te, unmarked_loops_left_to_llvm_only_where_contiguous) {
  kiln_artifact_t a;
  cr_assert(vectorised(VADD(VADD_PAR)), "the contiguous parallel loop is left to LLVM, which vectorises it");
  cr_assert(vectorised(VADD("")));
  opt_level = 0; /* at O0 the metadata is as emitted: the one loop has no vectorize flag */
  te_compile(VADD(VADD_PAR), "cpu", &a);
  opt_level = 3;
  cr_assert(!strstr(a.llvm_ir, "llvm.loop.vectorize.enable"), "%s", a.llvm_ir);
  kiln_artifact_deinit(&a);
  for (parallel_groups = 1; parallel_groups <= 3; parallel_groups++) {
    vadd_check(VADD(VADD_PAR), 1003, 1);
    vadd_check(VADD(VADD_PAR), 5, 1);
  }
  parallel_groups = 0;
  /* T[i, j] = A[j, i]: the load's stride in j is n. */
  const char *tr = TRANSPOSE("['load', 'A', [['var', 'j'], ['var', 'i']]]");
  cr_assert(!vectorised(tr), "a strided load keeps the loop closed");
  te_compile(tr, "cpu", &a);
  enum { N = 37, M = 29 };
  float x[M * N], r[N * M] = {0}, t[N * M];
  for (int i = 0; i < M * N; i++) x[i] = (float)i;
  void *ptrs[3] = {x, r, t};
  shape_arg_t shapes[3] = {{2, {M, N}}, {2, {N, M}}, {2, {N, M}}};
  run_cpu(&a, "t", 3, ptrs, shapes);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < M; j++) cr_assert_eq(t[i * M + j], x[j * N + i], "T[%d][%d]", i, j);
  kiln_artifact_deinit(&a);
  /* A lazy select over j (R's row shifted by one, a zero edge: padding): contiguous under
   * its condition, so left to LLVM, whose vectors read it with masked loads. */
  cr_assert(vectorised(TRANSPOSE("['if_then_else', ['ge', ['var', 'j'], 1],"
                                       " ['load', 'R', [['var', 'i'], ['sub', ['var', 'j'], 1]]], 0.0]")));
  /* ... and not where its other side loads too (both sides would be read for every lane). */
  cr_assert(!vectorised(TRANSPOSE("['if_then_else', ['ge', ['var', 'j'], 1],"
                                        " ['load', 'R', [['var', 'i'], ['sub', ['var', 'j'], 1]]],"
                                        " ['load', 'R', [['var', 'i'], ['var', 'j']]]]")));
  /* A row of R (stride 1) times an invariant element of A (stride 0): left to LLVM. */
  cr_assert(vectorised(TRANSPOSE("['mul', ['load', 'R', [['var', 'i'], ['var', 'j']]],"
                                         " ['load', 'A', [0, 0]]]")));
}

/* An extent that is not constant: vector chunks of the target's width and a scalar remainder
 * (n = 1003 leaves 3 elements after the chunks), the results exact. */
#define VADD_VEC_ALL "{'op': 'vectorize', 'stage': 'C', 'var': 'i'}"
Test(te, vectorize_symbolic_extent_has_a_remainder) {
  kiln_artifact_t a;
  te_compile(VADD(VADD_VEC_ALL), "cpu", &a);
  cr_assert(strstr(a.llvm_ir, "x float>"), "chunks are vectors:\n%s", a.llvm_ir);
  kiln_artifact_deinit(&a);
  vadd_check(VADD(VADD_VEC_ALL), 1003, 1);
  vadd_check(VADD(VADD_VEC_ALL), 3, 1);
  vadd_check(VADD(VADD_VEC_ALL), 64, 1);
}

static void gpu_build(const char *json, const char *target, const char *kernel);

/* On GPUs a contiguous vectorised access is one vector load or store, aligned as the index
 * proves (4 floats from a multiple of 4: 16 bytes, a 128-bit access). */
#define VADD_VEC4                                                                                            \
  "{'op': 'split', 'stage': 'C', 'var': 'i', 'factor': 4, 'outer': 'io', 'inner': 'ii'},"                   \
  "{'op': 'bind', 'stage': 'C', 'var': 'io', 'thread': 'blockIdx.x'},"                                    \
  "{'op': 'vectorize', 'stage': 'C', 'var': 'ii'}"
Test(te, vectorize_on_gpus_is_vector_memory) {
  kiln_artifact_t a;
  te_compile(VADD(VADD_VEC4), "sm_90", &a);
  cr_assert(strstr((const char *)a.code, "ld.global.nc.v4.b32") && strstr((const char *)a.code, "st.global.v4.b32"),
            "128-bit accesses:\n%s", (const char *)a.code);
  kiln_artifact_deinit(&a);
  gpu_build(VADD(VADD_VEC4), "gfx942", "vadd");
  vadd_check(VADD(VADD_VEC4), 1001, 1);
}

/* parallel runs in shares: the recipe names the dimension (launch_of honours it only when
 * parallel_groups is set), and one, two or three groups compute all 18 blocks of 4 rows; a
 * kernel that ignored its share would leave rows unwritten. */
Test(te, parallel_runs_in_shares_of_any_grid) {
  kiln_artifact_t a;
  te_compile(GEMM(GEMM_CPU), "cpu", &a);
  shape_arg_t shapes[3] = {{2, {70, 33}}, {2, {33, 130}}, {2, {70, 130}}};
  launch_t l = launch_of(&a, "gemm", shapes);
  cr_assert_eq(l.nparallel, 1);
  cr_assert_eq(l.grid[0], 18, "the recipe's grid is still one group per iteration");
  kiln_artifact_deinit(&a);
  for (parallel_groups = 1; parallel_groups <= 3; parallel_groups++) gemm_check(GEMM(GEMM_CPU), 70, 130, 33);
  parallel_groups = 0;
  gemm_check(GEMM(GEMM_CPU), 70, 130, 33);
}

/* ---- GPU targets ------------------------------------------------------------------------------ */

static bool have_ptxas(void) { return access(KILN_TEST_PTXAS, X_OK) == 0; }

static void gpu_build(const char *json, const char *target, const char *kernel) {
  kiln_artifact_t a;
  te_compile(json, target, &a);
  const kiln_kernel_t *k = kiln_artifact_kernel(&a, kernel);
  cr_assert(k && k->launch, "%s: kernel %s with a launch recipe", target, kernel);
  if (strncmp(target, "gfx", 3) == 0) {
    cr_assert_eq(a.format, KILN_FORMAT_HSACO);
    /* Shared stages live in LDS (a group of one wave needs no s_barrier: LLVM drops it). */
    cr_assert(strstr(a.assembly, "ds_") || !strstr(json, "'shared'"), "the shared stages use LDS");
    /* The block the schedule binds is the kernel's launch bound. */
    shape_arg_t ones[8];
    for (int i = 0; i < 8; i++) ones[i] = (shape_arg_t){2, {1, 1}};
    launch_t l = launch_of(&a, kernel, ones);
    cr_assert_eq(k->max_block, l.block[0] * l.block[1] * l.block[2], "max_flat_workgroup_size %u", k->max_block);
  } else {
    cr_assert_eq(a.format, KILN_FORMAT_PTX);
    cr_assert(strstr((const char *)a.code, ".entry " ) != NULL);
    if (strstr(json, "'shared'")) {
      cr_assert(strstr((const char *)a.code, ".shared"), "PTX uses shared memory");
      cr_assert(strstr((const char *)a.code, "bar.sync"), "the shared stages synchronise");
    }
    if (have_ptxas()) {
      char path[256], cmd[600], out[4096];
      th_write_temp(a.code, a.code_size - 1, ".ptx", path, sizeof(path));
      snprintf(cmd, sizeof(cmd), "%s -arch=%s %s -o /dev/null 2>&1", KILN_TEST_PTXAS, target, path);
      int rc = th_run(cmd, out, sizeof(out));
      unlink(path);
      cr_assert_eq(rc, 0, "ptxas rejected the PTX: %s", out);
    }
  }
  kiln_artifact_deinit(&a);
}

Test(te, gpu_targets) {
  const char *targets[] = {"gfx942", "sm_90"};
  for (int t = 0; t < 2; t++) {
    gpu_build(VADD(GPU_SPLIT), targets[t], "vadd");
    gpu_build(GEMM(GEMM_SHARED), targets[t], "gemm");
    gpu_build(GEMM(GEMM_LOCAL), targets[t], "gemm");
    char json[4096];
    snprintf(json, sizeof(json), ROWMAX_SOFTEXP("%s"),
             "{'op': 'split', 'stage': 'M', 'var': 'i', 'factor': 64, 'outer': 'bi', 'inner': 'ti'},"
             "{'op': 'bind', 'stage': 'M', 'var': 'bi', 'thread': 'blockIdx.x'},"
             "{'op': 'bind', 'stage': 'M', 'var': 'ti', 'thread': 'threadIdx.x'}");
    gpu_build(json, targets[t], "softexp");
  }
}

/* ---- errors ------------------------------------------------------------------------------------ */

#define PROG(TENSORS, SCHED, KERNELS)                                                                        \
  "{'te': 1, 'vars': [{'name': 'n'}], 'tensors': ["                                                         \
  " {'name': 'A', 'op': 'placeholder', 'dtype': 'float32', 'shape': [['var', 'n'], 16]}," TENSORS "],"     \
  " 'schedule': [" SCHED "], 'kernels': [" KERNELS "]}"
#define ROWSUM                                                                                               \
  "{'name': 'S', 'op': 'compute', 'dtype': 'float32', 'shape': [['var', 'n']], 'axes': ['i'],"             \
  " 'reduce_axes': [{'name': 'k', 'extent': 16}],"                                                         \
  " 'body': ['reduce', 'sum', ['load', 'A', [['var', 'i'], ['var', 'k']]], ['k']]}"
#define COPY(NAME, FROM)                                                                                     \
  "{'name': '" NAME "', 'op': 'compute', 'dtype': 'float32', 'shape': [['var', 'n'], 16], 'axes': ['i', 'j']," \
  " 'body': ['load', '" FROM "', [['var', 'i'], ['var', 'j']]]}"
#define K_S "{'name': 'k', 'args': ['A', 'S']}"

Test(te, errors_in_the_payload) {
  /* Not MessagePack at all (a truncated array), then trailing bytes after the map. */
  static const uint8_t garbage[][4] = {{0x93, 0x01, 0x02}, {0x80, 0x01}};
  static const size_t glen[] = {3, 2};
  for (int i = 0; i < 2; i++) {
    kiln_status_t s = th_compile_status(garbage[i], glen[i], KILN_PAYLOAD_TE, "cpu");
    cr_assert(s && kiln_status_code(s) == KILN_E_COMPILE);
    cr_assert(strstr(kiln_status_message(s), "not one MessagePack value"), "%s", kiln_status_message(s));
    kiln_status_free(s);
  }
  expect_error("{'te': 2, 'tensors': [], 'kernels': []}", "\"te\": 1");
  expect_error("{'te': 1, 'tensors': [], 'kernels': [], 'extra': 1}", "unknown key 'extra'");
  expect_error(PROG(ROWSUM, "", "{'name': 'k', 'args': ['A', 'Q']}"), "unknown argument 'Q'");
  expect_error(PROG(COPY("B", "Z"), "", "{'name': 'k', 'args': ['A', 'B']}"), "unknown tensor 'Z'");
  expect_error(PROG("{'name': 'B', 'op': 'compute', 'dtype': 'float32', 'shape': [16], 'axes': ['i'],"
                    " 'body': ['load', 'A', [['var', 'q'], 0]]}", "", "{'name': 'k', 'args': ['A', 'B']}"),
               "unknown var 'q'");
  expect_error(PROG(COPY("B", "C") "," COPY("C", "A"), "", "{'name': 'k', 'args': ['A', 'C', 'B']}"),
               "defined after it");
  expect_error(PROG("{'name': 'B', 'op': 'compute', 'dtype': 'float32', 'shape': [16], 'axes': ['i'],"
                    " 'body': ['load', 'A', [['var', 'i']]]}", "", "{'name': 'k', 'args': ['A', 'B']}"),
               "1 indices");
  expect_error(PROG("{'name': 'B', 'op': 'compute', 'dtype': 'float32', 'shape': [16], 'axes': ['i'],"
                    " 'body': ['add', ['load', 'A', [0, ['var', 'i']]], ['var', 'i']]}", "",
                    "{'name': 'k', 'args': ['A', 'B']}"),
               "insert a cast");
  expect_error(PROG("{'name': 'B', 'op': 'compute', 'dtype': 'float32', 'shape': [16], 'axes': ['i'],"
                    " 'reduce_axes': [{'name': 'k', 'extent': 4}],"
                    " 'body': ['add', 1.0, ['reduce', 'sum', ['load', 'A', [['var', 'k'], ['var', 'i']]], ['k']]]}", "",
                    "{'name': 'k', 'args': ['A', 'B']}"),
               "whole body");
  expect_error(PROG(ROWSUM, "", "{'name': 'k', 'args': ['S']}"), "not among its args");
  expect_error(PROG("{'name': 'S', 'op': 'compute', 'dtype': 'float32', 'shape': [['var', 'n']], 'axes': ['i'],"
                    " 'reduce_axes': [{'name': 'k', 'extent': 4}, {'name': 'l', 'extent': 4}],"
                    " 'body': ['reduce', 'sum', ['load', 'A', [['var', 'i'], ['var', 'k']]], ['k', 'k']]}", "", K_S),
               "names 'k' twice");
  expect_error(PROG(ROWSUM, "", K_S "," K_S), "two kernels are named");
}

Test(te, errors_in_the_schedule) {
  expect_error(PROG(ROWSUM, "{'op': 'split', 'stage': 'S', 'var': 'i', 'factor': 4},"
                            "{'op': 'split', 'stage': 'S', 'var': 'i', 'factor': 2}", K_S),
               "already split or fused");
  expect_error(PROG(ROWSUM, "{'op': 'bind', 'stage': 'S', 'var': 'k', 'thread': 'threadIdx.x'}", K_S), "reduce axis");
  expect_error(PROG(ROWSUM, "{'op': 'bind', 'stage': 'S', 'var': 'i', 'thread': 'warpIdx.x'}", K_S),
               "blockIdx.x/y/z");
  expect_error(PROG(ROWSUM, "{'op': 'bind', 'stage': 'S', 'var': 'i', 'thread': 'threadIdx.x'}", K_S),
               "not a constant");
  expect_error(PROG(ROWSUM, "{'op': 'split', 'stage': 'S', 'var': 'i', 'factor': 2048},"
                            "{'op': 'bind', 'stage': 'S', 'var': 'i.inner', 'thread': 'threadIdx.x'}", K_S),
               "at most 1024");
  expect_error(PROG(ROWSUM, "{'op': 'compute_inline', 'stage': 'S'}", K_S), "a reduction");
  expect_error(PROG(ROWSUM, "{'op': 'fold', 'stage': 'S'}", K_S), "unknown schedule primitive 'fold'");
  expect_error(PROG(ROWSUM, "{'op': 'split', 'stage': 'T', 'var': 'i', 'factor': 2}", K_S), "unknown stage 'T'");
  expect_error(PROG(ROWSUM, "{'op': 'split', 'stage': 'S', 'var': 'zz', 'factor': 2}", K_S), "no var 'zz'");
  expect_error(PROG(ROWSUM, "{'op': 'split', 'stage': 'S', 'var': 'i', 'factor': 0}", K_S), "at least 1");
  expect_error(PROG(ROWSUM, "{'op': 'split', 'stage': 'S', 'var': 'i', 'factor': 2},"
                            "{'op': 'cache_write', 'tensor': 'S', 'scope': 'local', 'name': 'SL'}", K_S),
               "must come before");
  expect_error(PROG(COPY("B", "A"), "{'op': 'split', 'stage': 'B', 'var': 'i', 'factor': 2},"
                                    "{'op': 'fuse', 'stage': 'B', 'vars': ['i.outer', 'j']}",
                    "{'name': 'k', 'args': ['A', 'B']}"),
               "not consecutive");
  /* B is neither an argument, inlined nor attached. */
  expect_error(PROG(COPY("B", "A") "," COPY("C", "B"), "", "{'name': 'k', 'args': ['A', 'C']}"), "has no storage");
  expect_error(PROG(COPY("B", "A") "," COPY("C", "B"),
                    "{'op': 'compute_at', 'stage': 'B', 'parent': 'C', 'var': 'i'},"
                    "{'op': 'compute_at', 'stage': 'C', 'parent': 'B', 'var': 'i'}",
                    "{'name': 'k', 'args': ['A', 'C']}"),
               "cycle");
  /* Attached at i, B's region is one row of 16: fine; attached nowhere useful: error. */
  kiln_status_t s = te_compile_status(PROG(COPY("B", "A") "," COPY("C", "B"),
                                           "{'op': 'compute_at', 'stage': 'B', 'parent': 'C', 'var': 'i'}",
                                           "{'name': 'k', 'args': ['A', 'C']}"),
                                      "cpu", NULL);
  cr_assert(!s, "compute_at of a copy: %s", s ? kiln_status_message(s) : "");
  expect_error(PROG(COPY("B", "A") "," COPY("C", "B"), "{'op': 'compute_inline', 'stage': 'C'}",
                    "{'name': 'k', 'args': ['A', 'C']}"),
               "inlined");
}

Test(te, format_names) {
  kiln_payload_kind_t k;
  cr_assert(!kiln_payload_kind_parse("te", &k));
  cr_assert_eq(k, KILN_PAYLOAD_TE);
  cr_assert_str_eq(kiln_payload_kind_name(KILN_PAYLOAD_TE), "te");
}

Test(te, deep_expression) {
  /* C[i] = ((A[i] + 1) + 1) ... 60 times: nested deeper than msgpack-c's own unpacker allows. */
  enum { DEPTH = 60 };
  char body[8192] = "", json[12288];
  for (int i = 0; i < DEPTH; i++) strcat(body, "['add', ");
  strcat(body, "['load', 'A', [['var', 'i']]]");
  for (int i = 0; i < DEPTH; i++) strcat(body, ", 1.0]");
  snprintf(json, sizeof(json),
           "{'te': 1, 'vars': [{'name': 'n'}], 'tensors': ["
           " {'name': 'A', 'op': 'placeholder', 'dtype': 'float32', 'shape': [['var', 'n']]},"
           " {'name': 'C', 'op': 'compute', 'dtype': 'float32', 'shape': [['var', 'n']], 'axes': ['i'], 'body': %s}],"
           " 'kernels': [{'name': 'deep', 'args': ['A', 'C']}]}",
           body);
  kiln_artifact_t a;
  te_compile(json, "cpu", &a);
  float x[5] = {0, 1, 2, 3, 4}, c[5] = {0};
  void *ptrs[2] = {x, c};
  shape_arg_t shapes[2] = {{1, {5}}, {1, {5}}};
  run_cpu(&a, "deep", 2, ptrs, shapes);
  for (int i = 0; i < 5; i++) cr_assert_eq(c[i], x[i] + DEPTH, "C[%d] = %g", i, c[i]);
  kiln_artifact_deinit(&a);
}

Test(te, dtypes_and_int64_indices) {
  /* float16 and int8 in, float64 and bool out, int64 shape vars and indices. */
  const char *json =
      "{'te': 1, 'index_dtype': 'int64', 'vars': [{'name': 'n', 'dtype': 'int64'}], 'tensors': ["
      " {'name': 'H', 'op': 'placeholder', 'dtype': 'float16', 'shape': [['var', 'n']]},"
      " {'name': 'Q', 'op': 'placeholder', 'dtype': 'int8', 'shape': [['var', 'n']]},"
      " {'name': 'D', 'op': 'compute', 'dtype': 'float64', 'shape': [['var', 'n']], 'axes': ['i'],"
      "  'body': ['add', ['cast', 'float64', ['call', 'sqrt', [['call', 'abs', [['load', 'H', [['var', 'i']]]]]]]],"
      "                  ['cast', 'float64', ['floordiv', ['load', 'Q', [['var', 'i']]], 3]]]},"
      " {'name': 'P', 'op': 'compute', 'dtype': 'bool', 'shape': [['var', 'n']], 'axes': ['i'],"
      "  'body': ['or', ['gt', ['load', 'H', [['var', 'i']]], ['const', 'float16', 0.5]],"
      "                 ['eq', ['floormod', ['load', 'Q', [['var', 'i']]], 4], 3]]}],"
      " 'schedule': [{'op': 'split', 'stage': 'D', 'var': 'i', 'factor': 8},"
      "              {'op': 'vectorize', 'stage': 'D', 'var': 'i.inner'}],"
      " 'kernels': [{'name': 'd', 'args': ['H', 'Q', 'D']}, {'name': 'p', 'args': ['H', 'Q', 'P']}]}";
  kiln_artifact_t a;
  te_compile(json, "cpu", &a);
  cr_assert_eq(kiln_artifact_kernel(&a, "d")->args[3].type, KILN_ARG_I64);
  enum { N = 37 };
  _Float16 h[N];
  int8_t q[N];
  double dd[N];
  uint8_t pp[N];
  unsigned seed = 3;
  for (int i = 0; i < N; i++) {
    h[i] = (_Float16)((float)rand_r(&seed) / (float)RAND_MAX * 4.0f - 2.0f);
    q[i] = (int8_t)(rand_r(&seed) % 256 - 128);
  }
  void *p1[3] = {h, q, dd}, *p2[3] = {h, q, pp};
  shape_arg_t shapes[3] = {{1, {N}}, {1, {N}}, {1, {N}}};
  run_cpu(&a, "d", 3, p1, shapes);
  run_cpu(&a, "p", 3, p2, shapes);
  for (int i = 0; i < N; i++) {
    int fq = q[i] / 3 - ((q[i] % 3 != 0) && (q[i] < 0));
    int mq = q[i] - 3 * 0 - 4 * (q[i] / 4 - ((q[i] % 4 != 0) && (q[i] < 0)));
    double want = (double)(_Float16)sqrtf(fabsf((float)h[i])) + fq;
    cr_assert(fabs(dd[i] - want) < 1e-9, "D[%d] = %g, want %g", i, dd[i], want);
    uint8_t wp = (float)h[i] > 0.5f || mq == 3;
    cr_assert_eq(pp[i], wp, "P[%d] = %u, want %u (h %g q %d)", i, pp[i], wp, (double)h[i], q[i]);
  }
  kiln_artifact_deinit(&a);
}

Test(te, reduction_attached_into_its_consumer) {
  /* The row maximum is computed per row inside E's row loop (a local scalar), not stored. */
  const char *sched = "{'op': 'compute_at', 'stage': 'M', 'parent': 'E', 'var': 'i'},"
                      "{'op': 'split', 'stage': 'E', 'var': 'j', 'factor': 8},"
                      "{'op': 'vectorize', 'stage': 'E', 'var': 'j.inner'},"
                      "{'op': 'parallel', 'stage': 'E', 'var': 'i'}";
  char json[4096];
  snprintf(json, sizeof(json), ROWMAX_SOFTEXP("%s"), sched);
  /* Only the second kernel: M is no argument of it. */
  char *k = strstr(json, "'kernels': [");
  cr_assert(k);
  strcpy(k, "'kernels': [{'name': 'softexp', 'args': ['A', 'E']}]}");
  kiln_artifact_t a;
  te_compile(json, "cpu", &a);
  int n = 6, m = 21;
  unsigned seed = 9;
  float *x = rand_floats((size_t)n * m, &seed), *e = calloc((size_t)n * m, 4), *want = malloc((size_t)n * m * 4);
  for (int i = 0; i < n; i++) {
    float mx = -INFINITY;
    for (int j = 0; j < m; j++) mx = fmaxf(mx, x[i * m + j]);
    for (int j = 0; j < m; j++) want[i * m + j] = expf(x[i * m + j] - mx);
  }
  void *ptrs[2] = {x, e};
  shape_arg_t shapes[2] = {{2, {n, m}}, {2, {n, m}}};
  launch_t l = run_cpu(&a, "softexp", 2, ptrs, shapes);
  cr_assert_eq(l.grid[0], (uint32_t)n);
  check_close(e, want, (size_t)n * m, 1e-6f, "softexp");
  free(x), free(e), free(want);
  kiln_artifact_deinit(&a);
}

Test(te, shared_memory_bound_on_gpus) {
  /* A 256x64 float tile of A in shared memory is 64 KiB: too much for sm_90's static 48 KiB,
   * fine for gfx942's 64 KiB of LDS and for the cpu. */
  const char *json = GEMM(
      "{'op': 'cache_read', 'tensor': 'A', 'scope': 'shared', 'readers': ['C'], 'name': 'AS'},"
      "{'op': 'split', 'stage': 'C', 'var': 'i', 'factor': 256, 'outer': 'bi', 'inner': 'ti'},"
      "{'op': 'split', 'stage': 'C', 'var': 'k', 'factor': 64, 'outer': 'ko', 'inner': 'ki'},"
      "{'op': 'reorder', 'stage': 'C', 'vars': ['bi', 'ko', 'ti', 'j', 'ki']},"
      "{'op': 'bind', 'stage': 'C', 'var': 'bi', 'thread': 'blockIdx.x'},"
      "{'op': 'compute_at', 'stage': 'AS', 'parent': 'C', 'var': 'ko'}");
  kiln_status_t s = te_compile_status(json, "sm_90", NULL);
  cr_assert(s && kiln_status_code(s) == KILN_E_COMPILE);
  cr_assert(strstr(kiln_status_message(s), "65536 bytes of shared memory"), "%s", kiln_status_message(s));
  kiln_status_free(s);
  s = te_compile_status(json, "gfx942", NULL);
  cr_assert(!s, "gfx942: %s", s ? kiln_status_message(s) : "");
  gemm_check(json, 300, 5, 70);
}

/* ---- random schedules ------------------------------------------------------------------- */

/* GEMM under random schedules: each of i, j, k split (or not) by a random factor, the leaves
 * in a random order (reduce loops outside data loops too), random unroll/vectorize marks,
 * sometimes a parallel outer data var or a cache_write stage attached at a random data leaf;
 * run on random odd sizes against the reference. */
Test(te, random_schedules, .timeout = 300) {
  unsigned seed = 20261202;
  for (int trial = 0; trial < 24; trial++) {
    char sched[4096] = "";
    const char *vars[3] = {"i", "j", "k"};
    char leaves[6][16];
    int nleaves = 0;
    bool cw = rand_r(&seed) % 3 == 0;
    const char *st = cw ? "CC" : "C";
    size_t len = 0;
    if (cw) len += (size_t)snprintf(sched + len, sizeof(sched) - len,
                                    "{'op': 'cache_write', 'tensor': 'C', 'scope': 'local', 'name': 'CC'},");
    for (int v = 0; v < 3; v++) {
      int f = 1 + rand_r(&seed) % 7;
      if (rand_r(&seed) % 4 == 0) {
        snprintf(leaves[nleaves++], 16, "%s", vars[v]);
        continue;
      }
      len += (size_t)snprintf(sched + len, sizeof(sched) - len,
                              "{'op': 'split', 'stage': '%s', 'var': '%s', 'factor': %d},", st, vars[v], f);
      snprintf(leaves[nleaves++], 16, "%s.outer", vars[v]);
      snprintf(leaves[nleaves++], 16, "%s.inner", vars[v]);
    }
    for (int i = nleaves - 1; i > 0; i--) { /* shuffle */
      int j = rand_r(&seed) % (i + 1);
      char tmp[16];
      memcpy(tmp, leaves[i], 16);
      memcpy(leaves[i], leaves[j], 16);
      memcpy(leaves[j], tmp, 16);
    }
    len += (size_t)snprintf(sched + len, sizeof(sched) - len, "{'op': 'reorder', 'stage': '%s', 'vars': [", st);
    for (int i = 0; i < nleaves; i++)
      len += (size_t)snprintf(sched + len, sizeof(sched) - len, "%s'%s'", i ? ", " : "", leaves[i]);
    len += (size_t)snprintf(sched + len, sizeof(sched) - len, "]},");
    for (int i = 0; i < nleaves; i++) {
      int r = rand_r(&seed) % 4;
      if (r == 0) len += (size_t)snprintf(sched + len, sizeof(sched) - len,
                                          "{'op': 'unroll', 'stage': '%s', 'var': '%s'},", st, leaves[i]);
      if (r == 1) len += (size_t)snprintf(sched + len, sizeof(sched) - len,
                                          "{'op': 'vectorize', 'stage': '%s', 'var': '%s'},", st, leaves[i]);
    }
    if (cw) {
      /* C keeps i, j; CC is computed per element of C (per row its extent is N, which is
       * symbolic: local storage needs a constant extent). */
      len += (size_t)snprintf(sched + len, sizeof(sched) - len,
                              "{'op': 'compute_at', 'stage': 'CC', 'parent': 'C', 'var': 'j'},"
                              "{'op': 'parallel', 'stage': 'C', 'var': 'i'},");
    } else if (leaves[0][0] != 'k' && rand_r(&seed) % 2) {
      len += (size_t)snprintf(sched + len, sizeof(sched) - len, "{'op': 'parallel', 'stage': 'C', 'var': '%s'},",
                              leaves[0]);
    }
    if (len) sched[len - 1] = 0; /* the last comma */
    char json[8192];
    snprintf(json, sizeof(json), GEMM("%s"), sched);
    int M = 1 + rand_r(&seed) % 19, N = 1 + rand_r(&seed) % 19, K = 1 + rand_r(&seed) % 19;
    uint64_t t0 = kiln_now_ns();
    gemm_check(json, M, N, K);
    cr_log_info("trial %d: %dx%dx%d in %.0f ms, schedule %s", trial, M, N, K, (kiln_now_ns() - t0) / 1e6, sched);
  }
}

/* GPU-style GEMM schedules with random tile sizes: blocks and threads bound, k split, A and B
 * tiles cached in shared memory at ko and loaded cooperatively through a fused, split and
 * bound copy (threads past the tile are guarded), run on the cpu harness. */
Test(te, random_gpu_schedules, .timeout = 300) {
  unsigned seed = 7;
  for (int trial = 0; trial < 10; trial++) {
    int ty = 1 + rand_r(&seed) % 8, tx = 1 + rand_r(&seed) % 8, kt = 1 + rand_r(&seed) % 9;
    int threads = tx * ty;
    char sched[4096];
    snprintf(sched, sizeof(sched),
             "{'op': 'cache_read', 'tensor': 'A', 'scope': 'shared', 'readers': ['C'], 'name': 'AS'},"
             "{'op': 'cache_read', 'tensor': 'B', 'scope': 'shared', 'readers': ['C'], 'name': 'BS'},"
             "{'op': 'tile', 'stage': 'C', 'x': 'i', 'y': 'j', 'x_factor': %d, 'y_factor': %d,"
             " 'x_outer': 'bi', 'y_outer': 'bj', 'x_inner': 'ti', 'y_inner': 'tj'},"
             "{'op': 'split', 'stage': 'C', 'var': 'k', 'factor': %d, 'outer': 'ko', 'inner': 'ki'},"
             "{'op': 'bind', 'stage': 'C', 'var': 'bi', 'thread': 'blockIdx.y'},"
             "{'op': 'bind', 'stage': 'C', 'var': 'bj', 'thread': 'blockIdx.x'},"
             "{'op': 'bind', 'stage': 'C', 'var': 'ti', 'thread': 'threadIdx.y'},"
             "{'op': 'bind', 'stage': 'C', 'var': 'tj', 'thread': 'threadIdx.x'},"
             "{'op': 'compute_at', 'stage': 'AS', 'parent': 'C', 'var': 'ko'},"
             "{'op': 'compute_at', 'stage': 'BS', 'parent': 'C', 'var': 'ko'},"
             "{'op': 'fuse', 'stage': 'AS', 'vars': ['ax0', 'ax1'], 'fused': 'af'},"
             "{'op': 'split', 'stage': 'AS', 'var': 'af', 'factor': %d, 'outer': 'ao', 'inner': 'ai'},"
             "{'op': 'split', 'stage': 'AS', 'var': 'ai', 'factor': %d, 'outer': 'ay', 'inner': 'ax'},"
             "{'op': 'bind', 'stage': 'AS', 'var': 'ay', 'thread': 'threadIdx.y'},"
             "{'op': 'bind', 'stage': 'AS', 'var': 'ax', 'thread': 'threadIdx.x'},"
             "{'op': 'fuse', 'stage': 'BS', 'vars': ['ax0', 'ax1'], 'fused': 'bf'},"
             "{'op': 'split', 'stage': 'BS', 'var': 'bf', 'factor': %d, 'outer': 'bo', 'inner': 'bi2'},"
             "{'op': 'split', 'stage': 'BS', 'var': 'bi2', 'factor': %d, 'outer': 'by', 'inner': 'bx'},"
             "{'op': 'bind', 'stage': 'BS', 'var': 'by', 'thread': 'threadIdx.y'},"
             "{'op': 'bind', 'stage': 'BS', 'var': 'bx', 'thread': 'threadIdx.x'}",
             ty, tx, kt, threads, tx, threads, tx);
    char json[8192];
    snprintf(json, sizeof(json), GEMM("%s"), sched);
    int M = 1 + rand_r(&seed) % 29, N = 1 + rand_r(&seed) % 29, K = 1 + rand_r(&seed) % 29;
    cr_log_info("trial %d: %dx%dx%d, threads %dx%d, k tile %d", trial, M, N, K, ty, tx, kt);
    gemm_check(json, M, N, K);
  }
}

/* Three pages, the first and the last PROT_NONE: a read past either end of the middle one
 * faults. */
static uint8_t *guarded_page(long page) {
  uint8_t *mem = mmap(NULL, 3 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert(mem != MAP_FAILED);
  cr_assert(!mprotect(mem, (size_t)page, PROT_NONE));
  cr_assert(!mprotect(mem + 2 * page, (size_t)page, PROT_NONE));
  return mem;
}

/* if_then_else evaluates only the chosen side: padding reads A[i-1] only where i >= 1. A
 * sits right after a PROT_NONE page, so an eager load of A[-1] would fault. */
Test(te, if_then_else_is_lazy) {
  const char *json =
      "{'te': 1, 'vars': [{'name': 'n'}], 'tensors': ["
      " {'name': 'A', 'op': 'placeholder', 'dtype': 'float32', 'shape': [['var', 'n']]},"
      " {'name': 'P', 'op': 'compute', 'dtype': 'float32', 'shape': [['add', ['var', 'n'], 2]], 'axes': ['i'],"
      "  'body': ['if_then_else', ['and', ['ge', ['var', 'i'], 1], ['le', ['var', 'i'], ['var', 'n']]],"
      "           ['load', 'A', [['sub', ['var', 'i'], 1]]], 0.0]},"
      " {'name': 'S', 'op': 'compute', 'dtype': 'float32', 'shape': [['var', 'n']], 'axes': ['i'],"
      "  'reduce_axes': [{'name': 'r', 'extent': 3}],"
      "  'body': ['reduce', 'sum', ['load', 'P', [['add', ['var', 'i'], ['var', 'r']]]], ['r']]}],"
      " 'schedule': [{'op': 'compute_inline', 'stage': 'P'}, {'op': 'split', 'stage': 'S', 'var': 'i', 'factor': 8},"
      "  {'op': 'vectorize', 'stage': 'S', 'var': 'i.inner'}],"
      " 'kernels': [{'name': 'blur', 'args': ['A', 'S']}]}";
  long page = sysconf(_SC_PAGESIZE);
  /* O0 keeps every load where the program puts it (O3 might sink an eager one anyway). */
  for (opt_level = 0; opt_level <= 3; opt_level += 3) {
    kiln_artifact_t a;
    te_compile(json, "cpu", &a);
    enum { N = 50 };
    uint8_t *mem = guarded_page(page);
    /* A against the first guard page, then against the second: neither edge may be read
     * past (the vector lanes read A under the condition as a mask: llvm.masked.load) */
    for (int end = 0; end < 2; end++) {
      float *x = end ? (float *)(mem + 2 * page) - N : (float *)(mem + page), s[N];
      for (int i = 0; i < N; i++) x[i] = (float)(i % 7) - 3.0f;
      void *ptrs[2] = {x, s};
      shape_arg_t shapes[2] = {{1, {N}}, {1, {N}}};
      run_cpu(&a, "blur", 2, ptrs, shapes);
      for (int i = 0; i < N; i++) {
        float want = (i >= 1 ? x[i - 1] : 0.0f) + x[i] + (i + 1 < N ? x[i + 1] : 0.0f);
        cr_assert(fabsf(s[i] - want) < 1e-5f, "S[%d] = %g, want %g", i, s[i], want);
      }
    }
    munmap(mem, 3 * (size_t)page);
    kiln_artifact_deinit(&a);
  }
  opt_level = 3;
}

/* A vectorised padding stage: the lanes read A under the condition as a mask (a masked
 * vector load), never the element before or after it, at either end of A. */
Test(te, vectorised_padding_reads_under_a_mask) {
  const char *json =
      "{'te': 1, 'vars': [{'name': 'n'}], 'tensors': ["
      " {'name': 'A', 'op': 'placeholder', 'dtype': 'float32', 'shape': [['var', 'n']]},"
      " {'name': 'P', 'op': 'compute', 'dtype': 'float32', 'shape': [['add', ['var', 'n'], 2]], 'axes': ['i'],"
      "  'body': ['if_then_else', ['and', ['ge', ['var', 'i'], 1], ['le', ['var', 'i'], ['var', 'n']]],"
      "           ['mul', ['load', 'A', [['sub', ['var', 'i'], 1]]], 2.0], -1.0]}],"
      " 'schedule': [{'op': 'split', 'stage': 'P', 'var': 'i', 'factor': 16},"
      "  {'op': 'vectorize', 'stage': 'P', 'var': 'i.inner'}],"
      " 'kernels': [{'name': 'pad', 'args': ['A', 'P']}]}";
  long page = sysconf(_SC_PAGESIZE);
  kiln_artifact_t a;
  te_compile(json, "cpu", &a);
  cr_assert(strstr(a.llvm_ir, "llvm.masked.load"), "%s", a.llvm_ir);
  enum { N = 45 };
  uint8_t *mem = guarded_page(page);
  for (int end = 0; end < 2; end++) {
    float *x = end ? (float *)(mem + 2 * page) - N : (float *)(mem + page), out[N + 2];
    for (int i = 0; i < N; i++) x[i] = (float)i;
    void *ptrs[2] = {x, out};
    shape_arg_t shapes[2] = {{1, {N}}, {1, {N + 2}}};
    run_cpu(&a, "pad", 2, ptrs, shapes);
    for (int i = 0; i < N + 2; i++)
      cr_assert_eq(out[i], i >= 1 && i <= N ? 2.0f * x[i - 1] : -1.0f, "P[%d] = %g", i, out[i]);
  }
  munmap(mem, 3 * (size_t)page);
  kiln_artifact_deinit(&a);
}

/* ---- storage_order ----------------------------------------------------------------------- */

/* A's tile stored k-major (transposed) and padded, double-buffered: the same products; in the
 * PTX the tile is 8 k rows of 8 + 4 elements, twice. */
#define GEMM_KMAJOR                                                                                          \
  GEMM_SHARED ","                                                                                            \
  "{'op': 'storage_order', 'stage': 'AS', 'vars': ['ax1', 'ax0']},"                                         \
  "{'op': 'storage_align', 'stage': 'AS', 'var': 'ax1', 'factor': 8, 'offset': 4}"

Test(te, storage_order_runs_on_cpu) {
  static const int sizes[][3] = {{37, 29, 19}, {32, 16, 64}};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(sizes); i++) gemm_check(GEMM(GEMM_KMAJOR), sizes[i][0], sizes[i][1], sizes[i][2]);
  gemm_check(GEMM(GEMM_KMAJOR ",{'op': 'double_buffer', 'stage': 'AS'}, {'op': 'double_buffer', 'stage': 'BS'}"),
             37, 29, 19);
  gemm_check(GEMM(GEMM_SHARED ",{'op': 'storage_order', 'stage': 'BS', 'vars': ['ax0', 'ax1']}"), 21, 18, 13);
}

Test(te, storage_order_on_gpus) {
  kiln_artifact_t a;
  te_compile(GEMM(GEMM_KMAJOR ",{'op': 'double_buffer', 'stage': 'AS'}"), "sm_90", &a);
  const char *ptx = (const char *)a.code;
  cr_assert(strstr(ptx, "gemm_$_AS[768]"), "8 k rows of 12 floats, two halves:\n%s", ptx);
  kiln_artifact_deinit(&a);
  gpu_build(GEMM(GEMM_KMAJOR), "sm_90", "gemm");
  gpu_build(GEMM(GEMM_KMAJOR), "gfx942", "gemm");
}

Test(te, storage_order_errors) {
  static const char *const cases[][2] = {
      {"'AS', 'vars': ['ax1']", "names 1 axes; it has 2"},
      {"'AS', 'vars': ['ax1', 'ax1']", "twice"},
      {"'AS', 'vars': ['ax1', 'nope']", "not one of its axes"},
      {"'AS', 'vars': ['ax1', 'k']", "not one of its axes"}, /* the reader's reduce var */
      {"'AS', 'vars': 'ax1'", "storage_order"},
      {"'C', 'vars': ['j', 'i']", "stages attached inside a kernel"},
  };
  for (size_t i = 0; i < KILN_ARRAY_SIZE(cases); i++) {
    char json[8192];
    snprintf(json, sizeof(json), GEMM(GEMM_SHARED ",{'op': 'storage_order', 'stage': %s}"), cases[i][0]);
    expect_error(json, cases[i][1]);
  }
}

/* ---- storage_align and double_buffer ------------------------------------------------------ */

/* GEMM_SHARED with both tiles double-buffered and padded: the next k step's tiles are loaded
 * into registers while this one computes, into the other half; rows of 8 padded to 12. */
#define GEMM_DOUBLE                                                                                          \
  GEMM_SHARED ","                                                                                            \
  "{'op': 'double_buffer', 'stage': 'AS'}, {'op': 'double_buffer', 'stage': 'BS'},"                          \
  "{'op': 'storage_align', 'stage': 'AS', 'var': 'ax0', 'factor': 8, 'offset': 4},"                          \
  "{'op': 'storage_align', 'stage': 'BS', 'var': 'ax0', 'factor': 8, 'offset': 4}"

Test(te, double_buffer_and_storage_align_run_on_cpu) {
  gemm_check(GEMM(GEMM_DOUBLE), 37, 29, 19); /* partial tiles: guards in the prefetch */
  gemm_check(GEMM(GEMM_DOUBLE), 32, 16, 64);
  gemm_check(GEMM(GEMM_DOUBLE), 8, 8, 8); /* one k step: the loop never prefetches */
  gemm_check(GEMM(GEMM_DOUBLE), 9, 9, 0); /* no k step at all */
}

/* The prologue fills half 0 between two barriers and the loop has one barrier a step; the
 * padded tiles take 8 rows of 12 floats (a multiple of 16 bytes) twice: 768 bytes each. */
Test(te, double_buffer_on_gpus) {
  kiln_artifact_t a;
  te_compile(GEMM(GEMM_DOUBLE), "sm_90", &a);
  const char *ptx = (const char *)a.code;
  int bars = 0;
  for (const char *q = ptx; (q = strstr(q, "bar.sync")) != NULL; q++) bars++;
  cr_assert_eq(bars, 3, "barriers: %d\n%s", bars, ptx);
  cr_assert(strstr(ptx, "gemm_$_AS[768]") && strstr(ptx, "gemm_$_BS[768]"), "two padded halves:\n%s", ptx);
  kiln_artifact_deinit(&a);
  gpu_build(GEMM(GEMM_DOUBLE), "sm_90", "gemm");
  gpu_build(GEMM(GEMM_DOUBLE), "gfx942", "gemm");
}

Test(te, double_buffer_and_storage_align_errors) {
  /* hostile fields */
  expect_error(GEMM(GEMM_SHARED ",{'op': 'storage_align', 'stage': 'AS', 'var': 'ax0', 'factor': 0, 'offset': 0}"),
               "factor (1..4096)");
  expect_error(GEMM(GEMM_SHARED ",{'op': 'storage_align', 'stage': 'AS', 'var': 'ax0', 'factor': 4, 'offset': 4}"),
               "offset (0..factor-1)");
  expect_error(GEMM(GEMM_SHARED ",{'op': 'storage_align', 'stage': 'AS', 'var': 'ax0', 'factor': 4}"), "offset");
  expect_error(GEMM(GEMM_SHARED ",{'op': 'storage_align', 'stage': 'AS', 'var': 'nope', 'factor': 4, 'offset': 1}"),
               "not one of its axes");
  expect_error(GEMM(GEMM_SHARED ",{'op': 'double_buffer', 'stage': 'AS', 'var': 'ax0'}"), "unknown key");
  expect_error(GEMM(GEMM_SHARED ",{'op': 'double_buffer', 'stage': 'A'}"), "placeholder");
  /* where the kernel refuses them */
  expect_error(GEMM(GEMM_SHARED ",{'op': 'double_buffer', 'stage': 'C'}"), "a reduction");
  expect_error(GEMM(GEMM_SHARED ",{'op': 'storage_align', 'stage': 'C', 'var': 'i', 'factor': 4, 'offset': 1}"),
               "stages attached inside a kernel");
  expect_error(GEMM(GEMM_LOCAL ",{'op': 'double_buffer', 'stage': 'CL'}"), "a reduction");
  /* attached at a bound var: no loop to prefetch along */
  expect_error(GEMM("{'op': 'cache_read', 'tensor': 'A', 'scope': 'shared', 'readers': ['C'], 'name': 'AS'},"
                    "{'op': 'split', 'stage': 'C', 'var': 'i', 'factor': 8, 'outer': 'bi', 'inner': 'ti'},"
                    "{'op': 'split', 'stage': 'C', 'var': 'k', 'factor': 8, 'outer': 'ko', 'inner': 'ki'},"
                    "{'op': 'reorder', 'stage': 'C', 'vars': ['bi', 'ko', 'ti', 'j', 'ki']},"
                    "{'op': 'bind', 'stage': 'C', 'var': 'bi', 'thread': 'blockIdx.x'},"
                    "{'op': 'bind', 'stage': 'C', 'var': 'ti', 'thread': 'threadIdx.x'},"
                    "{'op': 'compute_at', 'stage': 'AS', 'parent': 'C', 'var': 'ti'},"
                    "{'op': 'double_buffer', 'stage': 'AS'}"),
               "not a plain loop");
  /* local storage is not double-buffered */
  expect_error(GEMM("{'op': 'cache_read', 'tensor': 'A', 'scope': 'local', 'readers': ['C'], 'name': 'AL'},"
                    "{'op': 'split', 'stage': 'C', 'var': 'k', 'factor': 8, 'outer': 'ko', 'inner': 'ki'},"
                    "{'op': 'compute_at', 'stage': 'AL', 'parent': 'C', 'var': 'ko'},"
                    "{'op': 'double_buffer', 'stage': 'AL'}"),
               "only shared stages");
  /* a work-item's share of a 64 x 64 tile with no thread bound: 4096 elements to stage */
  expect_error(GEMM("{'op': 'cache_read', 'tensor': 'A', 'scope': 'shared', 'readers': ['C'], 'name': 'AS'},"
                    "{'op': 'split', 'stage': 'C', 'var': 'i', 'factor': 64, 'outer': 'bi', 'inner': 'ti'},"
                    "{'op': 'split', 'stage': 'C', 'var': 'k', 'factor': 64, 'outer': 'ko', 'inner': 'ki'},"
                    "{'op': 'reorder', 'stage': 'C', 'vars': ['bi', 'ko', 'ti', 'j', 'ki']},"
                    "{'op': 'bind', 'stage': 'C', 'var': 'bi', 'thread': 'blockIdx.x'},"
                    "{'op': 'compute_at', 'stage': 'AS', 'parent': 'C', 'var': 'ko'},"
                    "{'op': 'double_buffer', 'stage': 'AS'}"),
               "at most 256");  /* three leaves of 2^30 each: a product that wraps must not pass for a small one */
  expect_error("{'te': 1, 'tensors': ["
               " {'name': 'A', 'op': 'placeholder', 'dtype': 'float32', 'shape': [4, 4, 4]},"
               " {'name': 'C', 'op': 'compute', 'dtype': 'float32', 'shape': [4, 4], 'axes': ['i', 'j'],"
               "  'reduce_axes': [{'name': 'k', 'extent': 4}],"
               "  'body': ['reduce', 'sum', ['load', 'A', [['var', 'i'], ['var', 'j'], ['var', 'k']]], ['k']]}],"
               " 'schedule': ["
               "  {'op': 'cache_read', 'tensor': 'A', 'scope': 'shared', 'readers': ['C'], 'name': 'AS'},"
               "  {'op': 'split', 'stage': 'C', 'var': 'k', 'factor': 2, 'outer': 'ko', 'inner': 'ki'},"
               "  {'op': 'compute_at', 'stage': 'AS', 'parent': 'C', 'var': 'ko'},"
               "  {'op': 'split', 'stage': 'AS', 'var': 'ax0', 'factor': 1073741824, 'outer': 'a0', 'inner': 'b0'},"
               "  {'op': 'split', 'stage': 'AS', 'var': 'ax1', 'factor': 1073741824, 'outer': 'a1', 'inner': 'b1'},"
               "  {'op': 'split', 'stage': 'AS', 'var': 'ax2', 'factor': 1073741824, 'outer': 'a2', 'inner': 'b2'},"
               "  {'op': 'double_buffer', 'stage': 'AS'}],"
               " 'kernels': [{'name': 'c', 'args': ['A', 'C']}]}",
               "at most 256");
}

/* ---- vthread and launch_bounds -------------------------------------------------------------- */

/* TVM's classic GPU GEMM: a 32 x 32 tile per work-group of 8 x 8 work-items, each work-item 2 x 2
 * virtual threads of 2 x 2 elements strided 16 apart (vi, vj), accumulated in CL (local: one
 * region, and one copy of its storage, per vthread value), A and B tiles in shared memory
 * (their regions serve every vthread, as every work-item). */
#define GEMM_VT_SPLITS                                                                                       \
  "{'op': 'cache_write', 'tensor': 'C', 'scope': 'local', 'name': 'CL'},"                                  \
  "{'op': 'cache_read', 'tensor': 'A', 'scope': 'shared', 'readers': ['CL'], 'name': 'AS'},"              \
  "{'op': 'cache_read', 'tensor': 'B', 'scope': 'shared', 'readers': ['CL'], 'name': 'BS'},"              \
  "{'op': 'split', 'stage': 'C', 'var': 'i', 'factor': 32, 'outer': 'bi', 'inner': 'ii'},"                \
  "{'op': 'split', 'stage': 'C', 'var': 'j', 'factor': 32, 'outer': 'bj', 'inner': 'jj'},"                \
  "{'op': 'split', 'stage': 'C', 'var': 'ii', 'nparts': 2, 'outer': 'vi', 'inner': 'i2'},"                \
  "{'op': 'split', 'stage': 'C', 'var': 'jj', 'nparts': 2, 'outer': 'vj', 'inner': 'j2'},"                \
  "{'op': 'split', 'stage': 'C', 'var': 'i2', 'nparts': 8, 'outer': 'ti', 'inner': 'ri'},"                \
  "{'op': 'split', 'stage': 'C', 'var': 'j2', 'nparts': 8, 'outer': 'tj', 'inner': 'rj'},"                \
  "{'op': 'reorder', 'stage': 'C', 'vars': ['bi', 'bj', 'vi', 'vj', 'ti', 'tj', 'ri', 'rj']},"              \
  "{'op': 'bind', 'stage': 'C', 'var': 'bi', 'thread': 'blockIdx.y'},"                                    \
  "{'op': 'bind', 'stage': 'C', 'var': 'bj', 'thread': 'blockIdx.x'},"                                    \
  "{'op': 'bind', 'stage': 'C', 'var': 'ti', 'thread': 'threadIdx.y'},"                                   \
  "{'op': 'bind', 'stage': 'C', 'var': 'tj', 'thread': 'threadIdx.x'}"
#define GEMM_VT_REST                                                                                         \
  "{'op': 'compute_at', 'stage': 'CL', 'parent': 'C', 'var': 'tj'},"                                      \
  "{'op': 'split', 'stage': 'CL', 'var': 'k', 'factor': 4, 'outer': 'ko', 'inner': 'ki'},"                \
  "{'op': 'reorder', 'stage': 'CL', 'vars': ['ko', 'ki', 'i', 'j']},"                                      \
  "{'op': 'unroll', 'stage': 'CL', 'var': 'ki'},"                                                         \
  GEMM_TILES_AT_KO ","                                                                                      \
  "{'op': 'fuse', 'stage': 'BS', 'vars': ['ax0', 'ax1'], 'fused': 'bf'},"                                  \
  "{'op': 'split', 'stage': 'BS', 'var': 'bf', 'factor': 8, 'outer': 'bo', 'inner': 'bx'},"               \
  "{'op': 'split', 'stage': 'BS', 'var': 'bo', 'factor': 8, 'outer': 'boo', 'inner': 'by'},"              \
  "{'op': 'bind', 'stage': 'BS', 'var': 'by', 'thread': 'threadIdx.y'},"                                  \
  "{'op': 'bind', 'stage': 'BS', 'var': 'bx', 'thread': 'threadIdx.x'}"
#define GEMM_VT_BINDS                                                                                        \
  "{'op': 'bind', 'stage': 'C', 'var': 'vi', 'thread': 'vthread'},"                                       \
  "{'op': 'bind', 'stage': 'C', 'var': 'vj', 'thread': 'vthread'}"
#define GEMM_VT GEMM_VT_SPLITS "," GEMM_VT_BINDS "," GEMM_VT_REST

/* A vthread of the accumulating stage itself: CL's rows in two strided halves. */
#define GEMM_VT_ATTACHED                                                                                     \
  GEMM_VT_SPLITS "," GEMM_VT_REST ","                                                                        \
  "{'op': 'split', 'stage': 'CL', 'var': 'i', 'nparts': 2, 'outer': 'cv', 'inner': 'ci'},"                \
  "{'op': 'reorder', 'stage': 'CL', 'vars': ['cv', 'ko', 'ki', 'ci', 'j']},"                               \
  "{'op': 'bind', 'stage': 'CL', 'var': 'cv', 'thread': 'vthread'}"

Test(te, vthread_gemm_runs_on_cpu) {
  gemm_check(GEMM(GEMM_VT), 64, 64, 32);  /* every tile whole */
  gemm_check(GEMM(GEMM_VT), 37, 50, 19);  /* partial tiles: guards per copy */
  gemm_check(GEMM(GEMM_VT), 5, 3, 1);     /* less than one tile */
  gemm_check(GEMM_FIXED(64, 32, 16, GEMM_VT), 64, 32, 16);
  gemm_check(GEMM_FIXED(40, 24, 12, GEMM_VT), 40, 24, 12);
  gemm_check(GEMM(GEMM_VT_ATTACHED), 48, 40, 23);
}

/* The copies are explicit: the local accumulators of all four vthreads (4 x 2 x 2 floats) are
 * one array (unoptimised: 64 bytes of local memory); the PTX assembles, and optimised LLVM
 * keeps them in registers (no local memory). */
Test(te, vthread_gemm_on_gpus) {
  kiln_artifact_t a;
  opt_level = 0;
  te_compile(GEMM_FIXED(64, 64, 32, GEMM_VT), "sm_90", &a);
  cr_assert(strstr((const char *)a.code, "__local_depot0[64]"), "four copies of CL's 2 x 2 region:\n%s",
            (const char *)a.code);
  kiln_artifact_deinit(&a);
  opt_level = 3;
  te_compile(GEMM_FIXED(64, 64, 32, GEMM_VT), "sm_90", &a);
  cr_assert(!strstr((const char *)a.code, ".local"), "accumulators in registers:\n%s", (const char *)a.code);
  kiln_artifact_deinit(&a);
  gpu_build(GEMM(GEMM_VT), "sm_90", "gemm");
  gpu_build(GEMM(GEMM_VT), "gfx942", "gemm");
  gpu_build(GEMM(GEMM_VT_ATTACHED), "sm_90", "gemm");
}

Test(te, vthread_errors) {
  expect_error(GEMM(GEMM_VT ",{'op': 'bind', 'stage': 'C', 'var': 'vi', 'thread': 'vthread'}"), "already bound");
  expect_error(GEMM(GEMM_VT ",{'op': 'bind', 'stage': 'C', 'var': 'vi', 'thread': 'threadIdx.z'}"), "already bound");
  expect_error(GEMM(GEMM_VT ",{'op': 'unroll', 'stage': 'C', 'var': 'vi'}"), "bound to vthread");
  expect_error(GEMM(GEMM_VT ",{'op': 'split', 'stage': 'C', 'var': 'vi', 'factor': 2}"), "bound or annotated");
  expect_error(GEMM("{'op': 'bind', 'stage': 'C', 'var': 'k', 'thread': 'vthread'}"), "a reduce axis");
  expect_error(GEMM(GEMM_VT ",{'op': 'bind', 'stage': 'CL', 'var': 'ki', 'thread': 'vthread'}"), "a reduce axis");
  expect_error(GEMM("{'op': 'bind', 'stage': 'C', 'var': 'i', 'thread': 'cthread'}"), "or vthread");
  /* extents: symbolic, 0, more than 64 copies */
  expect_error(GEMM("{'op': 'bind', 'stage': 'C', 'var': 'i', 'thread': 'vthread'}"), "not a constant");
  expect_error(GEMM_FIXED(0, 8, 8, "{'op': 'bind', 'stage': 'C', 'var': 'i', 'thread': 'vthread'}"), "extent 0");
  expect_error(GEMM("{'op': 'split', 'stage': 'C', 'var': 'i', 'nparts': 65, 'outer': 'v', 'inner': 'r'},"
                    "{'op': 'bind', 'stage': 'C', 'var': 'v', 'thread': 'vthread'}"),
               "too large");
  expect_error(GEMM("{'op': 'split', 'stage': 'C', 'var': 'i', 'nparts': 1073741824, 'outer': 'v', 'inner': 'r'},"
                    "{'op': 'bind', 'stage': 'C', 'var': 'v', 'thread': 'vthread'}"),
               "too large");
  expect_error(GEMM("{'op': 'split', 'stage': 'C', 'var': 'i', 'nparts': 16, 'outer': 'v', 'inner': 'r'},"
                    "{'op': 'split', 'stage': 'C', 'var': 'j', 'nparts': 8, 'outer': 'w', 'inner': 's'},"
                    "{'op': 'bind', 'stage': 'C', 'var': 'v', 'thread': 'vthread'},"
                    "{'op': 'bind', 'stage': 'C', 'var': 'w', 'thread': 'vthread'}"),
               "at most 64");
}

/* launch_bounds: .minnctapersm on NVPTX, the waves per SIMD that many groups make on AMDGPU
 * (8 groups of 64 work-items, one wave64 each, over 4 SIMDs: 2), nothing on the CPU. */
#define GEMM_VT_MIN(N) GEMM_VT ",{'op': 'launch_bounds', 'stage': 'C', 'min_blocks': " #N "}"
Test(te, launch_bounds_hint) {
  kiln_artifact_t a;
  te_compile(GEMM(GEMM_VT_MIN(2)), "sm_90", &a);
  cr_assert(strstr((const char *)a.code, ".minnctapersm 2") && strstr((const char *)a.code, ".maxntid 64"), "%s",
            (const char *)a.code);
  kiln_artifact_deinit(&a);
  te_compile(GEMM(GEMM_VT_MIN(8)), "gfx942", &a);
  cr_assert(strstr(a.llvm_ir, "\"amdgpu-waves-per-eu\"=\"2\""), "%s", a.llvm_ir);
  kiln_artifact_deinit(&a);
  te_compile(GEMM(GEMM_VT_MIN(2)), "cpu", &a);
  cr_assert(!strstr(a.llvm_ir, "minctasm") && !strstr(a.llvm_ir, "waves-per-eu"));
  kiln_artifact_deinit(&a);
  gemm_check(GEMM(GEMM_VT_MIN(32)), 33, 31, 7);
  gpu_build(GEMM(GEMM_VT_MIN(2)), "sm_90", "gemm");
  gpu_build(GEMM(GEMM_VT_MIN(4)), "gfx942", "gemm");
  expect_error(GEMM(GEMM_VT_MIN(0)), "from 1 to 32");
  expect_error(GEMM(GEMM_VT_MIN(33)), "from 1 to 32");
  expect_error(GEMM(GEMM_VT_MIN(-1)), "from 1 to 32");
  expect_error(GEMM(GEMM_VT ",{'op': 'launch_bounds', 'stage': 'C', 'min_blocks': 'two'}"), "from 1 to 32");
  expect_error(GEMM(GEMM_VT ",{'op': 'launch_bounds', 'stage': 'C'}"), "min_blocks");
  expect_error(GEMM(GEMM_VT ",{'op': 'launch_bounds', 'stage': 'C', 'min_blocks': 2, 'max': 1}"), "unknown key");
  expect_error(GEMM(GEMM_VT ",{'op': 'launch_bounds', 'stage': 'CL', 'min_blocks': 2}"), "kernel's output stage");
  expect_error(GEMM(GEMM_VT ",{'op': 'launch_bounds', 'stage': 'A', 'min_blocks': 2}"), "placeholder");
}
