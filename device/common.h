/* Small checks every backend needs. Pure functions; any thread. */
#ifndef KILN_DEVICE_COMMON_H
#define KILN_DEVICE_COMMON_H

#include <stdint.h>

#include "device/device.h"

/* E_INVALID_ARGUMENT unless [offset, offset + bytes) lies within a buffer of `size` bytes. */
KILN_MUST_USE kiln_status_t kiln_device_check_range(uint64_t size, uint64_t offset, uint64_t bytes);

/* The index of `kernel` in art->kernels: by address when it is an entry of that table (the
 * usual case), else by name; -1 when absent. */
int64_t kiln_device_kernel_index(const kiln_artifact_t *art, const kiln_kernel_t *kernel);

#endif
