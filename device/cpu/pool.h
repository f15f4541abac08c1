/* A pool of threads pinned one per core that run one job at a time, the calling thread
 * taking part as thread 0. Made for short, frequent jobs (one per kernel launch): idle
 * threads spin briefly before they sleep, so back-to-back launches do not pay a wake-up,
 * and a job ends when thread 0 has finished and the helpers that joined it have: a helper
 * that arrives later (still waking, or without a core) skips that job, so a job must be
 * one that thread 0 alone can complete (the helpers share its work, as in launch.c).
 * _create/_destroy; kiln_cpu_pool_run is called from one thread (the pool's owner). */
#ifndef KILN_DEVICE_CPU_POOL_H
#define KILN_DEVICE_CPU_POOL_H

#include <stddef.h>

#include "base/status.h"

typedef struct kiln_cpu_pool kiln_cpu_pool_t;

/* Runs once on every thread of the pool with its index (0 = the caller). */
typedef void (*kiln_cpu_pool_job_cb)(void *ctx, unsigned thread);

/* One thread per entry of `cpus` (the caller is pinned to cpus[0]); cpus NULL means every
 * core the process may run on. E_INVALID_ARGUMENT names a core that cannot be used. */
KILN_MUST_USE kiln_status_t kiln_cpu_pool_create(const int *cpus, size_t ncpus, kiln_cpu_pool_t **out_pool);
void kiln_cpu_pool_destroy(kiln_cpu_pool_t *pool);
unsigned kiln_cpu_pool_size(const kiln_cpu_pool_t *pool);
/* Runs job(ctx, 0) on the calling thread and job(ctx, i) on each helper i that starts before
 * it returns; returns when all of those have returned. */
void kiln_cpu_pool_run(kiln_cpu_pool_t *pool, kiln_cpu_pool_job_cb job, void *ctx);

#endif
