/* AMDGPU target ids: "gfx90a:sramecc+:xnack-" (processor, then features set + or - ; a
 * feature left out means "any"). Pure functions; any thread. */
#ifndef KILN_DEVICE_HSA_TARGET_H
#define KILN_DEVICE_HSA_TARGET_H

#include <stdbool.h>
#include <stddef.h>

/* The target id of an ISA name as ROCr reports it: strips "amdgcn-amd-amdhsa--".
 * "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-" -> "gfx90a:sramecc+:xnack-". */
void kiln_hsa_target_from_isa(const char *isa_name, char *out, size_t cap);

/* Whether code built for target id `code` runs on an agent whose full target id is
 * `agent` (as from kiln_hsa_target_from_isa): same processor, and every feature the code
 * fixes (+ or -) set the same way on the agent (ROCr's rule, isa.cpp). A leading
 * "amdgcn-amd-amdhsa--" on either is ignored. On false, `why` (cap bytes) says what differs. */
bool kiln_hsa_target_compatible(const char *code, const char *agent, char *why, size_t cap);

#endif
