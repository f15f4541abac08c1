/* Signals: 64-bit values in amd_signal_t layout (the handle is the amd_signal_t's address, as in
 * ROCr, so value, start_ts and end_ts sit where tools expect them). They live in one arena so
 * that a handle can be validated without dereferencing a stranger's pointer: in range, on a
 * slot boundary, and carrying the live magic. Waiters sleep on a futex over a change counter. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "rt.h"

#define SIGNAL_LIVE 0x5347524c49564531ull /* "SGRLIVE1" */
#define SIGNAL_DEAD 0x5347524445414431ull
#define ARENA_SLOTS (1u << 20)

_Static_assert(sizeof(rt_signal_t) <= 128, "a signal fits its arena slot");

static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *arena;
static size_t arena_used;      /* slots ever handed out */
static rt_signal_t *free_list; /* destroyed slots, reused */
static size_t live;

static void futex_wake(_Atomic uint32_t *w) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait(_Atomic uint32_t *w, uint32_t seen, uint64_t timeout_ns) {
  struct timespec ts, *tp = NULL;
  if (timeout_ns != UINT64_MAX) {
    ts.tv_sec = (time_t)(timeout_ns / 1000000000ull);
    ts.tv_nsec = (long)(timeout_ns % 1000000000ull);
    tp = &ts;
  }
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, seen, tp, NULL, 0);
}

rt_signal_t *rt_signal_from(hsa_signal_t h) {
  uint8_t *p = (uint8_t *)(uintptr_t)h.handle;
  uint8_t *base = __atomic_load_n(&arena, __ATOMIC_ACQUIRE);
  if (!base || p < base || p >= base + (size_t)ARENA_SLOTS * 128 || (size_t)(p - base) % 128 != 0) return NULL;
  rt_signal_t *s = (rt_signal_t *)(void *)p;
  if ((size_t)(p - base) / 128 >= __atomic_load_n(&arena_used, __ATOMIC_ACQUIRE)) return NULL;
  return __atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) == SIGNAL_LIVE ? s : NULL;
}

hsa_status_t rt_signal_new(int64_t initial, rt_signal_t **out) {
  pthread_mutex_lock(&arena_lock);
  if (!arena) {
    void *a = mmap(NULL, (size_t)ARENA_SLOTS * 128, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (a == MAP_FAILED) {
      pthread_mutex_unlock(&arena_lock);
      return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    __atomic_store_n(&arena, (uint8_t *)a, __ATOMIC_RELEASE);
  }
  rt_signal_t *s = free_list;
  if (s) {
    free_list = s->next;
  } else if (arena_used < ARENA_SLOTS) {
    s = (rt_signal_t *)(void *)(arena + arena_used * 128);
    __atomic_store_n(&arena_used, arena_used + 1, __ATOMIC_RELEASE);
  } else {
    pthread_mutex_unlock(&arena_lock);
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  uint32_t seq = atomic_load(&s->seq); /* keep counting across reuse: a stale waiter still wakes */
  memset(s, 0, sizeof *s);
  atomic_store(&s->seq, seq + 1);
  s->amd.kind = AMD_SIGNAL_KIND_USER;
  s->amd.value = initial;
  __atomic_store_n(&s->magic, SIGNAL_LIVE, __ATOMIC_RELEASE);
  live++;
  pthread_mutex_unlock(&arena_lock);
  *out = s;
  return HSA_STATUS_SUCCESS;
}

void rt_signal_delete(rt_signal_t *s) {
  pthread_mutex_lock(&arena_lock);
  __atomic_store_n(&s->magic, SIGNAL_DEAD, __ATOMIC_RELEASE);
  atomic_fetch_add(&s->seq, 1);
  futex_wake(&s->seq);
  s->next = free_list;
  free_list = s;
  live--;
  pthread_mutex_unlock(&arena_lock);
}

size_t rt_signal_live(void) {
  pthread_mutex_lock(&arena_lock);
  size_t n = 0;
  for (size_t i = 0; i < arena_used; i++) {
    rt_signal_t *s = (rt_signal_t *)(void *)(arena + i * 128);
    if (s->magic == SIGNAL_LIVE && !s->doorbell_of) n++;
  }
  pthread_mutex_unlock(&arena_lock);
  return n;
}

void rt_signal_release_all(void) {
  pthread_mutex_lock(&arena_lock);
  if (arena) {
    for (size_t i = 0; i < arena_used; i++) {
      rt_signal_t *s = (rt_signal_t *)(void *)(arena + i * 128);
      s->magic = SIGNAL_DEAD;
    }
    /* The arena itself stays mapped: a handle used after the last shut-down must read DEAD, not
     * fault. Slots are reused by the next init. */
    free_list = NULL;
    arena_used = 0;
  }
  live = 0;
  pthread_mutex_unlock(&arena_lock);
}

static void changed(rt_signal_t *s) {
  atomic_fetch_add_explicit(&s->seq, 1, memory_order_release);
  if (atomic_load_explicit(&s->waiters, memory_order_acquire)) futex_wake(&s->seq);
}

void rt_signal_add(rt_signal_t *s, int64_t delta) {
  __atomic_fetch_add(&s->amd.value, delta, __ATOMIC_RELEASE);
  changed(s);
}

void rt_signal_wait_change(rt_signal_t *s, uint32_t seen, uint64_t timeout_ns) {
  atomic_fetch_add(&s->waiters, 1);
  if (atomic_load(&s->seq) == seen) futex_wait(&s->seq, seen, timeout_ns);
  atomic_fetch_sub(&s->waiters, 1);
}

/* A value-returning signal operation on a handle that is not a live signal: ROCr would touch
 * freed or foreign memory; the stand-in stops the process with the operation's name. */
static rt_signal_t *must(hsa_signal_t h, const char *op) {
  rt_signal_t *s = rt_signal_from(h);
  if (!s) {
    rt_log("%s: 0x%llx is not a live signal (destroyed, never created, or from before the last "
           "hsa_shut_down); stopping", op, (unsigned long long)h.handle);
    abort();
  }
  return s;
}

/* Stores to a queue's doorbell keep the largest value (H: on a MULTI queue producers may ring in
 * any order; the packet processor must not lose a larger id to a later, smaller one). */
static void store(rt_signal_t *s, int64_t v, int order) {
  if (s->doorbell_of) {
    int64_t cur = __atomic_load_n(&s->amd.value, __ATOMIC_RELAXED);
    while ((cur < v || cur == -1) &&
           !__atomic_compare_exchange_n(&s->amd.value, &cur, v, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
    }
  } else {
    __atomic_store_n(&s->amd.value, v, order);
  }
  changed(s);
}

/* --- create / destroy ----------------------------------------------------------------------- */

RT_EXPORT hsa_status_t hsa_signal_create(hsa_signal_value_t initial_value, uint32_t num_consumers,
                                         const hsa_agent_t *consumers, hsa_signal_t *signal) {
  RT_REQUIRE_OPEN();
  if (!signal || (num_consumers > 0 && !consumers)) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < num_consumers; i++)
    if (!rt_agent_from(consumers[i])) return HSA_STATUS_ERROR_INVALID_AGENT;
  rt_signal_t *s;
  hsa_status_t st = rt_signal_new(initial_value, &s);
  if (st == HSA_STATUS_SUCCESS) signal->handle = (uint64_t)(uintptr_t)s;
  return st;
}

RT_EXPORT hsa_status_t hsa_amd_signal_create(hsa_signal_value_t initial_value, uint32_t num_consumers,
                                             const hsa_agent_t *consumers, uint64_t attributes,
                                             hsa_signal_t *signal) {
  RT_REQUIRE_OPEN();
  if (attributes & HSA_AMD_SIGNAL_IPC) {
    rt_log("hsa_amd_signal_create: IPC signals are not modelled by the stand-in");
    return HSA_STATUS_ERROR;
  }
  return hsa_signal_create(initial_value, num_consumers, consumers, signal);
}

RT_EXPORT hsa_status_t hsa_signal_destroy(hsa_signal_t signal) {
  RT_REQUIRE_OPEN();
  rt_signal_t *s = rt_signal_from(signal);
  if (!s) return HSA_STATUS_ERROR_INVALID_SIGNAL; /* H */
  if (s->doorbell_of) {
    rt_log("hsa_signal_destroy(0x%llx): that is a queue's doorbell; the runtime owns it (H: hsa_queue_t)",
           (unsigned long long)signal.handle);
    return HSA_STATUS_ERROR_INVALID_SIGNAL;
  }
  if (atomic_load(&s->inflight)) {
    /* A packet in the queue still names it: the packet processor would decrement freed
     * memory. Always refused. */
    rt_log("hsa_signal_destroy(0x%llx): an AQL packet that has not completed uses this signal "
           "(completion or dependency); destroy it after the packet completes",
           (unsigned long long)signal.handle);
    return HSA_STATUS_ERROR_RESOURCE_FREE;
  }
  rt_signal_delete(s);
  return HSA_STATUS_SUCCESS;
}

/* --- loads, stores, read-modify-writes in every memory order of H --------------------------- */

#define LOAD(name, order)                                          \
  RT_EXPORT hsa_signal_value_t name(hsa_signal_t signal) {         \
    return __atomic_load_n(&must(signal, #name)->amd.value, order); \
  }
LOAD(hsa_signal_load_scacquire, __ATOMIC_ACQUIRE)
LOAD(hsa_signal_load_acquire, __ATOMIC_ACQUIRE)
LOAD(hsa_signal_load_relaxed, __ATOMIC_RELAXED)

#define STORE(name, order)                                                 \
  RT_EXPORT void name(hsa_signal_t signal, hsa_signal_value_t value) {    \
    store(must(signal, #name), value, order);                             \
  }
STORE(hsa_signal_store_relaxed, __ATOMIC_RELAXED)
STORE(hsa_signal_store_screlease, __ATOMIC_RELEASE)
STORE(hsa_signal_store_release, __ATOMIC_RELEASE)
/* "silent" stores wake nobody (H); waiters still see the value at their next check. */
RT_EXPORT void hsa_signal_silent_store_relaxed(hsa_signal_t signal, hsa_signal_value_t value) {
  __atomic_store_n(&must(signal, "hsa_signal_silent_store_relaxed")->amd.value, value, __ATOMIC_RELAXED);
}
RT_EXPORT void hsa_signal_silent_store_screlease(hsa_signal_t signal, hsa_signal_value_t value) {
  __atomic_store_n(&must(signal, "hsa_signal_silent_store_screlease")->amd.value, value, __ATOMIC_RELEASE);
}

#define RMW(op, fn, suffix, order)                                                  \
  RT_EXPORT void hsa_signal_##op##_##suffix(hsa_signal_t signal, hsa_signal_value_t value) { \
    rt_signal_t *s = must(signal, "hsa_signal_" #op "_" #suffix);                  \
    fn(&s->amd.value, value, order);                                                \
    changed(s);                                                                     \
  }
#define RMW_ALL(op, fn)                          \
  RMW(op, fn, relaxed, __ATOMIC_RELAXED)         \
  RMW(op, fn, scacquire, __ATOMIC_ACQUIRE)       \
  RMW(op, fn, acquire, __ATOMIC_ACQUIRE)         \
  RMW(op, fn, screlease, __ATOMIC_RELEASE)       \
  RMW(op, fn, release, __ATOMIC_RELEASE)         \
  RMW(op, fn, scacq_screl, __ATOMIC_ACQ_REL)     \
  RMW(op, fn, acq_rel, __ATOMIC_ACQ_REL)
RMW_ALL(add, __atomic_fetch_add)
RMW_ALL(subtract, __atomic_fetch_sub)
RMW_ALL(and, __atomic_fetch_and)
RMW_ALL(or, __atomic_fetch_or)
RMW_ALL(xor, __atomic_fetch_xor)

#define XCHG(suffix, order)                                                                      \
  RT_EXPORT hsa_signal_value_t hsa_signal_exchange_##suffix(hsa_signal_t signal, hsa_signal_value_t value) { \
    rt_signal_t *s = must(signal, "hsa_signal_exchange_" #suffix);                              \
    hsa_signal_value_t old = __atomic_exchange_n(&s->amd.value, value, order);                   \
    changed(s);                                                                                  \
    return old;                                                                                  \
  }
#define CAS(suffix, order)                                                                       \
  RT_EXPORT hsa_signal_value_t hsa_signal_cas_##suffix(hsa_signal_t signal, hsa_signal_value_t expected, \
                                                        hsa_signal_value_t value) {             \
    rt_signal_t *s = must(signal, "hsa_signal_cas_" #suffix);                                   \
    hsa_signal_value_t old = expected;                                                           \
    if (__atomic_compare_exchange_n(&s->amd.value, &old, value, false, order, __ATOMIC_RELAXED)) \
      changed(s);                                                                                \
    return old;                                                                                  \
  }
#define BOTH(suffix, order) XCHG(suffix, order) CAS(suffix, order)
BOTH(relaxed, __ATOMIC_RELAXED)
BOTH(scacquire, __ATOMIC_ACQUIRE)
BOTH(acquire, __ATOMIC_ACQUIRE)
BOTH(screlease, __ATOMIC_RELEASE)
BOTH(release, __ATOMIC_RELEASE)
BOTH(scacq_screl, __ATOMIC_ACQ_REL)
BOTH(acq_rel, __ATOMIC_ACQ_REL)

/* --- waits ------------------------------------------------------------------------------------ */

static bool satisfied(int64_t v, hsa_signal_condition_t c, int64_t cmp) {
  switch (c) {
    case HSA_SIGNAL_CONDITION_EQ: return v == cmp;
    case HSA_SIGNAL_CONDITION_NE: return v != cmp;
    case HSA_SIGNAL_CONDITION_LT: return v < cmp;
    case HSA_SIGNAL_CONDITION_GTE: return v >= cmp;
  }
  return false;
}

/* H: returns the value observed when the condition held, or when the timeout hint (system
 * timestamp ticks) ran out; it may also return early, so callers loop. */
static hsa_signal_value_t wait(hsa_signal_t signal, hsa_signal_condition_t cond, hsa_signal_value_t cmp,
                               uint64_t timeout_hint, int order, const char *name) {
  rt_signal_t *s = must(signal, name);
  if (cond < HSA_SIGNAL_CONDITION_EQ || cond > HSA_SIGNAL_CONDITION_GTE) {
    rt_log("%s: condition %d is not an hsa_signal_condition_t; returning at once", name, (int)cond);
    return __atomic_load_n(&s->amd.value, order);
  }
  uint64_t timeout_ns = timeout_hint == UINT64_MAX ? UINT64_MAX : rt_ticks_to_ns(timeout_hint);
  uint64_t start = rt_now_ns();
  for (;;) {
    uint32_t seen = atomic_load_explicit(&s->seq, memory_order_acquire);
    int64_t v = __atomic_load_n(&s->amd.value, order);
    if (satisfied(v, cond, cmp)) return v;
    uint64_t waited = rt_now_ns() - start;
    if (timeout_ns != UINT64_MAX && waited >= timeout_ns) return v;
    /* Silent stores do not wake: re-check at least every 10 ms. */
    uint64_t slice = 10000000ull;
    if (timeout_ns != UINT64_MAX && timeout_ns - waited < slice) slice = timeout_ns - waited;
    rt_signal_wait_change(s, seen, slice);
  }
}

RT_EXPORT hsa_signal_value_t hsa_signal_wait_scacquire(hsa_signal_t signal, hsa_signal_condition_t condition,
                                                       hsa_signal_value_t compare_value, uint64_t timeout_hint,
                                                       hsa_wait_state_t wait_state_hint) {
  return wait(signal, condition, compare_value, timeout_hint, __ATOMIC_ACQUIRE, "hsa_signal_wait_scacquire");
}
RT_EXPORT hsa_signal_value_t hsa_signal_wait_acquire(hsa_signal_t signal, hsa_signal_condition_t condition,
                                                     hsa_signal_value_t compare_value, uint64_t timeout_hint,
                                                     hsa_wait_state_t wait_state_hint) {
  return wait(signal, condition, compare_value, timeout_hint, __ATOMIC_ACQUIRE, "hsa_signal_wait_acquire");
}
RT_EXPORT hsa_signal_value_t hsa_signal_wait_relaxed(hsa_signal_t signal, hsa_signal_condition_t condition,
                                                     hsa_signal_value_t compare_value, uint64_t timeout_hint,
                                                     hsa_wait_state_t wait_state_hint) {
  return wait(signal, condition, compare_value, timeout_hint, __ATOMIC_RELAXED, "hsa_signal_wait_relaxed");
}

/* hsa_ext_amd.h: index of a satisfied signal, or UINT32_MAX when the timeout ran out. Polls with
 * a backoff capped at 1 ms (the signals have no shared futex). */
RT_EXPORT uint32_t hsa_amd_signal_wait_any(uint32_t signal_count, hsa_signal_t *signals,
                                           hsa_signal_condition_t *conds, hsa_signal_value_t *values,
                                           uint64_t timeout_hint, hsa_wait_state_t wait_hint,
                                           hsa_signal_value_t *satisfying_value) {
  if (!signal_count || !signals || !conds || !values) {
    rt_log("hsa_amd_signal_wait_any: no signals");
    return UINT32_MAX;
  }
  uint64_t timeout_ns = timeout_hint == UINT64_MAX ? UINT64_MAX : rt_ticks_to_ns(timeout_hint);
  uint64_t start = rt_now_ns(), nap = 1000;
  for (;;) {
    for (uint32_t i = 0; i < signal_count; i++) {
      int64_t v = __atomic_load_n(&must(signals[i], "hsa_amd_signal_wait_any")->amd.value, __ATOMIC_ACQUIRE);
      if (satisfied(v, conds[i], values[i])) {
        if (satisfying_value) *satisfying_value = v;
        return i;
      }
    }
    if (timeout_ns != UINT64_MAX && rt_now_ns() - start >= timeout_ns) return UINT32_MAX;
    struct timespec ts = {0, (long)nap};
    nanosleep(&ts, NULL);
    if (nap < 1000000) nap *= 2;
  }
}
