/* kilnd's record in the fleet registry (fleet_host.h; docs/operations.md "A fleet"). What a
 * client needs to place itself: how to reach the host, what it runs (version, compiler
 * identity: hosts with another identity share no builds), its devices and their load. No
 * tenant names, tokens or secrets. */
#include "server/fleet_host.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "server/compile.h"
#include "server/fleet/registry.h"

static kiln_registry_t *registry;
static char hostname[256];
static uint64_t started_unix;

static uint64_t unix_now(void) { return (uint64_t)time(NULL); }

static void pack_device(msgpack_packer *pk, const kiln_device_entry_t *d) {
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_str(&m, "id", d->id);
  kiln_fields_str(&m, "kind", d->kind);
  kiln_fields_str(&m, "arch", d->arch);
  kiln_fields_u64(&m, "capacity", d->capacity); /* bytes tensors may hold here */
  kiln_fields_u64(&m, "used", d->used);
  kiln_fields_u64(&m, "launches", d->running); /* launches and timings in flight */
  kiln_fields_bool(&m, "leased", d->lease_tenant != NULL);
  kiln_fields_key(&m, "info"); /* the `devices` method's map, as packed at start */
  msgpack_pack_str_body(pk, d->info.data, d->info.len);
  kiln_fields_end(&m);
}

static void pack_record(void *arg, msgpack_packer *pk) {
  kiln_server_t *s = arg;
  kiln_compile_metrics_t cm;
  kiln_compile_metrics(s, &cm);
  uint32_t tenants = 0;
  for (uint32_t i = 0; i < s->tenants.count; i++) tenants += s->tenants.all[i]->connections > 0;
  kiln_fields_t m, c;
  kiln_fields_begin(&m, pk);
  kiln_fields_u64(&m, "v", 1);
  kiln_fields_str(&m, "url", s->cfg.advertise);
  kiln_fields_str(&m, "host", hostname);
  kiln_fields_str(&m, "version", KILN_VERSION);
  kiln_fields_str(&m, "identity", kiln_compile_identity(s));
  kiln_fields_u64(&m, "started", started_unix);
  kiln_fields_u64(&m, "time", unix_now());
  kiln_fields_u64(&m, "ttl_ms", (uint64_t)(s->cfg.fleet_ttl_s * 1000));
  kiln_fields_u64(&m, "connections", s->num_conns);
  kiln_fields_u64(&m, "tenants", tenants); /* tenants connected now */
  kiln_fields_key(&m, "compile");
  kiln_fields_begin(&c, pk);
  kiln_fields_u64(&c, "workers", cm.workers);
  kiln_fields_u64(&c, "busy", cm.busy);
  kiln_fields_u64(&c, "queued", cm.queued[0] + cm.queued[1]);
  kiln_fields_end(&c);
  kiln_fields_key(&m, "devices");
  msgpack_pack_array(pk, s->num_devices);
  for (uint32_t i = 0; i < s->num_devices; i++) pack_device(pk, &s->devices[i]);
  kiln_fields_end(&m);
}

kiln_status_t kiln_fleet_host_start(kiln_server_t *s) {
  const kiln_config_t *c = &s->cfg;
  if (!c->fleet[0]) return KILN_OK;
  if (gethostname(hostname, sizeof(hostname) - 1) != 0) snprintf(hostname, sizeof(hostname), "?");
  started_unix = unix_now();
  kiln_registry_config_t rc = {
      .redis = {.url = c->fleet, .auth_file = c->fleet_auth[0] ? c->fleet_auth : c->cache_remote_auth,
                .what = "fleet", .timeout_ms = (uint32_t)(c->cache_remote_timeout_s * 1000)},
      .advertise = c->advertise,
      .ttl_ms = (uint32_t)(c->fleet_ttl_s * 1000),
      .key_file = c->fleet_key};
  KILN_RETURN_IF_ERROR(kiln_registry_create(s->loop, &rc, pack_record, s, &registry));
  char key[80];
  kiln_registry_signer(registry, key);
  KILN_LOG_INFO("fleet", "url=%s advertise=%s ttl_s=%.1f signed_by=%s", c->fleet, c->advertise, c->fleet_ttl_s, key);
  return KILN_OK;
}

void kiln_fleet_host_stop(kiln_server_t *s) {
  (void)s;
  kiln_registry_destroy(registry);
  registry = NULL;
}
