/* Small checks every backend needs. Pure functions; any thread. */
#ifndef KILN_DEVICE_COMMON_H
#define KILN_DEVICE_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

/* E_INVALID_ARGUMENT unless [offset, offset + bytes) lies within a buffer of `size` bytes. */
KILN_MUST_USE kiln_status_t kiln_device_check_range(uint64_t size, uint64_t offset, uint64_t bytes);

/* The index of `kernel` in art->kernels: by address when it is an entry of that table (the
 * usual case), else by name; -1 when absent. */
int64_t kiln_device_kernel_index(const kiln_artifact_t *art, const kiln_kernel_t *kernel);

/* A backend's rule for which code targets run on a device arch: false, with the reason in
 * `why`, when `code` cannot run on `arch` (cuda/arch.h, hsa/target.h). */
typedef bool (*kiln_device_target_fn)(const char *code, const char *arch, char *why, size_t cap);

/* E_INVALID_ARGUMENT unless `art` is in `format` and built for a target `compatible` accepts
 * for the device's arch: the error says what to compile for instead. */
KILN_MUST_USE kiln_status_t kiln_device_check_artifact(const kiln_device_info_t *info, const kiln_artifact_t *art,
                                                       kiln_artifact_format_t format,
                                                       kiln_device_target_fn compatible);

#endif
