/* `cache_list` and `cache_prune`: the artifact cache as its operator sees it.
 *
 * An entry's key hashes the compiler identity with the build (docs/cache.md "Cache key"), so
 * a new compiler never reads the old one's entries again, yet they stay on disk until evicted.
 * The key cannot be read back, so kilnd records eras instead: DIR/identity holds the identity
 * that last ran on the directory and since when. An entry whose last use (its file's mtime)
 * is older than the era's start was not used by the running compiler: it is `stale`, the
 * entries of older compilers being the ones that matter. Both methods are the operator's
 * (no tokens file, or a tokens line with stats=all): entries are shared by every tenant that
 * built the same thing, so no tenant owns one, and a listing shows what others built. */
#include "server/cache_admin.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "server/cache.h"
#include "server/compile.h"

#define LIST_DEFAULT 100
#define LIST_MAX 1000  /* items per page: a reply stays far below any message limit */
#define PRUNE_KEYS_MAX 1000
#define ERA_MAGIC "kiln-cache-identity 1\n"

/* The era of the running compiler: set once at start, read on the loop thread. */
static int64_t era_since_ns;

static int64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The era DIR/identity records for `identity`, or -1 when it records another (or nothing). */
static int64_t era_read(const char *path, const char *identity) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  size_t m = strlen(ERA_MAGIC);
  long long since;
  int used = 0;
  if (strncmp(buf, ERA_MAGIC, m) != 0 || sscanf(buf + m, "since %lld\nidentity %n", &since, &used) != 1 ||
      !used || since < 0)
    return -1;
  const char *id = buf + m + used;
  size_t len = strcspn(id, "\n");
  return len == strlen(identity) && memcmp(id, identity, len) == 0 && id[len] == '\n' ? since : -1;
}

/* Writes the era durably: a temp file, fsync, rename. */
static kiln_status_t era_write(const char *path, const char *identity, int64_t since) {
  char tmp[700], text[600];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  int len = snprintf(text, sizeof(text), ERA_MAGIC "since %" PRId64 "\nidentity %s\n", since, identity);
  if (len < 0 || (size_t)len >= sizeof(text)) return KILN_STATUS(KILN_E_INTERNAL, "identity too long");
  (void)unlink(tmp); /* a leftover of a crash */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return KILN_STATUS(KILN_E_UNAVAILABLE, "%s: %s", tmp, strerror(errno));
  bool ok = write(fd, text, (size_t)len) == len && fsync(fd) == 0;
  int err = errno;
  close(fd);
  if (!ok || rename(tmp, path) != 0) {
    err = ok ? errno : err;
    (void)unlink(tmp);
    return KILN_STATUS(KILN_E_UNAVAILABLE, "%s: %s", path, strerror(err));
  }
  return KILN_OK;
}

kiln_status_t kiln_cache_admin_init(kiln_server_t *s) {
  char path[600];
  snprintf(path, sizeof(path), "%s/identity", s->cfg.cache_dir);
  const char *identity = kiln_compile_identity(s);
  int64_t since = era_read(path, identity);
  bool fresh = since < 0;
  if (fresh) {
    since = wall_ns();
    kiln_status_t st = era_write(path, identity, since);
    if (st) {
      char q[300];
      KILN_LOG_WARN("cache_identity_write_failed", "message=%s",
                    kiln_log_quote(q, sizeof(q), kiln_status_message(st)));
      kiln_status_free(st);
    }
  }
  era_since_ns = since;
  KILN_LOG_INFO("cache_identity", "new=%d since=%.3f", fresh, (double)since / 1e9);
  return KILN_OK;
}

/* --- the methods ------------------------------------------------------------------------- */

static kiln_status_t operator_only(const kiln_call_t *call, const char *method) {
  const kiln_tenant_t *me = call->conn->tenant;
  if (!call->server->tenants.auth_required || (me && me->stats_all)) return KILN_OK;
  return KILN_STATUS(KILN_E_PERMISSION,
                     "%s is the operator's: the cache's entries are shared by every tenant that built "
                     "them (a tokens line with stats=all may call it; docs/operations.md)",
                     method);
}

static bool parse_key(const char *p, uint32_t len, uint8_t key[KILN_CACHE_KEY_BYTES]) {
  if (len != 2 * KILN_CACHE_KEY_BYTES) return false;
  for (uint32_t i = 0; i < len; i++) {
    char c = p[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (v < 0) return false;
    if (i % 2 == 0) key[i / 2] = (uint8_t)(v << 4);
    else key[i / 2] |= (uint8_t)v;
  }
  return true;
}

static int by_key(const void *a, const void *b) {
  return memcmp(((const kiln_cache_item_t *)a)->key, ((const kiln_cache_item_t *)b)->key, KILN_CACHE_KEY_BYTES);
}

static bool stale(const kiln_cache_item_t *it) { return !it->writing && it->used_ns < era_since_ns; }

static uint64_t item_bytes(const kiln_cache_item_t *it) {
  return it->file_bytes ? it->file_bytes : it->mem_bytes;
}

static void pack_item(msgpack_packer *pk, const kiln_cache_item_t *it) {
  char hex[2 * KILN_CACHE_KEY_BYTES + 1];
  kiln_hex(it->key, KILN_CACHE_KEY_BYTES, hex);
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_str(&m, "key", hex);
  kiln_fields_u64(&m, "bytes", item_bytes(it));
  kiln_fields_f64(&m, "used", (double)it->used_ns / 1e9);
  kiln_fields_str(&m, "where", it->on_disk ? "disk" : it->writing ? "writing" : "memory");
  kiln_fields_bool(&m, "memory", it->mem_bytes != 0);
  kiln_fields_bool(&m, "stale", stale(it));
  kiln_fields_end(&m);
}

kiln_status_t kiln_method_cache_list(kiln_call_t *call) {
  static const char *const fields[] = {"after", "limit", "stale", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "cache_list", fields));
  KILN_RETURN_IF_ERROR(operator_only(call, "cache_list"));
  const char *after_s = NULL;
  uint32_t after_len = 0;
  uint64_t limit = LIST_DEFAULT;
  bool only_stale = false;
  uint8_t after[KILN_CACHE_KEY_BYTES];
  KILN_RETURN_IF_ERROR(kiln_params_str(call->params, "after", false, &after_s, &after_len));
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "limit", false, &limit));
  KILN_RETURN_IF_ERROR(kiln_params_bool(call->params, "stale", false, &only_stale));
  if (after_s && !parse_key(after_s, after_len, after))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "after: a key of 64 hex digits (a listing's `next`)");
  if (limit < 1 || limit > LIST_MAX)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "limit: 1 to %d entries per page", LIST_MAX);
  kiln_server_t *s = call->server;
  if (!s->cache) return KILN_STATUS(KILN_E_UNAVAILABLE, "the cache is not open");
  kiln_cache_item_t *items;
  size_t n;
  KILN_RETURN_IF_ERROR(kiln_cache_items(s->cache, &items, &n));
  qsort(items, n, sizeof(*items), by_key);
  uint64_t bytes = 0, stale_n = 0, stale_bytes = 0;
  size_t first = n, shown = 0, last = 0;
  bool more = false;
  for (size_t i = 0; i < n; i++) {
    bytes += item_bytes(&items[i]);
    if (stale(&items[i])) stale_n++, stale_bytes += item_bytes(&items[i]);
    if ((only_stale && !stale(&items[i])) || (after_s && memcmp(items[i].key, after, KILN_CACHE_KEY_BYTES) <= 0))
      continue;
    if (shown == limit) {
      more = true;
      continue;
    }
    if (first == n) first = i;
    last = i;
    shown++;
  }
  msgpack_packer *pk = call->pk;
  kiln_fields_t r;
  kiln_fields_begin(&r, pk);
  kiln_fields_str(&r, "identity", kiln_compile_identity(s));
  kiln_fields_f64(&r, "identity_since", (double)era_since_ns / 1e9);
  kiln_fields_u64(&r, "entries", n);
  kiln_fields_u64(&r, "bytes", bytes);
  kiln_fields_u64(&r, "stale_entries", stale_n);
  kiln_fields_u64(&r, "stale_bytes", stale_bytes);
  kiln_fields_u64(&r, "max_bytes", s->cfg.cache_max_bytes ? s->cfg.cache_max_bytes : KILN_CACHE_DEFAULT_MAX_DISK_BYTES);
  kiln_fields_key(&r, "items");
  msgpack_pack_array(pk, (uint32_t)shown);
  for (size_t i = first, k = 0; k < shown; i++) {
    if ((only_stale && !stale(&items[i])) || (after_s && memcmp(items[i].key, after, KILN_CACHE_KEY_BYTES) <= 0))
      continue;
    pack_item(pk, &items[i]);
    k++;
  }
  kiln_fields_key(&r, "next");
  if (more) {
    char hex[2 * KILN_CACHE_KEY_BYTES + 1];
    kiln_hex(items[last].key, KILN_CACHE_KEY_BYTES, hex);
    kiln_pack_cstr(pk, hex);
  } else {
    msgpack_pack_nil(pk);
  }
  kiln_fields_end(&r);
  free(items);
  return KILN_OK;
}

kiln_status_t kiln_method_cache_prune(kiln_call_t *call) {
  static const char *const fields[] = {"stale", "unused_s", "keys", "all", "dry_run", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "cache_prune", fields));
  KILN_RETURN_IF_ERROR(operator_only(call, "cache_prune"));
  bool want_stale = false, all = false, dry = false;
  uint64_t unused_s = 0;
  const msgpack_object_array *keys = NULL;
  KILN_RETURN_IF_ERROR(kiln_params_bool(call->params, "stale", false, &want_stale));
  KILN_RETURN_IF_ERROR(kiln_params_bool(call->params, "all", false, &all));
  KILN_RETURN_IF_ERROR(kiln_params_bool(call->params, "dry_run", false, &dry));
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "unused_s", false, &unused_s));
  KILN_RETURN_IF_ERROR(kiln_params_array(call->params, "keys", false, &keys));
  bool has_unused = kiln_params_find(call->params, "unused_s") != NULL;
  if (want_stale + all + has_unused + (keys != NULL) != 1)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "cache_prune takes exactly one of stale: true, unused_s, keys, all: true");
  if (has_unused && (unused_s < 1 || unused_s > (uint64_t)INT32_MAX))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "unused_s: 1 to %d seconds", INT32_MAX);
  if (keys && (keys->size < 1 || keys->size > PRUNE_KEYS_MAX))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "keys: 1 to %d module ids", PRUNE_KEYS_MAX);
  kiln_server_t *s = call->server;
  if (!s->cache) return KILN_STATUS(KILN_E_UNAVAILABLE, "the cache is not open");
  /* every key is checked before anything goes */
  uint8_t(*wanted)[KILN_CACHE_KEY_BYTES] = NULL;
  if (keys) {
    wanted = malloc(keys->size * sizeof(*wanted));
    if (!wanted) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    for (uint32_t i = 0; i < keys->size; i++) {
      const msgpack_object *k = &keys->ptr[i];
      if (k->type != MSGPACK_OBJECT_STR || !parse_key(k->via.str.ptr, k->via.str.size, wanted[i])) {
        free(wanted);
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "keys[%u]: a module id of 64 hex digits", i);
      }
    }
  }
  kiln_cache_item_t *items;
  size_t n;
  kiln_status_t st = kiln_cache_items(s->cache, &items, &n);
  if (st) {
    free(wanted);
    return st;
  }
  if (keys) qsort(items, n, sizeof(*items), by_key);
  int64_t cutoff = wall_ns() - (int64_t)unused_s * 1000000000;
  uint64_t removed = 0, bytes = 0;
  for (uint32_t k = 0; keys && k < keys->size; k++) {
    kiln_cache_item_t probe, *it;
    memcpy(probe.key, wanted[k], KILN_CACHE_KEY_BYTES);
    it = bsearch(&probe, items, n, sizeof(*items), by_key);
    if (!it || it->file_bytes == UINT64_MAX) continue; /* absent, or counted already */
    removed++, bytes += item_bytes(it);
    if (!dry) kiln_cache_remove(s->cache, it->key);
    it->file_bytes = UINT64_MAX;
  }
  for (size_t i = 0; !keys && i < n; i++) {
    const kiln_cache_item_t *it = &items[i];
    bool go = all || (want_stale && stale(it)) || (has_unused && !it->writing && it->used_ns < cutoff);
    if (!go) continue;
    removed++, bytes += item_bytes(it);
    if (!dry) kiln_cache_remove(s->cache, it->key);
  }
  free(items);
  free(wanted);
  const kiln_tenant_t *me = call->conn->tenant;
  KILN_LOG_INFO("cache_prune", "tenant=%s by=%s removed=%llu bytes=%llu dry_run=%d", me ? me->name : "-",
                keys ? "keys" : all ? "all" : want_stale ? "stale" : "unused", (unsigned long long)removed,
                (unsigned long long)bytes, dry);
  kiln_fields_t r;
  kiln_fields_begin(&r, call->pk);
  kiln_fields_u64(&r, "removed", removed);
  kiln_fields_u64(&r, "bytes", bytes);
  kiln_fields_bool(&r, "dry_run", dry);
  kiln_fields_end(&r);
  return KILN_OK;
}
