/* Status values: code, message, location, annotation, the error table's names. (The
 * static out-of-memory status cannot be reached without failing malloc; not tested.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"

Test(status, make_and_read) {
  kiln_status_t s = KILN_STATUS(KILN_E_NOT_FOUND, "no tensor %d on %s", 42, "cpu:0");
  int line = __LINE__ - 1;
  cr_assert_not_null(s);
  cr_assert_eq(kiln_status_code(s), KILN_E_NOT_FOUND);
  cr_assert_str_eq(kiln_status_message(s), "no tensor 42 on cpu:0");
  char where[64];
  snprintf(where, sizeof(where), "test_status.c:%d", line);
  cr_assert_str_eq(kiln_status_where(s), where, "where is the file's base name and line");
  kiln_status_free(s);
}

Test(status, ok_is_null) {
  cr_assert_null(KILN_OK);
  cr_assert_eq(kiln_status_code(KILN_OK), KILN_E_OK);
  cr_assert_str_eq(kiln_status_message(KILN_OK), "ok");
  cr_assert_str_eq(kiln_status_where(KILN_OK), "");
  kiln_status_free(KILN_OK);
  cr_assert_null(kiln_status_annotate(KILN_OK, "ctx"));
}

Test(status, an_error_made_with_code_ok_is_internal) {
  kiln_status_t s = KILN_STATUS(KILN_E_OK, "oops");
  cr_assert_not_null(s);
  cr_assert_eq(kiln_status_code(s), KILN_E_INTERNAL);
  kiln_status_free(s);
}

Test(status, long_messages_are_kept_whole) {
  char big[3000];
  memset(big, 'm', sizeof(big) - 1);
  big[sizeof(big) - 1] = 0;
  kiln_status_t s = KILN_STATUS(KILN_E_COMPILE, "diagnostics: %s!", big);
  cr_assert_eq(strlen(kiln_status_message(s)), strlen("diagnostics: ") + sizeof(big) - 1 + 1);
  cr_assert_eq(kiln_status_message(s)[strlen(kiln_status_message(s)) - 1], '!');
  kiln_status_free(s);
  /* A long path keeps the base name. */
  s = kiln_status_make(KILN_E_INTERNAL, "/a/very/long/path/that/goes/on/and/on/and/on/and/on/to/file.c",
                       7, "x");
  cr_assert_str_eq(kiln_status_where(s), "file.c:7");
  kiln_status_free(s);
}

Test(status, annotate_prepends_context) {
  kiln_status_t s = KILN_STATUS(KILN_E_DEVICE, "out of registers");
  char where[64];
  snprintf(where, sizeof(where), "%s", kiln_status_where(s));
  s = kiln_status_annotate(s, "launch of %s", "saxpy");
  s = kiln_status_annotate(s, "request %d", 3);
  cr_assert_str_eq(kiln_status_message(s), "request 3: launch of saxpy: out of registers");
  cr_assert_eq(kiln_status_code(s), KILN_E_DEVICE);
  cr_assert_str_eq(kiln_status_where(s), where, "annotation keeps the origin");
  kiln_status_free(s);
}

static kiln_status_t fails(int *reached) {
  KILN_RETURN_IF_ERROR(KILN_STATUS(KILN_E_TIMEOUT, "late"));
  *reached = 1;
  return KILN_OK;
}

static kiln_status_t passes(int *reached) {
  KILN_RETURN_IF_ERROR(KILN_OK);
  *reached = 1;
  return KILN_OK;
}

Test(status, return_if_error) {
  int reached = 0;
  kiln_status_t s = fails(&reached);
  cr_assert_eq(kiln_status_code(s), KILN_E_TIMEOUT);
  cr_assert_eq(reached, 0);
  kiln_status_free(s);
  cr_assert_null(passes(&reached));
  cr_assert_eq(reached, 1);
}

/* The table of docs/protocol.md §2, by number and name. */
Test(status, code_names) {
  static const char *const names[] = {
      "E_OK", "E_INVALID_ARGUMENT", "E_NO_METHOD", "E_UNAUTHENTICATED", "E_PERMISSION",
      "E_NOT_FOUND", "E_RESOURCE_EXHAUSTED", "E_COMPILE", "E_COMPILER_CRASHED", "E_DEVICE",
      "E_DEVICE_FAULT", "E_TIMEOUT", "E_CANCELLED", "E_UNAVAILABLE", "E_INTERNAL"};
  cr_assert_eq(sizeof(names) / sizeof(names[0]), KILN_E_COUNT_);
  for (int i = 0; i < KILN_E_COUNT_; i++) {
    cr_assert_str_eq(kiln_code_name((kiln_code_t)i), names[i]);
    kiln_code_t c = KILN_E_COUNT_;
    cr_assert(kiln_code_from_name(names[i], &c));
    cr_assert_eq(c, (kiln_code_t)i);
  }
  cr_assert_eq(KILN_E_INVALID_ARGUMENT, 1);
  cr_assert_eq(KILN_E_INTERNAL, 14);
  cr_assert_str_eq(kiln_code_name(KILN_E_COUNT_), "E_UNKNOWN");
  cr_assert_str_eq(kiln_code_name((kiln_code_t)-1), "E_UNKNOWN");
  kiln_code_t c = KILN_E_DEVICE;
  cr_assert_not(kiln_code_from_name("E_NOPE", &c));
  cr_assert_not(kiln_code_from_name("e_internal", &c));
  cr_assert_not(kiln_code_from_name("", &c));
  cr_assert_eq(c, KILN_E_DEVICE, "left alone on failure");
}
