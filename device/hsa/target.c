#include "device/hsa/target.h"

#include <stdio.h>
#include <string.h>

#define ISA_PREFIX "amdgcn-amd-amdhsa--"

static const char *strip(const char *id) {
  size_t n = strlen(ISA_PREFIX);
  return strncmp(id, ISA_PREFIX, n) == 0 ? id + n : id;
}

void kiln_hsa_target_from_isa(const char *isa_name, char *out, size_t cap) {
  snprintf(out, cap, "%s", strip(isa_name));
}

/* The setting of `feature` in a target id: '+', '-', or 0 when not mentioned. */
static char feature_setting(const char *id, const char *feature) {
  size_t fl = strlen(feature);
  for (const char *p = strchr(id, ':'); p; p = strchr(p + 1, ':')) {
    if (strncmp(p + 1, feature, fl) == 0 && (p[1 + fl] == '+' || p[1 + fl] == '-'))
      return p[1 + fl];
  }
  return 0;
}

bool kiln_hsa_target_compatible(const char *code, const char *agent, char *why, size_t cap) {
  code = strip(code);
  agent = strip(agent);
  size_t cp = strcspn(code, ":"), ap = strcspn(agent, ":");
  if (cp != ap || strncmp(code, agent, cp) != 0) {
    snprintf(why, cap, "code is for %.*s, the GPU is %.*s", (int)cp, code, (int)ap, agent);
    return false;
  }
  /* Walk the code's features; each must be set the same way on the agent. */
  for (const char *p = strchr(code, ':'); p; p = strchr(p + 1, ':')) {
    const char *f = p + 1;
    size_t fl = strcspn(f, ":");
    if (fl < 2 || (f[fl - 1] != '+' && f[fl - 1] != '-')) {
      snprintf(why, cap, "malformed target id \"%s\"", code);
      return false;
    }
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(fl - 1), f);
    char want = f[fl - 1], have = feature_setting(agent, name);
    if (have != want) {
      if (have)
        snprintf(why, cap, "code needs %s%c, the GPU runs %s%c (%s)", name, want, name, have, agent);
      else
        snprintf(why, cap, "code needs %s%c, the GPU (%s) has no %s setting", name, want, agent, name);
      return false;
    }
  }
  return true;
}
