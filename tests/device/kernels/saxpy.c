#include <kiln/kernel.h>

/* y = alpha * x + y: a scalar argument between pointers. */
KILN_KERNEL void saxpy(float alpha, const float *x, float *y, int n) {
  int i = (int)kiln_global_id(0);
  if (i < n) y[i] = alpha * x[i] + y[i];
}
