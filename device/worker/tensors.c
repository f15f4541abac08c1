/* Tensor jobs in the device worker (protocol/job_tensor.h): alloc, upload, write, read, free,
 * sync. Handles are chosen by kilnd (the tensor ids); bulk bytes arrive and leave through
 * shared memory (docs/transfers.md): the job carries an fd and the offset `at` of the bytes
 * in it. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device/worker/worker.h"
#include "protocol/job_tensor.h"
#include "protocol/shm_pool.h"

static kiln_status_t get_buffer(kiln_dworker_t *w, uint64_t handle, kiln_dworker_buffer_t **out) {
  kiln_dworker_buffer_t *b = kiln_map_get(&w->buffers, handle);
  if (!b) return KILN_STATUS(KILN_E_NOT_FOUND, "device worker has no buffer %llu",
                             (unsigned long long)handle);
  *out = b;
  return KILN_OK;
}

kiln_status_t kiln_dworker_buffer_alloc(kiln_dworker_t *w, uint64_t handle, uint64_t bytes,
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

void kiln_dworker_buffer_free(kiln_dworker_t *w, uint64_t handle) {
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
static kiln_status_t shm_get(kiln_dworker_t *w, int fd, uint64_t need, uint8_t **out,
                             uint64_t *out_temp) {
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
static kiln_status_t shm_range(kiln_dworker_t *w, int fd, uint64_t at, uint64_t size,
                               uint8_t **out, uint64_t *out_temp) {
  if (at > UINT64_MAX - size) return KILN_STATUS(KILN_E_INTERNAL, "shared memory range overflows");
  uint8_t *base = NULL;
  KILN_RETURN_IF_ERROR(shm_get(w, fd, at + size, &base, out_temp));
  *out = base + at;
  return KILN_OK;
}

static void shm_done(uint8_t *p, uint64_t at, uint64_t temp) {
  if (temp) kiln_shm_unmap(p - at, temp);
}

kiln_status_t kiln_dworker_tensor_job(kiln_dworker_t *w, kiln_job_call_t *call, bool *out_found) {
  *out_found = kiln_job_is_tensor(call->kind);
  if (!*out_found) return KILN_OK;
  kiln_tensor_job_t j;
  KILN_RETURN_IF_ERROR(kiln_tensor_job_decode(call->kind, call->job, &j));
  int fd = call->nfds ? call->fds[0] : -1;
  kiln_dworker_buffer_t *b = NULL;
  kiln_status_t st = KILN_OK;
  msgpack_pack_nil(call->reply);
  switch (j.kind) {
    case KILN_JOB_ALLOC:
      KILN_RETURN_IF_ERROR(kiln_dworker_buffer_alloc(w, j.handle, j.bytes, &b));
      st = zero_fill(w, b);
      if (st) kiln_dworker_buffer_free(w, j.handle);
      return st;
    case KILN_JOB_UPLOAD: {
      uint8_t *src;
      uint64_t temp;
      KILN_RETURN_IF_ERROR(shm_range(w, fd, j.at, j.bytes, &src, &temp));
      st = kiln_dworker_buffer_alloc(w, j.handle, j.bytes, &b);
      if (!st) {
        st = w->backend->copy_in(w->dev, b->mem, 0, src, j.bytes);
        if (st) kiln_dworker_buffer_free(w, j.handle);
      }
      shm_done(src, j.at, temp);
      return st;
    }
    case KILN_JOB_WRITE:
    case KILN_JOB_READ: {
      KILN_RETURN_IF_ERROR(get_buffer(w, j.handle, &b));
      if (j.offset > b->bytes || j.size > b->bytes - j.offset)
        return KILN_STATUS(KILN_E_INTERNAL, "range outside buffer %llu", (unsigned long long)j.handle);
      uint8_t *map;
      uint64_t temp;
      KILN_RETURN_IF_ERROR(shm_range(w, fd, j.at, j.size, &map, &temp));
      st = j.kind == KILN_JOB_WRITE ? w->backend->copy_in(w->dev, b->mem, j.offset, map, j.size)
                                    : w->backend->copy_out(w->dev, b->mem, j.offset, map, j.size);
      shm_done(map, j.at, temp);
      return st;
    }
    case KILN_JOB_FREE:
      kiln_dworker_buffer_free(w, j.handle);
      return KILN_OK;
    default: /* sync: ordered behind what came before, nothing to do */
      return KILN_OK;
  }
}
