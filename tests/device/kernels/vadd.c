#include <kiln/kernel.h>

KILN_KERNEL void vadd(const float *a, const float *b, float *c, int n) {
  int i = (int)kiln_global_id(0);
  if (i < n) c[i] = a[i] + b[i];
}
