/* Tensor storage in the device worker: alloc, upload, write, read, free, sync. Handles are
 * chosen by kilnd (the tensor ids); bulk bytes arrive and leave through memfds. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/worker/worker.h"
#include "protocol/rpc.h"

static kiln_status_t get_buffer(kiln_dworker_t *w, uint64_t handle, kiln_dworker_buffer_t **out) {
  kiln_dworker_buffer_t *b = kiln_map_get(&w->buffers, handle);
  if (!b) return KILN_STATUS(KILN_E_NOT_FOUND, "device worker has no buffer %llu",
                             (unsigned long long)handle);
  *out = b;
  return KILN_OK;
}

static kiln_status_t do_alloc(kiln_dworker_t *w, uint64_t handle, uint64_t bytes,
                              kiln_dworker_buffer_t **out) {
  if (kiln_map_get(&w->buffers, handle))
    return KILN_STATUS(KILN_E_INTERNAL, "buffer %llu exists", (unsigned long long)handle);
  kiln_dworker_buffer_t *b = calloc(1, sizeof(*b));
  if (!b) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  kiln_status_t st = w->backend->mem_alloc(w->dev, bytes, &b->mem);
  if (st) {
    free(b);
    return st;
  }
  b->bytes = bytes;
  st = kiln_map_put(&w->buffers, handle, b);
  if (st) {
    w->backend->mem_free(w->dev, b->mem);
    free(b);
    return st;
  }
  *out = b;
  return KILN_OK;
}

static void do_free(kiln_dworker_t *w, uint64_t handle) {
  kiln_dworker_buffer_t *b = kiln_map_remove(&w->buffers, handle);
  if (!b) return;
  w->backend->mem_free(w->dev, b->mem);
  free(b);
}

/* Zero-fill for alloc: protocol says alloc'd memory reads as zeros. */
static kiln_status_t zero_fill(kiln_dworker_t *w, kiln_dworker_buffer_t *b) {
  if (!b->bytes) return KILN_OK;
  void *host = w->backend->mem_host_ptr(w->dev, b->mem);
  if (host) {
    memset(host, 0, b->bytes);
    return KILN_OK;
  }
  static uint8_t zeros[1 << 16];
  for (uint64_t off = 0; off < b->bytes; off += sizeof(zeros)) {
    uint64_t n = b->bytes - off < sizeof(zeros) ? b->bytes - off : sizeof(zeros);
    KILN_RETURN_IF_ERROR(w->backend->copy_in(w->dev, b->mem, off, zeros, n));
  }
  return KILN_OK;
}

static kiln_status_t map_fd(kiln_dworker_call_t *call, uint64_t size, bool writable, void **out) {
  if (call->nfds < 1) return KILN_STATUS(KILN_E_INTERNAL, "request carries no shared memory");
  return kiln_shm_map(call->fds[0], size, writable, out);
}

kiln_status_t kiln_dworker_tensor_method(kiln_dworker_call_t *call, const char *method,
                                         bool *out_found) {
  kiln_dworker_t *w = call->w;
  uint64_t handle = 0, bytes = 0, offset = 0, size = 0;
  *out_found = true;
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "handle", false, &handle));
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "bytes", false, &bytes));
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "offset", false, &offset));
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "size", false, &size));
  kiln_dworker_buffer_t *b = NULL;
  if (strcmp(method, "alloc") == 0) {
    KILN_RETURN_IF_ERROR(do_alloc(w, handle, bytes, &b));
    kiln_status_t st = zero_fill(w, b);
    if (st) do_free(w, handle);
    msgpack_pack_nil(call->pk);
    return st;
  }
  if (strcmp(method, "upload") == 0) {
    void *src;
    KILN_RETURN_IF_ERROR(map_fd(call, bytes, false, &src));
    kiln_status_t st = do_alloc(w, handle, bytes, &b);
    if (!st) {
      st = w->backend->copy_in(w->dev, b->mem, 0, src, bytes);
      if (st) do_free(w, handle);
    }
    kiln_shm_unmap(src, bytes);
    msgpack_pack_nil(call->pk);
    return st;
  }
  if (strcmp(method, "write") == 0 || strcmp(method, "read") == 0) {
    bool is_write = method[0] == 'w';
    KILN_RETURN_IF_ERROR(get_buffer(w, handle, &b));
    if (offset > b->bytes || size > b->bytes - offset)
      return KILN_STATUS(KILN_E_INTERNAL, "range outside buffer %llu", (unsigned long long)handle);
    void *map;
    KILN_RETURN_IF_ERROR(map_fd(call, size, !is_write, &map));
    kiln_status_t st = is_write ? w->backend->copy_in(w->dev, b->mem, offset, map, size)
                                : w->backend->copy_out(w->dev, b->mem, offset, map, size);
    kiln_shm_unmap(map, size);
    msgpack_pack_nil(call->pk);
    return st;
  }
  if (strcmp(method, "free") == 0) {
    do_free(w, handle);
    msgpack_pack_nil(call->pk);
    return KILN_OK;
  }
  if (strcmp(method, "sync") == 0) {
    msgpack_pack_nil(call->pk);
    return KILN_OK;
  }
  *out_found = false;
  return KILN_OK;
}
