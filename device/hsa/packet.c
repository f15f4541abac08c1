#include "device/hsa/packet.h"

#include <string.h>

kiln_status_t kiln_hsa_packet_fill(hsa_kernel_dispatch_packet_t *p, const kiln_launch_t *l,
                                   const kiln_hsa_kernel_code_t *code, const void *kernarg,
                                   hsa_signal_t completion, uint32_t *out_header_setup) {
  uint32_t items[3];
  for (int d = 0; d < 3; d++) {
    uint64_t n = (uint64_t)l->grid[d] * l->block[d];
    if (n > UINT32_MAX)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "grid dimension %d has %llu work-items; AQL packets hold at most 2^32-1",
                         d, (unsigned long long)n);
    items[d] = (uint32_t)n;
  }
  /* The body only: the header word may still be INVALID and watched by the GPU. */
  memset((char *)p + 4, 0, sizeof *p - 4);
  p->workgroup_size_x = (uint16_t)l->block[0];
  p->workgroup_size_y = (uint16_t)l->block[1];
  p->workgroup_size_z = (uint16_t)l->block[2];
  p->grid_size_x = items[0];
  p->grid_size_y = items[1];
  p->grid_size_z = items[2];
  p->private_segment_size = code->private_segment_size;
  p->group_segment_size = code->group_segment_size + l->shared;
  p->kernel_object = code->kernel_object;
  p->kernarg_address = (void *)kernarg;
  p->completion_signal = completion;
  uint16_t header = (uint16_t)(HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE |
                               1 << HSA_PACKET_HEADER_BARRIER |
                               HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE |
                               HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
  uint16_t setup = (uint16_t)(l->dims << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS);
  *out_header_setup = (uint32_t)header | (uint32_t)setup << 16;
  return KILN_OK;
}
