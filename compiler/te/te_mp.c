/* The te front end's readers of MessagePack objects (te_mp.h), on protocol/mp.h. */
#include "compiler/te/te_mp.h"

#include <string.h>

#include "compiler/internal.h"

const msgpack_object *te_mp_get(const msgpack_object *o, const char *key) { return kiln_mp_find(o, key); }

bool te_mp_str(const msgpack_object *o, char *dst, size_t cap) {
  const char *p;
  uint32_t n;
  if (!o || !kiln_mp_text(o, &p, &n) || n == 0 || n >= cap || memchr(p, 0, n)) return false;
  memcpy(dst, p, n);
  dst[n] = 0;
  return true;
}

bool te_mp_number(const msgpack_object *o, double *out) {
  if (!o) return false;
  switch (o->type) {
  case MSGPACK_OBJECT_POSITIVE_INTEGER: *out = (double)o->via.u64; return true;
  case MSGPACK_OBJECT_NEGATIVE_INTEGER: *out = (double)o->via.i64; return true;
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64: *out = o->via.f64; return true;
  case MSGPACK_OBJECT_BOOLEAN: *out = o->via.boolean; return true;
  default: return false;
  }
}

bool te_mp_int(const msgpack_object *o, int64_t *out) {
  if (!o) return false;
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) *out = (int64_t)o->via.u64;
  else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) *out = o->via.i64;
  else return false;
  return true;
}

static const kiln_mp_err_t te_err = {KILN_E_COMPILE, "te: ", "key"};

kiln_status_t te_mp_check_keys(const msgpack_object *o, const char *what, const char *const *keys) {
  if (!o || o->type != MSGPACK_OBJECT_MAP) return KC_COMPILE_ERROR("te: %s must be a map", what);
  return kiln_mp_check_keys(&te_err, o, what, keys);
}

kiln_status_t te_mp_decode(const uint8_t *p, size_t len, void *(*alloc)(void *ud, size_t n), void *ud,
                           msgpack_object *out) {
  kiln_mp_reader_t r = {.max_depth = TE_MP_MAX_DEPTH, .err = &te_err, .alloc = alloc, .ud = ud};
  return kiln_mp_read(&r, p, len, out);
}
