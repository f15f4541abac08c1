/* Laying out a kernarg segment from the artifact's kernel table (code object v5 metadata):
 * explicit arguments at their .offset, then the hidden arguments that ROCr leaves to the
 * language runtime (HSA.md §4; HIP does the same in CLR submitKernelInternal).
 * Pure function; any thread. */
#ifndef KILN_DEVICE_HSA_KERNARG_H
#define KILN_DEVICE_HSA_KERNARG_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

/* What the hidden arguments need from the queue a launch goes to. */
typedef struct kiln_hsa_kernarg_env {
  uint64_t queue_ptr;       /* the hsa_queue_t*, first member of amd_queue_t */
  uint32_t private_base_hi; /* amd_queue_t.private_segment_aperture_base_hi */
  uint32_t shared_base_hi;  /* amd_queue_t.group_segment_aperture_base_hi */
} kiln_hsa_kernarg_env_t;

/* The kernarg slab's alignment: the AQL kernarg_address must be 16-byte aligned. */
#define KILN_HSA_KERNARG_ALIGN 16

/* Zeroes launch->kernel->kernarg_size bytes of `dst` (cap bytes available) and writes every
 * explicit argument (args[i], .size bytes) and hidden argument at its .offset:
 * block_count = grid (whole work-groups only), group_size = block, remainder = 0,
 * global_offset = 0, grid_dims = dims, dynamic_lds_size = launch->shared, queue_ptr and
 * apertures from env; other hidden kinds stay zero (so no printf/hostcall/heap).
 * E_INVALID_ARGUMENT when the table does not fit the segment or cap. */
KILN_MUST_USE kiln_status_t kiln_hsa_kernarg_pack(const kiln_launch_t *launch, const kiln_hsa_kernarg_env_t *env,
                                    void *dst, size_t cap);

#endif
