/* libFuzzer target: arbitrary text through kiln_tokens_parse (server/tenants.c).
 * Besides memory errors it checks that:
 *   - a parsed file holds valid tenants: names 1-63 characters of [A-Za-z0-9_.-], unique,
 *     at least one token each, no token hash shared by two entries;
 *   - an error is E_INVALID_ARGUMENT (or out of memory) with a message, and the message
 *     never quotes a token (a comma-separated piece of a line's first field). */
#include <ctype.h>
#include <stdint.h>
#include <string.h>

#include "server/tenants.h"
#include "tests/fuzz/fuzz_check.h"

/* Whether `msg` holds any token of the file: the first field of each line, split at commas,
 * pieces long enough to be tokens and not also a tenant name (names do appear in errors). */
static bool quotes_a_token(const char *text, size_t len, const char *msg) {
  char *buf = malloc(len + 1);
  CHECK(buf);
  memcpy(buf, text, len);
  buf[len] = 0;
  bool found = false;
  char *save = NULL;
  for (char *line = strtok_r(buf, "\n", &save); line && !found; line = strtok_r(NULL, "\n", &save)) {
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *fs = NULL;
    char *first = strtok_r(line, " \t\r", &fs);
    if (!first) continue;
    char *second = strtok_r(NULL, " \t\r", &fs);
    char *ts = NULL;
    for (char *tok = strtok_r(first, ",", &ts); tok && !found; tok = strtok_r(NULL, ",", &ts))
      found = strlen(tok) >= KILN_TOKEN_MIN && !(second && strstr(second, tok)) && strstr(msg, tok);
  }
  free(buf);
  return found;
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
