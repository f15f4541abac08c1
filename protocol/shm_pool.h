/* A pool of reusable shared-memory buffers for bulk bytes between kilnd and its workers
 * (docs/transfers.md).
 *
 * A fresh memfd costs the kernel one zeroed page per 4 KiB touched (about 1 GB/s on the
 * machines we measured) and its munmap/close several milliseconds per 64 MiB; a buffer that
 * is reused costs neither, and a worker that keeps it mapped pays no page faults either.
 * Buffers above KILN_SHM_POOL_MIN are rounded up to size classes (four per power of two) and
 * return to the pool when their transfer ends; smaller ones are made and destroyed per use.
 *
 * A buffer is owned by one transfer at a time: _get hands it out, _put takes it back. The
 * `owner` tag keeps tenants apart: a buffer that was shown to one tenant's workers (which
 * may keep it mapped, and run that tenant's code) is never handed to another tenant.
 * A buffer the pool destroys has its pages punched out first, so that the memory is freed
 * even while a worker still maps it.
 *
 * Caller storage (_init/_deinit). One thread (kilnd's loop). */
#ifndef KILN_PROTOCOL_SHM_POOL_H
#define KILN_PROTOCOL_SHM_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define KILN_SHM_POOL_MIN (1u << 20) /* buffers above this size are pooled */

typedef struct kiln_shm_buf {
  int fd;
  uint8_t *map; /* the whole buffer, read-write */
  uint64_t cap;
  uint32_t owner; /* 0: never shown to a worker; else the only tag that may get it again */
  bool pooled;
  uint32_t idle; /* trims survived while pooled */
  struct kiln_shm_buf *prev, *next; /* the pool's list while pooled */
} kiln_shm_buf_t;

typedef struct kiln_shm_pool {
  uint64_t max_bytes;   /* capacity kept pooled at most */
  uint32_t max_buffers; /* buffers kept pooled at most (each holds an fd) */
  uint64_t pooled_bytes;
  uint32_t pooled_count;
  kiln_shm_buf_t *head, *tail; /* head: most recently returned */
  /* statistics */
  uint64_t hits, misses, destroyed;
} kiln_shm_pool_t;

void kiln_shm_pool_init(kiln_shm_pool_t *p, uint64_t max_bytes, uint32_t max_buffers);
/* Destroys the pooled buffers; buffers still out are destroyed when they are put. */
void kiln_shm_pool_deinit(kiln_shm_pool_t *p);

/* The capacity a buffer for `size` bytes gets (its size class, or `size` rounded to pages
 * when too small to pool). */
uint64_t kiln_shm_pool_class(uint64_t size);

/* A buffer of at least `size` bytes for tag `owner` (0 when not known yet): a pooled one of
 * the same class that is unowned or already this owner's, else a new one. Its pages are
 * populated when they were used before; a new buffer's pages are made by first touch. */
KILN_MUST_USE kiln_status_t kiln_shm_pool_get(kiln_shm_pool_t *p, uint64_t size, uint32_t owner,
                                kiln_shm_buf_t **out);
/* Takes a buffer back: pooled while within the bounds (the least recently returned go
 * first), destroyed otherwise. */
void kiln_shm_pool_put(kiln_shm_pool_t *p, kiln_shm_buf_t *b);
/* Destroys buffers that stayed pooled through `max_idle` calls of this (kilnd calls it once
 * a second), so that memory kept for a burst of transfers goes back once it is over. */
void kiln_shm_pool_trim(kiln_shm_pool_t *p, uint32_t max_idle);

#endif
