/* Math names mapped per target: y[i] = f(x[i]) for several functions, float and double. */
#include <kiln/kernel.h>
#include <math.h>

KILN_KERNEL void math_f32(const float *x, float *y, int n) {
  int i = (int)kiln_global_id(0);
  if (i >= n) return;
  float v = x[i];
  y[8 * i + 0] = expf(v);
  y[8 * i + 1] = logf(fabsf(v) + 1.0f);
  y[8 * i + 2] = tanhf(v);
  y[8 * i + 3] = erff(v);
  y[8 * i + 4] = sinf(v);
  y[8 * i + 5] = cosf(v);
  y[8 * i + 6] = powf(fabsf(v), 1.5f);
  y[8 * i + 7] = sqrtf(fabsf(v));
}

KILN_KERNEL void math_f64(const double *x, double *y, int n) {
  int i = (int)kiln_global_id(0);
  if (i >= n) return;
  double v = x[i];
  y[4 * i + 0] = exp(v);
  y[4 * i + 1] = log(fabs(v) + 1.0);
  y[4 * i + 2] = tanh(v);
  y[4 * i + 3] = sin(v);
}
