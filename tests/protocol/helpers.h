/* Shared by the protocol tests: building messages with msgpack-c's packer, a corpus of valid
 * messages, and feeding bytes to a kiln_reader_t in chosen splits. */
#ifndef KILN_TESTS_PROTOCOL_HELPERS_H
#define KILN_TESTS_PROTOCOL_HELPERS_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/frame.h"

/* Bytes the test owns (free with bytes_free). */
typedef struct bytes {
  uint8_t *p;
  size_t n;
} bytes_t;

void bytes_free(bytes_t *b);
bytes_t bytes_copy(const void *p, size_t n);
bytes_t bytes_concat(const bytes_t *parts, size_t count);
#define BYTES_LIT(...) bytes_copy((const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__}))

/* A packer over an sbuffer; take() hands the bytes over and resets the sbuffer. */
typedef struct packer {
  msgpack_sbuffer sb;
  msgpack_packer pk;
} packer_t;

void packer_init(packer_t *p);
bytes_t packer_take(packer_t *p);
void pack_str(msgpack_packer *pk, const char *s);
void pack_bin(msgpack_packer *pk, const void *data, size_t n);

/* The valid corpus: every message kind and every MessagePack type, built with msgpack-c's
 * packer, plus hand-written byte strings with non-minimal encodings. */
typedef struct corpus_entry {
  const char *name;
  bytes_t bytes;
} corpus_entry_t;

size_t valid_corpus(corpus_entry_t *out, size_t cap);
void corpus_free(corpus_entry_t *c, size_t n);

/* Deterministic random numbers (xorshift64*), so a failing split can be replayed. */
uint64_t rng_next(uint64_t *state);

/* How the next chunk is cut: returns its size (>= 1) given the bytes left. */
typedef size_t (*chunker_fn)(void *ctx, size_t left);
size_t chunk_whole(void *ctx, size_t left);
size_t chunk_one(void *ctx, size_t left);
size_t chunk_random(void *ctx, size_t left); /* ctx: uint64_t rng state */
size_t chunk_fixed(void *ctx, size_t left);  /* ctx: size_t chunk size */

#define FEED_MAX_MSGS 512

typedef struct feed_result {
  size_t count;                 /* messages returned */
  bytes_t msgs[FEED_MAX_MSGS];  /* copies of them */
  kiln_frame_result_t last;     /* NEED_MORE or ERROR when feeding stopped */
  size_t committed;             /* bytes committed when feeding stopped */
  size_t cap_changes;           /* times reader.cap changed (the first allocation counts) */
  size_t max_cap;
} feed_result_t;

/* Feeds `n` bytes through kiln_reader_space/commit/next in chunks cut by `chunk`, draining
 * every whole message after each commit; stops at the first error. */
void feed(kiln_reader_t *r, const uint8_t *p, size_t n, chunker_fn chunk, void *ctx,
          feed_result_t *out);
void feed_result_free(feed_result_t *fr);

#endif
