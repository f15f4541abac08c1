#include <kiln/kernel.h>

/* Vector add with 16-byte loads and stores (one float4 per work-item): the bandwidth
 * kernel of bench/device_bench.c. Not part of the conformance checks. */
typedef float kiln_float4 __attribute__((ext_vector_type(4)));

KILN_KERNEL void vadd4(const kiln_float4 *a, const kiln_float4 *b, kiln_float4 *c, int n4) {
  int i = (int)kiln_global_id(0);
  if (i < n4) c[i] = a[i] + b[i];
}
