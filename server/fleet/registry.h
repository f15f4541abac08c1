/* The fleet registry: each kilnd with --fleet publishes what it serves under
 * "kiln:host:<advertised URL>" (a MessagePack map the server packs: devices, load, version,
 * compiler identity) with a TTL, refreshed by a heartbeat, and lists its URL in the set
 * "kiln:hosts"; a kilnd that dies disappears when its key expires, and every heartbeat drops
 * set members whose key is gone. Clients (kiln.fleet) read; nothing here is a secret. With a
 * key file the record is signed (record.h), so clients holding a trusted-keys file can tell
 * this host's records from a Redis writer's.
 *
 * Threads: the loop thread that created it. */
#ifndef KILN_FLEET_REGISTRY_H
#define KILN_FLEET_REGISTRY_H

#include <msgpack.h>

#include "server/fleet/record.h"
#include "server/fleet/redis.h"

typedef struct kiln_registry kiln_registry_t;

/* Packs this host's record: exactly one MessagePack value, into a kiln_packer_t's packer
 * (so kiln_fields_t may count its maps). */
typedef void (*kiln_registry_pack_cb)(void *arg, msgpack_packer *pk);

typedef struct kiln_registry_config {
  kiln_redis_config_t redis;
  const char *advertise; /* tcp:HOST:PORT, tls:HOST:PORT or unix:PATH: how clients reach us */
  uint32_t ttl_ms;       /* the record's TTL (0: 15000); a heartbeat every third of it */
  const char *key_file;  /* NULL, or --fleet-key: records are signed with it (record.h) */
} kiln_registry_config_t;

typedef struct kiln_registry_stats {
  kiln_redis_stats_t redis;
  uint64_t heartbeats, heartbeat_errors;
} kiln_registry_stats_t;

/* E_INVALID_ARGUMENT for an advertised URL that is not tcp:, tls: or unix: (or over 255
 * bytes), as kiln_record_key_read for the key file, else as kiln_redis_create. Redis being down is no error: heartbeats resume when it
 * is back. */
KILN_MUST_USE kiln_status_t kiln_registry_create(uv_loop_t *loop, const kiln_registry_config_t *cfg,
                                                 kiln_registry_pack_cb pack, void *arg,
                                                 kiln_registry_t **out);
void kiln_registry_destroy(kiln_registry_t *reg);
/* The public key records are signed with, "ed25519:<64 hex>", or "none" (out: 73 bytes). */
void kiln_registry_signer(const kiln_registry_t *reg, char *out);
void kiln_registry_stats(const kiln_registry_t *reg, kiln_registry_stats_t *out);

#endif
