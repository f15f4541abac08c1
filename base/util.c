#include "base/util.h"

#include <sodium.h>
#include <time.h>

_Static_assert(sizeof(kiln_hasher_t) >= sizeof(crypto_generichash_state),
               "kiln_hasher_t too small for libsodium's state");

uint64_t kiln_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

kiln_status_t kiln_crypto_init(void) {
  if (sodium_init() < 0) return KILN_STATUS(KILN_E_INTERNAL, "libsodium failed to initialise");
  return KILN_OK;
}

uint64_t kiln_random_id(void) {
  uint64_t id;
  do {
    randombytes_buf(&id, sizeof(id));
    id &= 0x7fffffffffffffffULL;
  } while (id == 0);
  return id;
}

void kiln_hasher_init(kiln_hasher_t *h) {
  crypto_generichash_init((crypto_generichash_state *)h->state, NULL, 0, KILN_HASH_BYTES);
}

void kiln_hasher_update(kiln_hasher_t *h, const void *p, size_t n) {
  crypto_generichash_update((crypto_generichash_state *)h->state, p, n);
}

void kiln_hasher_field(kiln_hasher_t *h, const void *p, size_t n) {
  uint64_t len = n;
  kiln_hasher_update(h, &len, sizeof(len));
  kiln_hasher_update(h, p, n);
}

void kiln_hasher_final(kiln_hasher_t *h, uint8_t out[KILN_HASH_BYTES]) {
  crypto_generichash_final((crypto_generichash_state *)h->state, out, KILN_HASH_BYTES);
}

void kiln_hash(const void *p, size_t n, uint8_t out[KILN_HASH_BYTES]) {
  crypto_generichash(out, KILN_HASH_BYTES, p, n, NULL, 0);
}

void kiln_hex(const uint8_t *p, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  out[2 * n] = 0;
}

int kiln_secret_compare(const void *a, const void *b, size_t n) { return sodium_memcmp(a, b, n); }
