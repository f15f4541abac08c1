/* Running a GPU backend's probe in a forked child process.
 *
 * Probing a GPU runtime initialises it (cuInit cannot be undone; ROCr starts threads and
 * opens /dev/kfd), and a runtime initialised before fork() is unusable in the child that
 * becomes a device worker. kilnd also must not die if a broken driver crashes during the
 * probe. So the GPU backends probe in a short-lived child that reports over a pipe.
 * Called from any one thread; it forks, so the caller should hold no locks others need. */
#ifndef KILN_DEVICE_PROBE_CHILD_H
#define KILN_DEVICE_PROBE_CHILD_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

typedef kiln_status_t (*kiln_device_probe_cb)(kiln_device_info_t *out_infos, size_t cap,
                                              size_t *out_count, char *out_reason,
                                              size_t reason_cap);

/* Runs probe() in a child and returns what it returned. A child that crashes or takes
 * longer than timeout_ms counts as "no devices" with a reason saying so. */
KILN_MUST_USE kiln_status_t kiln_device_probe_in_child(kiln_device_probe_cb probe, const char *kind,
                                         uint32_t timeout_ms, kiln_device_info_t *out_infos,
                                         size_t cap, size_t *out_count, char *out_reason,
                                         size_t reason_cap);

#endif
