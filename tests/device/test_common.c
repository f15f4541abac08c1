/* The checks every backend shares (device/common.h). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "device/common.h"

static const kiln_device_info_t info = {.id = "gpu:3", .arch = "arch_9"};

/* A stand-in rule: code for arch_N runs on arch_M when N <= M. */
static bool older_runs(const char *code, const char *arch, char *why, size_t cap) {
  int n, m;
  if (sscanf(code, "arch_%d", &n) != 1 || sscanf(arch, "arch_%d", &m) != 1 || n > m) {
    snprintf(why, cap, "%s is not older than %s", code, arch);
    return false;
  }
  return true;
}

static void expect_refused(kiln_status_t st, const char *needle) {
  cr_assert_eq(kiln_status_code(st), KILN_E_INVALID_ARGUMENT);
  cr_expect(strstr(kiln_status_message(st), needle), "\"%s\" lacks \"%s\"", kiln_status_message(st), needle);
  kiln_status_free(st);
}

Test(common, an_artifact_runs_where_its_format_and_target_fit) {
  kiln_artifact_t art = {.format = KILN_FORMAT_PTX};
  strcpy(art.target, "arch_8");
  cr_expect_eq(kiln_device_check_artifact(&info, &art, KILN_FORMAT_PTX, older_runs), KILN_OK);
  expect_refused(kiln_device_check_artifact(&info, &art, KILN_FORMAT_HSACO, older_runs),
                 "module for target \"arch_8\" cannot run on gpu:3: compile it for arch_9");
  strcpy(art.target, "arch_10");
  expect_refused(kiln_device_check_artifact(&info, &art, KILN_FORMAT_PTX, older_runs),
                 "module cannot run on gpu:3: arch_10 is not older than arch_9; compile it for arch_9");
}

Test(common, ranges_stay_inside_their_buffer) {
  cr_expect_eq(kiln_device_check_range(16, 0, 16), KILN_OK);
  cr_expect_eq(kiln_device_check_range(16, 16, 0), KILN_OK);
  expect_refused(kiln_device_check_range(16, 8, 9), "copy of 9 bytes at offset 8");
  expect_refused(kiln_device_check_range(16, 17, 0), "outside a buffer of 16 bytes");
  expect_refused(kiln_device_check_range(16, 8, UINT64_MAX), "outside");
}
