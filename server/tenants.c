#include "server/tenants.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/log.h"

/* --- parsing --------------------------------------------------------------------------- */

kiln_status_t kiln_size_parse(const char *v, uint64_t *out) {
  if (strcmp(v, "unlimited") == 0) {
    *out = UINT64_MAX;
    return KILN_OK;
  }
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno || end == v || v[0] == '-') return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "bad number");
  uint64_t mul = 1;
  if (!strcmp(end, "") || !strcmp(end, "B")) mul = 1;
  else if (!strcmp(end, "K") || !strcmp(end, "KiB")) mul = 1ull << 10;
  else if (!strcmp(end, "M") || !strcmp(end, "MiB")) mul = 1ull << 20;
  else if (!strcmp(end, "G") || !strcmp(end, "GiB")) mul = 1ull << 30;
  else if (!strcmp(end, "T") || !strcmp(end, "TiB")) mul = 1ull << 40;
  else return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "bad unit '%s' (use K, M, G, T)",
                          strlen(end) <= 8 ? end : "..."); /* a long one may hold a token */
  if (n > UINT64_MAX / mul) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "number too large");
  *out = n * mul;
  return KILN_OK;
}

static bool valid_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= KILN_TENANT_NAME_MAX) return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' && s[i] != '.') return false;
  return true;
}

/* "blake2b:" and 64 hex digits (either case): the token's BLAKE2b-256, what kilnd keeps of a
 * plaintext token anyway, so that the file need not hold the token itself. */
static kiln_status_t parse_token_hash(const char *hex, uint32_t index, uint8_t out[KILN_HASH_BYTES]) {
  size_t n = strlen(hex);
  bool ok = n == 2 * KILN_HASH_BYTES;
  for (size_t i = 0; ok && i < n; i++) {
    int c = tolower((unsigned char)hex[i]);
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) ok = false;
    else if (i % 2 == 0) out[i / 2] = (uint8_t)(v << 4);
    else out[i / 2] |= (uint8_t)v;
  }
  if (!ok)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "token %u of the line starts with '" KILN_TOKEN_HASH_PREFIX
                       "' but is not followed by %d hex digits (the BLAKE2b-256 of the token: "
                       "`kiln token new` prints the line)",
                       index, 2 * KILN_HASH_BYTES);
  return KILN_OK;
}

static kiln_status_t parse_tokens_field(char *field, kiln_tenant_spec_t *t) {
  uint32_t n = 1;
  for (char *p = field; *p; p++) n += *p == ',';
  t->token_hashes = calloc(n, KILN_HASH_BYTES);
  if (!t->token_hashes) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  char *save = NULL;
  for (char *tok = strtok_r(field, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    size_t len = strlen(tok);
    if (strncmp(tok, KILN_TOKEN_HASH_PREFIX, strlen(KILN_TOKEN_HASH_PREFIX)) == 0) {
      KILN_RETURN_IF_ERROR(parse_token_hash(tok + strlen(KILN_TOKEN_HASH_PREFIX), t->num_tokens + 1,
                                            t->token_hashes[t->num_tokens]));
      t->num_tokens++;
      continue;
    }
    if (len < KILN_TOKEN_MIN || len > KILN_TOKEN_MAX)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "a token must have %d to %d characters (token %u of the line has %zu)",
                         KILN_TOKEN_MIN, KILN_TOKEN_MAX, t->num_tokens + 1, len);
    for (size_t i = 0; i < len; i++)
      if (!isgraph((unsigned char)tok[i]))
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "tokens are printable ASCII without spaces");
    kiln_hash(tok, len, t->token_hashes[t->num_tokens++]);
    /* Wipe the token from the parse buffer: it is not needed any more. */
    memset(tok, 0, len);
  }
  if (!t->num_tokens) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "no token");
  return KILN_OK;
}

static kiln_status_t parse_option(char *opt, kiln_tenant_spec_t *t) {
  /* A field here may be a token that lost its comma: errors quote only what cannot be one. */
  char *eq = strchr(opt, '=');
  if (!eq)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "an option is not key=value (a token list is one field: separate tokens "
                       "with commas, no spaces)");
  *eq = 0;
  const char *k = opt, *v = eq + 1;
  if (strcmp(k, "stats") == 0) {
    if (strcmp(v, "all") != 0 && strcmp(v, "own") != 0)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "stats is 'all' or 'own'");
    t->stats_all = strcmp(v, "all") == 0;
    return KILN_OK;
  }
  if (strcmp(k, "lease") == 0) {
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || n > KILN_LEASE_MAX_S)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "lease is whole seconds from 0 to %d",
                         KILN_LEASE_MAX_S);
    t->quotas.lease = n;
    return KILN_OK;
  }
  if (strcmp(k, "devices") == 0) {
    if (strlen(v) >= sizeof(t->devices))
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "devices list too long");
    snprintf(t->devices, sizeof(t->devices), "%s", strcmp(v, "all") == 0 ? "" : v);
    return KILN_OK;
  }
  static const struct { const char *key; size_t off; } q[] = {
      {"memory", offsetof(kiln_quotas_t, memory)},
      {"tensors", offsetof(kiln_quotas_t, tensors)},
      {"launches", offsetof(kiln_quotas_t, launches)},
      {"compiles", offsetof(kiln_quotas_t, compiles)},
      {"message", offsetof(kiln_quotas_t, message)},
      {"connections", offsetof(kiln_quotas_t, connections)},
  };
  for (size_t i = 0; i < KILN_ARRAY_SIZE(q); i++) {
    if (strcmp(k, q[i].key) != 0) continue;
    uint64_t *dst = (uint64_t *)((char *)&t->quotas + q[i].off);
    kiln_status_t st = kiln_size_parse(v, dst);
    if (st) return kiln_status_annotate(st, "%s", k);
    return KILN_OK;
  }
  bool quotable = strlen(k) < KILN_TOKEN_MIN;
  return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                     "unknown option '%s' (known: devices, stats, memory, tensors, launches, "
                     "compiles, message, connections, lease)",
                     quotable ? k : "...");
}

void kiln_tokens_free(kiln_tokens_file_t *f) {
  for (uint32_t i = 0; i < f->num_tenants; i++) free(f->tenants[i].token_hashes);
  free(f->tenants);
  memset(f, 0, sizeof(*f));
}

kiln_status_t kiln_tokens_parse(const char *text, size_t len, kiln_tokens_file_t *out) {
  memset(out, 0, sizeof(*out));
  char *buf = malloc(len + 1);
  if (!buf) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(buf, text, len);
  buf[len] = 0;
  kiln_status_t st = KILN_OK;
  uint32_t lineno = 0;
  char *save = NULL;
  if (memchr(text, 0, len)) st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "tokens file contains a NUL byte");
  for (char *line = st ? NULL : strtok_r(buf, "\n", &save); line && !st;
       line = strtok_r(NULL, "\n", &save)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *fields[16];
    int nf = 0;
    char *fs = NULL;
    for (char *f = strtok_r(line, " \t\r", &fs); f && nf < 16; f = strtok_r(NULL, " \t\r", &fs))
      fields[nf++] = f;
    if (nf == 0) continue;
    if (nf < 2) {
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "line %u: expected TOKEN[,TOKEN...] TENANT [key=value...]",
                       lineno);
      break;
    }
    kiln_tenant_spec_t *t = realloc(out->tenants, (out->num_tenants + 1) * sizeof(*t));
    if (!t) {
      st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
      break;
    }
    out->tenants = t;
    t = &out->tenants[out->num_tenants++];
    memset(t, 0, sizeof(*t));
    memset(&t->quotas, 0xff, sizeof(t->quotas));
    t->quotas.lease = KILN_LEASE_DEFAULT_S;
    if (!valid_name(fields[1])) {
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "line %u: tenant names are 1-63 characters of A-Z a-z 0-9 _ - .", lineno);
      break;
    }
    snprintf(t->name, sizeof(t->name), "%s", fields[1]);
    for (uint32_t i = 0; i + 1 < out->num_tenants; i++)
      if (strcmp(out->tenants[i].name, t->name) == 0)
        st = KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "tenant '%s' appears twice; list all its tokens on one line, separated by commas",
                         t->name); /* "line N" is added below */
    if (!st) st = parse_tokens_field(fields[0], t);
    for (int i = 2; !st && i < nf; i++) st = parse_option(fields[i], t);
    if (st) st = kiln_status_annotate(st, "line %u", lineno);
  }
  /* One token for two tenants would make authentication ambiguous. */
  for (uint32_t a = 0; !st && a < out->num_tenants; a++)
    for (uint32_t i = 0; !st && i < out->tenants[a].num_tokens; i++)
      for (uint32_t b = a; !st && b < out->num_tenants; b++)
        for (uint32_t j = (a == b ? i + 1 : 0); !st && j < out->tenants[b].num_tokens; j++)
          if (!memcmp(out->tenants[a].token_hashes[i], out->tenants[b].token_hashes[j], KILN_HASH_BYTES))
            st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "the same token is listed twice (tenants '%s' and '%s')",
                             out->tenants[a].name, out->tenants[b].name);
  memset(buf, 0, len);
  free(buf);
  if (st) kiln_tokens_free(out);
  return st;
}

kiln_status_t kiln_tokens_load(const char *path, kiln_tokens_file_t *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "cannot open tokens file %s: %s", path, strerror(errno));
  /* Tokens in plaintext are credentials: a file that other users can read (or write: add a
   * tenant of their own) is worth a line at every load. */
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && (sb.st_mode & (S_IRWXG | S_IRWXO)))
    KILN_LOG_WARN("tokens_file_mode", "path=%s mode=%04o message=\"others than its owner can %s "
                  "it; chmod 600 it (or list only blake2b: hashes)\"",
                  path, (unsigned)(sb.st_mode & 07777),
                  sb.st_mode & (S_IWGRP | S_IWOTH) ? "write" : "read");
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_status_t st = KILN_OK;
  char chunk[4096];
  size_t n;
  while (!st && (n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
    st = kiln_buf_append(&b, chunk, n);
    if (!st && b.len > (16u << 20)) st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "tokens file over 16 MiB");
  }
  fclose(f);
  if (!st) st = kiln_tokens_parse((const char *)b.data, b.len, out);
  if (b.data) memset(b.data, 0, b.len);
  kiln_buf_deinit(&b);
  if (st) st = kiln_status_annotate(st, "%s", path);
  return st;
}

/* --- the server's table ------------------------------------------------------------------ */

static kiln_tenant_t *add_tenant(kiln_tenants_t *t, const char *name) {
  kiln_tenant_t **all = realloc(t->all, (t->count + 1) * sizeof(*all));
  if (!all) return NULL;
  t->all = all;
  kiln_tenant_t *x = calloc(1, sizeof(*x));
  if (!x) return NULL;
  snprintf(x->name, sizeof(x->name), "%s", name);
  x->index = t->count + 1;
  memset(&x->quotas, 0xff, sizeof(x->quotas));
  kiln_map_init(&x->modules);
  t->all[t->count++] = x;
  return x;
}

static kiln_status_t apply(kiln_tenants_t *t, kiln_tokens_file_t *f) {
  for (uint32_t i = 0; i < t->count; i++) t->all[i]->disabled = true;
  for (uint32_t i = 0; i < f->num_tenants; i++) {
    kiln_tenant_spec_t *s = &f->tenants[i];
    kiln_tenant_t *x = NULL;
    for (uint32_t j = 0; j < t->count && !x; j++)
      if (strcmp(t->all[j]->name, s->name) == 0) x = t->all[j];
    if (!x && !(x = add_tenant(t, s->name)))
      return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    x->disabled = false;
    snprintf(x->devices, sizeof(x->devices), "%s", s->devices);
    x->quotas = s->quotas;
    x->stats_all = s->stats_all;
    free(x->token_hashes);
    x->token_hashes = s->token_hashes;
    x->num_tokens = s->num_tokens;
    s->token_hashes = NULL;
  }
  return KILN_OK;
}

kiln_status_t kiln_tenants_init(kiln_tenants_t *t, const char *tokens_path) {
  memset(t, 0, sizeof(*t));
  if (!tokens_path || !tokens_path[0]) {
    return add_tenant(t, "default") ? KILN_OK
                                    : KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  snprintf(t->path, sizeof(t->path), "%s", tokens_path);
  t->auth_required = true;
  return kiln_tenants_reload(t);
}

kiln_status_t kiln_tenants_reload(kiln_tenants_t *t) {
  if (!t->auth_required) return KILN_OK;
  kiln_tokens_file_t f;
  KILN_RETURN_IF_ERROR(kiln_tokens_load(t->path, &f));
  kiln_status_t st = apply(t, &f);
  kiln_tokens_free(&f);
  uint32_t live = 0;
  for (uint32_t i = 0; i < t->count; i++) live += !t->all[i]->disabled;
  KILN_LOG_INFO("tokens_loaded", "path=%s tenants=%u", t->path, live);
  return st;
}

kiln_tenant_t *kiln_tenants_authenticate(const kiln_tenants_t *t, const char *token, size_t len,
                                         uint8_t out_hash[KILN_HASH_BYTES]) {
  if (len < KILN_TOKEN_MIN || len > KILN_TOKEN_MAX) return NULL;
  uint8_t h[KILN_HASH_BYTES];
  kiln_hash(token, len, h);
  if (out_hash) memcpy(out_hash, h, KILN_HASH_BYTES);
  kiln_tenant_t *found = NULL;
  /* Every candidate is compared, in constant time each, whatever matched earlier. */
  for (uint32_t i = 0; i < t->count; i++) {
    kiln_tenant_t *x = t->all[i];
    for (uint32_t j = 0; j < x->num_tokens; j++)
      if (kiln_secret_compare(h, x->token_hashes[j], KILN_HASH_BYTES) == 0 && !x->disabled)
        found = x;
  }
  return found;
}

bool kiln_tenant_has_token(const kiln_tenant_t *t, const uint8_t hash[KILN_HASH_BYTES]) {
  bool found = false;
  for (uint32_t j = 0; j < t->num_tokens; j++)
    found |= kiln_secret_compare(hash, t->token_hashes[j], KILN_HASH_BYTES) == 0;
  return found;
}

kiln_tenant_t *kiln_tenants_default(kiln_tenants_t *t) {
  return t->auth_required ? NULL : t->all[0];
}

bool kiln_tenant_may_use(const kiln_tenant_t *t, const char *device_id, const char *kind) {
  if (!t->devices[0]) return true;
  const char *p = t->devices;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if ((strlen(device_id) == n && !memcmp(device_id, p, n)) ||
        (strlen(kind) == n && !memcmp(kind, p, n)))
      return true;
    if (!e) break;
    p = e + 1;
  }
  return false;
}

kiln_status_t kiln_quota_check(const kiln_tenant_t *t, const char *what, uint64_t used,
                               uint64_t more, uint64_t limit) {
  if (limit == UINT64_MAX || (more <= limit && used <= limit - more)) return KILN_OK;
  return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                     "tenant '%s' would exceed its %s quota (%llu in use, %llu more asked, limit "
                     "%llu)",
                     t->name, what, (unsigned long long)used, (unsigned long long)more,
                     (unsigned long long)limit);
}
