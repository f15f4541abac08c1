#include <kiln/kernel.h>
#include <math.h>

/* One kernel per function, y[i] = f(x[i]); the host checks them against libm in double. */
#define UNARY(name, fn)                                                \
  KILN_KERNEL void name(const float *x, float *y, int n) {             \
    int i = (int)kiln_global_id(0);                                    \
    if (i < n) y[i] = fn(x[i]);                                        \
  }

UNARY(math_exp, expf)
UNARY(math_log, logf)
UNARY(math_sqrt, sqrtf)
UNARY(math_tanh, tanhf)
UNARY(math_erf, erff)
UNARY(math_sin, sinf)

KILN_KERNEL void math_pow(const float *x, const float *e, float *y, int n) {
  int i = (int)kiln_global_id(0);
  if (i < n) y[i] = powf(x[i], e[i]);
}
