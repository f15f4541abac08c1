/* kiln_client_t: connection lifetime, request queueing and reply collection. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "internal.h"

/* Above this many packed-but-unsent bytes a submit sends before returning, so a caller that
 * submits without ever waiting does not grow the queue without bound. */
#define MAX_QUEUED_PACKED (1u << 20)
/* A submit tries a non-blocking send once this much is queued (small requests wait for the
 * next wait/flush, so that a burst of them leaves in one writev). */
#define EAGER_SEND_BYTES (64u << 10)

kiln_status_t kiln_client_create(const char *url, kiln_client_t **out_client) {
  return kiln_client_create_with(url, NULL, out_client);
}

/* Without a URL and without $KILN_URL: the first of the places a daemon is looked for that
 * answers (kiln_client_search_list) and runs as root or this user
 * (kiln_url_check_owner), else an error saying why each did not. */
static kiln_status_t connect_searching(kiln_client_t *c, const kiln_client_options_t *opts,
                                       char *url, size_t cap) {
  char list[1024], why[2048] = "";
  size_t wn = 0;
  kiln_client_search_list(list, sizeof(list));
  for (char *save, *u = strtok_r(list, " ", &save); u; u = strtok_r(NULL, " ", &save)) {
    kiln_status_t s = kiln_url_connect(c, u, opts);
    if (!s && (s = kiln_url_check_owner(c->fd, u))) {
      close(c->fd);
      c->fd = -1;
    }
    if (!s) {
      snprintf(url, cap, "%s", u);
      return KILN_OK;
    }
    if (wn < sizeof(why))
      wn += (size_t)snprintf(why + wn, sizeof(why) - wn, "%s%s", wn ? "; " : "", kiln_status_message(s));
    kiln_status_free(s);
  }
  return KILN_STATUS(KILN_E_UNAVAILABLE, "no kilnd found: %s; start kilnd or set KILN_URL", why);
}

kiln_status_t kiln_client_create_with(const char *url, const kiln_client_options_t *opts,
                                      kiln_client_t **out_client) {
  char found[512];
  const char *env = getenv("KILN_URL");
  if (!url && env && *env) url = env;
  if (url && strlen(url) >= sizeof(((kiln_client_t *)0)->url))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "URL of %zu bytes is too long", strlen(url));
  kiln_client_t *c = calloc(1, sizeof(*c));
  if (!c) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for a client");
  c->fd = -1;
  kiln_status_t s = url ? kiln_url_connect(c, url, opts) : connect_searching(c, opts, found, sizeof(found));
  if (s) {
    free(c);
    return s;
  }
  if (!url) url = found;
  strcpy(c->url, url);
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  /* Replies may carry long strings (assembly, compile logs): only the message bound
   * applies to them. */
  lim.max_str = (uint32_t)KILN_MIN(lim.max_message, UINT32_MAX);
  kiln_reader_init(&c->reader, &lim, 0);
  /* One message carries a tensor and its envelope; keep 1 MiB for the envelope. */
  c->chunk_bytes = lim.max_message - (1u << 20);
  kiln_buf_init(&c->out);
  kiln_packer_init(&c->packer, &c->out);
  kiln_map_init(&c->calls);
  c->next_msgid = 1;
  *out_client = c;
  return KILN_OK;
}

void kiln_client_destroy(kiln_client_t *c) {
  if (!c) return;
  kiln_tls_close(c);
  close(c->fd);
  for (kiln_reply_t *r = c->done_head, *next; r; r = next) {
    next = r->next;
    r->prev = r->next = NULL;
    kiln_reply_free(r);
  }
  kiln_map_deinit(&c->calls);
  kiln_reader_deinit(&c->reader);
  kiln_buf_deinit(&c->out);
  free(c->segs);
  kiln_status_free(c->broken);
  free(c);
}

void kiln_client_set_timeout(kiln_client_t *c, int ms) { c->timeout_ms = ms > 0 ? ms : 0; }
const char *kiln_client_url(const kiln_client_t *c) { return c->url; }
int kiln_client_fd(const kiln_client_t *c) { return c->fd; }
size_t kiln_client_inflight(const kiln_client_t *c) { return c->inflight; }

/* --- Building requests ------------------------------------------------------------------ */

static bool add_seg(kiln_client_t *c, const uint8_t *ext, size_t off, size_t len) {
  if (len == 0) return true;
  if (!ext && c->nsegs > c->seg_head) {
    kiln_seg_t *last = &c->segs[c->nsegs - 1];
    if (!last->ext && last->off + last->len == off) { /* a burst of requests: one segment */
      last->len += len;
      return true;
    }
  }
  if (c->nsegs == c->segs_cap) {
    size_t cap = c->segs_cap ? c->segs_cap * 2 : 16;
    kiln_seg_t *p = realloc(c->segs, cap * sizeof(*p));
    if (!p) return false;
    c->segs = p;
    c->segs_cap = cap;
  }
  c->segs[c->nsegs++] = (kiln_seg_t){.ext = ext, .off = off, .len = len};
  return true;
}

/* Turns packed bytes since the last mark into a segment. */
static bool close_packed(kiln_client_t *c) {
  size_t n = c->out.len - c->mark;
  if (!add_seg(c, NULL, c->mark, n)) return false;
  c->queued += n;
  c->queued_packed += n;
  c->mark = c->out.len;
  return true;
}

msgpack_packer *kiln_client_request_begin(kiln_client_t *c, const char *method,
                                          uint32_t *out_msgid) {
  /* A msgid still in flight after 2^32 requests is skipped, not reused. */
  uint32_t id = c->next_msgid++;
  while (kiln_map_get(&c->calls, kiln_call_key(id))) id = c->next_msgid++;
  c->building = true;
  c->building_msgid = id;
  c->undo_out_len = c->out.len;
  c->undo_nsegs = c->nsegs;
  c->undo_last_len = c->nsegs > c->seg_head ? c->segs[c->nsegs - 1].len : 0;
  c->undo_mark = c->mark;
  c->undo_queued = c->queued;
  c->undo_queued_packed = c->queued_packed;
  c->packer.failed = false;
  kiln_rpc_pack_request_head(&c->packer.pk, id, method);
  *out_msgid = id;
  return &c->packer.pk;
}

void kiln_client_attach(kiln_client_t *c, const void *data, size_t n) {
  if (n == 0) return;
  if (!close_packed(c) || !add_seg(c, data, 0, n)) {
    c->packer.failed = true;
    return;
  }
  c->queued += n;
}

void kiln_client_request_abort(kiln_client_t *c) {
  if (!c->building) return;
  c->out.len = c->undo_out_len;
  c->nsegs = c->undo_nsegs;
  if (c->nsegs > c->seg_head) c->segs[c->nsegs - 1].len = c->undo_last_len;
  c->mark = c->undo_mark;
  c->queued = c->undo_queued;
  c->queued_packed = c->undo_queued_packed;
  c->building = false;
}

kiln_status_t kiln_client_request_end(kiln_client_t *c) {
  if (!c->building)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "kiln_client_request_end without a begin");
  if (c->broken) {
    kiln_client_request_abort(c);
    return kiln_io_broken(c);
  }
  kiln_status_t s = kiln_packer_status(&c->packer);
  if (!s && !close_packed(c))
    s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory queueing a request");
  if (!s) s = kiln_map_put(&c->calls, kiln_call_key(c->building_msgid), KILN_CALL_INFLIGHT);
  if (s) {
    kiln_client_request_abort(c);
    return s;
  }
  c->building = false;
  c->inflight++;
  /* The request is queued: a failure to send it now is the connection's, recorded in
   * c->broken and reported by the wait for its reply. */
  if (c->queued_packed > MAX_QUEUED_PACKED) kiln_status_free(kiln_io_flush(c, kiln_io_deadline(c)));
  else if (c->queued >= EAGER_SEND_BYTES) kiln_status_free(kiln_io_write_some(c));
  return KILN_OK;
}

/* --- Collecting replies ----------------------------------------------------------------- */

kiln_status_t kiln_client_flush(kiln_client_t *c) { return kiln_io_flush(c, kiln_io_deadline(c)); }

kiln_status_t kiln_client_wait(kiln_client_t *c, uint32_t msgid, kiln_reply_t **out_reply) {
  uint64_t key = kiln_call_key(msgid);
  void *v = kiln_map_get(&c->calls, key);
  if (!v) return KILN_STATUS(KILN_E_NOT_FOUND, "request %u is not in flight", msgid);
  uint64_t deadline = kiln_io_deadline(c);
  while (v == KILN_CALL_INFLIGHT) {
    kiln_status_t s = kiln_io_receive(c, deadline);
    v = kiln_map_get(&c->calls, key);
    /* The reply may have been read just before the connection ended: it wins. */
    if (s && v == KILN_CALL_INFLIGHT) return s;
    kiln_status_free(s);
  }
  kiln_map_remove(&c->calls, key);
  kiln_reply_unlink(c, v);
  *out_reply = v;
  return KILN_OK;
}

kiln_status_t kiln_client_wait_any(kiln_client_t *c, kiln_reply_t **out_reply) {
  uint64_t deadline = kiln_io_deadline(c);
  while (!c->done_head) {
    if (c->inflight == 0) {
      *out_reply = NULL;
      return KILN_OK;
    }
    kiln_status_t s = kiln_io_receive(c, deadline);
    if (s && !c->done_head) return s;
    kiln_status_free(s);
  }
  kiln_reply_t *r = c->done_head;
  kiln_map_remove(&c->calls, kiln_call_key(r->msgid));
  kiln_reply_unlink(c, r);
  *out_reply = r;
  return KILN_OK;
}

kiln_status_t kiln_client_wait_all(kiln_client_t *c) {
  uint64_t deadline = kiln_io_deadline(c);
  while (c->inflight > 0) KILN_RETURN_IF_ERROR(kiln_io_receive(c, deadline));
  return KILN_OK;
}
