#include "helpers.h"

#include <stdlib.h>
#include <string.h>

void bytes_free(bytes_t *b) {
  free(b->p);
  b->p = NULL;
  b->n = 0;
}

bytes_t bytes_copy(const void *p, size_t n) {
  bytes_t b = {malloc(n ? n : 1), n};
  if (n) memcpy(b.p, p, n);
  return b;
}

bytes_t bytes_concat(const bytes_t *parts, size_t count) {
  size_t n = 0;
  for (size_t i = 0; i < count; i++) n += parts[i].n;
  bytes_t b = {malloc(n ? n : 1), n};
  size_t o = 0;
  for (size_t i = 0; i < count; i++) {
    memcpy(b.p + o, parts[i].p, parts[i].n);
    o += parts[i].n;
  }
  return b;
}

void packer_init(packer_t *p) {
  msgpack_sbuffer_init(&p->sb);
  msgpack_packer_init(&p->pk, &p->sb, msgpack_sbuffer_write);
}

bytes_t packer_take(packer_t *p) {
  bytes_t b = {(uint8_t *)p->sb.data, p->sb.size};
  if (!b.p) b.p = malloc(1);
  msgpack_sbuffer_init(&p->sb); /* the data now belongs to b */
  return b;
}

void pack_str(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s, n);
}

void pack_bin(msgpack_packer *pk, const void *data, size_t n) {
  msgpack_pack_bin(pk, n);
  msgpack_pack_bin_body(pk, data, n);
}

uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ULL;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545f4914f6cdd1dULL;
}

size_t chunk_whole(void *ctx, size_t left) { return left; }
size_t chunk_one(void *ctx, size_t left) { return 1; }
size_t chunk_fixed(void *ctx, size_t left) { return *(size_t *)ctx; }

size_t chunk_random(void *ctx, size_t left) {
  uint64_t r = rng_next(ctx);
  /* Mostly small pieces (headers split everywhere), sometimes large ones. */
  switch (r % 4) {
    case 0: return 1;
    case 1: return 1 + (r >> 8) % 7;
    case 2: return 1 + (r >> 8) % 64;
    default: return 1 + (r >> 8) % 4096;
  }
}

void feed(kiln_reader_t *r, const uint8_t *p, size_t n, chunker_fn chunk, void *ctx,
          feed_result_t *out) {
  memset(out, 0, sizeof(*out));
  out->last = KILN_FRAME_NEED_MORE;
  size_t last_cap = r->cap;
  size_t off = 0;
  while (off < n) {
    size_t space = 0;
    uint8_t *dst = kiln_reader_space(r, &space);
    if (r->cap != last_cap) {
      out->cap_changes++;
      last_cap = r->cap;
    }
    if (r->cap > out->max_cap) out->max_cap = r->cap;
    if (!dst || space == 0) {
      out->last = KILN_FRAME_ERROR;
      break;
    }
    size_t k = chunk(ctx, n - off);
    if (k > n - off) k = n - off;
    if (k > space) k = space;
    memcpy(dst, p + off, k);
    kiln_reader_commit(r, k);
    off += k;
    for (;;) {
      const uint8_t *m;
      size_t len;
      kiln_frame_result_t res = kiln_reader_next(r, &m, &len);
      if (res != KILN_FRAME_MESSAGE) {
        out->last = res;
        break;
      }
      if (out->count < FEED_MAX_MSGS) out->msgs[out->count] = bytes_copy(m, len);
      out->count++;
    }
    if (out->last == KILN_FRAME_ERROR) break;
  }
  out->committed = off;
}

void feed_result_free(feed_result_t *fr) {
  for (size_t i = 0; i < fr->count && i < FEED_MAX_MSGS; i++) bytes_free(&fr->msgs[i]);
  fr->count = 0;
}

/* --- The valid corpus ------------------------------------------------------------------- */

static void pack_every_scalar(msgpack_packer *pk) {
  /* One map holding each MessagePack family msgpack-c can emit. */
  msgpack_pack_map(pk, 20);
  pack_str(pk, "nil"); msgpack_pack_nil(pk);
  pack_str(pk, "t"); msgpack_pack_true(pk);
  pack_str(pk, "f"); msgpack_pack_false(pk);
  pack_str(pk, "fix"); msgpack_pack_uint8(pk, 7);
  pack_str(pk, "neg"); msgpack_pack_int8(pk, -5);
  pack_str(pk, "u8"); msgpack_pack_uint64(pk, 200);
  pack_str(pk, "u16"); msgpack_pack_uint64(pk, 60000);
  pack_str(pk, "u32"); msgpack_pack_uint64(pk, 4000000000u);
  pack_str(pk, "u64"); msgpack_pack_uint64(pk, UINT64_MAX);
  pack_str(pk, "i8"); msgpack_pack_int64(pk, -100);
  pack_str(pk, "i16"); msgpack_pack_int64(pk, -30000);
  pack_str(pk, "i32"); msgpack_pack_int64(pk, -2000000000);
  pack_str(pk, "i64"); msgpack_pack_int64(pk, INT64_MIN);
  pack_str(pk, "f32"); msgpack_pack_float(pk, 1.5f);
  pack_str(pk, "f64"); msgpack_pack_double(pk, -2.25);
  char s300[300];
  memset(s300, 's', sizeof(s300));
  pack_str(pk, "str16"); msgpack_pack_str(pk, 300); msgpack_pack_str_body(pk, s300, 300);
  pack_str(pk, "str8"); msgpack_pack_str(pk, 40); msgpack_pack_str_body(pk, s300, 40);
  pack_str(pk, "bin16"); pack_bin(pk, s300, 300);
  pack_str(pk, "ext");
  msgpack_pack_array(pk, 8);
  static const char e[20] = "0123456789abcdefghi";
  static const size_t ext_sizes[8] = {1, 2, 4, 8, 16, 3, 0, 17};
  for (int i = 0; i < 8; i++) {
    msgpack_pack_ext(pk, ext_sizes[i], (int8_t)(i - 2));
    msgpack_pack_ext_body(pk, e, ext_sizes[i]);
  }
  pack_str(pk, "big");
  msgpack_pack_array(pk, 3);
  msgpack_pack_array(pk, 20); /* array16 */
  for (int i = 0; i < 20; i++) msgpack_pack_uint8(pk, (uint8_t)i);
  msgpack_pack_map(pk, 17); /* map16 */
  for (int i = 0; i < 17; i++) {
    char k[8] = {'k', (char)('a' + i), 0};
    pack_str(pk, k);
    msgpack_pack_nil(pk);
  }
  char *b70k = malloc(70000);
  memset(b70k, 0xab, 70000);
  pack_bin(pk, b70k, 70000); /* bin32 */
  free(b70k);
}

static void add(corpus_entry_t *out, size_t cap, size_t *n, const char *name, bytes_t b) {
  if (*n < cap) out[(*n)++] = (corpus_entry_t){name, b};
  else bytes_free(&b);
}

size_t valid_corpus(corpus_entry_t *out, size_t cap) {
  size_t n = 0;
  packer_t p;
  packer_init(&p);
  msgpack_packer *pk = &p.pk;

  msgpack_pack_array(pk, 4); msgpack_pack_uint8(pk, 0); msgpack_pack_uint32(pk, 1);
  pack_str(pk, "ping"); msgpack_pack_array(pk, 0);
  add(out, cap, &n, "request, [] params", packer_take(&p));

  msgpack_pack_array(pk, 4); msgpack_pack_uint8(pk, 0); msgpack_pack_uint32(pk, 2);
  pack_str(pk, "hello"); msgpack_pack_array(pk, 1); msgpack_pack_map(pk, 2);
  pack_str(pk, "version"); msgpack_pack_uint8(pk, 1);
  pack_str(pk, "client"); pack_str(pk, "tests");
  add(out, cap, &n, "request, [map] params", packer_take(&p));

  msgpack_pack_array(pk, 4); msgpack_pack_uint8(pk, 0); msgpack_pack_uint32(pk, 3);
  pack_bin(pk, "ping", 4); msgpack_pack_array(pk, 0);
  add(out, cap, &n, "request, bin method", packer_take(&p));

  msgpack_pack_array(pk, 4); msgpack_pack_uint8(pk, 0); msgpack_pack_uint32(pk, 4);
  pack_str(pk, "ping"); msgpack_pack_nil(pk);
  add(out, cap, &n, "request, nil params", packer_take(&p));

  msgpack_pack_array(pk, 4); msgpack_pack_uint8(pk, 0); msgpack_pack_uint32(pk, 5);
  pack_str(pk, "alloc"); msgpack_pack_map(pk, 2);
  pack_str(pk, "dtype"); pack_str(pk, "float32");
  pack_str(pk, "shape"); msgpack_pack_array(pk, 1); msgpack_pack_uint8(pk, 4);
  add(out, cap, &n, "request, bare map params", packer_take(&p));

  msgpack_pack_array(pk, 4); msgpack_pack_uint8(pk, 0); msgpack_pack_uint32(pk, 6);
  pack_str(pk, "upload"); msgpack_pack_array(pk, 1); msgpack_pack_map(pk, 1);
  pack_str(pk, "tensor"); msgpack_pack_map(pk, 3);
  pack_str(pk, "dtype"); pack_str(pk, "float32");
  pack_str(pk, "shape"); msgpack_pack_array(pk, 2); msgpack_pack_uint8(pk, 2); msgpack_pack_uint8(pk, 3);
  float f[6] = {1, 2, 3, 4, 5, 6};
  pack_str(pk, "data"); pack_bin(pk, f, sizeof(f));
  add(out, cap, &n, "request, upload with tensor", packer_take(&p));

  msgpack_pack_array(pk, 4); msgpack_pack_uint8(pk, 1); msgpack_pack_uint32(pk, 7);
  msgpack_pack_nil(pk); pack_str(pk, "pong");
  add(out, cap, &n, "response, result", packer_take(&p));

  msgpack_pack_array(pk, 4); msgpack_pack_uint8(pk, 1); msgpack_pack_uint32(pk, 8);
  msgpack_pack_array(pk, 2); msgpack_pack_uint8(pk, 1); pack_str(pk, "field 'x' is bad");
  msgpack_pack_nil(pk);
  add(out, cap, &n, "response, error", packer_take(&p));

  msgpack_pack_array(pk, 4); msgpack_pack_uint8(pk, 1); msgpack_pack_uint32(pk, 9);
  msgpack_pack_nil(pk); msgpack_pack_map(pk, 1);
  pack_str(pk, "id"); msgpack_pack_uint64(pk, 0x7123456789abcdefULL);
  add(out, cap, &n, "response, map result", packer_take(&p));

  msgpack_pack_array(pk, 3); msgpack_pack_uint8(pk, 2); pack_str(pk, "error");
  msgpack_pack_array(pk, 1); msgpack_pack_map(pk, 2);
  pack_str(pk, "code"); msgpack_pack_uint8(pk, 1);
  pack_str(pk, "message"); pack_str(pk, "not MessagePack");
  add(out, cap, &n, "notification, [map] params", packer_take(&p));

  msgpack_pack_array(pk, 3); msgpack_pack_uint8(pk, 2); pack_str(pk, "note");
  msgpack_pack_array(pk, 0);
  add(out, cap, &n, "notification, [] params", packer_take(&p));

  msgpack_pack_array(pk, 4); msgpack_pack_uint8(pk, 0); msgpack_pack_uint32(pk, UINT32_MAX);
  pack_str(pk, "ping"); msgpack_pack_array(pk, 0);
  add(out, cap, &n, "request, msgid 2^32-1", packer_take(&p));

  msgpack_pack_array(pk, 4); msgpack_pack_uint8(pk, 0); msgpack_pack_uint32(pk, 10);
  pack_str(pk, "every"); msgpack_pack_array(pk, 1); pack_every_scalar(pk);
  add(out, cap, &n, "request, every MessagePack type", packer_take(&p));

  msgpack_pack_array(pk, 4); msgpack_pack_uint8(pk, 0); msgpack_pack_uint32(pk, 11);
  pack_str(pk, "empty"); msgpack_pack_array(pk, 1); msgpack_pack_map(pk, 3);
  pack_str(pk, "a"); msgpack_pack_array(pk, 0);
  pack_str(pk, "m"); msgpack_pack_map(pk, 0);
  pack_str(pk, "s"); pack_str(pk, "");
  add(out, cap, &n, "request, empty containers", packer_take(&p));

  /* Depth exactly 32: message array (1), params array (2), map (3), 29 arrays. */
  msgpack_pack_array(pk, 4); msgpack_pack_uint8(pk, 0); msgpack_pack_uint32(pk, 12);
  pack_str(pk, "deep"); msgpack_pack_array(pk, 1); msgpack_pack_map(pk, 1); pack_str(pk, "x");
  for (int i = 0; i < 29; i++) msgpack_pack_array(pk, 1);
  msgpack_pack_nil(pk);
  add(out, cap, &n, "request, depth 32", packer_take(&p));

  /* Hand-written: non-minimal encodings a conforming peer may send. */
  add(out, cap, &n, "request, wide encodings",
      BYTES_LIT(0xdc, 0x00, 0x04,                   /* array16 of 4 */
                0xcc, 0x00,                         /* type 0 as uint8 */
                0xce, 0x00, 0x00, 0x01, 0x00,       /* msgid 256 as uint32 */
                0xdb, 0x00, 0x00, 0x00, 0x04, 'p', 'i', 'n', 'g', /* str32 */
                0xdd, 0x00, 0x00, 0x00, 0x01,       /* array32 of 1 */
                0xdf, 0x00, 0x00, 0x00, 0x01,       /* map32 of 1 */
                0xd9, 0x01, 'k', 0xc5, 0x00, 0x02, 0xff, 0xfe)); /* str8 key, bin16 */
  add(out, cap, &n, "notification, bin method, nil params",
      BYTES_LIT(0x93, 0x02, 0xc4, 0x01, 'x', 0xc0));
  add(out, cap, &n, "response, error with uint16 msgid",
      BYTES_LIT(0x94, 0x01, 0xcd, 0x12, 0x34, 0x92, 0x05, 0xa3, 'n', 'o', '!', 0xc0));

  msgpack_sbuffer_destroy(&p.sb);
  return n;
}

void corpus_free(corpus_entry_t *c, size_t n) {
  for (size_t i = 0; i < n; i++) bytes_free(&c[i].bytes);
}
