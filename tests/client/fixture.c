#include "fixture.h"

#include <signal.h>
#include <sys/wait.h>

kiln_test_daemon_t g_kilnd;
kiln_client_t *g_client;

/* Generous: a reply that does not come is a failure, not a hang of the suite. */
#define REPLY_TIMEOUT_MS 60000

kiln_client_t *fixture_connect(const char *url) {
  kiln_client_t *c;
  ASSERT_OK(kiln_client_create(url, &c));
  kiln_client_set_timeout(c, REPLY_TIMEOUT_MS);
  return c;
}

void fixture_up_with(const char *const *extra) {
  ASSERT_OK(kiln_test_daemon_start(&g_kilnd, extra));
  g_client = fixture_connect(g_kilnd.tcp_url);
}

void fixture_up(void) { fixture_up_with(NULL); }

void fixture_down(void) {
  kiln_client_destroy(g_client);
  g_client = NULL;
  if (g_kilnd.pid <= 0) return; /* the test stopped it itself */
  int st;
  ASSERT_OK(kiln_test_daemon_stop(&g_kilnd, SIGTERM, 15000, &st));
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "kilnd did not exit 0 on SIGTERM (wait status 0x%x)", st);
}
