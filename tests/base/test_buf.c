/* The growable byte buffer. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

Test(buf, append_grows_and_keeps_bytes) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  cr_assert_null(b.data);
  cr_assert_eq(b.len, 0);
  cr_assert_null(kiln_buf_append(&b, "", 0));
  cr_assert_eq(b.len, 0);
  uint8_t chunk[1000];
  for (int round = 0; round < 300; round++) {
    memset(chunk, round, sizeof(chunk));
    cr_assert_null(kiln_buf_append(&b, chunk, (size_t)(round % 7) * 100 + 1));
  }
  size_t off = 0;
  for (int round = 0; round < 300; round++) {
    size_t n = (size_t)(round % 7) * 100 + 1;
    for (size_t i = 0; i < n; i++) cr_assert_eq(b.data[off + i], (uint8_t)round);
    off += n;
  }
  cr_assert_eq(off, b.len);
  cr_assert_geq(b.cap, b.len);
  kiln_buf_deinit(&b);
  cr_assert_null(b.data);
  kiln_buf_deinit(&b);
}

Test(buf, reserve) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  cr_assert_null(kiln_buf_reserve(&b, 10));
  cr_assert_geq(b.cap, 10);
  cr_assert_eq(b.len, 0);
  size_t cap = b.cap;
  cr_assert_null(kiln_buf_reserve(&b, cap)); /* fits: no change */
  cr_assert_eq(b.cap, cap);
  cr_assert_null(kiln_buf_append(&b, "abc", 3));
  cr_assert_null(kiln_buf_reserve(&b, 100000));
  cr_assert_geq(b.cap - b.len, 100000);
  cr_assert_eq(memcmp(b.data, "abc", 3), 0);
  /* Sizes that cannot be had are an error, not an overflow. */
  kiln_status_t s = kiln_buf_reserve(&b, SIZE_MAX);
  cr_assert_eq(kiln_status_code(s), KILN_E_RESOURCE_EXHAUSTED);
  kiln_status_free(s);
  s = kiln_buf_reserve(&b, SIZE_MAX / 2);
  cr_assert_eq(kiln_status_code(s), KILN_E_RESOURCE_EXHAUSTED);
  kiln_status_free(s);
  s = kiln_buf_append(&b, "x", SIZE_MAX - 1);
  cr_assert_eq(kiln_status_code(s), KILN_E_RESOURCE_EXHAUSTED);
  kiln_status_free(s);
  cr_assert_eq(b.len, 3, "a failed append changes nothing");
  kiln_buf_deinit(&b);
}

Test(buf, release_hands_over_the_bytes) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  cr_assert_null(kiln_buf_append(&b, "hello", 5));
  size_t n = 0;
  uint8_t *p = kiln_buf_release(&b, &n);
  cr_assert_eq(n, 5);
  cr_assert_arr_eq(p, "hello", 5);
  cr_assert_null(b.data);
  cr_assert_eq(b.len, 0);
  cr_assert_eq(b.cap, 0);
  free(p);
  /* Reusable afterwards. */
  cr_assert_null(kiln_buf_append(&b, "x", 1));
  cr_assert_eq(b.len, 1);
  kiln_buf_deinit(&b);
  p = kiln_buf_release(&b, &n);
  cr_assert_null(p);
  cr_assert_eq(n, 0);
}
