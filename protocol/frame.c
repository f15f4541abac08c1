#include "protocol/frame.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void kiln_limits_default(kiln_limits_t *out) {
  out->max_message = (1ULL << 30) + (1ULL << 20);
  out->max_depth = 32;
  out->max_items = 1u << 20;
  out->max_str = 1u << 20;
}

void kiln_reader_init(kiln_reader_t *r, const kiln_limits_t *limits, size_t initial_cap) {
  memset(r, 0, sizeof(*r));
  r->limits = *limits;
  if (r->limits.max_depth > KILN_FRAME_MAX_DEPTH_CAP) r->limits.max_depth = KILN_FRAME_MAX_DEPTH_CAP;
  r->min_cap = initial_cap ? initial_cap : 64 * 1024;
}

/* Bytes read past the end of a large message into the allocator's buffer: enough to catch
 * the start of the next message in the same read, little enough that stealing the buffer
 * (which moves them) stays cheap. */
#define HANDLE_READAHEAD (64 * 1024)

static void give_back(kiln_reader_t *r, uint8_t *buf, void *handle) {
  if (handle) r->alloc.free_cb(r->alloc.user, handle);
  else free(buf);
}

static void drop_buf(kiln_reader_t *r) {
  give_back(r, r->buf, r->handle);
  r->buf = NULL;
  r->handle = NULL;
  r->cap = 0;
}

void kiln_reader_deinit(kiln_reader_t *r) {
  drop_buf(r);
  kiln_status_free(r->error);
  memset(r, 0, sizeof(*r));
}

void kiln_reader_set_alloc(kiln_reader_t *r, const kiln_reader_alloc_t *alloc) {
  r->alloc = *alloc;
}

/* Makes p (capacity cap, from the allocator when handle is set) the reader's buffer, with
 * the pending bytes moved to its front. The old buffer is the caller's to give back. */
static void move_pending(kiln_reader_t *r, uint8_t *p, size_t cap, void *handle) {
  size_t pending = r->len - r->start;
  if (pending) memcpy(p, r->buf + r->start, pending);
  r->buf = p;
  r->cap = cap;
  r->handle = handle;
  r->scan -= r->start;
  r->len = pending;
  r->start = 0;
}

static void rehome(kiln_reader_t *r, uint8_t *p, size_t cap, void *handle) {
  uint8_t *old = r->buf;
  void *old_handle = r->handle;
  move_pending(r, p, cap, handle);
  give_back(r, old, old_handle);
}

void *kiln_reader_steal(kiln_reader_t *r) {
  if (!r->last_in_handle || !r->handle) return NULL;
  size_t pending = r->len - r->start;
  size_t cap = pending ? KILN_MAX(r->min_cap, pending) : 0;
  uint8_t *p = NULL;
  if (pending && !(p = malloc(cap))) return NULL;
  void *h = r->handle;
  move_pending(r, p, cap, NULL);
  r->last_in_handle = false;
  return h;
}

void *kiln_reader_take(kiln_reader_t *r, size_t max_move, size_t *out_cap) {
  if (!r->last_in_own || r->handle || !r->buf || r->cap <= r->min_cap * 4) return NULL;
  size_t pending = r->len - r->start;
  if (pending > max_move) return NULL;
  uint8_t *p = NULL;
  if (pending && !(p = malloc(KILN_MAX(r->min_cap, pending)))) return NULL;
  uint8_t *old = r->buf;
  *out_cap = r->cap;
  move_pending(r, p, p ? KILN_MAX(r->min_cap, pending) : 0, NULL);
  r->last_in_own = false;
  return old;
}

kiln_status_t kiln_reader_error(const kiln_reader_t *r) { return r->error; }
bool kiln_reader_partial(const kiln_reader_t *r) { return r->len > r->start; }

const uint8_t *kiln_reader_pending(const kiln_reader_t *r, size_t *out_len) {
  *out_len = r->len - r->start;
  return r->buf + r->start;
}

static kiln_frame_result_t fail(kiln_reader_t *r, kiln_status_t s) {
  if (!r->error) r->error = s;
  else kiln_status_free(s);
  return KILN_FRAME_ERROR;
}

void *kiln_reader_space(kiln_reader_t *r, size_t *out_len) {
  *out_len = 0;
  if (r->error) return NULL;
  r->last_in_handle = false;
  r->last_in_own = false;
  size_t pending = r->len - r->start;
  /* A large message is done and nothing of the next one needs the big buffer: give the
   * memory back, so that one 256 MiB upload does not pin 256 MiB per connection. */
  if (pending == 0 && (r->handle || r->cap > r->min_cap * 4)) {
    drop_buf(r);
    r->len = r->start = r->scan = 0;
  }
  /* Room for what the current message is known to need, so a large bin is received into one
   * allocation of its size; while its size is unknown, a small window to read ahead into
   * (asking for min_cap more than pending would double every buffer holding a partial
   * message, and grow a large one again over its last min_cap bytes). */
  size_t want = r->need > pending ? (size_t)r->need : pending + KILN_MIN(r->min_cap, 4096);
  /* A message known to be large goes into one buffer of the allocator's; anything else
   * (the allocator declined, the large message is done) into the reader's own. */
  bool big = r->alloc.alloc_cb && r->need > r->alloc.threshold;
  bool fits = r->handle && r->start + want <= r->cap;
  if (big && !fits) {
    size_t cap = 0;
    void *h = NULL;
    uint8_t *p = r->alloc.alloc_cb(r->alloc.user, want + HANDLE_READAHEAD, &cap, &h);
    if (p) {
      rehome(r, p, cap, h);
      fits = true;
    }
  }
  if (r->handle && !(big && fits)) {
    size_t cap = KILN_MAX(r->min_cap, want);
    uint8_t *p = malloc(cap);
    if (!p) {
      fail(r, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory buffering a %zu-byte message",
                          want));
      return NULL;
    }
    rehome(r, p, cap, NULL);
  }
  if (r->handle) {
    *out_len = KILN_MIN(r->cap, r->start + want + HANDLE_READAHEAD) - r->len;
    return r->buf + r->len;
  }
  if (r->start > 0 && (r->cap - r->len < 4096 || r->start + want > r->cap)) {
    /* Move the partial message to the front. Only the unscanned tail and the scanned
     * prefix move together; offsets are relative to start so they shift with it. */
    memmove(r->buf, r->buf + r->start, pending);
    r->scan -= r->start;
    r->len = pending;
    r->start = 0;
  }
  if (r->start + want > r->cap) {
    size_t cap = r->cap ? r->cap : r->min_cap;
    while (cap < r->start + want) cap *= 2;
    /* Exactly what a known-large message needs, not the next power of two. */
    if (r->need > pending && r->need > r->min_cap && cap > r->start + want) cap = r->start + want;
    uint8_t *p = realloc(r->buf, cap);
    if (!p) {
      fail(r, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory buffering a %zu-byte message",
                          want));
      return NULL;
    }
    r->buf = p;
    r->cap = cap;
  }
  *out_len = r->cap - r->len;
  return r->buf + r->len;
}

void kiln_reader_commit(kiln_reader_t *r, size_t n) { r->len += n; }

static uint64_t be(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = (v << 8) | p[i];
  return v;
}

/* Header of the object at p: how many header bytes, how many payload bytes follow, and how
 * many child elements it opens (array n, map 2n). Returns 0 if more bytes are needed to
 * know, -1 for a byte that starts no MessagePack object. */
static int header(const uint8_t *p, size_t avail, size_t *hdr, uint64_t *payload,
                  uint64_t *children, bool *is_str, bool *is_container) {
  uint8_t b = p[0];
  *payload = 0;
  *children = 0;
  *is_str = false;
  *is_container = false;
  int lenbytes = 0, fixext = -1;
  if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
    *hdr = 1;
    return 1;
  }
  if ((b & 0xe0) == 0xa0) { /* fixstr */
    *hdr = 1;
    *payload = b & 0x1f;
    *is_str = true;
    return 1;
  }
  if ((b & 0xf0) == 0x90 || (b & 0xf0) == 0x80) { /* fixarray, fixmap */
    *hdr = 1;
    *children = (uint64_t)(b & 0x0f) * ((b & 0xf0) == 0x80 ? 2 : 1);
    *is_container = true;
    return 1;
  }
  switch (b) {
    case 0xcc: case 0xd0: *hdr = 2; return avail >= 2 ? 1 : 0;
    case 0xcd: case 0xd1: *hdr = 3; return avail >= 3 ? 1 : 0;
    case 0xca: case 0xce: case 0xd2: *hdr = 5; return avail >= 5 ? 1 : 0;
    case 0xcb: case 0xcf: case 0xd3: *hdr = 9; return avail >= 9 ? 1 : 0;
    case 0xd9: case 0xc4: lenbytes = 1; break;
    case 0xda: case 0xc5: lenbytes = 2; break;
    case 0xdb: case 0xc6: lenbytes = 4; break;
    case 0xc7: lenbytes = 1; fixext = 0; break; /* ext8: len, type */
    case 0xc8: lenbytes = 2; fixext = 0; break;
    case 0xc9: lenbytes = 4; fixext = 0; break;
    case 0xd4: *hdr = 2; *payload = 1; return avail >= 2 ? 1 : 0;
    case 0xd5: *hdr = 2; *payload = 2; return avail >= 2 ? 1 : 0;
    case 0xd6: *hdr = 2; *payload = 4; return avail >= 2 ? 1 : 0;
    case 0xd7: *hdr = 2; *payload = 8; return avail >= 2 ? 1 : 0;
    case 0xd8: *hdr = 2; *payload = 16; return avail >= 2 ? 1 : 0;
    case 0xdc: case 0xde: lenbytes = 2; *is_container = true; break;
    case 0xdd: case 0xdf: lenbytes = 4; *is_container = true; break;
    default: return -1; /* 0xc1 is never used */
  }
  size_t h = 1 + (size_t)lenbytes + (fixext == 0 ? 1 : 0);
  if (avail < h) return 0;
  uint64_t n = be(p + 1, lenbytes);
  *hdr = h;
  if (*is_container) {
    *children = (b == 0xde || b == 0xdf) ? 2 * n : n;
  } else {
    *payload = n;
    *is_str = (b >= 0xd9 && b <= 0xdb);
  }
  return 1;
}

kiln_frame_result_t kiln_reader_next(kiln_reader_t *r, const uint8_t **out_msg, size_t *out_len) {
  if (r->error) return KILN_FRAME_ERROR;
  const kiln_limits_t *lim = &r->limits;
  for (;;) {
    if (r->scan >= r->len) return KILN_FRAME_NEED_MORE;
    size_t hdr;
    uint64_t payload, children;
    bool is_str, is_container;
    int h = header(r->buf + r->scan, r->len - r->scan, &hdr, &payload, &children, &is_str,
                   &is_container);
    if (h < 0)
      return fail(r, KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                                 "byte 0x%02x at offset %zu starts no MessagePack object",
                                 r->buf[r->scan], r->scan - r->start));
    if (h == 0) {
      r->need = KILN_MAX(r->need, r->scan - r->start + 9);
      return KILN_FRAME_NEED_MORE;
    }
    uint64_t used = (uint64_t)(r->scan - r->start) + hdr;
    if (is_str && payload > lim->max_str)
      return fail(r, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                                 "string of %llu bytes exceeds the limit of %u bytes",
                                 (unsigned long long)payload, lim->max_str));
    if (used + payload > lim->max_message)
      return fail(r, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                                 "message exceeds the limit of %llu bytes (a value of %llu bytes "
                                 "was announced); split large tensors with write/read",
                                 (unsigned long long)lim->max_message,
                                 (unsigned long long)payload));
    if (is_container) {
      uint64_t items = children;
      /* Maps count pairs against max_items. */
      if ((r->buf[r->scan] & 0xf0) == 0x80 || r->buf[r->scan] == 0xde || r->buf[r->scan] == 0xdf)
        items = children / 2;
      if (items > lim->max_items)
        return fail(r, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                                   "array or map of %llu elements exceeds the limit of %u",
                                   (unsigned long long)items, lim->max_items));
      /* Every element takes at least one byte: an announced count that cannot fit in the
       * remaining message budget is rejected now. */
      if (used + children > lim->max_message)
        return fail(r, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                                   "array or map of %llu elements cannot fit in a message of "
                                   "at most %llu bytes",
                                   (unsigned long long)items,
                                   (unsigned long long)lim->max_message));
    }
    if (r->scan + hdr + payload > r->len) {
      /* The payload has not arrived; remember how much this message needs so the buffer
       * is grown once, to size. */
      r->need = KILN_MAX(r->need, used + payload);
      return KILN_FRAME_NEED_MORE;
    }
    r->scan += hdr + (size_t)payload;

    /* This object is complete, or opened a container. */
    if (is_container && children > 0) {
      if (r->depth + 1 > lim->max_depth)
        return fail(r, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                                   "nesting deeper than the limit of %u", lim->max_depth));
      r->remaining[++r->depth] = children;
      continue;
    }
    if (is_container && r->depth + 1 > lim->max_depth)
      return fail(r, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "nesting deeper than the limit of %u",
                                 lim->max_depth));
    /* Close every container this object completes. */
    while (r->depth > 0 && --r->remaining[r->depth] == 0) r->depth--;
    if (r->depth == 0) {
      *out_msg = r->buf + r->start;
      *out_len = r->scan - r->start;
      r->last_in_handle = r->handle != NULL;
      r->last_in_own = r->handle == NULL;
      r->start = r->scan;
      r->need = 0;
      if (r->start == r->len) r->start = r->len = r->scan = 0;
      return KILN_FRAME_MESSAGE;
    }
  }
}
