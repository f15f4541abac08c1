/* Internals of the hsa backend shared by its runtime files (device/hsa/ only). */
#ifndef KILN_DEVICE_HSA_BACKEND_H
#define KILN_DEVICE_HSA_BACKEND_H

#include <stdatomic.h>

#include "device/device.h"
#include "device/hsa/lib.h"
#include "device/hsa/packet.h"
#include "device/hsa/status.h"

/* Kernarg slab: one launch's segment at a time (launches are synchronous), so 64 KiB covers
 * any kernel of the dialect (100+ arguments take about 1 KiB with the v5 hidden block). */
#define KILN_HSA_KERNARG_SLAB (64u * 1024u)

struct kiln_device {
  kiln_device_info_t info;
  hsa_agent_t gpu;
  hsa_agent_t cpu;
  hsa_amd_memory_pool_t device_pool;
  hsa_amd_memory_pool_t kernarg_pool;
  hsa_queue_t *queue;
  hsa_signal_t first_done; /* completion of a launch's first dispatch (its start time) */
  hsa_signal_t last_done;  /* completion of its last dispatch */
  void *kernarg;
  uint64_t timestamp_hz;
  bool initialised;        /* hsa_init succeeded: close must shut down */
  /* Set by ROCr's async thread in the queue error callback; read by the worker thread.
   * The callback must not destroy the queue (its destructor waits for the callback). */
  _Atomic int queue_error; /* hsa_status_t, 0 = none */
  void *flush_buf;
  size_t flush_bytes;
};

struct kiln_dmem {
  void *ptr;
  uint64_t bytes;
};

struct kiln_dmodule {
  const kiln_artifact_t *art; /* its code bytes back the reader: alive until unload */
  hsa_code_object_reader_t reader;
  hsa_executable_t exe;
  bool have_reader, have_exe;
  kiln_hsa_kernel_code_t *codes; /* parallel to art->kernels */
};

/* Fills info for GPU agent `gpu`, the index-th GPU (probe.c). */
KILN_MUST_USE kiln_status_t kiln_hsa_agent_describe(hsa_agent_t gpu, uint32_t index, kiln_device_info_t *info);
/* The index-th GPU agent and the first CPU agent (probe.c). E_NOT_FOUND if absent. */
KILN_MUST_USE kiln_status_t kiln_hsa_find_agents(uint32_t index, hsa_agent_t *out_gpu, hsa_agent_t *out_cpu);
/* Probes in the calling process (the backend runs it in a child; probe.c). */
KILN_MUST_USE kiln_status_t kiln_hsa_probe_here(kiln_device_info_t *infos, size_t cap, size_t *out_count,
                                  char *reason, size_t reason_cap);

/* The process-wide GPU memory fault record written by the system event handler (device.c):
 * true once a fault was seen, with its address and reason text. */
bool kiln_hsa_fault_seen(uint64_t *out_address, char *reason, size_t cap);
/* E_DEVICE_FAULT for a recorded fault or a queue error, else KILN_OK. */
KILN_MUST_USE kiln_status_t kiln_hsa_check_faults(kiln_device_t *dev, const char *kernel);

KILN_MUST_USE kiln_status_t kiln_hsa_mem_alloc(kiln_device_t *dev, uint64_t bytes, kiln_dmem_t **out_mem);
void kiln_hsa_mem_free(kiln_device_t *dev, kiln_dmem_t *mem);
uint64_t kiln_hsa_mem_address(kiln_device_t *dev, kiln_dmem_t *mem);
void *kiln_hsa_mem_host_ptr(kiln_device_t *dev, kiln_dmem_t *mem);
KILN_MUST_USE kiln_status_t kiln_hsa_copy_in(kiln_device_t *dev, kiln_dmem_t *dst, uint64_t offset,
                               const void *src, uint64_t bytes);
KILN_MUST_USE kiln_status_t kiln_hsa_copy_out(kiln_device_t *dev, kiln_dmem_t *src, uint64_t offset, void *dst,
                                uint64_t bytes);
KILN_MUST_USE kiln_status_t kiln_hsa_flush_caches(kiln_device_t *dev);

KILN_MUST_USE kiln_status_t kiln_hsa_module_load(kiln_device_t *dev, const kiln_artifact_t *art,
                                   kiln_dmodule_t **out_mod);
void kiln_hsa_module_unload(kiln_device_t *dev, kiln_dmodule_t *mod);
const kiln_hsa_kernel_code_t *kiln_hsa_module_code(const kiln_dmodule_t *mod,
                                                   const kiln_kernel_t *kernel);

KILN_MUST_USE kiln_status_t kiln_hsa_launch(kiln_device_t *dev, kiln_dmodule_t *mod, const kiln_launch_t *l,
                              uint32_t count, uint64_t deadline_ns, uint64_t *out_elapsed_ns);

KILN_MUST_USE kiln_status_t kiln_hsa_copy_device(kiln_device_t *dev, kiln_dmem_t *dst, uint64_t dst_offset,
                                                 kiln_dmem_t *src, uint64_t src_offset, uint64_t bytes);

/* Launch sequences (seq.c). */
KILN_MUST_USE kiln_status_t kiln_hsa_seq_create(kiln_device_t *dev, const kiln_seq_item_t *items, uint32_t count,
                                                kiln_dseq_t **out_seq);
void kiln_hsa_seq_destroy(kiln_device_t *dev, kiln_dseq_t *seq);
KILN_MUST_USE kiln_status_t kiln_hsa_seq_run(kiln_device_t *dev, kiln_dseq_t *seq, uint64_t deadline_ns,
                                             kiln_seq_progress_cb progress, void *ctx, uint32_t *out_at);

#endif
