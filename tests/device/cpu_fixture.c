/* A hand-written shared object that follows protocol/cpu_abi.h, as the compiler's cpu
 * output does: it tests the cpu backend's loading and scheduling without the compiler.
 * FIXTURE_ABI_VERSION lets one build claim a wrong version. */
#include <stdint.h>

#include "protocol/cpu_abi.h"

#ifndef FIXTURE_ABI_VERSION
#define FIXTURE_ABI_VERSION KILN_CPU_ABI_VERSION
#endif

__attribute__((visibility("default"))) const uint32_t __kiln_cpu_abi_version = FIXTURE_ABI_VERSION;

/* vadd(a, b, c, n): c[i] = a[i] + b[i] over a 1-D grid, bounds-checked. */
__attribute__((visibility("default"))) void __kiln_wg_vadd(const kiln_cpu_wg_ctx_t *ctx,
                                                           void *const *args) {
  const float *a = *(float *const *)args[0];
  const float *b = *(float *const *)args[1];
  float *c = *(float *const *)args[2];
  int32_t n = *(const int32_t *)args[3];
  for (uint32_t l = 0; l < ctx->group_size[0]; l++) {
    int64_t i = (int64_t)ctx->group_id[0] * ctx->group_size[0] + l;
    if (i < n) c[i] = a[i] + b[i];
  }
}

/* groups(out): out[linear group id] = id + 1 after a round trip through the work-group
 * memory, which must be private to the calling thread and hold group_size[0] ints. */
__attribute__((visibility("default"))) void __kiln_wg_groups(const kiln_cpu_wg_ctx_t *ctx,
                                                             void *const *args) {
  int32_t *out = *(int32_t *const *)args[0];
  volatile int32_t *shared = ctx->shared;
  uint32_t id = ctx->group_id[0] +
                ctx->num_groups[0] * (ctx->group_id[1] + ctx->num_groups[1] * ctx->group_id[2]);
  for (uint32_t l = 0; l < ctx->group_size[0]; l++) shared[l] = (int32_t)(id + l);
  int32_t sum = 0;
  for (uint32_t l = 0; l < ctx->group_size[0]; l++) sum += shared[l] - (int32_t)l;
  out[id] = sum / (int32_t)ctx->group_size[0] + 1;
}

/* spin(): runs long enough per group for a deadline to pass. */
__attribute__((visibility("default"))) void __kiln_wg_spin(const kiln_cpu_wg_ctx_t *ctx,
                                                           void *const *args) {
  for (volatile uint64_t i = 0; i < 2000000; i++) {
  }
}

/* empty(): does nothing: a grid of billions of these is all launch overhead. */
__attribute__((visibility("default"))) void __kiln_wg_empty(const kiln_cpu_wg_ctx_t *ctx,
                                                            void *const *args) {
  (void)ctx;
  (void)args;
}

/* count(out, thread_seen): out[linear group id] += 1, atomically; a grid run with every group
 * exactly once leaves 1 everywhere, whichever threads ran which groups. */
__attribute__((visibility("default"))) void __kiln_wg_count(const kiln_cpu_wg_ctx_t *ctx,
                                                            void *const *args) {
  uint32_t *out = *(uint32_t *const *)args[0];
  uint64_t id = ctx->group_id[0] +
                (uint64_t)ctx->num_groups[0] * (ctx->group_id[1] + (uint64_t)ctx->num_groups[1] * ctx->group_id[2]);
  __atomic_fetch_add(&out[id], 1, __ATOMIC_RELAXED);
}
