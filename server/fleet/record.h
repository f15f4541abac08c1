/* Signed registry records (docs/operations.md "A fleet", "Signed records"): the envelope a
 * kilnd with --fleet-key wraps its registry record in, the key file, and the trusted-keys
 * file clients verify against. base/ and libsodium only: kilnd's registry (registry.c) and
 * the `kiln fleet` CLI (clients/c/fleet.c) share it; kiln.fleet (Python) reads the same.
 *
 * Envelope, the value of kiln:host:ADDR:
 *   0   8  magic "KILNSIG1"
 *   8  32  the host's Ed25519 public key
 *  40  64  Ed25519 signature of KILN_RECORD_CONTEXT || record
 * 104   n  the record (MessagePack, as an unsigned host writes it alone)
 * A record that does not start with the magic is unsigned (a MessagePack map never starts
 * with 'K').
 *
 * Threads: any. */
#ifndef KILN_FLEET_RECORD_H
#define KILN_FLEET_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define KILN_RECORD_MAGIC "KILNSIG1"
#define KILN_RECORD_CONTEXT "kiln fleet record v1\n" /* signed before the record: domain separation */
#define KILN_RECORD_HEAD 104
#define KILN_RECORD_MAX_KEYS 1024

typedef struct kiln_record_key {
  uint8_t pub[32];
  char addr[256]; /* the address this key may publish, or "*" for any */
} kiln_record_key_t;

/* Reads a key file: exactly 32 bytes (the Ed25519 seed), a regular file nobody but its owner
 * may read. E_NOT_FOUND, E_PERMISSION, E_INVALID_ARGUMENT (another size). */
KILN_MUST_USE kiln_status_t kiln_record_key_read(const char *path, uint8_t out_seed[32]);

/* The public key of a seed, and its text "ed25519:<64 hex>" (out_text: 73 bytes). */
void kiln_record_key_public(const uint8_t seed[32], uint8_t out_pub[32], char *out_text);

/* Wraps record (len bytes) into out (KILN_RECORD_HEAD + len bytes, not overlapping record),
 * signed with seed; false when out of memory. */
bool kiln_record_seal(const uint8_t seed[32], const uint8_t *record, size_t len, uint8_t *out);

/* Reads a trusted-keys file: lines "ed25519:<64 hex> ADDR" (ADDR: the advertised address the
 * key may publish, or "*"), blank lines and "# ..." lines. Any other line is an error
 * (E_INVALID_ARGUMENT naming its number): a trust file that does not parse is not used.
 * *out is malloc'd (free it); at most KILN_RECORD_MAX_KEYS lines of keys. */
KILN_MUST_USE kiln_status_t kiln_record_keys_read(const char *path, kiln_record_key_t **out, size_t *out_n);

/* Opens a registry value listed under addr: the record inside (*out_record, *out_len point
 * into value) and whether its signature was verified. With keys (n > 0): NULL with *why unless
 * it is signed, its signature checks, and its key is trusted for addr (*out_signed true).
 * Without keys: a signed record is unwrapped unchecked (nothing to check against), an unsigned
 * one is itself, and *out_signed is false either way: nothing was verified. */
const char *kiln_record_open(const uint8_t *value, size_t len, const char *addr, const kiln_record_key_t *keys,
                             size_t n, const uint8_t **out_record, size_t *out_len, bool *out_signed);

#endif
