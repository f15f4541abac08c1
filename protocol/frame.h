/* Framing: cuts a byte stream into whole MessagePack objects, checking limits as the bytes
 * arrive, before any message is buffered whole.
 *
 * MessagePack has no length prefix, so the reader walks the headers of the object being
 * received (type bytes, lengths, element counts) as they come in. A str/bin/ext header
 * tells how many bytes must follow; an array/map header how many elements. Each is checked
 * against the limits immediately: a 4 GiB bin header or a 2^32-element array header is
 * rejected when its header arrives, not after the reader has tried to buffer it.
 *
 * The reader owns one growable buffer and maps onto libuv's alloc_cb/read_cb pair:
 *   alloc_cb:  p = kiln_reader_space(r, &n)        (where to read; may move bytes)
 *   read_cb:   kiln_reader_commit(r, nread);
 *              while (kiln_reader_next(r, &msg, &len) == KILN_FRAME_MESSAGE) handle(msg, len);
 * A message returned by kiln_reader_next stays valid until the next kiln_reader_space().
 *
 * Optionally (kiln_reader_set_alloc), a message known to need more than a threshold is
 * received into a buffer from the caller's allocator instead of the reader's own, and the
 * code handling that message may take the buffer with kiln_reader_steal: the message's bytes
 * then stay where they were received, with no copy (kilnd passes them on to a worker in
 * shared memory). Without an allocator the reader behaves as above.
 * Storage is the caller's (_init/_deinit). One thread. */
#ifndef KILN_PROTOCOL_FRAME_H
#define KILN_PROTOCOL_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define KILN_FRAME_MAX_DEPTH_CAP 64

typedef struct kiln_limits {
  uint64_t max_message; /* bytes of one whole message */
  uint32_t max_depth;   /* nesting of arrays/maps; the top-level array is depth 1 */
  uint32_t max_items;   /* elements of one array, or pairs of one map */
  uint32_t max_str;     /* bytes of one str (bins are bounded by max_message only) */
} kiln_limits_t;

/* Defaults for client connections: 1 GiB + 1 MiB messages (a 1 GiB tensor chunk plus its
 * envelope), depth 32, 1M items, 1 MiB strings. */
void kiln_limits_default(kiln_limits_t *out);

typedef enum kiln_frame_result {
  KILN_FRAME_NEED_MORE = 0, /* no whole message buffered yet */
  KILN_FRAME_MESSAGE = 1,   /* out_msg and out_len hold one whole message */
  KILN_FRAME_ERROR = 2,     /* the stream is unusable; kiln_reader_error() says why */
} kiln_frame_result_t;

/* An allocator for large messages. alloc_cb returns a buffer of at least `size` bytes
 * (its capacity in *out_cap) and an opaque handle for it, or NULL to let the reader use
 * malloc instead; free_cb gives back a buffer the reader no longer needs (never one that
 * was stolen). */
typedef struct kiln_reader_alloc {
  size_t threshold; /* messages needing more bytes than this use alloc_cb */
  void *(*alloc_cb)(void *user, size_t size, size_t *out_cap, void **out_handle);
  void (*free_cb)(void *user, void *handle);
  void *user;
} kiln_reader_alloc_t;

typedef struct kiln_reader {
  kiln_limits_t limits;
  uint8_t *buf;
  size_t cap;
  size_t start; /* first byte of the message being scanned */
  size_t len;   /* bytes in buf */
  size_t scan;  /* next header to examine (absolute offset in buf) */
  uint64_t need; /* bytes from `start` the current message needs at least */
  uint32_t depth;
  uint64_t remaining[KILN_FRAME_MAX_DEPTH_CAP + 1]; /* elements left per open container */
  kiln_status_t error;
  size_t min_cap; /* the buffer shrinks back to this after a large message */
  kiln_reader_alloc_t alloc; /* alloc_cb NULL: none */
  void *handle;              /* non-NULL while buf came from alloc.alloc_cb */
  bool last_in_handle;       /* the message last returned lies in that buffer */
  bool last_in_own;          /* ... in the reader's own buffer, not taken yet */
} kiln_reader_t;

void kiln_reader_init(kiln_reader_t *r, const kiln_limits_t *limits, size_t initial_cap);
/* Gives back the buffer (to alloc.free_cb when it came from there). */
void kiln_reader_deinit(kiln_reader_t *r);
/* Installs an allocator for large messages (copied); call before the first space(). */
void kiln_reader_set_alloc(kiln_reader_t *r, const kiln_reader_alloc_t *alloc);

/* Space to receive into: at least 1 byte unless the reader is in error or out of memory
 * (then *out_len == 0 and NULL). The space is sized to the current message's known needs,
 * so a large bin is received into one allocation. */
void *kiln_reader_space(kiln_reader_t *r, size_t *out_len);
void kiln_reader_commit(kiln_reader_t *r, size_t n);
kiln_frame_result_t kiln_reader_next(kiln_reader_t *r, const uint8_t **out_msg, size_t *out_len);
/* Takes the buffer holding the message last returned by kiln_reader_next, when it came
 * from the allocator: returns its handle, and the caller owns the buffer from now on (the
 * message stays where it is; bytes received after it move to a buffer of the reader's own
 * and scanning goes on). Returns NULL, changing nothing, when that message is in the
 * reader's own buffer, after kiln_reader_space, or when memory runs out. */
void *kiln_reader_steal(kiln_reader_t *r);
/* Takes the reader's own (malloc'd) buffer holding the message last returned by
 * kiln_reader_next, when it is one the reader gives back anyway (larger than 4 times its
 * initial capacity: space() frees it once no bytes are pending) and at most `max_move` bytes
 * received after the message have to move to a buffer of the reader's own: returns the
 * buffer (the caller free()s it; its size in *out_cap) and the message stays where it is.
 * Returns NULL, changing nothing, otherwise: a small buffer, one from the allocator
 * (kiln_reader_steal's), after kiln_reader_space, more pending bytes, out of memory. */
void *kiln_reader_take(kiln_reader_t *r, size_t max_move, size_t *out_cap);
/* Why the stream is unusable (borrowed), or NULL. */
KILN_MUST_USE kiln_status_t kiln_reader_error(const kiln_reader_t *r);
/* True while part of a message is buffered (for partial-message timeouts). */
bool kiln_reader_partial(const kiln_reader_t *r);
/* The bytes of the message being scanned so far (for recovering a msgid after an error). */
const uint8_t *kiln_reader_pending(const kiln_reader_t *r, size_t *out_len);

#endif
