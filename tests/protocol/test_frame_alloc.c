/* The framer with an allocator for large messages (kiln_reader_set_alloc) and
 * kiln_reader_steal: the same messages come out, byte for byte, in every split; large ones
 * come out of the allocator's buffers, which are given back exactly once unless stolen;
 * a stolen buffer keeps its message and the reader goes on with the bytes after it. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "protocol/frame.h"

#define THRESHOLD 4096
#define MAX_BUFS 4096

/* A test allocator: malloc'd buffers with a little more than asked, each tracked. */
typedef struct tbuf {
  uint8_t *p;
  size_t cap;
  bool live, stolen;
} tbuf_t;

typedef struct talloc {
  tbuf_t bufs[MAX_BUFS];
  size_t count, frees;
  bool decline; /* return NULL: the reader must use its own buffer */
} talloc_t;

static void *t_alloc(void *user, size_t size, size_t *out_cap, void **out_handle) {
  talloc_t *a = user;
  if (a->decline || a->count == MAX_BUFS) return NULL;
  cr_assert_gt(size, THRESHOLD, "asked for %zu bytes, not above the threshold", size);
  tbuf_t *b = &a->bufs[a->count++];
  b->cap = size + 3;
  b->p = malloc(b->cap);
  cr_assert(b->p);
  memset(b->p, 0xAA, b->cap); /* garbage the reader must not mistake for data */
  b->live = true;
  *out_cap = b->cap;
  *out_handle = b;
  return b->p;
}

static void t_free(void *user, void *handle) {
  talloc_t *a = user;
  tbuf_t *b = handle;
  cr_assert(b->live && !b->stolen, "a buffer given back twice, or after it was stolen");
  b->live = false;
  free(b->p);
  a->frees++;
}

static talloc_t *talloc_new(void) { return calloc(1, sizeof(talloc_t)); }

/* Every buffer was given back or stolen; stolen ones are freed here. */
static void talloc_check_free(talloc_t *a) {
  for (size_t i = 0; i < a->count; i++) {
    tbuf_t *b = &a->bufs[i];
    cr_assert(!b->live || b->stolen, "buffer %zu never given back", i);
    if (b->stolen) free(b->p);
  }
  free(a);
}

static void reader_with(kiln_reader_t *r, talloc_t *a) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  kiln_reader_init(r, &lim, 0);
  kiln_reader_alloc_t al = {.threshold = THRESHOLD, .alloc_cb = t_alloc, .free_cb = t_free,
                            .user = a};
  kiln_reader_set_alloc(r, &al);
}

/* [0, msgid, "write", [{"id": 7, "data": bin(n)}]] (or with "after" fields behind the bin). */
static bytes_t write_msg(uint32_t msgid, size_t n, bool fields_after) {
  packer_t p;
  packer_init(&p);
  msgpack_pack_array(&p.pk, 4);
  msgpack_pack_uint32(&p.pk, 0);
  msgpack_pack_uint32(&p.pk, msgid);
  pack_str(&p.pk, "write");
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_map(&p.pk, fields_after ? 3 : 2);
  pack_str(&p.pk, "id");
  msgpack_pack_uint32(&p.pk, 7);
  uint8_t *data = malloc(n ? n : 1);
  for (size_t i = 0; i < n; i++) data[i] = (uint8_t)(i * 31 + msgid);
  pack_str(&p.pk, "data");
  pack_bin(&p.pk, data, n);
  free(data);
  if (fields_after) {
    pack_str(&p.pk, "after");
    msgpack_pack_array(&p.pk, 300);
    for (int i = 0; i < 300; i++) pack_str(&p.pk, "a string of some length to pad it out");
  }
  return packer_take(&p);
}

/* A stream of small and large messages, the large ones with fields before and after. */
static bytes_t mixed_stream(bytes_t *parts, size_t *out_count) {
  size_t k = 0;
  parts[k++] = write_msg(1, 10, false);
  parts[k++] = write_msg(2, 3 * THRESHOLD, false);
  parts[k++] = write_msg(3, 0, false);
  parts[k++] = write_msg(4, 40000, true);
  parts[k++] = write_msg(5, 100, true);
  parts[k++] = write_msg(6, THRESHOLD * 20, false);
  parts[k++] = write_msg(7, THRESHOLD * 20, false);
  parts[k++] = write_msg(8, 5, false);
  *out_count = k;
  return bytes_concat(parts, k);
}

/* Receives the next piece of `all` (from *off, as `chunk` cuts it) into the reader. */
static void feed_chunk(kiln_reader_t *r, const bytes_t *all, size_t *off, chunker_fn chunk,
                       void *ctx) {
  size_t space = 0, cap = 0;
  uint8_t *dst = kiln_reader_space(r, &space);
  cr_assert(dst && space > 0, "no space: %s", kiln_status_message(kiln_reader_error(r)));
  cr_assert_null(kiln_reader_steal(r), "nothing to steal right after space()");
  cr_assert_null(kiln_reader_take(r, SIZE_MAX, &cap), "nothing to take right after space()");
  size_t k = chunk(ctx, all->n - *off);
  if (k > all->n - *off) k = all->n - *off;
  if (k > space) k = space;
  memcpy(dst, all->p + *off, k);
  kiln_reader_commit(r, k);
  *off += k;
}

/* Called for each message as it comes out of the reader, after it was compared. */
typedef void (*on_message_fn)(void *arg, kiln_reader_t *r, const uint8_t *m, size_t len,
                              size_t index);

/* Feeds `all` in chunks; every message that comes out is compared with the next expected
 * one, then handed to `on`. Returns messages seen. */
static size_t feed_messages(kiln_reader_t *r, const bytes_t *all, const bytes_t *expect,
                            size_t nexpect, chunker_fn chunk, void *ctx, on_message_fn on,
                            void *arg) {
  size_t off = 0, seen = 0;
  while (off < all->n) {
    feed_chunk(r, all, &off, chunk, ctx);
    const uint8_t *m;
    size_t len;
    kiln_frame_result_t res;
    while ((res = kiln_reader_next(r, &m, &len)) == KILN_FRAME_MESSAGE) {
      cr_assert_lt(seen, nexpect);
      cr_assert_eq(len, expect[seen].n, "message %zu: %zu bytes, expected %zu", seen, len,
                   expect[seen].n);
      cr_assert_arr_eq(m, expect[seen].p, len, "message %zu", seen);
      on(arg, r, m, len, seen);
      seen++;
    }
    cr_assert_eq(res, KILN_FRAME_NEED_MORE, "%s", kiln_status_message(kiln_reader_error(r)));
  }
  return seen;
}

/* Steals the message's buffer where the reader lets it (one from the allocator). */
static void steal_message(void *arg, kiln_reader_t *r, const uint8_t *m, size_t len,
                          size_t index) {
  const bytes_t *expect = arg;
  tbuf_t *b = kiln_reader_steal(r);
  if (!b) return;
  cr_assert(b->live && !b->stolen);
  cr_assert(m >= b->p && m + len <= b->p + b->cap, "the message is not in the stolen buffer");
  b->stolen = true;
  cr_assert_null(kiln_reader_steal(r), "stolen twice");
  /* The message stays where it was received. */
  cr_assert_arr_eq(m, expect[index].p, len, "message %zu after the steal", index);
}

static void leave_message(void *arg, kiln_reader_t *r, const uint8_t *m, size_t len,
                          size_t index) {
  (void)arg, (void)r, (void)m, (void)len, (void)index;
}

/* feed_messages, stealing every message it can when `steal`. */
static size_t feed_stealing(kiln_reader_t *r, const bytes_t *all, const bytes_t *expect,
                            size_t nexpect, chunker_fn chunk, void *ctx, bool steal) {
  return feed_messages(r, all, expect, nexpect, chunk, ctx, steal ? steal_message : leave_message,
                       (void *)expect);
}

static void run_mixed(chunker_fn chunk, void *ctx, bool steal, bool decline) {
  bytes_t parts[16];
  size_t n;
  bytes_t all = mixed_stream(parts, &n);
  talloc_t *a = talloc_new();
  a->decline = decline;
  kiln_reader_t r;
  reader_with(&r, a);
  size_t seen = feed_stealing(&r, &all, parts, n, chunk, ctx, steal);
  cr_assert_eq(seen, n);
  cr_assert_not(kiln_reader_partial(&r));
  kiln_reader_deinit(&r);
  if (!decline) cr_assert_geq(a->count, 2, "large messages did not use the allocator");
  else cr_assert_eq(a->count, 0);
  talloc_check_free(a);
  for (size_t i = 0; i < n; i++) bytes_free(&parts[i]);
  bytes_free(&all);
}

Test(frame_alloc, whole_stream) { run_mixed(chunk_whole, NULL, false, false); }
Test(frame_alloc, whole_stream_stealing) { run_mixed(chunk_whole, NULL, true, false); }
Test(frame_alloc, one_byte_at_a_time) { run_mixed(chunk_one, NULL, false, false); }
Test(frame_alloc, one_byte_at_a_time_stealing) { run_mixed(chunk_one, NULL, true, false); }

Test(frame_alloc, random_splits_stealing_or_not) {
  for (uint64_t seed = 1; seed <= 30; seed++) {
    uint64_t rng = seed;
    run_mixed(chunk_random, &rng, seed % 2 == 0, false);
  }
}

Test(frame_alloc, fixed_splits) {
  size_t sizes[] = {7, 4096, 4097, 65536, 100000};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    run_mixed(chunk_fixed, &sizes[i], true, false);
    run_mixed(chunk_fixed, &sizes[i], false, false);
  }
}

Test(frame_alloc, allocator_declines) {
  run_mixed(chunk_whole, NULL, true, true);
  uint64_t rng = 9;
  run_mixed(chunk_random, &rng, true, true);
}

/* A large message whose bin is last is received into one buffer sized to it, and stealing
 * moves only the bytes read past it (at most the read-ahead window). */
Test(frame_alloc, large_message_one_buffer_and_steal_keeps_the_tail) {
  bytes_t parts[3] = {write_msg(1, 1 << 20, false), write_msg(2, 3, false), write_msg(3, 4, false)};
  bytes_t all = bytes_concat(parts, 3);
  talloc_t *a = talloc_new();
  kiln_reader_t r;
  reader_with(&r, a);
  size_t seen = feed_stealing(&r, &all, parts, 3, chunk_whole, NULL, true);
  cr_assert_eq(seen, 3);
  cr_assert_eq(a->count, 1, "%zu buffers for one large message", a->count);
  cr_assert(a->bufs[0].stolen);
  cr_assert_geq(a->bufs[0].cap, parts[0].n);
  cr_assert_lt(a->bufs[0].cap, parts[0].n + 70 * 1024, "buffer of %zu for %zu", a->bufs[0].cap,
               parts[0].n);
  kiln_reader_deinit(&r);
  talloc_check_free(a);
  for (int i = 0; i < 3; i++) bytes_free(&parts[i]);
  bytes_free(&all);
}

/* Small messages never touch the allocator, and cannot be stolen. */
Test(frame_alloc, small_messages_stay_in_the_readers_buffer) {
  bytes_t m = write_msg(1, 100, false);
  talloc_t *a = talloc_new();
  kiln_reader_t r;
  reader_with(&r, a);
  size_t seen = feed_stealing(&r, &m, &m, 1, chunk_whole, NULL, true);
  cr_assert_eq(seen, 1);
  cr_assert_eq(a->count, 0);
  kiln_reader_deinit(&r);
  talloc_check_free(a);
  bytes_free(&m);
}

/* Limits still hold at the header, before the allocator is asked for anything. */
Test(frame_alloc, limits_checked_before_allocating) {
  talloc_t *a = talloc_new();
  kiln_reader_t r;
  reader_with(&r, a);
  /* [0, 1, "write", [{"data": bin32 of 4 GiB - 1 ...}]] with 10 bytes behind it. */
  bytes_t b = BYTES_LIT(0x94, 0x00, 0x01, 0xa5, 'w', 'r', 'i', 't', 'e', 0x91, 0x81, 0xa4, 'd',
                        'a', 't', 'a', 0xc6, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10);
  feed_result_t fr;
  feed(&r, b.p, b.n, chunk_one, NULL, &fr);
  cr_assert_eq(fr.last, KILN_FRAME_ERROR);
  cr_assert_eq(a->count, 0);
  feed_result_free(&fr);
  kiln_reader_deinit(&r);
  talloc_check_free(a);
  bytes_free(&b);
}

/* A connection that drops mid-message gives the allocator's buffer back at deinit. */
Test(frame_alloc, deinit_mid_message_gives_the_buffer_back) {
  bytes_t m = write_msg(1, 200000, false);
  talloc_t *a = talloc_new();
  kiln_reader_t r;
  reader_with(&r, a);
  feed_result_t fr;
  feed(&r, m.p, m.n - 10, chunk_whole, NULL, &fr);
  cr_assert_eq(fr.count, 0);
  cr_assert(kiln_reader_partial(&r));
  cr_assert_geq(a->count, 1);
  feed_result_free(&fr);
  kiln_reader_deinit(&r);
  cr_assert_eq(a->frees, a->count);
  talloc_check_free(a);
  bytes_free(&m);
}

/* kiln_reader_take: the reader's own buffer of a large message, taken whole, in any split,
 * with or without an allocator, for any bound on the bytes that move. A taken buffer keeps
 * its message byte for byte while the reader goes on (checked after the whole stream), only
 * a buffer the reader would free anyway is taken (a small message may lie in one, behind a
 * large one), never one of the allocator's, and never twice. */
typedef struct taken {
  uint8_t *buf;
  size_t cap;
  const uint8_t *msg;
  size_t index;
} taken_t;

typedef struct taking {
  size_t max_move;
  taken_t *took;
  size_t *ntook;
} taking_t;

/* Takes the reader's buffer where it lets it (a large one of its own), and notes it. */
static void take_message(void *arg, kiln_reader_t *r, const uint8_t *m, size_t len,
                         size_t index) {
  taking_t *t = arg;
  size_t cap = 0;
  uint8_t *b = kiln_reader_take(r, t->max_move, &cap);
  if (!b) return;
  cr_assert(m >= b && m + len <= b + cap, "the message is not in the taken buffer");
  cr_assert_gt(cap, 4 * 64 * 1024, "a small buffer of %zu bytes was taken", cap);
  cr_assert_null(kiln_reader_take(r, SIZE_MAX, &cap), "taken twice");
  cr_assert_null(kiln_reader_steal(r), "taken, then stolen");
  t->took[(*t->ntook)++] = (taken_t){.buf = b, .cap = cap, .msg = m, .index = index};
}

static size_t feed_taking(kiln_reader_t *r, const bytes_t *all, const bytes_t *expect,
                          size_t nexpect, chunker_fn chunk, void *ctx, size_t max_move,
                          taken_t *took, size_t *ntook) {
  *ntook = 0;
  taking_t t = {.max_move = max_move, .took = took, .ntook = ntook};
  return feed_messages(r, all, expect, nexpect, chunk, ctx, take_message, &t);
}

static void run_taking(chunker_fn chunk, void *ctx, size_t max_move, bool with_alloc,
                       size_t *out_took) {
  /* Large messages between the allocator's threshold (when there is one) and the reader's
   * own buffers, small ones around them. */
  bytes_t parts[8];
  size_t n = 0;
  parts[n++] = write_msg(1, 10, false);
  parts[n++] = write_msg(2, 300 * 1024, false);
  parts[n++] = write_msg(3, 5, false);
  parts[n++] = write_msg(4, 400 * 1024, true);
  parts[n++] = write_msg(5, 600 * 1024, false);
  parts[n++] = write_msg(6, 100, true);
  parts[n++] = write_msg(7, 70 * 1024, false);
  bytes_t all = bytes_concat(parts, n);
  talloc_t *a = talloc_new();
  a->decline = !with_alloc;
  kiln_reader_t r;
  if (with_alloc) {
    kiln_limits_t lim;
    kiln_limits_default(&lim);
    kiln_reader_init(&r, &lim, 0);
    kiln_reader_alloc_t al = {.threshold = 500 * 1024, .alloc_cb = t_alloc, .free_cb = t_free,
                              .user = a};
    kiln_reader_set_alloc(&r, &al);
  } else {
    reader_with(&r, a);
  }
  taken_t took[8];
  size_t ntook = 0;
  cr_assert_eq(feed_taking(&r, &all, parts, n, chunk, ctx, max_move, took, &ntook), n);
  cr_assert_not(kiln_reader_partial(&r));
  kiln_reader_deinit(&r);
  for (size_t i = 0; i < ntook; i++) {
    size_t k = took[i].index;
    cr_assert_arr_eq(took[i].msg, parts[k].p, parts[k].n, "message %zu after the reader went on", k);
    free(took[i].buf);
  }
  *out_took = ntook;
  talloc_check_free(a);
  for (size_t i = 0; i < n; i++) bytes_free(&parts[i]);
  bytes_free(&all);
}

Test(frame_alloc, take_own_buffer_whole_stream) {
  size_t took;
  run_taking(chunk_whole, NULL, SIZE_MAX, false, &took);
  run_taking(chunk_whole, NULL, 0, false, &took);
  run_taking(chunk_whole, NULL, 0, true, &took);
}

Test(frame_alloc, take_own_buffer_fixed_splits) {
  size_t took, sizes[] = {4096, 65536, 100000};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    run_taking(chunk_fixed, &sizes[i], SIZE_MAX, false, &took);
    run_taking(chunk_fixed, &sizes[i], 64 * 1024, false, &took);
    run_taking(chunk_fixed, &sizes[i], 0, true, &took);
  }
}

Test(frame_alloc, take_own_buffer_random_splits) {
  size_t took, total = 0;
  for (uint64_t seed = 1; seed <= 30; seed++) {
    uint64_t rng = seed;
    run_taking(chunk_random, &rng, seed % 3 == 0 ? 0 : 64 * 1024, seed % 2 == 0, &took);
    total += took;
  }
  cr_assert_gt(total, 0, "no buffer was ever taken");
}

Test(frame_alloc, take_one_byte_at_a_time) {
  size_t took;
  run_taking(chunk_one, NULL, 0, false, &took);
  cr_assert_eq(took, 3, "one byte per read: every large message ends its buffer");
  run_taking(chunk_one, NULL, 0, true, &took);
  cr_assert_eq(took, 2, "the 600 KiB message is in the allocator's buffer");
}
