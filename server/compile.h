/* Compiling in kilnd: cache keys, the compile queue and its workers, single-flight, and the
 * module table that `source`, `launch` and `time` use. Loop thread only. */
#ifndef KILN_SERVER_COMPILE_H
#define KILN_SERVER_COMPILE_H

#include "base/util.h"
#include "protocol/artifact.h"
#include "server/cache.h"
#include "server/server.h"

/* A compiled module known to kilnd: its encoded artifact (what workers load) and the
 * decoded kernel table (for replies and argument checks). */
typedef struct kiln_module {
  uint8_t key[KILN_HASH_BYTES];
  char hex[2 * KILN_HASH_BYTES + 1];
  uint8_t *bytes; /* encoded artifact, owned */
  size_t len;
  kiln_artifact_t art; /* decoded */
  uint64_t last_use_ns;
} kiln_module_t;

kiln_status_t kiln_compile_init(kiln_server_t *s);
void kiln_compile_shutdown(kiln_server_t *s);

/* The module with id `hex` (a compile's `module`), from memory or the artifact cache;
 * E_NOT_FOUND otherwise, and for a tenant (when not NULL) that never compiled it. Borrowed: valid until the next return to the loop. */
kiln_status_t kiln_module_find(kiln_server_t *s, const kiln_tenant_t *tenant, const char *hex,
                               uint32_t len, kiln_module_t **out);

void kiln_compile_pack_stats(kiln_server_t *s, msgpack_packer *pk); /* "compile", "cache" */
/* The numbers behind GET /metrics (server/metrics.c). Borrowed pointers stay valid until the
 * next return to the loop. */
typedef struct kiln_compile_metrics {
  uint32_t workers, busy;
  uint64_t queued[2]; /* interactive, batch */
  uint64_t compiles, errors, crashes, timeouts, hits, joins, cancelled;
  double seconds_total; /* of successful builds */
  const double *bucket_le; /* nbuckets upper bounds (seconds) */
  uint32_t nbuckets;
  const uint64_t *buckets; /* nbuckets + 1 counts, not cumulative; the last is +Inf */
  uint64_t modules;
  kiln_cache_stats_t cache;
} kiln_compile_metrics_t;
void kiln_compile_metrics(kiln_server_t *s, kiln_compile_metrics_t *out);
/* Compile jobs tenant t has waiting at a priority (0 interactive, 1 batch). */
uint64_t kiln_compile_queued(kiln_server_t *s, const kiln_tenant_t *t, int prio);
uint32_t kiln_compile_stats_fields(void);

kiln_status_t kiln_method_compile(kiln_call_t *call);
kiln_status_t kiln_method_compile_batch(kiln_call_t *call);
kiln_status_t kiln_method_source(kiln_call_t *call);
kiln_status_t kiln_method_cancel(kiln_call_t *call);
kiln_status_t kiln_method_launch(kiln_call_t *call);
kiln_status_t kiln_method_time(kiln_call_t *call);

#endif
