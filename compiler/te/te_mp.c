/* msgpack-c object readers for the te front end (te_mp.h). */
#include "compiler/te/te_mp.h"

#include <string.h>

#include "compiler/internal.h"

static uint64_t be(const uint8_t *p, int k) {
  uint64_t v = 0;
  for (int i = 0; i < k; i++) v = v << 8 | p[i];
  return v;
}

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

/* The header at *pos (advanced past it and its length field): *kind 1 for an array, 2 for a
 * map with *n items, else 0 with *skip bytes of payload. False on 0xc1 or a truncated length
 * (UINT64_MAX marks one). */
static bool scan_header(const uint8_t *p, size_t len, size_t *pos, int *kind, uint64_t *n, uint64_t *skip) {
  uint8_t b = p[(*pos)++];
  size_t rem = len - *pos;
#define BE(k) (rem >= (k) ? be(p + *pos, (k)) : UINT64_MAX)
  if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return true;
  if (b >= 0x80 && b <= 0x8f) *n = b & 0x0f, *kind = 2;
  else if (b >= 0x90 && b <= 0x9f) *n = b & 0x0f, *kind = 1;
  else if (b >= 0xa0 && b <= 0xbf) *skip = b & 0x1f;
  else switch (b) {
    case 0xc4: case 0xd9: *skip = BE(1), *pos += 1; break;
    case 0xc5: case 0xda: *skip = BE(2), *pos += 2; break;
    case 0xc6: case 0xdb: *skip = BE(4), *pos += 4; break;
    case 0xc7: *skip = BE(1) + 1, *pos += 1; break;
    case 0xc8: *skip = BE(2) + 1, *pos += 2; break;
    case 0xc9: *skip = BE(4) + 1, *pos += 4; break;
    case 0xca: *skip = 4; break;
    case 0xcb: *skip = 8; break;
    case 0xcc: case 0xd0: *skip = 1; break;
    case 0xcd: case 0xd1: *skip = 2; break;
    case 0xce: case 0xd2: *skip = 4; break;
    case 0xcf: case 0xd3: *skip = 8; break;
    case 0xd4: *skip = 2; break;
    case 0xd5: *skip = 3; break;
    case 0xd6: *skip = 5; break;
    case 0xd7: *skip = 9; break;
    case 0xd8: *skip = 17; break;
    case 0xdc: *n = BE(2), *pos += 2, *kind = 1; break;
    case 0xdd: *n = BE(4), *pos += 4, *kind = 1; break;
    case 0xde: *n = BE(2), *pos += 2, *kind = 2; break;
    case 0xdf: *n = BE(4), *pos += 4, *kind = 2; break;
    default: return false; /* 0xc1 */
    }
#undef BE
  return *pos <= len && *skip != UINT64_MAX && *n != UINT64_MAX;
}

/* One value at *pos: containers must be able to hold their declared counts in the bytes
 * that remain (each element takes at least one byte) and nest at most TE_MP_MAX_DEPTH deep.
 * msgpack-c sizes a container's allocation from its header alone, so this runs first. */
static bool scan(const uint8_t *p, size_t len, size_t *pos, int depth) {
  uint64_t n = 0, skip = 0;
  int kind = 0; /* 1 array, 2 map */
  if (depth > TE_MP_MAX_DEPTH || *pos >= len) return false;
  if (!scan_header(p, len, pos, &kind, &n, &skip)) return false;
  if (!kind) {
    if (skip > len - *pos) return false;
    *pos += skip;
    return true;
  }
  uint64_t items = kind == 2 ? n * 2 : n;
  if (items > len - *pos) return false;
  for (uint64_t i = 0; i < items; i++)
    if (!scan(p, len, pos, depth + 1)) return false;
  return true;
}

bool te_mp_prescan(const uint8_t *p, size_t len) {
  size_t pos = 0;
  return scan(p, len, &pos, 0) && pos == len;
}

/* ---- decoding ------------------------------------------------------------------------ */

typedef struct dec {
  const uint8_t *p;
  size_t len, pos;
  void *(*alloc)(void *ud, size_t n);
  void *ud;
} dec_t;

static bool dec_value(dec_t *d, msgpack_object *o, int depth);

static bool dec_items(dec_t *d, msgpack_object *o, uint64_t n, bool map, int depth) {
  if (n > d->len - d->pos) return false; /* prescan checked it; kept for safety */
  if (map) {
    o->type = MSGPACK_OBJECT_MAP;
    o->via.map.size = (uint32_t)n;
    o->via.map.ptr = n ? d->alloc(d->ud, n * sizeof(msgpack_object_kv)) : NULL;
    if (n && !o->via.map.ptr) return false;
    for (uint64_t i = 0; i < n; i++)
      if (!dec_value(d, &o->via.map.ptr[i].key, depth + 1) || !dec_value(d, &o->via.map.ptr[i].val, depth + 1))
        return false;
  } else {
    o->type = MSGPACK_OBJECT_ARRAY;
    o->via.array.size = (uint32_t)n;
    o->via.array.ptr = n ? d->alloc(d->ud, n * sizeof(msgpack_object)) : NULL;
    if (n && !o->via.array.ptr) return false;
    for (uint64_t i = 0; i < n; i++)
      if (!dec_value(d, &o->via.array.ptr[i], depth + 1)) return false;
  }
  return true;
}

static bool dec_bytes(dec_t *d, msgpack_object *o, uint64_t n, bool str) {
  if (n > d->len - d->pos) return false;
  o->type = str ? MSGPACK_OBJECT_STR : MSGPACK_OBJECT_BIN;
  o->via.str.size = (uint32_t)n;
  o->via.str.ptr = (const char *)d->p + d->pos;
  d->pos += n;
  return true;
}

static bool dec_uint(dec_t *d, int k, uint64_t *out) {
  if ((size_t)k > d->len - d->pos) return false;
  *out = be(d->p + d->pos, k);
  d->pos += (size_t)k;
  return true;
}

static bool dec_float(dec_t *d, msgpack_object *o, bool f64) {
  uint64_t v;
  if (!dec_uint(d, f64 ? 8 : 4, &v)) return false;
  if (f64) {
    memcpy(&o->via.f64, &v, 8);
    o->type = MSGPACK_OBJECT_FLOAT64;
    return true;
  }
  uint32_t w = (uint32_t)v;
  float f;
  memcpy(&f, &w, 4);
  o->type = MSGPACK_OBJECT_FLOAT32;
  o->via.f64 = f;
  return true;
}

/* 0xcc..0xd3: unsigned and signed ints of 1, 2, 4, 8 bytes. */
static bool dec_int(dec_t *d, msgpack_object *o, uint8_t b) {
  uint64_t v;
  bool sign = b >= 0xd0;
  int k = 1 << (b - (sign ? 0xd0 : 0xcc));
  if (!dec_uint(d, k, &v)) return false;
  if (!sign) {
    o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
    o->via.u64 = v;
    return true;
  }
  int64_t x = k == 8 ? (int64_t)v : (int64_t)(v << (64 - 8 * k)) >> (64 - 8 * k);
  o->type = x < 0 ? MSGPACK_OBJECT_NEGATIVE_INTEGER : MSGPACK_OBJECT_POSITIVE_INTEGER;
  o->via.i64 = x;
  return true;
}

/* Headers 0xc0..0xdf. */
static bool dec_typed(dec_t *d, msgpack_object *o, uint8_t b, int depth) {
  uint64_t v;
  switch (b) {
  case 0xc0: o->type = MSGPACK_OBJECT_NIL; return true;
  case 0xc2: case 0xc3: o->type = MSGPACK_OBJECT_BOOLEAN; o->via.boolean = b == 0xc3; return true;
  case 0xc4: case 0xc5: case 0xc6: return dec_uint(d, 1 << (b - 0xc4), &v) && dec_bytes(d, o, v, false);
  case 0xd9: case 0xda: case 0xdb: return dec_uint(d, 1 << (b - 0xd9), &v) && dec_bytes(d, o, v, true);
  case 0xca: case 0xcb: return dec_float(d, o, b == 0xcb);
  case 0xcc: case 0xcd: case 0xce: case 0xcf: case 0xd0: case 0xd1: case 0xd2: case 0xd3: return dec_int(d, o, b);
  case 0xdc: case 0xdd: return dec_uint(d, b == 0xdc ? 2 : 4, &v) && dec_items(d, o, v, false, depth);
  case 0xde: case 0xdf: return dec_uint(d, b == 0xde ? 2 : 4, &v) && dec_items(d, o, v, true, depth);
  default: return false; /* ext types and 0xc1: not part of a te program */
  }
}

static bool dec_value(dec_t *d, msgpack_object *o, int depth) {
  if (depth > TE_MP_MAX_DEPTH || d->pos >= d->len) return false;
  memset(o, 0, sizeof(*o));
  uint8_t b = d->p[d->pos++];
  if (b <= 0x7f) {
    o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
    o->via.u64 = b;
    return true;
  }
  if (b >= 0xe0) {
    o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
    o->via.i64 = (int8_t)b;
    return true;
  }
  if (b >= 0x80 && b <= 0x8f) return dec_items(d, o, b & 0x0f, true, depth);
  if (b >= 0x90 && b <= 0x9f) return dec_items(d, o, b & 0x0f, false, depth);
  if (b >= 0xa0 && b <= 0xbf) return dec_bytes(d, o, b & 0x1f, true);
  return dec_typed(d, o, b, depth);
}

bool te_mp_decode(const uint8_t *p, size_t len, void *(*alloc)(void *ud, size_t n), void *ud, msgpack_object *out) {
  if (!te_mp_prescan(p, len)) return false;
  dec_t d = {.p = p, .len = len, .alloc = alloc, .ud = ud};
  return dec_value(&d, out, 0) && d.pos == len;
}
