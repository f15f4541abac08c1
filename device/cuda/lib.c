#include "device/cuda/lib.h"

#include <dlfcn.h>
#include <stdlib.h>

kiln_cuda_lib_t kiln_cuda;

/* The symbol's exported name is the macro-expanded one ("cuMemAlloc_v2"). */
#define KILN_STR_(x) #x
#define KILN_STR(x) KILN_STR_(x)

kiln_status_t kiln_cuda_lib_load(void) {
  if (kiln_cuda.handle) return KILN_OK;
  const char *path = getenv("KILN_CUDA_LIBRARY");
  if (!path || !*path) path = "libcuda.so.1";
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *err = dlerror();
    return KILN_STATUS(KILN_E_UNAVAILABLE, "NVIDIA driver library not found (%s)", err ? err : path);
  }
  kiln_cuda_lib_t t = {.handle = h};
#define KILN_CUDA_RESOLVE(name, fallback)                                                    \
  {                                                                                          \
    const char *fb_ = fallback;                                                              \
    void *p_ = dlsym(h, KILN_STR(name));                                                     \
    if (!p_ && fb_) p_ = dlsym(h, fb_);                                                      \
    if (!p_) {                                                                               \
      dlclose(h);                                                                            \
      return KILN_STATUS(KILN_E_UNAVAILABLE, "%s lacks %s: the NVIDIA driver is too old", path, \
                         KILN_STR(name));                                                    \
    }                                                                                        \
    t.name = (__typeof__(name) *)p_;                                                         \
  }
  KILN_CUDA_SYMBOLS(KILN_CUDA_RESOLVE)
#undef KILN_CUDA_RESOLVE
  t.have_graphs = true;
#define KILN_CUDA_RESOLVE_OPTIONAL(name, fallback)                    \
  {                                                                   \
    t.name = (__typeof__(name) *)dlsym(h, KILN_STR(name));            \
    if (!t.name) t.have_graphs = false;                               \
  }
  KILN_CUDA_OPTIONAL_SYMBOLS(KILN_CUDA_RESOLVE_OPTIONAL)
#undef KILN_CUDA_RESOLVE_OPTIONAL
  kiln_cuda = t;
  return KILN_OK;
}

kiln_code_t kiln_cuda_result_code(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return KILN_E_OK;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
      return KILN_E_DEVICE_FAULT;
    case CUDA_ERROR_OUT_OF_MEMORY:
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
      return KILN_E_RESOURCE_EXHAUSTED;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_INVALID_SOURCE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_NOT_FOUND:
      return KILN_E_INVALID_ARGUMENT;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
      return KILN_E_UNAVAILABLE;
    default:
      return KILN_E_DEVICE;
  }
}

bool kiln_cuda_result_is_sticky(CUresult r) { return kiln_cuda_result_code(r) == KILN_E_DEVICE_FAULT; }

kiln_status_t kiln_cuda_error(CUresult r, const char *file, int line, const char *what) {
  const char *name = NULL, *text = NULL;
  if (kiln_cuda.handle) {
    if (kiln_cuda.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
    if (kiln_cuda.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
  }
  return kiln_status_make(kiln_cuda_result_code(r), file, line, "%s failed: %s (%d)%s%s%s", what,
                          name ? name : "CUDA error", (int)r, text ? ": " : "", text ? text : "",
                          kiln_cuda_result_is_sticky(r)
                              ? "; the CUDA context is lost and the device worker restarts"
                              : "");
}
