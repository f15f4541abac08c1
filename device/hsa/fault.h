/* Text for GPU memory faults as ROCr reports them (hsa_amd_gpu_memory_fault_info_t). */
#ifndef KILN_DEVICE_HSA_FAULT_H
#define KILN_DEVICE_HSA_FAULT_H

#include <stddef.h>
#include <stdint.h>

/* The reasons in a fault_reason_mask, comma-separated ("page not present, write to a
 * read-only page"); "unknown reason (mask 0x..)" for bits ROCr does not define. Returns out. */
const char *kiln_hsa_fault_reason(uint32_t mask, char *out, size_t cap);

#endif
