/* Moving bytes between the client's queues and the socket.
 *
 * The socket is non-blocking and every wait is a poll() on it. Whenever the client waits to
 * send, it also reads: the daemon stops reading a connection that has too many replies
 * unsent (docs/protocol.md, backpressure), so a client that only wrote could wait forever. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "base/util.h"
#include "internal.h"

/* At most this many iovecs per sendmsg; far below IOV_MAX, large enough that a batch of
 * small requests plus a few attached buffers goes out in one call. */
#define IOV_BATCH 64
/* Replies of at least this size keep the reader's buffer instead of being copied. */
#define STEAL_BYTES (1u << 20)
/* Bounds the work done per poll wake-up so one connection cannot starve the caller. */
#define READS_PER_WAKE 64

uint64_t kiln_io_deadline(const kiln_client_t *c) {
  return c->timeout_ms > 0 ? kiln_now_ns() + (uint64_t)c->timeout_ms * 1000000u : 0;
}

kiln_status_t kiln_io_broken(const kiln_client_t *c) {
  return KILN_STATUS(kiln_status_code(c->broken), "%s", kiln_status_message(c->broken));
}

static size_t read_some(kiln_client_t *c);

static void set_broken(kiln_client_t *c, kiln_status_t s) {
  if (c->broken) kiln_status_free(s);
  else c->broken = s;
}

static void reset_output(kiln_client_t *c) {
  c->nsegs = c->seg_head = c->seg_sent = c->mark = 0;
  c->queued = c->queued_packed = 0;
  /* One big generic request must not pin its buffer for the client's lifetime. */
  if (c->out.cap > (4u << 20)) kiln_buf_deinit(&c->out);
  c->out.len = 0;
}

/* w bytes of the queue went out. */
static void advance(kiln_client_t *c, size_t w) {
  size_t left = w;
  c->queued -= left;
  while (left > 0) {
    kiln_seg_t *s = &c->segs[c->seg_head];
    size_t rest = s->len - c->seg_sent;
    size_t take = KILN_MIN(rest, left);
    if (!s->ext) c->queued_packed -= take;
    c->seg_sent += take;
    left -= take;
    if (c->seg_sent == s->len) {
      c->seg_head++;
      c->seg_sent = 0;
    }
  }
}

/* On tls: URLs: the ciphertext buffered so far goes out first; then one segment (at most
 * 1 MiB of it) is encrypted per SSL_write and sent. */
static kiln_status_t tls_write_some(kiln_client_t *c) {
  for (;;) {
    kiln_status_t err = NULL;
    int f = kiln_tls_flush(c, &err);
    if (f == 0 && c->seg_head < c->nsegs) {
      const kiln_seg_t *s = &c->segs[c->seg_head];
      const uint8_t *base = (s->ext ? s->ext : c->out.data + s->off) + c->seg_sent;
      ssize_t w = kiln_tls_encrypt(c, base, KILN_MIN(s->len - c->seg_sent, (size_t)1 << 20), &err);
      if (w > 0) {
        advance(c, (size_t)w);
        continue;
      }
      f = -1;
    }
    if (f < 0) {
      read_some(c); /* the daemon may have said why it closed */
      set_broken(c, err);
      return kiln_io_broken(c);
    }
    break; /* everything is sent, or the socket is full */
  }
  if (c->seg_head == c->nsegs) reset_output(c);
  return KILN_OK;
}

kiln_status_t kiln_io_write_some(kiln_client_t *c) {
  if (c->broken) return kiln_io_broken(c);
  if (c->ssl) return tls_write_some(c);
  while (c->seg_head < c->nsegs) {
    struct iovec iov[IOV_BATCH];
    int n = 0;
    for (size_t i = c->seg_head; i < c->nsegs && n < IOV_BATCH; i++, n++) {
      const kiln_seg_t *s = &c->segs[i];
      const uint8_t *base = s->ext ? s->ext : c->out.data + s->off;
      size_t skip = i == c->seg_head ? c->seg_sent : 0;
      iov[n].iov_base = (void *)(base + skip);
      iov[n].iov_len = s->len - skip;
    }
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return KILN_OK;
      int err = errno;
      /* The daemon closes a connection after replying to a request it refused (a message
       * over its limit): read that reply before giving up, it says why. */
      read_some(c);
      set_broken(c, KILN_STATUS(KILN_E_UNAVAILABLE, "sending to %s failed: %s", c->url,
                                strerror(err)));
      return kiln_io_broken(c);
    }
    advance(c, (size_t)w);
  }
  reset_output(c);
  return KILN_OK;
}

/* Msgid of a response [1, msgid, ...] without decoding it (most are not ours to decode
 * twice). */
static bool peek_response(const uint8_t *p, size_t len, uint32_t *out_msgid) {
  if (len < 3 || p[0] != 0x94 || p[1] != 0x01) return false;
  uint8_t b = p[2];
  if (b <= 0x7f) {
    *out_msgid = b;
    return true;
  }
  int n = b == 0xcc ? 1 : b == 0xcd ? 2 : b == 0xce ? 4 : 0;
  if (!n || len < 3 + (size_t)n) return false;
  uint32_t v = 0;
  for (int i = 0; i < n; i++) v = (v << 8) | p[3 + i];
  *out_msgid = v;
  return true;
}

/* The daemon ends a connection it cannot use any more with a notification
 * [2, "error", [{"code": c, "message": m}]] (docs/protocol.md, malformed input). */
static void handle_notification(kiln_client_t *c, const uint8_t *msg, size_t len) {
  kiln_rpc_msg_t m;
  bool has_msgid;
  kiln_status_t s = kiln_rpc_parse(msg, len, &m, &has_msgid);
  if (!s && kiln_rpc_method_is(&m, "error")) {
    uint64_t code = KILN_E_UNAVAILABLE;
    const char *text = "";
    uint32_t tn = 0;
    kiln_status_free(kiln_params_u64(m.params, "code", false, &code));
    kiln_status_free(kiln_params_str(m.params, "message", false, &text, &tn));
    kiln_code_t kc = code > 0 && code < KILN_E_COUNT_ ? (kiln_code_t)code : KILN_E_INTERNAL;
    set_broken(c, KILN_STATUS(kc, "%.*s", (int)tn, text));
  }
  /* Other notifications (none are defined yet, progress later) are ignored. */
  kiln_status_free(s);
  kiln_rpc_msg_deinit(&m);
}

/* Bytes that are not MessagePack-RPC before anything that was: the URL names another
 * service (an HTTP server such as kilnd's own metrics port), which is the user's to fix, not
 * a bug of kiln's (E_UNAVAILABLE: the CLI's exit code 3). */
static kiln_status_t garbled(kiln_client_t *c, kiln_status_t why) {
  if (c->spoke) return why;
  kiln_status_free(why);
  const char *http = c->reader.len >= 5 && !memcmp(c->reader.buf, "HTTP/", 5) ? " (it speaks HTTP)" : "";
  return KILN_STATUS(KILN_E_UNAVAILABLE,
                     "%s is not a kilnd RPC port: what answered there does not speak "
                     "MessagePack-RPC%s; check the URL (kilnd's metrics port is not its RPC port)",
                     c->url, http);
}

static void handle_message(kiln_client_t *c, const uint8_t *msg, size_t len) {
  uint32_t msgid;
  if (!peek_response(msg, len, &msgid)) {
    /* Not the compact encoding every msgpack packer uses for [1, msgid, ...]: decode it to
     * tell a response in a longer encoding from a notification. */
    kiln_rpc_msg_t m;
    bool has_msgid;
    kiln_status_t s = kiln_rpc_parse(msg, len, &m, &has_msgid);
    kiln_rpc_type_t type = m.type;
    msgid = m.msgid;
    kiln_rpc_msg_deinit(&m);
    if (s || type == KILN_RPC_REQUEST) {
      kiln_status_free(s);
      set_broken(c, garbled(c, KILN_STATUS(KILN_E_INTERNAL, "%s sent a message that is neither a "
                                           "response nor a notification", c->url)));
      return;
    }
    if (type == KILN_RPC_NOTIFICATION) {
      c->spoke = true;
      handle_notification(c, msg, len);
      return;
    }
  }
  uint64_t key = kiln_call_key(msgid);
  if (kiln_map_get(&c->calls, key) != KILN_CALL_INFLIGHT) return; /* not ours: ignore */

  kiln_reply_t *r = calloc(1, sizeof(*r));
  if (!r) goto oom;
  r->msgid = msgid;
  r->len = len;
  kiln_reader_t *rd = &c->reader;
  if (len >= STEAL_BYTES && msg == rd->buf && rd->len == 0) {
    /* The reader was sized to exactly this message and holds nothing else (it reset its
     * offsets after returning it): keep its buffer instead of copying a tensor-sized
     * reply. The reader allocates a fresh one on its next kiln_reader_space(). This uses
     * kiln_reader_t's public fields; a kiln_reader_steal() in protocol/frame.h would say it
     * better. */
    r->bytes = rd->buf;
    rd->buf = NULL;
    rd->cap = 0;
    c->advised = NULL; /* the next buffer may land at the same address */
  } else {
    r->bytes = malloc(len);
    if (!r->bytes) goto oom;
    memcpy(r->bytes, msg, len);
  }
  bool has_msgid;
  kiln_status_t s = kiln_rpc_parse(r->bytes, len, &r->msg, &has_msgid);
  if (s) {
    set_broken(c, garbled(c, kiln_status_annotate(s, "%s sent a malformed response", c->url)));
    kiln_rpc_msg_deinit(&r->msg);
    free(r->bytes);
    free(r);
    return;
  }
  c->spoke = true;
  kiln_status_t put = kiln_map_put(&c->calls, key, r); /* replaces an existing key */
  if (put) { /* cannot happen: the key is there; were it not, the reply would be lost */
    set_broken(c, put);
    kiln_rpc_msg_deinit(&r->msg);
    free(r->bytes);
    free(r);
    return;
  }
  c->inflight--;
  r->prev = c->done_tail;
  if (c->done_tail) c->done_tail->next = r;
  else c->done_head = r;
  c->done_tail = r;
  return;
oom:
  if (r) free(r);
  set_broken(c, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory storing a %zu-byte reply",
                            len));
}

/* A reply this large is received into memory fresh from the kernel: each 4 KiB page costs a
 * fault and a clear, about a third of the client's time in a 256 MiB download. Transparent
 * huge pages (where the system allows them, "madvise" mode included) cut the faults 512-fold. */
#define HUGE_BYTES (8u << 20)

static bool rd_is_new_buffer(kiln_client_t *c, const void *p) {
  const uint8_t *base = c->reader.buf;
  if (base == c->advised) return false;
  c->advised = base;
  return base != NULL && (const uint8_t *)p >= base;
}

static void advise_huge(void *p, size_t n) {
  uintptr_t huge = 2u << 20;
  uintptr_t start = ((uintptr_t)p + huge - 1) & ~(huge - 1);
  uintptr_t end = ((uintptr_t)p + n) & ~(huge - 1);
  if (end > start) madvise((void *)start, end - start, MADV_HUGEPAGE); /* a hint: ignore errors */
}

/* Reads what the socket has. Returns how many replies or notifications were handled. */
static size_t read_some(kiln_client_t *c) {
  size_t handled = 0;
  for (int round = 0; round < READS_PER_WAKE && !c->broken; round++) {
    size_t room;
    void *p = kiln_reader_space(&c->reader, &room);
    if (!p) {
      kiln_status_t e = kiln_reader_error(&c->reader);
      set_broken(c, e ? KILN_STATUS(kiln_status_code(e), "reply from %s: %s", c->url,
                                    kiln_status_message(e))
                      : KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for a reply"));
      break;
    }
    if (room >= HUGE_BYTES && rd_is_new_buffer(c, p)) advise_huge(p, room);
    ssize_t n;
    if (c->ssl) {
      kiln_status_t err = NULL;
      n = kiln_tls_recv(c, p, room, &err);
      if (n == -2) break;
      if (n < 0) {
        set_broken(c, err);
        break;
      }
    } else if ((n = recv(c->fd, p, room, 0)) < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      set_broken(c, KILN_STATUS(KILN_E_UNAVAILABLE, "receiving from %s failed: %s", c->url,
                                strerror(errno)));
      break;
    }
    if (n == 0) {
      /* kilnd answers every connection (an error notification when it refuses one); a peer
       * that closes without a word is some other service, such as an HTTP server that gave up
       * waiting for a request head (kilnd's metrics port does after 10 s). */
      set_broken(c, c->spoke ? KILN_STATUS(KILN_E_UNAVAILABLE,
                                           "kilnd closed the connection to %s with %zu request%s unanswered",
                                           c->url, c->inflight, c->inflight == 1 ? "" : "s")
                             : KILN_STATUS(KILN_E_UNAVAILABLE,
                                           "%s closed the connection without answering: it is not a kilnd "
                                           "RPC port (or kilnd stopped just then); check the URL (kilnd's "
                                           "metrics port is not its RPC port)",
                                           c->url));
      break;
    }
    kiln_reader_commit(&c->reader, (size_t)n);
    const uint8_t *msg;
    size_t len;
    kiln_frame_result_t fr;
    while ((fr = kiln_reader_next(&c->reader, &msg, &len)) == KILN_FRAME_MESSAGE) {
      handle_message(c, msg, len);
      handled++;
    }
    if (fr == KILN_FRAME_ERROR) {
      kiln_status_t e = kiln_reader_error(&c->reader);
      set_broken(c, garbled(c, KILN_STATUS(KILN_E_INTERNAL, "unreadable reply from %s: %s", c->url,
                                           kiln_status_message(e))));
    }
    /* The socket is drained (TLS reads stop at record ends: they go on until OpenSSL says
     * there is nothing more). */
    if (!c->ssl && (size_t)n < room) break;
  }
  return handled;
}

/* One poll for readability (and writability when output is queued). Returns E_TIMEOUT when
 * the deadline passes first. */
static kiln_status_t wait_ready(kiln_client_t *c, uint64_t deadline_ns, short *out_revents) {
  if (kiln_tls_has_pending(c)) { /* already here: poll() would not say so */
    *out_revents = POLLIN;
    return KILN_OK;
  }
  for (;;) {
    int ms = -1;
    if (deadline_ns) {
      uint64_t now = kiln_now_ns();
      if (now >= deadline_ns)
        return KILN_STATUS(KILN_E_TIMEOUT, "no reply from %s within %d ms", c->url,
                           c->timeout_ms);
      ms = (int)((deadline_ns - now + 999999) / 1000000);
    }
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    if (c->seg_head < c->nsegs || kiln_tls_unsent(c)) pfd.events |= POLLOUT;
    int rc = poll(&pfd, 1, ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return KILN_STATUS(KILN_E_INTERNAL, "poll: %s", strerror(errno));
    }
    if (rc == 0) continue; /* re-check the deadline */
    *out_revents = pfd.revents;
    return KILN_OK;
  }
}

kiln_status_t kiln_io_flush(kiln_client_t *c, uint64_t deadline_ns) {
  KILN_RETURN_IF_ERROR(kiln_io_write_some(c));
  while (c->seg_head < c->nsegs || kiln_tls_unsent(c)) {
    short ev;
    KILN_RETURN_IF_ERROR(wait_ready(c, deadline_ns, &ev));
    if (ev & (POLLIN | POLLHUP | POLLERR)) read_some(c);
    KILN_RETURN_IF_ERROR(kiln_io_write_some(c));
  }
  return KILN_OK;
}

kiln_status_t kiln_io_receive(kiln_client_t *c, uint64_t deadline_ns) {
  KILN_RETURN_IF_ERROR(kiln_io_write_some(c));
  for (;;) {
    if (c->broken) return kiln_io_broken(c);
    short ev;
    KILN_RETURN_IF_ERROR(wait_ready(c, deadline_ns, &ev));
    size_t handled = 0;
    if (ev & (POLLIN | POLLHUP | POLLERR)) handled = read_some(c);
    if (ev & POLLOUT) KILN_RETURN_IF_ERROR(kiln_io_write_some(c));
    if (handled) return KILN_OK;
  }
}
