/* The TLS side of a client connection: ciphertext in from libuv, plaintext into the frame
 * reader; replies encrypted as the socket drains (server/tls.h has the session).
 *
 * Replies wait as plaintext (with their zero-copy extra bytes, e.g. a tensor in shared
 * memory) and are encrypted in pieces only while less than TLS_WINDOW of ciphertext is on its
 * way out, so a 1 GiB download never becomes 1 GiB of ciphertext in kilnd's heap. Until the
 * handshake is done nothing is encrypted: an answer made then (an error at accept) waits. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "server/metrics.h"
#include "server/server.h"
#include "server/tls.h"

/* A read or a piece of 64 records gives the TLS pool (protocol/tls13.h) shares worth waking
 * its threads for. */
#define TLS_IN_BYTES (1u << 20) /* ciphertext per read */
#define TLS_PIECE (1u << 20)    /* plaintext encrypted per kiln_tls_write */
#define TLS_WINDOW (4u << 20)   /* ciphertext waiting or being written */

typedef struct tls_out { /* plaintext waiting to be encrypted */
  struct tls_out *next;
  uint8_t *bytes; /* owned */
  size_t len;
  const uint8_t *extra;
  size_t extra_len;
  void (*release)(void *);
  void *ctx;
  size_t done; /* of len + extra_len */
} tls_out_t;

struct kiln_conn_tls {
  kiln_tls_t *session;
  tls_out_t *head, *tail;
  size_t queued;   /* plaintext bytes in the queue, not yet encrypted */
  size_t inflight; /* ciphertext handed to libuv, not yet written */
  bool logged;     /* the handshake's completion was logged */
  bool started;    /* the first byte has arrived */
};

typedef struct tls_write {
  uv_write_t req;
  kiln_conn_t *conn;
  uint8_t *bytes; /* owned: ciphertext from kiln_tls_take, a buffer of cap bytes */
  size_t len;     /* being written (the end of bytes) */
  size_t cap;
} tls_write_t;

/* libuv calls read_cb right after alloc_cb with the buffer it got, and the ciphertext is fed
 * to the session inside read_cb: one buffer serves every TLS connection. */
static uint8_t *shared_in;

kiln_status_t kiln_conn_tls_start(kiln_conn_t *c, kiln_tls_ctx_t *ctx) {
  if (!shared_in && !(shared_in = malloc(TLS_IN_BYTES)))
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for TLS");
  struct kiln_conn_tls *t = calloc(1, sizeof(*t));
  if (!t) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for TLS");
  kiln_status_t st = kiln_tls_create(ctx, &t->session);
  if (st) {
    free(t);
    return st;
  }
  c->tls = t;
  return KILN_OK;
}

void kiln_conn_tls_free(kiln_conn_t *c) {
  struct kiln_conn_tls *t = c->tls;
  if (!t) return;
  for (tls_out_t *o = t->head, *n; o; o = n) {
    n = o->next;
    free(o->bytes);
    if (o->release) o->release(o->ctx);
    free(o);
  }
  kiln_tls_destroy(t->session);
  free(t);
  c->tls = NULL;
}

void kiln_conn_tls_alloc(kiln_conn_t *c, uv_buf_t *buf) {
  buf->base = (char *)shared_in;
  /* Before hello, small reads (conn.c says why). */
  buf->len = c->anonymous ? 4096 : TLS_IN_BYTES;
}

size_t kiln_conn_tls_unsent(const kiln_conn_t *c) {
  const struct kiln_conn_tls *t = c->tls;
  return t->queued + t->inflight + kiln_tls_pending_out(t->session);
}

bool kiln_conn_tls_partial(const kiln_conn_t *c) { return kiln_tls_partial_in(c->tls->session); }
bool kiln_conn_tls_handshaking(const kiln_conn_t *c) {
  return !kiln_tls_handshake_done(c->tls->session);
}

static void after_write(kiln_conn_t *c);

static void on_write(uv_write_t *req, int status) {
  tls_write_t *w = KILN_CONTAINER_OF(req, tls_write_t, req);
  kiln_conn_t *c = w->conn;
  size_t len = w->len;
  c->tls->inflight -= len;
  kiln_tls_give_back(c->tls->session, w->bytes, w->cap);
  /* Nothing more to send: an idle connection keeps no megabyte of ciphertext buffer. */
  if (!c->tls->head && !c->tls->inflight) kiln_tls_trim(c->tls->session);
  free(w);
  if (kiln_conn_written(c, status, len)) after_write(c);
  kiln_conn_release(c);
}

/* Hands the waiting ciphertext to the socket: what it takes at once, then a write request
 * for the rest. */
static void ship(kiln_conn_t *c) {
  struct kiln_conn_tls *t = c->tls;
  while (!c->closing && kiln_tls_pending_out(t->session) > 0) {
    size_t n, cap, done = 0;
    uint8_t *bytes = kiln_tls_take(t->session, &n, &cap);
    if (uv_stream_get_write_queue_size(&c->h.stream) == 0) {
      uv_buf_t b = uv_buf_init((char *)bytes, (unsigned)n);
      int k = uv_try_write(&c->h.stream, &b, 1);
      if (k > 0) {
        done = (size_t)k;
        kiln_metrics_bytes(0, done);
      } else if (k != UV_EAGAIN) {
        free(bytes);
        kiln_conn_close(c);
        return;
      }
    }
    if (done == n) {
      kiln_tls_give_back(t->session, bytes, cap);
      continue;
    }
    tls_write_t *w = malloc(sizeof(*w));
    if (!w) {
      free(bytes);
      kiln_conn_close(c);
      return;
    }
    *w = (tls_write_t){.conn = c, .bytes = bytes, .len = n - done, .cap = cap};
    uv_buf_t b = uv_buf_init((char *)bytes + done, (unsigned)w->len);
    t->inflight += w->len;
    c->refs++;
    if (uv_write(&w->req, &c->h.stream, &b, 1, on_write) != 0) {
      t->inflight -= w->len;
      c->refs--;
      free(bytes);
      free(w);
      kiln_conn_close(c);
      return;
    }
  }
}

/* Encrypts queued replies while the window has room, then ships the ciphertext. */
static void pump(kiln_conn_t *c) {
  struct kiln_conn_tls *t = c->tls;
  if (c->closing || !kiln_tls_handshake_done(t->session)) return;
  while (t->head && t->inflight + kiln_tls_pending_out(t->session) < TLS_WINDOW) {
    tls_out_t *o = t->head;
    size_t total = o->len + o->extra_len;
    const uint8_t *p = o->done < o->len ? o->bytes + o->done : o->extra + (o->done - o->len);
    size_t n = KILN_MIN(TLS_PIECE, o->done < o->len ? o->len - o->done : total - o->done);
    kiln_status_t st = kiln_tls_write(t->session, p, n);
    if (st) {
      KILN_LOG_INFO("tls_error", "conn=%llu peer=%s error=\"%s\"", (unsigned long long)c->id,
                    c->peer, kiln_status_message(st));
      kiln_status_free(st);
      kiln_conn_close(c);
      return;
    }
    o->done += n;
    t->queued -= n;
    if (o->done == total) {
      t->head = o->next;
      if (!t->head) t->tail = NULL;
      free(o->bytes);
      if (o->release) o->release(o->ctx);
      free(o);
    }
    if (kiln_tls_pending_out(t->session) >= TLS_PIECE) ship(c);
  }
  ship(c);
}

static void after_write(kiln_conn_t *c) {
  pump(c);
  if (c->closing) return;
  if (c->close_after_write && kiln_conn_tls_unsent(c) == 0) kiln_conn_close(c);
  else kiln_conn_update_reading(c);
}

void kiln_conn_tls_send(kiln_conn_t *c, uint8_t *bytes, size_t len, const void *extra,
                        size_t extra_len, void (*release)(void *), void *ctx) {
  struct kiln_conn_tls *t = c->tls;
  tls_out_t *o = calloc(1, sizeof(*o));
  if (!o) {
    free(bytes);
    if (release) release(ctx);
    kiln_conn_close(c);
    return;
  }
  *o = (tls_out_t){.bytes = bytes, .len = len, .extra = extra, .extra_len = extra_len,
                   .release = release, .ctx = ctx};
  if (t->tail) t->tail->next = o;
  else t->head = o;
  t->tail = o;
  t->queued += len + extra_len;
  after_write(c);
}

static void decrypt(kiln_conn_t *c);

/* The handshake just finished: log it, and send what waited for it. */
static void handshake_done(kiln_conn_t *c) {
  struct kiln_conn_tls *t = c->tls;
  t->logged = true;
  char d[400];
  kiln_tls_describe(t->session, d, sizeof(d));
  KILN_LOG_DEBUG("tls_handshake", "conn=%llu peer=%s %s", (unsigned long long)c->id, c->peer, d);
  pump(c);
}

void kiln_conn_tls_received(kiln_conn_t *c, const void *p, size_t n) {
  struct kiln_conn_tls *t = c->tls;
  if (!t->started) {
    /* A TLS 1.3 client starts with a handshake record (22). Anything else is not TLS, or an
     * SSLv2-style hello that cannot offer TLS 1.3 and would make OpenSSL wait for a length
     * its high bit announces: closed now, not at the handshake timeout. */
    t->started = true;
    if (((const uint8_t *)p)[0] != 22) {
      KILN_LOG_INFO("tls_error", "conn=%llu peer=%s handshake=failed error=\"not TLS: first "
                    "byte 0x%02x\"", (unsigned long long)c->id, c->peer, ((const uint8_t *)p)[0]);
      kiln_conn_close(c);
      return;
    }
  }
  kiln_tls_feed(t->session, p, n);
  decrypt(c);
  /* What the reads left of this buffer (part of a record) is kept; the buffer is shared. */
  kiln_status_t st = kiln_tls_feed_end(t->session);
  if (st) {
    kiln_conn_fail(c, false, 0, st);
    return;
  }
  if (c->closing) return;
  if (!t->logged && kiln_tls_handshake_done(t->session)) handshake_done(c);
  ship(c); /* handshake messages */
}

/* Decrypts what was fed into the reader and dispatches every whole message. */
static void decrypt(kiln_conn_t *c) {
  struct kiln_conn_tls *t = c->tls;
  for (;;) {
    if (c->closing || c->close_after_write) break;
    size_t room;
    void *space = kiln_reader_space(&c->reader, &room);
    if (!space) {
      kiln_status_t e = kiln_reader_error(&c->reader);
      kiln_conn_fail(c, false, 0,
                     e ? KILN_STATUS(kiln_status_code(e), "%s", kiln_status_message(e))
                       : KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "no memory to receive"));
      break;
    }
    size_t got = 0;
    kiln_tls_result_t r = kiln_tls_read(t->session, space, room, &got);
    if (r == KILN_TLS_DATA) {
      kiln_reader_commit(&c->reader, got);
      kiln_conn_consume(c);
      continue;
    }
    if (r == KILN_TLS_CLOSED) {
      kiln_conn_close(c);
      return;
    }
    if (r == KILN_TLS_ERROR) {
      /* Garbage, a failed handshake (a wrong CA, a missing client certificate) or a forged
       * record: nothing more can be said over this stream. OpenSSL's alert goes first. */
      KILN_LOG_INFO("tls_error", "conn=%llu peer=%s handshake=%s error=\"%s\"",
                    (unsigned long long)c->id, c->peer,
                    kiln_tls_handshake_done(t->session) ? "done" : "failed",
                    kiln_tls_error(t->session));
      ship(c);
      kiln_conn_close(c);
      return;
    }
    return; /* more ciphertext needed */
  }
}

void kiln_conn_tls_closing(kiln_conn_t *c) {
  struct kiln_conn_tls *t = c->tls;
  kiln_tls_shutdown(t->session);
  /* Best effort: close_notify leaves if the socket takes it now. */
  size_t n, cap;
  uint8_t *bytes = kiln_tls_take(t->session, &n, &cap);
  if (n && uv_stream_get_write_queue_size(&c->h.stream) == 0) {
    uv_buf_t b = uv_buf_init((char *)bytes, (unsigned)n);
    uv_try_write(&c->h.stream, &b, 1);
  }
  free(bytes);
}
