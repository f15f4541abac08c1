#include <kiln/kernel.h>

/* partial[group] = sum of the group's 256 elements: a tree in work-group memory with a
 * barrier per level. Launch with 256-wide work-groups. */
KILN_KERNEL void reduce_sum(const int *in, int *partial, int n) {
  static KILN_SHARED int buf[256];
  unsigned l = kiln_local_id(0);
  int i = (int)kiln_global_id(0);
  buf[l] = i < n ? in[i] : 0;
  kiln_barrier();
  for (unsigned s = kiln_group_size(0) / 2; s > 0; s /= 2) {
    if (l < s) buf[l] += buf[l + s];
    kiln_barrier();
  }
  if (l == 0) partial[kiln_group_id(0)] = buf[0];
}
