/* Tensor storage in the device worker: alloc, upload, write, read, free, sync. Handles are
 * chosen by kilnd (the tensor ids); bulk bytes arrive and leave through shared memory
 * (docs/transfers.md): the request carries an fd and the offset `at` of the bytes in it. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device/worker/worker.h"
#include "protocol/rpc.h"
#include "protocol/shm_pool.h"

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

/* The request's shared memory, at least `need` bytes. kilnd's pool hands out the same
 * large buffers again and again: those stay mapped here, keyed by inode (a mapping keeps
 * its inode alive, so the key cannot be reused while cached), and are mapped and faulted in
 * once per worker instead of once per transfer. Small ones are mapped for this request
 * only (*out_temp holds the length to unmap). A buffer kilnd drops has its pages punched
 * out there, so a stale mapping here holds address space, not memory. */
static kiln_status_t shm_get(kiln_dworker_call_t *call, uint64_t need, uint8_t **out,
                             uint64_t *out_temp) {
  kiln_dworker_t *w = call->w;
  if (call->nfds < 1) return KILN_STATUS(KILN_E_INTERNAL, "request carries no shared memory");
  int fd = call->fds[0];
  struct stat st;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < need)
    return KILN_STATUS(KILN_E_INTERNAL, "shared memory is smaller than the %llu bytes announced",
                       (unsigned long long)need);
  uint64_t size = (uint64_t)st.st_size;
  *out_temp = 0;
  if (size <= KILN_SHM_POOL_MIN) {
    void *map;
    KILN_RETURN_IF_ERROR(kiln_shm_map(fd, size, true, &map));
    *out = map;
    *out_temp = size;
    return KILN_OK;
  }
  kiln_dworker_shm_t *e = NULL, *victim = &w->shm[0];
  for (int i = 0; i < KILN_DWORKER_SHM_CACHE; i++) {
    kiln_dworker_shm_t *c = &w->shm[i];
    if (c->map && c->dev == st.st_dev && c->ino == st.st_ino && c->size == size) {
      e = c;
      break;
    }
    if (victim->map && (!c->map || c->used_at < victim->used_at)) victim = c;
  }
  if (!e) {
    void *map;
    KILN_RETURN_IF_ERROR(kiln_shm_map(fd, size, true, &map));
    if (victim->map) munmap(victim->map, victim->size);
    *victim = (kiln_dworker_shm_t){.dev = st.st_dev, .ino = st.st_ino, .map = map, .size = size};
    e = victim;
  }
  e->used_at = ++w->shm_clock;
  *out = e->map;
  return KILN_OK;
}

/* The `size` bytes at `at` in the request's shared memory. */
static kiln_status_t shm_range(kiln_dworker_call_t *call, uint64_t at, uint64_t size,
                               uint8_t **out, uint64_t *out_temp) {
  if (at > UINT64_MAX - size) return KILN_STATUS(KILN_E_INTERNAL, "shared memory range overflows");
  uint8_t *base = NULL;
  KILN_RETURN_IF_ERROR(shm_get(call, at + size, &base, out_temp));
  *out = base + at;
  return KILN_OK;
}

static void shm_done(uint8_t *p, uint64_t at, uint64_t temp) {
  if (temp) kiln_shm_unmap(p - at, temp);
}

kiln_status_t kiln_dworker_tensor_method(kiln_dworker_call_t *call, const char *method,
                                         bool *out_found) {
  kiln_dworker_t *w = call->w;
  uint64_t handle = 0, bytes = 0, offset = 0, size = 0, at = 0;
  *out_found = true;
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "handle", false, &handle));
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "bytes", false, &bytes));
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "offset", false, &offset));
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "size", false, &size));
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "at", false, &at));
  kiln_dworker_buffer_t *b = NULL;
  if (strcmp(method, "alloc") == 0) {
    KILN_RETURN_IF_ERROR(do_alloc(w, handle, bytes, &b));
    kiln_status_t st = zero_fill(w, b);
    if (st) do_free(w, handle);
    msgpack_pack_nil(call->pk);
    return st;
  }
  if (strcmp(method, "upload") == 0) {
    uint8_t *src;
    uint64_t temp;
    KILN_RETURN_IF_ERROR(shm_range(call, at, bytes, &src, &temp));
    kiln_status_t st = do_alloc(w, handle, bytes, &b);
    if (!st) {
      st = w->backend->copy_in(w->dev, b->mem, 0, src, bytes);
      if (st) do_free(w, handle);
    }
    shm_done(src, at, temp);
    msgpack_pack_nil(call->pk);
    return st;
  }
  if (strcmp(method, "write") == 0 || strcmp(method, "read") == 0) {
    bool is_write = method[0] == 'w';
    KILN_RETURN_IF_ERROR(get_buffer(w, handle, &b));
    if (offset > b->bytes || size > b->bytes - offset)
      return KILN_STATUS(KILN_E_INTERNAL, "range outside buffer %llu", (unsigned long long)handle);
    uint8_t *map;
    uint64_t temp;
    KILN_RETURN_IF_ERROR(shm_range(call, at, size, &map, &temp));
    kiln_status_t st = is_write ? w->backend->copy_in(w->dev, b->mem, offset, map, size)
                                : w->backend->copy_out(w->dev, b->mem, offset, map, size);
    shm_done(map, at, temp);
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
