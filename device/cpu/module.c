/* Loading a cpu artifact: the shared object is written to a memfd and dlopen'ed through
 * /proc/self/fd/N, so nothing touches the file system and nothing is left behind. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "device/common.h"
#include "device/cpu/cpu.h"

static kiln_status_t write_all(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return KILN_STATUS(KILN_E_DEVICE, "writing the module to a memfd: %s", strerror(errno));
    }
    p += w;
    n -= (size_t)w;
  }
  return KILN_OK;
}

static kiln_status_t resolve(kiln_dmodule_t *m) {
  const kiln_artifact_t *art = m->art;
  const uint32_t *version = dlsym(m->handle, KILN_CPU_ABI_SYMBOL);
  if (!version)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "cpu module has no %s: not made by kiln's cpu compiler", KILN_CPU_ABI_SYMBOL);
  if (*version != KILN_CPU_ABI_VERSION)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "cpu module has ABI version %u, this worker runs version %u: recompile it",
                       *version, KILN_CPU_ABI_VERSION);
  m->fns = calloc(art->num_kernels ? art->num_kernels : 1, sizeof *m->fns);
  if (!m->fns) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < art->num_kernels; i++) {
    char sym[sizeof KILN_CPU_WG_PREFIX + sizeof art->kernels[i].name];
    snprintf(sym, sizeof sym, "%s%s", KILN_CPU_WG_PREFIX, art->kernels[i].name);
    m->fns[i] = (kiln_cpu_wg_fn_t)dlsym(m->handle, sym);
    if (!m->fns[i])
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "cpu module lacks %s for kernel \"%s\"", sym,
                         art->kernels[i].name);
  }
  return KILN_OK;
}

kiln_status_t kiln_cpu_module_load(const kiln_artifact_t *art, kiln_dmodule_t **out_mod) {
  if (art->format != KILN_FORMAT_CPU_SO)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "module for target \"%s\" cannot run on the cpu: compile it for target cpu",
                       art->target);
  kiln_dmodule_t *m = calloc(1, sizeof *m);
  if (!m) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  m->art = art;
  m->fd = memfd_create("kiln-cpu-module", MFD_CLOEXEC);
  kiln_status_t s = KILN_OK;
  if (m->fd < 0) {
    s = KILN_STATUS(KILN_E_DEVICE, "memfd_create: %s", strerror(errno));
    goto fail;
  }
  if ((s = write_all(m->fd, art->code, art->code_size))) goto fail;
  /* glibc finds an already-loaded object by path name before it looks at the file, so a
   * path must not be reused while its module is loaded: the memfd stays open (and its fd
   * number taken) until module_unload has dlclose'd. */
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", m->fd);
  m->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!m->handle) {
    const char *err = dlerror();
    s = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "cannot load the cpu module: %s",
                    err ? err : "dlopen failed");
    goto fail;
  }
  if ((s = resolve(m))) goto fail;
  *out_mod = m;
  return KILN_OK;
fail:
  kiln_cpu_module_unload(m);
  return s;
}

void kiln_cpu_module_unload(kiln_dmodule_t *m) {
  if (!m) return;
  if (m->handle) dlclose(m->handle);
  if (m->fd >= 0) close(m->fd);
  free(m->fns);
  free(m);
}

kiln_cpu_wg_fn_t kiln_cpu_module_fn(const kiln_dmodule_t *m, const kiln_kernel_t *kernel) {
  int64_t i = kiln_device_kernel_index(m->art, kernel);
  return i < 0 ? NULL : m->fns[i];
}
