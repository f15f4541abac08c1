#include "device/cuda/arch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kiln_cuda_arch_name(int major, int minor, char *out, size_t cap) {
  snprintf(out, cap, "sm_%d%d", major, minor);
}

/* "sm_90a" -> 90 and 'a'; false if not of that shape. */
static bool parse(const char *s, int *cc, char *suffix) {
  if (strncmp(s, "sm_", 3) != 0) return false;
  char *end;
  long v = strtol(s + 3, &end, 10);
  if (end == s + 3 || v < 10 || v > 999) return false;
  *suffix = *end;
  if (*end && (end[1] || (*end != 'a' && *end != 'f'))) return false;
  *cc = (int)v;
  return true;
}

bool kiln_cuda_arch_compatible(const char *code, const char *device, char *why, size_t cap) {
  int c, d;
  char cs, ds;
  if (!parse(code, &c, &cs)) {
    snprintf(why, cap, "\"%s\" is not an NVIDIA target (expected e.g. sm_90)", code);
    return false;
  }
  if (!parse(device, &d, &ds)) {
    snprintf(why, cap, "device reports unknown architecture \"%s\"", device);
    return false;
  }
  if (c > d) {
    snprintf(why, cap, "code is for %s, newer than the device's %s", code, device);
    return false;
  }
  if ((cs == 'a' && c != d) || (cs == 'f' && c / 10 != d / 10)) {
    snprintf(why, cap, "code is for %s, which runs only on that architecture, not %s", code, device);
    return false;
  }
  return true;
}
