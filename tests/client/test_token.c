/* `kiln token new` and hashed tokens (docs/operations.md "Tokens"): the CLI makes tokens and
 * their tokens-file lines, the hash checked against coreutils' b2sum; the real kilnd started
 * on a file of such lines (mixed with a plaintext token) lets each token in as its tenant,
 * never the hash itself; a malformed hash stops kilnd at start without quoting it. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

TestSuite(token, .timeout = 120);

/* Runs cmd through the shell; stdout (up to cap) in out; returns the exit status. */
static int run(const char *cmd, char *out, size_t cap) {
  FILE *f = popen(cmd, "r");
  cr_assert(f, "popen %s", cmd);
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = 0;
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

typedef struct made {
  char token[128], line[160], hex[65];
} made_t;

/* `kiln token new NAMES...` into made[], with the output's shape checked. */
static void token_new(const char *names, made_t *made, int n) {
  char cmd[512], out[4096];
  snprintf(cmd, sizeof(cmd), "'%s' token new %s", getenv("KILN_CLI"), names);
  cr_assert_eq(run(cmd, out, sizeof(out)), 0, "kiln token new failed: %s", out);
  char *save = NULL, *line = strtok_r(out, "\n", &save);
  char name[64];
  const char *p = names;
  for (int i = 0; i < n; i++) {
    int used = 0;
    cr_assert_eq(sscanf(p, "%63s%n", name, &used), 1);
    p += used;
    char want[128];
    snprintf(want, sizeof(want), "token for %s: ", name);
    cr_assert(line && strncmp(line, want, strlen(want)) == 0, "unexpected line: %s", line ? line : "(none)");
    snprintf(made[i].token, sizeof(made[i].token), "%s", line + strlen(want));
    const char *t = made[i].token;
    cr_assert_eq(strlen(t), 5 + 43, "token '%s' is not kiln_ + 43 base64url characters", t);
    cr_assert(strncmp(t, "kiln_", 5) == 0);
    for (size_t k = 5; k < strlen(t); k++) cr_assert(isalnum((unsigned char)t[k]) || t[k] == '-' || t[k] == '_');
    line = strtok_r(NULL, "\n", &save);
    cr_assert(line && strncmp(line, "blake2b:", 8) == 0, "no tokens-file line after the token");
    snprintf(made[i].line, sizeof(made[i].line), "%s", line);
    char tail[80];
    cr_assert_eq(sscanf(line + 8, "%64[0-9a-f] %63s", made[i].hex, tail), 2, "%s", line);
    cr_assert_str_eq(tail, name);
    line = strtok_r(NULL, "\n", &save);
  }
  cr_assert_null(line, "more output than expected: %s", line);
}

Test(token, new_prints_tokens_whose_lines_kilnd_accepts) {
  made_t m[2];
  token_new("alice bob", m, 2);
  cr_assert_str_neq(m[0].token, m[1].token);
  /* the hash is BLAKE2b-256 of the token's bytes, as coreutils computes it */
  for (int i = 0; i < 2; i++) {
    char cmd[1024], out[256];
    snprintf(cmd, sizeof(cmd), "printf %%s '%s' | b2sum -l 256", m[i].token);
    cr_assert_eq(run(cmd, out, sizeof(out)), 0, "b2sum: %s", out);
    cr_assert(strncmp(out, m[i].hex, 64) == 0, "b2sum says %.64s, the line says %s", out, m[i].hex);
  }

  /* a file of hashed lines, one of them also listing a plaintext token, and upper-case hex */
  char dir[] = "/tmp/kiln-token-test-XXXXXX";
  cr_assert(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof(path), "%s/tokens", dir);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  char upper[65];
  for (int k = 0; k < 64; k++) upper[k] = (char)toupper((unsigned char)m[1].hex[k]);
  upper[64] = 0;
  fprintf(f, "# made by kiln token new\n%s\nblake2b:%s,carol-plaintext-0123456789 bob stats=all\n", m[0].line,
          upper);
  fclose(f);
  const char *extra[] = {"--tokens", path, NULL};
  kiln_test_daemon_t d;
  ASSERT_OK(kiln_test_daemon_start(&d, extra));
  struct {
    const char *token, *tenant;
  } cases[] = {{m[0].token, "alice"}, {m[1].token, "bob"}, {"carol-plaintext-0123456789", "bob"}};
  for (size_t i = 0; i < 3; i++) {
    kiln_client_t *c = fixture_connect(d.unix_url);
    kiln_hello_t h;
    ASSERT_OK(kiln_client_hello(c, cases[i].token, "test", &h));
    cr_expect_str_eq(h.tenant, cases[i].tenant);
    kiln_client_destroy(c);
  }
  /* what the file holds is not a credential */
  char as_listed[80];
  snprintf(as_listed, sizeof(as_listed), "blake2b:%s", m[0].hex);
  const char *not_tokens[] = {as_listed, m[0].hex, upper};
  for (size_t i = 0; i < 3; i++) {
    kiln_client_t *c = fixture_connect(d.unix_url);
    kiln_status_t s = kiln_client_hello(c, not_tokens[i], "test", NULL);
    cr_expect(s && kiln_status_code(s) == KILN_E_UNAUTHENTICATED, "the hash '%s' was accepted as a token",
              not_tokens[i]);
    kiln_status_free(s);
    kiln_client_destroy(c);
  }
  int ws;
  ASSERT_OK(kiln_test_daemon_stop(&d, SIGTERM, 20000, &ws));
  cr_expect(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);

  /* a hash with a digit missing: kilnd does not start, and says why without quoting it */
  f = fopen(path, "w");
  cr_assert(f);
  fprintf(f, "%s\nblake2b:%.63s bob\n", m[0].line, m[1].hex);
  fclose(f);
  char cmd[512], out[4096];
  snprintf(cmd, sizeof(cmd), "timeout 60 '%s' --tokens '%s' --listen unix:%s/k.sock --cache-dir %s/cache 2>&1",
           getenv("KILND"), path, dir, dir);
  int rc = run(cmd, out, sizeof(out));
  cr_assert(rc != 0 && rc != 124, "kilnd started on a malformed hash (exit %d): %s", rc, out);
  cr_expect(strstr(out, "line 2") && strstr(out, "64 hex digits"), "%s", out);
  char partial[40];
  snprintf(partial, sizeof(partial), "%.32s", m[1].hex);
  cr_expect_null(strstr(out, partial), "the error quotes the hash: %s", out);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s/cache'", dir);
  cr_assert_eq(run(cmd, out, sizeof(out)), 0);
  unlink(path);
  rmdir(dir);
}

Test(token, usage_errors) {
  char cmd[512], out[1024];
  snprintf(cmd, sizeof(cmd), "'%s' token new 'no spaces' 2>&1", getenv("KILN_CLI"));
  cr_expect_eq(run(cmd, out, sizeof(out)), 2, "%s", out);
  cr_expect(strstr(out, "is not a tenant name"), "%s", out);
  snprintf(cmd, sizeof(cmd), "'%s' token old 2>&1", getenv("KILN_CLI"));
  cr_expect_eq(run(cmd, out, sizeof(out)), 2, "%s", out);
  /* no tenant: one token with a placeholder to edit */
  made_t m;
  token_new("TENANT", &m, 1);
}
