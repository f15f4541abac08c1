/* GPU memory faults as ROCr reports them: the text for a fault_reason_mask, the process-wide
 * fault record its system event handler fills, and the check a launch makes after a dispatch. */
#ifndef KILN_DEVICE_HSA_FAULT_H
#define KILN_DEVICE_HSA_FAULT_H

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The reasons in a fault_reason_mask, comma-separated ("page not present, write to a
 * read-only page"); "unknown reason (mask 0x..)" for bits ROCr does not define. Returns out. */
const char *kiln_hsa_fault_reason(uint32_t mask, char *out, size_t cap);

/* ROCr's system event handler (registered once per process by the device's open): records the
 * first GPU memory fault for kiln_hsa_fault_seen. Runs on ROCr's async thread. */
hsa_status_t kiln_hsa_on_system_event(const hsa_amd_event_t *e, void *data);

#endif
