/* The fleet library on its own (server/fleet/): the remote entry format under hostile bytes
 * (every truncation, every flipped bit, another key, another secret, oversized lengths) and
 * the Redis URL parser. The Redis tier against a real redis-server and real kilnds is
 * tests/python/test_fleet_cache.py. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "server/fleet/remote.h"

static const uint8_t secret[32] = "0123456789abcdef0123456789abcdef";

static uint8_t *sealed(const uint8_t key[32], const uint8_t *p, size_t n) {
  uint8_t *e = malloc(KILN_REMOTE_HEADER_BYTES + n);
  cr_assert(kiln_remote_seal(secret, sizeof(secret), key, p, n, e));
  return e;
}

Test(fleet, an_entry_opens_with_its_key_and_secret_only) {
  uint8_t key[32] = {1, 2, 3}, other[32] = {1, 2, 4};
  uint8_t payload[300];
  for (size_t i = 0; i < sizeof(payload); i++) payload[i] = (uint8_t)(i * 7);
  uint8_t *e = sealed(key, payload, sizeof(payload));
  size_t n = KILN_REMOTE_HEADER_BYTES + sizeof(payload), len = 0;
  const char *why = NULL;
  const uint8_t *p = kiln_remote_open(secret, sizeof(secret), key, e, n, 1 << 20, &len, &why);
  cr_assert(p && len == sizeof(payload) && memcmp(p, payload, len) == 0);
  cr_expect_null(kiln_remote_open(secret, sizeof(secret), other, e, n, 1 << 20, &len, &why));
  uint8_t secret2[32];
  memcpy(secret2, secret, 32);
  secret2[31] ^= 1;
  cr_expect_null(kiln_remote_open(secret2, sizeof(secret2), key, e, n, 1 << 20, &len, &why));
  /* the bound: a payload over max_bytes is refused even with a good MAC */
  cr_expect_null(kiln_remote_open(secret, sizeof(secret), key, e, n, sizeof(payload) - 1, &len, &why));
  free(e);
}

Test(fleet, every_truncation_and_every_flipped_bit_is_refused) {
  uint8_t key[32] = {9};
  uint8_t payload[64];
  memset(payload, 0x5a, sizeof(payload));
  size_t n = KILN_REMOTE_HEADER_BYTES + sizeof(payload), len;
  uint8_t *e = sealed(key, payload, sizeof(payload));
  const char *why;
  for (size_t cut = 0; cut < n; cut++)
    cr_expect_null(kiln_remote_open(secret, sizeof(secret), key, e, cut, 1 << 20, &len, &why), "cut %zu", cut);
  uint8_t *longer = malloc(n + 1);
  memcpy(longer, e, n);
  longer[n] = 0;
  cr_expect_null(kiln_remote_open(secret, sizeof(secret), key, longer, n + 1, 1 << 20, &len, &why));
  free(longer);
  for (size_t bit = 0; bit < n * 8; bit++) {
    e[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    cr_expect_null(kiln_remote_open(secret, sizeof(secret), key, e, n, 1 << 20, &len, &why), "bit %zu", bit);
    e[bit / 8] ^= (uint8_t)(1u << (bit % 8));
  }
  cr_expect_not_null(kiln_remote_open(secret, sizeof(secret), key, e, n, 1 << 20, &len, &why));
  free(e);
}

/* The MAC fails closed (REVIEW F3): an entry whose MAC field is all zeros (what mac() once wrote
 * when libcrypto failed) never opens, and when the MAC cannot be computed (here: a secret shorter
 * than read_secret allows, the one failure a test can provoke) seal says so and open refuses. */
Test(fleet, an_uncomputable_or_all_zero_mac_is_refused) {
  uint8_t key[32] = {5}, payload[40];
  memset(payload, 0x33, sizeof(payload));
  size_t n = KILN_REMOTE_HEADER_BYTES + sizeof(payload), len = 0;
  uint8_t *e = sealed(key, payload, sizeof(payload));
  const char *why = NULL;
  cr_assert_not_null(kiln_remote_open(secret, sizeof(secret), key, e, n, 1 << 20, &len, &why));
  memset(e + 48, 0, 32);
  cr_expect_null(kiln_remote_open(secret, sizeof(secret), key, e, n, 1 << 20, &len, &why));
  cr_expect_null(kiln_remote_open(secret, 0, key, e, n, 1 << 20, &len, &why));
  cr_expect_str_eq(why, "cannot compute the MAC (libcrypto failed): refused");
  cr_expect_null(kiln_remote_open(secret, 16, key, e, n, 1 << 20, &len, &why));
  cr_expect_not(kiln_remote_seal(secret, 0, key, payload, sizeof(payload), e));
  free(e);
}

Test(fleet, random_bytes_never_open) {
  uint8_t key[32] = {0};
  srand(17);
  for (int round = 0; round < 2000; round++) {
    size_t n = (size_t)(rand() % 300);
    uint8_t *b = malloc(n + 1);
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rand();
    if (n >= 8 && round % 2) memcpy(b, "KILNRMT1", 8); /* past the magic, into the length */
    size_t len;
    const char *why;
    cr_expect_null(kiln_remote_open(secret, sizeof(secret), key, b, n, 1 << 20, &len, &why));
    free(b);
  }
}

Test(fleet, redis_urls) {
  char host[256];
  int port, db;
  bool unix_;
  cr_assert_eq(kiln_redis_url_parse("redis://10.0.0.5:6380/3", host, sizeof(host), &port, &db, &unix_), KILN_OK);
  cr_expect_str_eq(host, "10.0.0.5");
  cr_expect(port == 6380 && db == 3 && !unix_);
  cr_assert_eq(kiln_redis_url_parse("redis://cache.internal", host, sizeof(host), &port, &db, &unix_), KILN_OK);
  cr_expect(strcmp(host, "cache.internal") == 0 && port == 6379 && db == 0);
  cr_assert_eq(kiln_redis_url_parse("redis://[::1]:7000/1", host, sizeof(host), &port, &db, &unix_), KILN_OK);
  cr_expect(strcmp(host, "::1") == 0 && port == 7000 && db == 1);
  cr_assert_eq(kiln_redis_url_parse("unix:/run/redis/redis.sock?db=2", host, sizeof(host), &port, &db, &unix_), KILN_OK);
  cr_expect(strcmp(host, "/run/redis/redis.sock") == 0 && db == 2 && unix_);
  const char *bad[] = {"", "redis://", "redis://:6379", "redis://h:0", "redis://h:65536", "redis://h:x",
                       "redis://h/db", "redis://h/1/2", "redis://u:p@h:1", "http://h:1", "unix:",
                       "unix:/x?db=-1", "unix:/x?foo=1", "redis://[::1", NULL};
  for (int i = 0; bad[i]; i++) {
    kiln_status_t st = kiln_redis_url_parse(bad[i], host, sizeof(host), &port, &db, &unix_);
    cr_expect_neq(st, KILN_OK, "%s", bad[i]);
    if (st) cr_expect_eq(kiln_status_code(st), KILN_E_INVALID_ARGUMENT);
    kiln_status_free(st);
  }
}
