/* Hashing (BLAKE2b-256 known answers), hex, random ids, clocks, constant-time compare. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/util.h"

static void init(void) {
  kiln_status_t s = kiln_crypto_init();
  cr_assert_null(s);
}

TestSuite(util, .init = init);

static void hex_of_hash(const void *p, size_t n, char out[2 * KILN_HASH_BYTES + 1]) {
  uint8_t h[KILN_HASH_BYTES];
  kiln_hash(p, n, h);
  kiln_hex(h, sizeof(h), out);
}

/* BLAKE2b with a 32-byte digest and no key, as libsodium's crypto_generichash computes it
 * (the same values as Python's hashlib.blake2b(digest_size=32)). */
Test(util, blake2b_256_known_answers) {
  char hex[2 * KILN_HASH_BYTES + 1];
  hex_of_hash("", 0, hex);
  cr_assert_str_eq(hex, "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8");
  hex_of_hash("abc", 3, hex);
  cr_assert_str_eq(hex, "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319");
  hex_of_hash("The quick brown fox jumps over the lazy dog", 43, hex);
  cr_assert_str_eq(hex, "01718cec35cd3d796dd00020e0bfecb473ad23457d063b75eff29c0ffa2e58a9");
}

Test(util, incremental_equals_one_shot) {
  static uint8_t data[100000];
  for (size_t i = 0; i < sizeof(data); i++) data[i] = (uint8_t)(i * 131 + (i >> 8));
  uint8_t one[KILN_HASH_BYTES], inc[KILN_HASH_BYTES];
  kiln_hash(data, sizeof(data), one);
  kiln_hasher_t h;
  kiln_hasher_init(&h);
  size_t off = 0, step = 1;
  while (off < sizeof(data)) {
    size_t n = step < sizeof(data) - off ? step : sizeof(data) - off;
    kiln_hasher_update(&h, data + off, n);
    off += n;
    step = step * 3 + 1;
  }
  kiln_hasher_final(&h, inc);
  cr_assert_arr_eq(one, inc, KILN_HASH_BYTES);
}

Test(util, fields_are_length_prefixed) {
  uint8_t a[KILN_HASH_BYTES], b[KILN_HASH_BYTES];
  kiln_hasher_t h;
  kiln_hasher_init(&h);
  kiln_hasher_field(&h, "ab", 2);
  kiln_hasher_field(&h, "c", 1);
  kiln_hasher_final(&h, a);
  kiln_hasher_init(&h);
  kiln_hasher_field(&h, "a", 1);
  kiln_hasher_field(&h, "bc", 2);
  kiln_hasher_final(&h, b);
  cr_assert(memcmp(a, b, sizeof(a)) != 0);
  /* A field is its 8-byte length then its bytes. */
  uint8_t c[KILN_HASH_BYTES];
  uint64_t len = 2;
  uint8_t raw[10];
  memcpy(raw, &len, 8);
  memcpy(raw + 8, "ab", 2);
  kiln_hash(raw, sizeof(raw), c);
  kiln_hasher_init(&h);
  kiln_hasher_field(&h, "ab", 2);
  kiln_hasher_final(&h, a);
  cr_assert_arr_eq(a, c, KILN_HASH_BYTES);
}

Test(util, hex) {
  char out[2 * 5 + 1];
  kiln_hex((const uint8_t[]){0x00, 0x01, 0xab, 0xf0, 0xff}, 5, out);
  cr_assert_str_eq(out, "0001abf0ff");
  char empty[1] = {'x'};
  kiln_hex(NULL, 0, empty);
  cr_assert_eq(empty[0], 0);
}

Test(util, random_ids) {
  enum { N = 100000 };
  static uint64_t ids[N];
  uint64_t or_all = 0;
  for (int i = 0; i < N; i++) {
    ids[i] = kiln_random_id();
    cr_assert_neq(ids[i], 0);
    cr_assert_lt(ids[i], 1ULL << 63);
    or_all |= ids[i];
  }
  /* Every bit below 2^63 shows up somewhere; no repeats (2^-26 odds of a false failure). */
  cr_assert_eq(or_all, (1ULL << 63) - 1);
  for (int i = 1; i < N; i++) cr_assert_neq(ids[i], ids[i - 1]);
}

Test(util, clock_is_monotonic) {
  uint64_t a = kiln_now_ns();
  uint64_t b = kiln_now_ns();
  cr_assert_geq(b, a);
  cr_assert_gt(a, 0);
}

Test(util, secret_compare) {
  cr_assert_eq(kiln_secret_compare("token-1", "token-1", 7), 0);
  cr_assert_neq(kiln_secret_compare("token-1", "token-2", 7), 0);
  cr_assert_eq(kiln_secret_compare("a", "b", 0), 0);
}

struct outer {
  int a;
  double b;
  char c;
};

Test(util, macros) {
  struct outer o;
  cr_assert_eq(KILN_CONTAINER_OF(&o.c, struct outer, c), &o);
  cr_assert_eq(KILN_CONTAINER_OF(&o.b, struct outer, b), &o);
  int arr[7];
  cr_assert_eq(KILN_ARRAY_SIZE(arr), 7);
  cr_assert_eq(KILN_MIN(3, -2), -2);
  cr_assert_eq(KILN_MAX(3u, 9u), 9u);
}
