/* Daily use (issue 16), the daemon's side: start-up options that name what does not exist
 * refuse to start with the reason; the tenant's tensors listed and freed; session-bound
 * tensors; module ids across restarts; the unix socket's mode and group. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "tests/server/harness.h"

/* --- --devices and --pin name what exists ------------------------------------------------ */

static void refused(const char *const *args, const char *needle) {
  char log[4096];
  int rc = daemon_start_fails(args, log, sizeof(log));
  cr_assert_eq(rc, 1, "kilnd %s %s: exit status %d, expected a refusal (1)\n%s", args[0], args[1],
               rc, log);
  cr_assert(strstr(log, needle), "the refusal does not say '%s':\n%s", needle, log);
}

static void accepted(const char *const *args) {
  char log[4096];
  int rc = daemon_start_fails(args, log, sizeof(log));
  cr_assert_eq(rc, 0, "kilnd %s %s did not start (%d):\n%s", args[0], args[1], rc, log);
}

Test(start, devices_that_do_not_exist_are_refused) {
  refused((const char *const[]){"--devices", "cuda:7", NULL}, "--devices names 'cuda:7'");
  refused((const char *const[]){"--devices", "cpu:1", NULL}, "does not have");
  refused((const char *const[]){"--devices", "cpu,nosuch", NULL}, "'nosuch'");
  /* A backend with no device here is named with the probe's reason. */
  refused((const char *const[]){"--devices", "cuda", NULL}, "cuda: ");
  accepted((const char *const[]){"--devices", "cpu", NULL});
  accepted((const char *const[]){"--devices", "cpu:0", NULL});
}

Test(start, pins_of_absent_cores_or_devices_are_refused) {
  refused((const char *const[]){"--pin", "cpu:0=4095", NULL}, "core 4095 is not one kilnd may run on");
  refused((const char *const[]){"--pin", "cpu:0=0,9999", NULL}, "core 9999");
  refused((const char *const[]){"--pin", "cuda:3=0", NULL}, "serves no device 'cuda:3'");
  refused((const char *const[]){"--pin", "cpu=0", NULL}, "serves no device 'cpu'");
  refused((const char *const[]){"--pin", "cpu:0=2-1", NULL}, "not a list of cores");
  refused((const char *const[]){"--pin", "cpu:0=0,", NULL}, "not a list of cores");
  accepted((const char *const[]){"--pin", "cpu:0=0", NULL});
}
