#include "device/registry.h"

#include <stdio.h>
#include <string.h>

static const kiln_backend_t *const backends[] = {
    &kiln_backend_cpu,
    &kiln_backend_hsa,
    &kiln_backend_cuda,
};

#define NUM_BACKENDS (sizeof(backends) / sizeof(backends[0]))

size_t kiln_device_backend_count(void) { return NUM_BACKENDS; }

const kiln_backend_t *kiln_device_backend_at(size_t i) {
  return i < NUM_BACKENDS ? backends[i] : NULL;
}

const kiln_backend_t *kiln_device_backend_find(const char *kind) {
  for (size_t i = 0; i < NUM_BACKENDS; i++)
    if (strcmp(backends[i]->kind, kind) == 0) return backends[i];
  return NULL;
}

/* Device indices fit in 16 bits: no host has more devices, and a short bound keeps
 * "cuda:99999999999999999999" from overflowing. */
#define MAX_INDEX 0xFFFFu

kiln_status_t kiln_device_id_parse(const char *id, const kiln_backend_t **out_backend,
                                   uint32_t *out_index) {
  if (!id || !*id) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "empty device id (expected e.g. \"cpu:0\")");
  const char *colon = strchr(id, ':');
  size_t kind_len = colon ? (size_t)(colon - id) : strlen(id);
  const kiln_backend_t *found = NULL;
  for (size_t i = 0; i < NUM_BACKENDS; i++) {
    if (strlen(backends[i]->kind) == kind_len && memcmp(backends[i]->kind, id, kind_len) == 0)
      found = backends[i];
  }
  if (!found)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "device id \"%s\": unknown kind (expected cpu, hsa or cuda, as in \"cpu:0\")", id);
  uint32_t index = 0;
  if (colon) {
    const char *p = colon + 1;
    if (*p == '\0')
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "device id \"%s\": missing index after ':'", id);
    if (p[strspn(p, "0123456789")] != '\0')
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "device id \"%s\": index must be a decimal number", id);
    if (p[0] == '0' && p[1] != '\0')
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "device id \"%s\": index has a leading zero", id);
    for (; *p; p++) {
      index = index * 10 + (uint32_t)(*p - '0');
      if (index > MAX_INDEX)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "device id \"%s\": index too large", id);
    }
  }
  *out_backend = found;
  *out_index = index;
  return KILN_OK;
}

char *kiln_device_id_format(char *buf, size_t cap, const char *kind, uint32_t index) {
  snprintf(buf, cap, "%s:%u", kind, index);
  return buf;
}
