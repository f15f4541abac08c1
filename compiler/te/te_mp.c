/* msgpack-c object readers for the te front end (te_mp.h). */
#include "compiler/te/te_mp.h"

#include <string.h>

#include "compiler/internal.h"

static bool key_is(const msgpack_object *k, const char *name) {
  size_t n = strlen(name);
  return (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && memcmp(k->via.str.ptr, name, n) == 0) ||
         (k->type == MSGPACK_OBJECT_BIN && k->via.bin.size == n && memcmp(k->via.bin.ptr, name, n) == 0);
}

const msgpack_object *te_mp_get(const msgpack_object *o, const char *key) {
  if (!o || o->type != MSGPACK_OBJECT_MAP) return NULL;
  for (uint32_t i = 0; i < o->via.map.size; i++)
    if (key_is(&o->via.map.ptr[i].key, key)) return &o->via.map.ptr[i].val;
  return NULL;
}

bool te_mp_str(const msgpack_object *o, char *dst, size_t cap) {
  if (!o) return false;
  const char *p;
  size_t n;
  if (o->type == MSGPACK_OBJECT_STR) p = o->via.str.ptr, n = o->via.str.size;
  else if (o->type == MSGPACK_OBJECT_BIN) p = o->via.bin.ptr, n = o->via.bin.size;
  else return false;
  if (n == 0 || n >= cap || memchr(p, 0, n)) return false;
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

kiln_status_t te_mp_check_keys(const msgpack_object *o, const char *what, const char *const *keys) {
  if (!o || o->type != MSGPACK_OBJECT_MAP) return KC_COMPILE_ERROR("te: %s must be a map", what);
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    const msgpack_object *k = &o->via.map.ptr[i].key;
    bool known = false;
    for (size_t j = 0; keys[j] && !known; j++) known = key_is(k, keys[j]);
    for (uint32_t j = 0; j < i && known; j++)
      if (k->type == o->via.map.ptr[j].key.type && k->via.str.size == o->via.map.ptr[j].key.via.str.size &&
          memcmp(k->via.str.ptr, o->via.map.ptr[j].key.via.str.ptr, k->via.str.size) == 0)
        return KC_COMPILE_ERROR("te: %s repeats a key", what);
    if (!known) {
      char name[64] = "?";
      te_mp_str(k, name, sizeof(name));
      return KC_COMPILE_ERROR("te: %s has an unknown key '%s'", what, name);
    }
  }
  return KILN_OK;
}
