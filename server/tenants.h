/* Tenants, tokens and quotas (docs/operations.md).
 *
 * Without a tokens file every connection is the tenant "default" with no quotas. With one
 * (--tokens FILE, reloaded on SIGHUP), a connection is anonymous until `hello` carries a
 * valid token, and may call only `hello` and `ping` before that.
 *
 * The tokens file parser is pure (no server state) so that it can be fuzzed. */
#ifndef KILN_SERVER_TENANTS_H
#define KILN_SERVER_TENANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/map.h"
#include "base/status.h"
#include "base/util.h"

#define KILN_TENANT_NAME_MAX 64
#define KILN_TOKEN_MIN 16
#define KILN_TOKEN_MAX 256
/* A tokens-file entry "blake2b:HEX" is the token's BLAKE2b-256 in hex instead of the token. */
#define KILN_TOKEN_HASH_PREFIX "blake2b:"

typedef struct kiln_quotas {
  uint64_t memory;      /* device memory bytes held in tensors (all devices) */
  uint64_t tensors;     /* live tensors */
  uint64_t launches;    /* launches and timings in flight */
  uint64_t compiles;    /* compile items queued or running */
  uint64_t message;     /* bytes of one message */
  uint64_t connections; /* open connections */
  uint64_t lease;       /* longest lease in seconds (0: none allowed); not UINT64_MAX by default */
} kiln_quotas_t;

#define KILN_LEASE_DEFAULT_S 60 /* a tokens line's lease quota when it names none */
#define KILN_LEASE_MAX_S 3600   /* the longest lease anyone gets (docs/protocol.md `lease`) */

/* One line of the tokens file, parsed. */
typedef struct kiln_tenant_spec {
  char name[KILN_TENANT_NAME_MAX];
  uint8_t (*token_hashes)[KILN_HASH_BYTES]; /* BLAKE2b of each token; tokens themselves are not kept */
  uint32_t num_tokens;
  char devices[256]; /* "" = every device; else comma-separated ids or kinds */
  kiln_quotas_t quotas; /* UINT64_MAX = unlimited */
  bool stats_all;       /* stats=all: `stats` shows every tenant, not only this one */
} kiln_tenant_spec_t;

typedef struct kiln_tokens_file {
  kiln_tenant_spec_t *tenants;
  uint32_t num_tenants;
} kiln_tokens_file_t;

/* A size as the tokens file writes it: bytes, or a number with K M G T (powers of 1024, also
 * KiB ... TiB); "unlimited" is UINT64_MAX. */
KILN_MUST_USE kiln_status_t kiln_size_parse(const char *v, uint64_t *out);

/* Parses the text of a tokens file. Errors name the line and what is wrong; they never
 * quote a token. */
KILN_MUST_USE kiln_status_t kiln_tokens_parse(const char *text, size_t len, kiln_tokens_file_t *out);
KILN_MUST_USE kiln_status_t kiln_tokens_load(const char *path, kiln_tokens_file_t *out);
void kiln_tokens_free(kiln_tokens_file_t *f);

/* A tenant as the server keeps it. Never freed while the daemon runs (handles refer to
 * it); a tenant that leaves the tokens file on reload is disabled. */
typedef struct kiln_tenant {
  char name[KILN_TENANT_NAME_MAX];
  uint32_t index; /* 1-based, stable: keys its device workers */
  bool disabled;
  char devices[256];
  kiln_quotas_t quotas;
  bool stats_all;
  uint8_t (*token_hashes)[KILN_HASH_BYTES];
  uint32_t num_tokens;
  /* usage */
  uint64_t memory, tensors, launches, compiles, connections;
  uint64_t lost_markers; /* ids of its tensors lost with a worker, remembered (tensors.c) */
  uint64_t transfer_bytes;    /* read/download reply buffers held for it (gate.c) */
  uint64_t transfers_waiting; /* reads/downloads queued for that budget */
  uint64_t deferred_bytes;    /* payloads of its batch items waiting for quota (compile.c) */
  uint64_t requests, errors;
  kiln_map_t modules; /* key64 of modules this tenant compiled -> (void *)1 */
  bool grants_loaded; /* its grants file was read (server/grants.c) */
} kiln_tenant_t;

typedef struct kiln_tenants {
  kiln_tenant_t **all;
  uint32_t count;
  bool auth_required; /* a tokens file is in force */
  char path[512];
} kiln_tenants_t;

KILN_MUST_USE kiln_status_t kiln_tenants_init(kiln_tenants_t *t, const char *tokens_path);
/* Re-reads the tokens file; on error the old table stays in force. */
KILN_MUST_USE kiln_status_t kiln_tenants_reload(kiln_tenants_t *t);
/* The tenant whose token this is, comparing every token in constant time; NULL if none.
 * The token's hash goes to out_hash (when not NULL) for kiln_tenant_has_token. */
kiln_tenant_t *kiln_tenants_authenticate(const kiln_tenants_t *t, const char *token, size_t len,
                                         uint8_t out_hash[KILN_HASH_BYTES]);
/* Whether the tenant's line still lists the token of this hash (after a reload). */
bool kiln_tenant_has_token(const kiln_tenant_t *t, const uint8_t hash[KILN_HASH_BYTES]);
kiln_tenant_t *kiln_tenants_default(kiln_tenants_t *t); /* NULL when auth is required */
/* Whether the tenant may use the device (id like "cuda:0", kind like "cuda"). */
bool kiln_tenant_may_use(const kiln_tenant_t *t, const char *device_id, const char *kind);

/* E_RESOURCE_EXHAUSTED naming the quota when used + more > limit. */
KILN_MUST_USE kiln_status_t kiln_quota_check(const kiln_tenant_t *t, const char *what, uint64_t used,
                               uint64_t more, uint64_t limit);

#endif
