/* The module table on the cache's entries (server/modules.h). */
#include "server/modules.h"

#include <ctype.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "protocol/payload.h"

/* Tables are freed by the last release of their entry, which may run on a cache writer
 * thread: the counters are atomic. */
static atomic_uint_fast64_t live_count, live_bytes;

static uint64_t table_bytes(const kiln_artifact_t *a) {
  uint64_t n = sizeof(kiln_module_t) + (a->log ? strlen(a->log) + 1 : 0);
  for (uint32_t i = 0; i < a->num_kernels; i++)
    n += sizeof(kiln_kernel_t) +
         (uint64_t)(a->kernels[i].num_args + a->kernels[i].num_hidden) * sizeof(kiln_kernel_arg_t);
  return n;
}

static void module_free(void *p) {
  kiln_module_t *m = p;
  atomic_fetch_sub(&live_count, 1);
  atomic_fetch_sub(&live_bytes, m->table_bytes);
  kiln_artifact_deinit(&m->art);
  free(m);
}

kiln_status_t kiln_module_of(kiln_cache_entry_t *e, kiln_module_t **out) {
  kiln_module_t *m = kiln_cache_entry_user(e);
  if (m) {
    *out = m;
    return KILN_OK;
  }
  m = calloc(1, sizeof(*m));
  if (!m) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(m->key, kiln_cache_entry_key(e), KILN_HASH_BYTES);
  kiln_hex(m->key, KILN_HASH_BYTES, m->hex);
  m->entry = e;
  m->bytes = kiln_cache_entry_data(e, &m->len);
  kiln_artifact_init(&m->art);
  kiln_status_t st = kiln_artifact_decode_part(m->bytes, m->len, KILN_ARTIFACT_TABLE, &m->art);
  if (st) {
    kiln_artifact_deinit(&m->art);
    free(m);
    return st;
  }
  m->table_bytes = table_bytes(&m->art);
  atomic_fetch_add(&live_count, 1);
  atomic_fetch_add(&live_bytes, m->table_bytes);
  kiln_cache_entry_set_user(e, m, module_free);
  *out = m;
  return KILN_OK;
}

kiln_module_t *kiln_module_get(kiln_cache_t *cache, const uint8_t key[KILN_HASH_BYTES]) {
  kiln_cache_entry_t *e = cache ? kiln_cache_get(cache, key) : NULL;
  if (!e) return NULL;
  kiln_module_t *m;
  kiln_status_t st = kiln_module_of(e, &m);
  if (!st) return m;
  /* An entry that verifies its MAC but does not decode was written by another kiln build
   * with the same identity: a miss, and gone so that a compile writes it again. */
  KILN_LOG_WARN("cache_undecodable", "message=\"%s\"", kiln_status_message(st));
  kiln_status_free(st);
  kiln_cache_entry_release(e);
  kiln_cache_remove(cache, key);
  return NULL;
}

static bool parse_hex_key(const char *hex, uint32_t len, uint8_t out[KILN_HASH_BYTES]) {
  if (len != 2 * KILN_HASH_BYTES) return false;
  for (uint32_t i = 0; i < KILN_HASH_BYTES; i++) {
    int hi = hex[2 * i], lo = hex[2 * i + 1];
    if (!isxdigit(hi) || !isxdigit(lo)) return false;
    hi = isdigit(hi) ? hi - '0' : tolower(hi) - 'a' + 10;
    lo = isdigit(lo) ? lo - '0' : tolower(lo) - 'a' + 10;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return true;
}

kiln_status_t kiln_module_find(kiln_server_t *s, kiln_tenant_t *tenant, const char *hex,
                               uint32_t len, kiln_module_t **out) {
  uint8_t key[KILN_HASH_BYTES];
  if (!parse_hex_key(hex, len, key))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "module must be the 64-hex-digit id that `compile` returned");
  /* A module id is a content hash anyone could compute: only tenants that compiled it
   * (or got it from the cache through their own compile) may use it. */
  kiln_module_t *m = NULL;
  if (tenant) kiln_grants_load(s, tenant); /* grants of earlier runs */
  if (!tenant || kiln_map_get(&tenant->modules, kiln_module_key64(key))) m = kiln_module_get(s->cache, key);
  if (!m)
    return KILN_STATUS(KILN_E_NOT_FOUND,
                       "no module %.16s…: compile it again (it may have been evicted from the "
                       "cache)",
                       hex);
  *out = m;
  return KILN_OK;
}

kiln_module_t *kiln_module_retain(kiln_module_t *m) {
  kiln_cache_entry_retain(m->entry);
  return m;
}

void kiln_module_release(kiln_module_t *m) {
  if (m) kiln_cache_entry_release(m->entry);
}

void kiln_modules_stats(uint64_t *out_count, uint64_t *out_table_bytes) {
  *out_count = atomic_load(&live_count);
  *out_table_bytes = atomic_load(&live_bytes);
}
