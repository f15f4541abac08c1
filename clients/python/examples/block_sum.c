/* A block reduction written in C with kiln/kernel.h: each work-group sums its `block`
 * consecutive elements of x (zero past n) into partial[group], through work-group shared
 * memory and barriers. `clang -O2 -emit-llvm` makes it kiln's kernel dialect; one source
 * then runs on the CPU, AMD and NVIDIA GPUs. Work-groups of at most 256 work-items, a power
 * of two. */
#include <kiln/kernel.h>

KILN_KERNEL void block_sum(const float *x, float *partial, int n) {
  KILN_SHARED float tile[256];
  int lid = kiln_local_id(0);
  int i = kiln_group_id(0) * kiln_group_size(0) + lid;
  tile[lid] = i < n ? x[i] : 0.0f;
  kiln_barrier();
  for (int s = kiln_group_size(0) / 2; s > 0; s /= 2) {
    if (lid < s)
      tile[lid] += tile[lid + s];
    kiln_barrier();
  }
  if (lid == 0)
    partial[kiln_group_id(0)] = tile[0];
}
