/* libkiln and the CLI on tls: URLs against the real kilnd, with certificates made at test
 * time (tests/server/make_pki.sh): verification on by default, the CA and client certificate
 * options, and transfers through the TLS path. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "tests/server/pki.h"

static char pki[128];

static const char *pem(const char *name) { return pki_path(pki, name); }

static void make_pki(void) {
  pki_make(pki, sizeof(pki));
  unsetenv("KILN_TLS_CA");
  unsetenv("KILN_TLS_CERT");
  unsetenv("KILN_TLS_KEY");
}

static void up(const char *const *more) {
  const char *args[16] = {"--listen", "tls:127.0.0.1:0", "--tls-cert", pem("server.pem"),
                          "--tls-key", pem("server.key")};
  int n = 6;
  for (; more && *more; more++) args[n++] = *more;
  args[n] = NULL;
  fixture_up_with(args);
  cr_assert(g_kilnd.tls_url[0], "no tls: listener reported");
}

/* Two TLS threads on each side whatever the machine's cores (a small one gets none by
 * default): large transfers go through both pools. */
static void up_plain(void) {
  make_pki();
  setenv("KILN_TLS_THREADS", "2", 1);
  up(NULL);
}

static void down(void) {
  fixture_down();
  pki_remove(pki);
}

/* No suite .init: Criterion runs a suite's .init and then a test's own, so a suite-wide
 * daemon would be started and then orphaned by the tests that start their own. */
TestSuite(client_tls, .fini = down, .timeout = 240);

static kiln_client_t *connect_tls(const kiln_client_options_t *o) {
  kiln_client_t *c = NULL;
  ASSERT_OK(kiln_client_create_with(g_kilnd.tls_url, o, &c));
  kiln_client_set_timeout(c, 60000);
  return c;
}

Test(client_tls, hello_pipeline_and_sixty_four_mib_both_ways, .init = up_plain) {
  kiln_client_options_t o = {.tls_ca = pem("ca.pem")};
  kiln_client_t *c = connect_tls(&o);
  kiln_hello_t h;
  ASSERT_OK(kiln_client_hello(c, NULL, "test_tls", &h));
  cr_assert_eq(h.version, 1);
  for (int i = 0; i < 1000; i++) {
    uint32_t id;
    ASSERT_OK(kiln_client_submit_ping(c, &id));
  }
  ASSERT_OK(kiln_client_wait_all(c));
  enum { N = 16 << 20 };
  float *v = malloc((size_t)N * 4), *back = malloc((size_t)N * 4);
  for (uint32_t i = 0; i < N; i++) v[i] = (float)i - 3.5f;
  kiln_tensor_desc_t desc = {.dtype = KILN_FLOAT32, .ndim = 1, .shape = {N},
                             .nbytes = (uint64_t)N * 4};
  uint64_t id;
  ASSERT_OK(kiln_client_upload(c, NULL, &desc, v, &id));
  ASSERT_OK(kiln_client_download_into(c, id, back, (size_t)N * 4, NULL));
  cr_assert(memcmp(v, back, (size_t)N * 4) == 0, "the tensor came back different");
  ASSERT_OK(kiln_client_free_tensor(c, id));
  free(v);
  free(back);
  kiln_client_destroy(c);
}

Test(client_tls, the_ca_option_and_the_environment, .init = up_plain) {
  /* The system's store does not know the test CA: verification is on by default. */
  kiln_client_t *c = NULL;
  kiln_status_t s = kiln_client_create(g_kilnd.tls_url, &c);
  cr_assert(s, "connected to a daemon whose certificate no trusted CA signed");
  cr_assert_eq(kiln_status_code(s), KILN_E_UNAVAILABLE);
  cr_assert(strstr(kiln_status_message(s), "not trusted"), "%s", kiln_status_message(s));
  kiln_status_free(s);
  kiln_client_options_t other = {.tls_ca = pem("other-ca.pem")};
  ASSERT_CODE(kiln_client_create_with(g_kilnd.tls_url, &other, &c), KILN_E_UNAVAILABLE);
  setenv("KILN_TLS_CA", pem("ca.pem"), 1);
  c = connect_tls(NULL);
  ASSERT_OK(kiln_client_ping(c));
  kiln_client_destroy(c);
  unsetenv("KILN_TLS_CA");
  kiln_client_options_t missing = {.tls_ca = pem("no-such.pem")};
  ASSERT_CODE(kiln_client_create_with(g_kilnd.tls_url, &missing, &c), KILN_E_INVALID_ARGUMENT);
}

Test(client_tls, the_cli, .init = up_plain) {
  char cmd[1024];
  snprintf(cmd, sizeof(cmd), "'%s' --url %s --tls-ca '%s' ping >/dev/null 2>&1",
           getenv("KILN_CLI"), g_kilnd.tls_url, pem("ca.pem"));
  int st = system(cmd);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "kiln ping over tls: status %d", st);
  snprintf(cmd, sizeof(cmd), "'%s' --url %s ping >/dev/null 2>&1", getenv("KILN_CLI"),
           g_kilnd.tls_url);
  st = system(cmd);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 3, "without the CA: status %d (want 3)", st);
}

/* A daemon whose certificate does not name the host connected to. */
static void up_other_address(void) {
  make_pki();
  const char *args[] = {"--listen", "tls:127.0.0.2:0", "--tls-cert", pem("server.pem"),
                        "--tls-key", pem("server.key"), NULL};
  fixture_up_with(args);
}

Test(client_tls, a_certificate_for_another_name_is_refused, .init = up_other_address) {
  cr_assert(strncmp(g_kilnd.tls_url, "tls:127.0.0.2:", 14) == 0, "%s", g_kilnd.tls_url);
  kiln_client_options_t o = {.tls_ca = pem("ca.pem")};
  kiln_client_t *c = NULL;
  kiln_status_t s = kiln_client_create_with(g_kilnd.tls_url, &o, &c);
  cr_assert(s, "connected although the certificate names 127.0.0.1 and localhost only");
  cr_assert(strstr(kiln_status_message(s), "mismatch"), "%s", kiln_status_message(s));
  kiln_status_free(s);
}

static void up_client_certs(void) {
  make_pki();
  const char *more[] = {"--tls-client-ca", pem("ca.pem"), NULL};
  up(more);
}

Test(client_tls, client_certificates, .init = up_client_certs) {
  kiln_client_options_t none = {.tls_ca = pem("ca.pem")};
  kiln_client_t *c = NULL;
  /* The handshake completes on the client's side; the refusal comes with the first read. */
  kiln_status_t s = kiln_client_create_with(g_kilnd.tls_url, &none, &c);
  if (!s) {
    kiln_client_set_timeout(c, 20000);
    s = kiln_client_ping(c);
    kiln_client_destroy(c);
  }
  cr_assert(s, "a client without a certificate was answered");
  cr_assert_eq(kiln_status_code(s), KILN_E_UNAVAILABLE, "%s", kiln_status_message(s));
  cr_assert(strstr(kiln_status_message(s), "certificate"), "%s", kiln_status_message(s));
  kiln_status_free(s);
  kiln_client_options_t stranger = {.tls_ca = pem("ca.pem"), .tls_cert = pem("other-client.pem"),
                                    .tls_key = pem("other-client.key")};
  s = kiln_client_create_with(g_kilnd.tls_url, &stranger, &c);
  if (!s) {
    kiln_client_set_timeout(c, 20000);
    s = kiln_client_ping(c);
    kiln_client_destroy(c);
  }
  cr_assert(s, "a client with a certificate from another CA was answered");
  kiln_status_free(s);
  kiln_client_options_t member = {.tls_ca = pem("ca.pem"), .tls_cert = pem("client.pem"),
                                  .tls_key = pem("client.key")};
  c = connect_tls(&member);
  ASSERT_OK(kiln_client_ping(c));
  kiln_client_destroy(c);
}
