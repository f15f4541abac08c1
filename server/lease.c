/* Leases: exclusive use of a device by one tenant, for clean measurements.
 *
 * A lease is granted when no other tenant's launch is running on the device; from the
 * moment one is requested, other tenants' new launches and timings wait behind it (or get
 * E_UNAVAILABLE when they asked not to wait), each at most its own timeout. A lease ends
 * with `release`, when the connection that took it closes, when its time runs out (at most
 * the tenant's `lease` quota), or when the tenant loses the device on a reload.
 *
 * Renewal: a lease cannot be extended, and a tenant that asks again right after its lease
 * ended, while others wanted the device, waits as long as that lease lasted before its next
 * one is granted; meanwhile its pending request holds nobody back. So between leases the
 * other tenants get the device for at least as long as the leaseholder had it. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "server/server.h"

typedef struct lease_req {
  kiln_req_t *req;
  kiln_device_entry_t *device;
  uint64_t seconds;
} lease_req_t;

static void lease_end(kiln_server_t *s, kiln_device_entry_t *d, const char *why) {
  if (!d->lease_tenant) return;
  KILN_LOG_INFO("lease_end", "device=%s tenant=%s why=%s", d->id, d->lease_tenant->name, why);
  uint64_t now = kiln_now_ns();
  d->last_lease_tenant = d->lease_tenant;
  d->last_lease_end_ns = now;
  d->last_lease_ns = now - d->lease_start_ns;
  /* lease_contended carries over: others who waited during the lease count. */
  d->lease_tenant = NULL;
  d->lease_conn = NULL;
  d->lease_id = 0;
  uv_timer_stop(&d->lease_timer);
  kiln_device_pump(s, d);
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
    kiln_device_pump(s, d);
    return;
  }
  d->lease_tenant = r->conn->tenant;
  d->lease_conn = r->conn;
  d->lease_id = kiln_random_id();
  d->lease_start_ns = kiln_now_ns();
  d->lease_contended = false;
  uv_timer_start(&d->lease_timer, on_lease_timeout, lr->seconds * 1000, 0);
  KILN_LOG_INFO("lease", "device=%s tenant=%s seconds=%llu", d->id, d->lease_tenant->name,
                (unsigned long long)lr->seconds);
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &b);
  kiln_rpc_pack_result_head(&pk.pk, r->msgid);
  kiln_fields_t m;
  kiln_fields_begin(&m, &pk.pk);
  kiln_fields_u64(&m, "lease", d->lease_id);
  kiln_fields_str(&m, "device", d->id);
  kiln_fields_u64(&m, "seconds", lr->seconds);
  kiln_fields_end(&m);
  kiln_req_reply(r, &b, NULL, 0, NULL, NULL);
  free(lr);
}

/* The longest lease the tenant may take, in seconds. */
static uint64_t lease_quota(const kiln_tenant_t *t) {
  return KILN_MIN(t->quotas.lease, (uint64_t)KILN_LEASE_MAX_S);
}

kiln_status_t kiln_method_lease(kiln_call_t *call) {
  static const char *const fields[] = {"device", "wait", "seconds", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "lease", fields));
  const char *id = NULL;
  uint32_t len = 0;
  bool wait = true;
  kiln_tenant_t *t = call->conn->tenant;
  uint64_t quota = lease_quota(t);
  uint64_t seconds = KILN_MIN((uint64_t)KILN_LEASE_DEFAULT_S, quota);
  KILN_RETURN_IF_ERROR(kiln_params_str(call->params, "device", false, &id, &len));
  KILN_RETURN_IF_ERROR(kiln_params_bool(call->params, "wait", false, &wait));
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "seconds", false, &seconds));
  if (quota == 0)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                       "tenant '%s' may not lease devices (its lease quota is 0)", t->name);
  if (seconds == 0 || seconds > KILN_LEASE_MAX_S)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "seconds must be 1 to %d", KILN_LEASE_MAX_S);
  if (seconds > quota)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                       "tenant '%s' may lease a device for at most %llu s (its lease quota); ask "
                       "for fewer seconds",
                       t->name, (unsigned long long)quota);
  kiln_device_entry_t *d = kiln_device_find(call->server, id, len);
  if (!d) return KILN_STATUS(KILN_E_NOT_FOUND, "no device '%.*s'", (int)(len < 32 ? len : 32), id);
  KILN_RETURN_IF_ERROR(kiln_device_permit(d, t));
  if (d->lease_tenant == t)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "tenant '%s' already holds the lease on %s; a lease cannot be extended",
                       t->name, d->id);
  kiln_lease_note_use(d, t);
  /* Renewal right after a lease that others waited for: the same wait again, first. */
  uint64_t now = kiln_now_ns(), not_before = 0;
  if (d->last_lease_tenant == t && d->lease_contended &&
      now < d->last_lease_end_ns + d->last_lease_ns)
    not_before = d->last_lease_end_ns + d->last_lease_ns;
  if (!wait && not_before)
    return KILN_STATUS(KILN_E_UNAVAILABLE,
                       "tenant '%s' leased %s until %.1f s ago while others waited; its next "
                       "lease there comes %.1f s from now",
                       t->name, d->id, (double)(now - d->last_lease_end_ns) / 1e9,
                       (double)(not_before - now) / 1e9);
  if (!wait && (d->lease_tenant || kiln_device_lease_waits(d, t)))
    return KILN_STATUS(KILN_E_UNAVAILABLE, "device %s is busy or leased; retry or wait", d->id);
  lease_req_t *lr = calloc(1, sizeof(*lr));
  if (!lr) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  lr->req = call->req;
  lr->device = d;
  lr->seconds = seconds;
  kiln_status_t st =
      kiln_device_hold_lease(call->server, d, t, call->conn, not_before, lease_granted, lr);
  if (st) {
    free(lr);
    return st;
  }
  call->async = true;
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

void kiln_devices_conn_closed(kiln_server_t *s, kiln_conn_t *c) {
  kiln_status_t why = KILN_STATUS(KILN_E_CANCELLED, "the connection closed");
  for (uint32_t i = 0; i < s->num_devices; i++) {
    kiln_device_entry_t *d = &s->devices[i];
    if (d->lease_conn == c) lease_end(s, d, "connection closed");
    kiln_device_drop_held(s, d, c, NULL, why);
  }
  kiln_status_free(why);
}

void kiln_device_revoke(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t) {
  if (d->lease_tenant == t) lease_end(s, d, "revoked");
  kiln_status_t why = KILN_STATUS(KILN_E_PERMISSION, "tenant '%s' may no longer use %s (tokens file "
                                                     "reloaded)", t->name, d->id);
  kiln_device_drop_held(s, d, NULL, t, why);
  kiln_dslot_t *sl = kiln_map_get(&d->slots, t->index);
  if (sl && kiln_worker_pid(sl->worker) > 0) {
    KILN_LOG_INFO("device_revoked", "device=%s tenant=%s", d->id, t->name);
    kiln_worker_kill(sl->worker, KILN_E_PERMISSION, kiln_status_message(why));
  }
  kiln_status_free(why);
}

void kiln_tenants_revoke(kiln_server_t *s) {
  for (kiln_conn_t *c = s->conns; c;) {
    kiln_conn_t *n = c->next;
    if (c->tenant && s->tenants.auth_required &&
        (c->tenant->disabled || !kiln_tenant_has_token(c->tenant, c->token_hash))) {
      KILN_LOG_INFO("conn_revoked", "conn=%llu tenant=%s why=%s", (unsigned long long)c->id,
                    c->tenant->name, c->tenant->disabled ? "tenant_removed" : "token_removed");
      kiln_conn_close(c);
    }
    c = n;
  }
  for (uint32_t i = 0; i < s->tenants.count; i++) {
    kiln_tenant_t *t = s->tenants.all[i];
    for (uint32_t j = 0; j < s->num_devices; j++) {
      kiln_device_entry_t *d = &s->devices[j];
      if (t->disabled || !kiln_tenant_may_use(t, d->id, d->kind)) kiln_device_revoke(s, d, t);
    }
  }
}
