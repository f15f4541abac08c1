/* The shared-memory pool: size classes, reuse, owners kept apart, bounds, and pages punched
 * out of a destroyed buffer that someone else still maps. */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "protocol/shm_pool.h"

#define MiB (1ull << 20)

Test(shm_pool, classes) {
  cr_assert_eq(kiln_shm_pool_class(1), 4096);
  cr_assert_eq(kiln_shm_pool_class(MiB), MiB);
  cr_assert_eq(kiln_shm_pool_class(MiB + 1), MiB + MiB / 4);
  cr_assert_eq(kiln_shm_pool_class(256 * MiB), 256 * MiB);
  cr_assert_eq(kiln_shm_pool_class(256 * MiB + 100), 320 * MiB);
  cr_assert_eq(kiln_shm_pool_class(64 * MiB + 65536 + 100), 80 * MiB);
  for (uint64_t n = MiB + 1; n < 64 * MiB; n = n * 3 / 2 + 7) {
    uint64_t c = kiln_shm_pool_class(n);
    cr_assert(c >= n && c < n + n / 4 + 1, "class %llu for %llu", (unsigned long long)c,
              (unsigned long long)n);
  }
}

Test(shm_pool, reuse_by_class_and_owner) {
  kiln_shm_pool_t p;
  kiln_shm_pool_init(&p, 64 * MiB, 8);
  kiln_shm_buf_t *a, *b;
  cr_assert_null(kiln_shm_pool_get(&p, 3 * MiB, 0, &a));
  cr_assert_geq(a->cap, 3 * MiB);
  memset(a->map, 1, a->cap);
  kiln_shm_buf_t *first = a;
  kiln_shm_pool_put(&p, a);
  cr_assert_eq(p.pooled_count, 1);
  /* Same class, unowned: reused, and tagged by the new owner. */
  cr_assert_null(kiln_shm_pool_get(&p, 3 * MiB - 5, 7, &b));
  cr_assert_eq(b, first);
  cr_assert_eq(b->owner, 7);
  cr_assert_eq(p.hits, 1);
  kiln_shm_pool_put(&p, b);
  /* Another owner never gets it. */
  cr_assert_null(kiln_shm_pool_get(&p, 3 * MiB, 8, &a));
  cr_assert_neq(a, first);
  /* Owner 0 (not known yet) does not get an owned buffer either. */
  cr_assert_null(kiln_shm_pool_get(&p, 3 * MiB, 0, &b));
  cr_assert_neq(b, first);
  kiln_shm_pool_put(&p, a);
  kiln_shm_pool_put(&p, b);
  /* The owner does. */
  cr_assert_null(kiln_shm_pool_get(&p, 3 * MiB, 7, &a));
  cr_assert_eq(a, first);
  cr_assert_eq(a->map[0], 1);
  kiln_shm_pool_put(&p, a);
  /* Another class: a new buffer. */
  cr_assert_null(kiln_shm_pool_get(&p, 9 * MiB, 7, &a));
  cr_assert_neq(a, first);
  kiln_shm_pool_put(&p, a);
  kiln_shm_pool_deinit(&p);
  cr_assert_eq(p.pooled_count, 0);
  cr_assert_eq(p.pooled_bytes, 0);
}

Test(shm_pool, small_buffers_are_not_pooled) {
  kiln_shm_pool_t p;
  kiln_shm_pool_init(&p, 64 * MiB, 8);
  kiln_shm_buf_t *a;
  cr_assert_null(kiln_shm_pool_get(&p, 100, 0, &a));
  cr_assert_eq(a->cap, 4096);
  kiln_shm_pool_put(&p, a);
  cr_assert_eq(p.pooled_count, 0);
  cr_assert_eq(p.destroyed, 1);
  kiln_shm_pool_deinit(&p);
}

Test(shm_pool, bounds_evict_the_oldest) {
  kiln_shm_pool_t p;
  kiln_shm_pool_init(&p, 10 * MiB, 3);
  kiln_shm_buf_t *b[5];
  for (int i = 0; i < 5; i++) cr_assert_null(kiln_shm_pool_get(&p, 2 * MiB, 1, &b[i]));
  for (int i = 0; i < 5; i++) kiln_shm_pool_put(&p, b[i]);
  cr_assert_eq(p.pooled_count, 3, "count bound: %u pooled", p.pooled_count);
  cr_assert_leq(p.pooled_bytes, 10 * MiB);
  /* The most recently returned stay. */
  kiln_shm_buf_t *got;
  cr_assert_null(kiln_shm_pool_get(&p, 2 * MiB, 1, &got));
  cr_assert_eq(got, b[4]);
  kiln_shm_pool_put(&p, got);
  /* A buffer larger than the byte bound is never pooled. */
  cr_assert_null(kiln_shm_pool_get(&p, 11 * MiB, 1, &got));
  kiln_shm_pool_put(&p, got);
  cr_assert_eq(p.pooled_count, 3);
  kiln_shm_pool_deinit(&p);
}

/* A worker may still map a buffer the pool destroys: its pages are freed anyway. */
Test(shm_pool, destroyed_buffer_is_punched_out) {
  kiln_shm_pool_t p;
  kiln_shm_pool_init(&p, 4 * MiB, 1);
  kiln_shm_buf_t *a, *b;
  cr_assert_null(kiln_shm_pool_get(&p, 2 * MiB, 1, &a));
  memset(a->map, 0x5A, a->cap);
  uint64_t cap = a->cap;
  int fd = dup(a->fd);
  uint8_t *other = mmap(NULL, cap, PROT_READ, MAP_SHARED, fd, 0);
  cr_assert_neq(other, MAP_FAILED);
  cr_assert_eq(other[cap - 1], 0x5A);
  cr_assert_null(kiln_shm_pool_get(&p, 2 * MiB, 1, &b));
  kiln_shm_pool_put(&p, a);
  kiln_shm_pool_put(&p, b); /* over the count bound: a, the oldest, is destroyed */
  cr_assert_eq(p.destroyed, 1);
  cr_assert_eq(other[0], 0);
  cr_assert_eq(other[cap - 1], 0);
  munmap(other, cap);
  close(fd);
  kiln_shm_pool_deinit(&p);
}

Test(shm_pool, trim_destroys_idle_buffers) {
  kiln_shm_pool_t p;
  kiln_shm_pool_init(&p, 64 * MiB, 8);
  kiln_shm_buf_t *a, *b;
  cr_assert_null(kiln_shm_pool_get(&p, 2 * MiB, 1, &a));
  cr_assert_null(kiln_shm_pool_get(&p, 4 * MiB, 1, &b));
  kiln_shm_pool_put(&p, a);
  kiln_shm_pool_trim(&p, 2);
  kiln_shm_pool_trim(&p, 2);
  kiln_shm_pool_put(&p, b);
  cr_assert_eq(p.pooled_count, 2);
  kiln_shm_pool_trim(&p, 2); /* a: third trim, destroyed; b: first */
  cr_assert_eq(p.pooled_count, 1);
  cr_assert_eq(p.head, b);
  /* Getting and putting back starts the count again. */
  cr_assert_null(kiln_shm_pool_get(&p, 4 * MiB, 1, &a));
  cr_assert_eq(a, b);
  kiln_shm_pool_trim(&p, 2);
  kiln_shm_pool_put(&p, a);
  kiln_shm_pool_trim(&p, 2);
  kiln_shm_pool_trim(&p, 2);
  cr_assert_eq(p.pooled_count, 1);
  kiln_shm_pool_trim(&p, 2);
  cr_assert_eq(p.pooled_count, 0);
  kiln_shm_pool_deinit(&p);
}
