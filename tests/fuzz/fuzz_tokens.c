/* libFuzzer target: arbitrary text through kiln_tokens_parse (server/tenants.c).
 * Besides memory errors it checks that:
 *   - a parsed file holds valid tenants: names 1-63 characters of [A-Za-z0-9_.-], unique,
 *     at least one token each, no token hash shared by two entries;
 *   - each tenant's hashes are, in order, what its line lists, recomputed here on their own:
 *     the BLAKE2b-256 of a plaintext token, or the 64 hex digits after "blake2b:" decoded
 *     (so a hashed entry authenticates exactly the token it is the hash of);
 *   - an error is E_INVALID_ARGUMENT (or out of memory) with a message, and the message
 *     never quotes a token (a comma-separated piece of a line's first field). */
#include <ctype.h>
#include <stdint.h>
#include <string.h>

#include "server/tenants.h"
#include "tests/fuzz/fuzz_check.h"

/* The first two whitespace-separated fields of each line (comments cut), in a copy of the
 * text: `fields[2*i]` the tokens, `fields[2*i+1]` the tenant name (may be NULL). */
static size_t split_lines(char *buf, char **fields, size_t cap) {
  size_t n = 0;
  char *save = NULL;
  for (char *line = strtok_r(buf, "\n", &save); line && n + 2 <= cap; line = strtok_r(NULL, "\n", &save)) {
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *fs = NULL;
    char *first = strtok_r(line, " \t\r", &fs);
    if (!first) continue;
    fields[n++] = first;
    fields[n++] = strtok_r(NULL, " \t\r", &fs);
  }
  return n;
}

/* Whether `msg` holds any token of the file: the first field of each line, split at commas,
 * pieces long enough to be tokens. Tenant names do appear in errors by design, and a name
 * may equal (part of) another line's token text, so occurrences of names of 8 or more
 * characters are masked in the message before the tokens are looked for. */
static bool quotes_a_token(const char *text, size_t len, const char *msg) {
  char *buf = malloc(len + 1), *masked = strdup(msg);
  CHECK(buf && masked);
  memcpy(buf, text, len);
  buf[len] = 0;
  size_t cap = 2 * (len / 2 + 2);
  char **fields = calloc(cap, sizeof(char *));
  CHECK(fields);
  size_t n = split_lines(buf, fields, cap);
  for (size_t j = 1; j < n; j += 2) {
    size_t nl = fields[j] ? strlen(fields[j]) : 0;
    if (nl < 8) continue;
    for (char *p = strstr(masked, fields[j]); p; p = strstr(p + nl, fields[j])) memset(p, 1, nl);
  }
  bool found = false;
  for (size_t i = 0; i < n && !found; i += 2) {
    char *ts = NULL;
    for (char *tok = strtok_r(fields[i], ",", &ts); tok && !found; tok = strtok_r(NULL, ",", &ts))
      found = strlen(tok) >= KILN_TOKEN_MIN && strstr(masked, tok);
  }
  free(fields);
  free(masked);
  free(buf);
  return found;
}

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The hashes tenant t's line lists, from the text alone, checked against what the parser
 * kept. */
static void check_hashes(const char *text, size_t len, const kiln_tenant_spec_t *t) {
  char *buf = malloc(len + 1);
  CHECK(buf);
  memcpy(buf, text, len);
  buf[len] = 0;
  size_t cap = 2 * (len / 2 + 2);
  char **fields = calloc(cap, sizeof(char *));
  CHECK(fields);
  size_t n = split_lines(buf, fields, cap);
  bool found = false;
  for (size_t i = 0; i < n && !found; i += 2) {
    if (!fields[i + 1] || strcmp(fields[i + 1], t->name) != 0) continue;
    found = true;
    uint32_t k = 0;
    char *ts = NULL;
    for (char *tok = strtok_r(fields[i], ",", &ts); tok; tok = strtok_r(NULL, ",", &ts), k++) {
      uint8_t want[KILN_HASH_BYTES];
      if (strncmp(tok, "blake2b:", 8) == 0) {
        CHECK(strlen(tok) == 8 + 2 * KILN_HASH_BYTES);
        for (size_t b = 0; b < KILN_HASH_BYTES; b++) {
          int hi = hexval(tok[8 + 2 * b]), lo = hexval(tok[9 + 2 * b]);
          CHECK(hi >= 0 && lo >= 0);
          want[b] = (uint8_t)(hi << 4 | lo);
        }
      } else {
        kiln_hash(tok, strlen(tok), want);
      }
      CHECK(k < t->num_tokens);
      CHECK(memcmp(want, t->token_hashes[k], KILN_HASH_BYTES) == 0);
    }
    CHECK(k == t->num_tokens);
  }
  CHECK(found);
  free(fields);
  free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_tokens_file_t f;
  kiln_status_t st = kiln_tokens_parse((const char *)data, size, &f);
  if (st) {
    kiln_code_t code = kiln_status_code(st);
    CHECK(code == KILN_E_INVALID_ARGUMENT || code == KILN_E_RESOURCE_EXHAUSTED);
    CHECK(kiln_status_message(st)[0] != 0);
    CHECK(!quotes_a_token((const char *)data, size, kiln_status_message(st)));
    CHECK(f.tenants == NULL && f.num_tenants == 0);
    kiln_status_free(st);
    return 0;
  }
  for (uint32_t i = 0; i < f.num_tenants; i++) {
    const kiln_tenant_spec_t *t = &f.tenants[i];
    size_t n = strnlen(t->name, sizeof(t->name));
    CHECK(n > 0 && n < KILN_TENANT_NAME_MAX);
    for (size_t k = 0; k < n; k++)
      CHECK(isalnum((unsigned char)t->name[k]) || strchr("_-.", t->name[k]));
    CHECK(strnlen(t->devices, sizeof(t->devices)) < sizeof(t->devices));
    CHECK(t->num_tokens > 0 && t->token_hashes);
    check_hashes((const char *)data, size, t);
    for (uint32_t j = 0; j < i; j++) CHECK(strcmp(f.tenants[j].name, t->name) != 0);
    for (uint32_t a = 0; a < t->num_tokens; a++)
      for (uint32_t j = 0; j <= i; j++)
        for (uint32_t b = 0; b < f.tenants[j].num_tokens; b++)
          if (j != i || b != a)
            CHECK(memcmp(t->token_hashes[a], f.tenants[j].token_hashes[b], KILN_HASH_BYTES) != 0);
  }
  kiln_tokens_free(&f);
  CHECK(f.tenants == NULL && f.num_tenants == 0);
  return 0;
}
