#include <kiln/kernel.h>

/* p[off + i] = i with an offset far outside the buffer: a memory fault on every device. */
KILN_KERNEL void fault(int *p, long long off) {
  int i = (int)kiln_global_id(0);
  ((volatile int *)p)[off + i] = i;
}
