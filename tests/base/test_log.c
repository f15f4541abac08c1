/* Log helpers: level names and quoting (the lines themselves go to stderr). */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"

Test(log, level_parse) {
  cr_assert_eq(kiln_log_level_parse("debug"), KILN_LOG_DEBUG);
  cr_assert_eq(kiln_log_level_parse("info"), KILN_LOG_INFO);
  cr_assert_eq(kiln_log_level_parse("warn"), KILN_LOG_WARN);
  cr_assert_eq(kiln_log_level_parse("error"), KILN_LOG_ERROR);
  cr_assert_eq(kiln_log_level_parse("INFO"), -1);
  cr_assert_eq(kiln_log_level_parse(""), -1);
  cr_assert_eq(kiln_log_level_parse("warning"), -1);
  kiln_log_set_level(KILN_LOG_ERROR);
  cr_assert_eq(kiln_log_get_level(), KILN_LOG_ERROR);
}

Test(log, quote_escapes) {
  char buf[64];
  cr_assert_str_eq(kiln_log_quote(buf, sizeof(buf), "plain"), "\"plain\"");
  cr_assert_str_eq(kiln_log_quote(buf, sizeof(buf), "a \"b\" \\c\nd\te"),
                   "\"a \\\"b\\\" \\\\c\\nd e\"");
  cr_assert_str_eq(kiln_log_quote(buf, sizeof(buf), ""), "\"\"");
  cr_assert_str_eq(kiln_log_quote(buf, sizeof(buf), NULL), "\"\"");
  cr_assert_str_eq(kiln_log_quote(buf, 2, "abc"), "\"\"");
}

Test(log, quote_truncates_within_cap) {
  char long_s[200];
  memset(long_s, '"', sizeof(long_s) - 1);
  long_s[sizeof(long_s) - 1] = 0;
  for (size_t cap = 3; cap < 40; cap++) {
    char buf[64];
    memset(buf, 'Z', sizeof(buf));
    const char *q = kiln_log_quote(buf, cap, long_s);
    size_t n = strlen(q);
    cr_assert_lt(n, cap, "cap %zu", cap);
    cr_assert_eq(q[0], '"');
    cr_assert_eq(q[n - 1], '"');
    cr_assert_eq(buf[cap], 'Z', "wrote past cap %zu", cap);
    /* Never half an escape: an even number of backslashes before the closing quote. */
    size_t bs = 0;
    for (size_t i = n - 1; i > 1 && q[i - 1] == '\\'; i--) bs++;
    cr_assert_eq(bs % 2, 0, "cap %zu: '%s'", cap, q);
  }
}

Test(log, lines_do_not_crash, .init = cr_redirect_stderr) {
  kiln_log_set_level(KILN_LOG_DEBUG);
  kiln_log_set_process("worker-0");
  char big[5000];
  memset(big, 'v', sizeof(big) - 1);
  big[sizeof(big) - 1] = 0;
  KILN_LOG_INFO("test", "k=%s", big);
  KILN_LOG_DEBUG("test", "%s", "");
  KILN_LOG_ERROR("test", "n=%d", 5);
  kiln_log_set_level(KILN_LOG_WARN);
  KILN_LOG_INFO("hidden", "x=1");
  fflush(stderr);
  FILE *f = cr_get_redirected_stderr();
  char line[8192];
  cr_assert_not_null(fgets(line, sizeof(line), f));
  cr_assert(strstr(line, "level=info proc=worker-0 event=test k=vvv"), "%s", line);
  cr_assert_eq(line[strlen(line) - 1], '\n');
  cr_assert_leq(strlen(line), 2048);
  cr_assert_not_null(fgets(line, sizeof(line), f));
  cr_assert(strstr(line, "level=debug proc=worker-0 event=test"), "%s", line);
  cr_assert_not_null(fgets(line, sizeof(line), f));
  cr_assert(strstr(line, "event=test n=5"), "%s", line);
  cr_assert_null(fgets(line, sizeof(line), f), "a line below the level was written");
}
