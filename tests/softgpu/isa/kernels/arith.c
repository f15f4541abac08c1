#include <kiln/kernel.h>
#include <math.h>

/* Division and friends as LLVM expands them for AMDGPU: f32 a/b through div_scale, rcp,
 * Newton steps in fma, div_fmas and div_fixup; f64 the same in double; integer division
 * through v_rcp_iflag_f32 and correction steps. The host checks every result exactly. */
KILN_KERNEL void fdiv(const float *a, const float *b, float *c, int n) {
  int i = (int)kiln_global_id(0);
  if (i < n) c[i] = a[i] / b[i];
}

KILN_KERNEL void ddiv(const double *a, const double *b, double *c, int n) {
  int i = (int)kiln_global_id(0);
  if (i < n) c[i] = a[i] / b[i];
}

KILN_KERNEL void idivrem(const int *a, const int *b, int *q, int *r, int n) {
  int i = (int)kiln_global_id(0);
  if (i < n) {
    q[i] = a[i] / b[i];
    r[i] = a[i] % b[i];
  }
}

KILN_KERNEL void udiv64(const unsigned long long *a, const unsigned long long *b, unsigned long long *q, int n) {
  int i = (int)kiln_global_id(0);
  if (i < n) q[i] = a[i] / b[i];
}

/* fmin/fmax to a clamp (med3), floor, trunc, rint and a class test */
KILN_KERNEL void fmisc(const float *x, float *y, int n) {
  int i = (int)kiln_global_id(0);
  if (i >= n) return;
  y[4 * i + 0] = fminf(fmaxf(x[i], -1.5f), 2.0f);
  y[4 * i + 1] = floorf(x[i]);
  y[4 * i + 2] = rintf(x[i]) + truncf(x[i]);
  y[4 * i + 3] = (isnan(x[i]) || isinf(x[i])) ? 1.0f : 0.0f;
}
