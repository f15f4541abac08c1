/* kiln-device-bench: device-level numbers without the daemon in between.
 *
 *   kiln-device-bench [KIND[:INDEX]] [ARTIFACT_DIR]
 *
 * 1. Vector add of 2^24 float32 (the conformance vadd artifact for the device's arch),
 *    timed with time_evaluator semantics, as bytes moved per second (3 x 4 bytes per
 *    element), beside the host's memcpy bandwidth measured in the same run (cpu) so the
 *    ratio is not at the mercy of another day's machine.
 * 2. Launch latency of a tiny kernel (vadd of 1 element): p50/p99 of single launches
 *    (launch + wait, the worker's round trip) and the per-launch time of back-to-back runs.
 * ARTIFACT_DIR defaults to $KILN_TEST_DATA (the build's tests/device/). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "device/launch.h"
#include "device/registry.h"
#include "device/timing.h"

#define DIE_IF(s)                                                              \
  do {                                                                         \
    kiln_status_t s_ = (s);                                                    \
    if (s_) {                                                                  \
      fprintf(stderr, "device_bench: %s (%s)\n", kiln_status_message(s_), #s); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(*len);
  if (fread(b, 1, *len, f) != *len) *len = 0;
  fclose(f);
  return b;
}

typedef struct copy_part {
  char *dst;
  const char *src;
  size_t bytes;
} copy_part_t;

static void *copy_part(void *arg) {
  copy_part_t *c = arg;
  memcpy(c->dst, c->src, c->bytes);
  return NULL;
}

/* Best-of-5 memcpy bandwidth over `bytes`, counted as read + write, with the copy split
 * over `threads` threads (one part each, started together). Both buffers are touched
 * first so that no page faults are timed. */
static double memcpy_gbs(size_t bytes, unsigned threads) {
  char *a = malloc(bytes), *b = malloc(bytes);
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  copy_part_t parts[64];
  pthread_t tids[64];
  if (threads < 1) threads = 1;
  if (threads > 64) threads = 64;
  size_t chunk = (bytes / threads + 63) & ~(size_t)63;
  for (unsigned t = 0; t < threads; t++) {
    size_t off = chunk * t < bytes ? chunk * t : bytes;
    size_t end = off + chunk < bytes ? off + chunk : bytes;
    parts[t] = (copy_part_t){.dst = b + off, .src = a + off, .bytes = end - off};
  }
  double best = 0;
  for (int r = 0; r < 5; r++) {
    uint64_t t0 = kiln_now_ns();
    for (unsigned t = 1; t < threads; t++) pthread_create(&tids[t], NULL, copy_part, &parts[t]);
    copy_part(&parts[0]);
    for (unsigned t = 1; t < threads; t++) pthread_join(tids[t], NULL);
    double gbs = 2.0 * (double)bytes / (double)(kiln_now_ns() - t0);
    if (gbs > best) best = gbs;
  }
  free(a);
  free(b);
  return best;
}

int main(int argc, char **argv) {
  const char *id = argc > 1 ? argv[1] : "cpu:0";
  const char *dir = argc > 2 ? argv[2] : getenv("KILN_TEST_DATA");
  if (!dir) dir = ".";
  const kiln_backend_t *b;
  uint32_t index;
  DIE_IF(kiln_device_id_parse(id, &b, &index));
  kiln_device_t *dev;
  DIE_IF(b->open(index, NULL, 0, &dev));
  const kiln_device_info_t *info = b->info(dev);
  char path[4096];
  /* KILN_BENCH_VEC4=1 measures vadd4 (one float4 per work-item, 16-byte accesses). */
  const bool vec4 = getenv("KILN_BENCH_VEC4") && atoi(getenv("KILN_BENCH_VEC4")) == 1;
  snprintf(path, sizeof path, "%s/%s.%.*s.kart", dir, vec4 ? "vadd4" : "vadd",
           (int)strcspn(info->arch, ":"), info->arch);
  size_t len;
  uint8_t *bytes = read_file(path, &len);
  if (!bytes) {
    fprintf(stderr, "device_bench: no %s (pass the directory with the conformance artifacts)\n", path);
    return 1;
  }
  kiln_artifact_t art;
  DIE_IF(kiln_artifact_decode(bytes, len, &art));
  free(bytes);
  kiln_dmodule_t *mod;
  DIE_IF(b->module_load(dev, &art, &mod));
  const kiln_kernel_t *k = kiln_artifact_kernel(&art, vec4 ? "vadd4" : "vadd");

  /* KILN_BENCH_LOG2N picks the size (24 by default; the H200 bar is stated at 2^28). */
  const char *l2 = getenv("KILN_BENCH_LOG2N");
  const unsigned log2n = l2 && atoi(l2) >= 10 && atoi(l2) <= 30 ? (unsigned)atoi(l2) : 24;
  const uint32_t n = 1u << log2n;
  kiln_dmem_t *da, *db, *dc;
  DIE_IF(b->mem_alloc(dev, n * 4ull, &da));
  DIE_IF(b->mem_alloc(dev, n * 4ull, &db));
  DIE_IF(b->mem_alloc(dev, n * 4ull, &dc));
  float *host = calloc(n, 4);
  DIE_IF(b->copy_in(dev, da, 0, host, n * 4ull));
  DIE_IF(b->copy_in(dev, db, 0, host, n * 4ull));
  kiln_launch_arg_t in[4] = {{.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = b->mem_address(dev, da)},
                             {.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = b->mem_address(dev, db)},
                             {.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = b->mem_address(dev, dc)},
                             {.kind = KILN_LAUNCH_ARG_UINT, .u = vec4 ? n / 4 : n}};
  kiln_launch_values_t v;
  DIE_IF(kiln_launch_values_init(&v, k, in, 4));
  uint32_t grid[3] = {(vec4 ? n / 4 : n) / 256, 1, 1}, block[3] = {256, 1, 1};
  kiln_launch_t l;
  DIE_IF(kiln_launch_prepare(k, info, grid, block, 0, v.ptrs, &l));
  kiln_time_config_t cfg;
  kiln_time_config_default(&cfg);
  cfg.repeat = 10;
  cfg.min_repeat_ms = 100;
  kiln_time_result_t r;
  DIE_IF(kiln_time_evaluate(b, dev, mod, &l, &cfg, &r));
  double vadd_gbs = 12.0 * n / r.stats.min / 1e9;
  printf("device %s (%s, %s)\n", info->id, info->name, info->arch);
  printf("%s 2^%u float32: min %.3f ms, median %.3f ms, cv %.3f -> %.1f GB/s\n", vec4 ? "vadd4" : "vadd", log2n, r.stats.min * 1e3,
         r.stats.median * 1e3, r.stats.cv, vadd_gbs);
  if (b->mem_host_ptr(dev, da)) {
    /* The host's copy bandwidth: the better of one copying thread and one per core the
     * device uses (one thread rarely saturates a socket's memory). */
    unsigned cores = info->compute_units ? info->compute_units : 1;
    double mc1 = memcpy_gbs(n * 4ull * 2, 1), mcn = memcpy_gbs(n * 4ull * 2, cores);
    double mc = mc1 > mcn ? mc1 : mcn;
    printf("host memcpy (same run): 1 thread %.1f GB/s, %u threads %.1f GB/s; vadd / best memcpy = %.0f%%\n", mc1,
           cores, mcn, 100.0 * vadd_gbs / mc);
  }
  kiln_time_result_deinit(&r);

  /* Tiny kernel: one work-item. */
  in[3].u = 1;
  kiln_launch_values_deinit(&v);
  DIE_IF(kiln_launch_values_init(&v, k, in, 4));
  uint32_t g1[3] = {1, 1, 1}, b1[3] = {1, 1, 1};
  DIE_IF(kiln_launch_prepare(k, info, g1, b1, 0, v.ptrs, &l));
  enum { RUNS = 2000 };
  static uint64_t lat[RUNS];
  for (int i = 0; i < 100; i++) DIE_IF(b->launch(dev, mod, &l, 1, 0, NULL));
  for (int i = 0; i < RUNS; i++) {
    uint64_t t0 = kiln_now_ns();
    DIE_IF(b->launch(dev, mod, &l, 1, 0, NULL));
    lat[i] = kiln_now_ns() - t0;
  }
  qsort(lat, RUNS, sizeof lat[0], cmp_u64);
  uint64_t ns = 0;
  DIE_IF(b->launch(dev, mod, &l, 1000, 0, &ns));
  printf("tiny launch round trip: p50 %.1f us, p99 %.1f us; back-to-back %.2f us per launch\n",
         lat[RUNS / 2] / 1e3, lat[RUNS * 99 / 100] / 1e3, ns / 1e3 / 1000);

  kiln_launch_values_deinit(&v);
  b->mem_free(dev, da);
  b->mem_free(dev, db);
  b->mem_free(dev, dc);
  b->module_unload(dev, mod);
  kiln_artifact_deinit(&art);
  b->close(dev);
  free(host);
  return 0;
}
