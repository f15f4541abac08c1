/* Maps that count their fields (protocol/rpc.h kiln_fields_t): the bytes are exactly those of
 * msgpack_pack_map(n) with the same fields, in each header form (fixmap, map16, map32, and at
 * the edges between them), nested, with conditional fields, after an out of memory. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "protocol/rpc.h"

typedef struct {
  kiln_buf_t buf;
  kiln_packer_t p;
} out_t;

static void out_init(out_t *o) {
  kiln_buf_init(&o->buf);
  kiln_packer_init(&o->p, &o->buf);
}

static void same_bytes(out_t *got, out_t *want, const char *what) {
  cr_assert_null(kiln_packer_status(&got->p), "%s", what);
  cr_assert_eq(got->buf.len, want->buf.len, "%s: %zu bytes, want %zu", what, got->buf.len,
               want->buf.len);
  cr_assert(memcmp(got->buf.data, want->buf.data, want->buf.len) == 0, "%s: bytes differ", what);
  kiln_buf_deinit(&got->buf);
  kiln_buf_deinit(&want->buf);
}

/* n fields "kI": I (keys of increasing length, so a moved field that lands one byte off shows). */
static void counted(msgpack_packer *pk, uint32_t n) {
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  char key[16];
  for (uint32_t i = 0; i < n; i++) {
    snprintf(key, sizeof(key), "k%u", i);
    kiln_fields_u64(&m, key, i);
  }
  kiln_fields_end(&m);
}

static void by_hand(msgpack_packer *pk, uint32_t n) {
  msgpack_pack_map(pk, n);
  char key[16];
  for (uint32_t i = 0; i < n; i++) {
    snprintf(key, sizeof(key), "k%u", i);
    kiln_pack_kv_u64(pk, key, i);
  }
}

Test(fields, every_header_form_and_its_edges) {
  static const uint32_t sizes[] = {0, 1, 2, 14, 15, 16, 17, 255, 256, 65534, 65535, 65536, 70000};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    out_t got, want;
    out_init(&got);
    out_init(&want);
    /* Something before the map: the header is patched at its offset, not at 0. */
    msgpack_pack_array(&got.p.pk, 2);
    msgpack_pack_array(&want.p.pk, 2);
    kiln_pack_cstr(&got.p.pk, "head");
    kiln_pack_cstr(&want.p.pk, "head");
    counted(&got.p.pk, sizes[i]);
    by_hand(&want.p.pk, sizes[i]);
    uint8_t first = got.buf.data[6];
    char what[32];
    snprintf(what, sizeof(what), "%u fields", sizes[i]);
    same_bytes(&got, &want, what);
    cr_assert_eq(first, sizes[i] < 16 ? 0x80 | sizes[i] : sizes[i] < 65536 ? 0xde : 0xdf, "%s",
                 what);
  }
}

/* A reply as the handlers write one: fields that depend on the request, nested maps (one of
 * them big enough to move), an array of maps, and a field after the nested ones. */
static void reply(msgpack_packer *pk, bool opt, uint32_t inner, bool counted_form) {
  kiln_fields_t m, sub, row;
  if (counted_form) {
    kiln_fields_begin(&m, pk);
    kiln_fields_str(&m, "name", "x");
    if (opt) kiln_fields_bool(&m, "opt", true);
    kiln_fields_key(&m, "inner");
    kiln_fields_begin(&sub, pk);
    for (uint32_t i = 0; i < inner; i++) {
      char key[16];
      snprintf(key, sizeof(key), "i%u", i);
      kiln_fields_i64(&sub, key, -(int64_t)i);
    }
    kiln_fields_end(&sub);
    kiln_fields_key(&m, "rows");
    msgpack_pack_array(pk, 2);
    for (int r = 0; r < 2; r++) {
      kiln_fields_begin(&row, pk);
      kiln_fields_f64(&row, "v", r * 0.5);
      if (r && opt) kiln_fields_str(&row, "note", "second");
      kiln_fields_end(&row);
    }
    kiln_fields_u64(&m, "last", 7);
    kiln_fields_end(&m);
    return;
  }
  msgpack_pack_map(pk, opt ? 5 : 4);
  kiln_pack_kv_str(pk, "name", "x");
  if (opt) kiln_pack_kv_bool(pk, "opt", true);
  kiln_pack_cstr(pk, "inner");
  msgpack_pack_map(pk, inner);
  for (uint32_t i = 0; i < inner; i++) {
    char key[16];
    snprintf(key, sizeof(key), "i%u", i);
    kiln_pack_kv_i64(pk, key, -(int64_t)i);
  }
  kiln_pack_cstr(pk, "rows");
  msgpack_pack_array(pk, 2);
  for (int r = 0; r < 2; r++) {
    msgpack_pack_map(pk, r && opt ? 2 : 1);
    kiln_pack_kv_f64(pk, "v", r * 0.5);
    if (r && opt) kiln_pack_kv_str(pk, "note", "second");
  }
  kiln_pack_kv_u64(pk, "last", 7);
}

Test(fields, conditional_and_nested_fields) {
  static const uint32_t inner[] = {0, 3, 16, 300};
  for (int opt = 0; opt < 2; opt++)
    for (size_t i = 0; i < sizeof(inner) / sizeof(inner[0]); i++) {
      out_t got, want;
      out_init(&got);
      out_init(&want);
      kiln_rpc_pack_result_head(&got.p.pk, 9);
      kiln_rpc_pack_result_head(&want.p.pk, 9);
      reply(&got.p.pk, opt, inner[i], true);
      reply(&want.p.pk, opt, inner[i], false);
      char what[48];
      snprintf(what, sizeof(what), "opt %d, %u inner fields", opt, inner[i]);
      same_bytes(&got, &want, what);
    }
}

/* The result decodes as the map it claims to be (what a client sees). */
Test(fields, decodes_as_a_map) {
  out_t o;
  out_init(&o);
  counted(&o.p.pk, 20);
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  cr_assert_eq(msgpack_unpack_next(&u, (const char *)o.buf.data, o.buf.len, &off),
               MSGPACK_UNPACK_SUCCESS);
  cr_assert_eq(off, o.buf.len);
  cr_assert_eq(u.data.type, MSGPACK_OBJECT_MAP);
  cr_assert_eq(u.data.via.map.size, 20);
  cr_assert_eq(u.data.via.map.ptr[19].val.via.u64, 19);
  msgpack_unpacked_destroy(&u);
  kiln_buf_deinit(&o.buf);
}

/* Out of memory: the packer reports it, and end neither writes past the buffer nor crashes. */
Test(fields, out_of_memory_is_the_packers_status) {
  out_t o;
  out_init(&o);
  kiln_fields_t m;
  kiln_fields_begin(&m, &o.p.pk);
  for (int i = 0; i < 20; i++) kiln_fields_u64(&m, "k", 1);
  o.p.failed = true; /* as the packer's write leaves it when an append fails */
  kiln_fields_end(&m);
  cr_assert_not_null(kiln_packer_status(&o.p));
  cr_assert_eq(o.buf.data[0], 0x80, "the header was left as reserved");
  kiln_buf_deinit(&o.buf);
}

/* A packer with no kiln_buf behind it cannot be patched: a bug, found at once. */
static int discard(void *data, const char *buf, size_t len) {
  (void)data, (void)buf, (void)len;
  return 0;
}

Test(fields, another_packer_aborts, .signal = SIGABRT) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, NULL, discard);
  kiln_fields_t m;
  kiln_fields_begin(&m, &pk);
}
