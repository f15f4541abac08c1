/* protocol/mp.h: the bounded reader agrees with msgpack-c on every valid message, refuses
 * hostile headers before allocating, bounds nesting by the caller's depth, and its getters
 * report the caller's code and prefix. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/mp.h"
#include "tests/protocol/helpers.h"

static const kiln_mp_err_t test_err = {KILN_E_COMPILE, "test: ", "key"};

/* Counts what the reader allocates, to show that a hostile header costs nothing. */
static size_t allocated;
static _Alignas(16) uint8_t pool[1 << 20];
static void *counting_alloc(void *ud, size_t n) {
  (void)ud;
  n = (n + 15) & ~(size_t)15;
  if (allocated + n > sizeof pool) return NULL;
  allocated += n;
  return pool + allocated - n;
}

static kiln_status_t read_with(const uint8_t *p, size_t n, uint32_t depth, bool ext, kiln_mp_doc_t *doc) {
  return kiln_mp_doc_read(doc, p, n, depth, ext, &test_err);
}

static void expect_refused(const uint8_t *p, size_t n, uint32_t depth, const char *why) {
  kiln_mp_doc_t doc;
  kiln_status_t st = read_with(p, n, depth, true, &doc);
  cr_assert(st, "accepted: %s", why);
  cr_expect_eq(kiln_status_code(st), KILN_E_COMPILE, "%s", kiln_status_message(st));
  cr_expect(strncmp(kiln_status_message(st), "test: not one MessagePack value", 31) == 0, "%s",
            kiln_status_message(st));
  cr_expect(strstr(kiln_status_message(st), why), "%s lacks '%s'", kiln_status_message(st), why);
  kiln_status_free(st);
  kiln_mp_doc_deinit(&doc);
}

Test(mp, agrees_with_msgpack_c_on_the_valid_corpus) {
  corpus_entry_t c[128];
  size_t n = valid_corpus(c, 128);
  cr_assert_gt(n, 10);
  for (size_t i = 0; i < n; i++) {
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    cr_assert_eq(msgpack_unpack_next(&u, (const char *)c[i].bytes.p, c[i].bytes.n, &off),
                 MSGPACK_UNPACK_SUCCESS, "%s", c[i].name);
    kiln_mp_doc_t doc;
    kiln_status_t st = read_with(c[i].bytes.p, c[i].bytes.n, 64, true, &doc);
    cr_assert(!st, "%s: %s", c[i].name, kiln_status_message(st));
    cr_expect(msgpack_object_equal(doc.root, u.data), "%s decodes differently", c[i].name);
    kiln_mp_doc_deinit(&doc);
    msgpack_unpacked_destroy(&u);
  }
  corpus_free(c, n);
}

Test(mp, a_large_array_spills_into_heap_blocks) {
  packer_t p;
  packer_init(&p);
  msgpack_pack_array(&p.pk, 5000);
  for (int i = 0; i < 5000; i++) {
    msgpack_pack_map(&p.pk, 1);
    pack_str(&p.pk, "k");
    msgpack_pack_int(&p.pk, -i);
  }
  bytes_t b = packer_take(&p);
  kiln_mp_doc_t doc;
  cr_assert(!read_with(b.p, b.n, 4, false, &doc));
  cr_assert_eq(doc.root.via.array.size, 5000);
  cr_expect_eq(kiln_mp_find(&doc.root.via.array.ptr[4999], "k")->via.i64, -4999);
  cr_expect_neq(doc.blocks, NULL);
  kiln_mp_doc_deinit(&doc);
  bytes_free(&b);
}

Test(mp, hostile_headers_are_refused_before_anything_is_allocated) {
  /* An array32 of 2^32-1 elements, a map32 of as many pairs, a bin32 of 4 GiB, in 5 bytes. */
  const uint8_t arr[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x00};
  const uint8_t map[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00};
  const uint8_t bin[] = {0xc6, 0xff, 0xff, 0xff, 0xff, 0x00};
  const uint8_t *inputs[] = {arr, map, bin};
  size_t lens[] = {sizeof arr, sizeof map, sizeof bin};
  for (int i = 0; i < 3; i++) {
    allocated = 0;
    kiln_mp_reader_t r = {.max_depth = 8, .err = &test_err, .alloc = counting_alloc};
    msgpack_object o;
    kiln_status_t st = kiln_mp_read(&r, inputs[i], lens[i], &o);
    cr_assert(st);
    cr_expect_eq(kiln_status_code(st), KILN_E_COMPILE);
    cr_expect_eq(allocated, 0, "input %d allocated %zu bytes", i, allocated);
    kiln_status_free(st);
  }
  expect_refused(arr, sizeof arr, 8, "more elements than the bytes left");
  expect_refused(bin, sizeof bin, 8, "runs past the end");
}

Test(mp, memory_is_bounded_by_the_input) {
  /* 4,000 one-byte elements: the tree costs a fixed multiple of the bytes, no more. */
  packer_t p;
  packer_init(&p);
  msgpack_pack_array(&p.pk, 4000);
  for (int i = 0; i < 4000; i++) msgpack_pack_array(&p.pk, 0);
  bytes_t b = packer_take(&p);
  allocated = 0;
  kiln_mp_reader_t r = {.max_depth = 2, .err = &test_err, .alloc = counting_alloc};
  msgpack_object o;
  cr_assert(!kiln_mp_read(&r, b.p, b.n, &o));
  cr_expect_leq(allocated, b.n * sizeof(msgpack_object));
  bytes_free(&b);
}

static bytes_t nested(int levels) {
  packer_t p;
  packer_init(&p);
  for (int i = 0; i < levels; i++) msgpack_pack_array(&p.pk, 1);
  msgpack_pack_nil(&p.pk);
  return packer_take(&p);
}

Test(mp, depth_is_the_callers) {
  /* nil inside 8 arrays: 8 containers around it. */
  bytes_t b = nested(8);
  kiln_mp_doc_t doc;
  cr_expect(!read_with(b.p, b.n, 8, false, &doc));
  kiln_mp_doc_deinit(&doc);
  expect_refused(b.p, b.n, 7, "nest too deep");
  bytes_free(&b);
  /* Deep enough to overflow a stack if the recursion were not bounded. */
  b = nested(200000);
  expect_refused(b.p, b.n, 256, "nest too deep");
  bytes_free(&b);
}

Test(mp, malformed_inputs_name_what_and_where) {
  expect_refused((const uint8_t[]){0xc1}, 1, 8, "0xc1");
  expect_refused((const uint8_t[]){0x92, 0x01}, 2, 8, "more elements than the bytes left");
  expect_refused((const uint8_t[]){0xcd, 0x01}, 2, 8, "ends inside a value");
  expect_refused((const uint8_t[]){0x01, 0x02}, 2, 8, "bytes follow the value (byte 1 of 2)");
  expect_refused(NULL, 0, 8, "ends where a value should start");
}

Test(mp, ext_is_the_callers_choice) {
  const uint8_t fixext[] = {0xd4, 0x05, 0xaa};
  kiln_mp_doc_t doc;
  cr_assert(!read_with(fixext, sizeof fixext, 8, true, &doc));
  cr_expect_eq(doc.root.type, MSGPACK_OBJECT_EXT);
  cr_expect_eq(doc.root.via.ext.type, 5);
  cr_expect_eq(doc.root.via.ext.size, 1);
  kiln_mp_doc_deinit(&doc);
  kiln_status_t st = read_with(fixext, sizeof fixext, 8, false, &doc);
  cr_assert(st);
  cr_expect(strstr(kiln_status_message(st), "ext values are not accepted"));
  kiln_status_free(st);
  kiln_mp_doc_deinit(&doc);
}

Test(mp, getters_report_the_callers_code_and_words) {
  packer_t p;
  packer_init(&p);
  msgpack_pack_map(&p.pk, 3);
  pack_str(&p.pk, "n");
  msgpack_pack_int(&p.pk, -3);
  pack_str(&p.pk, "s");
  pack_str(&p.pk, "ab");
  pack_str(&p.pk, "n");
  msgpack_pack_int(&p.pk, 4);
  bytes_t b = packer_take(&p);
  kiln_mp_doc_t doc;
  cr_assert(!read_with(b.p, b.n, 8, false, &doc));
  uint64_t u;
  kiln_status_t st = kiln_mp_field_u64(&test_err, &doc.root, "n", true, &u);
  cr_assert(st);
  cr_expect_eq(kiln_status_code(st), KILN_E_COMPILE);
  cr_expect_str_eq(kiln_status_message(st), "test: key 'n' must be a non-negative integer");
  kiln_status_free(st);
  st = kiln_mp_field_u64(&test_err, &doc.root, "x", true, &u);
  cr_expect_str_eq(kiln_status_message(st), "test: missing required key 'x'");
  kiln_status_free(st);
  u = 9;
  cr_expect(!kiln_mp_field_u64(&test_err, &doc.root, "x", false, &u));
  cr_expect_eq(u, 9);
  static const char *const keys[] = {"n", "s", NULL};
  st = kiln_mp_check_keys(&test_err, &doc.root, "the map", keys);
  cr_expect_str_eq(kiln_status_message(st), "test: the map: key 'n' appears twice");
  kiln_status_free(st);
  static const char *const only_n[] = {"n", NULL};
  st = kiln_mp_check_keys(&kiln_mp_err_params, &doc.root, "m", only_n);
  cr_expect_eq(kiln_status_code(st), KILN_E_INVALID_ARGUMENT);
  cr_expect_str_eq(kiln_status_message(st), "m: unknown field 's'; known fields: n");
  kiln_status_free(st);
  char small[2];
  st = kiln_mp_cstr(&test_err, kiln_mp_find(&doc.root, "s"), "s", small, sizeof small);
  cr_expect_str_eq(kiln_status_message(st), "test: s is too long (2 bytes, at most 1)");
  kiln_status_free(st);
  st = kiln_mp_uint(&test_err, kiln_mp_find(&doc.root, "s"), "s", 10, &u);
  cr_expect_str_eq(kiln_status_message(st), "test: s must be an integer from 0 to 10");
  kiln_status_free(st);
  kiln_mp_doc_deinit(&doc);
  bytes_free(&b);
}
