/* Block sum: each work-group adds up its block of `in` and writes one partial sum to
 * out[group]. A tree reduction in work-group memory with one barrier per level; the block
 * size must be a power of two. `reduce` uses a static work-group array (blocks up to 1024);
 * `reduce_dyn` the launch's dynamic shared memory (launch with shared = block * 4 bytes). */
#include <kiln/kernel.h>

static inline void block_sum(KILN_SHARED float *part, const float *in, float *out, int n) {
  unsigned t = kiln_local_id(0), size = kiln_group_size(0);
  unsigned i = kiln_global_id(0);
  part[t] = i < (unsigned)n ? in[i] : 0.0f;
  kiln_barrier();
  for (unsigned s = size / 2; s > 0; s /= 2) {
    if (t < s) part[t] += part[t + s];
    kiln_barrier();
  }
  if (t == 0) out[kiln_group_id(0)] = part[0];
}

KILN_KERNEL void reduce(const float *in, float *out, int n) {
  static KILN_SHARED float part[1024];
  block_sum(part, in, out, n);
}

KILN_KERNEL void reduce_dyn(const float *in, float *out, int n) {
  block_sum((KILN_SHARED float *)kiln_dynamic_shared(), in, out, n);
}
