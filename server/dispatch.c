/* The dispatch table: method name -> handler, request lifetime, replies and counters. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "server/compile.h"
#include "server/metrics.h"

typedef struct method {
  const char *name;
  kiln_handler_fn fn;
} method_t;

static const method_t methods[] = {
    {"hello", kiln_method_hello},       {"ping", kiln_method_ping},
    {"devices", kiln_method_devices},   {"stats", kiln_method_stats},
    {"alloc", kiln_method_alloc},       {"upload", kiln_method_upload},
    {"write", kiln_method_write},       {"read", kiln_method_read},
    {"download", kiln_method_download}, {"free", kiln_method_free},
    {"compile", kiln_method_compile},   {"compile_batch", kiln_method_compile_batch},
    {"source", kiln_method_source},     {"cancel", kiln_method_cancel},
    {"launch", kiln_method_launch},     {"time", kiln_method_time},
    {"lease", kiln_method_lease},       {"release", kiln_method_release},
};

int kiln_method_count(void) { return (int)KILN_ARRAY_SIZE(methods); }
const char *kiln_method_name(int m) {
  return m >= 0 && m < kiln_method_count() ? methods[m].name : "?";
}

static int find_method(const kiln_rpc_msg_t *m) {
  for (int i = 0; i < kiln_method_count(); i++)
    if (kiln_rpc_method_is(m, methods[i].name)) return i;
  return -1;
}

kiln_req_t *kiln_req_create(kiln_conn_t *c, uint32_t msgid, int method) {
  kiln_req_t *r = malloc(sizeof(*r));
  if (!r) return NULL;
  r->conn = c;
  r->msgid = msgid;
  r->method = method;
  r->start_ns = kiln_now_ns();
  c->refs++;
  c->inflight++;
  c->server->total_inflight++;
  return r;
}

static void req_finish(kiln_req_t *r, kiln_code_t code) {
  kiln_conn_t *c = r->conn;
  kiln_server_t *s = c->server;
  kiln_metrics_request_done(r->method, code, kiln_now_ns() - r->start_ns);
  c->inflight--;
  s->total_inflight--;
  if (r->method >= 0) s->requests_by_method[r->method]++;
  s->total_requests++;
  free(r);
  kiln_conn_update_reading(c);
  kiln_conn_release(c);
  kiln_server_maybe_finish_drain(s);
}

void kiln_req_reply(kiln_req_t *r, kiln_buf_t *bytes, const void *extra, size_t extra_len,
                    void (*release)(void *), void *extra_ctx) {
  kiln_conn_send(r->conn, bytes, extra, extra_len, release, extra_ctx);
  req_finish(r, KILN_E_OK);
}

void kiln_req_fail(kiln_req_t *r, kiln_status_t st) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t p;
  kiln_packer_init(&p, &b);
  kiln_code_t code = kiln_status_code(st);
  kiln_rpc_pack_error(&p.pk, r->msgid, code, kiln_status_message(st));
  r->conn->server->errors_by_code[code]++;
  if (r->conn->tenant) r->conn->tenant->errors++;
  if (code == KILN_E_INTERNAL || code == KILN_E_DEVICE_FAULT || code == KILN_E_COMPILER_CRASHED) {
    char q[300];
    KILN_LOG_WARN("request_failed", "method=%s code=%s where=%s message=%s",
                  kiln_method_name(r->method), kiln_code_name(code), kiln_status_where(st),
                  kiln_log_quote(q, sizeof(q), kiln_status_message(st)));
  }
  kiln_status_free(st);
  kiln_conn_send(r->conn, &b, NULL, 0, NULL, NULL);
  req_finish(r, code);
}

void kiln_dispatch(kiln_conn_t *c, const uint8_t *bytes, size_t len) {
  kiln_server_t *s = c->server;
  kiln_rpc_msg_t m;
  bool has_msgid;
  kiln_status_t st = kiln_rpc_parse(bytes, len, &m, &has_msgid);
  if (st) {
    /* The message was whole but not an RPC message: the stream itself is still in sync,
     * but a peer that sends such things is not speaking our protocol. */
    kiln_rpc_msg_deinit(&m);
    kiln_conn_fail(c, has_msgid, m.msgid, st);
    return;
  }
  if (m.type != KILN_RPC_REQUEST) {
    /* Client notifications are ignored; responses from a client make no sense either. */
    kiln_rpc_msg_deinit(&m);
    return;
  }
  int method = find_method(&m);
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
                                 "first"));
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
  kiln_call_t call = {.server = s,
                      .conn = c,
                      .params = m.params,
                      .msgid = m.msgid,
                      .method = method,
                      .pk = &pk.pk,
                      .req = r};
  st = methods[method].fn(&call);
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
