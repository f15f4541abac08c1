/* What every client integration test shares: one real kilnd per test (started in .init,
 * stopped in .fini, which checks that it exits 0 on SIGTERM) and a libkiln client on it. */
#ifndef KILN_TESTS_CLIENT_FIXTURE_H
#define KILN_TESTS_CLIENT_FIXTURE_H

#include <criterion/criterion.h>

#include "daemon.h"
#include "kiln/client.h"

extern kiln_test_daemon_t g_kilnd;
extern kiln_client_t *g_client; /* connected over TCP */

void fixture_up(void);
void fixture_down(void);
void fixture_up_with(const char *const *extra_kilnd_args);
/* A new client (the caller destroys it) with the tests' reply timeout. */
kiln_client_t *fixture_connect(const char *url);

/* Fails the test with the status' code and message. */
#define ASSERT_OK(expr)                                                                    \
  do {                                                                                     \
    kiln_status_t s_ = (expr);                                                             \
    if (s_)                                                                                \
      cr_assert_fail("%s failed: %s: %s", #expr, kiln_code_name(kiln_status_code(s_)),           \
               kiln_status_message(s_));                                                   \
  } while (0)

/* Expects an error with this code; frees it. */
#define ASSERT_CODE(expr, code)                                                            \
  do {                                                                                     \
    kiln_status_t s_ = (expr);                                                             \
    cr_assert(s_ != KILN_OK, "%s succeeded; expected %s", #expr, kiln_code_name(code));    \
    cr_assert_eq(kiln_status_code(s_), (code), "%s: expected %s, got %s: %s", #expr,       \
                 kiln_code_name(code), kiln_code_name(kiln_status_code(s_)),               \
                 kiln_status_message(s_));                                                 \
    kiln_status_free(s_);                                                                  \
  } while (0)

#endif
