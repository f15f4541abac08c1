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

typedef struct kiln_held {
  struct kiln_held *next;
  kiln_tenant_t *tenant;
  kiln_conn_t *conn;      /* the requester's connection: its requests go when it closes */
  bool is_lease;
  bool follows;           /* a tensor operation queued behind its tenant's held launches */
  uint64_t deadline_ns;   /* a launch's wait limit; 0: none */
  uint64_t not_before_ns; /* a lease in its tenant's cool-down; 0: none */
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

static void unlink_held(kiln_device_entry_t *d, kiln_held_t *prev, kiln_held_t *h) {
  if (prev) prev->next = h->next;
  else d->held_head = h->next;
  if (d->held_tail == h) d->held_tail = prev;
  h->next = NULL;
}

/* Whether a held lease request may be granted now: it is not cooling down. */
static bool lease_ready(const kiln_held_t *h, uint64_t now) { return h->not_before_ns <= now; }

/* A launch of tenant t waits while another tenant holds the lease or has one ready to be
 * granted (a lease request in its cool-down holds nobody back). */
static bool must_wait(const kiln_device_entry_t *d, const kiln_tenant_t *t, uint64_t now) {
  if (d->lease_tenant) return d->lease_tenant != t;
  for (const kiln_held_t *h = d->held_head; h; h = h->next)
    if (h->is_lease ? lease_ready(h, now) : !h->follows && h->tenant != t) return true;
  return false;
}

/* Another tenant than the last leaseholder wants the device: the holder's next lease, if
 * asked for soon, cools down first. */
static void note_other(kiln_device_entry_t *d, const kiln_tenant_t *t) {
  if (d->last_lease_tenant && d->last_lease_tenant != t) d->lease_contended = true;
  if (d->lease_tenant && d->lease_tenant != t) d->lease_contended = true;
}

kiln_status_t kiln_device_gate(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                               kiln_conn_t *c, bool wait, uint64_t wait_ms, kiln_held_fn go,
                               void *ctx, bool *out_now) {
  *out_now = false;
  uint64_t now = kiln_now_ns();
  note_other(d, t);
  if (!must_wait(d, t, now)) {
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
  h->conn = c;
  h->go = go;
  h->ctx = ctx;
  h->deadline_ns = wait_ms ? now + wait_ms * 1000000ull : 0;
  hold(d, h);
  pump(s, d); /* arms the timer for the deadline */
  return KILN_OK;
}

kiln_status_t kiln_device_follow(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                                 kiln_conn_t *c, kiln_held_fn go, void *ctx, bool *out_queued) {
  *out_queued = false;
  bool behind = false;
  for (const kiln_held_t *h = d->held_head; h && !behind; h = h->next)
    behind = !h->is_lease && h->tenant == t;
  if (!behind) return KILN_OK;
  kiln_held_t *h = calloc(1, sizeof(*h));
  if (!h) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  h->tenant = t;
  h->conn = c;
  h->follows = true;
  h->go = go;
  h->ctx = ctx;
  hold(d, h);
  *out_queued = true;
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
  uint64_t now = kiln_now_ns();
  d->last_lease_tenant = d->lease_tenant;
  d->last_lease_end_ns = now;
  d->last_lease_ns = now - d->lease_start_ns;
  /* lease_contended carries over: others who waited during the lease count. */
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
  msgpack_pack_map(&pk.pk, 3);
  kiln_pack_kv_u64(&pk.pk, "lease", d->lease_id);
  kiln_pack_kv_str(&pk.pk, "device", d->id);
  kiln_pack_kv_u64(&pk.pk, "seconds", lr->seconds);
  kiln_req_reply(r, &b, NULL, 0, NULL, NULL);
  free(lr);
}

/* Lets held requests go with `st` (after running++ for launches, as go expects). */
static void release_held(kiln_held_t *h, kiln_device_entry_t *d, kiln_status_t st) {
  if (!h->is_lease && !h->follows) d->running++;
  h->go(h->ctx, st);
  free(h);
}

static void on_held_timer(uv_timer_t *t) { pump(kiln_server_get(), t->data); }

/* Lets waiting work through in order: launches while no other tenant holds the device, a
 * lease once nothing else runs (a lease in its cool-down is passed over, and holds nobody
 * back). Launches past their wait limit fail with E_TIMEOUT. Then arms the timer for the
 * next deadline or cool-down end. Every `go` may re-enter here, so each step starts over
 * from the head. */
static void pump(kiln_server_t *s, kiln_device_entry_t *d) {
  for (;;) {
    uint64_t now = kiln_now_ns();
    kiln_held_t *prev = NULL, *h = d->held_head, *expired_prev = NULL, *expired = NULL;
    for (kiln_held_t *p = NULL, *x = d->held_head; x; p = x, x = x->next)
      if (!x->is_lease && x->deadline_ns && x->deadline_ns <= now) {
        expired_prev = p;
        expired = x;
        break;
      }
    if (expired) {
      unlink_held(d, expired_prev, expired);
      release_held(expired, d,
                   KILN_STATUS(KILN_E_TIMEOUT,
                               "waited past its timeout for another tenant's lease on %s; the "
                               "kernel did not run (retry, or send a larger \"timeout_ms\")",
                               d->id));
      continue;
    }
    while (h && h->is_lease && !lease_ready(h, now)) {
      prev = h;
      h = h->next;
    }
    if (!h) break;
    if (h->is_lease) {
      if (d->lease_tenant || d->running > 0) break;
    } else if (!h->follows && d->lease_tenant && d->lease_tenant != h->tenant) {
      break;
    }
    unlink_held(d, prev, h);
    release_held(h, d, KILN_OK);
  }
  /* The timer: the earliest held deadline or cool-down end still ahead. */
  uint64_t now = kiln_now_ns(), next = 0;
  for (kiln_held_t *x = d->held_head; x; x = x->next) {
    uint64_t at = x->is_lease ? x->not_before_ns : x->deadline_ns;
    if (at > now && (!next || at < next)) next = at;
  }
  if (!next) {
    uv_timer_stop(&d->held_timer);
    return;
  }
  uv_timer_start(&d->held_timer, on_held_timer, (next - now + 999999) / 1000000, 0);
  (void)s;
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
  note_other(d, t);
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
  if (!wait && (d->lease_tenant || must_wait(d, t, now) || d->running))
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
  h->conn = call->conn;
  h->is_lease = true;
  h->not_before_ns = not_before;
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

/* Drops the held requests for which `match` holds, failing each with a copy of `why`. */
static void drop_held(kiln_server_t *s, kiln_device_entry_t *d, const kiln_conn_t *c,
                      const kiln_tenant_t *t, const kiln_status_t why) {
  for (;;) {
    kiln_held_t *prev = NULL, *h = d->held_head;
    while (h && !((c && h->conn == c) || (t && h->tenant == t))) {
      prev = h;
      h = h->next;
    }
    if (!h) break;
    unlink_held(d, prev, h);
    release_held(h, d, KILN_STATUS(kiln_status_code(why), "%s", kiln_status_message(why)));
  }
  pump(s, d);
}

void kiln_devices_conn_closed(kiln_server_t *s, kiln_conn_t *c) {
  kiln_status_t why = KILN_STATUS(KILN_E_CANCELLED, "the connection closed");
  for (uint32_t i = 0; i < s->num_devices; i++) {
    kiln_device_entry_t *d = &s->devices[i];
    if (d->lease_conn == c) lease_end(s, d, "connection closed");
    drop_held(s, d, c, NULL, why);
  }
  kiln_status_free(why);
  kiln_launches_conn_closed(s, c);
}

void kiln_device_revoke(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t) {
  if (d->lease_tenant == t) lease_end(s, d, "revoked");
  kiln_status_t why = KILN_STATUS(KILN_E_PERMISSION, "tenant '%s' may no longer use %s (tokens file "
                                                     "reloaded)", t->name, d->id);
  drop_held(s, d, NULL, t, why);
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
