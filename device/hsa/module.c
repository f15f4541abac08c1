/* Loading an HSACO (HSA.md §3): reader over the artifact's bytes (not copied: they must
 * outlive the executable), executable, load for our agent, freeze, one symbol per kernel. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/common.h"
#include "device/hsa/backend.h"
#include "device/hsa/target.h"

static kiln_status_t kernel_code(kiln_device_t *dev, kiln_dmodule_t *m, const kiln_kernel_t *k,
                                 kiln_hsa_kernel_code_t *out) {
  /* Only symbols named "<kernel>.kd" are kernel descriptors to ROCr. */
  char sym_name[sizeof k->name + 4];
  snprintf(sym_name, sizeof sym_name, "%s.kd", k->name);
  hsa_executable_symbol_t sym;
  hsa_status_t hs = kiln_hsa.hsa_executable_get_symbol_by_name(m->exe, sym_name, &dev->gpu, &sym);
  if (hs != HSA_STATUS_SUCCESS)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "code object has no kernel symbol %s", sym_name);
  KILN_HSA_TRY(kiln_hsa.hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                                                       &out->kernel_object));
  KILN_HSA_TRY(kiln_hsa.hsa_executable_symbol_get_info(
      sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE, &out->kernarg_size));
  KILN_HSA_TRY(kiln_hsa.hsa_executable_symbol_get_info(
      sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE, &out->group_segment_size));
  KILN_HSA_TRY(kiln_hsa.hsa_executable_symbol_get_info(
      sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE, &out->private_segment_size));
  /* The descriptor and the metadata note must agree, or packing from the table would
   * leave the kernel reading bytes nobody wrote. */
  if (out->kernarg_size != k->kernarg_size)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "kernel \"%s\": descriptor kernarg size %u disagrees with metadata %u",
                       k->name, out->kernarg_size, k->kernarg_size);
  if (out->kernarg_size > KILN_HSA_KERNARG_SLAB)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "kernel \"%s\": kernarg segment of %u bytes is too large",
                       k->name, out->kernarg_size);
  return KILN_OK;
}

static kiln_status_t load_steps(kiln_device_t *dev, kiln_dmodule_t *m) {
  const kiln_artifact_t *art = m->art;
  KILN_HSA_TRY(kiln_hsa.hsa_code_object_reader_create_from_memory(art->code, art->code_size, &m->reader));
  m->have_reader = true;
  /* LLVM emits no HSAIL profile note, so any profile is accepted. */
  KILN_HSA_TRY(kiln_hsa.hsa_executable_create_alt(HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                                                  NULL, &m->exe));
  m->have_exe = true;
  KILN_HSA_TRY(kiln_hsa.hsa_executable_load_agent_code_object(m->exe, dev->gpu, m->reader, NULL, NULL));
  KILN_HSA_TRY(kiln_hsa.hsa_executable_freeze(m->exe, NULL));
  m->codes = calloc(art->num_kernels ? art->num_kernels : 1, sizeof *m->codes);
  if (!m->codes) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < art->num_kernels; i++)
    KILN_RETURN_IF_ERROR(kernel_code(dev, m, &art->kernels[i], &m->codes[i]));
  return KILN_OK;
}

kiln_status_t kiln_hsa_module_load(kiln_device_t *dev, const kiln_artifact_t *art,
                                   kiln_dmodule_t **out_mod) {
  KILN_RETURN_IF_ERROR(kiln_device_check_artifact(&dev->info, art, KILN_FORMAT_HSACO, kiln_hsa_target_compatible));
  kiln_dmodule_t *m = calloc(1, sizeof *m);
  if (!m) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  m->art = art;
  kiln_status_t s = load_steps(dev, m);
  if (s) {
    kiln_hsa_module_unload(dev, m);
    return s;
  }
  *out_mod = m;
  return KILN_OK;
}

void kiln_hsa_module_unload(kiln_device_t *dev, kiln_dmodule_t *m) {
  if (!m) return;
  if (m->have_exe) kiln_hsa.hsa_executable_destroy(m->exe);
  if (m->have_reader) kiln_hsa.hsa_code_object_reader_destroy(m->reader);
  free(m->codes);
  free(m);
}

const kiln_hsa_kernel_code_t *kiln_hsa_module_code(const kiln_dmodule_t *m, const kiln_kernel_t *k) {
  int64_t i = kiln_device_kernel_index(m->art, k);
  return i < 0 ? NULL : &m->codes[i];
}
