/* The framer: every valid message fed whole, one byte at a time and in random splits; several
 * messages in one feed; large bins; limits enforced at the header that breaks them;
 * garbage and truncation. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "protocol/frame.h"
#include "protocol/rpc.h"

#define CORPUS_CAP 64

static corpus_entry_t corpus[CORPUS_CAP];
static size_t ncorpus;

static void setup(void) { ncorpus = valid_corpus(corpus, CORPUS_CAP); }
static void teardown(void) { corpus_free(corpus, ncorpus); }

static void reader_default(kiln_reader_t *r) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  kiln_reader_init(r, &lim, 0);
}

/* One message fed with `chunk` comes out once, byte for byte, and leaves nothing behind. */
static void expect_one(const corpus_entry_t *c, chunker_fn chunk, void *ctx, const char *how) {
  kiln_reader_t r;
  reader_default(&r);
  feed_result_t fr;
  feed(&r, c->bytes.p, c->bytes.n, chunk, ctx, &fr);
  cr_assert_eq(fr.last, KILN_FRAME_NEED_MORE, "%s (%s): %s", c->name, how,
               kiln_status_message(kiln_reader_error(&r)));
  cr_assert_eq(fr.count, 1, "%s (%s): %zu messages", c->name, how, fr.count);
  cr_assert_eq(fr.msgs[0].n, c->bytes.n, "%s (%s)", c->name, how);
  cr_assert_arr_eq(fr.msgs[0].p, c->bytes.p, c->bytes.n, "%s (%s)", c->name, how);
  cr_assert_not(kiln_reader_partial(&r), "%s (%s)", c->name, how);
  feed_result_free(&fr);
  kiln_reader_deinit(&r);
}

TestSuite(frame, .init = setup, .fini = teardown);

Test(frame, every_valid_message_whole) {
  cr_assert_geq(ncorpus, 18);
  for (size_t i = 0; i < ncorpus; i++) expect_one(&corpus[i], chunk_whole, NULL, "whole");
}

Test(frame, every_valid_message_one_byte_at_a_time) {
  for (size_t i = 0; i < ncorpus; i++) expect_one(&corpus[i], chunk_one, NULL, "one byte");
}

Test(frame, every_valid_message_random_splits) {
  for (uint64_t seed = 1; seed <= 40; seed++) {
    uint64_t rng = seed;
    for (size_t i = 0; i < ncorpus; i++) expect_one(&corpus[i], chunk_random, &rng, "random");
  }
}

/* Every proper prefix of a valid message is NEED_MORE, never a message or an error. */
Test(frame, truncated_messages_need_more) {
  for (size_t i = 0; i < ncorpus; i++) {
    const bytes_t *b = &corpus[i].bytes;
    /* The 70 KB message: check every prefix of its first and last 2 KB. */
    for (size_t cut = 0; cut < b->n; cut++) {
      if (b->n > 8192 && cut > 2048 && cut < b->n - 2048) continue;
      kiln_reader_t r;
      reader_default(&r);
      feed_result_t fr;
      feed(&r, b->p, cut, chunk_whole, NULL, &fr);
      cr_assert_eq(fr.count, 0, "%s cut at %zu", corpus[i].name, cut);
      cr_assert_eq(fr.last, KILN_FRAME_NEED_MORE, "%s cut at %zu", corpus[i].name, cut);
      cr_assert_eq(kiln_reader_partial(&r), cut > 0);
      size_t pending_len;
      kiln_reader_pending(&r, &pending_len);
      cr_assert_eq(pending_len, cut);
      kiln_reader_deinit(&r);
    }
  }
}

static void expect_sequence(chunker_fn chunk, void *ctx, const char *how) {
  bytes_t all = {0};
  bytes_t parts[CORPUS_CAP];
  for (size_t i = 0; i < ncorpus; i++) parts[i] = corpus[i].bytes;
  all = bytes_concat(parts, ncorpus);
  kiln_reader_t r;
  reader_default(&r);
  feed_result_t fr;
  feed(&r, all.p, all.n, chunk, ctx, &fr);
  cr_assert_eq(fr.last, KILN_FRAME_NEED_MORE, "%s", how);
  cr_assert_eq(fr.count, ncorpus, "%s: %zu messages", how, fr.count);
  for (size_t i = 0; i < ncorpus; i++) {
    cr_assert_eq(fr.msgs[i].n, corpus[i].bytes.n, "%s: %s", how, corpus[i].name);
    cr_assert_arr_eq(fr.msgs[i].p, corpus[i].bytes.p, corpus[i].bytes.n, "%s: %s", how,
                     corpus[i].name);
  }
  cr_assert_not(kiln_reader_partial(&r));
  feed_result_free(&fr);
  kiln_reader_deinit(&r);
  bytes_free(&all);
}

Test(frame, concatenated_messages) {
  expect_sequence(chunk_whole, NULL, "whole");
  expect_sequence(chunk_one, NULL, "one byte");
  for (uint64_t seed = 100; seed < 120; seed++) {
    uint64_t rng = seed;
    expect_sequence(chunk_random, &rng, "random");
  }
  size_t fixed = 1000;
  expect_sequence(chunk_fixed, &fixed, "1000-byte chunks");
}

/* A small initial buffer forces the partial message to be moved to the front and the buffer
 * to grow while earlier messages are still being handed out. */
Test(frame, concatenated_with_tiny_buffer) {
  bytes_t parts[CORPUS_CAP];
  for (size_t i = 0; i < ncorpus; i++) parts[i] = corpus[i].bytes;
  bytes_t all = bytes_concat(parts, ncorpus);
  for (uint64_t seed = 1; seed < 20; seed++) {
    kiln_limits_t lim;
    kiln_limits_default(&lim);
    kiln_reader_t r;
    kiln_reader_init(&r, &lim, 16);
    uint64_t rng = seed;
    feed_result_t fr;
    feed(&r, all.p, all.n, chunk_random, &rng, &fr);
    cr_assert_eq(fr.count, ncorpus);
    for (size_t i = 0; i < ncorpus; i++)
      cr_assert_arr_eq(fr.msgs[i].p, corpus[i].bytes.p, corpus[i].bytes.n);
    feed_result_free(&fr);
    kiln_reader_deinit(&r);
  }
  bytes_free(&all);
}

/* Top-level values that are not arrays are still whole MessagePack objects to the framer
 * (rpc rejects them later). */
Test(frame, scalar_top_level_objects) {
  bytes_t b = BYTES_LIT(0x01, 0xc0, 0xc3, 0x90, 0x80, 0xa1, 'x', 0xcb, 0, 0, 0, 0, 0, 0, 0, 0,
                        0xd4, 0x01, 0x02);
  kiln_reader_t r;
  reader_default(&r);
  feed_result_t fr;
  feed(&r, b.p, b.n, chunk_one, NULL, &fr);
  cr_assert_eq(fr.count, 8);
  size_t want[8] = {1, 1, 1, 1, 1, 2, 9, 3};
  for (int i = 0; i < 8; i++) cr_assert_eq(fr.msgs[i].n, want[i], "object %d", i);
  feed_result_free(&fr);
  kiln_reader_deinit(&r);
  bytes_free(&b);
}

/* --- Large messages: one growth to size, shrink afterwards ------------------------------- */

static bytes_t big_write(size_t nbytes) {
  packer_t p;
  packer_init(&p);
  msgpack_pack_array(&p.pk, 4);
  msgpack_pack_uint8(&p.pk, 0);
  msgpack_pack_uint32(&p.pk, 77);
  pack_str(&p.pk, "write");
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_map(&p.pk, 2);
  pack_str(&p.pk, "id");
  msgpack_pack_uint64(&p.pk, 12345);
  pack_str(&p.pk, "data");
  uint8_t *data = malloc(nbytes);
  for (size_t i = 0; i < nbytes; i++) data[i] = (uint8_t)(i * 31 + 7);
  pack_bin(&p.pk, data, nbytes);
  free(data);
  bytes_t b = packer_take(&p);
  msgpack_sbuffer_destroy(&p.sb);
  return b;
}

Test(frame, large_bin_grows_once_to_size) {
  bytes_t big = big_write(8u << 20);
  kiln_reader_t r;
  reader_default(&r);
  size_t chunk = 4096;
  feed_result_t fr;
  feed(&r, big.p, big.n, chunk_fixed, &chunk, &fr);
  cr_assert_eq(fr.count, 1);
  cr_assert_eq(fr.msgs[0].n, big.n);
  cr_assert_arr_eq(fr.msgs[0].p, big.p, big.n);
  /* The first allocation, then one growth to the announced size, and no more. */
  cr_assert_leq(fr.cap_changes, 2, "buffer changed size %zu times", fr.cap_changes);
  cr_assert_geq(fr.max_cap, big.n);
  cr_assert_leq(fr.max_cap, big.n + 64 * 1024, "cap %zu for a %zu-byte message", fr.max_cap,
                big.n);
  feed_result_free(&fr);

  /* Once the large message has been handed out, the next receive gives the memory back. */
  const corpus_entry_t *small = &corpus[0];
  feed(&r, small->bytes.p, small->bytes.n, chunk_whole, NULL, &fr);
  cr_assert_eq(fr.count, 1);
  cr_assert_leq(r.cap, 64 * 1024, "buffer kept %zu bytes after a large message", r.cap);
  feed_result_free(&fr);
  kiln_reader_deinit(&r);
  bytes_free(&big);
}

/* The large message arrives in one piece with the start of the next one behind it. */
Test(frame, large_bin_followed_by_more) {
  bytes_t big = big_write(3u << 20);
  bytes_t parts[3] = {corpus[1].bytes, big, corpus[0].bytes};
  bytes_t all = bytes_concat(parts, 3);
  for (uint64_t seed = 1; seed <= 3; seed++) {
    kiln_reader_t r;
    kiln_limits_t lim;
    kiln_limits_default(&lim);
    kiln_reader_init(&r, &lim, 4096);
    size_t chunk = 1000 + 777 * seed;
    feed_result_t fr;
    feed(&r, all.p, all.n, chunk_fixed, &chunk, &fr);
    cr_assert_eq(fr.count, 3);
    cr_assert_arr_eq(fr.msgs[1].p, big.p, big.n);
    cr_assert_arr_eq(fr.msgs[2].p, corpus[0].bytes.p, corpus[0].bytes.n);
    cr_assert_leq(fr.cap_changes, 4, "buffer changed size %zu times", fr.cap_changes);
    feed_result_free(&fr);
    kiln_reader_deinit(&r);
  }
  bytes_free(&all);
  bytes_free(&big);
}

/* --- Limits ------------------------------------------------------------------------------ */

static void expect_error_at(const bytes_t *b, const kiln_limits_t *lim, size_t at,
                            kiln_code_t code, const char *needle) {
  kiln_reader_t r;
  kiln_reader_init(&r, lim, 0);
  feed_result_t fr;
  feed(&r, b->p, b->n, chunk_one, NULL, &fr);
  cr_assert_eq(fr.last, KILN_FRAME_ERROR, "no error for '%s'", needle);
  cr_assert_eq(fr.count, 0);
  cr_assert_eq(fr.committed, at, "'%s': error after %zu bytes, expected %zu", needle,
               fr.committed, at);
  cr_assert_leq(fr.max_cap, 64 * 1024, "'%s': buffered %zu bytes", needle, fr.max_cap);
  kiln_status_t s = kiln_reader_error(&r);
  cr_assert_not_null(s);
  cr_assert_eq(kiln_status_code(s), code, "%s", kiln_status_message(s));
  cr_assert(strstr(kiln_status_message(s), needle), "'%s' not in '%s'", needle,
            kiln_status_message(s));
  /* The stream stays unusable. */
  const uint8_t *m;
  size_t len;
  cr_assert_eq(kiln_reader_next(&r, &m, &len), KILN_FRAME_ERROR);
  size_t space = 1;
  cr_assert_null(kiln_reader_space(&r, &space));
  cr_assert_eq(space, 0);
  kiln_reader_deinit(&r);

  /* Fed whole, the same error. */
  kiln_reader_init(&r, lim, 0);
  feed(&r, b->p, b->n, chunk_whole, NULL, &fr);
  cr_assert_eq(fr.last, KILN_FRAME_ERROR);
  cr_assert_eq(kiln_status_code(kiln_reader_error(&r)), code);
  kiln_reader_deinit(&r);
}

/* Each of `msgs` comes out of one reader with `lim` as one whole message (random splits). */
static void expect_accepted(const kiln_limits_t *lim, const bytes_t *msgs, size_t n) {
  kiln_reader_t r;
  kiln_reader_init(&r, lim, 0);
  uint64_t rng = 5;
  for (size_t i = 0; i < n; i++) {
    feed_result_t fr;
    feed(&r, msgs[i].p, msgs[i].n, chunk_random, &rng, &fr);
    cr_assert_eq(fr.count, 1, "message %zu: %s", i, kiln_status_message(kiln_reader_error(&r)));
    cr_assert_eq(fr.msgs[0].n, msgs[i].n);
    feed_result_free(&fr);
  }
  kiln_reader_deinit(&r);
}

Test(frame, nesting_10000_deep_fails_at_the_header_past_the_limit) {
  uint8_t *p = malloc(10000);
  memset(p, 0x91, 10000);
  bytes_t b = {p, 10000};
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  expect_error_at(&b, &lim, 33, KILN_E_RESOURCE_EXHAUSTED, "nesting deeper than the limit of 32");
  /* Maps too, and under a request. */
  for (size_t i = 0; i < 10000; i += 2) {
    p[i] = 0x81;
    p[i + 1] = 0xc0; /* key nil, value: the next map */
  }
  expect_error_at(&b, &lim, 65, KILN_E_RESOURCE_EXHAUSTED, "nesting");
  bytes_free(&b);

  /* An empty array one level too deep is as deep as a full one. */
  uint8_t deep[33];
  memset(deep, 0x91, 32);
  deep[32] = 0x90;
  b = bytes_copy(deep, sizeof(deep));
  expect_error_at(&b, &lim, 33, KILN_E_RESOURCE_EXHAUSTED, "nesting");
  bytes_free(&b);
  /* Depth 32 with a scalar inside is fine. */
  deep[32] = 0xc0;
  b = (bytes_t){deep, sizeof(deep)};
  expect_accepted(&lim, &b, 1);
}

Test(frame, custom_depth_limit) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  lim.max_depth = 3;
  bytes_t ok = BYTES_LIT(0x91, 0x91, 0x91, 0xc0);
  bytes_t bad = BYTES_LIT(0x91, 0x91, 0x91, 0x91, 0xc0);
  expect_accepted(&lim, &ok, 1);
  expect_error_at(&bad, &lim, 4, KILN_E_RESOURCE_EXHAUSTED, "limit of 3");
  /* A limit above the cap is clamped to it, not an overflow of the container stack. */
  lim.max_depth = 1000;
  uint8_t *p = malloc(200);
  memset(p, 0x91, 200);
  bytes_t deep = {p, 200};
  expect_error_at(&deep, &lim, KILN_FRAME_MAX_DEPTH_CAP + 1, KILN_E_RESOURCE_EXHAUSTED, "nesting");
  bytes_free(&deep);
  bytes_free(&ok);
  bytes_free(&bad);
}

Test(frame, array_header_of_2p32_minus_1_rejected_with_5_bytes_buffered) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  bytes_t arr = BYTES_LIT(0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0);
  expect_error_at(&arr, &lim, 5, KILN_E_RESOURCE_EXHAUSTED, "4294967295 elements");
  bytes_t map = BYTES_LIT(0xdf, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0);
  expect_error_at(&map, &lim, 5, KILN_E_RESOURCE_EXHAUSTED, "4294967295 elements");
  /* Inside a request, at the header too. */
  bytes_t req = BYTES_LIT(0x94, 0x00, 0x01, 0xa1, 'm', 0x91, 0x81, 0xa1, 'a',
                          0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0);
  expect_error_at(&req, &lim, 14, KILN_E_RESOURCE_EXHAUSTED, "elements");
  bytes_free(&arr);
  bytes_free(&map);
  bytes_free(&req);
}

Test(frame, item_limit_is_exact) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  lim.max_items = 1000;
  packer_t p;
  packer_init(&p);
  msgpack_pack_array(&p.pk, 1000);
  for (int i = 0; i < 1000; i++) msgpack_pack_nil(&p.pk);
  bytes_t ok = packer_take(&p);
  msgpack_pack_array(&p.pk, 1001);
  for (int i = 0; i < 1001; i++) msgpack_pack_nil(&p.pk);
  bytes_t bad = packer_take(&p);
  /* Maps count pairs. */
  msgpack_pack_map(&p.pk, 1000);
  for (int i = 0; i < 1000; i++) {
    msgpack_pack_uint32(&p.pk, (uint32_t)i);
    msgpack_pack_nil(&p.pk);
  }
  bytes_t okmap = packer_take(&p);
  msgpack_pack_map(&p.pk, 1001);
  bytes_t badmap = packer_take(&p);
  msgpack_sbuffer_destroy(&p.sb);

  expect_accepted(&lim, (bytes_t[]){ok, okmap}, 2);
  expect_error_at(&bad, &lim, 3, KILN_E_RESOURCE_EXHAUSTED, "1001 elements exceeds the limit of 1000");
  expect_error_at(&badmap, &lim, 3, KILN_E_RESOURCE_EXHAUSTED, "1001 elements");
  bytes_free(&ok);
  bytes_free(&bad);
  bytes_free(&okmap);
  bytes_free(&badmap);
}

Test(frame, str_limit) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  /* Exactly 1 MiB: fine. One more byte: rejected at the str32 header. */
  size_t n = 1u << 20;
  char *s = malloc(n + 1);
  memset(s, 'x', n + 1);
  packer_t p;
  packer_init(&p);
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_str(&p.pk, n);
  msgpack_pack_str_body(&p.pk, s, n);
  bytes_t ok = packer_take(&p);
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_str(&p.pk, n + 1);
  msgpack_pack_str_body(&p.pk, s, n + 1);
  bytes_t bad = packer_take(&p);
  /* bins are bounded by the message limit only. */
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_bin(&p.pk, n + 1);
  msgpack_pack_bin_body(&p.pk, s, n + 1);
  bytes_t bin = packer_take(&p);
  msgpack_sbuffer_destroy(&p.sb);
  free(s);

  expect_accepted(&lim, (bytes_t[]){ok, bin}, 2);
  expect_error_at(&bad, &lim, 6, KILN_E_RESOURCE_EXHAUSTED,
                  "string of 1048577 bytes exceeds the limit of 1048576 bytes");

  lim.max_str = 3;
  bytes_t small = BYTES_LIT(0x92, 0xa3, 'a', 'b', 'c', 0xa4, 'a', 'b', 'c', 'd');
  expect_error_at(&small, &lim, 6, KILN_E_RESOURCE_EXHAUSTED, "string of 4 bytes");
  bytes_free(&small);
  bytes_free(&ok);
  bytes_free(&bad);
  bytes_free(&bin);
}

Test(frame, bin_header_of_4_GiB_with_10_bytes_rejected_at_once) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  bytes_t b = BYTES_LIT(0xc6, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10);
  expect_error_at(&b, &lim, 5, KILN_E_RESOURCE_EXHAUSTED, "message exceeds the limit");
  /* As a request's data field. */
  bytes_t req = BYTES_LIT(0x94, 0x00, 0xcd, 0x01, 0x00, 0xa5, 'w', 'r', 'i', 't', 'e', 0x91, 0x81,
                          0xa4, 'd', 'a', 't', 'a', 0xc6, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5,
                          6, 7, 8, 9, 10);
  expect_error_at(&req, &lim, 23, KILN_E_RESOURCE_EXHAUSTED, "message exceeds the limit");
  /* The msgid of the offending request can still be read from what was buffered. */
  kiln_reader_t r;
  reader_default(&r);
  feed_result_t fr;
  feed(&r, req.p, req.n, chunk_whole, NULL, &fr);
  cr_assert_eq(fr.last, KILN_FRAME_ERROR);
  size_t n;
  const uint8_t *pending = kiln_reader_pending(&r, &n);
  cr_assert_geq(n, 5);
  uint32_t msgid = 0;
  cr_assert(kiln_rpc_peek_msgid(pending, n, &msgid));
  cr_assert_eq(msgid, 256);
  kiln_reader_deinit(&r);
  /* ext32 of 4 GiB too. */
  bytes_t ext = BYTES_LIT(0xc9, 0xff, 0xff, 0xff, 0xff, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10);
  expect_error_at(&ext, &lim, 6, KILN_E_RESOURCE_EXHAUSTED, "message exceeds the limit");
  bytes_free(&b);
  bytes_free(&req);
  bytes_free(&ext);
}

Test(frame, message_byte_limit) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  lim.max_message = 4096;
  /* A bin that would pass the limit: rejected at its header. */
  bytes_t bin = BYTES_LIT(0x92, 0xc0, 0xc5, 0x10, 0x00);
  expect_error_at(&bin, &lim, 5, KILN_E_RESOURCE_EXHAUSTED, "limit of 4096 bytes");
  /* Exactly 4096 bytes: 0x92 0xc0 0xc5 hi lo + 4091 bytes. */
  uint8_t *p = calloc(1, 4096);
  p[0] = 0x92;
  p[1] = 0xc0;
  p[2] = 0xc5;
  p[3] = (4091 >> 8) & 0xff;
  p[4] = 4091 & 0xff;
  expect_accepted(&lim, &(bytes_t){p, 4096}, 1);
  free(p);

  /* An array announcing more elements than the budget can hold: rejected at the header. */
  bytes_t arr = BYTES_LIT(0xdc, 0x13, 0x88); /* 5000 elements */
  expect_error_at(&arr, &lim, 3, KILN_E_RESOURCE_EXHAUSTED, "cannot fit");

  /* Many small elements whose sum passes the limit: rejected at the element that does. */
  packer_t pk;
  packer_init(&pk);
  msgpack_pack_array(&pk.pk, 3000);
  for (int i = 0; i < 3000; i++) pack_str(&pk.pk, "y");
  bytes_t many = packer_take(&pk);
  msgpack_sbuffer_destroy(&pk.sb);
  /* Element i (2 bytes) starts at 3 + 2i; the one ending past 4096 is i = 2046. */
  expect_error_at(&many, &lim, 3 + 2 * 2046 + 1, KILN_E_RESOURCE_EXHAUSTED, "limit of 4096");
  bytes_free(&many);
  bytes_free(&arr);
  bytes_free(&bin);
}

/* --- Garbage ----------------------------------------------------------------------------- */

Test(frame, never_used_byte_0xc1) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  bytes_t b = BYTES_LIT(0xc1);
  expect_error_at(&b, &lim, 1, KILN_E_INVALID_ARGUMENT, "0xc1");
  bytes_free(&b);
  /* Inside a message: the offset is reported. */
  b = BYTES_LIT(0x94, 0x00, 0x07, 0xa1, 'x', 0xc1);
  expect_error_at(&b, &lim, 6, KILN_E_INVALID_ARGUMENT, "byte 0xc1 at offset 5");
  bytes_free(&b);

  /* After a whole message: that message still comes out, then the error. */
  bytes_t parts[2] = {corpus[0].bytes, BYTES_LIT(0xc1, 0x00)};
  bytes_t all = bytes_concat(parts, 2);
  kiln_reader_t r;
  reader_default(&r);
  feed_result_t fr;
  feed(&r, all.p, all.n, chunk_whole, NULL, &fr);
  cr_assert_eq(fr.count, 1);
  cr_assert_eq(fr.last, KILN_FRAME_ERROR);
  cr_assert(strstr(kiln_status_message(kiln_reader_error(&r)), "offset 0"));
  feed_result_free(&fr);
  kiln_reader_deinit(&r);
  bytes_free(&parts[1]);
  bytes_free(&all);
}

/* Random bytes: any mix of messages, an error or a wait, never a crash or a message that
 * msgpack-c does not see as one whole object. */
Test(frame, random_garbage) {
  uint64_t rng = 0x1234;
  uint8_t buf[512];
  size_t errors = 0, messages = 0;
  for (int iter = 0; iter < 20000; iter++) {
    size_t n = 1 + rng_next(&rng) % sizeof(buf);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rng_next(&rng);
    kiln_limits_t lim;
    kiln_limits_default(&lim);
    lim.max_message = 1 << 20; /* random bin headers would size the buffer up to 1 GiB */
    kiln_reader_t r;
    kiln_reader_init(&r, &lim, 1024);
    feed_result_t fr;
    uint64_t split = rng_next(&rng);
    feed(&r, buf, n, chunk_random, &split, &fr);
    if (fr.last == KILN_FRAME_ERROR) {
      errors++;
      cr_assert_not_null(kiln_reader_error(&r));
    }
    for (size_t i = 0; i < fr.count && i < FEED_MAX_MSGS; i++) {
      msgpack_unpacked u;
      msgpack_unpacked_init(&u);
      size_t off = 0;
      msgpack_unpack_return ret =
          msgpack_unpack_next(&u, (const char *)fr.msgs[i].p, fr.msgs[i].n, &off);
      cr_assert_eq(ret, MSGPACK_UNPACK_SUCCESS);
      cr_assert_eq(off, fr.msgs[i].n);
      msgpack_unpacked_destroy(&u);
    }
    messages += fr.count;
    feed_result_free(&fr);
    kiln_reader_deinit(&r);
  }
  cr_assert_gt(errors, 1000);
  cr_assert_gt(messages, 1000);
}

/* --- msgpack-c agrees on message boundaries ---------------------------------------------- */

Test(frame, msgpack_c_agrees_on_boundaries) {
  bytes_t parts[CORPUS_CAP];
  for (size_t i = 0; i < ncorpus; i++) parts[i] = corpus[i].bytes;
  bytes_t all = bytes_concat(parts, ncorpus);

  /* msgpack-c's one-shot unpacker, object after object. */
  size_t off = 0;
  for (size_t i = 0; i < ncorpus; i++) {
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t before = off;
    cr_assert_eq(msgpack_unpack_next(&u, (const char *)all.p, all.n, &off), MSGPACK_UNPACK_SUCCESS,
                 "%s", corpus[i].name);
    cr_assert_eq(off - before, corpus[i].bytes.n, "%s", corpus[i].name);
    msgpack_unpacked_destroy(&u);
  }
  cr_assert_eq(off, all.n);

  /* msgpack-c's streaming unpacker fed in random splits, against kiln's framer fed in
   * different random splits. */
  for (uint64_t seed = 1; seed <= 10; seed++) {
    msgpack_unpacker up;
    cr_assert(msgpack_unpacker_init(&up, 256));
    uint64_t rng = seed * 7919;
    size_t fed = 0, got = 0;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    while (fed < all.n) {
      size_t k = chunk_random(&rng, all.n - fed);
      if (k > all.n - fed) k = all.n - fed;
      cr_assert(msgpack_unpacker_reserve_buffer(&up, k));
      memcpy(msgpack_unpacker_buffer(&up), all.p + fed, k);
      msgpack_unpacker_buffer_consumed(&up, k);
      fed += k;
      msgpack_unpack_return ret;
      size_t size = 0;
      while ((ret = msgpack_unpacker_next_with_size(&up, &u, &size)) == MSGPACK_UNPACK_SUCCESS) {
        cr_assert_lt(got, ncorpus);
        cr_assert_eq(size, corpus[got].bytes.n, "%s", corpus[got].name);
        got++;
      }
      cr_assert_eq(ret, MSGPACK_UNPACK_CONTINUE);
    }
    cr_assert_eq(got, ncorpus);
    msgpack_unpacked_destroy(&u);
    msgpack_unpacker_destroy(&up);

    kiln_reader_t r;
    reader_default(&r);
    feed_result_t fr;
    uint64_t rng2 = seed * 104729;
    feed(&r, all.p, all.n, chunk_random, &rng2, &fr);
    cr_assert_eq(fr.count, ncorpus);
    feed_result_free(&fr);
    kiln_reader_deinit(&r);
  }
  bytes_free(&all);
}

Test(frame, default_limits_match_the_protocol_doc) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  cr_assert_eq(lim.max_message, (1ULL << 30) + (1ULL << 20));
  cr_assert_eq(lim.max_depth, 32);
  cr_assert_eq(lim.max_items, 1048576);
  cr_assert_eq(lim.max_str, 1048576);
}

Test(frame, deinit_twice_and_empty_reader) {
  kiln_reader_t r;
  reader_default(&r);
  const uint8_t *m;
  size_t len;
  cr_assert_eq(kiln_reader_next(&r, &m, &len), KILN_FRAME_NEED_MORE);
  cr_assert_not(kiln_reader_partial(&r));
  cr_assert_null(kiln_reader_error(&r));
  kiln_reader_deinit(&r);
  kiln_reader_deinit(&r);
}
