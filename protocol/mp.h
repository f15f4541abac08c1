/* The one bounded MessagePack reader: every parser of bytes kiln did not write itself (RPC
 * params, the artifact codec, the worker jobs, te programs) decodes with it and reads fields
 * with its typed getters.
 *
 * Decoding: exactly one value, bounded before anything is allocated. A container's declared
 * count is checked against the bytes that remain (every element takes at least one byte), so
 * memory is at most a fixed multiple of the input; nesting is bounded by a depth the caller
 * chooses (a value inside more than max_depth containers is refused), and the recursion with
 * it. str and bin values point into the input (no copy): the tree lives as long as the input
 * bytes and the memory its containers came from.
 *
 * Getters: one per type, for a field of a map (kiln_mp_field_*) and for a value
 * (kiln_mp_*). Each takes the reader's error (kiln_mp_err_t): the code and the prefix that
 * name the parser ("artifact decode: ", "te: ", "" for RPC params), so a refusal reads the
 * same in every caller and reports the code its contract promises. A getter of an absent
 * optional field returns OK and leaves *out alone. Any thread; no state. */
#ifndef KILN_PROTOCOL_MP_H
#define KILN_PROTOCOL_MP_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct kiln_mp_err {
  kiln_code_t code;   /* a wrong or missing field */
  const char *prefix; /* put before every message: names the parser */
  const char *noun;   /* what the contract calls a map's entries: "field" when NULL, "key" */
} kiln_mp_err_t;

/* RPC params (docs/protocol.md): E_INVALID_ARGUMENT, no prefix. */
extern const kiln_mp_err_t kiln_mp_err_params;

/* Where a decoded tree's containers go: n bytes aligned for msgpack_object, alive as long as
 * the tree; NULL when memory is exhausted. */
typedef void *(*kiln_mp_alloc_fn)(void *ud, size_t n);

typedef struct kiln_mp_reader {
  uint32_t max_depth;       /* containers a value may sit in; the root sits in none */
  bool ext;                 /* accept ext values (MSGPACK_OBJECT_EXT); else refused */
  const kiln_mp_err_t *err; /* what a malformed input reports */
  kiln_mp_alloc_fn alloc;
  void *ud;
} kiln_mp_reader_t;

/* Decodes p[0..len) into *out: exactly one value, no trailing bytes. Errors: r->err's code
 * with its prefix and "not one MessagePack value nested at most N deep: <why, at which
 * byte>"; E_RESOURCE_EXHAUSTED when alloc fails. */
KILN_MUST_USE kiln_status_t kiln_mp_read(const kiln_mp_reader_t *r, const uint8_t *p, size_t len,
                           msgpack_object *out);

/* A decoded value with memory of its own: a small inline block, then heap blocks.
 * Caller storage: kiln_mp_doc_read fills it (also on failure), kiln_mp_doc_deinit frees. */
typedef struct kiln_mp_block kiln_mp_block_t;
typedef struct kiln_mp_doc {
  msgpack_object root;
  kiln_mp_block_t *blocks; /* heap blocks, newest first */
  size_t used, cap;        /* of the block allocations come from now */
  uint8_t *at;
  _Alignas(16) uint8_t inline_block[768];
} kiln_mp_doc_t;

KILN_MUST_USE kiln_status_t kiln_mp_doc_read(kiln_mp_doc_t *doc, const uint8_t *p, size_t len,
                               uint32_t max_depth, bool ext, const kiln_mp_err_t *err);
void kiln_mp_doc_deinit(kiln_mp_doc_t *doc);

/* --- values ----------------------------------------------------------------------------- */

/* str or bin (msgpack-c and this reader give an empty str a NULL pointer: "" instead). */
bool kiln_mp_text(const msgpack_object *o, const char **out_ptr, uint32_t *out_len);
/* o is a str (or bin) equal to s. */
bool kiln_mp_eq(const msgpack_object *o, const char *s);
/* An unsigned integer of at most `max`. `what` names the value in the error. */
KILN_MUST_USE kiln_status_t kiln_mp_uint(const kiln_mp_err_t *e, const msgpack_object *o, const char *what,
                           uint64_t max, uint64_t *out);
/* A str copied into a NUL-terminated buffer of cap bytes: refused when it does not fit or
 * holds a NUL. */
KILN_MUST_USE kiln_status_t kiln_mp_cstr(const kiln_mp_err_t *e, const msgpack_object *o, const char *what,
                           char *out, size_t cap);
/* nil -> *out NULL; a str without NUL -> a heap copy (the caller frees). */
KILN_MUST_USE kiln_status_t kiln_mp_opt_text(const kiln_mp_err_t *e, const msgpack_object *o, const char *what,
                               char **out);

/* --- fields of a map -------------------------------------------------------------------- */

/* The value of field `name` (a str or bin key), or NULL when absent or map is NULL. */
const msgpack_object *kiln_mp_find(const msgpack_object *map, const char *name);
/* Every key of `map` is a str in `allowed` (NULL-terminated), each once. `what` names the
 * map; the error names the first unknown field and lists the allowed ones. NULL map: OK. */
KILN_MUST_USE kiln_status_t kiln_mp_check_keys(const kiln_mp_err_t *e, const msgpack_object *map,
                                 const char *what, const char *const *allowed);

/* A field absent or nil: E (e->code) naming it when required, else OK with *out unchanged. */
KILN_MUST_USE kiln_status_t kiln_mp_field_text(const kiln_mp_err_t *e, const msgpack_object *map,
                                 const char *name, bool required, const char **out_ptr,
                                 uint32_t *out_len);
/* The same, accepting the value as bytes: the error asks for "bytes (bin) or a string". */
KILN_MUST_USE kiln_status_t kiln_mp_field_bytes(const kiln_mp_err_t *e, const msgpack_object *map,
                                  const char *name, bool required, const uint8_t **out_ptr,
                                  size_t *out_len);
KILN_MUST_USE kiln_status_t kiln_mp_field_u64(const kiln_mp_err_t *e, const msgpack_object *map,
                                const char *name, bool required, uint64_t *out);
KILN_MUST_USE kiln_status_t kiln_mp_field_i64(const kiln_mp_err_t *e, const msgpack_object *map,
                                const char *name, bool required, int64_t *out);
/* A float or an integer. */
KILN_MUST_USE kiln_status_t kiln_mp_field_f64(const kiln_mp_err_t *e, const msgpack_object *map,
                                const char *name, bool required, double *out);
KILN_MUST_USE kiln_status_t kiln_mp_field_bool(const kiln_mp_err_t *e, const msgpack_object *map,
                                 const char *name, bool required, bool *out);
KILN_MUST_USE kiln_status_t kiln_mp_field_array(const kiln_mp_err_t *e, const msgpack_object *map,
                                  const char *name, bool required,
                                  const msgpack_object_array **out);
KILN_MUST_USE kiln_status_t kiln_mp_field_map(const kiln_mp_err_t *e, const msgpack_object *map,
                                const char *name, bool required, const msgpack_object **out);

#endif
