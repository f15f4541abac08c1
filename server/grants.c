/* Which modules a tenant may use, kept across restarts.
 *
 * A module id is a content hash anyone could compute, so a tenant may use one only after
 * compiling that build itself (a cache hit counts). The grants live in memory (the tenant's
 * `modules` map) and, so that ids survive a restart with the same cache, in
 * DIR/grants/TENANT.modules: one line of 64 hex digits per module the tenant was granted, appended
 * when the grant is new. The file is read at the tenant's first lookup that misses in memory;
 * lines whose entry is no longer in the disk store are dropped then (the file is rewritten),
 * so it holds at most the store's entries. The directory is kilnd's trust boundary like the
 * rest of the cache (docs/cache.md "Trust"); a tenant is its name, so a tenant renamed in the
 * tokens file starts with no grants. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "protocol/payload.h"
#include "server/modules.h"

#define LINE 65 /* 64 hex digits and a newline */

static void grants_path(const kiln_server_t *s, const kiln_tenant_t *t, char *out, size_t cap) {
  snprintf(out, cap, "%s/grants/%s.modules", s->cfg.cache_dir, t->name); /* "..": "...modules" */
}

static int nibble(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static bool hex_key(const char *p, uint8_t key[KILN_HASH_BYTES]) {
  for (int i = 0; i < KILN_HASH_BYTES; i++) {
    int hi = nibble(p[2 * i]), lo = nibble(p[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    key[i] = (uint8_t)(hi << 4 | lo);
  }
  return true;
}

/* Whether the disk store still holds the entry (its file name: docs/cache.md "Layout"). */
static bool stored(const kiln_server_t *s, const char *hex) {
  char path[700];
  struct stat st;
  snprintf(path, sizeof(path), "%s/objects/%.2s/%.64s", s->cfg.cache_dir, hex, hex);
  return stat(path, &st) == 0;
}

void kiln_grants_load(kiln_server_t *s, kiln_tenant_t *t) {
  if (t->grants_loaded) return;
  t->grants_loaded = true;
  char path[700];
  grants_path(s, t, path, sizeof(path));
  FILE *f = fopen(path, "re");
  if (!f) return;
  kiln_buf_t keep;
  kiln_buf_init(&keep);
  char line[LINE + 2];
  uint32_t loaded = 0, dropped = 0;
  bool ok = true;
  while (fgets(line, sizeof(line), f)) {
    uint8_t key[KILN_HASH_BYTES];
    if (strlen(line) != LINE || line[64] != '\n' || !hex_key(line, key) || !stored(s, line)) {
      dropped++;
      continue;
    }
    if (kiln_map_get(&t->modules, kiln_module_key64(key))) continue;
    kiln_status_t st = kiln_map_put(&t->modules, kiln_module_key64(key), (void *)1);
    if (!st) st = kiln_buf_append(&keep, line, LINE);
    if (st) { /* out of memory: the file stays as it is */
      kiln_status_free(st);
      ok = false;
      break;
    }
    loaded++;
  }
  fclose(f);
  if (ok && dropped) {
    /* Rewritten whole (temp file and rename): a crash leaves the old file or the new one. */
    char tmp[720];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool written = fd >= 0 && write(fd, keep.data, keep.len) == (ssize_t)keep.len;
    if (fd >= 0) close(fd);
    if (!written || rename(tmp, path) != 0) (void)unlink(tmp);
  }
  kiln_buf_deinit(&keep);
  KILN_LOG_INFO("grants_loaded", "tenant=%s modules=%u dropped=%u", t->name, loaded, dropped);
}

void kiln_grant_module(kiln_server_t *s, kiln_tenant_t *t, const uint8_t key[KILN_HASH_BYTES]) {
  kiln_grants_load(s, t);
  uint64_t k = kiln_module_key64(key);
  if (kiln_map_get(&t->modules, k)) return;
  kiln_status_t st = kiln_map_put(&t->modules, k, (void *)1);
  if (st) { /* out of memory: the tenant builds it again before it may launch it */
    KILN_LOG_WARN("tenant_module_lost", "message=\"%s\"", kiln_status_message(st));
    kiln_status_free(st);
    return;
  }
  char dir[600], path[700], line[LINE + 1];
  snprintf(dir, sizeof(dir), "%s/grants", s->cfg.cache_dir);
  (void)mkdir(dir, 0700);
  grants_path(s, t, path, sizeof(path));
  kiln_hex(key, KILN_HASH_BYTES, line);
  line[64] = '\n';
  /* One short O_APPEND write per new grant: whole lines, even with a crash in between. */
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, line, LINE) != LINE)
    KILN_LOG_WARN("grant_write_failed", "tenant=%s error=%d", t->name, errno);
  if (fd >= 0) close(fd);
}
