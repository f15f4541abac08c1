#include "tests/server/pki.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

void pki_make(char *dir, size_t cap) {
  snprintf(dir, cap, "/tmp/kiln-pki-XXXXXX");
  cr_assert(mkdtemp(dir), "mkdtemp");
  const char *src = getenv("KILN_SOURCE_ROOT");
  cr_assert(src, "set KILN_SOURCE_ROOT to the repository (make_pki.sh is there)");
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "sh '%s/tests/server/make_pki.sh' '%s'", src, dir);
  cr_assert(system(cmd) == 0, "make_pki.sh failed");
}

const char *pki_path(const char *dir, const char *name) {
  static char paths[8][256];
  static int next;
  char *p = paths[next++ % 8];
  snprintf(p, sizeof(paths[0]), "%s/%s", dir, name);
  return p;
}

void pki_remove(const char *dir) {
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (dir[0] && system(cmd) != 0) {}
}
