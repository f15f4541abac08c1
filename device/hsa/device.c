/* The hsa backend table; opening a GPU: runtime, agents, pools, queue, signals, kernargs,
 * and the two ways ROCr reports a dead dispatch (queue callback, system event handler). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/hsa/backend.h"
#include "device/hsa/fault.h"
#include "device/hsa/pools.h"
#include "device/probe_child.h"

/* Queue of 1024 packets (a power of two, as AQL requires); large `count`s wait for room. */
#define QUEUE_PACKETS 1024u
#define PROBE_TIMEOUT_MS 20000u

static bool handler_registered;

/* Runs on ROCr's async thread with the queue already suspended. Only records: destroying
 * the queue here would deadlock (~AqlQueue waits for this very callback). */
static void on_queue_error(hsa_status_t status, hsa_queue_t *q, void *data) {
  kiln_device_t *dev = data;
  atomic_store(&dev->queue_error, (int)status);
}

static kiln_status_t hsa_probe(kiln_device_info_t *infos, size_t cap, size_t *out_count,
                               char *reason, size_t reason_cap) {
  return kiln_device_probe_in_child(kiln_hsa_probe_here, "hsa", PROBE_TIMEOUT_MS, infos, cap,
                                    out_count, reason, reason_cap);
}

typedef struct pool_pick {
  bool owner_is_gpu;
  hsa_amd_memory_pool_t device, kernarg;
  bool have_device, have_kernarg;
} pool_pick_t;

static hsa_status_t pick_pool(hsa_amd_memory_pool_t pool, void *data) {
  pool_pick_t *pp = data;
  uint32_t segment = 0, flags = 0;
  bool alloc = false;
  kiln_hsa.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment);
  if (segment == HSA_AMD_SEGMENT_GLOBAL)
    kiln_hsa.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
  kiln_hsa.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc);
  switch (kiln_hsa_pool_role(pp->owner_is_gpu, segment, flags, alloc)) {
    case KILN_HSA_POOL_DEVICE:
      if (!pp->have_device) pp->device = pool, pp->have_device = true;
      break;
    case KILN_HSA_POOL_KERNARG:
      if (!pp->have_kernarg) pp->kernarg = pool, pp->have_kernarg = true;
      break;
    default:
      break;
  }
  return HSA_STATUS_SUCCESS;
}

static kiln_status_t find_pools(kiln_device_t *dev) {
  pool_pick_t gp = {.owner_is_gpu = true}, cp = {.owner_is_gpu = false};
  KILN_HSA_TRY(kiln_hsa.hsa_amd_agent_iterate_memory_pools(dev->gpu, pick_pool, &gp));
  KILN_HSA_TRY(kiln_hsa.hsa_amd_agent_iterate_memory_pools(dev->cpu, pick_pool, &cp));
  if (!gp.have_device)
    return KILN_STATUS(KILN_E_DEVICE, "%s has no coarse-grained VRAM pool", dev->info.id);
  if (!cp.have_kernarg) return KILN_STATUS(KILN_E_DEVICE, "ROCr offers no kernarg pool");
  dev->device_pool = gp.device;
  dev->kernarg_pool = cp.kernarg;
  return KILN_OK;
}

static kiln_status_t open_steps(kiln_device_t *dev, uint32_t index) {
  KILN_RETURN_IF_ERROR(kiln_hsa_lib_load());
  KILN_HSA_TRY(kiln_hsa.hsa_init());
  dev->initialised = true;
  KILN_RETURN_IF_ERROR(kiln_hsa_find_agents(index, &dev->gpu, &dev->cpu));
  KILN_RETURN_IF_ERROR(kiln_hsa_agent_describe(dev->gpu, index, &dev->info));
  KILN_RETURN_IF_ERROR(find_pools(dev));
  KILN_HSA_TRY(kiln_hsa.hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &dev->timestamp_hz));
  if (!handler_registered) {
    KILN_HSA_TRY(kiln_hsa.hsa_amd_register_system_event_handler(kiln_hsa_on_system_event, NULL));
    handler_registered = true;
  }
  KILN_HSA_TRY(kiln_hsa.hsa_queue_create(dev->gpu, QUEUE_PACKETS, HSA_QUEUE_TYPE_MULTI,
                                         on_queue_error, dev, UINT32_MAX, UINT32_MAX, &dev->queue));
  KILN_HSA_TRY(kiln_hsa.hsa_amd_profiling_set_profiler_enabled(dev->queue, 1));
  KILN_HSA_TRY(kiln_hsa.hsa_signal_create(1, 0, NULL, &dev->first_done));
  KILN_HSA_TRY(kiln_hsa.hsa_signal_create(1, 0, NULL, &dev->last_done));
  KILN_HSA_TRY(kiln_hsa.hsa_amd_memory_pool_allocate(dev->kernarg_pool, KILN_HSA_KERNARG_SLAB, 0,
                                                     &dev->kernarg));
  /* Pool allocations are mapped to no GPU until access is granted (AllocateRestrict). */
  KILN_HSA_TRY(kiln_hsa.hsa_amd_agents_allow_access(1, &dev->gpu, NULL, dev->kernarg));
  return KILN_OK;
}

static void hsa_close(kiln_device_t *dev) {
  if (!dev) return;
  if (dev->kernarg) kiln_hsa.hsa_amd_memory_pool_free(dev->kernarg);
  if (dev->flush_buf) kiln_hsa.hsa_amd_memory_pool_free(dev->flush_buf);
  if (dev->first_done.handle) kiln_hsa.hsa_signal_destroy(dev->first_done);
  if (dev->last_done.handle) kiln_hsa.hsa_signal_destroy(dev->last_done);
  if (dev->queue) kiln_hsa.hsa_queue_destroy(dev->queue);
  if (dev->initialised) {
    kiln_hsa.hsa_shut_down();
    /* The last shut-down drops the runtime and its handlers; a later open registers anew. */
    handler_registered = false;
  }
  free(dev);
}

static kiln_status_t hsa_open(uint32_t index, const int *cpus, size_t ncpus, kiln_device_t **out_dev) {
  kiln_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  kiln_status_t s = open_steps(dev, index);
  if (s) {
    hsa_close(dev);
    return kiln_status_annotate(s, "opening hsa:%u", index);
  }
  *out_dev = dev;
  return KILN_OK;
}

static const kiln_device_info_t *hsa_info(kiln_device_t *dev) { return &dev->info; }

const kiln_backend_t kiln_backend_hsa = {
    .kind = "hsa",
    .probe = hsa_probe,
    .open = hsa_open,
    .close = hsa_close,
    .info = hsa_info,
    .mem_alloc = kiln_hsa_mem_alloc,
    .mem_free = kiln_hsa_mem_free,
    .mem_address = kiln_hsa_mem_address,
    .mem_host_ptr = kiln_hsa_mem_host_ptr,
    .copy_in = kiln_hsa_copy_in,
    .copy_out = kiln_hsa_copy_out,
    .module_load = kiln_hsa_module_load,
    .module_unload = kiln_hsa_module_unload,
    .launch = kiln_hsa_launch,
    .copy_device = kiln_hsa_copy_device,
    .seq_create = kiln_hsa_seq_create,
    .seq_destroy = kiln_hsa_seq_destroy,
    .seq_run = kiln_hsa_seq_run,
    .flush_caches = kiln_hsa_flush_caches,
};
