/* Dispatch: a message to its method's handler (the table is methods.c's, given by main.c), a
 * request's lifetime, replies and counters. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "server/metrics.h"

int kiln_method_count(const kiln_server_t *s) { return s->num_methods; }
const char *kiln_method_name(const kiln_server_t *s, int m) {
  return m >= 0 && m < s->num_methods ? s->methods[m].name : "?";
}

static int find_method(const kiln_server_t *s, const kiln_rpc_msg_t *m) {
  for (int i = 0; i < s->num_methods; i++)
    if (kiln_rpc_method_is(m, s->methods[i].name)) return i;
  return -1;
}

kiln_req_t *kiln_req_create(kiln_conn_t *c, uint32_t msgid, int method) {
  kiln_req_t *r = malloc(sizeof(*r));
  if (!r) return NULL;
  r->conn = c;
  r->msgid = msgid;
  r->method = method;
  r->start_ns = kiln_now_ns();
  r->answered = false;
  r->prev = NULL;
  r->next = c->reqs;
  if (c->reqs) c->reqs->prev = r;
  c->reqs = r;
  c->refs++;
  c->inflight++;
  c->server->total_inflight++;
  return r;
}

/* The request is answered: counted, and off the connection's list. */
static void req_done(kiln_req_t *r, kiln_code_t code) {
  kiln_conn_t *c = r->conn;
  kiln_server_t *s = c->server;
  kiln_metrics_request_done(r->method, code, kiln_now_ns() - r->start_ns);
  c->inflight--;
  s->total_inflight--;
  if (r->method >= 0) s->requests_by_method[r->method]++;
  s->total_requests++;
  if (r->prev) r->prev->next = r->next;
  else c->reqs = r->next;
  if (r->next) r->next->prev = r->prev;
  r->answered = true;
}

static void req_finish(kiln_req_t *r, kiln_code_t code) {
  kiln_conn_t *c = r->conn;
  kiln_server_t *s = c->server;
  req_done(r, code);
  free(r);
  kiln_conn_update_reading(c);
  kiln_conn_release(c);
  kiln_hooks_fire(s, KILN_EVENT_SETTLED, NULL);
}

/* A request cancelled by shutdown is answered already: its handler's answer is dropped. */
static void req_drop(kiln_req_t *r) {
  kiln_conn_t *c = r->conn;
  free(r);
  kiln_conn_release(c);
}

void kiln_req_reply(kiln_req_t *r, kiln_buf_t *bytes, const void *extra, size_t extra_len,
                    void (*release)(void *), void *extra_ctx) {
  if (r->answered) {
    kiln_buf_deinit(bytes);
    if (release) release(extra_ctx);
    req_drop(r);
    return;
  }
  kiln_conn_send(r->conn, bytes, extra, extra_len, release, extra_ctx);
  req_finish(r, KILN_E_OK);
}

static void send_error(kiln_conn_t *c, uint32_t msgid, kiln_code_t code, const char *message) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t p;
  kiln_packer_init(&p, &b);
  kiln_rpc_pack_error(&p.pk, msgid, code, message);
  c->server->errors_by_code[code]++;
  if (c->tenant) c->tenant->errors++;
  kiln_conn_send(c, &b, NULL, 0, NULL, NULL);
}

void kiln_reqs_cancel(kiln_conn_t *c, kiln_status_t st) {
  kiln_code_t code = kiln_status_code(st);
  while (c->reqs) {
    kiln_req_t *r = c->reqs;
    send_error(c, r->msgid, code, kiln_status_message(st));
    req_done(r, code);
  }
  kiln_status_free(st);
}

void kiln_req_fail(kiln_req_t *r, kiln_status_t st) {
  if (r->answered) {
    kiln_status_free(st);
    req_drop(r);
    return;
  }
  kiln_code_t code = kiln_status_code(st);
  if (code == KILN_E_INTERNAL || code == KILN_E_DEVICE_FAULT || code == KILN_E_COMPILER_CRASHED) {
    char q[300];
    KILN_LOG_WARN("request_failed", "method=%s code=%s tenant=%s conn=%llu where=%s message=%s",
                  kiln_method_name(r->conn->server, r->method), kiln_code_name(code),
                  r->conn->tenant ? r->conn->tenant->name : "-", (unsigned long long)r->conn->id,
                  kiln_status_where(st), kiln_log_quote(q, sizeof(q), kiln_status_message(st)));
  }
  send_error(r->conn, r->msgid, code, kiln_status_message(st));
  kiln_status_free(st);
  req_finish(r, code);
}

/* After hello, successful or not: the connection's message limit follows its state (before
 * hello on a tokens server: KILN_ANON_MAX_MESSAGE), a failed token counts against the peer,
 * and a connection that authenticated leaves the anonymous ones. */
static void after_hello(kiln_conn_t *c, kiln_status_t st) {
  kiln_server_t *s = c->server;
  if (st && kiln_status_code(st) == KILN_E_UNAUTHENTICATED) kiln_peer_hello_failed(s, c);
  if (c->tenant && c->anonymous) {
    kiln_peer_leave_anonymous(s, c);
    KILN_LOG_DEBUG("conn_authenticated", "conn=%llu peer=%s", (unsigned long long)c->id, c->peer);
  }
  uint64_t lim = s->cfg.limits.max_message;
  if (!c->tenant) lim = KILN_ANON_MAX_MESSAGE;
  else lim = KILN_MIN(lim, c->tenant->quotas.message);
  c->reader.limits.max_message = lim;
}

void kiln_dispatch(kiln_conn_t *c, const uint8_t *bytes, size_t len) {
  kiln_server_t *s = c->server;
  kiln_rpc_msg_t m;
  bool has_msgid;
  kiln_status_t st = kiln_rpc_parse(bytes, len, &m, &has_msgid);
  if (st && !has_msgid) {
    /* The message was whole but none of the three shapes: the stream itself is still in
     * sync, but a peer that sends such things is not speaking our protocol. */
    kiln_rpc_msg_deinit(&m);
    kiln_conn_fail(c, false, 0, st);
    return;
  }
  if (st) {
    /* A well-framed request with a bad method or params: its error, and the connection
     * stays (docs/protocol.md, malformed input). */
    kiln_req_t *r = kiln_req_create(c, m.msgid, -1);
    if (r) kiln_req_fail(r, st);
    else kiln_conn_fail(c, true, m.msgid, st);
    kiln_rpc_msg_deinit(&m);
    return;
  }
  if (m.type != KILN_RPC_REQUEST) {
    /* Notifications get no answer, so none is refused: any method, any params (neovim-style
     * clients announce themselves with one). A response from a client answers nothing. */
    char name[72] = "", q[160];
    if (m.method) snprintf(name, sizeof(name), "%.*s", (int)KILN_MIN(m.method_len, 64u), m.method);
    KILN_LOG_DEBUG(m.type == KILN_RPC_NOTIFICATION ? "notification_ignored" : "response_ignored",
                   "conn=%llu method=%s odd=%d", (unsigned long long)c->id,
                   kiln_log_quote(q, sizeof(q), name), (int)m.odd);
    kiln_rpc_msg_deinit(&m);
    return;
  }
  int method = find_method(s, &m);
  kiln_req_t *r = kiln_req_create(c, m.msgid, method);
  if (!r) {
    kiln_rpc_msg_deinit(&m);
    kiln_conn_fail(c, true, m.msgid, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory"));
    return;
  }
  if (method < 0) {
    int n = (int)(m.method_len < 64 ? m.method_len : 64);
    kiln_req_fail(r, KILN_STATUS(KILN_E_NO_METHOD, "no method '%.*s'; see docs/protocol.md", n,
                                 m.method));
    kiln_rpc_msg_deinit(&m);
    return;
  }
  if (!c->tenant && method != 0 && method != 1) { /* hello, ping */
    kiln_req_fail(r, KILN_STATUS(KILN_E_UNAUTHENTICATED,
                                 "this server requires a token: call hello with {\"token\": ...} "
                                 "first (set KILN_TOKEN or --token)"));
    kiln_rpc_msg_deinit(&m);
    return;
  }
  if (c->tenant) c->tenant->requests++;
  if (s->draining) {
    kiln_req_fail(r, KILN_STATUS(KILN_E_UNAVAILABLE, "the server is shutting down"));
    kiln_rpc_msg_deinit(&m);
    return;
  }
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &out);
  kiln_rpc_pack_result_head(&pk.pk, m.msgid);
  bool hello = method == 0;
  if (hello) {
    uint32_t retry = 0;
    if (s->tenants.auth_required && !kiln_peer_hello_allowed(s, c, &retry)) {
      kiln_buf_deinit(&out);
      kiln_req_fail(r, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                                   "too many failed hello attempts from %s; retry in %u s",
                                   c->peer, retry));
      kiln_rpc_msg_deinit(&m);
      return;
    }
    /* hello tightens the configured limit to the tenant's message quota. */
    c->reader.limits.max_message = s->cfg.limits.max_message;
  }
  kiln_call_t call = {.server = s,
                      .conn = c,
                      .params = m.params,
                      .msgid = m.msgid,
                      .method = method,
                      .pk = &pk.pk,
                      .req = r};
  st = s->methods[method].fn(&call);
  if (hello) after_hello(c, st);
  if (!st && !call.async) st = kiln_packer_status(&pk);
  if (call.async && !st) {
    kiln_buf_deinit(&out);
  } else if (st) {
    kiln_buf_deinit(&out);
    kiln_req_fail(r, st);
  } else {
    kiln_req_reply(r, &out, NULL, 0, NULL, NULL);
  }
  kiln_rpc_msg_deinit(&m);
}
