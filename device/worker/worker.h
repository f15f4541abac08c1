/* The device worker process: owns one opened device (backend + context), the tenant's
 * tensors on it and, later, loaded modules. kilnd talks to it over the channel
 * (protocol/channel.h) with MessagePack-RPC; requests are handled strictly in order on the
 * main thread, which is what makes "operations of a tenant on a device run in order" true.
 * docs/workers.md lists the methods. */
#ifndef KILN_DEVICE_WORKER_WORKER_H
#define KILN_DEVICE_WORKER_WORKER_H

#include <msgpack.h>
#include <sys/types.h>

#include "base/buf.h"
#include "base/map.h"
#include "device/device.h"
#include "protocol/channel.h"

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
  kiln_map_t modules; /* hash of the module key -> module */
  kiln_fdq_t fds;
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

/* One request: params map, fds taken from the queue, result packer. */
typedef struct kiln_dworker_call {
  kiln_dworker_t *w;
  const msgpack_object *params;
  msgpack_packer *pk; /* result (after the head) */
  int fds[KILN_CHANNEL_MAX_FDS];
  int nfds;
} kiln_dworker_call_t;

kiln_status_t kiln_dworker_tensor_method(kiln_dworker_call_t *call, const char *method,
                                         bool *out_found);

kiln_status_t kiln_dworker_module_method(kiln_dworker_call_t *call, const char *method,
                                         bool *out_found);
void kiln_dworker_modules_deinit(kiln_dworker_t *w);

#endif
