/* The u64 -> pointer map: insert/replace/remove, tombstones reused, growth, iteration that
 * removes as it goes, reserved keys, FNV-1a known answers. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "base/map.h"

#define V(x) ((void *)(uintptr_t)(x))

Test(map, empty_map) {
  kiln_map_t m;
  kiln_map_init(&m);
  cr_assert_null(kiln_map_get(&m, 1));
  cr_assert_null(kiln_map_remove(&m, 1));
  size_t it = 0;
  cr_assert_eq(kiln_map_next(&m, &it, NULL, NULL), 0);
  kiln_map_deinit(&m);
  kiln_map_deinit(&m);
}

Test(map, put_get_replace_remove) {
  kiln_map_t m;
  kiln_map_init(&m);
  cr_assert_null(kiln_map_put(&m, 7, V(70)));
  cr_assert_null(kiln_map_put(&m, 8, V(80)));
  cr_assert_eq(kiln_map_get(&m, 7), V(70));
  cr_assert_eq(kiln_map_get(&m, 8), V(80));
  cr_assert_null(kiln_map_get(&m, 9));
  cr_assert_null(kiln_map_put(&m, 7, V(71)));
  cr_assert_eq(kiln_map_get(&m, 7), V(71));
  cr_assert_eq(m.count, 2);
  cr_assert_eq(kiln_map_remove(&m, 7), V(71));
  cr_assert_null(kiln_map_get(&m, 7));
  cr_assert_null(kiln_map_remove(&m, 7));
  cr_assert_eq(m.count, 1);
  cr_assert_eq(kiln_map_get(&m, 8), V(80));
  /* A NULL value is stored like any other. */
  cr_assert_null(kiln_map_put(&m, 5, NULL));
  cr_assert_eq(m.count, 2);
  kiln_map_deinit(&m);
}

Test(map, reserved_keys) {
  kiln_map_t m;
  kiln_map_init(&m);
  kiln_status_t s = kiln_map_put(&m, 0, V(1));
  cr_assert_eq(kiln_status_code(s), KILN_E_INTERNAL);
  kiln_status_free(s);
  s = kiln_map_put(&m, UINT64_MAX, V(1));
  cr_assert_eq(kiln_status_code(s), KILN_E_INTERNAL);
  kiln_status_free(s);
  cr_assert_null(kiln_map_put(&m, 1, V(1)));
  cr_assert_null(kiln_map_get(&m, 0));
  cr_assert_null(kiln_map_get(&m, UINT64_MAX));
  cr_assert_null(kiln_map_remove(&m, UINT64_MAX));
  cr_assert_eq(m.count, 1);
  kiln_map_deinit(&m);
}

/* Inserting and removing forever must not grow the table: tombstones are reused or swept. */
Test(map, tombstones_do_not_grow_the_table) {
  kiln_map_t m;
  kiln_map_init(&m);
  for (uint64_t k = 1; k <= 8; k++) cr_assert_null(kiln_map_put(&m, k, V(k)));
  /* A sweep may double the table once (it keeps the load under 1/2); after that it only
   * rehashes in place. */
  size_t cap = 0;
  for (uint64_t k = 100; k < 100000; k++) {
    cr_assert_null(kiln_map_put(&m, k, V(k)));
    cr_assert_eq(kiln_map_remove(&m, k), V(k));
    cr_assert_leq(m.used * 4, m.cap * 3);
    if (k == 1000) cap = m.cap;
  }
  cr_assert_leq(cap, 32);
  cr_assert_eq(m.cap, cap, "cap went from %zu to %zu", cap, m.cap);
  cr_assert_eq(m.count, 8);
  for (uint64_t k = 1; k <= 8; k++) cr_assert_eq(kiln_map_get(&m, k), V(k));
  /* A key removed and put back lands once (not once per tombstone). */
  cr_assert_eq(kiln_map_remove(&m, 3), V(3));
  cr_assert_null(kiln_map_put(&m, 3, V(33)));
  cr_assert_null(kiln_map_put(&m, 3, V(34)));
  cr_assert_eq(m.count, 8);
  cr_assert_eq(kiln_map_remove(&m, 3), V(34));
  cr_assert_null(kiln_map_get(&m, 3));
  kiln_map_deinit(&m);
}

/* A lookup probes past tombstones to the key behind them. */
Test(map, lookup_past_tombstones) {
  kiln_map_t m;
  kiln_map_init(&m);
  for (uint64_t k = 1; k <= 11; k++) cr_assert_null(kiln_map_put(&m, k, V(k)));
  for (uint64_t k = 1; k <= 11; k += 2) cr_assert_eq(kiln_map_remove(&m, k), V(k));
  for (uint64_t k = 2; k <= 11; k += 2) cr_assert_eq(kiln_map_get(&m, k), V(k));
  for (uint64_t k = 2; k <= 11; k += 2) cr_assert_null(kiln_map_put(&m, k, V(k + 100)));
  cr_assert_eq(m.count, 5);
  for (uint64_t k = 2; k <= 11; k += 2) cr_assert_eq(kiln_map_get(&m, k), V(k + 100));
  kiln_map_deinit(&m);
}

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

Test(map, growth_with_many_keys) {
  kiln_map_t m;
  kiln_map_init(&m);
  enum { N = 200000 };
  uint64_t seed = 42;
  uint64_t *keys = malloc(N * sizeof(uint64_t));
  for (size_t i = 0; i < N; i++) {
    /* Half sequential, half random: both must spread. */
    keys[i] = i % 2 ? i + 1 : (rnd(&seed) | 1) & 0x7fffffffffffffffULL;
    cr_assert_null(kiln_map_put(&m, keys[i], V(i)));
  }
  cr_assert_eq(m.count, N);
  cr_assert_eq(m.cap & (m.cap - 1), 0, "cap is a power of two");
  cr_assert_leq(m.used * 4, m.cap * 3);
  for (size_t i = 0; i < N; i++) cr_assert_eq(kiln_map_get(&m, keys[i]), V(i));
  for (size_t i = 0; i < N; i += 3) cr_assert_eq(kiln_map_remove(&m, keys[i]), V(i));
  for (size_t i = 0; i < N; i++)
    cr_assert_eq(kiln_map_get(&m, keys[i]), i % 3 ? V(i) : NULL, "key %zu", i);
  free(keys);
  kiln_map_deinit(&m);
}

Test(map, iteration_visits_each_entry_once) {
  kiln_map_t m;
  kiln_map_init(&m);
  enum { N = 1000 };
  static unsigned char seen[N + 1];
  for (uint64_t k = 1; k <= N; k++) cr_assert_null(kiln_map_put(&m, k * 977, V(k)));
  for (uint64_t k = 1; k <= N; k += 4) kiln_map_remove(&m, k * 977);
  uint64_t key;
  void *val;
  size_t n = 0;
  for (size_t it = 0; kiln_map_next(&m, &it, &key, &val);) {
    uint64_t k = (uint64_t)(uintptr_t)val;
    cr_assert_eq(key, k * 977);
    cr_assert_eq(seen[k]++, 0, "key %llu twice", (unsigned long long)key);
    cr_assert_neq(k % 4, 1, "removed key %llu visited", (unsigned long long)key);
    n++;
  }
  cr_assert_eq(n, m.count);
  cr_assert_eq(n, N - N / 4);
  kiln_map_deinit(&m);
}

Test(map, iteration_removing_each_entry) {
  kiln_map_t m;
  kiln_map_init(&m);
  for (uint64_t k = 1; k <= 500; k++) cr_assert_null(kiln_map_put(&m, k, V(k)));
  uint64_t key;
  size_t n = 0, sum = 0;
  for (size_t it = 0; kiln_map_next(&m, &it, &key, NULL);) {
    if (key % 2) {
      cr_assert_eq(kiln_map_remove(&m, key), V(key));
    }
    sum += key;
    n++;
  }
  cr_assert_eq(n, 500);
  cr_assert_eq(sum, 500 * 501 / 2);
  cr_assert_eq(m.count, 250);
  n = 0;
  for (size_t it = 0; kiln_map_next(&m, &it, &key, NULL);) {
    cr_assert_eq(key % 2, 0);
    kiln_map_remove(&m, key);
    n++;
  }
  cr_assert_eq(n, 250);
  cr_assert_eq(m.count, 0);
  size_t it = 0;
  cr_assert_eq(kiln_map_next(&m, &it, NULL, NULL), 0);
  kiln_map_deinit(&m);
}

/* FNV-1a 64 reference values (the FNV authors' test suite). */
Test(map, fnv1a_known_answers) {
  cr_assert_eq(kiln_hash_bytes64("", 0), 0xcbf29ce484222325ULL);
  cr_assert_eq(kiln_hash_bytes64("a", 1), 0xaf63dc4c8601ec8cULL);
  cr_assert_eq(kiln_hash_bytes64("foobar", 6), 0x85944171f73967e8ULL);
}
