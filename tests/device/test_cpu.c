/* The cpu backend's own parts: its pool, memory, and modules built by hand to the cpu ABI
 * (cpu_fixture.c), so they are checked without the compiler. */
#include <criterion/criterion.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "device/cpu/pool.h"
#include "device/launch.h"
#include "device/registry.h"
#include "support.h"

static _Atomic unsigned ran_mask;

static void mark(void *ctx, unsigned thread) { atomic_fetch_or(&ran_mask, 1u << thread); }

/* Thread 0 stays in the job until every thread has marked it (at most 10 s): a helper that
 * comes while thread 0 is still in the job runs it. */
static void mark_all(void *ctx, unsigned thread) {
  unsigned all = *(const unsigned *)ctx;
  mark(NULL, thread);
  if (thread != 0) return;
  uint64_t until = kiln_now_ns() + 10ull * 1000 * 1000 * 1000;
  while (atomic_load(&ran_mask) != all && kiln_now_ns() < until) sched_yield();
}

static void runs_on_every_thread(const int *cpus, size_t ncpus, int rounds) {
  kiln_cpu_pool_t *pool;
  cr_assert_eq(kiln_cpu_pool_create(cpus, ncpus, &pool), KILN_OK);
  unsigned n = kiln_cpu_pool_size(pool);
  cr_assert_gt(n, 0);
  unsigned all = n >= 32 ? ~0u : (1u << n) - 1;
  for (int round = 0; round < rounds; round++) {
    atomic_store(&ran_mask, 0);
    kiln_cpu_pool_run(pool, mark_all, &all);
    cr_assert_eq(atomic_load(&ran_mask), all, "round %d", round);
  }
  /* A job that thread 0 finishes at once: it returns without waiting for helpers that have
   * not joined yet; thread 0 always runs it. */
  for (int round = 0; round < rounds; round++) {
    atomic_store(&ran_mask, 0);
    kiln_cpu_pool_run(pool, mark, NULL);
    cr_assert(atomic_load(&ran_mask) & 1u, "round %d", round);
    cr_assert_eq(atomic_load(&ran_mask) & ~all, 0u);
  }
  kiln_cpu_pool_destroy(pool);
}

Test(cpu_pool, runs_the_job_on_every_thread_each_time) { runs_on_every_thread(NULL, 0, 1000); }

Test(cpu_pool, names_a_core_it_cannot_use) {
  int cpus[] = {0, 100000};
  kiln_cpu_pool_t *pool = NULL;
  kiln_status_t s = kiln_cpu_pool_create(cpus, 2, &pool);
  cr_assert(s);
  cr_expect_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
  cr_expect(strstr(kiln_status_message(s), "100000"), "%s", kiln_status_message(s));
  cr_expect_null(pool);
  kiln_status_free(s);
}

Test(cpu_memory, aligned_bounded_copies) {
  const kiln_backend_t *b = &kiln_backend_cpu;
  kiln_device_t *dev;
  cr_assert_eq(b->open(0, NULL, 0, &dev), KILN_OK);
  uint64_t sizes[] = {1, 100, 4096, 3u << 20};
  for (size_t i = 0; i < 4; i++) {
    kiln_dmem_t *m;
    cr_assert_eq(b->mem_alloc(dev, sizes[i], &m), KILN_OK);
    cr_expect_eq(b->mem_address(dev, m) % 64, 0);
    cr_expect_eq((uint64_t)(uintptr_t)b->mem_host_ptr(dev, m), b->mem_address(dev, m));
    char x = 'q', y = 0;
    cr_expect_eq(b->copy_in(dev, m, sizes[i] - 1, &x, 1), KILN_OK);
    cr_expect_eq(b->copy_out(dev, m, sizes[i] - 1, &y, 1), KILN_OK);
    cr_expect_eq(y, 'q');
    kiln_status_t s = b->copy_in(dev, m, sizes[i], &x, 1);
    cr_expect(s && kiln_status_code(s) == KILN_E_INVALID_ARGUMENT);
    kiln_status_free(s);
    b->mem_free(dev, m);
  }
  cr_expect_eq(b->flush_caches(dev), KILN_OK);
  kiln_status_t s = b->open(1, NULL, 0, &dev);
  cr_expect(s && kiln_status_code(s) == KILN_E_NOT_FOUND);
  kiln_status_free(s);
  b->close(dev);
}

static kiln_kernel_arg_t vadd_args[] = {
    {.name = "a", .type = KILN_ARG_PTR, .size = 8},
    {.name = "b", .type = KILN_ARG_PTR, .size = 8},
    {.name = "c", .type = KILN_ARG_PTR, .size = 8},
    {.name = "n", .type = KILN_ARG_I32, .size = 4},
};
static kiln_kernel_arg_t groups_args[] = {{.name = "out", .type = KILN_ARG_PTR, .size = 8}};
static kiln_kernel_t fixture_kernels[] = {
    {.name = "vadd", .num_args = 4, .args = vadd_args},
    {.name = "groups", .num_args = 1, .args = groups_args, .group_segment_size = 4096},
    {.name = "spin", .num_args = 0},
    {.name = "empty", .num_args = 0},
    {.name = "count", .num_args = 1, .args = groups_args},
};

static void fixture_artifact(const char *file, kiln_artifact_t *art) {
  memset(art, 0, sizeof *art);
  art->format = KILN_FORMAT_CPU_SO;
  strcpy(art->target, "cpu");
  art->code = kiln_test_read_data(file, &art->code_size);
  art->num_kernels = KILN_ARRAY_SIZE(fixture_kernels);
  art->kernels = fixture_kernels;
}

Test(cpu_module, runs_hand_written_work_groups) {
  const kiln_backend_t *b = &kiln_backend_cpu;
  kiln_device_t *dev;
  cr_assert_eq(b->open(0, NULL, 0, &dev), KILN_OK);
  kiln_artifact_t art;
  fixture_artifact("cpu_fixture.so", &art);
  kiln_dmodule_t *mod;
  kiln_status_t s = b->module_load(dev, &art, &mod);
  cr_assert_eq(s, KILN_OK, "%s", s ? kiln_status_message(s) : "");

  enum { N = 1000 };
  float ha[N], hb[N], hc[N];
  for (int i = 0; i < N; i++) ha[i] = (float)i, hb[i] = 2.0f * (float)i, hc[i] = -1;
  kiln_dmem_t *da, *db, *dc;
  cr_assert_eq(b->mem_alloc(dev, sizeof ha, &da), KILN_OK);
  cr_assert_eq(b->mem_alloc(dev, sizeof hb, &db), KILN_OK);
  cr_assert_eq(b->mem_alloc(dev, sizeof hc, &dc), KILN_OK);
  b->copy_in(dev, da, 0, ha, sizeof ha);
  b->copy_in(dev, db, 0, hb, sizeof hb);
  b->copy_in(dev, dc, 0, hc, sizeof hc);
  kiln_launch_arg_t in[4] = {
      {.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = b->mem_address(dev, da)},
      {.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = b->mem_address(dev, db)},
      {.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = b->mem_address(dev, dc)},
      {.kind = KILN_LAUNCH_ARG_UINT, .u = N},
  };
  kiln_launch_values_t v;
  cr_assert_eq(kiln_launch_values_init(&v, &art.kernels[0], in, 4), KILN_OK);
  uint32_t grid[3] = {(N + 63) / 64, 1, 1}, block[3] = {64, 1, 1};
  kiln_launch_t l;
  cr_assert_eq(kiln_launch_prepare(&art.kernels[0], b->info(dev), grid, block, 0, v.ptrs, &l), KILN_OK);
  uint64_t ns = 0;
  cr_assert_eq(b->launch(dev, mod, &l, 3, 0, &ns), KILN_OK);
  cr_expect_gt(ns, 0);
  b->copy_out(dev, dc, 0, hc, sizeof hc);
  for (int i = 0; i < N; i++) cr_assert_eq(hc[i], 3.0f * (float)i, "c[%d] = %g", i, hc[i]);
  kiln_launch_values_deinit(&v);

  /* Every group of a 3-D grid exactly once, each with its own work-group memory. */
  enum { GX = 7, GY = 5, GZ = 3 };
  int32_t hout[GX * GY * GZ] = {0};
  kiln_dmem_t *dout;
  cr_assert_eq(b->mem_alloc(dev, sizeof hout, &dout), KILN_OK);
  b->copy_in(dev, dout, 0, hout, sizeof hout);
  kiln_launch_arg_t gin[1] = {{.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = b->mem_address(dev, dout)}};
  cr_assert_eq(kiln_launch_values_init(&v, &art.kernels[1], gin, 1), KILN_OK);
  uint32_t g3[3] = {GX, GY, GZ}, b3[3] = {256, 1, 1};
  cr_assert_eq(kiln_launch_prepare(&art.kernels[1], b->info(dev), g3, b3, 0, v.ptrs, &l), KILN_OK);
  cr_assert_eq(b->launch(dev, mod, &l, 1, 0, NULL), KILN_OK);
  b->copy_out(dev, dout, 0, hout, sizeof hout);
  for (int i = 0; i < GX * GY * GZ; i++) cr_assert_eq(hout[i], i + 1, "group %d", i);
  kiln_launch_values_deinit(&v);

  b->mem_free(dev, da);
  b->mem_free(dev, db);
  b->mem_free(dev, dc);
  b->mem_free(dev, dout);
  b->module_unload(dev, mod);
  free(art.code);
  b->close(dev);
}

/* Launches argument-less fixture kernel `kernel` over `groups` work-groups of one item with
 * a 20 ms deadline; the launch's status, and the launch alone's wall time in ms. */
static kiln_status_t launch_with_deadline(unsigned kernel, uint32_t groups, double *out_ms) {
  const kiln_backend_t *b = &kiln_backend_cpu;
  kiln_device_t *dev;
  cr_assert_eq(b->open(0, NULL, 0, &dev), KILN_OK);
  kiln_artifact_t art;
  fixture_artifact("cpu_fixture.so", &art);
  kiln_dmodule_t *mod;
  cr_assert_eq(b->module_load(dev, &art, &mod), KILN_OK);
  uint32_t grid[3] = {groups, 1, 1}, block[3] = {1, 1, 1};
  kiln_launch_t l;
  void *none[1] = {NULL};
  cr_assert_eq(kiln_launch_prepare(&art.kernels[kernel], b->info(dev), grid, block, 0, none, &l), KILN_OK);
  uint64_t start = kiln_now_ns();
  kiln_status_t s = b->launch(dev, mod, &l, 1, 20 * 1000 * 1000, NULL);
  if (out_ms) *out_ms = (double)(kiln_now_ns() - start) / 1e6;
  b->module_unload(dev, mod);
  free(art.code);
  b->close(dev);
  return s;
}

Test(cpu_module, deadline_stops_new_work_groups) {
  kiln_status_t s = launch_with_deadline(2, 100000, NULL);
  cr_assert(s);
  cr_expect_eq(kiln_status_code(s), KILN_E_TIMEOUT, "%s", kiln_status_message(s));
  kiln_status_free(s);
}

/* The deadline clock is read every few groups, not before each one: a grid of four billion
 * empty groups (seconds of launch overhead) must still stop soon after its deadline. */
Test(cpu_module, deadline_stops_a_grid_of_tiny_work_groups) {
  double ms;
  kiln_status_t s = launch_with_deadline(3, 4000000000u, &ms);
  cr_assert(s);
  cr_expect_eq(kiln_status_code(s), KILN_E_TIMEOUT, "%s", kiln_status_message(s));
  /* 20 ms, a few coarse-clock ticks, and room for the shared machine's other load. */
  cr_expect_lt(ms, 1000.0, "stopped %.1f ms after it started", ms);
  kiln_status_free(s);
}

Test(cpu_module, refuses_foreign_and_wrong_version_modules) {
  const kiln_backend_t *b = &kiln_backend_cpu;
  kiln_device_t *dev;
  cr_assert_eq(b->open(0, NULL, 0, &dev), KILN_OK);
  kiln_artifact_t art;
  fixture_artifact("cpu_fixture_v99.so", &art);
  kiln_dmodule_t *mod = NULL;
  kiln_status_t s = b->module_load(dev, &art, &mod);
  cr_assert(s);
  cr_expect(strstr(kiln_status_message(s), "ABI version 99"), "%s", kiln_status_message(s));
  kiln_status_free(s);
  art.format = KILN_FORMAT_PTX;
  strcpy(art.target, "sm_90");
  s = b->module_load(dev, &art, &mod);
  cr_assert(s);
  cr_expect(strstr(kiln_status_message(s), "compile it for target cpu"), "%s", kiln_status_message(s));
  kiln_status_free(s);
  art.format = KILN_FORMAT_CPU_SO;
  memcpy(art.code, "garbage", 7);
  s = b->module_load(dev, &art, &mod);
  cr_assert(s);
  cr_expect_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
  kiln_status_free(s);
  cr_expect_null(mod);
  free(art.code);
  b->close(dev);
}

/* The first core this process may run on: pools of several threads on one core stand for
 * more threads than cores on any machine. */
static int first_cpu(void) {
  cpu_set_t set;
  cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) return c;
  cr_assert_fail("no core");
  return 0;
}

Test(cpu_pool, more_threads_than_cores) {
  int c = first_cpu(), cpus[4] = {c, c, c, c};
  runs_on_every_thread(cpus, 4, 200);
}

/* Every group of the grid exactly `runs` times (the count kernel adds 1 per visit), on pools
 * of 1, 2 and 4 threads: grids of one group, fewer groups than threads, counts not divisible
 * by the thread count, 3-D grids, and one large enough to be handed out in chunks. */
Test(cpu_module, every_group_exactly_once_on_pools_of_1_2_and_4) {
  const kiln_backend_t *b = &kiln_backend_cpu;
  int c = first_cpu(), cpus[4] = {c, c, c, c};
  static const uint32_t grids[][3] = {{1, 1, 1}, {2, 1, 1}, {3, 1, 1}, {5, 1, 1}, {7, 5, 3},
                                      {33, 1, 7}, {1000, 3, 1}, {1, 1, 9}};
  for (size_t n = 1; n <= 4; n *= 2) {
    kiln_device_t *dev;
    cr_assert_eq(b->open(0, cpus, n, &dev), KILN_OK);
    cr_assert_eq(b->info(dev)->compute_units, n);
    kiln_artifact_t art;
    fixture_artifact("cpu_fixture.so", &art);
    kiln_dmodule_t *mod;
    cr_assert_eq(b->module_load(dev, &art, &mod), KILN_OK);
    for (size_t gi = 0; gi < KILN_ARRAY_SIZE(grids); gi++) {
      const uint32_t *g = grids[gi];
      uint32_t groups = g[0] * g[1] * g[2], *host = calloc(groups, sizeof *host);
      kiln_dmem_t *out;
      cr_assert_eq(b->mem_alloc(dev, groups * sizeof *host, &out), KILN_OK);
      cr_assert_eq(b->copy_in(dev, out, 0, host, groups * sizeof *host), KILN_OK);
      kiln_launch_arg_t in[1] = {{.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = b->mem_address(dev, out)}};
      kiln_launch_values_t v;
      cr_assert_eq(kiln_launch_values_init(&v, &art.kernels[4], in, 1), KILN_OK);
      uint32_t grid[3] = {g[0], g[1], g[2]}, block[3] = {1, 1, 1};
      kiln_launch_t l;
      cr_assert_eq(kiln_launch_prepare(&art.kernels[4], b->info(dev), grid, block, 0, v.ptrs, &l), KILN_OK);
      for (uint32_t runs = 1; runs <= 3; runs += 2) {
        cr_assert_eq(b->launch(dev, mod, &l, runs, 0, NULL), KILN_OK);
        cr_assert_eq(b->copy_out(dev, out, 0, host, groups * sizeof *host), KILN_OK);
        for (uint32_t i = 0; i < groups; i++)
          cr_assert_eq(host[i], runs == 1 ? 1 : 4, "pool of %zu, grid %ux%ux%u: group %u ran %u times", n, g[0],
                       g[1], g[2], i, host[i]);
      }
      kiln_launch_values_deinit(&v);
      b->mem_free(dev, out);
      free(host);
    }
    b->module_unload(dev, mod);
    free(art.code);
    b->close(dev);
  }
}

/* A graph's pattern: hundreds of tiny launches back to back, each reading what the one
 * before wrote (x <- x + 1, ping-ponging between two buffers), with 1 and 13 work-groups, on
 * pools of 1, 2 and 4 threads. Exact in float: every value stays a small integer. */
Test(cpu_module, tiny_launches_back_to_back) {
  const kiln_backend_t *b = &kiln_backend_cpu;
  int c = first_cpu(), cpus[4] = {c, c, c, c};
  enum { LAUNCHES = 300 };
  static const int32_t sizes[] = {5, 100};
  for (size_t n = 1; n <= 4; n *= 2) {
    kiln_device_t *dev;
    cr_assert_eq(b->open(0, cpus, n, &dev), KILN_OK);
    kiln_artifact_t art;
    fixture_artifact("cpu_fixture.so", &art);
    kiln_dmodule_t *mod;
    cr_assert_eq(b->module_load(dev, &art, &mod), KILN_OK);
    for (size_t si = 0; si < KILN_ARRAY_SIZE(sizes); si++) {
      int32_t len = sizes[si];
      float host[100], ones[100];
      for (int i = 0; i < len; i++) host[i] = (float)i, ones[i] = 1.0f;
      kiln_dmem_t *buf[2], *one;
      for (int k = 0; k < 2; k++) cr_assert_eq(b->mem_alloc(dev, sizeof host, &buf[k]), KILN_OK);
      cr_assert_eq(b->mem_alloc(dev, sizeof ones, &one), KILN_OK);
      cr_assert_eq(b->copy_in(dev, buf[0], 0, host, sizeof host), KILN_OK);
      cr_assert_eq(b->copy_in(dev, one, 0, ones, sizeof ones), KILN_OK);
      kiln_launch_values_t v[2];
      kiln_launch_t l[2];
      uint32_t grid[3] = {(uint32_t)(len + 7) / 8, 1, 1}, block[3] = {8, 1, 1};
      for (int k = 0; k < 2; k++) {
        kiln_launch_arg_t in[4] = {
            {.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = b->mem_address(dev, buf[k])},
            {.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = b->mem_address(dev, one)},
            {.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = b->mem_address(dev, buf[1 - k])},
            {.kind = KILN_LAUNCH_ARG_UINT, .u = (uint64_t)len},
        };
        cr_assert_eq(kiln_launch_values_init(&v[k], &art.kernels[0], in, 4), KILN_OK);
        cr_assert_eq(kiln_launch_prepare(&art.kernels[0], b->info(dev), grid, block, 0, v[k].ptrs, &l[k]), KILN_OK);
      }
      for (int i = 0; i < LAUNCHES; i++) cr_assert_eq(b->launch(dev, mod, &l[i % 2], 1, 0, NULL), KILN_OK);
      cr_assert_eq(b->copy_out(dev, buf[LAUNCHES % 2], 0, host, sizeof host), KILN_OK);
      for (int i = 0; i < len; i++)
        cr_assert_eq(host[i], (float)(i + LAUNCHES), "pool of %zu, %d floats: x[%d] = %g", n, len, i, host[i]);
      for (int k = 0; k < 2; k++) {
        kiln_launch_values_deinit(&v[k]);
        b->mem_free(dev, buf[k]);
      }
      b->mem_free(dev, one);
    }
    b->module_unload(dev, mod);
    free(art.code);
    b->close(dev);
  }
}
