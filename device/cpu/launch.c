/* Running a launch on the cpu. The grid is cut into one contiguous share per pool thread
 * (thread 0, the launching thread, first); each thread takes its own share's groups in
 * chunks from its own counter, then helps the others through theirs (dynamic balancing:
 * groups can differ in cost, and a thread can lose its core to another process). Each
 * thread calls the work-group function with its own shared and scratch memory. Which thread
 * runs a group never changes what the group computes. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "device/cpu/cpu.h"

#define ALIGN 64
#define MAX_STRIDE 64 /* work-groups at most between two reads of the deadline clock */
#define CHUNKS 8      /* chunks per share */

typedef struct run {
  kiln_device_t *dev;
  kiln_cpu_wg_fn_t fn;
  const kiln_launch_t *launch;
  unsigned nthreads;
  uint64_t chunk; /* groups taken per visit to a share's counter */
  uint64_t deadline; /* absolute CLOCK_MONOTONIC_COARSE ns, 0 = none */
  _Atomic bool timed_out;
} run_t;

/* The deadline clock: the coarse one (the cheapest clock here, 14 ns a read on the 2-core
 * build machine; a resolution of one kernel tick, 1-4 ms: a deadline is milliseconds). */
static uint64_t coarse_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Thread t's share of `total` groups over n threads: [t * total / n rounded up, the same for
 * t + 1). Shares differ by at most one group and the larger ones come first, so a grid with
 * fewer groups than threads runs on the launching thread and the lowest helpers. */
static uint64_t share_begin(uint64_t total, unsigned t, unsigned n) {
  return (uint64_t)(((unsigned __int128)total * t + n - 1) / n);
}

static void run_groups(void *arg, unsigned thread) {
  run_t *r = arg;
  const kiln_launch_t *l = r->launch;
  kiln_cpu_wg_ctx_t ctx;
  memset(&ctx, 0, sizeof ctx);
  for (int d = 0; d < 3; d++) {
    ctx.group_size[d] = l->block[d];
    ctx.num_groups[d] = l->grid[d];
  }
  ctx.shared = r->dev->mem[thread].shared;
  ctx.scratch = r->dev->mem[thread].scratch;
  uint64_t gx = l->grid[0], gxy = gx * l->grid[1];
  /* Read before every group, the clock cost 5% of EfficientNet-Lite0's graph run (kernels of
   * thousands of sub-microsecond groups). It is read every `stride` groups instead: while
   * the coarse clock has not ticked since the last read, the groups between reads took less
   * than a tick and the stride doubles (up to MAX_STRIDE); a tick sends it back to 1. For
   * groups of like cost a new group starts at most about two ticks past the deadline. */
  uint32_t stride = 1, until_check = 0;
  uint64_t last_read = 0;
  /* Its own share first, then the others' in turn from the next thread on. */
  for (unsigned k = 0; k < r->nthreads; k++) {
    cpu_thread_mem_t *share = &r->dev->mem[(thread + k) % r->nthreads];
    for (;;) {
      /* Relaxed: the pool's start and end of a job order everything else. */
      uint64_t first = atomic_fetch_add_explicit(&share->next, r->chunk, memory_order_relaxed);
      if (first >= share->end) break;
      uint64_t last = first + r->chunk < share->end ? first + r->chunk : share->end;
      uint32_t x = (uint32_t)(first % gx), y = (uint32_t)((first / gx) % l->grid[1]), z = (uint32_t)(first / gxy);
      for (uint64_t i = first; i < last; i++) {
        /* A running work-group cannot be stopped; past the deadline no new one starts. */
        if (r->deadline && until_check-- == 0) {
          uint64_t now = coarse_now_ns();
          if (now > r->deadline) {
            atomic_store(&r->timed_out, true);
            for (unsigned t = 0; t < r->nthreads; t++)
              atomic_store_explicit(&r->dev->mem[t].next, r->dev->mem[t].end, memory_order_relaxed);
            return;
          }
          stride = now == last_read ? (stride < MAX_STRIDE ? stride * 2 : MAX_STRIDE) : 1;
          last_read = now;
          until_check = stride - 1;
        }
        ctx.group_id[0] = x;
        ctx.group_id[1] = y;
        ctx.group_id[2] = z;
        r->fn(&ctx, l->args);
        if (++x == gx) {
          x = 0;
          if (++y == l->grid[1]) {
            y = 0;
            z++;
          }
        }
      }
    }
  }
}

/* Grows a per-thread buffer to `need` bytes (64-byte aligned); contents are not kept. */
static kiln_status_t ensure(void **buf, size_t *cap, size_t need) {
  if (need <= *cap) return KILN_OK;
  void *p = NULL;
  size_t n = (need + ALIGN - 1) & ~(size_t)(ALIGN - 1);
  if (posix_memalign(&p, ALIGN, n) != 0)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for %zu bytes of work-group memory", n);
  free(*buf);
  *buf = p;
  *cap = n;
  return KILN_OK;
}

kiln_status_t kiln_cpu_launch(kiln_device_t *dev, kiln_dmodule_t *mod, const kiln_launch_t *l,
                              uint32_t count, uint64_t deadline_ns, uint64_t *out_elapsed_ns) {
  kiln_cpu_wg_fn_t fn = kiln_cpu_module_fn(mod, l->kernel);
  if (!fn)
    return KILN_STATUS(KILN_E_NOT_FOUND, "kernel \"%s\" is not in this module", l->kernel->name);
  const kiln_kernel_t *k = l->kernel;
  size_t items = (size_t)l->block[0] * l->block[1] * l->block[2];
  size_t shared = (size_t)k->group_segment_size + l->shared;
  size_t scratch = items * k->private_segment_size;
  unsigned nthreads = kiln_cpu_pool_size(dev->pool);
  for (unsigned t = 0; t < nthreads; t++) {
    cpu_thread_mem_t *m = &dev->mem[t];
    KILN_RETURN_IF_ERROR(ensure(&m->shared, &m->shared_cap, shared ? shared : 1));
    KILN_RETURN_IF_ERROR(ensure(&m->scratch, &m->scratch_cap, scratch ? scratch : 1));
  }
  run_t r;
  memset(&r, 0, sizeof r);
  r.dev = dev;
  r.fn = fn;
  r.launch = l;
  r.nthreads = nthreads;
  uint64_t total = (uint64_t)l->grid[0] * l->grid[1] * l->grid[2];
  /* A visit to another thread's counter costs a cache-line transfer between cores (~100
   * ns): when every thread took single groups from one shared counter, a row-per-group
   * kernel of 8,000 small groups spent more time there than in its groups. Chunks of an
   * eighth of a share keep the end of a launch balanced to an eighth of a share. */
  r.chunk = total / ((uint64_t)nthreads * CHUNKS);
  if (r.chunk < 1) r.chunk = 1;
  uint64_t start = kiln_now_ns();
  r.deadline = deadline_ns ? coarse_now_ns() + deadline_ns : 0;
  for (uint32_t c = 0; c < count; c++) {
    /* Runs are ordered like launches on one GPU queue: each one ends before the next. */
    for (unsigned t = 0; t < nthreads; t++) {
      atomic_store_explicit(&dev->mem[t].next, share_begin(total, t, nthreads), memory_order_relaxed);
      dev->mem[t].end = share_begin(total, t + 1, nthreads);
    }
    kiln_cpu_pool_run(dev->pool, run_groups, &r);
    if (atomic_load(&r.timed_out))
      return KILN_STATUS(KILN_E_TIMEOUT, "kernel \"%s\" ran past its deadline of %.3f ms (run %u of %u)",
                         k->name, (double)deadline_ns / 1e6, c + 1, count);
  }
  if (out_elapsed_ns) *out_elapsed_ns = kiln_now_ns() - start;
  return KILN_OK;
}
