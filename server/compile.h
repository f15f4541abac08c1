/* Compiling in kilnd: cache keys, the compile queue and its workers, single-flight, and
 * `source`. Compiled modules go into the module table (server/modules.h). Loop thread only. */
#ifndef KILN_SERVER_COMPILE_H
#define KILN_SERVER_COMPILE_H

#include "base/util.h"
#include "protocol/artifact.h"
#include "server/cache.h"
#include "server/fleet/remote.h"
#include "server/server.h"

KILN_MUST_USE kiln_status_t kiln_compile_init(kiln_server_t *s);
void kiln_compile_shutdown(kiln_server_t *s);
/* Tenants' quotas changed (SIGHUP): batch items waiting for `compiles` room go if they now
 * have it, or answer E_RESOURCE_EXHAUSTED where the quota became 0. */
void kiln_compile_quotas_changed(kiln_server_t *s);

/* The `stats` fields "compile" and "cache", added to the caller's map. */
void kiln_compile_pack_stats(kiln_server_t *s, kiln_fields_t *r);
/* The numbers behind GET /metrics (server/collectors.c). Borrowed pointers stay valid until the
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
  bool remote_on; /* --cache-remote (server/fleet/remote.h) */
  kiln_remote_stats_t remote;
} kiln_compile_metrics_t;
void kiln_compile_metrics(kiln_server_t *s, kiln_compile_metrics_t *out);
/* Compile jobs tenant t has waiting at a priority (0 interactive, 1 batch). */
uint64_t kiln_compile_queued(kiln_server_t *s, const kiln_tenant_t *t, int prio);

/* One build for kilnd itself (a graph's program, server/graph.c): `item` is a compile_batch
 * item; `done` runs exactly once, maybe before this returns (a cache hit), with the module
 * (borrowed until the loop runs again) or the error (owned by the callee). An error returned
 * here means `done` is never called. */
typedef void (*kiln_compile_done_fn)(void *ctx, const struct kiln_module *m, bool cached, double ms,
                                     kiln_status_t st);
KILN_MUST_USE kiln_status_t kiln_compile_submit(kiln_server_t *s, kiln_tenant_t *t, const msgpack_object *item,
                                  const char *what, kiln_compile_done_fn done, void *ctx);
/* The compiler identity module keys hash (docs/cache.md). */
const char *kiln_compile_identity(kiln_server_t *s);

KILN_MUST_USE kiln_status_t kiln_method_compile(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_compile_batch(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_source(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_module(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_cancel(kiln_call_t *call);

#endif
