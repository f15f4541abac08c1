/* The fleet library on its own (server/fleet/): the remote entry format under hostile bytes
 * (every truncation, every flipped bit, another key, another secret, oversized lengths) and
 * the Redis URL parser. The Redis tier against a real redis-server and real kilnds is
 * tests/python/test_fleet_cache.py. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "base/util.h"
#include "server/fleet/record.h"
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
  memset(e + 64, 0, 16); /* the tag */
  cr_expect_null(kiln_remote_open(secret, sizeof(secret), key, e, n, 1 << 20, &len, &why));
  cr_expect_null(kiln_remote_open(secret, 0, key, e, n, 1 << 20, &len, &why));
  cr_expect_str_eq(why, "cannot compute the MAC (libcrypto failed): refused");
  cr_expect_null(kiln_remote_open(secret, 16, key, e, n, 1 << 20, &len, &why));
  cr_expect_not(kiln_remote_seal(secret, 0, key, payload, sizeof(payload), e));
  free(e);
}

/* KILNRMT2: the same payload sealed twice gets two nonces (so two one-time keys) and two
 * tags; a nonce or tag from the other seal, or a first-format entry (KILNRMT1, a good
 * HMAC-SHA256 under the same secret, as an older kilnd wrote it), never opens. */
Test(fleet, nonces_differ_and_old_entries_never_open) {
  uint8_t key[32] = {7}, payload[200];
  memset(payload, 0x42, sizeof(payload));
  size_t n = KILN_REMOTE_HEADER_BYTES + sizeof(payload), len = 0;
  uint8_t *a = sealed(key, payload, sizeof(payload)), *b = sealed(key, payload, sizeof(payload));
  cr_expect(memcmp(a, "KILNRMT2", 8) == 0);
  cr_expect(memcmp(a + 48, b + 48, 16) != 0, "the same nonce twice");
  cr_expect(memcmp(a + 64, b + 64, 16) != 0, "the same tag twice");
  const char *why = NULL;
  cr_assert_not_null(kiln_remote_open(secret, sizeof(secret), key, b, n, 1 << 20, &len, &why));
  memcpy(b + 48, a + 48, 16); /* a's nonce, b's tag */
  cr_expect_null(kiln_remote_open(secret, sizeof(secret), key, b, n, 1 << 20, &len, &why));
  memcpy(b + 64, a + 64, 16); /* a's nonce and tag: a, whole */
  cr_expect_not_null(kiln_remote_open(secret, sizeof(secret), key, b, n, 1 << 20, &len, &why));
  /* The first format, MACed as an older kilnd did. */
  memcpy(a, "KILNRMT1", 8);
  unsigned int ml = 0;
  uint8_t *msg = malloc(48 + sizeof(payload));
  memcpy(msg, a, 48);
  memcpy(msg + 48, payload, sizeof(payload));
  cr_assert(HMAC(EVP_sha256(), secret, sizeof(secret), msg, 48 + sizeof(payload), a + 48, &ml) && ml == 32);
  cr_expect_null(kiln_remote_open(secret, sizeof(secret), key, a, n, 1 << 20, &len, &why));
  cr_expect(why && strstr(why, "KILNRMT1"), "%s", why ? why : "(none)");
  free(msg);
  free(a);
  free(b);
}

Test(fleet, random_bytes_never_open) {
  uint8_t key[32] = {0};
  srand(17);
  for (int round = 0; round < 2000; round++) {
    size_t n = (size_t)(rand() % 300);
    uint8_t *b = malloc(n + 1);
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rand();
    if (n >= 8 && round % 2) memcpy(b, "KILNRMT2", 8); /* past the magic, into the length */
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

/* --- signed registry records (server/fleet/record.h) --------------------------------------- */

static const uint8_t seed_a[32] = "host A's ed25519 seed, 32 bytes!";
static const uint8_t seed_b[32] = "host B's ed25519 seed, 32 bytes!";
static const uint8_t rec[] = "\x82\xa1v\x01\xa3url\xaetcp:a.fleet:1"; /* a stand-in record */

static kiln_record_key_t trusted(const uint8_t seed[32], const char *addr) {
  kiln_record_key_t k = {0};
  char text[80];
  kiln_record_key_public(seed, k.pub, text);
  snprintf(k.addr, sizeof(k.addr), "%s", addr);
  return k;
}

static const char *open_(const uint8_t *v, size_t n, const char *addr, const kiln_record_key_t *keys, size_t nk) {
  const uint8_t *r;
  size_t len;
  bool sig;
  return kiln_record_open(v, n, addr, keys, nk, &r, &len, &sig);
}

Test(fleet, a_signed_record_opens_for_its_trusted_key_and_address_only) {
  uint8_t v[KILN_RECORD_HEAD + sizeof(rec)];
  cr_assert(kiln_record_seal(seed_a, rec, sizeof(rec), v));
  kiln_record_key_t a = trusted(seed_a, "tcp:a.fleet:1"), any_a = trusted(seed_a, "*"),
                    b = trusted(seed_b, "*"), both[] = {b, a};
  const uint8_t *r;
  size_t len;
  bool sig = false;
  cr_assert_null(kiln_record_open(v, sizeof(v), "tcp:a.fleet:1", &a, 1, &r, &len, &sig));
  cr_expect(sig && len == sizeof(rec) && memcmp(r, rec, len) == 0);
  cr_expect_null(open_(v, sizeof(v), "tcp:a.fleet:1", both, 2));
  cr_expect_null(open_(v, sizeof(v), "tcp:other:1", &any_a, 1));
  /* replayed under another host's address: a's key is trusted for a's address only */
  cr_expect_str_eq(open_(v, sizeof(v), "tcp:b.fleet:1", &a, 1), "signed by a key not trusted for this address");
  /* another host's key */
  cr_expect_str_eq(open_(v, sizeof(v), "tcp:a.fleet:1", &b, 1), "signed by a key not trusted for this address");
  /* without keys: unwrapped, unchecked; an unsigned record is itself */
  cr_expect_null(open_(v, sizeof(v), "tcp:x:1", NULL, 0));
  sig = true;
  cr_assert_null(kiln_record_open(rec, sizeof(rec), "tcp:x:1", NULL, 0, &r, &len, &sig));
  cr_expect(!sig && r == rec && len == sizeof(rec));
  cr_expect_str_eq(open_(rec, sizeof(rec), "tcp:a.fleet:1", &a, 1), "unsigned, and a trusted-keys file is in use");
}

Test(fleet, forged_truncated_and_flipped_records_are_refused) {
  uint8_t v[KILN_RECORD_HEAD + sizeof(rec)], w[sizeof(v)];
  cr_assert(kiln_record_seal(seed_a, rec, sizeof(rec), v));
  kiln_record_key_t a = trusted(seed_a, "*");
  for (size_t n = 0; n < sizeof(v); n++) cr_expect_not_null(open_(v, n, "tcp:a.fleet:1", &a, 1), "length %zu", n);
  for (size_t i = 8; i < sizeof(v); i++) /* every bit after the magic: key, signature, record */
    for (int bit = 0; bit < 8; bit++) {
      memcpy(w, v, sizeof(v));
      w[i] ^= (uint8_t)(1u << bit);
      cr_expect_not_null(open_(w, sizeof(w), "tcp:a.fleet:1", &a, 1), "byte %zu bit %d", i, bit);
    }
  /* a forger's own key in the envelope, signature right for it: not a trusted key */
  uint8_t f[sizeof(v)];
  cr_assert(kiln_record_seal(seed_b, rec, sizeof(rec), f));
  memcpy(w, f, sizeof(f));
  memcpy(w + 8, v + 8, 32); /* ... or a's public key with b's signature */
  cr_expect_not_null(open_(f, sizeof(f), "tcp:a.fleet:1", &a, 1));
  cr_expect_str_eq(open_(w, sizeof(w), "tcp:a.fleet:1", &a, 1), "its signature does not verify (forged or damaged)");
}

static char *write_tmp(const char *text, size_t n, int mode) {
  static char path[64];
  snprintf(path, sizeof(path), "/tmp/kiln-test-fleet-XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  cr_assert_eq(write(fd, text, n), (ssize_t)n);
  fchmod(fd, (mode_t)mode);
  close(fd);
  return path;
}

Test(fleet, key_and_trusted_keys_files) {
  uint8_t seed[32];
  char *p = write_tmp((const char *)seed_a, 32, 0600);
  cr_assert_eq(kiln_record_key_read(p, seed), KILN_OK);
  cr_expect(memcmp(seed, seed_a, 32) == 0);
  chmod(p, 0640);
  kiln_status_t st = kiln_record_key_read(p, seed);
  cr_expect(st && kiln_status_code(st) == KILN_E_PERMISSION);
  kiln_status_free(st);
  unlink(p);
  p = write_tmp("short", 5, 0600);
  st = kiln_record_key_read(p, seed);
  cr_expect(st && kiln_status_code(st) == KILN_E_INVALID_ARGUMENT);
  kiln_status_free(st);
  unlink(p);
  p = write_tmp((const char *)seed_a, 32, 0600); /* 33 bytes: too long */
  FILE *f = fopen(p, "a");
  fputc('x', f);
  fclose(f);
  st = kiln_record_key_read(p, seed);
  cr_expect(st && kiln_status_code(st) == KILN_E_INVALID_ARGUMENT);
  kiln_status_free(st);
  unlink(p);
  st = kiln_record_key_read("/nonexistent/kiln.key", seed);
  cr_expect(st && kiln_status_code(st) == KILN_E_NOT_FOUND);
  kiln_status_free(st);

  kiln_record_key_t a = trusted(seed_a, "*");
  char good[400];
  char hex[65];
  kiln_hex(a.pub, 32, hex);
  snprintf(good, sizeof(good), "# the fleet\n\ned25519:%s tcp:a.fleet:1\n  ed25519:%s\t*  \n", hex, hex);
  p = write_tmp(good, strlen(good), 0644);
  kiln_record_key_t *keys;
  size_t n;
  cr_assert_eq(kiln_record_keys_read(p, &keys, &n), KILN_OK);
  cr_expect(n == 2 && strcmp(keys[0].addr, "tcp:a.fleet:1") == 0 && strcmp(keys[1].addr, "*") == 0);
  cr_expect(memcmp(keys[0].pub, a.pub, 32) == 0);
  free(keys);
  unlink(p);
  char big[2048];
  memset(big, 'a', sizeof(big) - 1);
  big[sizeof(big) - 1] = 0;
  char l1[200], l2[200], l3[200], l4[200];
  snprintf(l1, sizeof(l1), "ed25519:%s\n", hex);                 /* no address */
  snprintf(l2, sizeof(l2), "ed25519:%.63s tcp:a:1\n", hex);      /* short key */
  snprintf(l3, sizeof(l3), "ed25519:%.62szz tcp:a:1\n", hex);    /* not hex */
  snprintf(l4, sizeof(l4), "ed25519:%s tcp:a:1 extra\n", hex);   /* two addresses */
  const char *bad[] = {l1, l2, l3, l4, "rsa:abcd tcp:a:1\n", "garbage\n", big, NULL};
  for (int i = 0; bad[i]; i++) {
    p = write_tmp(bad[i], strlen(bad[i]), 0644);
    st = kiln_record_keys_read(p, &keys, &n);
    cr_expect(st && kiln_status_code(st) == KILN_E_INVALID_ARGUMENT, "%.40s", bad[i]);
    kiln_status_free(st);
    unlink(p);
  }
}

Test(fleet, auth_files) {
  char user[256], pass[512];
  char *p = write_tmp("alice s3cret\n", 13, 0600);
  cr_assert_eq(kiln_redis_auth_read(p, user, sizeof(user), pass, sizeof(pass)), KILN_OK);
  cr_expect(strcmp(user, "alice") == 0 && strcmp(pass, "s3cret") == 0);
  unlink(p);
  p = write_tmp("only-a-password", 15, 0600);
  cr_assert_eq(kiln_redis_auth_read(p, user, sizeof(user), pass, sizeof(pass)), KILN_OK);
  cr_expect(user[0] == 0 && strcmp(pass, "only-a-password") == 0);
  unlink(p);
  const char *bad[] = {"a b c\n", "\n", "alice \n", NULL};
  for (int i = 0; bad[i]; i++) {
    p = write_tmp(bad[i], strlen(bad[i]), 0600);
    kiln_status_t st = kiln_redis_auth_read(p, user, sizeof(user), pass, sizeof(pass));
    cr_expect(st && kiln_status_code(st) == KILN_E_INVALID_ARGUMENT, "'%s'", bad[i]);
    kiln_status_free(st);
    unlink(p);
  }
  p = write_tmp("pw\n", 3, 0644);
  kiln_status_t st = kiln_redis_auth_read(p, user, sizeof(user), pass, sizeof(pass));
  cr_expect(st && kiln_status_code(st) == KILN_E_PERMISSION);
  kiln_status_free(st);
  unlink(p);
}
