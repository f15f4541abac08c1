/* What kilnd and the compiler must agree on about a build before any compiler runs: the
 * payload's kind (the format a client names, or "auto" sniffed the one way), the build key
 * (the cache key and the module id, docs/cache.md) and the 64-bit hash of a module id that
 * every table keyed by modules uses. Pure functions; any thread. */
#ifndef KILN_PROTOCOL_PAYLOAD_H
#define KILN_PROTOCOL_PAYLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "base/util.h"

typedef enum kiln_payload_kind {
  KILN_PAYLOAD_AUTO = 0, /* sniffed: ELF (hsaco or cpu-so by e_machine), PTX text, else LLVM */
  KILN_PAYLOAD_LLVM,     /* kernel dialect or target IR, text or bitcode */
  KILN_PAYLOAD_HSACO,
  KILN_PAYLOAD_PTX,
  KILN_PAYLOAD_CPU_SO,
  KILN_PAYLOAD_TE,       /* tensor-expression program, MessagePack (docs/te.md); never sniffed */
  KILN_PAYLOAD_KINDS_
} kiln_payload_kind_t;

/* "auto", "llvm", "hsaco", "ptx", "cpu-so", "te" -> kind; E_INVALID_ARGUMENT otherwise. */
KILN_MUST_USE kiln_status_t kiln_payload_kind_parse(const char *name, kiln_payload_kind_t *out_kind);
const char *kiln_payload_kind_name(kiln_payload_kind_t kind);

/* The kind "auto" means for these bytes: an ELF with e_machine EM_AMDGPU is hsaco, another
 * ELF cpu-so; text whose first token after blank space and comments is ".version" is ptx;
 * anything else llvm. `kind` other than auto is returned as given. */
kiln_payload_kind_t kiln_payload_resolve(kiln_payload_kind_t kind, const uint8_t *p, size_t n);

/* Everything a build's output depends on (docs/cache.md "Cache key"). */
typedef struct kiln_build_inputs {
  const uint8_t *payload;
  size_t size;
  kiln_payload_kind_t kind; /* auto is resolved before hashing */
  const char *target;       /* as resolved by kilnd: a device's arch, "cpu" for "host" */
  const char *host;         /* the compile worker's host description (used for "cpu" only) */
  uint32_t opt_level, max_block;
  bool fast_math;
  const char *identity;     /* the compiler identity, build hash included */
} kiln_build_inputs_t;

/* The build key: BLAKE2b-256 over length-prefixed fields in docs/cache.md's order. Needs
 * kiln_crypto_init() in the process. */
void kiln_build_key(const kiln_build_inputs_t *in, uint8_t out_key[KILN_HASH_BYTES]);

/* The one 64-bit hash of a module id (a build key) for hash tables (base/map.h): its first
 * 63 bits, never 0. A table compares the whole key on a hit. */
uint64_t kiln_module_key64(const uint8_t key[KILN_HASH_BYTES]);

#endif
