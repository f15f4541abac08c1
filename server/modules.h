/* The module table: the compiled modules kilnd knows, held in the artifact cache's entries
 * (server/cache.h). A module is its entry's user data: the entry holds the encoded artifact
 * (what device workers load), the module the decoded kernel table (for compile replies and
 * launch checks; code, IR and assembly are not kept decoded). So the artifact's bytes are
 * held once, there is one LRU (the cache's memory LRU: an evicted module comes back from the
 * disk store) and one key hash. A reference to a module is a reference to its entry: valid
 * across returns to the loop until released. Loop thread, except release. */
#ifndef KILN_SERVER_MODULES_H
#define KILN_SERVER_MODULES_H

#include "base/util.h"
#include "protocol/artifact.h"
#include "server/cache.h"
#include "server/server.h"

typedef struct kiln_module {
  uint8_t key[KILN_HASH_BYTES];
  char hex[2 * KILN_HASH_BYTES + 1];
  kiln_cache_entry_t *entry;
  const uint8_t *bytes; /* the entry's: the encoded artifact */
  size_t len;
  kiln_artifact_t art;  /* its kernel table (KILN_ARTIFACT_TABLE) */
  uint64_t table_bytes; /* what the table holds beyond the entry, for stats */
} kiln_module_t;

/* The module of entry `e`, whose reference the caller hands over: the table is decoded the
 * first time and kept with the entry. On failure (bytes that do not decode) the caller
 * keeps its reference. */
KILN_MUST_USE kiln_status_t kiln_module_of(kiln_cache_entry_t *e, kiln_module_t **out);

/* The module with this key, from the cache (memory, then disk); NULL when it is unknown, or
 * its bytes do not decode (they are dropped from the cache). A new reference. */
kiln_module_t *kiln_module_get(kiln_cache_t *cache, const uint8_t key[KILN_HASH_BYTES]);

/* The module with id `hex` (a compile's `module`) for `tenant`: E_INVALID_ARGUMENT for a
 * malformed id, E_NOT_FOUND when unknown or, for a tenant (when not NULL), when it never
 * compiled it. A new reference. */
KILN_MUST_USE kiln_status_t kiln_module_find(kiln_server_t *s, kiln_tenant_t *tenant, const char *hex,
                               uint32_t len, kiln_module_t **out);

/* Grants (grants.c): tenant t may use the module with this key from now on, across restarts
 * with the same cache (the grant is appended to DIR/grants/TENANT.modules when new). */
void kiln_grant_module(kiln_server_t *s, kiln_tenant_t *t, const uint8_t key[KILN_HASH_BYTES]);
/* Reads the tenant's grants file into its `modules` map, once per run. */
void kiln_grants_load(kiln_server_t *s, kiln_tenant_t *t);

kiln_module_t *kiln_module_retain(kiln_module_t *m);
void kiln_module_release(kiln_module_t *m); /* NULL is fine; any thread */

/* Modules alive and the bytes their tables hold (beyond the cache's entries). */
void kiln_modules_stats(uint64_t *out_count, uint64_t *out_table_bytes);

#endif
