/* Small readers of MessagePack objects for the te front end, on protocol/mp.h. */
#ifndef KILN_COMPILER_TE_TE_MP_H
#define KILN_COMPILER_TE_TE_MP_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "protocol/mp.h"

#define TE_MP_MAX_DEPTH 256

/* Decodes one value with protocol/mp.h's reader, nested at most TE_MP_MAX_DEPTH deep:
 * containers come from alloc (memory that outlives the object), strings and bins point into
 * p; ext values are refused. E_COMPILE ("te: not one MessagePack value ...") on anything
 * malformed or trailing, E_RESOURCE_EXHAUSTED when memory is exhausted. */
KILN_MUST_USE kiln_status_t te_mp_decode(const uint8_t *p, size_t len, void *(*alloc)(void *ud, size_t n), void *ud,
                           msgpack_object *out);

/* The value of `key` in map `o`, or NULL (also when o is not a map). */
const msgpack_object *te_mp_get(const msgpack_object *o, const char *key);
/* Copies a str (or bin) into dst; false if o is NULL, not text, empty, too long or holds a NUL. */
bool te_mp_str(const msgpack_object *o, char *dst, size_t cap);
bool te_mp_number(const msgpack_object *o, double *out);
bool te_mp_int(const msgpack_object *o, int64_t *out);
/* E_COMPILE unless o is a map whose keys are all in `keys` (NULL-terminated), each once. */
KILN_MUST_USE kiln_status_t te_mp_check_keys(const msgpack_object *o, const char *what, const char *const *keys);

#endif
