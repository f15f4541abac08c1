/* The cuda backend table; opening a GPU (primary context, one stream, two timing events)
 * and device memory. */
#include <stdlib.h>

#include "base/util.h"
#include "device/common.h"
#include "device/cuda/backend.h"
#include "device/probe_child.h"

#define PROBE_TIMEOUT_MS 30000u /* the first cuInit on a large box can take seconds */

static kiln_status_t cuda_probe(kiln_device_info_t *infos, size_t cap, size_t *out_count,
                                char *reason, size_t reason_cap) {
  return kiln_device_probe_in_child(kiln_cuda_probe_here, "cuda", PROBE_TIMEOUT_MS, infos, cap,
                                    out_count, reason, reason_cap);
}

static void cuda_close(kiln_device_t *dev) {
  if (!dev) return;
  if (dev->ctx) {
    kiln_cuda.cuCtxSetCurrent(dev->ctx);
    if (dev->flush_buf) kiln_cuda.cuMemFree(dev->flush_buf);
    if (dev->start) kiln_cuda.cuEventDestroy(dev->start);
    if (dev->stop) kiln_cuda.cuEventDestroy(dev->stop);
    if (dev->stream) kiln_cuda.cuStreamDestroy(dev->stream);
    if (dev->capture) kiln_cuda.cuStreamDestroy(dev->capture);
  }
  if (dev->retained) kiln_cuda.cuDevicePrimaryCtxRelease(dev->dev);
  free(dev);
}

static kiln_status_t open_steps(kiln_device_t *dev, uint32_t index) {
  KILN_RETURN_IF_ERROR(kiln_cuda_lib_load());
  KILN_CU_TRY(kiln_cuda.cuInit(0));
  int n = 0;
  KILN_CU_TRY(kiln_cuda.cuDeviceGetCount(&n));
  if ((int)index >= n)
    return KILN_STATUS(KILN_E_NOT_FOUND, "cuda:%u does not exist (%d NVIDIA GPUs)", index, n);
  KILN_CU_TRY(kiln_cuda.cuDeviceGet(&dev->dev, (int)index));
  KILN_RETURN_IF_ERROR(kiln_cuda_describe(dev->dev, index, &dev->info));
  /* The primary context: the one the runtime API and other libraries would share, and
   * whose creation API did not change between driver versions (cuCtxCreate did). */
  KILN_CU_TRY(kiln_cuda.cuDevicePrimaryCtxRetain(&dev->ctx, dev->dev));
  dev->retained = true;
  KILN_CU_TRY(kiln_cuda.cuCtxSetCurrent(dev->ctx));
  /* A blocking stream: it orders with the legacy default stream that cuMemcpyHtoD/DtoH and
   * cuMemsetD32 use, so copies and fills are ordered with launches both ways (a pageable
   * HtoD may return before its DMA ends; the next launch still waits for it). */
  KILN_CU_TRY(kiln_cuda.cuStreamCreate(&dev->stream, CU_STREAM_DEFAULT));
  KILN_CU_TRY(kiln_cuda.cuEventCreate(&dev->start, CU_EVENT_DEFAULT));
  KILN_CU_TRY(kiln_cuda.cuEventCreate(&dev->stop, CU_EVENT_DEFAULT));
  return KILN_OK;
}

static kiln_status_t cuda_open(uint32_t index, const int *cpus, size_t ncpus, kiln_device_t **out_dev) {
  kiln_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  kiln_status_t s = open_steps(dev, index);
  if (s) {
    cuda_close(dev);
    return kiln_status_annotate(s, "opening cuda:%u", index);
  }
  *out_dev = dev;
  return KILN_OK;
}

static const kiln_device_info_t *cuda_info(kiln_device_t *dev) { return &dev->info; }

static kiln_status_t cuda_mem_alloc(kiln_device_t *dev, uint64_t bytes, kiln_dmem_t **out_mem) {
  kiln_dmem_t *m = calloc(1, sizeof *m);
  if (!m) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  CUresult r = kiln_cuda.cuMemAlloc(&m->ptr, bytes ? bytes : 1);
  if (r != CUDA_SUCCESS) {
    free(m);
    return kiln_status_annotate(kiln_cuda_error(r, __FILE__, __LINE__, "cuMemAlloc"),
                                "allocating %llu bytes on %s", (unsigned long long)bytes, dev->info.id);
  }
  m->bytes = bytes;
  *out_mem = m;
  return KILN_OK;
}

static void cuda_mem_free(kiln_device_t *dev, kiln_dmem_t *m) {
  if (!m) return;
  kiln_cuda.cuMemFree(m->ptr);
  free(m);
}

static uint64_t cuda_mem_address(kiln_device_t *dev, kiln_dmem_t *m) { return (uint64_t)m->ptr; }

static void *cuda_mem_host_ptr(kiln_device_t *dev, kiln_dmem_t *m) { return NULL; }

/* Ordered with launches through the legacy default stream (see open_steps). */
static kiln_status_t cuda_copy_in(kiln_device_t *dev, kiln_dmem_t *dst, uint64_t offset,
                                  const void *src, uint64_t bytes) {
  KILN_RETURN_IF_ERROR(kiln_device_check_range(dst->bytes, offset, bytes));
  if (bytes == 0) return KILN_OK;
  KILN_CU_TRY(kiln_cuda.cuMemcpyHtoD(dst->ptr + offset, src, bytes));
  return KILN_OK;
}

static kiln_status_t cuda_copy_out(kiln_device_t *dev, kiln_dmem_t *src, uint64_t offset, void *dst,
                                   uint64_t bytes) {
  KILN_RETURN_IF_ERROR(kiln_device_check_range(src->bytes, offset, bytes));
  if (bytes == 0) return KILN_OK;
  KILN_CU_TRY(kiln_cuda.cuMemcpyDtoH(dst, src->ptr + offset, bytes));
  return KILN_OK;
}

/* cuMemcpyDtoD returns before the copy ends (no host synchronisation for device-to-device
 * copies): the legacy stream is waited for, so the copy is complete as copy_device says. */
static kiln_status_t cuda_copy_device(kiln_device_t *dev, kiln_dmem_t *dst, uint64_t dst_offset, kiln_dmem_t *src,
                                      uint64_t src_offset, uint64_t bytes) {
  KILN_RETURN_IF_ERROR(kiln_device_check_range(dst->bytes, dst_offset, bytes));
  KILN_RETURN_IF_ERROR(kiln_device_check_range(src->bytes, src_offset, bytes));
  if (bytes == 0) return KILN_OK;
  KILN_CU_TRY(kiln_cuda.cuMemcpyDtoD(dst->ptr + dst_offset, src->ptr + src_offset, bytes));
  KILN_CU_TRY(kiln_cuda.cuStreamSynchronize(NULL));
  return KILN_OK;
}

/* Writes a device buffer twice the L2 (H100/H200: 50 MiB L2, so 100 MiB), as nvbench does
 * to start each measurement cold. */
static kiln_status_t cuda_flush_caches(kiln_device_t *dev) {
  if (!dev->flush_buf) {
    int l2 = 0;
    kiln_cuda.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev->dev);
    size_t n = KILN_MAX((size_t)l2 * 2, (size_t)64 << 20);
    KILN_CU_TRY(kiln_cuda.cuMemAlloc(&dev->flush_buf, n));
    dev->flush_bytes = n;
  }
  KILN_CU_TRY(kiln_cuda.cuMemsetD32(dev->flush_buf, (unsigned)kiln_now_ns(), dev->flush_bytes / 4));
  /* Device memsets may return before they finish; the legacy stream is stream 0. */
  KILN_CU_TRY(kiln_cuda.cuStreamSynchronize(NULL));
  return KILN_OK;
}

const kiln_backend_t kiln_backend_cuda = {
    .kind = "cuda",
    .probe = cuda_probe,
    .open = cuda_open,
    .close = cuda_close,
    .info = cuda_info,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .mem_address = cuda_mem_address,
    .mem_host_ptr = cuda_mem_host_ptr,
    .copy_in = cuda_copy_in,
    .copy_out = cuda_copy_out,
    .module_load = kiln_cuda_module_load,
    .module_unload = kiln_cuda_module_unload,
    .launch = kiln_cuda_launch,
    .copy_device = cuda_copy_device,
    .seq_create = kiln_cuda_seq_create,
    .seq_destroy = kiln_cuda_seq_destroy,
    .seq_run = kiln_cuda_seq_run,
    .flush_caches = cuda_flush_caches,
};
