/* The bounded MessagePack reader and its typed getters (protocol/mp.h). */
#include "protocol/mp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const kiln_mp_err_t kiln_mp_err_params = {KILN_E_INVALID_ARGUMENT, "", "field"};

static const char *noun(const kiln_mp_err_t *e) { return e->noun ? e->noun : "field"; }

/* --- decoding --------------------------------------------------------------------------- */

typedef struct dec {
  const kiln_mp_reader_t *r;
  const uint8_t *p;
  size_t len, pos;
  const char *why; /* the first refusal (a static string), at byte `at` */
  size_t at;
  bool nomem;
} dec_t;

static bool refuse(dec_t *d, const char *why) {
  d->why = why;
  d->at = d->pos;
  return false;
}

/* k bytes, big-endian. */
static bool take(dec_t *d, size_t k, uint64_t *out) {
  if (k > d->len - d->pos) return refuse(d, "the input ends inside a value");
  uint64_t v = 0;
  for (size_t i = 0; i < k; i++) v = v << 8 | d->p[d->pos + i];
  d->pos += k;
  *out = v;
  return true;
}

static bool value(dec_t *d, msgpack_object *o, uint32_t depth);

/* n elements (n pairs for a map) of a container whose own depth is `depth`. The count is
 * checked against the bytes left before anything is allocated. */
static bool items(dec_t *d, msgpack_object *o, uint64_t n, bool map, uint32_t depth) {
  uint64_t need = map ? 2 * n : n;
  if (need > d->len - d->pos)
    return refuse(d, "a container announces more elements than the bytes left can hold");
  if (n && depth + 1 > d->r->max_depth) return refuse(d, "values nest too deep");
  void *mem = NULL;
  if (n) {
    mem = d->r->alloc(d->r->ud, (size_t)n * (map ? sizeof(msgpack_object_kv) : sizeof(msgpack_object)));
    if (!mem) {
      d->nomem = true;
      return false;
    }
  }
  if (map) {
    o->type = MSGPACK_OBJECT_MAP;
    o->via.map.size = (uint32_t)n;
    o->via.map.ptr = mem;
    for (uint64_t i = 0; i < n; i++)
      if (!value(d, &o->via.map.ptr[i].key, depth + 1) || !value(d, &o->via.map.ptr[i].val, depth + 1))
        return false;
    return true;
  }
  o->type = MSGPACK_OBJECT_ARRAY;
  o->via.array.size = (uint32_t)n;
  o->via.array.ptr = mem;
  for (uint64_t i = 0; i < n; i++)
    if (!value(d, &o->via.array.ptr[i], depth + 1)) return false;
  return true;
}

static bool bytes(dec_t *d, msgpack_object *o, uint64_t n, msgpack_object_type type) {
  if (n > d->len - d->pos) return refuse(d, "a str or bin runs past the end of the input");
  o->type = type;
  o->via.str.size = (uint32_t)n; /* str and bin share their layout */
  o->via.str.ptr = (const char *)d->p + d->pos;
  d->pos += n;
  return true;
}

/* ext: a type byte, then n bytes. */
static bool ext(dec_t *d, msgpack_object *o, uint64_t n) {
  if (!d->r->ext) return refuse(d, "ext values are not accepted here");
  uint64_t t;
  if (!take(d, 1, &t)) return false;
  if (n > d->len - d->pos) return refuse(d, "an ext value runs past the end of the input");
  o->type = MSGPACK_OBJECT_EXT;
  o->via.ext.type = (int8_t)(uint8_t)t;
  o->via.ext.size = (uint32_t)n;
  o->via.ext.ptr = (const char *)d->p + d->pos;
  d->pos += n;
  return true;
}

static bool number(dec_t *d, msgpack_object *o, uint8_t b) {
  uint64_t v;
  if (b == 0xca || b == 0xcb) {
    if (!take(d, b == 0xcb ? 8 : 4, &v)) return false;
    if (b == 0xcb) {
      memcpy(&o->via.f64, &v, 8);
      o->type = MSGPACK_OBJECT_FLOAT64;
    } else {
      uint32_t w = (uint32_t)v;
      float f;
      memcpy(&f, &w, 4);
      o->via.f64 = f;
      o->type = MSGPACK_OBJECT_FLOAT32;
    }
    return true;
  }
  bool sign = b >= 0xd0; /* 0xcc..0xcf unsigned, 0xd0..0xd3 signed; 1, 2, 4, 8 bytes */
  unsigned k = 1u << (b - (sign ? 0xd0 : 0xcc));
  if (!take(d, k, &v)) return false;
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

/* Type bytes 0xc0..0xdf. */
static bool typed(dec_t *d, msgpack_object *o, uint8_t b, uint32_t depth) {
  uint64_t v;
  switch (b) {
  case 0xc0: o->type = MSGPACK_OBJECT_NIL; return true;
  case 0xc2: case 0xc3:
    o->type = MSGPACK_OBJECT_BOOLEAN;
    o->via.boolean = b == 0xc3;
    return true;
  case 0xc4: case 0xc5: case 0xc6:
    return take(d, 1u << (b - 0xc4), &v) && bytes(d, o, v, MSGPACK_OBJECT_BIN);
  case 0xd9: case 0xda: case 0xdb:
    return take(d, 1u << (b - 0xd9), &v) && bytes(d, o, v, MSGPACK_OBJECT_STR);
  case 0xc7: case 0xc8: case 0xc9: return take(d, 1u << (b - 0xc7), &v) && ext(d, o, v);
  case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: return ext(d, o, 1u << (b - 0xd4));
  case 0xdc: case 0xdd: return take(d, b == 0xdc ? 2 : 4, &v) && items(d, o, v, false, depth);
  case 0xde: case 0xdf: return take(d, b == 0xde ? 2 : 4, &v) && items(d, o, v, true, depth);
  case 0xc1: d->pos--; return refuse(d, "byte 0xc1 starts no value");
  default: return number(d, o, b);
  }
}

static bool value(dec_t *d, msgpack_object *o, uint32_t depth) {
  if (d->pos >= d->len) return refuse(d, "the input ends where a value should start");
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
  if (b <= 0x8f) return items(d, o, b & 0x0f, true, depth);
  if (b <= 0x9f) return items(d, o, b & 0x0f, false, depth);
  if (b <= 0xbf) return bytes(d, o, b & 0x1f, MSGPACK_OBJECT_STR);
  return typed(d, o, b, depth);
}

kiln_status_t kiln_mp_read(const kiln_mp_reader_t *r, const uint8_t *p, size_t len,
                           msgpack_object *out) {
  dec_t d = {.r = r, .p = p, .len = p ? len : 0};
  bool ok = value(&d, out, 0);
  if (ok && d.pos != d.len) ok = refuse(&d, "bytes follow the value");
  if (ok) return KILN_OK;
  if (d.nomem)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "%sout of memory decoding %zu bytes of MessagePack",
                       r->err->prefix, len);
  return kiln_status_make(r->err->code, __FILE__, __LINE__,
                          "%snot one MessagePack value nested at most %u deep: %s (byte %zu of %zu)",
                          r->err->prefix, r->max_depth, d.why, d.at, len);
}

/* --- a document with its own memory ------------------------------------------------------ */

struct kiln_mp_block {
  kiln_mp_block_t *next;
  _Alignas(16) uint8_t data[];
};

static void *doc_alloc(void *ud, size_t n) {
  kiln_mp_doc_t *doc = ud;
  n = (n + 15) & ~(size_t)15;
  if (doc->cap - doc->used < n) {
    /* Blocks double from 4 KiB up to 1 MiB; a larger container gets a block of its own. */
    size_t cap = doc->cap < 4096 ? 4096 : doc->cap >= (1u << 20) ? doc->cap : doc->cap * 2;
    if (cap < n) cap = n;
    kiln_mp_block_t *b = malloc(sizeof(*b) + cap);
    if (!b) return NULL;
    b->next = doc->blocks;
    doc->blocks = b;
    doc->at = b->data;
    doc->cap = cap;
    doc->used = 0;
  }
  void *p = doc->at + doc->used;
  doc->used += n;
  return p;
}

kiln_status_t kiln_mp_doc_read(kiln_mp_doc_t *doc, const uint8_t *p, size_t len,
                               uint32_t max_depth, bool ext_ok, const kiln_mp_err_t *err) {
  doc->blocks = NULL;
  doc->at = doc->inline_block;
  doc->cap = sizeof(doc->inline_block);
  doc->used = 0;
  doc->root.type = MSGPACK_OBJECT_NIL;
  kiln_mp_reader_t r = {.max_depth = max_depth, .ext = ext_ok, .err = err, .alloc = doc_alloc, .ud = doc};
  return kiln_mp_read(&r, p, len, &doc->root);
}

void kiln_mp_doc_deinit(kiln_mp_doc_t *doc) {
  for (kiln_mp_block_t *b = doc->blocks, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  doc->blocks = NULL;
  doc->cap = doc->used = 0;
}

/* --- values ------------------------------------------------------------------------------ */

#define REFUSE(e, ...) kiln_status_make((e)->code, __FILE__, __LINE__, __VA_ARGS__)

bool kiln_mp_text(const msgpack_object *o, const char **out_ptr, uint32_t *out_len) {
  if (o->type != MSGPACK_OBJECT_STR && o->type != MSGPACK_OBJECT_BIN) return false;
  *out_ptr = o->via.str.ptr ? o->via.str.ptr : "";
  *out_len = o->via.str.size;
  return true;
}

bool kiln_mp_eq(const msgpack_object *o, const char *s) {
  const char *p;
  uint32_t n;
  if (!kiln_mp_text(o, &p, &n)) return false;
  size_t sn = strlen(s);
  return n == sn && memcmp(p, s, n) == 0;
}

kiln_status_t kiln_mp_uint(const kiln_mp_err_t *e, const msgpack_object *o, const char *what,
                           uint64_t max, uint64_t *out) {
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max)
    return REFUSE(e, "%s%s must be an integer from 0 to %llu", e->prefix, what,
                  (unsigned long long)max);
  *out = o->via.u64;
  return KILN_OK;
}

kiln_status_t kiln_mp_cstr(const kiln_mp_err_t *e, const msgpack_object *o, const char *what,
                           char *out, size_t cap) {
  if (o->type != MSGPACK_OBJECT_STR) return REFUSE(e, "%s%s must be a string", e->prefix, what);
  if (o->via.str.size >= cap)
    return REFUSE(e, "%s%s is too long (%u bytes, at most %zu)", e->prefix, what, o->via.str.size,
                  cap - 1);
  if (o->via.str.size && memchr(o->via.str.ptr, 0, o->via.str.size))
    return REFUSE(e, "%s%s contains a NUL byte", e->prefix, what);
  if (o->via.str.size) memcpy(out, o->via.str.ptr, o->via.str.size);
  out[o->via.str.size] = 0;
  return KILN_OK;
}

kiln_status_t kiln_mp_opt_text(const kiln_mp_err_t *e, const msgpack_object *o, const char *what,
                               char **out) {
  *out = NULL;
  if (o->type == MSGPACK_OBJECT_NIL) return KILN_OK;
  if (o->type != MSGPACK_OBJECT_STR) return REFUSE(e, "%s%s must be a string or nil", e->prefix, what);
  if (memchr(o->via.str.ptr, 0, o->via.str.size))
    return REFUSE(e, "%s%s contains a NUL byte", e->prefix, what);
  char *s = malloc(o->via.str.size + 1);
  if (!s) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "%sout of memory decoding %s", e->prefix, what);
  if (o->via.str.size) memcpy(s, o->via.str.ptr, o->via.str.size);
  s[o->via.str.size] = 0;
  *out = s;
  return KILN_OK;
}

/* --- fields ------------------------------------------------------------------------------ */

const msgpack_object *kiln_mp_find(const msgpack_object *map, const char *name) {
  if (!map || map->type != MSGPACK_OBJECT_MAP) return NULL;
  for (uint32_t i = 0; i < map->via.map.size; i++)
    if (kiln_mp_eq(&map->via.map.ptr[i].key, name)) return &map->via.map.ptr[i].val;
  return NULL;
}

kiln_status_t kiln_mp_check_keys(const kiln_mp_err_t *e, const msgpack_object *map,
                                 const char *what, const char *const *allowed) {
  if (!map) return KILN_OK;
  if (map->type != MSGPACK_OBJECT_MAP) return REFUSE(e, "%s%s must be a map", e->prefix, what);
  for (uint32_t i = 0; i < map->via.map.size; i++) {
    const msgpack_object *k = &map->via.map.ptr[i].key;
    bool ok = false;
    for (const char *const *a = allowed; *a && !ok; a++) ok = kiln_mp_eq(k, *a);
    if (ok) {
      /* A key may be a str or a bin; the same name in either form is the same field. */
      const char *kp, *jp;
      uint32_t kn, jn;
      kiln_mp_text(k, &kp, &kn);
      for (uint32_t j = 0; j < i; j++)
        if (kiln_mp_text(&map->via.map.ptr[j].key, &jp, &jn) && jn == kn && memcmp(jp, kp, kn) == 0)
          return REFUSE(e, "%s%s: %s '%.*s' appears twice", e->prefix, what, noun(e), (int)kn, kp);
      continue;
    }
    char list[256] = "";
    size_t o = 0;
    for (const char *const *a = allowed; *a && o < sizeof(list); a++)
      o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s", o ? ", " : "", *a);
    if (k->type != MSGPACK_OBJECT_STR)
      return REFUSE(e, "%s%s: %s names must be strings", e->prefix, what, noun(e));
    int kn = (int)(k->via.str.size < 64u ? k->via.str.size : 64u);
    return REFUSE(e, "%s%s: unknown %s '%.*s'; known %ss: %s", e->prefix, what, noun(e), kn,
                  k->via.str.ptr, noun(e), o ? list : "(none)");
  }
  return KILN_OK;
}

static kiln_status_t wrong(const kiln_mp_err_t *e, const char *name, const char *want) {
  return REFUSE(e, "%s%s '%s' must be %s", e->prefix, noun(e), name, want);
}

/* The field's value, or NULL when absent or nil (*st says whether that is an error). */
static const msgpack_object *field(const kiln_mp_err_t *e, const msgpack_object *map,
                                   const char *name, bool required, kiln_status_t *st) {
  const msgpack_object *o = kiln_mp_find(map, name);
  *st = KILN_OK;
  if (o && o->type != MSGPACK_OBJECT_NIL) return o;
  if (required) *st = REFUSE(e, "%smissing required %s '%s'", e->prefix, noun(e), name);
  return NULL;
}

#define FIELD_OR_RETURN(o)                                          \
  kiln_status_t st_;                                                \
  const msgpack_object *o = field(e, map, name, required, &st_);    \
  if (!o) return st_

kiln_status_t kiln_mp_field_text(const kiln_mp_err_t *e, const msgpack_object *map,
                                 const char *name, bool required, const char **out_ptr,
                                 uint32_t *out_len) {
  FIELD_OR_RETURN(o);
  if (!kiln_mp_text(o, out_ptr, out_len)) return wrong(e, name, "a string");
  return KILN_OK;
}

kiln_status_t kiln_mp_field_bytes(const kiln_mp_err_t *e, const msgpack_object *map,
                                  const char *name, bool required, const uint8_t **out_ptr,
                                  size_t *out_len) {
  FIELD_OR_RETURN(o);
  const char *p;
  uint32_t n;
  if (!kiln_mp_text(o, &p, &n)) return wrong(e, name, "bytes (bin) or a string");
  *out_ptr = (const uint8_t *)p;
  *out_len = n;
  return KILN_OK;
}

kiln_status_t kiln_mp_field_u64(const kiln_mp_err_t *e, const msgpack_object *map,
                                const char *name, bool required, uint64_t *out) {
  FIELD_OR_RETURN(o);
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return wrong(e, name, "a non-negative integer");
  *out = o->via.u64;
  return KILN_OK;
}

kiln_status_t kiln_mp_field_i64(const kiln_mp_err_t *e, const msgpack_object *map,
                                const char *name, bool required, int64_t *out) {
  FIELD_OR_RETURN(o);
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) *out = o->via.i64;
  else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
    *out = (int64_t)o->via.u64;
  else return wrong(e, name, "a 64-bit signed integer");
  return KILN_OK;
}

kiln_status_t kiln_mp_field_f64(const kiln_mp_err_t *e, const msgpack_object *map,
                                const char *name, bool required, double *out) {
  FIELD_OR_RETURN(o);
  if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64) *out = o->via.f64;
  else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) *out = (double)o->via.u64;
  else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) *out = (double)o->via.i64;
  else return wrong(e, name, "a number");
  return KILN_OK;
}

kiln_status_t kiln_mp_field_bool(const kiln_mp_err_t *e, const msgpack_object *map,
                                 const char *name, bool required, bool *out) {
  FIELD_OR_RETURN(o);
  if (o->type != MSGPACK_OBJECT_BOOLEAN) return wrong(e, name, "true or false");
  *out = o->via.boolean;
  return KILN_OK;
}

kiln_status_t kiln_mp_field_array(const kiln_mp_err_t *e, const msgpack_object *map,
                                  const char *name, bool required,
                                  const msgpack_object_array **out) {
  FIELD_OR_RETURN(o);
  if (o->type != MSGPACK_OBJECT_ARRAY) return wrong(e, name, "an array");
  *out = &o->via.array;
  return KILN_OK;
}

kiln_status_t kiln_mp_field_map(const kiln_mp_err_t *e, const msgpack_object *map,
                                const char *name, bool required, const msgpack_object **out) {
  FIELD_OR_RETURN(o);
  if (o->type != MSGPACK_OBJECT_MAP) return wrong(e, name, "a map");
  *out = o;
  return KILN_OK;
}
