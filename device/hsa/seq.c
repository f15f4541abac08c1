/* Launch sequences (device.h seq_*): a graph's dispatches as AQL packets back to back, each
 * with the barrier bit (it starts once the one before has finished, HSA.md §5), and one wait
 * at the end. Kernargs are packed once, at seq_create, into a segment of their own per
 * launch. Marked packets decrement one progress signal (set to the number of marks before
 * each run), so its value says how many marked items have completed: a fault or a hang is
 * reported at the first item not seen complete. */
#include <sched.h>
#include <stdlib.h>

#include "device/common.h"
#include "device/hsa/backend.h"
#include "device/hsa/kernarg.h"
#include "device/seq.h"

#include <hsa/amd_hsa_queue.h>

/* How often the wait wakes to look at the fault record, the queue error and the deadline. */
#define POLL_MS 10
/* Each launch's segment starts at this alignment (AQL needs 16; 64 keeps segments on their
 * own cache lines). */
#define SEGMENT_ALIGN 64u

typedef struct item {
  const kiln_launch_t *launch;
  const kiln_hsa_kernel_code_t *code;
  uint64_t kernarg_offset;
  bool mark;
} item_t;

struct kiln_dseq {
  item_t *items;
  uint32_t count;
  kiln_seq_marks_t where; /* which items decrement the progress signal */
  void *kernarg;          /* every launch's segment, from the kernarg pool */
  hsa_signal_t progress;
};

void kiln_hsa_seq_destroy(kiln_device_t *dev, kiln_dseq_t *s) {
  if (!s) return;
  if (s->kernarg) kiln_hsa.hsa_amd_memory_pool_free(s->kernarg);
  if (s->progress.handle) kiln_hsa.hsa_signal_destroy(s->progress);
  kiln_seq_marks_deinit(&s->where);
  free(s->items);
  free(s);
}

static kiln_status_t create_steps(kiln_device_t *dev, kiln_dseq_t *s, const kiln_seq_item_t *items) {
  KILN_RETURN_IF_ERROR(kiln_seq_marks_init(&s->where, items, s->count));
  if (!(s->items = calloc(s->count, sizeof *s->items)))
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < s->count; i++) {
    const kiln_launch_t *l = items[i].launch;
    const kiln_hsa_kernel_code_t *code = kiln_hsa_module_code(items[i].mod, l->kernel);
    if (!code) return KILN_STATUS(KILN_E_NOT_FOUND, "kernel \"%s\" is not in its module", l->kernel->name);
    /* the fill's checks now, so that a run never claims a slot it cannot publish */
    hsa_kernel_dispatch_packet_t scratch;
    uint32_t header_setup;
    KILN_RETURN_IF_ERROR(kiln_hsa_packet_fill(&scratch, l, code, NULL, (hsa_signal_t){0}, &header_setup));
    bool mark = items[i].mark || i + 1 == s->count;
    s->items[i] = (item_t){.launch = l, .code = code, .kernarg_offset = bytes, .mark = mark};
    bytes += (l->kernel->kernarg_size + SEGMENT_ALIGN - 1) / SEGMENT_ALIGN * SEGMENT_ALIGN;
  }
  KILN_HSA_TRY(kiln_hsa.hsa_amd_memory_pool_allocate(dev->kernarg_pool, bytes ? bytes : SEGMENT_ALIGN, 0,
                                                     &s->kernarg));
  /* Pool allocations are mapped to no GPU until access is granted (AllocateRestrict). */
  KILN_HSA_TRY(kiln_hsa.hsa_amd_agents_allow_access(1, &dev->gpu, NULL, s->kernarg));
  amd_queue_t *aq = (amd_queue_t *)dev->queue; /* hsa_queue_t is amd_queue_t's first member */
  kiln_hsa_kernarg_env_t env = {
      .queue_ptr = (uint64_t)(uintptr_t)dev->queue,
      .private_base_hi = aq->private_segment_aperture_base_hi,
      .shared_base_hi = aq->group_segment_aperture_base_hi,
  };
  for (uint32_t i = 0; i < s->count; i++) {
    const item_t *it = &s->items[i];
    KILN_RETURN_IF_ERROR(kiln_hsa_kernarg_pack(it->launch, &env, (char *)s->kernarg + it->kernarg_offset,
                                               it->launch->kernel->kernarg_size));
  }
  KILN_HSA_TRY(kiln_hsa.hsa_signal_create(0, 0, NULL, &s->progress));
  return KILN_OK;
}

kiln_status_t kiln_hsa_seq_create(kiln_device_t *dev, const kiln_seq_item_t *items, uint32_t count,
                                  kiln_dseq_t **out_seq) {
  kiln_dseq_t *s = calloc(1, sizeof *s);
  if (!s) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  s->count = count;
  kiln_status_t st = create_steps(dev, s, items);
  if (st) {
    kiln_hsa_seq_destroy(dev, s);
    return st;
  }
  *out_seq = s;
  return KILN_OK;
}

/* The progress signal read `left` (marks still to complete): tells the watch. Returns whether
 * every item is complete. */
static bool seen(kiln_seq_watch_t *w, hsa_signal_value_t left) {
  uint32_t marks = w->marks->count;
  return kiln_seq_watch_seen(w, left <= 0 ? marks : marks - (uint32_t)(left < marks ? left : marks));
}

/* A fault the handler recorded, placed at the first item not seen complete. */
static kiln_status_t faults(kiln_device_t *dev, const kiln_seq_watch_t *w, uint32_t *out_at) {
  return kiln_seq_watch_place(w, kiln_hsa_check_faults(dev, kiln_seq_watch_kernel(w)), out_at);
}

static kiln_status_t checks(kiln_device_t *dev, const kiln_seq_watch_t *w, uint32_t *out_at) {
  KILN_RETURN_IF_ERROR(faults(dev, w, out_at));
  return kiln_seq_watch_deadline(w, out_at);
}

/* The packets, each published (release store of its header) and announced by the doorbell
 * at once, so the GPU starts on the first while the rest are written. A queue full of this
 * run's packets waits for the packet processor to move on. */
static kiln_status_t submit(kiln_device_t *dev, kiln_dseq_t *s, kiln_seq_watch_t *w, uint32_t *out_at) {
  hsa_queue_t *q = dev->queue;
  for (uint32_t i = 0; i < s->count; i++) {
    const item_t *it = &s->items[i];
    uint64_t index = kiln_hsa.hsa_queue_add_write_index_scacq_screl(q, 1);
    while (index - kiln_hsa.hsa_queue_load_read_index_scacquire(q) >= q->size) {
      seen(w, kiln_hsa.hsa_signal_load_scacquire(s->progress));
      KILN_RETURN_IF_ERROR(checks(dev, w, out_at));
      sched_yield();
    }
    hsa_kernel_dispatch_packet_t *p = (hsa_kernel_dispatch_packet_t *)q->base_address + (index & (q->size - 1));
    uint32_t header_setup;
    hsa_signal_t none = {0};
    kiln_status_t st = kiln_hsa_packet_fill(p, it->launch, it->code, (char *)s->kernarg + it->kernarg_offset,
                                            it->mark ? s->progress : none, &header_setup);
    if (st) {
      *out_at = i;
      return st;
    }
    kiln_hsa_packet_publish(p, header_setup);
    kiln_hsa.hsa_signal_store_screlease(q->doorbell_signal, (hsa_signal_value_t)index);
  }
  return KILN_OK;
}

kiln_status_t kiln_hsa_seq_run(kiln_device_t *dev, kiln_dseq_t *s, uint64_t deadline_ns,
                               kiln_seq_progress_cb progress, void *ctx, uint32_t *out_at) {
  kiln_seq_watch_t w;
  kiln_seq_watch_init(&w, &s->where, deadline_ns, progress, ctx);
  KILN_RETURN_IF_ERROR(faults(dev, &w, out_at));
  kiln_hsa.hsa_signal_store_screlease(s->progress, (hsa_signal_value_t)s->where.count);
  KILN_RETURN_IF_ERROR(submit(dev, s, &w, out_at));
  uint64_t ticks = dev->timestamp_hz / (1000 / POLL_MS);
  for (;;) {
    /* Wakes when a marked packet completes (the value drops below what was seen), or after
     * POLL_MS; it may also return early (spurious wake-ups): the value decides. */
    hsa_signal_value_t left = (hsa_signal_value_t)(s->where.count - w.done);
    if (seen(&w, kiln_hsa.hsa_signal_wait_scacquire(s->progress, HSA_SIGNAL_CONDITION_LT, left, ticks,
                                                    HSA_WAIT_STATE_BLOCKED)))
      return KILN_OK;
    KILN_RETURN_IF_ERROR(checks(dev, &w, out_at));
  }
}
