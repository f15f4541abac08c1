/* The device worker process: owns one opened device (backend + context), the tenant's
 * tensors on it and its loaded modules. kilnd sends it typed jobs (protocol/job.h,
 * docs/worker_jobs.md) over the channel, served by protocol/job_serve.h's loop; jobs are
 * handled strictly in order on the main thread, which is what makes "operations of a tenant
 * on a device run in order" true. The worker trusts a job's values (kilnd checked the
 * client's fields); it checks what only it knows: its buffers, its modules, its device's
 * limits. */
#ifndef KILN_DEVICE_WORKER_WORKER_H
#define KILN_DEVICE_WORKER_WORKER_H

#include <msgpack.h>
#include <sys/types.h>

#include "base/buf.h"
#include "base/map.h"
#include "device/device.h"
#include "protocol/channel.h"
#include "protocol/job_serve.h"

/* A shared-memory buffer from kilnd's pool, kept mapped across requests (tensors.c). */
#define KILN_DWORKER_SHM_CACHE 16
typedef struct kiln_dworker_shm {
  dev_t dev;
  ino_t ino;
  uint8_t *map; /* NULL: free slot */
  uint64_t size;
  uint64_t used_at;
} kiln_dworker_shm_t;

typedef struct kiln_dworker {
  const kiln_backend_t *backend;
  kiln_device_t *dev;
  char device_id[32];
  kiln_map_t buffers; /* handle -> buffer_t* */
  kiln_map_t modules; /* kiln_module_key64 of the module id -> module */
  kiln_map_t graphs;  /* kilnd's graph handle -> graph (graph.c) */
  int channel;
  kiln_dworker_shm_t shm[KILN_DWORKER_SHM_CACHE]; /* by inode, least recently used goes */
  uint64_t shm_clock;
  /* kilnd's cancel page (modules.c): cell seq % cells holds seq once kilnd cancels the launch
   * or timing that carried "cancel": seq. Written by kilnd at any time. */
  const volatile uint64_t *cancel_page;
  uint64_t cancel_cells;
} kiln_dworker_t;

typedef struct kiln_dworker_buffer {
  kiln_dmem_t *mem;
  uint64_t bytes;
} kiln_dworker_buffer_t;

/* A new buffer of kilnd's handle `handle` (tensors.c; graph_run's kept outputs too), and
 * its end (nothing when the handle names none). The bytes are not cleared. */
KILN_MUST_USE kiln_status_t kiln_dworker_buffer_alloc(kiln_dworker_t *w, uint64_t handle, uint64_t bytes,
                                                      kiln_dworker_buffer_t **out);
void kiln_dworker_buffer_free(kiln_dworker_t *w, uint64_t handle);

/* Each family's jobs: *out_found false when the kind is not the family's (main.c asks each
 * family in turn). */
KILN_MUST_USE kiln_status_t kiln_dworker_tensor_job(kiln_dworker_t *w, kiln_job_call_t *call, bool *out_found);
KILN_MUST_USE kiln_status_t kiln_dworker_module_job(kiln_dworker_t *w, kiln_job_call_t *call, bool *out_found);
void kiln_dworker_modules_deinit(kiln_dworker_t *w);
KILN_MUST_USE kiln_status_t kiln_dworker_graph_job(kiln_dworker_t *w, kiln_job_call_t *call, bool *out_found);
void kiln_dworker_graphs_deinit(kiln_dworker_t *w);
/* A module kilnd loaded in this worker (graph.c): E_INTERNAL when it did not. */
KILN_MUST_USE kiln_status_t kiln_dworker_module_get(kiln_dworker_t *w, const uint8_t key[KILN_HASH_BYTES],
                                      kiln_dmodule_t **out_mod, const kiln_artifact_t **out_art);

#endif
