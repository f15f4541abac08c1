#include "device/hsa/pools.h"

#include <hsa/hsa_ext_amd.h>

kiln_hsa_pool_role_t kiln_hsa_pool_role(bool owner_is_gpu, uint32_t segment, uint32_t flags,
                                        bool alloc_allowed) {
  if (segment != HSA_AMD_SEGMENT_GLOBAL || !alloc_allowed) return KILN_HSA_POOL_NONE;
  if (owner_is_gpu)
    /* Fine-grained VRAM exists only with XGMI or HSA_FINE_GRAIN_PCIE; tensors want coarse. */
    return (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED) ? KILN_HSA_POOL_DEVICE
                                                                   : KILN_HSA_POOL_NONE;
  if (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) return KILN_HSA_POOL_KERNARG;
  if (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED) return KILN_HSA_POOL_HOST_FINE;
  return KILN_HSA_POOL_NONE;
}
