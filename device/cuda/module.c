/* Loading PTX with the driver's JIT for this device, keeping the JIT's error log. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/common.h"
#include "device/cuda/arch.h"
#include "device/cuda/backend.h"

#define JIT_LOG_BYTES 8192

static kiln_status_t load_ptx(kiln_dmodule_t *m) {
  const kiln_artifact_t *art = m->art;
  /* The JIT takes a NUL-terminated image; the artifact's bytes need not end in one. */
  char *ptx = malloc(art->code_size + 1);
  char *log = calloc(1, JIT_LOG_BYTES);
  if (!ptx || !log) {
    free(ptx);
    free(log);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  memcpy(ptx, art->code, art->code_size);
  ptx[art->code_size] = '\0';
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[] = {log, (void *)(uintptr_t)JIT_LOG_BYTES};
  CUresult r = kiln_cuda.cuModuleLoadDataEx(&m->module, ptx, 2, opts, vals);
  free(ptx);
  kiln_status_t s = KILN_OK;
  if (r != CUDA_SUCCESS) {
    s = kiln_cuda_error(r, __FILE__, __LINE__, "cuModuleLoadDataEx");
    if (log[0]) s = kiln_status_annotate(s, "PTX JIT: %s", log);
    m->module = NULL;
  }
  free(log);
  return s;
}

static kiln_status_t load_steps(kiln_dmodule_t *m) {
  KILN_RETURN_IF_ERROR(load_ptx(m));
  const kiln_artifact_t *art = m->art;
  m->fns = calloc(art->num_kernels ? art->num_kernels : 1, sizeof *m->fns);
  if (!m->fns) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < art->num_kernels; i++) {
    CUresult r = kiln_cuda.cuModuleGetFunction(&m->fns[i], m->module, art->kernels[i].name);
    if (r != CUDA_SUCCESS)
      return kiln_status_annotate(kiln_cuda_error(r, __FILE__, __LINE__, "cuModuleGetFunction"),
                                  "kernel \"%s\"", art->kernels[i].name);
  }
  return KILN_OK;
}

kiln_status_t kiln_cuda_module_load(kiln_device_t *dev, const kiln_artifact_t *art,
                                    kiln_dmodule_t **out_mod) {
  KILN_RETURN_IF_ERROR(kiln_device_check_artifact(&dev->info, art, KILN_FORMAT_PTX, kiln_cuda_arch_compatible));
  kiln_dmodule_t *m = calloc(1, sizeof *m);
  if (!m) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  m->art = art;
  kiln_status_t s = load_steps(m);
  if (s) {
    kiln_cuda_module_unload(dev, m);
    return s;
  }
  *out_mod = m;
  return KILN_OK;
}

void kiln_cuda_module_unload(kiln_device_t *dev, kiln_dmodule_t *m) {
  if (!m) return;
  if (m->module) kiln_cuda.cuModuleUnload(m->module);
  free(m->fns);
  free(m);
}
