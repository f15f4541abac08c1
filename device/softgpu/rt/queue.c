/* User-mode AQL queues and the packet processor (the "command processor") behind each.
 *
 * A queue is an amd_queue_t (hsa_queue_t first, R amd_hsa_queue.h) and a ring of 64-byte
 * packets, both in runtime memory the GPU may read (kernels see them through DISPATCH_PTR and
 * QUEUE_PTR). One thread per queue processes packets in order from the read index, only those
 * whose id the doorbell has announced (H: the doorbell carries the id of a packet that is ready).
 * Work runs one packet at a time, so the BARRIER bit (wait for earlier packets) always holds.
 *
 * Errors follow ROCr: a malformed packet or a failing kernel ends the queue (it processes nothing
 * more) and calls the queue's error callback with the status ROCr would give (R amd_aql_queue.cpp
 * ExceptionHandler's table); a memory fault goes to the system event handlers instead (R suppresses
 * the queue callback for it) and the completion signal never drops, as after KFD's eviction. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "rt.h"

#define SCRATCH_VA_BYTES (4ull << 30)
#define PEEK_WINDOW_NS (2000000000ull) /* keep looking at the next slot this long after activity */

typedef struct rt_queue {
  amd_queue_t *amd;
  uint8_t *ring;
  uint32_t size;
  rt_signal_t *doorbell;
  void (*callback)(hsa_status_t status, hsa_queue_t *source, void *data);
  void *cb_data;
  pthread_t thread;
  _Atomic bool stop;
  _Atomic bool dead;
  _Atomic bool in_callback;
  _Atomic bool profiling;
  void *scratch;
  /* header-before-body: a copy of the slot's body taken the first time its header was seen
   * valid, compared when the packet is consumed */
  uint64_t peek_index;
  bool peek_valid;
  uint8_t peek[64];
  uint64_t last_activity_ns;
  struct rt_queue *next;
} rt_queue_t;

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_queue_t *queues;
static uint64_t next_queue_id;

static rt_queue_t *queue_from(const hsa_queue_t *h) {
  pthread_mutex_lock(&q_lock);
  rt_queue_t *q = queues;
  while (q && &q->amd->hsa_queue != h) q = q->next;
  pthread_mutex_unlock(&q_lock);
  return q;
}

static uint16_t header_type(uint16_t h) { return h & 0xff; }

/* Ends the queue with `status` and calls its error callback (on this, the processor's, thread;
 * ROCr calls it from its async-events thread: either way not the client's). */
static void queue_error(rt_queue_t *q, hsa_status_t status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void queue_error(rt_queue_t *q, hsa_status_t status, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *name = "";
  hsa_status_string(status, &name);
  rt_log("queue %llu: %s; the queue stops (%.*s)", (unsigned long long)q->amd->hsa_queue.id, msg,
         (int)strcspn(name, ":"), name);
  atomic_store(&q->dead, true);
  if (q->callback) {
    atomic_store(&q->in_callback, true);
    q->callback(status, &q->amd->hsa_queue, q->cb_data);
    atomic_store(&q->in_callback, false);
  }
}

static uint8_t *slot(rt_queue_t *q, uint64_t index) { return q->ring + (index & (q->size - 1)) * 64; }

static void nap(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  nanosleep(&ts, NULL);
}

/* Waits until every dependency of a barrier packet is met (AND: all nonzero handles at 0;
 * OR: any nonzero handle at 0, H hsa_barrier_or_packet_t). False when the queue is stopping. */
static bool wait_barrier(rt_queue_t *q, rt_signal_t *const deps[5], bool is_or) {
  uint64_t pause = 1000;
  for (;;) {
    bool any = false, all = true;
    for (int i = 0; i < 5; i++) {
      if (!deps[i]) continue;
      bool zero = __atomic_load_n(&deps[i]->amd.value, __ATOMIC_ACQUIRE) == 0;
      any |= zero;
      all &= zero;
    }
    if (is_or ? any : all) return true;
    if (atomic_load(&q->stop)) return false;
    nap(pause);
    if (pause < 1000000) pause *= 2;
  }
}

/* Header fields other than the type that every packet must get right (H hsa_packet_header_t). */
static bool check_header(rt_queue_t *q, uint16_t h) {
  uint32_t acq = (h >> HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) & 3, rel = (h >> HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 3;
  if (acq > HSA_FENCE_SCOPE_SYSTEM || rel > HSA_FENCE_SCOPE_SYSTEM || (h >> 13) != 0) {
    queue_error(q, HSA_STATUS_ERROR_INVALID_PACKET_FORMAT,
                "packet header 0x%04x: a fence scope of 3 or reserved bits 13-15 set (H hsa_packet_header_t)", h);
    return false;
  }
  return true;
}

static void finish(rt_queue_t *q, uint64_t index, rt_signal_t *completion, uint64_t start, bool profiled) {
  uint64_t end = rt_ticks();
  /* H: the slot is free again once the packet processor has consumed it: INVALID header first
   * (release), then the read index. */
  __atomic_store_n((uint16_t *)slot(q, index), (uint16_t)HSA_PACKET_TYPE_INVALID, __ATOMIC_RELEASE);
  __atomic_store_n(&q->amd->read_dispatch_id, index + 1, __ATOMIC_RELEASE);
  if (completion) {
    completion->amd.start_ts = profiled ? start : 0; /* R: no timestamps without profiling */
    completion->amd.end_ts = profiled ? end : 0;
    completion->dispatch_done = true;
    int64_t before = __atomic_load_n(&completion->amd.value, __ATOMIC_RELAXED);
    if (before <= 0)
      rt_log("queue %llu packet %llu: its completion signal was %lld before the decrement (reused without being "
             "reset?)", (unsigned long long)q->amd->hsa_queue.id, (unsigned long long)index, (long long)before);
    /* no longer in flight before the client can see completion and destroy it */
    atomic_fetch_sub(&completion->inflight, 1);
    /* H: the packet processor decrements the completion signal by 1 (release) */
    rt_signal_add(completion, -1);
  }
}

/* Resolves a signal handle from a packet; 0 stays NULL. False (after the error) if invalid. */
static bool packet_signal(rt_queue_t *q, uint64_t handle, const char *what, uint64_t index, rt_signal_t **out) {
  *out = NULL;
  if (!handle) return true;
  rt_signal_t *s = rt_signal_from((hsa_signal_t){handle});
  if (!s) {
    queue_error(q, HSA_STATUS_ERROR_INVALID_PACKET_FORMAT,
                "packet %llu: %s 0x%llx is not a live signal", (unsigned long long)index, what, (unsigned long long)handle);
    return false;
  }
  *out = s;
  return true;
}

static void run_barrier(rt_queue_t *q, uint64_t index, const uint8_t *p) {
  hsa_barrier_and_packet_t b;
  memcpy(&b, p, sizeof b);
  if (b.reserved0 || b.reserved1 || b.reserved2) {
    queue_error(q, HSA_STATUS_ERROR_INVALID_PACKET_FORMAT,
                "barrier packet %llu: reserved fields must be 0 (H hsa_barrier_and_packet_t)", (unsigned long long)index);
    return;
  }
  rt_signal_t *deps[5], *completion;
  for (int i = 0; i < 5; i++)
    if (!packet_signal(q, b.dep_signal[i].handle, "dep_signal", index, &deps[i])) return;
  if (!packet_signal(q, b.completion_signal.handle, "completion_signal", index, &completion)) return;
  for (int i = 0; i < 5; i++)
    if (deps[i]) atomic_fetch_add(&deps[i]->inflight, 1);
  if (completion) atomic_fetch_add(&completion->inflight, 1);
  uint64_t start = rt_ticks();
  bool ok = wait_barrier(q, deps, header_type(b.header) == HSA_PACKET_TYPE_BARRIER_OR);
  for (int i = 0; i < 5; i++)
    if (deps[i]) atomic_fetch_sub(&deps[i]->inflight, 1);
  if (!ok) {
    if (completion) atomic_fetch_sub(&completion->inflight, 1);
    return;
  }
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  finish(q, index, completion, start, atomic_load(&q->profiling));
}

/* The allocations a dispatch names: the kernarg buffer and every allocation an aligned 64-bit
 * kernarg value points into (pointer arguments). They may not be freed until it completes. */
static size_t named_allocations(uint64_t kernarg, const uint8_t *ka, uint32_t size, uint64_t *out, size_t cap) {
  size_t n = 0;
  out[n++] = kernarg;
  for (uint32_t off = 0; off + 8 <= size && n < cap; off += 8) {
    uint64_t v;
    memcpy(&v, ka + off, 8);
    rt_alloc_t a;
    if (v && rt_mem_find(v, 1, &a) && (a.kind == ALLOC_VRAM || a.kind == ALLOC_SYSTEM)) out[n++] = v;
  }
  return n;
}

static void report_stop(rt_queue_t *q, uint64_t index, const sg_report_t *r) {
  switch (r->status) {
    case SG_FAULT_MEMORY:
      rt_log("queue %llu packet %llu: GPU memory fault at 0x%llx: %s", (unsigned long long)q->amd->hsa_queue.id,
             (unsigned long long)index, (unsigned long long)r->address, r->message);
      atomic_store(&q->dead, true); /* KFD evicts the queue; the completion signal never drops */
      rt_event_memory_fault(r->address, r->fault_reason ? r->fault_reason : SG_FAULT_PAGE_NOT_PRESENT);
      break;
    case SG_FAULT_APERTURE:
      queue_error(q, (hsa_status_t)HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION, "packet %llu: %s",
                  (unsigned long long)index, r->message);
      break;
    case SG_ERR_LDS_RANGE:
      /* hardware drops such accesses silently; here they mean the packet's group_segment_size
       * (static + dynamic LDS) is too small */
      queue_error(q, HSA_STATUS_ERROR_INVALID_ALLOCATION, "packet %llu: %s", (unsigned long long)index, r->message);
      break;
    case SG_ERR_UNIMPLEMENTED:
    case SG_ERR_ILLEGAL:
      queue_error(q, (hsa_status_t)HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION, "packet %llu: %s", (unsigned long long)index,
                  r->message);
      break;
    default:
      queue_error(q, HSA_STATUS_ERROR_EXCEPTION, "packet %llu: %s", (unsigned long long)index, r->message);
      break;
  }
}

static void warn_cb(void *ctx, const sg_report_t *r) {
  rt_queue_t *q = ctx;
  rt_log("queue %llu: %s", (unsigned long long)q->amd->hsa_queue.id, r->message);
}

/* Checks and runs one kernel dispatch packet (`p` is the processor's copy of the slot). */
static void run_dispatch(rt_queue_t *q, uint64_t index, const uint8_t *p) {
  hsa_kernel_dispatch_packet_t d;
  memcpy(&d, p, sizeof d);
  unsigned long long id = index;
  uint32_t dims = d.setup & 3;
  /* H hsa_kernel_dispatch_packet_t: reserved fields 0; dimensions 1..3; sizes > 0; in an unused
   * dimension both sizes are 1; the grid is not smaller than the work-group. */
  if (d.reserved0 || d.reserved2 || (d.setup >> 2) != 0) {
    queue_error(q, HSA_STATUS_ERROR_INVALID_PACKET_FORMAT,
                "dispatch packet %llu: reserved fields or setup bits 2-15 are nonzero (H)", id);
    return;
  }
  if (dims < 1 || dims > 3) {
    queue_error(q, HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS, "dispatch packet %llu: setup dimensions %u (H: 1 to 3)", id,
                dims);
    return;
  }
  const uint16_t wg[3] = {d.workgroup_size_x, d.workgroup_size_y, d.workgroup_size_z};
  const uint32_t grid[3] = {d.grid_size_x, d.grid_size_y, d.grid_size_z};
  uint32_t items = 1;
  for (uint32_t i = 0; i < 3; i++) {
    if (!wg[i] || !grid[i] || wg[i] > 1024 || (i >= dims && (wg[i] != 1 || grid[i] != 1))) {
      queue_error(q, HSA_STATUS_ERROR_INVALID_ARGUMENT,
                  "dispatch packet %llu: work-group %ux%ux%u / grid %ux%ux%u in %u dimension(s): sizes must be "
                  "1..1024 and 1 in unused dimensions (H)", id, wg[0], wg[1], wg[2], grid[0], grid[1], grid[2], dims);
      return;
    }
    items *= wg[i];
    if (grid[i] < wg[i] &&
        rt_strict("dispatch packet %llu: grid size %u is smaller than work-group size %u in dimension %u "
                  "(H hsa_kernel_dispatch_packet_t: must not be smaller)", id, grid[i], wg[i], i)) {
      queue_error(q, HSA_STATUS_ERROR_INVALID_ARGUMENT, "dispatch packet %llu: grid smaller than work-group", id);
      return;
    }
  }
  if (items > 1024) {
    queue_error(q, HSA_STATUS_ERROR_INVALID_ARGUMENT, "dispatch packet %llu: %u work-items per group (max 1024)", id,
                items);
    return;
  }
  rt_signal_t *completion;
  if (!packet_signal(q, d.completion_signal.handle, "completion_signal", index, &completion)) return;
  char why[512];
  rt_kernel_info_t k;
  if (!rt_exec_pin_kernel(d.kernel_object, &k, why, sizeof why)) {
    /* R: EC_QUEUE_PACKET_DISPATCH_CODE_INVALID -> INVALID_CODE_OBJECT */
    queue_error(q, HSA_STATUS_ERROR_INVALID_CODE_OBJECT, "dispatch packet %llu: %s", id, why);
    return;
  }
  /* H: group_segment_size covers the kernel's static LDS plus the dynamic part; R:
   * EC_QUEUE_PACKET_DISPATCH_GROUP_SEGMENT_SIZE_INVALID -> INVALID_ALLOCATION. */
  if (d.group_segment_size < k.group_size || d.group_segment_size > 64 * 1024) {
    rt_exec_unpin_kernel(k.kd_va);
    queue_error(q, HSA_STATUS_ERROR_INVALID_ALLOCATION,
                "dispatch packet %llu: group_segment_size %u, the kernel needs at least %u and the GPU has 65536", id,
                d.group_segment_size, k.group_size);
    return;
  }
  if (d.private_segment_size < k.private_size) {
    rt_exec_unpin_kernel(k.kd_va);
    queue_error(q, HSA_STATUS_ERROR_INVALID_ALLOCATION,
                "dispatch packet %llu: private_segment_size %u is below the kernel's %u bytes per work-item (H)", id,
                d.private_segment_size, k.private_size);
    return;
  }
  uint64_t ka = (uint64_t)(uintptr_t)d.kernarg_address;
  rt_alloc_t kalloc = {0};
  const uint8_t *kbytes = NULL;
  if (k.kernarg_size) {
    /* AU / R: the kernarg segment is 16-byte aligned (KERNARG_SEGMENT_ALIGNMENT) */
    if (ka % 16) {
      rt_exec_unpin_kernel(k.kd_va);
      queue_error(q, HSA_STATUS_ERROR_INVALID_ARGUMENT,
                  "dispatch packet %llu: kernarg_address 0x%llx is not 16-byte aligned (R: kernarg segment "
                  "alignment 16)", id, (unsigned long long)ka);
      return;
    }
    /* H: "the buffer must be allocated using hsa_memory_allocate" (runtime memory) and hold the
     * kernel's kernarg_size bytes */
    if (!ka || !rt_mem_find(ka, k.kernarg_size, &kalloc) ||
        (kalloc.kind != ALLOC_SYSTEM && kalloc.kind != ALLOC_VRAM)) {
      rt_exec_unpin_kernel(k.kd_va);
      queue_error(q, HSA_STATUS_ERROR_INVALID_ARGUMENT,
                  "dispatch packet %llu: kernarg_address 0x%llx does not hold the kernel's %u kernarg bytes in one "
                  "runtime allocation (H: allocate it from the kernarg pool)", id, (unsigned long long)ka,
                  k.kernarg_size);
      return;
    }
    if (!(kalloc.gpu_access & SG_ACC_READ)) {
      /* What hardware does: the kernel's first s_load of its arguments faults. The stand-in
       * says why before raising the same fault. */
      rt_exec_unpin_kernel(k.kd_va);
      rt_log("strict: dispatch packet %llu: kernarg buffer 0x%llx is system memory the GPU may not access: call "
             "hsa_amd_agents_allow_access for it (R: pool allocations are AllocateRestrict)", id,
             (unsigned long long)ka);
      atomic_store(&q->dead, true);
      rt_event_memory_fault(ka, SG_FAULT_PAGE_NOT_PRESENT);
      return;
    }
    kbytes = kalloc.host + (ka - kalloc.va);
  }
  if (completion) atomic_fetch_add(&completion->inflight, 1);
  uint64_t named[64];
  size_t nnamed = kbytes ? named_allocations(ka, kbytes, k.kernarg_size, named, 64) : 0;
  rt_mem_mark_busy(named, nnamed, index, +1);
  uint64_t khash = kbytes ? rt_hash(kbytes, k.kernarg_size) : 0;

  bool profiled = atomic_load(&q->profiling);
  __atomic_thread_fence(__ATOMIC_SEQ_CST); /* acquire fence at dispatch start */
  uint64_t start = rt_ticks();
  sg_dispatch_t sd = {
      .target = rt.cfg.target,
      .code = k.code,
      .kernel_object = d.kernel_object,
      .packet_va = (uint64_t)(uintptr_t)slot(q, index),
      .queue_va = (uint64_t)(uintptr_t)q->amd,
      .dispatch_id = index,
      .workgroup_size = {wg[0], wg[1], wg[2]},
      .grid_size = {grid[0], grid[1], grid[2]},
      .group_segment_size = d.group_segment_size,
      .private_segment_size = d.private_segment_size,
      .kernarg_address = ka,
      .shared_aperture_base = (uint64_t)q->amd->group_segment_aperture_base_hi << 32,
      .private_aperture_base = (uint64_t)q->amd->private_segment_aperture_base_hi << 32,
      .scratch_va = (uint64_t)(uintptr_t)q->scratch,
      .scratch_va_size = SCRATCH_VA_BYTES,
  };
  memcpy(sd.scratch_srd, q->amd->scratch_resource_descriptor, sizeof sd.scratch_srd);
  sg_memory_t mem = {rt_mem_lookup_cb, NULL};
  sg_report_t rep;
  memset(&rep, 0, sizeof rep);
  sg_status_t st = sg_dispatch_run(&sd, &mem, warn_cb, q, &rep);
  __atomic_thread_fence(__ATOMIC_SEQ_CST); /* release fence at dispatch end */

  bool kernarg_changed = kbytes && rt_hash(kbytes, k.kernarg_size) != khash;
  bool body_changed = memcmp(slot(q, index) + 2, p + 2, 62) != 0;
  rt_mem_mark_busy(named, nnamed, index, -1);
  rt_exec_unpin_kernel(k.kd_va);
  if (st != SG_OK) {
    if (completion) atomic_fetch_sub(&completion->inflight, 1);
    report_stop(q, index, &rep);
    return;
  }
  /* H: the kernarg buffer "must not be modified once the kernel dispatch packet is enqueued
   * until the dispatch has completed execution" */
  if (kernarg_changed && rt_strict("dispatch packet %llu: the kernarg buffer 0x%llx changed while the dispatch was "
                                   "in flight (H: it must not be modified until the dispatch completes)", id,
                                   (unsigned long long)ka)) {
    if (completion) atomic_fetch_sub(&completion->inflight, 1);
    queue_error(q, HSA_STATUS_ERROR_INVALID_ARGUMENT, "dispatch packet %llu: kernarg changed in flight", id);
    return;
  }
  /* The slot belongs to the packet processor until the read index passes it (H). */
  if (body_changed && rt_strict("dispatch packet %llu: the packet's slot changed while it was being processed (the "
                                "body written after the header, or the slot reused before the read index passed it)",
                                id)) {
    if (completion) atomic_fetch_sub(&completion->inflight, 1);
    queue_error(q, HSA_STATUS_ERROR_INVALID_PACKET_FORMAT, "dispatch packet %llu: slot changed in flight", id);
    return;
  }
  finish(q, index, completion, start, profiled);
}

/* Takes the slot's body the first time its header is seen valid, before the doorbell announces
 * it, so that a body written after the header is caught when the packet is consumed. */
static void peek(rt_queue_t *q, uint64_t index) {
  if (q->peek_valid && q->peek_index == index) return;
  uint16_t h = __atomic_load_n((uint16_t *)slot(q, index), __ATOMIC_ACQUIRE);
  if (header_type(h) == HSA_PACKET_TYPE_INVALID) return;
  memcpy(q->peek, slot(q, index), 64);
  q->peek_index = index;
  q->peek_valid = true;
}

static void *processor_main(void *arg) {
  rt_queue_t *q = arg;
  uint64_t warned_index = UINT64_MAX, invalid_index = UINT64_MAX, invalid_since = 0;
  q->last_activity_ns = rt_now_ns();
  while (!atomic_load(&q->stop)) {
    uint32_t seen = atomic_load(&q->doorbell->seq);
    if (atomic_load(&q->dead)) {
      rt_signal_wait_change(q->doorbell, seen, UINT64_MAX);
      continue;
    }
    uint64_t r = __atomic_load_n(&q->amd->read_dispatch_id, __ATOMIC_ACQUIRE);
    int64_t bell = __atomic_load_n(&q->doorbell->amd.value, __ATOMIC_ACQUIRE);
    if (bell < 0 || (uint64_t)bell < r) {
      /* idle: nothing announced beyond the read index */
      uint64_t now = rt_now_ns();
      bool looking = now - q->last_activity_ns < PEEK_WINDOW_NS;
      if (looking) peek(q, r);
      rt_signal_wait_change(q->doorbell, seen, looking ? 1000000ull : UINT64_MAX);
      continue;
    }
    uint8_t *s = slot(q, r);
    uint16_t h = __atomic_load_n((uint16_t *)s, __ATOMIC_ACQUIRE);
    if (header_type(h) == HSA_PACKET_TYPE_INVALID) {
      /* H: the header must be published (release) before the doorbell is rung */
      uint64_t now = rt_now_ns();
      if (invalid_index != r) invalid_index = r, invalid_since = now;
      if (warned_index != r && now - invalid_since > (uint64_t)rt.cfg.doorbell_grace_ms * 1000000ull) {
        rt_log("strict: queue %llu: the doorbell announced packet %llu (doorbell %lld) but its header is still INVALID "
               "after %u ms: write the header (release store) before ringing the doorbell",
               (unsigned long long)q->amd->hsa_queue.id, (unsigned long long)r, (long long)bell,
               rt.cfg.doorbell_grace_ms);
        warned_index = r;
      }
      rt_signal_wait_change(q->doorbell, seen, 200000ull);
      continue;
    }
    invalid_index = UINT64_MAX;
    uint8_t p[64];
    memcpy(p, s, 64);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    memcpy(p + 2, s + 2, 62); /* the body, read after the acquire load of the header */
    bool early = q->peek_valid && q->peek_index == r && memcmp(q->peek + 2, p + 2, 62) != 0;
    q->peek_valid = false;
    if (early && rt_strict("queue %llu packet %llu: the packet's body changed after its header was already valid "
                           "(H: write the body first, then publish the header with a release store)",
                           (unsigned long long)q->amd->hsa_queue.id, (unsigned long long)r)) {
      queue_error(q, HSA_STATUS_ERROR_INVALID_PACKET_FORMAT, "packet %llu: header published before the body",
                  (unsigned long long)r);
      continue;
    }
    if (!check_header(q, h)) continue;
    switch (header_type(h)) {
      case HSA_PACKET_TYPE_KERNEL_DISPATCH: run_dispatch(q, r, p); break;
      case HSA_PACKET_TYPE_BARRIER_AND:
      case HSA_PACKET_TYPE_BARRIER_OR: run_barrier(q, r, p); break;
      default:
        /* R: EC_QUEUE_PACKET_UNSUPPORTED / VENDOR_UNSUPPORTED -> INVALID_PACKET_FORMAT */
        queue_error(q, HSA_STATUS_ERROR_INVALID_PACKET_FORMAT,
                    "packet %llu: type %u is not one a GPU kernel agent's queue processes", (unsigned long long)r,
                    header_type(h));
        break;
    }
    q->last_activity_ns = rt_now_ns();
  }
  return NULL;
}

/* --- create / destroy ---------------------------------------------------------------------------- */

/* R amd_aql_queue.cpp InitScratchSRD, gfx9: the scratch buffer resource (V#) that gfx90a
 * kernels use through their private-segment-buffer user SGPRs. */
static void scratch_srd(uint32_t srd[4], uint64_t base, uint64_t size) {
  srd[0] = (uint32_t)base;
  srd[1] = (uint32_t)(base >> 32) & 0xffff; /* BASE_ADDRESS_HI; STRIDE 0 */
  srd[1] |= 1u << 31;                        /* SWIZZLE_ENABLE */
  srd[2] = size > UINT32_MAX ? UINT32_MAX : (uint32_t)size; /* NUM_RECORDS */
  srd[3] = 4u | 5u << 3 | 6u << 6 | 7u << 9 /* DST_SEL_X..W = X, Y, Z, W */
           | 4u << 12                        /* NUM_FORMAT UINT */
           | 4u << 15                        /* DATA_FORMAT 32 */
           | 1u << 19                        /* ELEMENT_SIZE 4 bytes */
           | 3u << 21                        /* INDEX_STRIDE 64 */
           | 1u << 23;                       /* ADD_TID_ENABLE; ATC 0 (base profile); TYPE buffer */
}

static void queue_free(rt_queue_t *q) {
  if (q->doorbell) rt_signal_delete(q->doorbell);
  if (q->scratch) munmap(q->scratch, SCRATCH_VA_BYTES);
  if (q->ring) rt_mem_free(q->ring, NULL);
  if (q->amd) rt_mem_free(q->amd, NULL);
  free(q);
}

RT_EXPORT hsa_status_t hsa_queue_create(hsa_agent_t agent, uint32_t size, hsa_queue_type32_t type,
                                        void (*callback)(hsa_status_t status, hsa_queue_t *source, void *data),
                                        void *data, uint32_t private_segment_size, uint32_t group_segment_size,
                                        hsa_queue_t **queue) {
  RT_REQUIRE_OPEN();
  rt_agent_t *a = rt_agent_from(agent);
  if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!queue || (type != HSA_QUEUE_TYPE_MULTI && type != HSA_QUEUE_TYPE_SINGLE))
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (a != &rt_gpu_agent) return HSA_STATUS_ERROR_INVALID_QUEUE_CREATION; /* H: no queues on the CPU agent */
  /* H: size a power of two, not 0; R amd_gpu_agent.cpp QueueCreate: at least 0x40 packets
   * (INVALID_ARGUMENT), at most 0x20000 (OUT_OF_RESOURCES). */
  if (size == 0 || (size & (size - 1)) != 0) {
    rt_log("hsa_queue_create: size %u is not a power of two (H)", size);
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  if (size < 0x40) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (size > 0x20000) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  /* UINT32_MAX means "the runtime's default" (H); other hints must fit the hardware */
  if (group_segment_size != UINT32_MAX && group_segment_size > 64 * 1024) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (private_segment_size != UINT32_MAX && private_segment_size > 262128) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;

  rt_queue_t *q = calloc(1, sizeof *q);
  if (!q) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  void *amdp, *ring;
  hsa_status_t s = rt_mem_alloc(POOL_CPU_FINE, sizeof(amd_queue_t), ALLOC_RUNTIME, &amdp, NULL);
  if (s == HSA_STATUS_SUCCESS) q->amd = amdp;
  if (s == HSA_STATUS_SUCCESS) s = rt_mem_alloc(POOL_CPU_FINE, (size_t)size * 64, ALLOC_RUNTIME, &ring, NULL);
  if (s == HSA_STATUS_SUCCESS) q->ring = ring;
  if (s == HSA_STATUS_SUCCESS) s = rt_signal_new(-1, &q->doorbell);
  if (s == HSA_STATUS_SUCCESS) {
    q->scratch = mmap(NULL, SCRATCH_VA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (q->scratch == MAP_FAILED) {
      q->scratch = NULL;
      s = HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
  }
  if (s != HSA_STATUS_SUCCESS) {
    queue_free(q);
    return s;
  }
  q->doorbell->doorbell_of = q;
  q->doorbell->amd.kind = AMD_SIGNAL_KIND_DOORBELL;
  q->size = size;
  q->callback = callback;
  q->cb_data = data;
  /* H: every slot starts INVALID */
  for (uint32_t i = 0; i < size; i++) *(uint16_t *)(void *)(q->ring + (size_t)i * 64) = HSA_PACKET_TYPE_INVALID;
  amd_queue_t *aq = q->amd; /* zeroed memory */
  aq->hsa_queue.type = type;
  aq->hsa_queue.features = HSA_QUEUE_FEATURE_KERNEL_DISPATCH;
  aq->hsa_queue.base_address = q->ring;
  aq->hsa_queue.doorbell_signal.handle = (uint64_t)(uintptr_t)q->doorbell;
  aq->hsa_queue.size = size;
  aq->group_segment_aperture_base_hi = RT_SHARED_APERTURE_HI;
  aq->private_segment_aperture_base_hi = RT_PRIVATE_APERTURE_HI;
  aq->max_cu_id = rt.cfg.compute_units - 1;
  aq->max_wave_id = 31;
  scratch_srd(aq->scratch_resource_descriptor, (uint64_t)(uintptr_t)q->scratch, SCRATCH_VA_BYTES);
  aq->scratch_backing_memory_location = 0;
  aq->scratch_backing_memory_byte_size = SCRATCH_VA_BYTES;
  aq->queue_properties = AMD_QUEUE_PROPERTIES_IS_PTR64;
  pthread_mutex_lock(&q_lock);
  aq->hsa_queue.id = next_queue_id++;
  pthread_mutex_unlock(&q_lock);
  /* The first thread the runtime makes (kiln forks before it creates queues). */
  if (pthread_create(&q->thread, NULL, processor_main, q) != 0) {
    queue_free(q);
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  pthread_mutex_lock(&q_lock);
  q->next = queues;
  queues = q;
  pthread_mutex_unlock(&q_lock);
  *queue = &aq->hsa_queue;
  return HSA_STATUS_SUCCESS;
}

static void stop_and_free(rt_queue_t *q) {
  atomic_store(&q->stop, true);
  atomic_fetch_add(&q->doorbell->seq, 1);
  /* wake the processor whatever it waits on */
  rt_signal_add(q->doorbell, 0);
  pthread_join(q->thread, NULL);
  queue_free(q);
}

RT_EXPORT hsa_status_t hsa_queue_destroy(hsa_queue_t *queue) {
  RT_REQUIRE_OPEN();
  if (!queue) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  rt_queue_t *q = queue_from(queue);
  if (!q) return HSA_STATUS_ERROR_INVALID_QUEUE;
  if (atomic_load(&q->in_callback) && pthread_equal(pthread_self(), q->thread)) {
    /* R amd_aql_queue.cpp ~AqlQueue: the destructor waits for the queue's error handler to
     * finish, and the handler is the caller: ROCr would deadlock here. */
    rt_log("hsa_queue_destroy called from inside queue %llu's own error callback: ROCr would deadlock here "
           "(its destructor waits for the error handler that is calling it); destroy the queue from another "
           "thread after the callback returns", (unsigned long long)queue->id);
    abort();
  }
  pthread_mutex_lock(&q_lock);
  for (rt_queue_t **p = &queues; *p; p = &(*p)->next)
    if (*p == q) {
      *p = q->next;
      break;
    }
  pthread_mutex_unlock(&q_lock);
  stop_and_free(q);
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_queue_inactivate(hsa_queue_t *queue) {
  RT_REQUIRE_OPEN();
  if (!queue) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  rt_queue_t *q = queue_from(queue);
  if (!q) return HSA_STATUS_ERROR_INVALID_QUEUE;
  atomic_store(&q->dead, true);
  return HSA_STATUS_SUCCESS;
}

size_t rt_queue_live(void) {
  pthread_mutex_lock(&q_lock);
  size_t n = 0;
  for (rt_queue_t *q = queues; q; q = q->next) n++;
  pthread_mutex_unlock(&q_lock);
  return n;
}

void rt_queue_release_all(void) {
  pthread_mutex_lock(&q_lock);
  rt_queue_t *q = queues;
  queues = NULL;
  pthread_mutex_unlock(&q_lock);
  while (q) {
    rt_queue_t *next = q->next;
    stop_and_free(q);
    q = next;
  }
}

/* --- indices (H: the write index is the client's, the read index the packet processor's) ----- */

static amd_queue_t *aq(const hsa_queue_t *queue) { return (amd_queue_t *)(uintptr_t)queue; }

#define LOADIDX(name, field, order) \
  RT_EXPORT uint64_t name(const hsa_queue_t *queue) { return __atomic_load_n(&aq(queue)->field, order); }
LOADIDX(hsa_queue_load_read_index_scacquire, read_dispatch_id, __ATOMIC_ACQUIRE)
LOADIDX(hsa_queue_load_read_index_acquire, read_dispatch_id, __ATOMIC_ACQUIRE)
LOADIDX(hsa_queue_load_read_index_relaxed, read_dispatch_id, __ATOMIC_RELAXED)
LOADIDX(hsa_queue_load_write_index_scacquire, write_dispatch_id, __ATOMIC_ACQUIRE)
LOADIDX(hsa_queue_load_write_index_acquire, write_dispatch_id, __ATOMIC_ACQUIRE)
LOADIDX(hsa_queue_load_write_index_relaxed, write_dispatch_id, __ATOMIC_RELAXED)

#define STOREIDX(name, field, order) \
  RT_EXPORT void name(const hsa_queue_t *queue, uint64_t value) { __atomic_store_n(&aq(queue)->field, value, order); }
STOREIDX(hsa_queue_store_write_index_relaxed, write_dispatch_id, __ATOMIC_RELAXED)
STOREIDX(hsa_queue_store_write_index_screlease, write_dispatch_id, __ATOMIC_RELEASE)
STOREIDX(hsa_queue_store_write_index_release, write_dispatch_id, __ATOMIC_RELEASE)
STOREIDX(hsa_queue_store_read_index_relaxed, read_dispatch_id, __ATOMIC_RELAXED)
STOREIDX(hsa_queue_store_read_index_screlease, read_dispatch_id, __ATOMIC_RELEASE)
STOREIDX(hsa_queue_store_read_index_release, read_dispatch_id, __ATOMIC_RELEASE)

#define CASIDX(suffix, order)                                                                                   \
  RT_EXPORT uint64_t hsa_queue_cas_write_index_##suffix(const hsa_queue_t *queue, uint64_t expected, uint64_t value) { \
    uint64_t old = expected;                                                                                    \
    __atomic_compare_exchange_n(&aq(queue)->write_dispatch_id, &old, value, false, order, __ATOMIC_RELAXED);   \
    return old;                                                                                                 \
  }
#define ADDIDX(suffix, order)                                                                 \
  RT_EXPORT uint64_t hsa_queue_add_write_index_##suffix(const hsa_queue_t *queue, uint64_t value) { \
    return __atomic_fetch_add(&aq(queue)->write_dispatch_id, value, order);                   \
  }
#define IDXRMW(suffix, order) CASIDX(suffix, order) ADDIDX(suffix, order)
IDXRMW(relaxed, __ATOMIC_RELAXED)
IDXRMW(scacquire, __ATOMIC_ACQUIRE)
IDXRMW(acquire, __ATOMIC_ACQUIRE)
IDXRMW(screlease, __ATOMIC_RELEASE)
IDXRMW(release, __ATOMIC_RELEASE)
IDXRMW(scacq_screl, __ATOMIC_ACQ_REL)
IDXRMW(acq_rel, __ATOMIC_ACQ_REL)

/* --- profiling ------------------------------------------------------------------------------------ */

RT_EXPORT hsa_status_t hsa_amd_profiling_set_profiler_enabled(hsa_queue_t *queue, int enable) {
  RT_REQUIRE_OPEN();
  if (!queue) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  rt_queue_t *q = queue_from(queue);
  if (!q) return HSA_STATUS_ERROR_INVALID_QUEUE;
  atomic_store(&q->profiling, enable != 0);
  if (enable) q->amd->queue_properties |= AMD_QUEUE_PROPERTIES_ENABLE_PROFILING;
  else q->amd->queue_properties &= ~(uint32_t)AMD_QUEUE_PROPERTIES_ENABLE_PROFILING;
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_amd_profiling_get_dispatch_time(hsa_agent_t agent, hsa_signal_t signal,
                                                           hsa_amd_profiling_dispatch_time_t *time) {
  RT_REQUIRE_OPEN();
  if (!time) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  rt_agent_t *a = rt_agent_from(agent);
  if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (a != &rt_gpu_agent) return HSA_STATUS_ERROR_INVALID_AGENT;
  rt_signal_t *s = rt_signal_from(signal);
  if (!s) return HSA_STATUS_ERROR_INVALID_SIGNAL;
  if (!s->dispatch_done &&
      rt_strict("hsa_amd_profiling_get_dispatch_time(0x%llx): the signal has not been the completion signal of a "
                "finished packet; its times would be meaningless", (unsigned long long)signal.handle))
    return HSA_STATUS_ERROR_INVALID_SIGNAL;
  /* Timestamps are host time in the system timestamp domain (the stand-in makes no claim on
   * kernel speed); 0 when the queue was not profiling, as in ROCr. */
  time->start = s->amd.start_ts;
  time->end = s->amd.end_ts;
  return HSA_STATUS_SUCCESS;
}
