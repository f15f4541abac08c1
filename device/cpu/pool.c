#include "device/cpu/pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* How long an idle helper polls for the next job before it sleeps on the condition
 * variable: long enough to cover the gap between back-to-back launches of the worker's
 * loop (a futex wake costs tens of microseconds), short enough not to burn a core. */
#define SPIN_ITERATIONS 20000

#define CLOSED (1ull << 31)
#define ENTERED_MASK (CLOSED - 1)

typedef struct helper {
  kiln_cpu_pool_t *pool;
  unsigned index;
  pthread_t thread;
} helper_t;

struct kiln_cpu_pool {
  unsigned size; /* threads including the caller */
  helper_t *helpers; /* size - 1 */
  unsigned started;

  kiln_cpu_pool_job_cb job;
  void *ctx;
  _Atomic unsigned long generation; /* bumped once per job; helpers run when it changes */
  /* The current job's entry: its generation (low 32 bits) << 32, CLOSED, and the number of
   * helpers that entered it. A helper runs the job only if it enters while it is open. */
  _Atomic uint64_t entry;
  _Atomic unsigned finished; /* helpers that entered the current job and returned from it */
  _Atomic int sleepers;
  _Atomic bool stop;
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static unsigned long wait_for_job(kiln_cpu_pool_t *p, unsigned long seen) {
  for (int i = 0; i < SPIN_ITERATIONS; i++) {
    unsigned long g = atomic_load_explicit(&p->generation, memory_order_acquire);
    if (g != seen || atomic_load(&p->stop)) return g;
    cpu_relax();
  }
  pthread_mutex_lock(&p->mu);
  /* sleepers is raised before generation is read again; kiln_cpu_pool_run bumps generation
   * before it reads sleepers (both seq_cst), so either it sees us and broadcasts under the
   * mutex, or we see its new generation here and never wait. */
  atomic_fetch_add(&p->sleepers, 1);
  unsigned long g;
  while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
    pthread_cond_wait(&p->cv, &p->mu);
  atomic_fetch_sub(&p->sleepers, 1);
  pthread_mutex_unlock(&p->mu);
  return g;
}

/* Enters job `g` if it is still the current job and open: the caller then waits for this
 * helper before it returns. A helper that comes later (descheduled, or asleep) skips it. */
static bool enter(kiln_cpu_pool_t *p, unsigned long g) {
  uint64_t e = atomic_load(&p->entry);
  for (;;) {
    if (e >> 32 != (uint32_t)g || (e & CLOSED)) return false;
    if (atomic_compare_exchange_weak(&p->entry, &e, e + 1)) return true;
  }
}

static void *helper_main(void *arg) {
  helper_t *h = arg;
  kiln_cpu_pool_t *p = h->pool;
  unsigned long seen = 0;
  for (;;) {
    seen = wait_for_job(p, seen);
    if (atomic_load(&p->stop)) break;
    if (!enter(p, seen)) continue;
    p->job(p->ctx, h->index);
    atomic_fetch_add_explicit(&p->finished, 1, memory_order_release);
  }
  return NULL;
}

static kiln_status_t pin(pthread_t t, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (cpu < 0 || cpu >= CPU_SETSIZE)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "cpu %d does not exist", cpu);
  CPU_SET(cpu, &set);
  int rc = pthread_setaffinity_np(t, sizeof set, &set);
  if (rc)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "cannot pin a thread to cpu %d: %s", cpu,
                       strerror(rc));
  return KILN_OK;
}

/* The cores this process may run on, when the caller names none. */
static kiln_status_t allowed_cpus(int **out_cpus, size_t *out_n) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return KILN_STATUS(KILN_E_INTERNAL, "sched_getaffinity: %s", strerror(errno));
  int *cpus = malloc(sizeof(int) * (size_t)CPU_COUNT(&set));
  if (!cpus) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  size_t n = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) cpus[n++] = c;
  *out_cpus = cpus;
  *out_n = n;
  return KILN_OK;
}

kiln_status_t kiln_cpu_pool_create(const int *cpus, size_t ncpus, kiln_cpu_pool_t **out_pool) {
  int *owned = NULL;
  if (!cpus || ncpus == 0) {
    KILN_RETURN_IF_ERROR(allowed_cpus(&owned, &ncpus));
    cpus = owned;
  }
  kiln_cpu_pool_t *p = calloc(1, sizeof *p);
  if (!p) {
    free(owned);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for a thread pool");
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  kiln_status_t s = KILN_OK;
  if (!(p->helpers = calloc(ncpus, sizeof *p->helpers))) {
    s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for a pool of %zu threads", ncpus);
    goto fail;
  }
  p->size = (unsigned)ncpus;
  if ((s = pin(pthread_self(), cpus[0]))) goto fail;
  for (unsigned i = 1; i < p->size; i++) {
    helper_t *h = &p->helpers[i - 1];
    h->pool = p;
    h->index = i;
    int rc = pthread_create(&h->thread, NULL, helper_main, h);
    if (rc) {
      s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "pthread_create: %s", strerror(rc));
      goto fail;
    }
    p->started++;
    if ((s = pin(h->thread, cpus[i]))) goto fail;
  }
  free(owned);
  *out_pool = p;
  return KILN_OK;
fail:
  free(owned);
  kiln_cpu_pool_destroy(p);
  return s;
}

void kiln_cpu_pool_destroy(kiln_cpu_pool_t *p) {
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, true);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (unsigned i = 0; i < p->started; i++) pthread_join(p->helpers[i].thread, NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p->helpers);
  free(p);
}

unsigned kiln_cpu_pool_size(const kiln_cpu_pool_t *p) { return p->size; }

void kiln_cpu_pool_run(kiln_cpu_pool_t *p, kiln_cpu_pool_job_cb job, void *ctx) {
  p->job = job;
  p->ctx = ctx;
  atomic_store(&p->finished, 0);
  unsigned long g = atomic_load_explicit(&p->generation, memory_order_relaxed) + 1;
  atomic_store(&p->entry, (uint64_t)(uint32_t)g << 32); /* open, nobody in */
  atomic_store(&p->generation, g); /* seq_cst: publishes job/ctx and pairs with sleepers */
  if (atomic_load(&p->sleepers) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
  }
  job(ctx, 0);
  /* Wait only for the helpers already in the job: one still waking up (a futex wake costs
   * tens of microseconds) or without a core (the machine's other load) is shut out rather
   * than waited for; the job leaves nothing undone to thread 0. */
  unsigned entered = (unsigned)(atomic_fetch_or(&p->entry, CLOSED) & ENTERED_MASK);
  /* A helper descheduled by another process would make a pure spin burn our time slice. */
  for (unsigned long i = 0; atomic_load_explicit(&p->finished, memory_order_acquire) != entered; i++) {
    if (i < SPIN_ITERATIONS)
      cpu_relax();
    else
      sched_yield();
  }
}
