/* Leases: exclusive use of a device by one tenant, for clean measurements.
 *
 * A lease is granted when no other tenant's launch is running on the device; from the
 * moment one is requested, other tenants' new launches and timings wait behind it (or get
 * E_UNAVAILABLE when they asked not to wait). A lease ends with `release`, when the
 * connection that took it closes, or when its time runs out. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "server/server.h"

typedef struct kiln_held {
  struct kiln_held *next;
  kiln_tenant_t *tenant;
  bool is_lease;
  kiln_held_fn go;
  void *ctx;
} kiln_held_t;

typedef struct lease_req {
  kiln_req_t *req;
  kiln_device_entry_t *device;
  uint64_t seconds;
} lease_req_t;

static void pump(kiln_server_t *s, kiln_device_entry_t *d);

static void hold(kiln_device_entry_t *d, kiln_held_t *h) {
  if (d->held_tail) d->held_tail->next = h;
  else d->held_head = h;
  d->held_tail = h;
}

kiln_status_t kiln_device_gate(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                               bool wait, kiln_held_fn go, void *ctx, bool *out_now) {
  *out_now = false;
  bool holder = d->lease_tenant == t;
  if (holder || (!d->lease_tenant && !d->held_head)) {
    d->running++;
    *out_now = true;
    return KILN_OK;
  }
  if (!wait)
    return KILN_STATUS(KILN_E_UNAVAILABLE, "device %s is leased by another tenant; retry later or "
                                           "send \"wait\": true to queue",
                       d->id);
  kiln_held_t *h = calloc(1, sizeof(*h));
  if (!h) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  h->tenant = t;
  h->go = go;
  h->ctx = ctx;
  hold(d, h);
  (void)s;
  return KILN_OK;
}

void kiln_device_run_done(kiln_server_t *s, kiln_device_entry_t *d) {
  d->running--;
  pump(s, d);
}

static void lease_end(kiln_server_t *s, kiln_device_entry_t *d, const char *why) {
  if (!d->lease_tenant) return;
  KILN_LOG_INFO("lease_end", "device=%s tenant=%s why=%s", d->id, d->lease_tenant->name, why);
  d->lease_tenant = NULL;
  d->lease_conn = NULL;
  d->lease_id = 0;
  uv_timer_stop(&d->lease_timer);
  pump(s, d);
}

static void on_lease_timeout(uv_timer_t *t) {
  kiln_device_entry_t *d = t->data;
  lease_end(kiln_server_get(), d, "expired");
}

static void lease_granted(void *ctx, kiln_status_t st) {
  lease_req_t *lr = ctx;
  kiln_req_t *r = lr->req;
  kiln_device_entry_t *d = lr->device;
  kiln_server_t *s = r->conn->server;
  if (!st && r->conn->closing) st = KILN_STATUS(KILN_E_CANCELLED, "the connection closed");
  if (st) {
    kiln_req_fail(r, st);
    free(lr);
    pump(s, d);
    return;
  }
  d->lease_tenant = r->conn->tenant;
  d->lease_conn = r->conn;
  d->lease_id = kiln_random_id();
  uv_timer_start(&d->lease_timer, on_lease_timeout, lr->seconds * 1000, 0);
  KILN_LOG_INFO("lease", "device=%s tenant=%s seconds=%llu", d->id, d->lease_tenant->name,
                (unsigned long long)lr->seconds);
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &b);
  kiln_rpc_pack_result_head(&pk.pk, r->msgid);
  msgpack_pack_map(&pk.pk, 3);
  kiln_pack_kv_u64(&pk.pk, "lease", d->lease_id);
  kiln_pack_kv_str(&pk.pk, "device", d->id);
  kiln_pack_kv_u64(&pk.pk, "seconds", lr->seconds);
  kiln_req_reply(r, &b, NULL, 0, NULL, NULL);
  free(lr);
}

/* Lets waiting work through in order: launches while no other tenant holds the device, a
 * lease once nothing else runs. */
static void pump(kiln_server_t *s, kiln_device_entry_t *d) {
  while (d->held_head) {
    kiln_held_t *h = d->held_head;
    if (h->is_lease) {
      if (d->lease_tenant || d->running > 0) return;
    } else if (d->lease_tenant && d->lease_tenant != h->tenant) {
      return;
    }
    d->held_head = h->next;
    if (!d->held_head) d->held_tail = NULL;
    if (!h->is_lease) d->running++;
    h->go(h->ctx, KILN_OK);
    free(h);
  }
  (void)s;
}

kiln_status_t kiln_method_lease(kiln_call_t *call) {
  static const char *const fields[] = {"device", "wait", "seconds", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "lease", fields));
  const char *id = NULL;
  uint32_t len = 0;
  bool wait = true;
  uint64_t seconds = 60;
  KILN_RETURN_IF_ERROR(kiln_params_str(call->params, "device", false, &id, &len));
  KILN_RETURN_IF_ERROR(kiln_params_bool(call->params, "wait", false, &wait));
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "seconds", false, &seconds));
  if (seconds == 0 || seconds > 3600)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "seconds must be 1 to 3600");
  kiln_device_entry_t *d = kiln_device_find(call->server, id, len);
  if (!d) return KILN_STATUS(KILN_E_NOT_FOUND, "no device '%.*s'", (int)(len < 32 ? len : 32), id);
  kiln_tenant_t *t = call->conn->tenant;
  KILN_RETURN_IF_ERROR(kiln_device_permit(d, t));
  if (d->lease_tenant == t)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "tenant '%s' already holds the lease on %s",
                       t->name, d->id);
  if (!wait && (d->lease_tenant || d->held_head || d->running))
    return KILN_STATUS(KILN_E_UNAVAILABLE, "device %s is busy or leased; retry or wait", d->id);
  lease_req_t *lr = calloc(1, sizeof(*lr));
  kiln_held_t *h = calloc(1, sizeof(*h));
  if (!lr || !h) {
    free(lr);
    free(h);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  lr->req = call->req;
  lr->device = d;
  lr->seconds = seconds;
  h->tenant = t;
  h->is_lease = true;
  h->go = lease_granted;
  h->ctx = lr;
  hold(d, h);
  call->async = true;
  pump(call->server, d);
  return KILN_OK;
}

kiln_status_t kiln_method_release(kiln_call_t *call) {
  static const char *const fields[] = {"lease", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "release", fields));
  uint64_t lease;
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "lease", true, &lease));
  kiln_server_t *s = call->server;
  for (uint32_t i = 0; i < s->num_devices; i++) {
    kiln_device_entry_t *d = &s->devices[i];
    if (d->lease_id == lease && d->lease_tenant == call->conn->tenant) {
      lease_end(s, d, "released");
      msgpack_pack_nil(call->pk);
      return KILN_OK;
    }
  }
  return KILN_STATUS(KILN_E_NOT_FOUND, "no lease %llu held by this tenant", (unsigned long long)lease);
}

void kiln_leases_conn_closed(kiln_server_t *s, kiln_conn_t *c) {
  for (uint32_t i = 0; i < s->num_devices; i++)
    if (s->devices[i].lease_conn == c) lease_end(s, &s->devices[i], "connection closed");
}
