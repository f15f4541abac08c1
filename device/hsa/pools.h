/* Choosing ROCr memory pools (HSA.md §2). Pure function; any thread. */
#ifndef KILN_DEVICE_HSA_POOLS_H
#define KILN_DEVICE_HSA_POOLS_H

#include <stdbool.h>
#include <stdint.h>

typedef enum kiln_hsa_pool_role {
  KILN_HSA_POOL_NONE = 0,
  KILN_HSA_POOL_DEVICE,    /* GPU agent, global, coarse-grained: tensors (VRAM) */
  KILN_HSA_POOL_KERNARG,   /* CPU agent, global, KERNARG_INIT: kernarg slabs */
  KILN_HSA_POOL_HOST_FINE, /* CPU agent, global, fine-grained: host buffers the GPU reads */
} kiln_hsa_pool_role_t;

/* The role a pool can play, from hsa_amd_memory_pool_get_info values: its owner agent is a
 * GPU or the CPU, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, _GLOBAL_FLAGS, _RUNTIME_ALLOC_ALLOWED.
 * GROUP-segment (LDS) pools and pools the runtime cannot allocate from play none. */
kiln_hsa_pool_role_t kiln_hsa_pool_role(bool owner_is_gpu, uint32_t segment, uint32_t global_flags,
                                        bool alloc_allowed);

#endif
