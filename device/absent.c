/* Backends of a build without their headers (KILN_ABSENT_HSA / KILN_ABSENT_CUDA from
 * meson): listed, so ids and `devices` still name them, but never present. */
#include <stdio.h>

#include "device/device.h"

#define ABSENT_BACKEND(kind_name)                                                          \
  static kiln_status_t absent_probe_##kind_name(kiln_device_info_t *infos, size_t cap,     \
                                                size_t *out_count, char *reason,           \
                                                size_t reason_cap) {                       \
    *out_count = 0;                                                                        \
    if (reason_cap) snprintf(reason, reason_cap, "kiln was built without the " #kind_name " headers"); \
    return KILN_OK;                                                                        \
  }                                                                                        \
  static kiln_status_t absent_open_##kind_name(uint32_t index, const int *cpus, size_t ncpus, \
                                               kiln_device_t **out_dev) {                  \
    return KILN_STATUS(KILN_E_UNAVAILABLE, "kiln was built without the " #kind_name " backend"); \
  }                                                                                        \
  const kiln_backend_t kiln_backend_##kind_name = {                                        \
      .kind = #kind_name, .probe = absent_probe_##kind_name, .open = absent_open_##kind_name};

#ifdef KILN_ABSENT_HSA
ABSENT_BACKEND(hsa)
#endif
#ifdef KILN_ABSENT_CUDA
ABSENT_BACKEND(cuda)
#endif
