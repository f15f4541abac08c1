/* The device gate: the queue of requests that may not go to a device worker yet.
 *
 * Four kinds wait here, in arrival order per device:
 *   - launches and timings of tenants that another tenant's lease (standing or about to be
 *     granted) keeps off the device, each at most its timeout;
 *   - lease requests, granted once nothing else runs (lease.c); one in its tenant's
 *     cool-down is passed over and holds nobody back;
 *   - tensor operations of a tenant that has something of its own held here, so that a
 *     tenant's requests on one device reach its worker in the order sent;
 *   - reads and downloads waiting for their tenant's transfer budget (memory for replies
 *     on their way to the client), which bounds what kilnd holds for slow readers.
 * A request that cannot go blocks only its own tenant's later ones, except a lease about to
 * be granted, which holds back everything behind it. */
#include <stdlib.h>

#include "base/util.h"
#include "server/server.h"

typedef enum { HELD_LAUNCH, HELD_LEASE, HELD_FOLLOW, HELD_TRANSFER } held_kind_t;

typedef struct kiln_held {
  struct kiln_held *next;
  held_kind_t kind;
  kiln_tenant_t *tenant;
  kiln_conn_t *conn;      /* the requester's connection: its requests go when it closes */
  uint64_t deadline_ns;   /* a launch's wait limit; 0: none */
  uint64_t not_before_ns; /* a lease in its tenant's cool-down; 0: none */
  uint64_t bytes;         /* a transfer's reply bytes */
  kiln_held_fn go;
  void *ctx;
} kiln_held_t;

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

/* Appends a request to the queue; NULL when out of memory. */
static kiln_held_t *queue(kiln_device_entry_t *d, held_kind_t kind, kiln_tenant_t *t,
                          kiln_conn_t *c, kiln_held_fn go, void *ctx) {
  kiln_held_t *h = calloc(1, sizeof(*h));
  if (!h) return NULL;
  h->kind = kind;
  h->tenant = t;
  h->conn = c;
  h->go = go;
  h->ctx = ctx;
  hold(d, h);
  if (kind == HELD_TRANSFER) t->transfers_waiting++;
  return h;
}

#define NO_MEMORY KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory")

static bool lease_ready(const kiln_held_t *h, uint64_t now) {
  return h->kind == HELD_LEASE && h->not_before_ns <= now;
}

static bool has_held(const kiln_device_entry_t *d, const kiln_tenant_t *t) {
  for (const kiln_held_t *h = d->held_head; h; h = h->next)
    if (h->kind != HELD_LEASE && h->tenant == t) return true;
  return false;
}

/* Whether a lease keeps tenant t's launches off the device now: another tenant's standing
 * lease, or a lease request ready to be granted (its own included: it waits for the device
 * to be idle). */
static bool lease_blocks(const kiln_device_entry_t *d, const kiln_tenant_t *t, uint64_t now) {
  if (d->lease_tenant) return d->lease_tenant != t;
  for (const kiln_held_t *h = d->held_head; h; h = h->next)
    if (lease_ready(h, now)) return true;
  return false;
}

/* Here and not in lease.c: the gate sees every use, and lease.c, which reads the note when
 * it grants the tenant's next lease, sits on top of the gate. */
void kiln_lease_note_use(kiln_device_entry_t *d, const kiln_tenant_t *t) {
  if (d->last_lease_tenant && d->last_lease_tenant != t) d->lease_contended = true;
  if (d->lease_tenant && d->lease_tenant != t) d->lease_contended = true;
}

kiln_status_t kiln_device_gate(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                               kiln_conn_t *c, bool wait, uint64_t wait_ms, kiln_held_fn go,
                               void *ctx, bool *out_now) {
  *out_now = false;
  uint64_t now = kiln_now_ns();
  kiln_lease_note_use(d, t);
  bool leased = lease_blocks(d, t, now);
  if (!leased && !has_held(d, t)) {
    d->running++;
    *out_now = true;
    return KILN_OK;
  }
  if (leased && !wait)
    return KILN_STATUS(KILN_E_UNAVAILABLE, "device %s is leased by another tenant; retry later or "
                                           "send \"wait\": true to queue",
                       d->id);
  kiln_held_t *h = queue(d, HELD_LAUNCH, t, c, go, ctx);
  if (!h) return NO_MEMORY;
  h->deadline_ns = wait_ms ? now + wait_ms * 1000000ull : 0;
  kiln_device_pump(s, d); /* arms the timer for the deadline */
  return KILN_OK;
}

kiln_status_t kiln_device_follow(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                                 kiln_conn_t *c, kiln_held_fn go, void *ctx, bool *out_queued) {
  *out_queued = has_held(d, t);
  if (*out_queued && !queue(d, HELD_FOLLOW, t, c, go, ctx)) return NO_MEMORY;
  (void)s;
  return KILN_OK;
}

static bool transfer_fits(const kiln_tenant_t *t, uint64_t bytes) {
  return t->transfer_bytes == 0 || t->transfer_bytes + bytes <= KILN_TRANSFER_BUDGET;
}

kiln_status_t kiln_device_transfer(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                                   kiln_conn_t *c, uint64_t bytes, kiln_held_fn go, void *ctx,
                                   bool *out_queued) {
  *out_queued = has_held(d, t) || !transfer_fits(t, bytes);
  if (!*out_queued) return KILN_OK;
  kiln_held_t *h = queue(d, HELD_TRANSFER, t, c, go, ctx);
  if (!h) return NO_MEMORY;
  h->bytes = bytes;
  (void)s;
  return KILN_OK;
}

void kiln_tenant_transfer_done(kiln_server_t *s, kiln_tenant_t *t, uint64_t bytes) {
  t->transfer_bytes -= bytes;
  if (!t->transfers_waiting) return;
  for (uint32_t i = 0; i < s->num_devices; i++) kiln_device_pump(s, &s->devices[i]);
}

kiln_status_t kiln_device_hold_lease(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                                     kiln_conn_t *c, uint64_t not_before_ns, kiln_held_fn go,
                                     void *ctx) {
  kiln_held_t *h = queue(d, HELD_LEASE, t, c, go, ctx);
  if (!h) return NO_MEMORY;
  h->not_before_ns = not_before_ns;
  kiln_device_pump(s, d);
  return KILN_OK;
}

bool kiln_device_lease_waits(const kiln_device_entry_t *d, const kiln_tenant_t *t) {
  return lease_blocks(d, t, kiln_now_ns()) || d->running > 0;
}

void kiln_device_run_done(kiln_server_t *s, kiln_device_entry_t *d) {
  d->running--;
  kiln_device_pump(s, d);
}

/* Lets a held request go with `st` (after running++ for a launch, as its go expects). */
static void release_held(kiln_device_entry_t *d, kiln_held_t *h, kiln_status_t st) {
  if (h->kind == HELD_LAUNCH) d->running++;
  if (h->kind == HELD_TRANSFER) h->tenant->transfers_waiting--;
  h->go(h->ctx, st);
  free(h);
}

static void on_held_timer(uv_timer_t *t) { kiln_device_pump(kiln_server_get(), t->data); }

#define MAX_BLOCKED 64

/* The first held request that may go now, walking in order: a lease ready to be granted is
 * a barrier when it cannot be; any other request that cannot go blocks its own tenant's
 * later ones (more than MAX_BLOCKED tenants blocked at once: a barrier too). */
static kiln_held_t *next_ready(kiln_device_entry_t *d, uint64_t now, kiln_held_t **out_prev) {
  const kiln_tenant_t *blocked[MAX_BLOCKED];
  uint32_t nblocked = 0;
  kiln_held_t *prev = NULL;
  for (kiln_held_t *h = d->held_head; h; prev = h, h = h->next) {
    if (h->kind == HELD_LEASE) {
      if (!lease_ready(h, now)) continue;
      if (d->lease_tenant || d->running > 0) return NULL;
      *out_prev = prev;
      return h;
    }
    bool is_blocked = false;
    for (uint32_t i = 0; i < nblocked && !is_blocked; i++) is_blocked = blocked[i] == h->tenant;
    if (!is_blocked) {
      bool ok = h->kind == HELD_FOLLOW ||
                (h->kind == HELD_LAUNCH && !(d->lease_tenant && d->lease_tenant != h->tenant)) ||
                (h->kind == HELD_TRANSFER && transfer_fits(h->tenant, h->bytes));
      if (ok) {
        *out_prev = prev;
        return h;
      }
      if (nblocked == MAX_BLOCKED) return NULL;
      blocked[nblocked++] = h->tenant;
    }
  }
  return NULL;
}

void kiln_device_pump(kiln_server_t *s, kiln_device_entry_t *d) {
  for (;;) {
    uint64_t now = kiln_now_ns();
    kiln_held_t *prev = NULL, *h;
    for (h = d->held_head; h; prev = h, h = h->next)
      if (h->kind == HELD_LAUNCH && h->deadline_ns && h->deadline_ns <= now) break;
    if (h) {
      unlink_held(d, prev, h);
      release_held(d, h,
                   KILN_STATUS(KILN_E_TIMEOUT,
                               "waited past its timeout for another tenant's lease on %s; the "
                               "kernel did not run (retry, or send a larger \"timeout_ms\")",
                               d->id));
      continue; /* every go may have changed the queue: start over */
    }
    h = next_ready(d, now, &prev);
    if (!h) break;
    unlink_held(d, prev, h);
    release_held(d, h, KILN_OK);
  }
  /* The timer: the earliest held deadline or cool-down end still ahead. */
  uint64_t now = kiln_now_ns(), next = 0;
  for (kiln_held_t *x = d->held_head; x; x = x->next) {
    uint64_t at = x->kind == HELD_LEASE ? x->not_before_ns : x->deadline_ns;
    if (at > now && (!next || at < next)) next = at;
  }
  if (!next) {
    uv_timer_stop(&d->held_timer);
    return;
  }
  d->held_timer.data = d;
  uv_timer_start(&d->held_timer, on_held_timer, (next - now + 999999) / 1000000, 0);
  (void)s;
}

void kiln_device_drop_held(kiln_server_t *s, kiln_device_entry_t *d, const kiln_conn_t *c,
                           const kiln_tenant_t *t, kiln_status_t why) {
  for (;;) {
    kiln_held_t *prev = NULL, *h = d->held_head;
    while (h && !((c && h->conn == c) || (t && h->tenant == t))) {
      prev = h;
      h = h->next;
    }
    if (!h) break;
    unlink_held(d, prev, h);
    release_held(d, h, KILN_STATUS(kiln_status_code(why), "%s", kiln_status_message(why)));
  }
  kiln_device_pump(s, d);
}
