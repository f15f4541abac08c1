/* libhsa-runtime64 reached through a symbol table filled by dlopen: the build needs only
 * the headers, and kilnd runs where ROCm is absent. Function types come from the headers
 * themselves (__typeof__), so a table entry cannot disagree with the API it calls.
 * One table per process (ROCr itself is per process); loaded once, never unloaded. */
#ifndef KILN_DEVICE_HSA_LIB_H
#define KILN_DEVICE_HSA_LIB_H

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

#define KILN_HSA_SYMBOLS(X)                         \
  X(hsa_init)                                       \
  X(hsa_shut_down)                                  \
  X(hsa_status_string)                              \
  X(hsa_system_get_info)                            \
  X(hsa_iterate_agents)                             \
  X(hsa_agent_get_info)                             \
  X(hsa_agent_iterate_isas)                         \
  X(hsa_isa_get_info_alt)                           \
  X(hsa_amd_agent_iterate_memory_pools)             \
  X(hsa_amd_memory_pool_get_info)                   \
  X(hsa_amd_memory_pool_allocate)                   \
  X(hsa_amd_memory_pool_free)                       \
  X(hsa_amd_agents_allow_access)                    \
  X(hsa_amd_memory_fill)                            \
  X(hsa_memory_copy)                                \
  X(hsa_queue_create)                               \
  X(hsa_queue_destroy)                              \
  X(hsa_queue_add_write_index_scacq_screl)          \
  X(hsa_queue_load_read_index_scacquire)            \
  X(hsa_signal_create)                              \
  X(hsa_signal_destroy)                             \
  X(hsa_signal_store_screlease)                     \
  X(hsa_signal_load_scacquire)                      \
  X(hsa_signal_wait_scacquire)                      \
  X(hsa_amd_profiling_set_profiler_enabled)         \
  X(hsa_amd_profiling_get_dispatch_time)            \
  X(hsa_amd_register_system_event_handler)          \
  X(hsa_code_object_reader_create_from_memory)      \
  X(hsa_code_object_reader_destroy)                 \
  X(hsa_executable_create_alt)                      \
  X(hsa_executable_load_agent_code_object)          \
  X(hsa_executable_freeze)                          \
  X(hsa_executable_get_symbol_by_name)              \
  X(hsa_executable_symbol_get_info)                 \
  X(hsa_executable_destroy)

typedef struct kiln_hsa_lib {
  void *handle;
#define KILN_HSA_FIELD(name) __typeof__(name) *name;
  KILN_HSA_SYMBOLS(KILN_HSA_FIELD)
#undef KILN_HSA_FIELD
} kiln_hsa_lib_t;

/* The process's table; valid after kiln_hsa_lib_load succeeded. */
extern kiln_hsa_lib_t kiln_hsa;

/* dlopens libhsa-runtime64.so.1 (or $KILN_HSA_LIBRARY) and resolves every symbol.
 * E_UNAVAILABLE saying which library or symbol is missing. Not thread-safe; idempotent. */
KILN_MUST_USE kiln_status_t kiln_hsa_lib_load(void);

#endif
