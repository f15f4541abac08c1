/* The backends kiln was built with, and device ids ("cpu:0", "hsa:1", "cuda:0").
 * Pure lookups over const tables; any thread. */
#ifndef KILN_DEVICE_REGISTRY_H
#define KILN_DEVICE_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

/* Backends in a fixed order: cpu, hsa, cuda. */
size_t kiln_device_backend_count(void);
const kiln_backend_t *kiln_device_backend_at(size_t i);
/* NULL when no backend has that kind. */
const kiln_backend_t *kiln_device_backend_find(const char *kind);

/* Parses "KIND:INDEX" (decimal index without sign or leading zeros, < 2^16); a bare
 * "KIND" means index 0. E_INVALID_ARGUMENT names the id and what is wrong; an unknown kind
 * lists the known ones. */
KILN_MUST_USE kiln_status_t kiln_device_id_parse(const char *id, const kiln_backend_t **out_backend,
                                   uint32_t *out_index);
/* Writes "KIND:INDEX" into buf (cap bytes, truncated if needed). Returns buf. */
char *kiln_device_id_format(char *buf, size_t cap, const char *kind, uint32_t index);

#endif
