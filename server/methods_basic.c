/* hello, ping, devices, stats. */
#include <string.h>

#include "base/log.h"

#include "base/util.h"
#include "server/compile.h"

kiln_status_t kiln_method_hello(kiln_call_t *call) {
  static const char *const fields[] = {"version", "token", "client", "tensors", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "hello", fields));
  uint64_t version = 1;
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "version", false, &version));
  if (version != 1)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "protocol version %llu is not supported; this server speaks version 1",
                       (unsigned long long)version);
  const char *client = NULL, *token = NULL;
  uint32_t client_len = 0, token_len = 0;
  KILN_RETURN_IF_ERROR(kiln_params_str(call->params, "client", false, &client, &client_len));
  KILN_RETURN_IF_ERROR(kiln_params_str(call->params, "token", false, &token, &token_len));
  if (client_len > 128)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "client name is longer than 128 bytes");
  const char *life = NULL;
  uint32_t life_len = 0;
  KILN_RETURN_IF_ERROR(kiln_params_str(call->params, "tensors", false, &life, &life_len));
  bool session = life && life_len == 7 && memcmp(life, "session", 7) == 0;
  if (life && !session && !(life_len == 6 && memcmp(life, "tenant", 6) == 0))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "'tensors' is \"session\" or \"tenant\" (who the new tensors belong to)");
  kiln_server_t *s = call->server;
  kiln_conn_t *c = call->conn;
  /* Without a tokens file every connection is the "default" tenant and a token is
   * accepted and ignored (docs/protocol.md, hello). */
  if (s->tenants.auth_required) {
    uint8_t hash[KILN_HASH_BYTES];
    kiln_tenant_t *t = token ? kiln_tenants_authenticate(&s->tenants, token, token_len, hash) : NULL;
    if (!t) {
      KILN_LOG_INFO("auth_failed", "conn=%llu peer=%s", (unsigned long long)c->id, c->peer);
      return KILN_STATUS(KILN_E_UNAUTHENTICATED,
                         token ? "the token is not valid"
                               : "this server requires a token (set KILN_TOKEN or --token)");
    }
    if (t != c->tenant) {
      KILN_RETURN_IF_ERROR(kiln_quota_check(t, "connections", t->connections, 1,
                                            t->quotas.connections));
      if (c->tenant) c->tenant->connections--;
      c->tenant = t;
      t->connections++;
      KILN_LOG_INFO("auth", "conn=%llu tenant=%s", (unsigned long long)c->id, t->name);
    }
    memcpy(c->token_hash, hash, sizeof(hash));
  }
  /* Only a successful hello changes them: tensors made from now on follow the choice. */
  if (client) snprintf(c->client, sizeof(c->client), "%.*s", (int)client_len, client);
  if (life) c->session_tensors = session;
  /* The tenant's message quota tightens this connection's framing limit. */
  if (c->tenant->quotas.message < c->reader.limits.max_message)
    c->reader.limits.max_message = c->tenant->quotas.message;
  const kiln_config_t *cfg = &s->cfg;
  kiln_fields_t r, lim;
  kiln_fields_begin(&r, call->pk);
  kiln_fields_str(&r, "server", "kilnd " KILN_VERSION);
  kiln_fields_str(&r, "tensors", c->session_tensors ? "session" : "tenant");
  kiln_fields_u64(&r, "version", 1);
  kiln_fields_str(&r, "tenant", c->tenant->name);
  kiln_fields_key(&r, "limits");
  kiln_fields_begin(&lim, call->pk);
  kiln_fields_u64(&lim, "max_message", c->reader.limits.max_message);
  kiln_fields_u64(&lim, "max_depth", cfg->limits.max_depth);
  kiln_fields_u64(&lim, "max_items", cfg->limits.max_items);
  kiln_fields_u64(&lim, "max_str", cfg->limits.max_str);
  kiln_fields_u64(&lim, "max_inflight", cfg->max_inflight);
  kiln_fields_end(&lim);
  kiln_fields_end(&r);
  return KILN_OK;
}

kiln_status_t kiln_method_ping(kiln_call_t *call) {
  static const char *const fields[] = {NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "ping", fields));
  kiln_pack_cstr(call->pk, "pong");
  return KILN_OK;
}

kiln_status_t kiln_method_devices(kiln_call_t *call) {
  static const char *const fields[] = {"absent", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "devices", fields));
  bool absent = false;
  KILN_RETURN_IF_ERROR(kiln_params_bool(call->params, "absent", false, &absent));
  kiln_server_t *s = call->server;
  msgpack_packer *pk = call->pk;
  uint32_t n = 0;
  for (uint32_t i = 0; i < s->num_devices; i++)
    n += kiln_tenant_may_use(call->conn->tenant, s->devices[i].id, s->devices[i].kind);
  msgpack_pack_array(pk, n + (absent ? s->num_absent : 0));
  /* The probe's map, packed once at start, goes out as is (str_body appends raw bytes). */
  for (uint32_t i = 0; i < s->num_devices; i++)
    if (kiln_tenant_may_use(call->conn->tenant, s->devices[i].id, s->devices[i].kind))
      msgpack_pack_str_body(pk, s->devices[i].info.data, s->devices[i].info.len);
  for (uint32_t i = 0; absent && i < s->num_absent; i++) {
    kiln_fields_t m;
    kiln_fields_begin(&m, pk);
    kiln_fields_str(&m, "id", s->absent[i].kind);
    kiln_fields_str(&m, "kind", s->absent[i].kind);
    kiln_fields_bool(&m, "available", false);
    kiln_fields_str(&m, "reason", s->absent[i].reason);
    kiln_fields_end(&m);
  }
  return KILN_OK;
}

/* "devices": what runs on each device now, and what its tensors hold. A tenant that may not
 * see the others (`see_all` false) gets the lease holder's name only when it is its own. */
static void pack_devices(kiln_server_t *s, kiln_fields_t *r, const kiln_tenant_t *me,
                         bool see_all) {
  uint64_t bytes[KILN_MAX_DEVICES] = {0}, count[KILN_MAX_DEVICES] = {0};
  size_t it = 0;
  void *v;
  while (kiln_map_next(&s->tensors, &it, NULL, &v)) {
    kiln_tensor_t *t = v;
    bytes[t->device - s->devices] += t->desc.nbytes;
    count[t->device - s->devices]++;
  }
  kiln_fields_key(r, "devices");
  msgpack_pack_array(r->pk, s->num_devices);
  for (uint32_t i = 0; i < s->num_devices; i++) {
    const kiln_device_entry_t *d = &s->devices[i];
    kiln_fields_t m;
    kiln_fields_begin(&m, r->pk);
    kiln_fields_str(&m, "id", d->id);
    kiln_fields_u64(&m, "capacity", d->capacity);
    kiln_fields_u64(&m, "launches", d->running);
    const char *lease = !d->lease_tenant ? "" : see_all || d->lease_tenant == me ? d->lease_tenant->name
                                                                                : "another tenant";
    kiln_fields_str(&m, "lease", lease);
    kiln_fields_u64(&m, "tensors", count[i]);
    kiln_fields_u64(&m, "memory", bytes[i]);
    kiln_fields_end(&m);
  }
}

kiln_status_t kiln_method_stats(kiln_call_t *call) {
  static const char *const fields[] = {NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "stats", fields));
  kiln_server_t *s = call->server;
  msgpack_packer *pk = call->pk;
  /* With a tokens file, a tenant sees its own workers and usage, and the others only with
   * stats=all in its line (docs/operations.md); server-wide counters are for everyone. */
  const kiln_tenant_t *me = call->conn->tenant;
  bool see_all = !s->tenants.auth_required || (me && me->stats_all);
  kiln_fields_t r, m;
  kiln_fields_begin(&r, pk);
  kiln_fields_str(&r, "server", "kilnd " KILN_VERSION);
  kiln_compile_pack_stats(s, &r);
  kiln_fields_f64(&r, "uptime_s", (double)(kiln_now_ns() - s->start_ns) / 1e9);
  kiln_fields_u64(&r, "connections", s->num_conns);
  kiln_fields_key(&r, "requests");
  kiln_fields_begin(&m, pk);
  for (int i = 0; i < kiln_method_count(s); i++)
    if (s->requests_by_method[i])
      kiln_fields_u64(&m, kiln_method_name(s, i), s->requests_by_method[i]);
  kiln_fields_end(&m);
  kiln_fields_key(&r, "errors");
  kiln_fields_begin(&m, pk);
  for (int i = 1; i < KILN_E_COUNT_; i++)
    if (s->errors_by_code[i])
      kiln_fields_u64(&m, kiln_code_name((kiln_code_t)i), s->errors_by_code[i]);
  kiln_fields_end(&m);
  kiln_fields_u64(&r, "tensors", s->tensors.count);
  kiln_fields_u64(&r, "tensor_bytes", s->tensor_bytes);
  uint64_t graphs, graph_bytes, runs_ok, runs_failed;
  kiln_graphs_counts(s, NULL, &graphs, &graph_bytes, &runs_ok, &runs_failed);
  kiln_fields_u64(&r, "graphs", graphs);
  kiln_fields_u64(&r, "graph_bytes", graph_bytes);
  kiln_fields_key(&r, "workers");
  uint32_t nw = 0;
  for (int pass = 0; pass < 2; pass++) {
    if (pass) msgpack_pack_array(pk, nw);
    for (uint32_t i = 0; i < s->num_devices; i++) {
      size_t it = 0;
      void *v;
      while (kiln_map_next(&s->devices[i].slots, &it, NULL, &v)) {
        kiln_dslot_t *sl = v;
        if (!see_all && sl->tenant != me) continue;
        if (!pass) {
          nw++;
          continue;
        }
        kiln_fields_begin(&m, pk);
        kiln_fields_str(&m, "kind", "device");
        kiln_fields_str(&m, "device", s->devices[i].id);
        kiln_fields_str(&m, "tenant", sl->tenant->name);
        kiln_fields_u64(&m, "pid", (uint64_t)kiln_worker_pid(sl->worker));
        kiln_fields_u64(&m, "restarts", kiln_worker_restarts(sl->worker));
        kiln_fields_u64(&m, "inflight", kiln_worker_inflight(sl->worker));
        kiln_fields_end(&m);
      }
    }
  }
  pack_devices(s, &r, me, see_all);
  kiln_fields_key(&r, "tenants");
  uint32_t nt = 0;
  for (uint32_t i = 0; i < s->tenants.count; i++)
    nt += !s->tenants.all[i]->disabled && (see_all || s->tenants.all[i] == me);
  msgpack_pack_array(pk, nt);
  for (uint32_t i = 0; i < s->tenants.count; i++) {
    kiln_tenant_t *t = s->tenants.all[i];
    if (t->disabled || (!see_all && t != me)) continue;
    kiln_fields_begin(&m, pk);
    kiln_fields_str(&m, "name", t->name);
    kiln_graphs_counts(s, t, &graphs, &graph_bytes, &runs_ok, &runs_failed);
    kiln_fields_u64(&m, "graphs", graphs);
    kiln_fields_u64(&m, "connections", t->connections);
    kiln_fields_u64(&m, "tensors", t->tensors);
    kiln_fields_u64(&m, "memory", t->memory);
    kiln_fields_u64(&m, "launches", t->launches);
    kiln_fields_u64(&m, "compiles", t->compiles);
    kiln_fields_u64(&m, "compiles_queued",
                    kiln_compile_queued(s, t, 0) + kiln_compile_queued(s, t, 1));
    kiln_fields_u64(&m, "modules", t->modules.count);
    kiln_fields_u64(&m, "requests", t->requests);
    kiln_fields_u64(&m, "errors", t->errors);
    kiln_fields_u64(&m, "transfer_bytes", t->transfer_bytes);
    kiln_fields_u64(&m, "transfers_queued", t->transfers_waiting);
    kiln_fields_end(&m);
  }
  kiln_fields_end(&r);
  return KILN_OK;
}
