/* The operator's methods on the artifact cache: `cache_list` and `cache_prune`
 * (docs/protocol.md; docs/cache.md "Listing and pruning"). Loop thread. */
#ifndef KILN_SERVER_CACHE_ADMIN_H
#define KILN_SERVER_CACHE_ADMIN_H

#include "server/server.h"

/* At start, after the cache is open: reads DIR/identity, the compiler identity that last ran
 * on this cache and since when; when the identity is another (or the file is missing or
 * unreadable) it starts a new era now and rewrites the file. An entry not used since the
 * era began is `stale`. A failed write is logged, not fatal (the era then lasts this run). */
KILN_MUST_USE kiln_status_t kiln_cache_admin_init(kiln_server_t *s);

KILN_MUST_USE kiln_status_t kiln_method_cache_list(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_cache_prune(kiln_call_t *call);

#endif
