/* The remote artifact tier: a Redis shared by a fleet of kilnds, behind each kilnd's memory
 * and disk cache (docs/cache.md "The remote tier"). Keys are build keys (docs/cache.md), so
 * a build made on one host is found by every other host with the same compiler identity.
 *
 * Every entry carries a Poly1305 tag under a one-time key derived from the fleet secret (a
 * file every kilnd of the fleet holds, never sent anywhere) and the entry's random nonce: an
 * entry of an older format (KILNRMT1) or one that is short, long, misnamed, oversized, of
 * the wrong Redis type or fails its MAC is deleted and the build runs again. A build wanted
 * by several hosts at once runs once: the first takes a lock key with a TTL (SET NX PX,
 * renewed while it compiles); the others poll for the entry until the lock goes away
 * (then they take it, or find the entry), or until their wait is over (then they compile).
 * When Redis is down, slow or restarted, a look-up answers "compile it" at once and a put
 * is queued (a bounded queue: KILN_REMOTE_REQUEUE_ENTRIES builds, KILN_REMOTE_REQUEUE_BYTES
 * of them, the oldest dropped first) and sent when the connection is up again, paced (at
 * most 4 MiB unanswered; one whose connection goes before its answer is queued again, once): nothing
 * waits on Redis beyond the command deadline, and builds made during an outage still reach
 * the other hosts.
 *
 * Threads: the loop thread that created it. The server calls it through four verbs: get
 * (on a local miss), put (after a compile), abandon (after a failed one) and stats. */
#ifndef KILN_FLEET_REMOTE_H
#define KILN_FLEET_REMOTE_H

#include <msgpack.h>
#include <stdio.h>

#include "server/fleet/redis.h"

#define KILN_REMOTE_KEY_BYTES 32
#define KILN_REMOTE_HEADER_BYTES 80
#define KILN_REMOTE_DEFAULT_MAX_BYTES (64ull << 20)
#define KILN_REMOTE_REQUEUE_ENTRIES 256
#define KILN_REMOTE_REQUEUE_BYTES (64ull << 20)

typedef struct kiln_remote kiln_remote_t;

typedef struct kiln_remote_config {
  kiln_redis_config_t redis;
  const char *secret_file; /* required: at least 32 bytes, private to kilnd's user */
  uint64_t max_bytes;      /* the largest artifact shared (0: 64 MiB) */
  uint32_t lock_ttl_ms;    /* the build lock's TTL, renewed every third of it (0: 10000) */
  uint32_t wait_ms;        /* the longest wait for another host's build (0: 60000) */
  uint32_t poll_ms;        /* how often a waiting host looks (0: 25) */
} kiln_remote_config_t;

typedef struct kiln_remote_stats {
  kiln_redis_stats_t redis;
  uint64_t hits, misses; /* look-ups answered from Redis / not (the build runs here) */
  uint64_t skipped;      /* look-ups and puts not tried: Redis was down */
  uint64_t requeued;     /* ... of those puts, queued for when Redis is back */
  uint64_t requeue_dropped; /* queued puts dropped for the queue's bound, or after their
                               connection went twice while they were in flight */
  uint64_t requeue_sent; /* queued puts sent when Redis came back */
  uint64_t corrupt;      /* entries refused (MAC, size, key, type, format) and deleted */
  uint64_t old_format;   /* ... of those, entries of an older format (KILNRMT1) */
  uint64_t bytes_read, bytes_written; /* artifact bytes of hits and of puts */
  uint64_t puts, put_errors, too_large;
  uint64_t lock_waits;   /* look-ups that waited for another host's build */
  uint64_t wait_hits;    /* ... and got it */
  uint64_t wait_timeouts;/* ... and gave up waiting (the build ran here too) */
} kiln_remote_stats_t;

/* The artifact's bytes, or NULL: build it here. On a hit, block is the malloc'd buffer
 * holding them (Redis's reply), now the callee's: it frees it with free() or hands it on (a
 * cache entry adopts it, server/cache.h kiln_cache_entry_adopt); bytes are valid while it is. */
typedef void (*kiln_remote_get_cb)(void *arg, const uint8_t *bytes, size_t len, void *block);

KILN_MUST_USE kiln_status_t kiln_remote_create(uv_loop_t *loop, const kiln_remote_config_t *cfg,
                                               kiln_remote_t **out);
/* Pending look-ups are dropped without their callbacks (kilnd is exiting). */
void kiln_remote_destroy(kiln_remote_t *rc);

/* Looks the key up in Redis: false when Redis is down (build it now; cb is never called),
 * true when cb will be called later, from the loop, exactly once. */
bool kiln_remote_get(kiln_remote_t *rc, const uint8_t key[KILN_REMOTE_KEY_BYTES],
                     kiln_remote_get_cb cb, void *arg);

/* Stores a build made here (when it fits) and lets go of this host's lock on its key. */
void kiln_remote_put(kiln_remote_t *rc, const uint8_t key[KILN_REMOTE_KEY_BYTES],
                     const uint8_t *bytes, size_t len);

/* The build failed here: lets go of this host's lock, so a waiting host builds it. */
void kiln_remote_abandon(kiln_remote_t *rc, const uint8_t key[KILN_REMOTE_KEY_BYTES]);

void kiln_remote_stats(const kiln_remote_t *rc, kiln_remote_stats_t *out);
/* The stats as Prometheus text (docs/operations.md "Metrics": kiln_cache_remote_*). */
void kiln_remote_stats_render(const kiln_remote_stats_t *s, FILE *f);
/* The stats as the `stats` method's "cache_remote" map (docs/protocol.md); pk is a
 * kiln_packer_t's (protocol/rpc.h kiln_fields_t). */
void kiln_remote_pack_stats(const kiln_remote_t *rc, msgpack_packer *pk);
const char *kiln_remote_url(const kiln_remote_t *rc);

/* The entry format, for tests: seals `len` bytes under key into out (KILN_REMOTE_HEADER_BYTES
 * + len bytes; false when the MAC cannot be computed: nothing to store), and checks one (NULL
 * with *why set when it fails, including when the MAC cannot be computed; else the payload). */
bool kiln_remote_seal(const uint8_t *secret, size_t secret_len, const uint8_t key[KILN_REMOTE_KEY_BYTES],
                      const uint8_t *bytes, size_t len, uint8_t *out);
const uint8_t *kiln_remote_open(const uint8_t *secret, size_t secret_len,
                                const uint8_t key[KILN_REMOTE_KEY_BYTES], const uint8_t *entry,
                                size_t entry_len, uint64_t max_bytes, size_t *out_len, const char **why);

#endif
