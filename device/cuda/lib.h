/* libcuda.so.1 reached through a symbol table filled by dlopen: the build needs cuda.h
 * for types only and never links the driver. cuda.h maps many names to versioned ones
 * (cuMemAlloc -> cuMemAlloc_v2); the table uses the mapped name for both the field's type
 * (__typeof__) and the dlsym lookup, so each entry calls the ABI its type describes.
 * One table per process; loaded once, never unloaded. */
#ifndef KILN_DEVICE_CUDA_LIB_H
#define KILN_DEVICE_CUDA_LIB_H

#include <cuda.h>
#include <stdbool.h>

#include "base/status.h"

/* X(function, fallback): fallback is an older exported name with the SAME signature, tried
 * when the driver predates the mapped one (cuEventElapsedTime_v2 came with CUDA 12.8), or
 * NULL. Never list an older name whose ABI differs (cuMemAlloc takes a 32-bit size). */
#define KILN_CUDA_SYMBOLS(X)                               \
  X(cuInit, NULL)                                          \
  X(cuDriverGetVersion, NULL)                              \
  X(cuGetErrorName, NULL)                                  \
  X(cuGetErrorString, NULL)                                \
  X(cuDeviceGetCount, NULL)                                \
  X(cuDeviceGet, NULL)                                     \
  X(cuDeviceGetName, NULL)                                 \
  X(cuDeviceGetAttribute, NULL)                            \
  X(cuDeviceTotalMem, NULL)                                \
  X(cuDevicePrimaryCtxRetain, NULL)                        \
  X(cuDevicePrimaryCtxRelease, NULL)                       \
  X(cuCtxSetCurrent, NULL)                                 \
  X(cuMemAlloc, NULL)                                      \
  X(cuMemFree, NULL)                                       \
  X(cuMemcpyHtoD, NULL)                                    \
  X(cuMemcpyDtoH, NULL)                                    \
  X(cuMemcpyDtoD, NULL)                                    \
  X(cuMemsetD32, NULL)                                     \
  X(cuModuleLoadDataEx, NULL)                              \
  X(cuModuleUnload, NULL)                                  \
  X(cuModuleGetFunction, NULL)                             \
  X(cuFuncSetAttribute, NULL)                              \
  X(cuLaunchKernel, NULL)                                  \
  X(cuStreamCreate, NULL)                                  \
  X(cuStreamDestroy, NULL)                                 \
  X(cuStreamQuery, NULL)                                   \
  X(cuStreamSynchronize, NULL)                             \
  X(cuEventCreate, NULL)                                   \
  X(cuEventRecord, NULL)                                   \
  X(cuEventQuery, NULL)                                    \
  X(cuEventElapsedTime, "cuEventElapsedTime")              \
  X(cuEventDestroy, NULL)

/* Optional entries: NULL when the driver lacks them (then kiln does without: launch
 * sequences without CUDA graph capture). All of CUDA 11.4's. */
#define KILN_CUDA_OPTIONAL_SYMBOLS(X)                      \
  X(cuStreamBeginCapture, NULL)                            \
  X(cuStreamEndCapture, NULL)                              \
  X(cuEventRecordWithFlags, NULL)                          \
  X(cuGraphInstantiate, NULL)                              \
  X(cuGraphLaunch, NULL)                                   \
  X(cuGraphExecDestroy, NULL)                              \
  X(cuGraphDestroy, NULL)

typedef struct kiln_cuda_lib {
  void *handle;
#define KILN_CUDA_FIELD(name, fallback) __typeof__(name) *name;
  KILN_CUDA_SYMBOLS(KILN_CUDA_FIELD)
  KILN_CUDA_OPTIONAL_SYMBOLS(KILN_CUDA_FIELD)
#undef KILN_CUDA_FIELD
  bool have_graphs; /* every optional entry was found */
} kiln_cuda_lib_t;

extern kiln_cuda_lib_t kiln_cuda;

/* dlopens libcuda.so.1 (or $KILN_CUDA_LIBRARY) and resolves the table. E_UNAVAILABLE
 * naming what is missing. Not thread-safe; idempotent. */
KILN_MUST_USE kiln_status_t kiln_cuda_lib_load(void);

/* The kiln code for a CUresult (pure): faults in a kernel (illegal address, launch failed,
 * misaligned address, illegal instruction, ...) -> E_DEVICE_FAULT; out of memory ->
 * E_RESOURCE_EXHAUSTED; bad PTX / image / values -> E_INVALID_ARGUMENT; no driver or
 * device -> E_UNAVAILABLE; else E_DEVICE. */
kiln_code_t kiln_cuda_result_code(CUresult r);
/* Whether r leaves the context unusable (every later call fails): the worker must exit. */
bool kiln_cuda_result_is_sticky(CUresult r);

KILN_MUST_USE kiln_status_t kiln_cuda_error(CUresult r, const char *file, int line, const char *what);

#define KILN_CU_TRY(call)                                                    \
  do {                                                                       \
    CUresult kiln_cr_ = (call);                                              \
    if (kiln_cr_ != CUDA_SUCCESS) return kiln_cuda_error(kiln_cr_, __FILE__, __LINE__, #call); \
  } while (0)

#endif
