#include "device/hsa/fault.h"

#include <hsa/hsa_ext_amd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "device/hsa/backend.h"
#include "device/hsa/status.h"

static const struct {
  uint32_t bit;
  const char *text;
} reasons[] = {
    {HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT, "page not present or supervisor privilege"},
    {HSA_AMD_MEMORY_FAULT_READ_ONLY, "write to a read-only page"},
    {HSA_AMD_MEMORY_FAULT_NX, "execute on a no-execute page"},
    {HSA_AMD_MEMORY_FAULT_HOST_ONLY, "GPU access to host-only memory"},
    {HSA_AMD_MEMORY_FAULT_DRAMECC, "DRAM ECC failure"},
    {HSA_AMD_MEMORY_FAULT_IMPRECISE, "imprecise fault (address may be inexact)"},
    {HSA_AMD_MEMORY_FAULT_SRAMECC, "SRAM ECC failure"},
    {HSA_AMD_MEMORY_FAULT_HANG, "GPU hang"},
};

const char *kiln_hsa_fault_reason(uint32_t mask, char *out, size_t cap) {
  size_t used = 0;
  if (cap) out[0] = '\0';
  uint32_t known = 0;
  for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
    known |= reasons[i].bit;
    if (!(mask & reasons[i].bit) || used >= cap) continue;
    int n = snprintf(out + used, cap - used, "%s%s", used ? ", " : "", reasons[i].text);
    if (n > 0) used += (size_t)n;
  }
  if ((mask & ~known) || mask == 0) {
    if (used < cap)
      snprintf(out + used, cap - used, "%sunknown reason (mask 0x%x)", used ? ", " : "", mask & ~known);
  }
  return out;
}

/* The fault record. ROCr calls the handler once, on its async thread; the worker thread
 * reads it. Returning SUCCESS from the handler keeps ROCr from calling abort(), so the
 * worker can report the fault before it exits (HSA.md §6). */
static struct {
  _Atomic bool seen;
  uint64_t address;
  uint32_t mask;
} fault;

hsa_status_t kiln_hsa_on_system_event(const hsa_amd_event_t *e, void *data) {
  if (e->event_type == HSA_AMD_GPU_MEMORY_FAULT_EVENT) {
    fault.address = e->memory_fault.virtual_address;
    fault.mask = e->memory_fault.fault_reason_mask;
    atomic_store_explicit(&fault.seen, true, memory_order_release);
  }
  return HSA_STATUS_SUCCESS;
}

bool kiln_hsa_fault_seen(uint64_t *out_address, char *reason, size_t cap) {
  if (!atomic_load_explicit(&fault.seen, memory_order_acquire)) return false;
  *out_address = fault.address;
  kiln_hsa_fault_reason(fault.mask, reason, cap);
  return true;
}

kiln_status_t kiln_hsa_check_faults(kiln_device_t *dev, const char *kernel) {
  uint64_t addr;
  char reason[256];
  if (kiln_hsa_fault_seen(&addr, reason, sizeof reason))
    return KILN_STATUS(KILN_E_DEVICE_FAULT,
                       "kernel \"%s\" faulted on %s: memory access at address 0x%llx (%s); the "
                       "GPU context is lost and the device worker restarts",
                       kernel, dev->info.id, (unsigned long long)addr, reason);
  int qe = atomic_load(&dev->queue_error);
  if (qe) {
    kiln_status_t s = kiln_hsa_error((hsa_status_t)qe, __FILE__, __LINE__, "the queue");
    char msg[512];
    snprintf(msg, sizeof msg, "%s", kiln_status_message(s));
    kiln_status_free(s);
    return KILN_STATUS(KILN_E_DEVICE_FAULT,
                       "kernel \"%s\" stopped the queue of %s: %s; the device worker restarts",
                       kernel, dev->info.id, msg);
  }
  return KILN_OK;
}
