/* The device API: one small table of functions per backend (cpu, hsa, cuda).
 *
 * A backend is a `const kiln_backend_t` plus its own state types. The device worker
 * (device/worker/) owns exactly one opened device and calls these from its main thread;
 * backends may use threads inside (the cpu pool, ROCr's async thread) but their entry
 * points are called from one thread. Every backend is checked by the one conformance suite
 * in tests/device/. Foreign errors (hsa_status_t, CUresult) are converted once inside the
 * backend; only kiln_status_t leaves it. */
#ifndef KILN_DEVICE_DEVICE_H
#define KILN_DEVICE_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "protocol/artifact.h"

typedef struct kiln_device_info {
  char id[32];      /* "cpu:0", "hsa:1", "cuda:0" */
  char kind[8];     /* "cpu", "hsa", "cuda" */
  char name[128];   /* marketing or CPU model name */
  char arch[96];    /* compile target id: "cpu", "gfx90a:sramecc+:xnack-", "sm_90" */
  uint64_t memory;  /* bytes of device memory (host RAM for cpu) */
  uint32_t compute_units; /* CUs / SMs / cores */
  uint32_t wave_size;     /* 1 for cpu */
  uint32_t max_block;     /* max work-items per work-group */
  uint32_t max_shared;    /* max work-group memory bytes */
  uint32_t max_block_dim[3]; /* max work-items per work-group per dimension */
  uint32_t max_grid[3];      /* max work-groups per dimension */
  uint64_t max_grid_items;   /* max work-items (grid * block) per dimension */
} kiln_device_info_t;

typedef struct kiln_device kiln_device_t;   /* backend-defined */
typedef struct kiln_dmem kiln_dmem_t;       /* backend-defined device allocation */
typedef struct kiln_dmodule kiln_dmodule_t; /* backend-defined loaded module */
typedef struct kiln_dseq kiln_dseq_t;       /* backend-defined prepared launch sequence */

/* One launch, with arguments already checked and converted by the caller
 * (device/launch.c) against the kernel table: `args[i]` points at explicit argument i's
 * value in the kernel's parameter type; pointer arguments hold device addresses as
 * returned by dmem_address(). */
typedef struct kiln_launch {
  const kiln_kernel_t *kernel;
  uint32_t grid[3];  /* work-groups per dimension, each >= 1 */
  uint32_t block[3]; /* work-items per work-group, each >= 1 */
  uint32_t dims;     /* 1..3: highest dimension with grid or block > 1 (at least 1) */
  uint32_t shared;   /* dynamic work-group memory bytes */
  void *const *args;
} kiln_launch_t;

/* One launch of a sequence (seq_create). `mark`: the wait reports when this item has
 * completed (a graph marks the last launch of each node); the last item is always marked. */
typedef struct kiln_seq_item {
  kiln_dmodule_t *mod;
  const kiln_launch_t *launch;
  bool mark;
} kiln_seq_item_t;

/* Told, while seq_run waits, that the first `done` items are known to have completed. */
typedef void (*kiln_seq_progress_cb)(void *ctx, uint32_t done);

typedef struct kiln_backend {
  const char *kind; /* "cpu", "hsa", "cuda" */

  /* Finds this backend's devices. Absence is not an error: *out_count = 0 and
   * `out_reason` (cap bytes) says why ("libcuda.so.1 not found", "/dev/kfd: permission
   * denied", "no supported GPU"). Must be cheap enough to run at daemon start and must not
   * leave the runtime initialised in the calling process (kilnd never keeps a GPU context):
   * the GPU backends probe in a forked child (device/probe_child.h). Fills at most `cap`
   * entries; *out_count is the number filled. */
  kiln_status_t (*probe)(kiln_device_info_t *out_infos, size_t cap, size_t *out_count,
                         char *out_reason, size_t reason_cap);

  /* Opens device `index` of this backend in the calling (worker) process. `cpus` lists the
   * host cores its threads may run on (NULL: all). */
  kiln_status_t (*open)(uint32_t index, const int *cpus, size_t ncpus, kiln_device_t **out_dev);
  void (*close)(kiln_device_t *dev);
  /* The opened device's description (same as probe's entry). Borrowed; lives as long as dev. */
  const kiln_device_info_t *(*info)(kiln_device_t *dev);

  kiln_status_t (*mem_alloc)(kiln_device_t *dev, uint64_t bytes, kiln_dmem_t **out_mem);
  void (*mem_free)(kiln_device_t *dev, kiln_dmem_t *mem);
  /* The value a kernel sees for this buffer (device virtual address). */
  uint64_t (*mem_address)(kiln_device_t *dev, kiln_dmem_t *mem);
  /* Host pointer to the bytes if the host can address them directly (cpu), else NULL. */
  void *(*mem_host_ptr)(kiln_device_t *dev, kiln_dmem_t *mem);
  /* Copies complete before returning and are ordered after all earlier launches. */
  kiln_status_t (*copy_in)(kiln_device_t *dev, kiln_dmem_t *dst, uint64_t offset, const void *src,
                           uint64_t bytes);
  kiln_status_t (*copy_out)(kiln_device_t *dev, kiln_dmem_t *src, uint64_t offset, void *dst,
                            uint64_t bytes);

  /* Loads an artifact of this backend's format. The backend may keep pointers into `art`
   * (the caller keeps it alive until module_unload). */
  kiln_status_t (*module_load)(kiln_device_t *dev, const kiln_artifact_t *art,
                               kiln_dmodule_t **out_mod);
  void (*module_unload)(kiln_device_t *dev, kiln_dmodule_t *mod);

  /* Runs the launch `count` times back to back and waits for completion (or the deadline,
   * in ns from now; 0 = none). When out_elapsed_ns is not NULL, it receives the device-side
   * time from the start of the first run to the end of the last. A fault returns
   * E_DEVICE_FAULT (the worker then exits); a deadline passed returns E_TIMEOUT. */
  kiln_status_t (*launch)(kiln_device_t *dev, kiln_dmodule_t *mod, const kiln_launch_t *launch,
                          uint32_t count, uint64_t deadline_ns, uint64_t *out_elapsed_ns);

  /* Optional (NULL: the caller copies through the host). Copies `bytes` between two buffers
   * of this device; ordered after all earlier launches, complete before returning. */
  kiln_status_t (*copy_device)(kiln_device_t *dev, kiln_dmem_t *dst, uint64_t dst_offset, kiln_dmem_t *src,
                               uint64_t src_offset, uint64_t bytes);

  /* Launch sequences. Optional, all three or none (NULL: the caller runs `launch` per item,
   * which waits for each kernel). seq_create prepares `count` launches (items[i].launch
   * checked by kiln_launch_prepare) to be submitted in order, each after the one before has
   * finished, with one wait at the end: a CUDA graph captured once (or stream launches where
   * capture fails), AQL packets with barrier bits and kernargs packed once. The launches and
   * what their args point at stay valid until seq_destroy; a module they use is not unloaded
   * before it. */
  kiln_status_t (*seq_create)(kiln_device_t *dev, const kiln_seq_item_t *items, uint32_t count,
                              kiln_dseq_t **out_seq);
  void (*seq_destroy)(kiln_device_t *dev, kiln_dseq_t *seq);
  /* Submits the whole sequence and waits for it (or the deadline, ns from now; 0: none),
   * calling `progress` (may be NULL) as marked items are seen complete. A submitted sequence
   * cannot be stopped: a fault or E_TIMEOUT is reported once seen, with *out_at set to the
   * first item not seen complete (where the fault or hang is, as far as the device tells;
   * E_DEVICE_FAULT and E_TIMEOUT end the worker as for `launch`). out_at is set on failure
   * only. */
  kiln_status_t (*seq_run)(kiln_device_t *dev, kiln_dseq_t *seq, uint64_t deadline_ns,
                           kiln_seq_progress_cb progress, void *ctx, uint32_t *out_at);

  /* Evicts caches that a timing run should not profit from (L2 on GPUs, LLC on cpu). */
  kiln_status_t (*flush_caches)(kiln_device_t *dev);
} kiln_backend_t;

extern const kiln_backend_t kiln_backend_cpu;
extern const kiln_backend_t kiln_backend_hsa;
extern const kiln_backend_t kiln_backend_cuda;

#endif
