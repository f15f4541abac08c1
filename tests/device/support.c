#include "support.h"

#include <criterion/criterion.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *kiln_test_data_dir(void) {
  static char dir[4096];
  if (dir[0]) return dir;
  const char *env = getenv("KILN_TEST_DATA");
  if (env && *env) {
    snprintf(dir, sizeof dir, "%s", env);
    return dir;
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    snprintf(dir, sizeof dir, ".");
    return dir;
  }
  exe[n] = '\0';
  snprintf(dir, sizeof dir, "%s", dirname(exe));
  return dir;
}

uint8_t *kiln_test_read_data(const char *name, size_t *out_len) {
  char path[8192];
  snprintf(path, sizeof path, "%s/%s", kiln_test_data_dir(), name);
  FILE *f = fopen(path, "rb");
  if (!f) cr_assert_fail("test data %s missing (set KILN_TEST_DATA to the directory holding it)", path);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)len + 1);
  cr_assert(buf);
  cr_assert_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
  buf[len] = 0;
  fclose(f);
  *out_len = (size_t)len;
  return buf;
}
