/* NVIDIA architecture names: "sm_90" from a compute capability, and whether PTX built for
 * one runs on a device of another. Pure functions; any thread; no driver needed. */
#ifndef KILN_DEVICE_CUDA_ARCH_H
#define KILN_DEVICE_CUDA_ARCH_H

#include <stdbool.h>
#include <stddef.h>

/* "sm_<major><minor>" into out. */
void kiln_cuda_arch_name(int major, int minor, char *out, size_t cap);

/* PTX for `code` ("sm_80", "sm_90a") JIT-compiles for a device of `device` ("sm_90") when
 * the device's capability is at least the code's; an arch-specific target ("a"/"f"
 * suffix) needs the same major (and for "a" the same minor). On false `why` says why. */
bool kiln_cuda_arch_compatible(const char *code, const char *device, char *why, size_t cap);

#endif
