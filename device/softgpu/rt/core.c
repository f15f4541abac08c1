/* hsa_init / hsa_shut_down, status strings, system information and configuration (the small
 * helpers the other files share are in util.c). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "rt.h"

/* --- configuration ------------------------------------------------------------------------------ */

/* A number with an optional K/M/G/T suffix: powers of 1024 for sizes, of 1000 for frequencies. */
static bool parse_scaled(const char *s, uint64_t unit, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return false;
  uint64_t mul = 1;
  const char *suffixes = "KMGT";
  const char *at = *end ? strchr(suffixes, *end & ~0x20) : NULL;
  if (at) {
    for (const char *p = suffixes; p <= at; p++) mul *= unit;
    end++;
  }
  if (*end == 'i' || *end == 'B') end++;
  if (*end == 'B') end++;
  if (unit == 1000 && (*end == 'H' || *end == 'h') && (end[1] == 'z' || end[1] == 'Z')) end += 2;
  if (*end != '\0' || v > UINT64_MAX / mul) return false;
  *out = v * mul;
  return true;
}

/* Reads the environment; false (after saying why) when a variable is malformed: a typo must not
 * silently give a different GPU. */
static bool config_load(rt_config_t *c) {
  memset(c, 0, sizeof *c);
  const char *t = getenv("SOFTGPU_TARGET");
  if (!t || !*t || strcmp(t, "gfx942") == 0) {
    c->target = SG_GFX942;
    c->proc = "gfx942";
    c->isa_name = "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-";
    c->elf_mach = 0x4c; /* EF_AMDGPU_MACH_AMDGCN_GFX942 (AU, ELF header) */
    c->compute_units = 304;
  } else if (strcmp(t, "gfx90a") == 0) {
    c->target = SG_GFX90A;
    c->proc = "gfx90a";
    c->isa_name = "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-";
    c->elf_mach = 0x3f; /* EF_AMDGPU_MACH_AMDGCN_GFX90A */
    c->compute_units = 110;
  } else {
    rt_log("SOFTGPU_TARGET=%s is not a target the stand-in models (gfx942 or gfx90a)", t);
    return false;
  }
  c->vram_bytes = 16ull << 30;
  const char *v = getenv("SOFTGPU_VRAM");
  if (v && *v && (!parse_scaled(v, 1024, &c->vram_bytes) || c->vram_bytes < (64ull << 20))) {
    rt_log("SOFTGPU_VRAM=%s is not a size of at least 64M (e.g. 16G)", v);
    return false;
  }
  c->timestamp_hz = 1000000000ull; /* R: ROCr reports a 1 GHz system timestamp */
  const char *hz = getenv("SOFTGPU_TIMESTAMP_HZ");
  if (hz && *hz && (!parse_scaled(hz, 1000, &c->timestamp_hz) || c->timestamp_hz < 1000 ||
                    c->timestamp_hz > 1000000000000ull)) {
    rt_log("SOFTGPU_TIMESTAMP_HZ=%s is not a frequency between 1000 and 10^12", hz);
    return false;
  }
  const char *st = getenv("SOFTGPU_STRICT");
  c->strict = !(st && strcmp(st, "0") == 0);
  c->max_code_object = 6;
  const char *co = getenv("SOFTGPU_MAX_CODE_OBJECT");
  if (co && *co) {
    if (strcmp(co, "4") && strcmp(co, "5") && strcmp(co, "6")) {
      rt_log("SOFTGPU_MAX_CODE_OBJECT=%s is not 4, 5 or 6", co);
      return false;
    }
    c->max_code_object = (uint32_t)atoi(co);
  }
  c->doorbell_grace_ms = 100;
  const char *check = getenv("SOFTGPU_CHECK"); /* the interpreter reads the rest of it */
  c->track_init = check && strstr(check, "uninit");
  return true;
}

/* --- init / shut down --------------------------------------------------------------------------- */

RT_EXPORT hsa_status_t hsa_init(void) {
  pthread_mutex_lock(&rt.lock);
  if (rt.refcount == 0) {
    if (!config_load(&rt.cfg)) {
      pthread_mutex_unlock(&rt.lock);
      return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
  } else if (rt.refcount == INT32_MAX) {
    pthread_mutex_unlock(&rt.lock);
    return HSA_STATUS_ERROR_REFCOUNT_OVERFLOW; /* H: hsa_init */
  }
  rt.refcount++;
  pthread_mutex_unlock(&rt.lock);
  return HSA_STATUS_SUCCESS;
}

/* The last shut-down frees everything the process still holds, as ROCr does, and names what a
 * well-behaved client should have released first. */
RT_EXPORT hsa_status_t hsa_shut_down(void) {
  pthread_mutex_lock(&rt.lock);
  if (rt.refcount == 0) {
    pthread_mutex_unlock(&rt.lock);
    return HSA_STATUS_ERROR_NOT_INITIALIZED;
  }
  bool last = rt.refcount == 1;
  pthread_mutex_unlock(&rt.lock);
  if (last) {
    uint64_t bytes = 0;
    size_t q = rt_queue_live(), e = rt_exec_live(), s = rt_signal_live(), m = rt_mem_live(&bytes);
    if (q || e || s || m)
      rt_log("hsa_shut_down: the client leaked %zu queue(s), %zu executable(s), %zu signal(s) and "
             "%zu allocation(s) (%llu bytes); freeing them", q, e, s, m, (unsigned long long)bytes);
    rt_queue_release_all();
    rt_event_release_all();
    rt_exec_release_all();
    rt_signal_release_all();
    rt_mem_release_all();
    sg_shutdown();
  }
  pthread_mutex_lock(&rt.lock);
  rt.refcount--;
  pthread_mutex_unlock(&rt.lock);
  return HSA_STATUS_SUCCESS;
}

/* --- status strings ----------------------------------------------------------------------------- */

static const struct {
  hsa_status_t status;
  const char *text;
} status_text[] = {
    {HSA_STATUS_SUCCESS, "HSA_STATUS_SUCCESS: The function has been executed successfully."},
    {HSA_STATUS_INFO_BREAK, "HSA_STATUS_INFO_BREAK: A traversal over a list of elements has been interrupted by the application before completing."},
    {HSA_STATUS_ERROR, "HSA_STATUS_ERROR: A generic error has occurred."},
    {HSA_STATUS_ERROR_INVALID_ARGUMENT, "HSA_STATUS_ERROR_INVALID_ARGUMENT: One of the actual arguments does not meet a precondition stated in the documentation of the corresponding formal argument."},
    {HSA_STATUS_ERROR_INVALID_QUEUE_CREATION, "HSA_STATUS_ERROR_INVALID_QUEUE_CREATION: The requested queue creation is not valid."},
    {HSA_STATUS_ERROR_INVALID_ALLOCATION, "HSA_STATUS_ERROR_INVALID_ALLOCATION: The requested allocation is not valid."},
    {HSA_STATUS_ERROR_INVALID_AGENT, "HSA_STATUS_ERROR_INVALID_AGENT: The agent is invalid."},
    {HSA_STATUS_ERROR_INVALID_REGION, "HSA_STATUS_ERROR_INVALID_REGION: The memory region is invalid."},
    {HSA_STATUS_ERROR_INVALID_SIGNAL, "HSA_STATUS_ERROR_INVALID_SIGNAL: The signal is invalid."},
    {HSA_STATUS_ERROR_INVALID_QUEUE, "HSA_STATUS_ERROR_INVALID_QUEUE: The queue is invalid."},
    {HSA_STATUS_ERROR_OUT_OF_RESOURCES, "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources."},
    {HSA_STATUS_ERROR_INVALID_PACKET_FORMAT, "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT: The AQL packet is malformed."},
    {HSA_STATUS_ERROR_RESOURCE_FREE, "HSA_STATUS_ERROR_RESOURCE_FREE: An error has been detected while releasing a resource."},
    {HSA_STATUS_ERROR_NOT_INITIALIZED, "HSA_STATUS_ERROR_NOT_INITIALIZED: An API other than hsa_init has been invoked while the reference count of the HSA runtime is zero."},
    {HSA_STATUS_ERROR_REFCOUNT_OVERFLOW, "HSA_STATUS_ERROR_REFCOUNT_OVERFLOW: The maximum reference count for the object has been reached."},
    {HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS, "HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS: The arguments passed to a functions are not compatible."},
    {HSA_STATUS_ERROR_INVALID_INDEX, "HSA_STATUS_ERROR_INVALID_INDEX: The index is invalid."},
    {HSA_STATUS_ERROR_INVALID_ISA, "HSA_STATUS_ERROR_INVALID_ISA: The instruction set architecture is invalid."},
    {HSA_STATUS_ERROR_INVALID_ISA_NAME, "HSA_STATUS_ERROR_INVALID_ISA_NAME: The instruction set architecture name is invalid."},
    {HSA_STATUS_ERROR_INVALID_CODE_OBJECT, "HSA_STATUS_ERROR_INVALID_CODE_OBJECT: The code object is invalid."},
    {HSA_STATUS_ERROR_INVALID_EXECUTABLE, "HSA_STATUS_ERROR_INVALID_EXECUTABLE: The executable is invalid."},
    {HSA_STATUS_ERROR_FROZEN_EXECUTABLE, "HSA_STATUS_ERROR_FROZEN_EXECUTABLE: The executable is frozen."},
    {HSA_STATUS_ERROR_INVALID_SYMBOL_NAME, "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: There is no symbol with the given name."},
    {HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED, "HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED: The variable is already defined."},
    {HSA_STATUS_ERROR_VARIABLE_UNDEFINED, "HSA_STATUS_ERROR_VARIABLE_UNDEFINED: The variable is undefined."},
    {HSA_STATUS_ERROR_EXCEPTION, "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception."},
    {HSA_STATUS_ERROR_INVALID_CODE_SYMBOL, "HSA_STATUS_ERROR_INVALID_CODE_SYMBOL: The code object symbol is invalid."},
    {HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL, "HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL: The executable symbol is invalid."},
    {HSA_STATUS_ERROR_INVALID_FILE, "HSA_STATUS_ERROR_INVALID_FILE: The file descriptor is invalid."},
    {HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER, "HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER: The code object reader is invalid."},
    {HSA_STATUS_ERROR_INVALID_CACHE, "HSA_STATUS_ERROR_INVALID_CACHE: The cache is invalid."},
    {HSA_STATUS_ERROR_INVALID_WAVEFRONT, "HSA_STATUS_ERROR_INVALID_WAVEFRONT: The wavefront is invalid."},
    {HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP, "HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP: The signal group is invalid."},
    {HSA_STATUS_ERROR_INVALID_RUNTIME_STATE, "HSA_STATUS_ERROR_INVALID_RUNTIME_STATE: The HSA runtime is not in the configuration state."},
    {HSA_STATUS_ERROR_FATAL, "HSA_STATUS_ERROR_FATAL: The queue received an error that may require process termination."},
    {(hsa_status_t)HSA_STATUS_ERROR_INVALID_MEMORY_POOL, "HSA_STATUS_ERROR_INVALID_MEMORY_POOL: The memory pool is invalid."},
    {(hsa_status_t)HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION, "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal address."},
    {(hsa_status_t)HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION, "HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION: The agent attempted to execute an illegal shader instruction."},
    {(hsa_status_t)HSA_STATUS_ERROR_MEMORY_FAULT, "HSA_STATUS_ERROR_MEMORY_FAULT: The agent attempted to access memory it may not touch."},
    {(hsa_status_t)HSA_STATUS_CU_MASK_REDUCED, "HSA_STATUS_CU_MASK_REDUCED: The CU mask was successfully set but the mask attempted to enable a CU which was disabled for the process."},
};

/* H: works whatever the runtime's state, so a client can explain a failed hsa_init. */
RT_EXPORT hsa_status_t hsa_status_string(hsa_status_t status, const char **status_string) {
  if (!status_string) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  for (size_t i = 0; i < sizeof status_text / sizeof status_text[0]; i++)
    if (status_text[i].status == status) {
      *status_string = status_text[i].text;
      return HSA_STATUS_SUCCESS;
    }
  return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

/* --- system information ------------------------------------------------------------------------- */

RT_EXPORT hsa_status_t hsa_system_get_info(hsa_system_info_t attribute, void *value) {
  RT_REQUIRE_OPEN();
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  switch ((int)attribute) {
    case HSA_SYSTEM_INFO_VERSION_MAJOR: RT_PUT(value, uint16_t, 1); break;
    case HSA_SYSTEM_INFO_VERSION_MINOR: RT_PUT(value, uint16_t, 1); break;
    case HSA_SYSTEM_INFO_TIMESTAMP: RT_PUT(value, uint64_t, rt_ticks()); break;
    case HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY: RT_PUT(value, uint64_t, rt.cfg.timestamp_hz); break;
    case HSA_SYSTEM_INFO_SIGNAL_MAX_WAIT: RT_PUT(value, uint64_t, UINT64_MAX); break;
    case HSA_SYSTEM_INFO_ENDIANNESS: RT_PUT(value, hsa_endianness_t, HSA_ENDIANNESS_LITTLE); break;
    case HSA_SYSTEM_INFO_MACHINE_MODEL: RT_PUT(value, hsa_machine_model_t, HSA_MACHINE_MODEL_LARGE); break;
    case HSA_SYSTEM_INFO_EXTENSIONS:
      /* No extension tables (finalizer, images, loader, profiler) are offered. */
      memset(value, 0, 128);
      break;
    case HSA_AMD_SYSTEM_INFO_BUILD_VERSION: RT_PUT(value, const char *, "softgpu stand-in (kiln)"); break;
    case HSA_AMD_SYSTEM_INFO_SVM_SUPPORTED: RT_PUT(value, bool, false); break;
    case HSA_AMD_SYSTEM_INFO_SVM_ACCESSIBLE_BY_DEFAULT: RT_PUT(value, bool, false); break;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_extension_get_name(uint16_t extension, const char **name) {
  RT_REQUIRE_OPEN();
  if (!name) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  switch (extension) {
    case HSA_EXTENSION_FINALIZER: *name = "HSA_EXTENSION_FINALIZER"; break;
    case HSA_EXTENSION_IMAGES: *name = "HSA_EXTENSION_IMAGES"; break;
    case HSA_EXTENSION_PERFORMANCE_COUNTERS: *name = "HSA_EXTENSION_PERFORMANCE_COUNTERS"; break;
    case HSA_EXTENSION_PROFILING_EVENTS: *name = "HSA_EXTENSION_PROFILING_EVENTS"; break;
    case HSA_EXTENSION_AMD_PROFILER: *name = "HSA_EXTENSION_AMD_PROFILER"; break;
    case HSA_EXTENSION_AMD_LOADER: *name = "HSA_EXTENSION_AMD_LOADER"; break;
    case HSA_EXTENSION_AMD_AQLPROFILE: *name = "HSA_EXTENSION_AMD_AQLPROFILE"; break;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

/* No extension is supported: each answers "no" rather than failing, as H allows. */
RT_EXPORT hsa_status_t hsa_system_extension_supported(uint16_t extension, uint16_t version_major,
                                                      uint16_t version_minor, bool *result) {
  RT_REQUIRE_OPEN();
  if (!result) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  *result = false;
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_system_major_extension_supported(uint16_t extension, uint16_t version_major,
                                                            uint16_t *version_minor, bool *result) {
  RT_REQUIRE_OPEN();
  if (!result || !version_minor) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  *result = false;
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_agent_extension_supported(uint16_t extension, hsa_agent_t agent,
                                                     uint16_t version_major, uint16_t version_minor,
                                                     bool *result) {
  RT_REQUIRE_OPEN();
  if (!result) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (!rt_agent_from(agent)) return HSA_STATUS_ERROR_INVALID_AGENT;
  *result = false;
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_agent_major_extension_supported(uint16_t extension, hsa_agent_t agent,
                                                           uint16_t version_major,
                                                           uint16_t *version_minor, bool *result) {
  RT_REQUIRE_OPEN();
  if (!result || !version_minor) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (!rt_agent_from(agent)) return HSA_STATUS_ERROR_INVALID_AGENT;
  *result = false;
  return HSA_STATUS_SUCCESS;
}

/* Every hsa.h / hsa_ext_amd.h function the stand-in does not model (failclosed.c). */
void rt_fail_closed(const char *name);
void rt_fail_closed(const char *name) {
  rt_log("%s is not implemented by the stand-in runtime: failing closed (HSA_STATUS_ERROR)", name);
}
