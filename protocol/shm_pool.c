#include "protocol/shm_pool.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "protocol/channel.h"

#define PAGE 4096ull

void kiln_shm_pool_init(kiln_shm_pool_t *p, uint64_t max_bytes, uint32_t max_buffers) {
  *p = (kiln_shm_pool_t){.max_bytes = max_bytes, .max_buffers = max_buffers};
}

uint64_t kiln_shm_pool_class(uint64_t size) {
  if (size <= KILN_SHM_POOL_MIN) return (size + PAGE - 1) & ~(PAGE - 1);
  /* Four classes per power of two: at most a quarter wasted, and virtual only (pages are
   * made by first touch). */
  int k = 63 - __builtin_clzll(size - 1);
  uint64_t step = (1ull << k) / 4;
  return (size + step - 1) / step * step;
}

static void destroy(kiln_shm_pool_t *p, kiln_shm_buf_t *b) {
  /* A worker may still map a buffer it was shown; punching the pages out frees the memory
   * now instead of when that worker drops its mapping. */
  if (b->owner) fallocate(b->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)b->cap);
  kiln_shm_unmap(b->map, b->cap);
  close(b->fd);
  free(b);
  p->destroyed++;
}

static void unlink_buf(kiln_shm_pool_t *p, kiln_shm_buf_t *b) {
  if (b->prev) b->prev->next = b->next;
  else p->head = b->next;
  if (b->next) b->next->prev = b->prev;
  else p->tail = b->prev;
  b->prev = b->next = NULL;
  b->pooled = false;
  p->pooled_bytes -= b->cap;
  p->pooled_count--;
}

void kiln_shm_pool_deinit(kiln_shm_pool_t *p) {
  while (p->head) {
    kiln_shm_buf_t *b = p->head;
    unlink_buf(p, b);
    destroy(p, b);
  }
  p->max_bytes = 0;
  p->max_buffers = 0;
}

kiln_status_t kiln_shm_pool_get(kiln_shm_pool_t *p, uint64_t size, uint32_t owner,
                                kiln_shm_buf_t **out) {
  uint64_t cap = kiln_shm_pool_class(size ? size : 1);
  if (cap > KILN_SHM_POOL_MIN) {
    kiln_shm_buf_t *unowned = NULL;
    for (kiln_shm_buf_t *b = p->head; b; b = b->next) {
      if (b->cap != cap) continue;
      if (owner && b->owner == owner) {
        unowned = b;
        break;
      }
      if (!b->owner && !unowned) unowned = b;
    }
    if (unowned) {
      unlink_buf(p, unowned);
      if (owner) unowned->owner = owner;
      p->hits++;
      *out = unowned;
      return KILN_OK;
    }
  }
  p->misses++;
  kiln_shm_buf_t *b = calloc(1, sizeof(*b));
  if (!b) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  void *map = NULL;
  kiln_status_t st = kiln_shm_create("kiln-bulk", cap, &b->fd, &map);
  if (st) {
    free(b);
    return st;
  }
  b->map = map;
  b->cap = cap;
  b->owner = owner;
  *out = b;
  return KILN_OK;
}

void kiln_shm_pool_put(kiln_shm_pool_t *p, kiln_shm_buf_t *b) {
  if (!b) return;
  if (b->cap <= KILN_SHM_POOL_MIN || b->cap > p->max_bytes || !p->max_buffers) {
    destroy(p, b);
    return;
  }
  b->prev = NULL;
  b->next = p->head;
  if (p->head) p->head->prev = b;
  else p->tail = b;
  p->head = b;
  b->pooled = true;
  b->idle = 0;
  p->pooled_bytes += b->cap;
  p->pooled_count++;
  while (p->pooled_bytes > p->max_bytes || p->pooled_count > p->max_buffers) {
    kiln_shm_buf_t *old = p->tail;
    unlink_buf(p, old);
    destroy(p, old);
  }
}

void kiln_shm_pool_trim(kiln_shm_pool_t *p, uint32_t max_idle) {
  for (kiln_shm_buf_t *b = p->head; b;) {
    kiln_shm_buf_t *next = b->next;
    if (++b->idle > max_idle) {
      unlink_buf(p, b);
      destroy(p, b);
    }
    b = next;
  }
}
