/* Client connections: reading with the framer, coalesced writes, backpressure, timeouts,
 * close-after-reply for protocol errors. */
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "base/log.h"
#include "base/util.h"
#include "server/metrics.h"
#include "server/server.h"

typedef struct out_write {
  uv_write_t req;
  kiln_conn_t *conn;
  uint8_t *bytes; /* owned */
  size_t len;     /* bytes and extra bytes written by this request */
  void (*release)(void *);
  void *ctx;
} out_write_t;

static void on_close(uv_handle_t *h);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

void kiln_conn_release(kiln_conn_t *c) {
  if (--c->refs > 0) return;
  if (c->tls) c->server->tls_ops->free(c);
  kiln_reader_deinit(&c->reader);
  kiln_buf_deinit(&c->out);
  free(c);
}

static void list_remove(kiln_server_t *s, kiln_conn_t *c) {
  if (c->prev) c->prev->next = c->next;
  else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
}

static void on_close(uv_handle_t *h) {
  kiln_conn_t *c = KILN_CONTAINER_OF(h, kiln_conn_t, h.handle);
  kiln_server_t *s = c->server;
  list_remove(s, c);
  s->num_conns--;
  if (c->condemned) s->num_condemned--;
  if (c->tenant) c->tenant->connections--;
  kiln_peer_leave_anonymous(s, c);
  kiln_hooks_fire(s, KILN_EVENT_CONN_CLOSED, c);
  KILN_LOG_DEBUG("conn_close", "conn=%llu inflight=%u", (unsigned long long)c->id, c->inflight);
  kiln_conn_release(c);
  kiln_hooks_fire(s, KILN_EVENT_SETTLED, NULL);
}

/* The connection is on its way out: it no longer counts against --max-connections. */
static void condemn(kiln_conn_t *c) {
  if (c->condemned) return;
  c->condemned = true;
  c->server->num_condemned++;
}

void kiln_conn_close(kiln_conn_t *c) {
  if (c->closing) return;
  condemn(c);
  c->closing = true;
  c->reading = false;
  uv_read_stop(&c->h.stream);
  if (c->tls) c->server->tls_ops->closing(c);
  /* Pending writes get their callbacks with UV_ECANCELED before on_close runs. */
  uv_close(&c->h.handle, on_close);
}

/* Reply bytes not yet written to the socket. */
static uint64_t unsent(const kiln_conn_t *c) {
  return uv_stream_get_write_queue_size(&c->h.stream) + c->out.len +
         (c->tls ? c->server->tls_ops->unsent(c) : 0);
}

void kiln_conn_update_reading(kiln_conn_t *c) {
  if (c->closing || c->close_after_write) return;
  kiln_server_t *s = c->server;
  uint64_t max_unsent = c->anonymous ? KILN_ANON_MAX_UNSENT : s->cfg.max_unsent_bytes;
  bool over = c->inflight >= s->cfg.max_inflight || unsent(c) > max_unsent;
  if (over && c->reading) {
    uv_read_stop(&c->h.stream);
    c->reading = false;
  } else if (!over && !c->reading && !s->draining) {
    if (uv_read_start(&c->h.stream, on_alloc, on_read) == 0) {
      c->reading = true;
      /* The stall clock starts again: time kilnd spent not reading is not the peer's. */
      c->reading_since_ns = kiln_now_ns();
    }
  }
}

bool kiln_conn_written(kiln_conn_t *c, int status, size_t len) {
  if (status == 0) kiln_metrics_bytes(0, len);
  if (status < 0 && status != UV_ECANCELED) {
    KILN_LOG_DEBUG("write_error", "conn=%llu error=%s", (unsigned long long)c->id,
                   uv_strerror(status));
    kiln_conn_close(c);
  }
  return !c->closing;
}

static void on_write(uv_write_t *req, int status) {
  out_write_t *w = KILN_CONTAINER_OF(req, out_write_t, req);
  kiln_conn_t *c = w->conn;
  size_t len = w->len;
  free(w->bytes);
  if (w->release) w->release(w->ctx);
  free(w);
  if (kiln_conn_written(c, status, len)) {
    if (c->close_after_write && uv_stream_get_write_queue_size(&c->h.stream) == 0)
      kiln_conn_close(c);
    else kiln_conn_update_reading(c);
  }
  kiln_conn_release(c);
}

/* Hands bytes (and optional zero-copy extra bytes) to libuv. Small writes are tried
 * synchronously first: most replies leave in that one syscall with no allocation. */
static void write_now(kiln_conn_t *c, uint8_t *bytes, size_t len, const void *extra,
                      size_t extra_len, void (*release)(void *), void *ctx) {
  if (c->tls) {
    c->server->tls_ops->send(c, bytes, len, extra, extra_len, release, ctx);
    return;
  }
  uv_buf_t bufs[2];
  int nb = 0;
  size_t done = 0;
  if (extra_len == 0 && uv_stream_get_write_queue_size(&c->h.stream) == 0) {
    bufs[nb++] = uv_buf_init((char *)bytes, (unsigned)len);
    int n = uv_try_write(&c->h.stream, bufs, (unsigned)nb);
    if (n > 0) kiln_metrics_bytes(0, (uint64_t)n);
    if (n == (int)len) {
      free(bytes);
      if (release) release(ctx);
      if (c->close_after_write) kiln_conn_close(c);
      return;
    }
    if (n > 0) done = (size_t)n;
    else if (n != UV_EAGAIN) {
      free(bytes);
      if (release) release(ctx);
      kiln_conn_close(c);
      return;
    }
  }
  out_write_t *w = calloc(1, sizeof(*w));
  if (!w) {
    free(bytes);
    if (release) release(ctx);
    kiln_conn_close(c);
    return;
  }
  w->conn = c;
  w->bytes = bytes;
  w->len = len - done + extra_len;
  w->release = release;
  w->ctx = ctx;
  nb = 0;
  if (len > done) bufs[nb++] = uv_buf_init((char *)bytes + done, (unsigned)(len - done));
  /* uv_buf_t.len is size_t on unix: gigabyte payloads go in one buffer. */
  if (extra_len) {
    bufs[nb].base = (char *)extra;
    bufs[nb].len = extra_len;
    nb++;
  }
  c->refs++;
  int rc = uv_write(&w->req, &c->h.stream, bufs, (unsigned)nb, on_write);
  if (rc) {
    c->refs--;
    free(w->bytes);
    if (release) release(ctx);
    free(w);
    kiln_conn_close(c);
  }
}

static void flush(kiln_conn_t *c) {
  if (!c->out.len || c->closing) return;
  size_t len;
  uint8_t *bytes = kiln_buf_release(&c->out, &len);
  write_now(c, bytes, len, NULL, 0, NULL, NULL);
}

void kiln_conn_send(kiln_conn_t *c, kiln_buf_t *bytes, const void *extra, size_t extra_len,
                    void (*release)(void *), void *extra_ctx) {
  if (c->closing) {
    kiln_buf_deinit(bytes);
    if (release) release(extra_ctx);
    return;
  }
  if (!extra_len && c->in_dispatch && bytes->len < 16384) {
    /* Coalesce: a pipelined burst of small replies leaves in one write after read_cb. */
    kiln_status_t st = kiln_buf_append(&c->out, bytes->data, bytes->len);
    kiln_buf_deinit(bytes);
    if (release) release(extra_ctx);
    if (st) {
      kiln_status_free(st);
      kiln_conn_close(c);
    }
    return;
  }
  flush(c);
  size_t len;
  uint8_t *p = kiln_buf_release(bytes, &len);
  write_now(c, p, len, extra, extra_len, release, extra_ctx);
}

void kiln_conn_fail(kiln_conn_t *c, bool has_msgid, uint32_t msgid, kiln_status_t st) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t p;
  kiln_packer_init(&p, &b);
  kiln_code_t code = kiln_status_code(st);
  if (has_msgid) {
    kiln_rpc_pack_error(&p.pk, msgid, code, kiln_status_message(st));
  } else {
    kiln_rpc_pack_notification_head(&p.pk, "error");
    msgpack_pack_array(&p.pk, 1);
    kiln_fields_t m;
    kiln_fields_begin(&m, &p.pk);
    kiln_fields_u64(&m, "code", (uint64_t)code);
    kiln_fields_str(&m, "message", kiln_status_message(st));
    kiln_fields_end(&m);
  }
  c->server->errors_by_code[code < KILN_E_COUNT_ ? code : KILN_E_INTERNAL]++;
  char q[300];
  KILN_LOG_INFO("protocol_error", "conn=%llu peer=%s code=%s message=%s", (unsigned long long)c->id,
                c->peer, kiln_code_name(code), kiln_log_quote(q, sizeof(q), kiln_status_message(st)));
  kiln_status_free(st);
  if (c->tls && c->server->tls_ops->handshaking(c)) {
    /* Nothing can be said to a peer before its handshake is done. */
    kiln_buf_deinit(&b);
    kiln_conn_close(c);
    return;
  }
  if (c->reading) {
    uv_read_stop(&c->h.stream);
    c->reading = false;
  }
  bool was = c->in_dispatch;
  c->in_dispatch = false;
  flush(c);
  c->close_after_write = true;
  condemn(c);
  if (c->closing) {
    kiln_buf_deinit(&b);
    return;
  }
  size_t len;
  uint8_t *bytes = kiln_buf_release(&b, &len);
  write_now(c, bytes, len, NULL, 0, NULL, NULL);
  c->in_dispatch = was;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  kiln_conn_t *c = KILN_CONTAINER_OF(h, kiln_conn_t, h.handle);
  if (c->tls) {
    c->server->tls_ops->alloc(c, buf);
    return;
  }
  size_t n = 0;
  void *p = kiln_reader_space(&c->reader, &n);
  /* Before hello, small reads: what one read can make kilnd answer (a flood of tiny
   * requests, each refused with a longer error) stays small too. */
  if (c->anonymous && n > 4096) n = 4096;
  buf->base = p;
  buf->len = p ? n : 0;
}

bool kiln_conn_consume(kiln_conn_t *c) {
  for (;;) {
    if (c->closing || c->close_after_write) return false;
    const uint8_t *msg;
    size_t len;
    kiln_frame_result_t fr = kiln_reader_next(&c->reader, &msg, &len);
    if (fr == KILN_FRAME_NEED_MORE) return true;
    if (fr == KILN_FRAME_ERROR) {
      size_t plen;
      const uint8_t *pending = kiln_reader_pending(&c->reader, &plen);
      uint32_t msgid = 0;
      bool has = kiln_rpc_peek_msgid(pending, plen, &msgid);
      kiln_status_t e = kiln_reader_error(&c->reader);
      kiln_conn_fail(c, has, msgid, KILN_STATUS(kiln_status_code(e), "%s", kiln_status_message(e)));
      return false;
    }
    c->server->conn_handler->message(c, msg, len);
  }
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  kiln_conn_t *c = KILN_CONTAINER_OF(st, kiln_conn_t, h.stream);
  if (nread == 0) return;
  if (nread < 0) {
    if (nread == UV_ENOBUFS) {
      kiln_status_t e = kiln_reader_error(&c->reader);
      kiln_conn_fail(c, false, 0,
                     e ? KILN_STATUS(kiln_status_code(e), "%s", kiln_status_message(e))
                       : KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "no memory to receive"));
      return;
    }
    if (nread != UV_EOF)
      KILN_LOG_DEBUG("read_error", "conn=%llu error=%s", (unsigned long long)c->id,
                     uv_strerror((int)nread));
    kiln_conn_close(c);
    return;
  }
  c->last_activity_ns = kiln_now_ns();
  kiln_metrics_bytes((uint64_t)nread, 0);
  c->refs++; /* a handler may close the connection; keep it alive until we are done */
  c->in_dispatch = true;
  if (c->tls) {
    c->server->tls_ops->received(c, buf->base, (size_t)nread);
  } else {
    kiln_reader_commit(&c->reader, (size_t)nread);
    kiln_conn_consume(c);
  }
  c->in_dispatch = false;
  flush(c);
  if (!c->closing) kiln_conn_update_reading(c);
  kiln_conn_release(c);
}

void kiln_conn_accept(kiln_listener_t *l) {
  kiln_server_t *s = l->server;
  kiln_conn_t *c = calloc(1, sizeof(*c));
  if (!c) return;
  c->server = s;
  c->refs = 1;
  c->id = ++s->next_conn_id;
  c->tenant = kiln_tenants_default(&s->tenants);
  if (c->tenant) c->tenant->connections++;
  kiln_reader_init(&c->reader, &s->cfg.limits, 64 * 1024);
  kiln_reader_alloc_t alloc;
  s->conn_handler->reader_alloc(c, &alloc);
  kiln_reader_set_alloc(&c->reader, &alloc);
  kiln_buf_init(&c->out);
  if (l->is_tcp) uv_tcp_init(s->loop, &c->h.tcp);
  else uv_pipe_init(s->loop, &c->h.pipe, 0);
  c->h.handle.data = c;
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  s->num_conns++;
  kiln_metrics_conn_accepted();
  if (uv_accept(&l->h.stream, &c->h.stream) != 0) {
    kiln_conn_close(c);
    return;
  }
  if (l->tls) {
    kiln_status_t st = s->tls_ops->start(c, s->tls_ctx);
    if (st) {
      KILN_LOG_WARN("tls_error", "conn=%llu error=\"%s\"", (unsigned long long)c->id,
                    kiln_status_message(st));
      kiln_status_free(st);
      kiln_conn_close(c);
      return;
    }
  }
  if (l->is_tcp) uv_tcp_nodelay(&c->h.tcp, 1);
  kiln_peer_identify(c, l->is_tcp);
  c->accepted_ns = c->last_activity_ns = kiln_now_ns();
  if (s->draining) {
    kiln_conn_fail(c, false, 0, KILN_STATUS(KILN_E_UNAVAILABLE, "the server is shutting down"));
    return;
  }
  /* Without tokens, a loopback listener admits kilnd's user and root only: the check comes
   * before the connection may cost anything more (no slot, no read). */
  if (l->owner_only) {
    kiln_status_t st = kiln_peer_check_owner(c, l);
    if (st) {
      kiln_conn_fail(c, false, 0, st);
      return;
    }
  }
  if (s->tenants.auth_required) {
    kiln_conn_t *evicted = NULL;
    kiln_status_t st = kiln_peer_admit(s, c, &evicted);
    if (st) {
      kiln_conn_fail(c, false, 0, st);
      return;
    }
    if (evicted)
      kiln_conn_fail(evicted, false, 0,
                     KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                                 "closed to make room: too many connections have not completed "
                                 "hello; send hello right after connecting"));
    c->reader.limits.max_message = KILN_ANON_MAX_MESSAGE;
  }
  /* Anonymous connections never lock out a tenant: at the cap, the oldest of them makes
   * room before a newcomer is refused. */
  if (s->num_conns - s->num_condemned > s->cfg.max_connections) {
    kiln_conn_t *oldest = kiln_peer_evict_oldest(s, c);
    if (!oldest) {
      kiln_conn_fail(c, false, 0,
                     KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                                 "the server has reached its limit of %u connections; retry later",
                                 s->cfg.max_connections));
      return;
    }
    kiln_conn_fail(oldest, false, 0,
                   KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                               "closed to make room: the server is at its connection limit and "
                               "this connection had not completed hello"));
  }
  KILN_LOG_DEBUG("conn_open", "conn=%llu peer=%s", (unsigned long long)c->id, c->peer);
  kiln_conn_update_reading(c);
}

/* After 10 s without requests in flight, the heap's free pages go back to the system once:
 * a burst (a compile flood, thousands of worker restarts) leaves freed memory scattered in
 * the heap that glibc keeps otherwise. */
static void trim_heap_when_idle(kiln_server_t *s, uint64_t now) {
  if (s->total_inflight) {
    s->idle_since_ns = 0;
    s->heap_trimmed = false;
    return;
  }
  if (!s->idle_since_ns) s->idle_since_ns = now;
  if (s->heap_trimmed || now - s->idle_since_ns < 10ull * 1000000000u) return;
  malloc_trim(0);
  s->heap_trimmed = true;
}

/* A peer is stalled when part of a message is buffered, kilnd is reading, and no byte has
 * arrived for `limit` since the later of the last byte and the moment reading (re)started.
 * A message may take any time to arrive as long as bytes keep coming, and while kilnd
 * itself holds reading back (requests in flight, replies unsent) the clock stands still.
 * Bytes waiting in the socket have arrived too: when kilnd itself was late (descheduled on
 * a loaded host, libuv's timers run before the reads of the same turn of the loop), the
 * sweep must not take the bytes it has not read yet for the peer's silence. */
static bool stalled_mid_message(const kiln_conn_t *c, uint64_t now, uint64_t limit) {
  bool partial = kiln_reader_partial(&c->reader) || (c->tls && c->server->tls_ops->partial(c));
  if (!c->reading || !partial) return false;
  uint64_t since = KILN_MAX(c->last_activity_ns, c->reading_since_ns);
  if (now <= since || now - since <= limit) return false;
  uv_os_fd_t fd;
  int unread = 0;
  return !(uv_fileno(&c->h.handle, &fd) == 0 && ioctl(fd, FIONREAD, &unread) == 0 && unread > 0);
}

void kiln_conns_sweep(kiln_server_t *s) {
  uint64_t now = kiln_now_ns();
  trim_heap_when_idle(s, now);
  for (kiln_conn_t *c; (c = kiln_peer_expired(s, now));)
    kiln_conn_fail(c, false, 0,
                   KILN_STATUS(KILN_E_UNAUTHENTICATED,
                               "no successful hello within %g s of connecting; closing",
                               s->cfg.hello_timeout_s));
  kiln_peers_prune(s, now);
  uint64_t idle = (uint64_t)(s->cfg.idle_timeout_s * 1e9);
  uint64_t partial = (uint64_t)(s->cfg.partial_timeout_s * 1e9);
  uint64_t handshake = (uint64_t)(s->cfg.handshake_timeout_s * 1e9);
  for (kiln_conn_t *c = s->conns; c;) {
    kiln_conn_t *next = c->next;
    if (!c->closing && c->tls && s->tls_ops->handshaking(c) && now - c->accepted_ns > handshake) {
      KILN_LOG_INFO("tls_handshake_timeout", "conn=%llu peer=%s", (unsigned long long)c->id,
                    c->peer);
      kiln_conn_close(c);
    } else if (!c->closing && !c->close_after_write) {
      if (stalled_mid_message(c, now, partial)) {
        kiln_conn_fail(c, false, 0,
                       KILN_STATUS(KILN_E_TIMEOUT,
                                   "no bytes of an unfinished message arrived for %.0f s; closing",
                                   s->cfg.partial_timeout_s));
      } else if (c->inflight == 0 && now - c->last_activity_ns > idle) {
        KILN_LOG_DEBUG("conn_idle", "conn=%llu", (unsigned long long)c->id);
        kiln_conn_close(c);
      }
    }
    c = next;
  }
}

void kiln_conns_cancel_and_close(kiln_server_t *s) {
  for (kiln_conn_t *c = s->conns; c;) {
    kiln_conn_t *next = c->next;
    c->refs++;
    s->conn_handler->cancel_requests(c,
                                     KILN_STATUS(KILN_E_CANCELLED, "the server is shutting down"));
    if (!c->closing) {
      if (c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = false;
      }
      flush(c);
      c->close_after_write = true;
      condemn(c);
      if (!c->closing && unsent(c) == 0) kiln_conn_close(c);
    }
    kiln_conn_release(c);
    c = next;
  }
}
