/* te programs through the real kilnd: compile with format "te", the launch recipe in the
 * reply (fresh and cached), a tiled GEMM with shared-memory stages launched from that recipe
 * on KILN_TEST_DEVICE (default cpu:0) and checked against a reference, and a te program for
 * sm_90 whose reply carries the recipe too. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/compiler/te_json.h"
#include "tests/server/harness.h"

static daemon_t d;

static void start(void) { daemon_start(&d, NULL); }
static void stop(void) {
  if (d.pid) daemon_stop(&d);
}

TestSuite(te, .init = start, .fini = stop, .timeout = 300);

#define GEMM_PROGRAM(SCHED) \
    "{'te': 1, 'vars': [{'name': 'M'}, {'name': 'N'}, {'name': 'K'}], 'tensors': [" \
    " {'name': 'A', 'op': 'placeholder', 'dtype': 'float32', 'shape': [['var', 'M'], ['var', 'K']]}," \
    " {'name': 'B', 'op': 'placeholder', 'dtype': 'float32', 'shape': [['var', 'K'], ['var', 'N']]}," \
    " {'name': 'C', 'op': 'compute', 'dtype': 'float32', 'shape': [['var', 'M'], ['var', 'N']], 'axes': ['i', 'j']," \
    "  'reduce_axes': [{'name': 'k', 'extent': ['var', 'K']}]," \
    "  'body': ['reduce', 'sum', ['mul', ['load', 'A', [['var', 'i'], ['var', 'k']]]," \
    "                                    ['load', 'B', [['var', 'k'], ['var', 'j']]]], ['k']]}]," \
    " 'schedule': [" SCHED "]," \
    " 'kernels': [{'name': 'gemm', 'args': ['A', 'B', 'C']}]}"

/* 16x16 work-items, one element of C each; A and B tiles of 16x16 in shared memory. */
#define GEMM_SHARED \
    "  {'op': 'cache_read', 'tensor': 'A', 'scope': 'shared', 'readers': ['C'], 'name': 'AS'}," \
    "  {'op': 'cache_read', 'tensor': 'B', 'scope': 'shared', 'readers': ['C'], 'name': 'BS'}," \
    "  {'op': 'tile', 'stage': 'C', 'x': 'i', 'y': 'j', 'x_factor': 16, 'y_factor': 16," \
    "   'x_outer': 'bi', 'y_outer': 'bj', 'x_inner': 'ti', 'y_inner': 'tj'}," \
    "  {'op': 'split', 'stage': 'C', 'var': 'k', 'factor': 16, 'outer': 'ko', 'inner': 'ki'}," \
    "  {'op': 'bind', 'stage': 'C', 'var': 'bi', 'thread': 'blockIdx.y'}," \
    "  {'op': 'bind', 'stage': 'C', 'var': 'bj', 'thread': 'blockIdx.x'}," \
    "  {'op': 'bind', 'stage': 'C', 'var': 'ti', 'thread': 'threadIdx.y'}," \
    "  {'op': 'bind', 'stage': 'C', 'var': 'tj', 'thread': 'threadIdx.x'}," \
    "  {'op': 'compute_at', 'stage': 'AS', 'parent': 'C', 'var': 'ko'}," \
    "  {'op': 'compute_at', 'stage': 'BS', 'parent': 'C', 'var': 'ko'}," \
    "  {'op': 'bind', 'stage': 'AS', 'var': 'ax0', 'thread': 'threadIdx.y'}," \
    "  {'op': 'bind', 'stage': 'AS', 'var': 'ax1', 'thread': 'threadIdx.x'}," \
    "  {'op': 'bind', 'stage': 'BS', 'var': 'ax0', 'thread': 'threadIdx.y'}," \
    "  {'op': 'bind', 'stage': 'BS', 'var': 'ax1', 'thread': 'threadIdx.x'}"

/* 64x64 blocks of C, 4x4 per work-item accumulated in registers (cache_write local, loops
 * unrolled), k in steps of 8 through shared A and B tiles loaded two elements per work-item. */
#define GEMM_REGISTERS \
    "  {'op': 'cache_write', 'tensor': 'C', 'scope': 'local', 'name': 'CL'}," \
    "  {'op': 'cache_read', 'tensor': 'A', 'scope': 'shared', 'readers': ['CL'], 'name': 'AS'}," \
    "  {'op': 'cache_read', 'tensor': 'B', 'scope': 'shared', 'readers': ['CL'], 'name': 'BS'}," \
    "  {'op': 'tile', 'stage': 'C', 'x': 'i', 'y': 'j', 'x_factor': 64, 'y_factor': 64," \
    "   'x_outer': 'bi', 'y_outer': 'bj', 'x_inner': 'ii', 'y_inner': 'jj'}," \
    "  {'op': 'tile', 'stage': 'C', 'x': 'ii', 'y': 'jj', 'x_factor': 4, 'y_factor': 4," \
    "   'x_outer': 'ti', 'y_outer': 'tj', 'x_inner': 'ri', 'y_inner': 'rj'}," \
    "  {'op': 'bind', 'stage': 'C', 'var': 'bi', 'thread': 'blockIdx.y'}," \
    "  {'op': 'bind', 'stage': 'C', 'var': 'bj', 'thread': 'blockIdx.x'}," \
    "  {'op': 'bind', 'stage': 'C', 'var': 'ti', 'thread': 'threadIdx.y'}," \
    "  {'op': 'bind', 'stage': 'C', 'var': 'tj', 'thread': 'threadIdx.x'}," \
    "  {'op': 'unroll', 'stage': 'C', 'var': 'ri'}, {'op': 'unroll', 'stage': 'C', 'var': 'rj'}," \
    "  {'op': 'compute_at', 'stage': 'CL', 'parent': 'C', 'var': 'tj'}," \
    "  {'op': 'split', 'stage': 'CL', 'var': 'k', 'factor': 8, 'outer': 'ko', 'inner': 'ki'}," \
    "  {'op': 'reorder', 'stage': 'CL', 'vars': ['ko', 'ki', 'i', 'j']}," \
    "  {'op': 'unroll', 'stage': 'CL', 'var': 'ki'}, {'op': 'unroll', 'stage': 'CL', 'var': 'i'}," \
    "  {'op': 'unroll', 'stage': 'CL', 'var': 'j'}," \
    "  {'op': 'compute_at', 'stage': 'AS', 'parent': 'CL', 'var': 'ko'}," \
    "  {'op': 'compute_at', 'stage': 'BS', 'parent': 'CL', 'var': 'ko'}," \
    "  {'op': 'fuse', 'stage': 'AS', 'vars': ['ax0', 'ax1'], 'fused': 'af'}," \
    "  {'op': 'split', 'stage': 'AS', 'var': 'af', 'factor': 256, 'outer': 'ao', 'inner': 'ai'}," \
    "  {'op': 'split', 'stage': 'AS', 'var': 'ai', 'factor': 16, 'outer': 'ay', 'inner': 'ax'}," \
    "  {'op': 'bind', 'stage': 'AS', 'var': 'ay', 'thread': 'threadIdx.y'}," \
    "  {'op': 'bind', 'stage': 'AS', 'var': 'ax', 'thread': 'threadIdx.x'}," \
    "  {'op': 'fuse', 'stage': 'BS', 'vars': ['ax0', 'ax1'], 'fused': 'bf'}," \
    "  {'op': 'split', 'stage': 'BS', 'var': 'bf', 'factor': 256, 'outer': 'bo', 'inner': 'bi2'}," \
    "  {'op': 'split', 'stage': 'BS', 'var': 'bi2', 'factor': 16, 'outer': 'by', 'inner': 'bx'}," \
    "  {'op': 'bind', 'stage': 'BS', 'var': 'by', 'thread': 'threadIdx.y'}," \
    "  {'op': 'bind', 'stage': 'BS', 'var': 'bx', 'thread': 'threadIdx.x'}"

static const char gemm[] = GEMM_PROGRAM(GEMM_SHARED);
static const char gemm_regs[] = GEMM_PROGRAM(GEMM_REGISTERS);

static void send_te(client_t *c, const char *json, const char *target) {
  msgpack_sbuffer sb = te_json_to_msgpack(json);
  pbuild_t b;
  pb_begin(&b, 3);
  kiln_pack_cstr(&b.p.pk, "ir");
  msgpack_pack_bin(&b.p.pk, sb.size);
  msgpack_pack_bin_body(&b.p.pk, sb.data, sb.size);
  kiln_pack_kv_str(&b.p.pk, "target", target);
  kiln_pack_kv_str(&b.p.pk, "format", "te");
  client_send(c, 1, "compile", &b.buf);
  pb_end(&b);
  msgpack_sbuffer_destroy(&sb);
  cr_assert(client_recv(c, 120000), "no compile reply");
  char t[1024];
  cr_assert_eq(code_of(c), 0, "compile for %s failed: %s", target, text_of(c, t, sizeof(t)));
}

typedef struct recipe {
  uint32_t grid[3], block[3];
  int64_t M, N, K;
  uint32_t arg_m, arg_n, arg_k;
} recipe_t;

static int64_t eval(const msgpack_object *o, const recipe_t *r) {
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) return (int64_t)o->via.u64;
  cr_assert_eq(o->type, MSGPACK_OBJECT_ARRAY);
  const msgpack_object *a = o->via.array.ptr;
  if (kiln_obj_str_eq(&a[0], "var"))
    return kiln_obj_str_eq(&a[1], "M") ? r->M : kiln_obj_str_eq(&a[1], "N") ? r->N : r->K;
  int64_t x = eval(&a[1], r), y = eval(&a[2], r);
  if (kiln_obj_str_eq(&a[0], "add")) return x + y;
  if (kiln_obj_str_eq(&a[0], "sub")) return x - y;
  if (kiln_obj_str_eq(&a[0], "mul")) return x * y;
  if (kiln_obj_str_eq(&a[0], "floordiv")) return x / y; /* non-negative here */
  cr_assert_fail("unexpected launch expression");
  return 0;
}

/* The recipe of kernels[0] in the last compile reply, evaluated for the given shapes; the
 * var values are read back through "from" to check it points at the right dimensions. */
static recipe_t recipe_of(const client_t *c, int64_t M, int64_t N, int64_t K) {
  const msgpack_object *ks = kiln_params_find(c->msg.result, "kernels");
  cr_assert(ks && ks->via.array.size == 1);
  const msgpack_object *l = kiln_params_find(&ks->via.array.ptr[0], "launch");
  cr_assert(l && l->type == MSGPACK_OBJECT_MAP, "the reply has kernels[0].launch");
  recipe_t r = {.M = M, .N = N, .K = K};
  int64_t shapes[3][2] = {{M, K}, {K, N}, {M, N}};
  const msgpack_object *vars = kiln_params_find(l, "vars");
  cr_assert_eq(vars->via.array.size, 3);
  for (uint32_t i = 0; i < 3; i++) {
    const msgpack_object *v = &vars->via.array.ptr[i], *from = kiln_params_find(v, "from");
    uint32_t arg = (uint32_t)kiln_params_find(v, "arg")->via.u64;
    cr_assert_eq(arg, 3 + i, "shape vars follow the tensors in program order");
    int64_t val = shapes[from->via.array.ptr[0].via.u64][from->via.array.ptr[1].via.u64];
    cr_assert_eq(val, i == 0 ? M : i == 1 ? N : K, "var %u is read from the wrong dimension", i);
  }
  const msgpack_object *g = kiln_params_find(l, "grid"), *b = kiln_params_find(l, "block");
  for (int i = 0; i < 3; i++) {
    r.grid[i] = (uint32_t)eval(&g->via.array.ptr[i], &r);
    r.block[i] = (uint32_t)eval(&b->via.array.ptr[i], &r);
  }
  return r;
}

static uint64_t upload(client_t *c, const char *dev, const float *v, uint32_t rows, uint32_t cols) {
  pbuild_t b;
  pb_begin(&b, 2);
  kiln_pack_kv_str(&b.p.pk, "device", dev);
  kiln_pack_cstr(&b.p.pk, "tensor");
  msgpack_pack_map(&b.p.pk, 3);
  kiln_pack_kv_str(&b.p.pk, "dtype", "float32");
  kiln_pack_cstr(&b.p.pk, "shape");
  msgpack_pack_array(&b.p.pk, 2);
  msgpack_pack_uint32(&b.p.pk, rows);
  msgpack_pack_uint32(&b.p.pk, cols);
  kiln_pack_cstr(&b.p.pk, "data");
  msgpack_pack_bin(&b.p.pk, rows * cols * 4);
  msgpack_pack_bin_body(&b.p.pk, v, rows * cols * 4);
  client_send(c, 2, "upload", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(c, 20000));
  char why[512];
  cr_assert_eq(code_of(c), 0, "upload: %s", text_of(c, why, sizeof(why)));
  return kiln_params_find(c->msg.result, "id")->via.u64;
}

static void send_launch(client_t *c, const char *method, const char *module, const char *dev, const recipe_t *r,
                        const uint64_t *t) {
  pbuild_t b;
  pb_begin(&b, method[0] == 't' ? 8 : 6);
  kiln_pack_kv_str(&b.p.pk, "module", module);
  kiln_pack_kv_str(&b.p.pk, "kernel", "gemm");
  kiln_pack_kv_str(&b.p.pk, "device", dev);
  kiln_pack_cstr(&b.p.pk, "grid");
  msgpack_pack_array(&b.p.pk, 3);
  for (int i = 0; i < 3; i++) msgpack_pack_uint32(&b.p.pk, r->grid[i]);
  kiln_pack_cstr(&b.p.pk, "block");
  msgpack_pack_array(&b.p.pk, 3);
  for (int i = 0; i < 3; i++) msgpack_pack_uint32(&b.p.pk, r->block[i]);
  kiln_pack_cstr(&b.p.pk, "args");
  msgpack_pack_array(&b.p.pk, 6);
  for (int i = 0; i < 3; i++) {
    msgpack_pack_map(&b.p.pk, 1);
    kiln_pack_kv_u64(&b.p.pk, "tensor", t[i]);
  }
  msgpack_pack_int64(&b.p.pk, r->M);
  msgpack_pack_int64(&b.p.pk, r->N);
  msgpack_pack_int64(&b.p.pk, r->K);
  if (method[0] == 't') {
    kiln_pack_kv_u64(&b.p.pk, "number", 2);
    kiln_pack_kv_u64(&b.p.pk, "repeat", 3);
  }
  client_send(c, 3, method, &b.buf);
  pb_end(&b);
}

static void gemm_on(const char *prog, int64_t tile, const char *dev, int64_t M, int64_t N, int64_t K) {
  client_t c;
  client_connect_tcp(&c, &d);
  send_te(&c, prog, dev);
  char mod[65], txt[1024];
  const msgpack_object *m = kiln_params_find(c.msg.result, "module");
  memcpy(mod, m->via.str.ptr, 64);
  mod[64] = 0;
  recipe_t r = recipe_of(&c, M, N, K);
  cr_assert_eq(r.block[0], 16);
  cr_assert_eq(r.block[1], 16);
  cr_assert_eq(r.grid[0], (uint32_t)((N + tile - 1) / tile));
  cr_assert_eq(r.grid[1], (uint32_t)((M + tile - 1) / tile));

  float *a = malloc((size_t)(M * K) * 4), *b = malloc((size_t)(K * N) * 4), *out = calloc((size_t)(M * N), 4);
  unsigned seed = 11;
  for (int64_t i = 0; i < M * K; i++) a[i] = (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
  for (int64_t i = 0; i < K * N; i++) b[i] = (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
  uint64_t t[3] = {upload(&c, dev, a, (uint32_t)M, (uint32_t)K), upload(&c, dev, b, (uint32_t)K, (uint32_t)N),
                   upload(&c, dev, out, (uint32_t)M, (uint32_t)N)};
  send_launch(&c, "launch", mod, dev, &r, t);
  cr_assert(client_recv(&c, 60000));
  cr_assert_eq(code_of(&c), 0, "launch on %s failed: %s", dev, text_of(&c, txt, sizeof(txt)));
  client_send_id(&c, 4, "download", t[2]);
  cr_assert(client_recv(&c, 20000));
  memcpy(out, kiln_params_find(c.msg.result, "data")->via.bin.ptr, (size_t)(M * N) * 4);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double want = 0;
      for (int64_t k = 0; k < K; k++) want += (double)a[i * K + k] * b[k * N + j];
      cr_assert(fabs(out[i * N + j] - want) <= 1e-4 * (1 + fabs(want)), "C[%lld,%lld] = %g, want %g on %s",
                (long long)i, (long long)j, out[i * N + j], want, dev);
    }
  send_launch(&c, "time", mod, dev, &r, t);
  cr_assert(client_recv(&c, 60000));
  cr_assert_eq(code_of(&c), 0, "time on %s failed: %s", dev, text_of(&c, txt, sizeof(txt)));
  double mn = kiln_params_find(c.msg.result, "min")->via.f64;
  cr_log_info("%s: te gemm %lldx%lldx%lld (%lldx%lld blocks), min %.3f ms, %.1f GFLOP/s", dev, (long long)M,
              (long long)N, (long long)K, (long long)tile, (long long)tile, mn * 1e3, 2.0 * M * N * K / mn / 1e9);
  free(a), free(b), free(out);
  client_close(&c);
}

Test(te, gemm_runs_from_the_launch_recipe) {
  const char *dev = getenv("KILN_TEST_DEVICE");
  dev = dev && dev[0] ? dev : "cpu:0";
  gemm_on(gemm, 16, dev, 83, 61, 45); /* partial tiles in every dimension */
  gemm_on(gemm_regs, 64, dev, 150, 77, 29);
  /* KILN_TEST_TE_SIZE=n adds n x n x n runs (checked the same way; their times are logged). */
  const char *size = getenv("KILN_TEST_TE_SIZE");
  int n = size ? atoi(size) : 0;
  if (n > 0) {
    gemm_on(gemm, 16, dev, n, n, n);
    gemm_on(gemm_regs, 64, dev, n, n, n);
  }
}

Test(te, recipe_survives_the_cache_and_gpu_targets) {
  client_t c;
  client_connect_tcp(&c, &d);
  send_te(&c, gemm, "cpu");
  cr_assert(kiln_params_find(c.msg.result, "cached")->via.boolean == false);
  recipe_t r1 = recipe_of(&c, 100, 40, 7);
  send_te(&c, gemm, "cpu");
  cr_assert(kiln_params_find(c.msg.result, "cached")->via.boolean, "the second compile is a cache hit");
  recipe_t r2 = recipe_of(&c, 100, 40, 7);
  cr_assert(memcmp(&r1, &r2, sizeof(r1)) == 0, "the cached recipe differs");
  cr_assert_eq(r1.grid[1], 7);
  send_te(&c, gemm, "sm_90");
  recipe_of(&c, 1, 1, 1);
  send_te(&c, gemm, "gfx942");
  recipe_of(&c, 1, 1, 1);
  client_close(&c);
}

Test(te, bad_program_is_a_compile_error) {
  client_t c;
  client_connect_tcp(&c, &d);
  msgpack_sbuffer sb = te_json_to_msgpack("{'te': 1, 'tensors': [], 'kernels': []}");
  pbuild_t b;
  pb_begin(&b, 2);
  kiln_pack_cstr(&b.p.pk, "ir");
  msgpack_pack_bin(&b.p.pk, sb.size);
  msgpack_pack_bin_body(&b.p.pk, sb.data, sb.size);
  kiln_pack_kv_str(&b.p.pk, "format", "te");
  client_send(&c, 9, "compile", &b.buf);
  pb_end(&b);
  msgpack_sbuffer_destroy(&sb);
  cr_assert(client_recv(&c, 60000));
  char t[512];
  cr_assert_eq(code_of(&c), 7, "E_COMPILE expected");
  cr_assert(strstr(text_of(&c, t, sizeof(t)), "tensors must be a non-empty array"), "%s", t);
  client_close(&c);
}
