/* Tensors in coarse-grained VRAM; synchronous copies through hsa_memory_copy, which also
 * takes pageable host pointers (it locks them for the copy, HSA.md §2). */
#include <stdlib.h>

#include "base/util.h"
#include "device/common.h"
#include "device/hsa/backend.h"

kiln_status_t kiln_hsa_mem_alloc(kiln_device_t *dev, uint64_t bytes, kiln_dmem_t **out_mem) {
  kiln_dmem_t *m = calloc(1, sizeof *m);
  if (!m) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  hsa_status_t hs = kiln_hsa.hsa_amd_memory_pool_allocate(dev->device_pool, bytes ? bytes : 1, 0, &m->ptr);
  if (hs != HSA_STATUS_SUCCESS) {
    free(m);
    return kiln_status_annotate(kiln_hsa_error(hs, __FILE__, __LINE__, "hsa_amd_memory_pool_allocate"),
                                "allocating %llu bytes on %s", (unsigned long long)bytes, dev->info.id);
  }
  m->bytes = bytes;
  *out_mem = m;
  return KILN_OK;
}

void kiln_hsa_mem_free(kiln_device_t *dev, kiln_dmem_t *m) {
  if (!m) return;
  kiln_hsa.hsa_amd_memory_pool_free(m->ptr);
  free(m);
}

uint64_t kiln_hsa_mem_address(kiln_device_t *dev, kiln_dmem_t *m) { return (uint64_t)(uintptr_t)m->ptr; }

/* VRAM is mapped to its own GPU only: the host must not dereference it. */
void *kiln_hsa_mem_host_ptr(kiln_device_t *dev, kiln_dmem_t *m) { return NULL; }

/* Launches wait for completion before returning, so a copy is ordered after them. */
kiln_status_t kiln_hsa_copy_in(kiln_device_t *dev, kiln_dmem_t *dst, uint64_t offset,
                               const void *src, uint64_t bytes) {
  KILN_RETURN_IF_ERROR(kiln_device_check_range(dst->bytes, offset, bytes));
  if (bytes == 0) return KILN_OK;
  KILN_HSA_TRY(kiln_hsa.hsa_memory_copy((char *)dst->ptr + offset, src, bytes));
  return KILN_OK;
}

kiln_status_t kiln_hsa_copy_out(kiln_device_t *dev, kiln_dmem_t *src, uint64_t offset, void *dst,
                                uint64_t bytes) {
  KILN_RETURN_IF_ERROR(kiln_device_check_range(src->bytes, offset, bytes));
  if (bytes == 0) return KILN_OK;
  KILN_HSA_TRY(kiln_hsa.hsa_memory_copy(dst, (char *)src->ptr + offset, bytes));
  return KILN_OK;
}

/* hsa_memory_copy between two VRAM buffers: a device-side copy (ROCr's blit kernel or DMA),
 * synchronous like the others. */
kiln_status_t kiln_hsa_copy_device(kiln_device_t *dev, kiln_dmem_t *dst, uint64_t dst_offset, kiln_dmem_t *src,
                                   uint64_t src_offset, uint64_t bytes) {
  KILN_RETURN_IF_ERROR(kiln_device_check_range(dst->bytes, dst_offset, bytes));
  KILN_RETURN_IF_ERROR(kiln_device_check_range(src->bytes, src_offset, bytes));
  if (bytes == 0) return KILN_OK;
  KILN_HSA_TRY(kiln_hsa.hsa_memory_copy((char *)dst->ptr + dst_offset, (char *)src->ptr + src_offset, bytes));
  return KILN_OK;
}

/* Overwrites a VRAM buffer larger than the GPU's caches with a blit fill, which evicts
 * L2 (and MALL/Infinity Cache, which ROCr 5.2 does not report: hence the 512 MiB floor). */
kiln_status_t kiln_hsa_flush_caches(kiln_device_t *dev) {
  if (!dev->flush_buf) {
    uint32_t caches[4] = {0};
    kiln_hsa.hsa_agent_get_info(dev->gpu, HSA_AGENT_INFO_CACHE_SIZE, caches);
    size_t biggest = KILN_MAX(KILN_MAX(caches[0], caches[1]), KILN_MAX(caches[2], caches[3]));
    size_t n = KILN_MAX(biggest * 2, (size_t)512 << 20);
    if (dev->info.memory && n > dev->info.memory / 8) n = dev->info.memory / 8;
    n &= ~(size_t)3;
    KILN_HSA_TRY(kiln_hsa.hsa_amd_memory_pool_allocate(dev->device_pool, n, 0, &dev->flush_buf));
    dev->flush_bytes = n;
  }
  KILN_HSA_TRY(kiln_hsa.hsa_amd_memory_fill(dev->flush_buf, (uint32_t)kiln_now_ns(), dev->flush_bytes / 4));
  return KILN_OK;
}
