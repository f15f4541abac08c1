#include "device/hsa/kernarg.h"

#include <string.h>

/* Writes the low `size` bytes of v, little-endian as the GPU reads them. */
static void put(uint8_t *dst, uint64_t v, uint32_t size) {
  for (uint32_t i = 0; i < size && i < 8; i++) dst[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t hidden_value(const kiln_kernel_arg_t *a, const kiln_launch_t *l,
                             const kiln_hsa_kernarg_env_t *env) {
  switch (a->hidden) {
    case KILN_HIDDEN_BLOCK_COUNT_X: return l->grid[0];
    case KILN_HIDDEN_BLOCK_COUNT_Y: return l->grid[1];
    case KILN_HIDDEN_BLOCK_COUNT_Z: return l->grid[2];
    case KILN_HIDDEN_GROUP_SIZE_X: return l->block[0];
    case KILN_HIDDEN_GROUP_SIZE_Y: return l->block[1];
    case KILN_HIDDEN_GROUP_SIZE_Z: return l->block[2];
    /* kiln grids are whole work-groups, so the partial last group is always empty. */
    case KILN_HIDDEN_REMAINDER_X:
    case KILN_HIDDEN_REMAINDER_Y:
    case KILN_HIDDEN_REMAINDER_Z: return 0;
    case KILN_HIDDEN_GLOBAL_OFFSET_X:
    case KILN_HIDDEN_GLOBAL_OFFSET_Y:
    case KILN_HIDDEN_GLOBAL_OFFSET_Z: return 0;
    case KILN_HIDDEN_GRID_DIMS: return l->dims;
    case KILN_HIDDEN_DYNAMIC_LDS_SIZE: return l->shared;
    case KILN_HIDDEN_QUEUE_PTR: return env->queue_ptr;
    case KILN_HIDDEN_PRIVATE_BASE: return env->private_base_hi;
    case KILN_HIDDEN_SHARED_BASE: return env->shared_base_hi;
    default: return 0; /* hostcall, heap, default queue, completion action, multigrid */
  }
}

kiln_status_t kiln_hsa_kernarg_pack(const kiln_launch_t *l, const kiln_hsa_kernarg_env_t *env,
                                    void *dst, size_t cap) {
  const kiln_kernel_t *k = l->kernel;
  if (k->kernarg_size > cap)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "kernel \"%s\": kernarg segment of %u bytes exceeds the %zu-byte slab",
                       k->name, k->kernarg_size, cap);
  uint8_t *seg = dst;
  memset(seg, 0, k->kernarg_size);
  uint32_t total = k->num_args + k->num_hidden;
  for (uint32_t i = 0; i < total; i++) {
    const kiln_kernel_arg_t *a = &k->args[i];
    if ((uint64_t)a->offset + a->size > k->kernarg_size)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "kernel \"%s\": argument %u at offset %u (%u bytes) lies outside the "
                         "%u-byte kernarg segment",
                         k->name, i, a->offset, a->size, k->kernarg_size);
    if (i < k->num_args) {
      /* Explicit values come from 8-byte slots (device/launch.h); wider by-value
       * aggregates are not part of the kernel dialect. */
      if (a->size > 8)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                           "kernel \"%s\": argument %u is %u bytes; only scalars and pointers "
                           "are supported",
                           k->name, i, a->size);
      memcpy(seg + a->offset, l->args[i], a->size);
    } else {
      put(seg + a->offset, hidden_value(a, l, env), a->size);
    }
  }
  return KILN_OK;
}
