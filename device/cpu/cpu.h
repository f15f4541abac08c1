/* Internals of the cpu backend, shared by its files (device/cpu/ only). */
#ifndef KILN_DEVICE_CPU_CPU_H
#define KILN_DEVICE_CPU_CPU_H

#include <stdatomic.h>
#include <stdint.h>

#include "device/cpu/pool.h"
#include "device/device.h"
#include "protocol/cpu_abi.h"

/* Per pool thread: its work-group memory, grown before a launch by the owner thread only,
 * and its share of the current launch's grid (launch.c): groups [next, end) not yet taken.
 * One cache line each, so that a thread taking groups from its own share does not disturb
 * the others' lines. */
typedef struct cpu_thread_mem {
  void *shared;
  size_t shared_cap;
  void *scratch;
  size_t scratch_cap;
  _Atomic uint64_t next;
  uint64_t end;
} __attribute__((aligned(64))) cpu_thread_mem_t;

struct kiln_device {
  kiln_device_info_t info;
  kiln_cpu_pool_t *pool;
  cpu_thread_mem_t *mem; /* one per pool thread */
  void *flush_buf;       /* lazily made, larger than the last-level cache */
  size_t flush_bytes;
  /* Large buffers freed recently, kept mapped for the next allocation of the same size:
   * fresh pages cost a fault and a zeroing each (the kernel clears ~1 GB/s on the VMs we
   * measured), which dominated a 256 MiB upload. Bounded by CPU_SPARE_* in cpu.c. */
  struct {
    void *ptr;
    size_t len;
  } spare[4];
  size_t spare_bytes;
};

struct kiln_dmem {
  void *ptr;
  uint64_t bytes;
  bool mapped;    /* mmap'ed (large) rather than from the heap */
  size_t map_len; /* of a mapped buffer: bytes rounded up to huge pages */
};

struct kiln_dmodule {
  void *handle; /* dlopen */
  int fd;       /* the memfd, kept open while loaded (see module.c) */
  const kiln_artifact_t *art;
  kiln_cpu_wg_fn_t *fns; /* parallel to art->kernels */
};

KILN_MUST_USE kiln_status_t kiln_cpu_probe_info(kiln_device_info_t *out);
/* Bytes of the largest data cache (LLC), 0 if unknown. */
size_t kiln_cpu_llc_bytes(void);

KILN_MUST_USE kiln_status_t kiln_cpu_module_load(const kiln_artifact_t *art, kiln_dmodule_t **out_mod);
void kiln_cpu_module_unload(kiln_dmodule_t *mod);
/* The work-group function of launch->kernel, NULL if the module does not have it. */
kiln_cpu_wg_fn_t kiln_cpu_module_fn(const kiln_dmodule_t *mod, const kiln_kernel_t *kernel);

KILN_MUST_USE kiln_status_t kiln_cpu_launch(kiln_device_t *dev, kiln_dmodule_t *mod, const kiln_launch_t *l,
                              uint32_t count, uint64_t deadline_ns, uint64_t *out_elapsed_ns);

#endif
