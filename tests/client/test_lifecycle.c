/* Stopping kilnd: SIGTERM and SIGINT drain and exit 0, also with requests in flight. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "fixture.h"

TestSuite(lifecycle, .init = fixture_up, .fini = fixture_down, .timeout = 60);

static void stop_expect_zero(int sig) {
  int st;
  ASSERT_OK(kiln_test_daemon_stop(&g_kilnd, sig, 15000, &st));
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "kilnd exited with wait status 0x%x on %s",
            st, sig ? strsignal(sig) : "its own");
}

Test(lifecycle, sigterm_exits_zero_and_stops_listening) {
  ASSERT_OK(kiln_client_ping(g_client));
  char url[256];
  snprintf(url, sizeof(url), "%s", g_kilnd.tcp_url);
  stop_expect_zero(SIGTERM);
  /* The connection it had is closed... */
  ASSERT_CODE(kiln_client_ping(g_client), KILN_E_UNAVAILABLE);
  /* ...and nothing listens any more. */
  kiln_client_t *c = NULL;
  ASSERT_CODE(kiln_client_create(url, &c), KILN_E_UNAVAILABLE);
}

Test(lifecycle, sigint_exits_zero) { stop_expect_zero(SIGINT); }

Test(lifecycle, sigterm_with_requests_in_flight) {
  static float data[1 << 18];
  kiln_tensor_desc_t d = {.dtype = KILN_FLOAT32, .ndim = 1, .shape = {1 << 18},
                          .nbytes = sizeof(data)};
  uint32_t id;
  for (int i = 0; i < 2000; i++) {
    if (i % 50 == 0) ASSERT_OK(kiln_client_submit_upload(g_client, NULL, &d, data, &id));
    else ASSERT_OK(kiln_client_submit_ping(g_client, &id));
  }
  ASSERT_OK(kiln_client_flush(g_client));
  kill(g_kilnd.pid, SIGTERM);
  /* Every request gets a reply or the connection ends: never a hang. */
  size_t replies = 0;
  kiln_status_t s;
  kiln_reply_t *r;
  while (!(s = kiln_client_wait_any(g_client, &r)) && r) {
    replies++;
    kiln_reply_free(r);
  }
  if (s) {
    cr_expect_eq(kiln_status_code(s), KILN_E_UNAVAILABLE, "%s", kiln_status_message(s));
    kiln_status_free(s);
  }
  cr_log_info("%zu of 2000 requests answered before kilnd closed the connection", replies);
  /* Already signalled: wait for the exit without a second signal (a second SIGTERM may
   * mean "stop now" to a daemon that is draining). */
  stop_expect_zero(0);
}
