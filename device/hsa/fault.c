#include "device/hsa/fault.h"

#include <hsa/hsa_ext_amd.h>
#include <stdio.h>
#include <string.h>

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
