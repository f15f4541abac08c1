#include "device/common.h"

#include <string.h>

kiln_status_t kiln_device_check_range(uint64_t size, uint64_t offset, uint64_t bytes) {
  if (offset > size || bytes > size - offset)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "copy of %llu bytes at offset %llu is outside a buffer of %llu bytes",
                       (unsigned long long)bytes, (unsigned long long)offset,
                       (unsigned long long)size);
  return KILN_OK;
}

int64_t kiln_device_kernel_index(const kiln_artifact_t *art, const kiln_kernel_t *k) {
  if (k >= art->kernels && k < art->kernels + art->num_kernels) return k - art->kernels;
  for (uint32_t i = 0; i < art->num_kernels; i++)
    if (strcmp(art->kernels[i].name, k->name) == 0) return i;
  return -1;
}

kiln_status_t kiln_device_check_artifact(const kiln_device_info_t *info, const kiln_artifact_t *art,
                                         kiln_artifact_format_t format, kiln_device_target_fn compatible) {
  if (art->format != format)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "module for target \"%s\" cannot run on %s: compile it for %s",
                       art->target, info->id, info->arch);
  char why[256];
  if (!compatible(art->target, info->arch, why, sizeof why))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "module cannot run on %s: %s; compile it for %s", info->id, why,
                       info->arch);
  return KILN_OK;
}
