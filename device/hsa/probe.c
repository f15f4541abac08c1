/* Finding ROCm GPUs and saying why there are none (library, /dev/kfd, hsa_init, agents). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "device/hsa/backend.h"
#include "device/hsa/pools.h"
#include "device/hsa/target.h"

typedef struct agent_walk {
  uint32_t want; /* index of the GPU wanted */
  uint32_t gpus; /* GPUs seen so far */
  hsa_agent_t gpu, cpu;
  bool have_gpu, have_cpu;
} agent_walk_t;

static hsa_status_t on_agent(hsa_agent_t a, void *data) {
  agent_walk_t *w = data;
  hsa_device_type_t type;
  if (kiln_hsa.hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS)
    return HSA_STATUS_SUCCESS;
  if (type == HSA_DEVICE_TYPE_CPU && !w->have_cpu) {
    w->cpu = a;
    w->have_cpu = true;
  } else if (type == HSA_DEVICE_TYPE_GPU) {
    if (w->gpus == w->want) {
      w->gpu = a;
      w->have_gpu = true;
    }
    w->gpus++;
  }
  return HSA_STATUS_SUCCESS;
}

kiln_status_t kiln_hsa_find_agents(uint32_t index, hsa_agent_t *out_gpu, hsa_agent_t *out_cpu) {
  agent_walk_t w = {.want = index};
  KILN_HSA_TRY(kiln_hsa.hsa_iterate_agents(on_agent, &w));
  if (!w.have_gpu)
    return KILN_STATUS(KILN_E_NOT_FOUND, "hsa:%u does not exist (%u GPU agents)", index, w.gpus);
  if (!w.have_cpu) return KILN_STATUS(KILN_E_DEVICE, "ROCr reports no CPU agent");
  *out_gpu = w.gpu;
  *out_cpu = w.cpu;
  return KILN_OK;
}

static hsa_status_t on_isa(hsa_isa_t isa, void *data) {
  hsa_isa_t *first = data;
  *first = isa;
  return HSA_STATUS_INFO_BREAK;
}

typedef struct pool_sizes {
  uint64_t vram;
  uint64_t lds;
} pool_sizes_t;

static hsa_status_t on_pool(hsa_amd_memory_pool_t pool, void *data) {
  pool_sizes_t *ps = data;
  uint32_t segment = 0, flags = 0;
  bool alloc = false;
  size_t size = 0;
  kiln_hsa.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment);
  kiln_hsa.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SIZE, &size);
  if (segment == HSA_AMD_SEGMENT_GROUP) {
    ps->lds = size;
    return HSA_STATUS_SUCCESS;
  }
  if (segment == HSA_AMD_SEGMENT_GLOBAL)
    kiln_hsa.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
  kiln_hsa.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc);
  if (kiln_hsa_pool_role(true, segment, flags, alloc) == KILN_HSA_POOL_DEVICE) ps->vram += size;
  return HSA_STATUS_SUCCESS;
}

kiln_status_t kiln_hsa_agent_describe(hsa_agent_t gpu, uint32_t index, kiln_device_info_t *info) {
  memset(info, 0, sizeof *info);
  snprintf(info->id, sizeof info->id, "hsa:%u", index);
  snprintf(info->kind, sizeof info->kind, "hsa");
  char name[64] = {0}, product[64] = {0};
  KILN_HSA_TRY(kiln_hsa.hsa_agent_get_info(gpu, HSA_AGENT_INFO_NAME, name));
  if (kiln_hsa.hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_PRODUCT_NAME, product) !=
          HSA_STATUS_SUCCESS ||
      !product[0])
    snprintf(product, sizeof product, "%s", name);
  snprintf(info->name, sizeof info->name, "%.63s", product);
  /* The full target id (features included) is only in the ISA name. */
  hsa_isa_t isa = {0};
  KILN_HSA_TRY(kiln_hsa.hsa_agent_iterate_isas(gpu, on_isa, &isa));
  char isa_name[128] = {0};
  uint32_t len = 0;
  if (isa.handle &&
      kiln_hsa.hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME_LENGTH, &len) == HSA_STATUS_SUCCESS &&
      len < sizeof isa_name &&
      kiln_hsa.hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME, isa_name) == HSA_STATUS_SUCCESS)
    kiln_hsa_target_from_isa(isa_name, info->arch, sizeof info->arch);
  else
    snprintf(info->arch, sizeof info->arch, "%s", name);
  KILN_HSA_TRY(kiln_hsa.hsa_agent_get_info(gpu, HSA_AGENT_INFO_WAVEFRONT_SIZE, &info->wave_size));
  KILN_HSA_TRY(kiln_hsa.hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT,
                                           &info->compute_units));
  KILN_HSA_TRY(kiln_hsa.hsa_agent_get_info(gpu, HSA_AGENT_INFO_WORKGROUP_MAX_SIZE, &info->max_block));
  uint16_t wg_dim[3] = {0};
  KILN_HSA_TRY(kiln_hsa.hsa_agent_get_info(gpu, HSA_AGENT_INFO_WORKGROUP_MAX_DIM, wg_dim));
  hsa_dim3_t grid_dim = {0};
  KILN_HSA_TRY(kiln_hsa.hsa_agent_get_info(gpu, HSA_AGENT_INFO_GRID_MAX_DIM, &grid_dim));
  uint32_t grid_max = 0;
  KILN_HSA_TRY(kiln_hsa.hsa_agent_get_info(gpu, HSA_AGENT_INFO_GRID_MAX_SIZE, &grid_max));
  uint32_t gd[3] = {grid_dim.x, grid_dim.y, grid_dim.z};
  for (int d = 0; d < 3; d++) {
    info->max_block_dim[d] = wg_dim[d];
    info->max_grid[d] = gd[d]; /* ROCr reports work-items; a group count is never larger */
  }
  /* AQL grid sizes are 32-bit work-item counts per dimension. */
  info->max_grid_items = grid_max ? grid_max : UINT32_MAX;
  pool_sizes_t ps = {0};
  KILN_HSA_TRY(kiln_hsa.hsa_amd_agent_iterate_memory_pools(gpu, on_pool, &ps));
  info->memory = ps.vram;
  info->max_shared = ps.lds ? (uint32_t)ps.lds : 64 * 1024;
  return KILN_OK;
}

static hsa_status_t count_gpu(hsa_agent_t a, void *data) {
  hsa_device_type_t type;
  if (kiln_hsa.hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &type) == HSA_STATUS_SUCCESS &&
      type == HSA_DEVICE_TYPE_GPU)
    ++*(uint32_t *)data;
  return HSA_STATUS_SUCCESS;
}

/* Says why hsa_init failed. ROCr reports a missing or forbidden /dev/kfd as OUT_OF_RESOURCES,
 * which says nothing, so /dev/kfd is looked at here, after the failure, as rocminfo does before
 * its own hsa_init. It is never looked at before: a runtime that needs no /dev/kfd (a software
 * GPU loaded through KILN_HSA_LIBRARY) must be reached. */
static void explain_init_failure(hsa_status_t hs, char *reason, size_t reason_cap) {
  int fd = open("/dev/kfd", O_RDWR | O_CLOEXEC);
  int e = fd < 0 ? errno : 0;
  if (fd >= 0) close(fd);
  if (e == ENOENT) {
    snprintf(reason, reason_cap, "/dev/kfd does not exist: no amdgpu kernel driver (or no AMD GPU)");
  } else if (e == EACCES || e == EPERM) {
    snprintf(reason, reason_cap, "/dev/kfd: permission denied (add the user to the render group)");
  } else {
    kiln_status_t err = kiln_hsa_error(hs, __FILE__, __LINE__, "hsa_init");
    if (e)
      snprintf(reason, reason_cap, "%s (/dev/kfd: %s)", kiln_status_message(err), strerror(e));
    else
      snprintf(reason, reason_cap, "%s", kiln_status_message(err));
    kiln_status_free(err);
  }
}

/* The order of checks: the library, then hsa_init (explained by /dev/kfd when it fails), then
 * agents (an unknown gfx id is silently skipped by ROCr: "success, zero GPUs"). */
static kiln_status_t probe_steps(kiln_device_info_t *infos, size_t cap, size_t *out_count,
                                 char *reason, size_t reason_cap, bool *initialised) {
  kiln_status_t s = kiln_hsa_lib_load();
  if (s) {
    snprintf(reason, reason_cap, "%s", kiln_status_message(s));
    kiln_status_free(s);
    return KILN_OK;
  }
  hsa_status_t hs = kiln_hsa.hsa_init();
  if (hs != HSA_STATUS_SUCCESS) {
    explain_init_failure(hs, reason, reason_cap);
    return KILN_OK;
  }
  *initialised = true;
  uint32_t gpus = 0;
  KILN_HSA_TRY(kiln_hsa.hsa_iterate_agents(count_gpu, &gpus));
  if (gpus == 0) {
    snprintf(reason, reason_cap, "ROCr found no supported GPU (an unknown gfx id is skipped: a newer ROCm may know it)");
    return KILN_OK;
  }
  size_t n = 0;
  for (uint32_t i = 0; i < gpus && n < cap; i++) {
    hsa_agent_t gpu, cpu;
    KILN_RETURN_IF_ERROR(kiln_hsa_find_agents(i, &gpu, &cpu));
    KILN_RETURN_IF_ERROR(kiln_hsa_agent_describe(gpu, i, &infos[n]));
    n++;
  }
  *out_count = n;
  return KILN_OK;
}

kiln_status_t kiln_hsa_probe_here(kiln_device_info_t *infos, size_t cap, size_t *out_count,
                                  char *reason, size_t reason_cap) {
  *out_count = 0;
  if (reason_cap) reason[0] = '\0';
  bool initialised = false;
  kiln_status_t s = probe_steps(infos, cap, out_count, reason, reason_cap, &initialised);
  if (initialised) kiln_hsa.hsa_shut_down();
  return s;
}
