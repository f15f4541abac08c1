#include <kiln/kernel.h>

/* bins[in[i] % nbins] += 1 with atomics on global memory. */
KILN_KERNEL void histogram(const unsigned *in, unsigned *bins, int n, int nbins) {
  int i = (int)kiln_global_id(0);
  if (i < n) __atomic_fetch_add(&bins[in[i] % (unsigned)nbins], 1u, __ATOMIC_RELAXED);
}
