/* Building and publishing AQL kernel dispatch packets (HSA.md §5). The fill is pure and
 * testable without a GPU; publishing is the one release store that hands the packet over. */
#ifndef KILN_DEVICE_HSA_PACKET_H
#define KILN_DEVICE_HSA_PACKET_H

#include <hsa/hsa.h>
#include <stdint.h>

#include "device/device.h"

/* What the loaded code object says about one kernel (hsa_executable_symbol_get_info). */
typedef struct kiln_hsa_kernel_code {
  uint64_t kernel_object;
  uint32_t kernarg_size;
  uint32_t group_segment_size;   /* static LDS bytes */
  uint32_t private_segment_size; /* scratch bytes per work-item */
} kiln_hsa_kernel_code_t;

/* Fills everything of *p except its first 32 bits (header and setup), which the packet
 * processor may be polling: grid sizes in WORK-ITEMS (grid * block), unused dimensions 1,
 * group segment = static + launch->shared. Returns in *out_header_setup the word
 * kiln_hsa_packet_publish must store: KERNEL_DISPATCH, barrier bit (each dispatch waits
 * for the one before, as launches on a stream do), system-scope acquire and release fences,
 * setup = launch->dims. E_INVALID_ARGUMENT if a dimension's work-items exceed 2^32-1. */
KILN_MUST_USE kiln_status_t kiln_hsa_packet_fill(hsa_kernel_dispatch_packet_t *p, const kiln_launch_t *launch,
                                   const kiln_hsa_kernel_code_t *code, const void *kernarg,
                                   hsa_signal_t completion, uint32_t *out_header_setup);

/* Release store of header|setup: every body write above becomes visible to the packet
 * processor no later than the header that makes the packet valid. */
static inline void kiln_hsa_packet_publish(hsa_kernel_dispatch_packet_t *p, uint32_t header_setup) {
  __atomic_store_n((uint32_t *)p, header_setup, __ATOMIC_RELEASE);
}

#endif
