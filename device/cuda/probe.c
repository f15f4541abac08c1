/* Finding NVIDIA GPUs and saying why there are none (library, cuInit, devices). */
#include <stdio.h>
#include <string.h>

#include "device/cuda/arch.h"
#include "device/cuda/backend.h"

static int attr(CUdevice d, CUdevice_attribute a) {
  int v = 0;
  if (kiln_cuda.cuDeviceGetAttribute(&v, a, d) != CUDA_SUCCESS) return 0;
  return v;
}

kiln_status_t kiln_cuda_describe(CUdevice d, uint32_t index, kiln_device_info_t *info) {
  memset(info, 0, sizeof *info);
  snprintf(info->id, sizeof info->id, "cuda:%u", index);
  snprintf(info->kind, sizeof info->kind, "cuda");
  KILN_CU_TRY(kiln_cuda.cuDeviceGetName(info->name, (int)sizeof info->name, d));
  kiln_cuda_arch_name(attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                      attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), info->arch,
                      sizeof info->arch);
  size_t mem = 0;
  KILN_CU_TRY(kiln_cuda.cuDeviceTotalMem(&mem, d));
  info->memory = mem;
  info->compute_units = (uint32_t)attr(d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info->wave_size = (uint32_t)attr(d, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  info->max_block = (uint32_t)attr(d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  info->max_block_dim[0] = (uint32_t)attr(d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  info->max_block_dim[1] = (uint32_t)attr(d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  info->max_block_dim[2] = (uint32_t)attr(d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  info->max_grid[0] = (uint32_t)attr(d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  info->max_grid[1] = (uint32_t)attr(d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  info->max_grid[2] = (uint32_t)attr(d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  /* Work-item ids of the dialect are 32-bit; CUDA itself has no per-dimension limit. */
  info->max_grid_items = UINT32_MAX;
  /* Opt-in limit: launch raises a kernel's dynamic limit past the 48 KiB default. */
  int optin = attr(d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  info->max_shared = (uint32_t)(optin ? optin : attr(d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  return KILN_OK;
}

kiln_status_t kiln_cuda_probe_here(kiln_device_info_t *infos, size_t cap, size_t *out_count,
                                   char *reason, size_t reason_cap) {
  *out_count = 0;
  if (reason_cap) reason[0] = '\0';
  kiln_status_t s = kiln_cuda_lib_load();
  if (s) {
    snprintf(reason, reason_cap, "%s", kiln_status_message(s));
    kiln_status_free(s);
    return KILN_OK;
  }
  CUresult r = kiln_cuda.cuInit(0);
  if (r != CUDA_SUCCESS) {
    kiln_status_t e = kiln_cuda_error(r, __FILE__, __LINE__, "cuInit");
    snprintf(reason, reason_cap, "%s", kiln_status_message(e));
    kiln_status_free(e);
    return KILN_OK;
  }
  int n = 0;
  KILN_CU_TRY(kiln_cuda.cuDeviceGetCount(&n));
  if (n == 0) {
    snprintf(reason, reason_cap, "the NVIDIA driver reports no GPU");
    return KILN_OK;
  }
  size_t filled = 0;
  for (int i = 0; i < n && filled < cap; i++) {
    CUdevice d;
    KILN_CU_TRY(kiln_cuda.cuDeviceGet(&d, i));
    KILN_RETURN_IF_ERROR(kiln_cuda_describe(d, (uint32_t)i, &infos[filled]));
    filled++;
  }
  *out_count = filled;
  return KILN_OK;
}
