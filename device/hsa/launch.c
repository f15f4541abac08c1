/* Dispatching on the AQL queue (HSA.md §5) and waiting with a deadline. */
#include <sched.h>
#include <string.h>

#include "base/util.h"
#include "device/hsa/backend.h"
#include "device/hsa/kernarg.h"

#include <hsa/amd_hsa_queue.h>

/* How often the wait wakes to look at the fault record, the queue error and the deadline. */
#define POLL_MS 10

static kiln_status_t past_deadline(const kiln_launch_t *l, uint64_t deadline, uint64_t budget_ns) {
  if (deadline && kiln_now_ns() > deadline)
    return KILN_STATUS(KILN_E_TIMEOUT,
                       "kernel \"%s\" ran past its deadline of %.3f ms; the GPU may still be busy "
                       "and the device worker restarts",
                       l->kernel->name, (double)budget_ns / 1e6);
  return KILN_OK;
}

/* Claims the next slot, waiting while the queue is full (a packet slot is free once the
 * packet processor's read index has moved past it). A slot claimed but never published
 * stalls the queue; that happens only on a fault or timeout, after which the worker exits. */
static kiln_status_t next_slot(kiln_device_t *dev, const kiln_launch_t *l, uint64_t deadline,
                               uint64_t budget, uint64_t *out_index) {
  hsa_queue_t *q = dev->queue;
  uint64_t i = kiln_hsa.hsa_queue_add_write_index_scacq_screl(q, 1);
  while (i - kiln_hsa.hsa_queue_load_read_index_scacquire(q) >= q->size) {
    KILN_RETURN_IF_ERROR(kiln_hsa_check_faults(dev, l->kernel->name));
    KILN_RETURN_IF_ERROR(past_deadline(l, deadline, budget));
    sched_yield();
  }
  *out_index = i;
  return KILN_OK;
}

static kiln_status_t wait_done(kiln_device_t *dev, const kiln_launch_t *l, uint64_t deadline,
                               uint64_t budget) {
  uint64_t ticks = dev->timestamp_hz / (1000 / POLL_MS);
  for (;;) {
    /* The wait may return early (spurious wake-ups): the value decides. */
    hsa_signal_value_t v = kiln_hsa.hsa_signal_wait_scacquire(
        dev->last_done, HSA_SIGNAL_CONDITION_LT, 1, ticks, HSA_WAIT_STATE_BLOCKED);
    if (v < 1) return KILN_OK;
    KILN_RETURN_IF_ERROR(kiln_hsa_check_faults(dev, l->kernel->name));
    KILN_RETURN_IF_ERROR(past_deadline(l, deadline, budget));
  }
}

static kiln_status_t elapsed(kiln_device_t *dev, uint32_t count, uint64_t *out_ns) {
  hsa_amd_profiling_dispatch_time_t first, last;
  KILN_HSA_TRY(kiln_hsa.hsa_amd_profiling_get_dispatch_time(
      dev->gpu, count > 1 ? dev->first_done : dev->last_done, &first));
  KILN_HSA_TRY(kiln_hsa.hsa_amd_profiling_get_dispatch_time(dev->gpu, dev->last_done, &last));
  /* Both are in the system timestamp domain (HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY). */
  uint64_t ticks = last.end > first.start ? last.end - first.start : 0;
  *out_ns = (uint64_t)((double)ticks * 1e9 / (double)dev->timestamp_hz);
  return KILN_OK;
}

kiln_status_t kiln_hsa_launch(kiln_device_t *dev, kiln_dmodule_t *mod, const kiln_launch_t *l,
                              uint32_t count, uint64_t deadline_ns, uint64_t *out_elapsed_ns) {
  if (count == 0) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "launch count must be at least 1");
  KILN_RETURN_IF_ERROR(kiln_hsa_check_faults(dev, l->kernel->name));
  const kiln_hsa_kernel_code_t *code = kiln_hsa_module_code(mod, l->kernel);
  if (!code)
    return KILN_STATUS(KILN_E_NOT_FOUND, "kernel \"%s\" is not in this module", l->kernel->name);
  amd_queue_t *aq = (amd_queue_t *)dev->queue; /* hsa_queue_t is amd_queue_t's first member */
  kiln_hsa_kernarg_env_t env = {
      .queue_ptr = (uint64_t)(uintptr_t)dev->queue,
      .private_base_hi = aq->private_segment_aperture_base_hi,
      .shared_base_hi = aq->group_segment_aperture_base_hi,
  };
  /* One segment serves all `count` dispatches: they read the same values, and the slab is
   * not touched again until they have all completed (launches are synchronous). */
  KILN_RETURN_IF_ERROR(kiln_hsa_kernarg_pack(l, &env, dev->kernarg, KILN_HSA_KERNARG_SLAB));
  kiln_hsa.hsa_signal_store_screlease(dev->first_done, 1);
  kiln_hsa.hsa_signal_store_screlease(dev->last_done, 1);
  uint64_t deadline = deadline_ns ? kiln_now_ns() + deadline_ns : 0;
  hsa_queue_t *q = dev->queue;
  for (uint32_t c = 0; c < count; c++) {
    /* Only the first and last dispatch signal: their timestamps bound the whole run, and
     * the barrier bit orders everything in between. */
    hsa_signal_t sig = {0};
    if (c == count - 1)
      sig = dev->last_done;
    else if (c == 0)
      sig = dev->first_done;
    uint64_t index;
    KILN_RETURN_IF_ERROR(next_slot(dev, l, deadline, deadline_ns, &index));
    hsa_kernel_dispatch_packet_t *p = (hsa_kernel_dispatch_packet_t *)q->base_address + (index & (q->size - 1));
    uint32_t header_setup;
    KILN_RETURN_IF_ERROR(kiln_hsa_packet_fill(p, l, code, dev->kernarg, sig, &header_setup));
    kiln_hsa_packet_publish(p, header_setup);
    /* The doorbell after the header: the packet processor may fetch up to this index. */
    kiln_hsa.hsa_signal_store_screlease(q->doorbell_signal, (hsa_signal_value_t)index);
  }
  KILN_RETURN_IF_ERROR(wait_done(dev, l, deadline, deadline_ns));
  if (out_elapsed_ns) KILN_RETURN_IF_ERROR(elapsed(dev, count, out_elapsed_ns));
  return KILN_OK;
}
