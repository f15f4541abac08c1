/* Small helpers shared by all: clocks, random ids, content hashes, container_of. */
#ifndef KILN_BASE_UTIL_H
#define KILN_BASE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define KILN_CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
#define KILN_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define KILN_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KILN_MAX(a, b) ((a) > (b) ? (a) : (b))

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t kiln_now_ns(void);

/* Must be called once per process before the functions below (libsodium's init). */
KILN_MUST_USE kiln_status_t kiln_crypto_init(void);

/* A random 64-bit id that is neither 0 nor UINT64_MAX, and below 2^63 so that every client
 * language holds it as a non-negative integer. Unguessable (libsodium's CSPRNG). */
uint64_t kiln_random_id(void);

/* BLAKE2b-256 (libsodium crypto_generichash). Incremental form for keys built from parts. */
#define KILN_HASH_BYTES 32
typedef struct kiln_hasher {
  _Alignas(64) unsigned char state[384];
} kiln_hasher_t;
void kiln_hasher_init(kiln_hasher_t *h);
void kiln_hasher_update(kiln_hasher_t *h, const void *p, size_t n);
/* Feeds a length-prefixed field so that ("ab","c") and ("a","bc") hash differently. */
void kiln_hasher_field(kiln_hasher_t *h, const void *p, size_t n);
void kiln_hasher_final(kiln_hasher_t *h, uint8_t out[KILN_HASH_BYTES]);
void kiln_hash(const void *p, size_t n, uint8_t out[KILN_HASH_BYTES]);
/* Lower-case hex into `out` (2*n+1 bytes). */
void kiln_hex(const uint8_t *p, size_t n, char *out);

/* Constant-time comparison of equal-length secrets (sodium_memcmp); 0 when equal. */
int kiln_secret_compare(const void *a, const void *b, size_t n);

#endif
