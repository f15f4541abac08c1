#include <kiln/kernel.h>

/* The launch-sequence tests' kernels: y[i] += 1, so a sequence of them counts its launches
 * in order; a fault far outside the buffer; a loop that does not end in any test's time. */
KILN_KERNEL void bump(float *y, int n) {
  int i = (int)kiln_global_id(0);
  if (i < n) y[i] += 1.0f;
}

KILN_KERNEL void fault_far(int *p, long long off) {
  int i = (int)kiln_global_id(0);
  ((volatile int *)p)[off + i] = i;
}

KILN_KERNEL void spin(long long *p, long long n) {
  for (long long i = 0; i < n; i++) ((volatile long long *)p)[0] = i;
}
