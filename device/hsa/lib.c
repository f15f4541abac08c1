#include "device/hsa/lib.h"

#include <dlfcn.h>
#include <stdlib.h>

kiln_hsa_lib_t kiln_hsa;

kiln_status_t kiln_hsa_lib_load(void) {
  if (kiln_hsa.handle) return KILN_OK;
  const char *path = getenv("KILN_HSA_LIBRARY");
  if (!path || !*path) path = "libhsa-runtime64.so.1";
  /* RTLD_NOW: a missing symbol fails here, not in the middle of a dispatch. */
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *err = dlerror();
    return KILN_STATUS(KILN_E_UNAVAILABLE, "ROCm runtime not found (%s): install libhsa-runtime64-1",
                       err ? err : path);
  }
  kiln_hsa_lib_t t = {.handle = h};
#define KILN_HSA_RESOLVE(name)                                                              \
  if (!(t.name = (__typeof__(name) *)dlsym(h, #name))) {                                  \
    dlclose(h);                                                                             \
    return KILN_STATUS(KILN_E_UNAVAILABLE, "%s lacks %s: ROCm runtime too old", path, #name); \
  }
  KILN_HSA_SYMBOLS(KILN_HSA_RESOLVE)
#undef KILN_HSA_RESOLVE
  kiln_hsa = t;
  return KILN_OK;
}
