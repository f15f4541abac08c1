/* Agents (one CPU, then one GPU, in ROCr's order), the GPU's ISA, memory pools and the older
 * region view of the same pools. Values a client can observe are ROCr's (R amd_gpu_agent.cpp,
 * amd_cpu_agent.cpp GetInfo); sizes that describe hardware we do not have are modelled and the
 * product name says "softgpu" so that logs and metrics never pass it off as hardware. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rt.h"

rt_agent_t rt_cpu_agent = {HSA_DEVICE_TYPE_CPU, 0};
rt_agent_t rt_gpu_agent = {HSA_DEVICE_TYPE_GPU, 1};

/* R amd_cpu_agent.cpp: system memory as fine-grained with KERNARG_INIT, fine-grained, and
 * coarse-grained (dGPU systems); amd_gpu_agent.cpp: coarse-grained VRAM and the LDS (GROUP). */
rt_pool_t rt_pools[POOL_COUNT] = {
    [POOL_CPU_KERNARG] = {POOL_CPU_KERNARG, false, HSA_AMD_SEGMENT_GLOBAL,
                          HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT | HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, true},
    [POOL_CPU_FINE] = {POOL_CPU_FINE, false, HSA_AMD_SEGMENT_GLOBAL, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, true},
    [POOL_CPU_COARSE] = {POOL_CPU_COARSE, false, HSA_AMD_SEGMENT_GLOBAL, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, true},
    [POOL_GPU_VRAM] = {POOL_GPU_VRAM, true, HSA_AMD_SEGMENT_GLOBAL, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, true},
    [POOL_GPU_LDS] = {POOL_GPU_LDS, true, HSA_AMD_SEGMENT_GROUP, 0, false},
};

#define LDS_BYTES (64u * 1024u)

static struct rt_isa {
  int unused;
} gpu_isa;

rt_agent_t *rt_agent_from(hsa_agent_t h) {
  if (h.handle == (uint64_t)(uintptr_t)&rt_cpu_agent) return &rt_cpu_agent;
  if (h.handle == (uint64_t)(uintptr_t)&rt_gpu_agent) return &rt_gpu_agent;
  return NULL;
}

static rt_pool_t *pool_from(uint64_t handle) {
  for (int i = 0; i < POOL_COUNT; i++)
    if (handle == (uint64_t)(uintptr_t)&rt_pools[i]) return &rt_pools[i];
  return NULL;
}

static bool isa_valid(hsa_isa_t isa) { return isa.handle == (uint64_t)(uintptr_t)&gpu_isa; }

static uint64_t system_ram(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 1ull << 30;
}

RT_EXPORT hsa_status_t hsa_iterate_agents(hsa_status_t (*callback)(hsa_agent_t agent, void *data),
                                          void *data) {
  RT_REQUIRE_OPEN();
  if (!callback) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  /* H: a status other than SUCCESS stops the traversal and is returned. */
  hsa_status_t s = callback(rt_agent_handle(&rt_cpu_agent), data);
  if (s != HSA_STATUS_SUCCESS) return s;
  return callback(rt_agent_handle(&rt_gpu_agent), data);
}

static void put_name(void *value, const char *s) {
  memset(value, 0, 64);
  snprintf(value, 64, "%s", s);
}

/* R amd_gpu_agent.cpp: work-groups up to 1024 in each dimension, grids up to UINT32_MAX. */
static void put_max_dims(void *value, bool grid) {
  if (grid) {
    const hsa_dim3_t g = {UINT32_MAX, UINT32_MAX, UINT32_MAX};
    memcpy(value, &g, sizeof g);
  } else {
    const uint16_t dim[3] = {1024, 1024, 1024};
    memcpy(value, dim, sizeof dim);
  }
}

static hsa_status_t cpu_info(int attribute, void *value) {
  switch (attribute) {
    case HSA_AGENT_INFO_NAME:
    case HSA_AMD_AGENT_INFO_PRODUCT_NAME: put_name(value, "softgpu host CPU"); break;
    case HSA_AGENT_INFO_VENDOR_NAME: put_name(value, "CPU"); break;
    case HSA_AGENT_INFO_FEATURE: RT_PUT(value, hsa_agent_feature_t, (hsa_agent_feature_t)0); break;
    case HSA_AGENT_INFO_MACHINE_MODEL: RT_PUT(value, hsa_machine_model_t, HSA_MACHINE_MODEL_LARGE); break;
    case HSA_AGENT_INFO_BASE_PROFILE_DEFAULT_FLOAT_ROUNDING_MODES:
    case HSA_AGENT_INFO_DEFAULT_FLOAT_ROUNDING_MODE:
      RT_PUT(value, hsa_default_float_rounding_mode_t, HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR);
      break;
    case HSA_AGENT_INFO_FAST_F16_OPERATION: RT_PUT(value, bool, false); break;
    case HSA_AGENT_INFO_PROFILE: RT_PUT(value, hsa_profile_t, HSA_PROFILE_FULL); break;
    case HSA_AGENT_INFO_WAVEFRONT_SIZE:
    case HSA_AGENT_INFO_WORKGROUP_MAX_SIZE:
    case HSA_AGENT_INFO_GRID_MAX_SIZE:
    case HSA_AGENT_INFO_FBARRIER_MAX_SIZE:
    case HSA_AGENT_INFO_QUEUES_MAX:
    case HSA_AGENT_INFO_QUEUE_MIN_SIZE:
    case HSA_AGENT_INFO_QUEUE_MAX_SIZE: RT_PUT(value, uint32_t, 0); break;
    case HSA_AGENT_INFO_WORKGROUP_MAX_DIM: memset(value, 0, 3 * sizeof(uint16_t)); break;
    case HSA_AGENT_INFO_GRID_MAX_DIM: memset(value, 0, sizeof(hsa_dim3_t)); break;
    case HSA_AGENT_INFO_QUEUE_TYPE: RT_PUT(value, hsa_queue_type32_t, HSA_QUEUE_TYPE_MULTI); break;
    case HSA_AGENT_INFO_NODE:
    case HSA_AMD_AGENT_INFO_DRIVER_NODE_ID: RT_PUT(value, uint32_t, rt_cpu_agent.node); break;
    case HSA_AGENT_INFO_DEVICE: RT_PUT(value, hsa_device_type_t, HSA_DEVICE_TYPE_CPU); break;
    case HSA_AGENT_INFO_CACHE_SIZE: {
      uint32_t c[4] = {32 * 1024, 1024 * 1024, 32 * 1024 * 1024, 0};
      memcpy(value, c, sizeof c);
      break;
    }
    case HSA_AGENT_INFO_ISA: RT_PUT(value, hsa_isa_t, (hsa_isa_t){0}); break;
    case HSA_AGENT_INFO_EXTENSIONS: memset(value, 0, 128); break;
    case HSA_AGENT_INFO_VERSION_MAJOR:
    case HSA_AGENT_INFO_VERSION_MINOR: RT_PUT(value, uint16_t, 1); break;
    case HSA_AMD_AGENT_INFO_CHIP_ID:
    case HSA_AMD_AGENT_INFO_MAX_ADDRESS_WATCH_POINTS:
    case HSA_AMD_AGENT_INFO_BDFID:
    case HSA_AMD_AGENT_INFO_MEMORY_WIDTH:
    case HSA_AMD_AGENT_INFO_MEMORY_MAX_FREQUENCY:
    case HSA_AMD_AGENT_INFO_MAX_WAVES_PER_CU:
    case HSA_AMD_AGENT_INFO_NUM_SIMDS_PER_CU:
    case HSA_AMD_AGENT_INFO_NUM_SHADER_ENGINES:
    case HSA_AMD_AGENT_INFO_NUM_SHADER_ARRAYS_PER_SE:
    case HSA_AMD_AGENT_INFO_DOMAIN:
    case HSA_AMD_AGENT_INFO_ASIC_REVISION:
    case HSA_AMD_AGENT_INFO_COOPERATIVE_COMPUTE_UNIT_COUNT: RT_PUT(value, uint32_t, 0); break;
    case HSA_AMD_AGENT_INFO_CACHELINE_SIZE: RT_PUT(value, uint32_t, 64); break;
    case HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT: {
      long n = sysconf(_SC_NPROCESSORS_ONLN);
      RT_PUT(value, uint32_t, n > 0 ? (uint32_t)n : 1);
      break;
    }
    case HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY: RT_PUT(value, uint32_t, 0); break;
    case HSA_AMD_AGENT_INFO_COOPERATIVE_QUEUES: RT_PUT(value, bool, false); break;
    case HSA_AMD_AGENT_INFO_SVM_DIRECT_HOST_ACCESS: RT_PUT(value, bool, true); break;
    case HSA_AMD_AGENT_INFO_UUID: snprintf(value, 7, "CPU-XX"); break;
    case HSA_AMD_AGENT_INFO_HDP_FLUSH: memset(value, 0, sizeof(hsa_amd_hdp_flush_t)); break;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT; /* R: unknown attribute */
  }
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t gpu_info(int attribute, void *value) {
  const rt_config_t *c = &rt.cfg;
  switch (attribute) {
    case HSA_AGENT_INFO_NAME: put_name(value, c->proc); break; /* R: the processor, "gfx942" */
    case HSA_AMD_AGENT_INFO_PRODUCT_NAME: {
      char name[64];
      snprintf(name, sizeof name, "softgpu %s (kiln stand-in, not hardware)", c->proc);
      put_name(value, name);
      break;
    }
    case HSA_AGENT_INFO_VENDOR_NAME: put_name(value, "AMD"); break;
    case HSA_AGENT_INFO_FEATURE: RT_PUT(value, hsa_agent_feature_t, HSA_AGENT_FEATURE_KERNEL_DISPATCH); break;
    case HSA_AGENT_INFO_MACHINE_MODEL: RT_PUT(value, hsa_machine_model_t, HSA_MACHINE_MODEL_LARGE); break;
    case HSA_AGENT_INFO_BASE_PROFILE_DEFAULT_FLOAT_ROUNDING_MODES:
    case HSA_AGENT_INFO_DEFAULT_FLOAT_ROUNDING_MODE:
      RT_PUT(value, hsa_default_float_rounding_mode_t, HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR);
      break;
    case HSA_AGENT_INFO_FAST_F16_OPERATION: RT_PUT(value, bool, true); break;
    case HSA_AGENT_INFO_PROFILE: RT_PUT(value, hsa_profile_t, HSA_PROFILE_BASE); break; /* a dGPU */
    case HSA_AGENT_INFO_WAVEFRONT_SIZE: RT_PUT(value, uint32_t, 64); break;
    case HSA_AGENT_INFO_WORKGROUP_MAX_DIM: put_max_dims(value, false); break;
    case HSA_AGENT_INFO_WORKGROUP_MAX_SIZE: RT_PUT(value, uint32_t, 1024); break;
    case HSA_AGENT_INFO_GRID_MAX_DIM: put_max_dims(value, true); break;
    case HSA_AGENT_INFO_GRID_MAX_SIZE: RT_PUT(value, uint32_t, UINT32_MAX); break;
    case HSA_AGENT_INFO_FBARRIER_MAX_SIZE: RT_PUT(value, uint32_t, 32); break;
    case HSA_AGENT_INFO_QUEUES_MAX: RT_PUT(value, uint32_t, 128); break;
    case HSA_AGENT_INFO_QUEUE_MIN_SIZE: RT_PUT(value, uint32_t, 0x40); break;    /* R amd_gpu_agent.h */
    case HSA_AGENT_INFO_QUEUE_MAX_SIZE: RT_PUT(value, uint32_t, 0x20000); break; /* 128K packets */
    case HSA_AGENT_INFO_QUEUE_TYPE: RT_PUT(value, hsa_queue_type32_t, HSA_QUEUE_TYPE_MULTI); break;
    case HSA_AGENT_INFO_NODE:
    case HSA_AMD_AGENT_INFO_DRIVER_NODE_ID: RT_PUT(value, uint32_t, rt_gpu_agent.node); break;
    case HSA_AGENT_INFO_DEVICE: RT_PUT(value, hsa_device_type_t, HSA_DEVICE_TYPE_GPU); break;
    case HSA_AGENT_INFO_CACHE_SIZE: {
      uint32_t cs[4] = {16 * 1024, (c->target == SG_GFX942 ? 4u : 8u) * 1024 * 1024, 0, 0};
      memcpy(value, cs, sizeof cs);
      break;
    }
    case HSA_AGENT_INFO_ISA: RT_PUT(value, hsa_isa_t, (hsa_isa_t){(uint64_t)(uintptr_t)&gpu_isa}); break;
    case HSA_AGENT_INFO_EXTENSIONS: memset(value, 0, 128); break;
    case HSA_AGENT_INFO_VERSION_MAJOR:
    case HSA_AGENT_INFO_VERSION_MINOR: RT_PUT(value, uint16_t, 1); break;
    case HSA_AMD_AGENT_INFO_CHIP_ID: RT_PUT(value, uint32_t, c->target == SG_GFX942 ? 0x74a1 : 0x740f); break;
    case HSA_AMD_AGENT_INFO_CACHELINE_SIZE: RT_PUT(value, uint32_t, 128); break;
    case HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT: RT_PUT(value, uint32_t, c->compute_units); break;
    case HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY: RT_PUT(value, uint32_t, c->target == SG_GFX942 ? 2100 : 1700); break;
    case HSA_AMD_AGENT_INFO_MAX_ADDRESS_WATCH_POINTS: RT_PUT(value, uint32_t, 4); break;
    case HSA_AMD_AGENT_INFO_BDFID: RT_PUT(value, uint32_t, 0); break;
    case HSA_AMD_AGENT_INFO_MEMORY_WIDTH: RT_PUT(value, uint32_t, 8192); break;
    case HSA_AMD_AGENT_INFO_MEMORY_MAX_FREQUENCY: RT_PUT(value, uint32_t, 1300); break;
    case HSA_AMD_AGENT_INFO_MAX_WAVES_PER_CU: RT_PUT(value, uint32_t, 32); break;
    case HSA_AMD_AGENT_INFO_NUM_SIMDS_PER_CU: RT_PUT(value, uint32_t, 4); break;
    case HSA_AMD_AGENT_INFO_NUM_SHADER_ENGINES: RT_PUT(value, uint32_t, c->target == SG_GFX942 ? 32 : 8); break;
    case HSA_AMD_AGENT_INFO_NUM_SHADER_ARRAYS_PER_SE: RT_PUT(value, uint32_t, 1); break;
    case HSA_AMD_AGENT_INFO_HDP_FLUSH: memset(value, 0, sizeof(hsa_amd_hdp_flush_t)); break;
    case HSA_AMD_AGENT_INFO_DOMAIN: RT_PUT(value, uint32_t, 0); break;
    case HSA_AMD_AGENT_INFO_COOPERATIVE_QUEUES: RT_PUT(value, bool, false); break;
    case HSA_AMD_AGENT_INFO_UUID: snprintf(value, 21, "GPU-50f7ca0000000000"); break;
    case HSA_AMD_AGENT_INFO_ASIC_REVISION: RT_PUT(value, uint32_t, 0); break;
    case HSA_AMD_AGENT_INFO_SVM_DIRECT_HOST_ACCESS: RT_PUT(value, bool, false); break;
    case HSA_AMD_AGENT_INFO_COOPERATIVE_COMPUTE_UNIT_COUNT: RT_PUT(value, uint32_t, c->compute_units); break;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT; /* R: unknown attribute */
  }
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attribute, void *value) {
  RT_REQUIRE_OPEN();
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  rt_agent_t *a = rt_agent_from(agent);
  if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
  return a == &rt_cpu_agent ? cpu_info((int)attribute, value) : gpu_info((int)attribute, value);
}

/* --- ISA --------------------------------------------------------------------------------------- */

RT_EXPORT hsa_status_t hsa_agent_iterate_isas(hsa_agent_t agent, hsa_status_t (*callback)(hsa_isa_t isa, void *data),
                                              void *data) {
  RT_REQUIRE_OPEN();
  if (!callback) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  rt_agent_t *a = rt_agent_from(agent);
  if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (a == &rt_cpu_agent) return HSA_STATUS_SUCCESS; /* R hsa.cpp: an agent without ISA */
  return callback((hsa_isa_t){(uint64_t)(uintptr_t)&gpu_isa}, data);
}

RT_EXPORT hsa_status_t hsa_isa_from_name(const char *name, hsa_isa_t *isa) {
  RT_REQUIRE_OPEN();
  if (!name || !isa) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (strcmp(name, rt.cfg.isa_name) != 0) return HSA_STATUS_ERROR_INVALID_ISA_NAME;
  isa->handle = (uint64_t)(uintptr_t)&gpu_isa;
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_isa_get_info_alt(hsa_isa_t isa, hsa_isa_info_t attribute, void *value) {
  RT_REQUIRE_OPEN();
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (!isa_valid(isa)) return HSA_STATUS_ERROR_INVALID_ISA;
  switch ((int)attribute) {
    /* H: the length includes the terminating NUL */
    case HSA_ISA_INFO_NAME_LENGTH: RT_PUT(value, uint32_t, (uint32_t)strlen(rt.cfg.isa_name) + 1); break;
    case HSA_ISA_INFO_NAME: memcpy(value, rt.cfg.isa_name, strlen(rt.cfg.isa_name) + 1); break;
    case HSA_ISA_INFO_CALL_CONVENTION_COUNT: RT_PUT(value, uint32_t, 1); break;
    case HSA_ISA_INFO_CALL_CONVENTION_INFO_WAVEFRONT_SIZE: RT_PUT(value, uint32_t, 64); break;
    case HSA_ISA_INFO_CALL_CONVENTION_INFO_WAVEFRONTS_PER_COMPUTE_UNIT: RT_PUT(value, uint32_t, 40); break;
    case HSA_ISA_INFO_MACHINE_MODELS: {
      bool m[2] = {false, true};
      memcpy(value, m, sizeof m);
      break;
    }
    case HSA_ISA_INFO_PROFILES: {
      bool p[2] = {true, false};
      memcpy(value, p, sizeof p);
      break;
    }
    case HSA_ISA_INFO_DEFAULT_FLOAT_ROUNDING_MODES:
    case HSA_ISA_INFO_BASE_PROFILE_DEFAULT_FLOAT_ROUNDING_MODES: {
      bool r[3] = {false, false, true}; /* DEFAULT, ZERO, NEAR */
      memcpy(value, r, sizeof r);
      break;
    }
    case HSA_ISA_INFO_FAST_F16_OPERATION: RT_PUT(value, bool, true); break;
    case HSA_ISA_INFO_WORKGROUP_MAX_DIM: put_max_dims(value, false); break;
    case HSA_ISA_INFO_WORKGROUP_MAX_SIZE: RT_PUT(value, uint32_t, 1024); break;
    case HSA_ISA_INFO_GRID_MAX_DIM: put_max_dims(value, true); break;
    case HSA_ISA_INFO_GRID_MAX_SIZE: RT_PUT(value, uint64_t, UINT64_MAX); break;
    case HSA_ISA_INFO_FBARRIER_MAX_SIZE: RT_PUT(value, uint32_t, 32); break;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_isa_get_info(hsa_isa_t isa, hsa_isa_info_t attribute, uint32_t index, void *value) {
  RT_REQUIRE_OPEN();
  if (index != 0) return HSA_STATUS_ERROR_INVALID_INDEX; /* H: one call convention */
  return hsa_isa_get_info_alt(isa, attribute, value);
}

RT_EXPORT hsa_status_t hsa_isa_iterate_wavefronts(hsa_isa_t isa, hsa_status_t (*callback)(hsa_wavefront_t, void *),
                                                  void *data) {
  RT_REQUIRE_OPEN();
  if (!callback) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (!isa_valid(isa)) return HSA_STATUS_ERROR_INVALID_ISA;
  return callback((hsa_wavefront_t){64}, data); /* the handle is the size: wave64 only */
}

RT_EXPORT hsa_status_t hsa_wavefront_get_info(hsa_wavefront_t wavefront, hsa_wavefront_info_t attribute,
                                              void *value) {
  RT_REQUIRE_OPEN();
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (wavefront.handle != 64) return HSA_STATUS_ERROR_INVALID_WAVEFRONT;
  if (attribute != HSA_WAVEFRONT_INFO_SIZE) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  RT_PUT(value, uint32_t, 64);
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_isa_compatible(hsa_isa_t code_object_isa, hsa_isa_t agent_isa, bool *result) {
  RT_REQUIRE_OPEN();
  if (!result) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (!isa_valid(code_object_isa) || !isa_valid(agent_isa)) return HSA_STATUS_ERROR_INVALID_ISA;
  *result = true;
  return HSA_STATUS_SUCCESS;
}

/* --- memory pools ----------------------------------------------------------------------------- */

/* The handles of the pools an agent owns, in ROCr's order; false for an unknown agent. */
static bool agent_pools(hsa_agent_t agent, uint64_t out[POOL_COUNT], int *n) {
  rt_agent_t *a = rt_agent_from(agent);
  *n = 0;
  for (int i = 0; a && i < POOL_COUNT; i++)
    if (rt_pools[i].gpu_owned == (a == &rt_gpu_agent)) out[(*n)++] = (uint64_t)(uintptr_t)&rt_pools[i];
  return a != NULL;
}

RT_EXPORT hsa_status_t hsa_amd_agent_iterate_memory_pools(hsa_agent_t agent,
                                                          hsa_status_t (*callback)(hsa_amd_memory_pool_t, void *),
                                                          void *data) {
  RT_REQUIRE_OPEN();
  if (!callback) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  uint64_t h[POOL_COUNT];
  int n;
  if (!agent_pools(agent, h, &n)) return HSA_STATUS_ERROR_INVALID_AGENT;
  hsa_status_t s = HSA_STATUS_SUCCESS;
  for (int i = 0; i < n && s == HSA_STATUS_SUCCESS; i++) s = callback((hsa_amd_memory_pool_t){h[i]}, data);
  return s;
}

static hsa_status_t pool_info(const rt_pool_t *p, int attribute, void *value) {
  bool lds = p->id == POOL_GPU_LDS;
  switch (attribute) {
    case HSA_AMD_MEMORY_POOL_INFO_SEGMENT: RT_PUT(value, hsa_amd_segment_t, p->segment); break;
    case HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS: RT_PUT(value, uint32_t, p->global_flags); break;
    case HSA_AMD_MEMORY_POOL_INFO_SIZE:
      RT_PUT(value, size_t, lds ? LDS_BYTES : p->gpu_owned ? rt.cfg.vram_bytes : system_ram());
      break;
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED: RT_PUT(value, bool, p->alloc_allowed); break;
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE:
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT: RT_PUT(value, size_t, lds ? 0 : RT_PAGE); break;
    case HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL: RT_PUT(value, bool, false); break;
    case HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE:
      RT_PUT(value, size_t, lds ? 0 : p->gpu_owned ? rt.cfg.vram_bytes : system_ram());
      break;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT; /* R: unknown attribute */
  }
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t memory_pool,
                                                    hsa_amd_memory_pool_info_t attribute, void *value) {
  RT_REQUIRE_OPEN();
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  const rt_pool_t *p = pool_from(memory_pool.handle);
  if (!p) return (hsa_status_t)HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
  return pool_info(p, (int)attribute, value);
}

RT_EXPORT hsa_status_t hsa_amd_agent_memory_pool_get_info(hsa_agent_t agent, hsa_amd_memory_pool_t memory_pool,
                                                          hsa_amd_agent_memory_pool_info_t attribute,
                                                          void *value) {
  RT_REQUIRE_OPEN();
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  rt_agent_t *a = rt_agent_from(agent);
  if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
  const rt_pool_t *p = pool_from(memory_pool.handle);
  if (!p) return (hsa_status_t)HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
  bool own = p->gpu_owned == (a == &rt_gpu_agent);
  switch ((int)attribute) {
    case HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS:
      /* A dGPU: the GPU reaches system memory only after allow_access; the host never reaches
       * VRAM or LDS (R amd_gpu_agent.cpp / amd_memory_region.cpp GetAccessInfo). */
      RT_PUT(value, hsa_amd_memory_pool_access_t,
             own ? HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT
                 : a == &rt_gpu_agent ? HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT
                                      : HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED);
      break;
    case HSA_AMD_AGENT_MEMORY_POOL_INFO_NUM_LINK_HOPS: RT_PUT(value, uint32_t, own ? 0 : 1); break;
    case HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO: {
      if (own) break;
      hsa_amd_memory_pool_link_info_t li;
      memset(&li, 0, sizeof li);
      li.atomic_support_32bit = li.atomic_support_64bit = true;
      li.coherent_support = true;
      li.link_type = HSA_AMD_LINK_INFO_TYPE_PCIE;
      memcpy(value, &li, sizeof li);
      break;
    }
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

/* --- regions: the HSA core view of the same pools (R: a pool is a region) ------------------- */

RT_EXPORT hsa_status_t hsa_agent_iterate_regions(hsa_agent_t agent, hsa_status_t (*callback)(hsa_region_t, void *),
                                                 void *data) {
  RT_REQUIRE_OPEN();
  if (!callback) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  uint64_t h[POOL_COUNT];
  int n;
  if (!agent_pools(agent, h, &n)) return HSA_STATUS_ERROR_INVALID_AGENT;
  hsa_status_t s = HSA_STATUS_SUCCESS;
  for (int i = 0; i < n && s == HSA_STATUS_SUCCESS; i++) s = callback((hsa_region_t){h[i]}, data);
  return s;
}

RT_EXPORT hsa_status_t hsa_region_get_info(hsa_region_t region, hsa_region_info_t attribute, void *value) {
  RT_REQUIRE_OPEN();
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  const rt_pool_t *p = pool_from(region.handle);
  if (!p) return HSA_STATUS_ERROR_INVALID_REGION;
  switch ((int)attribute) {
    case HSA_REGION_INFO_SEGMENT:
      RT_PUT(value, hsa_region_segment_t, p->id == POOL_GPU_LDS ? HSA_REGION_SEGMENT_GROUP : HSA_REGION_SEGMENT_GLOBAL);
      return HSA_STATUS_SUCCESS;
    case HSA_REGION_INFO_GLOBAL_FLAGS: {
      uint32_t f = 0;
      if (p->global_flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) f |= HSA_REGION_GLOBAL_FLAG_KERNARG;
      if (p->global_flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED) f |= HSA_REGION_GLOBAL_FLAG_FINE_GRAINED;
      if (p->global_flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED) f |= HSA_REGION_GLOBAL_FLAG_COARSE_GRAINED;
      RT_PUT(value, uint32_t, f);
      return HSA_STATUS_SUCCESS;
    }
    case HSA_REGION_INFO_SIZE: return pool_info(p, HSA_AMD_MEMORY_POOL_INFO_SIZE, value);
    case HSA_REGION_INFO_ALLOC_MAX_SIZE: return pool_info(p, HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE, value);
    case HSA_REGION_INFO_ALLOC_MAX_PRIVATE_WORKGROUP_SIZE: RT_PUT(value, uint32_t, 0); return HSA_STATUS_SUCCESS;
    case HSA_REGION_INFO_RUNTIME_ALLOC_ALLOWED: RT_PUT(value, bool, p->alloc_allowed); return HSA_STATUS_SUCCESS;
    case HSA_REGION_INFO_RUNTIME_ALLOC_GRANULE:
    case HSA_REGION_INFO_RUNTIME_ALLOC_ALIGNMENT:
      RT_PUT(value, size_t, p->alloc_allowed ? RT_PAGE : 0);
      return HSA_STATUS_SUCCESS;
    case HSA_AMD_REGION_INFO_HOST_ACCESSIBLE: RT_PUT(value, bool, !p->gpu_owned); return HSA_STATUS_SUCCESS;
    case HSA_AMD_REGION_INFO_BASE: RT_PUT(value, void *, NULL); return HSA_STATUS_SUCCESS;
    case HSA_AMD_REGION_INFO_BUS_WIDTH: RT_PUT(value, uint32_t, 0); return HSA_STATUS_SUCCESS;
    case HSA_AMD_REGION_INFO_MAX_CLOCK_FREQUENCY: RT_PUT(value, uint32_t, 0); return HSA_STATUS_SUCCESS;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
}

/* Exposed to memory.c: pool handle -> id. */
bool rt_pool_id(uint64_t handle, pool_id_t *out) {
  const rt_pool_t *p = pool_from(handle);
  if (!p) return false;
  *out = p->id;
  return true;
}
