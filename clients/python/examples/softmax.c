/* Row softmax written in C with kiln/kernel.h: one work-group per row of a rows x cols
 * matrix; its work-items stride over the columns, then combine their maxima and their sums
 * through work-group memory with barriers. expf and fmaxf are the C math names, which kiln
 * maps per target. `clang -O2 -emit-llvm -S` makes this kiln's kernel dialect: one source
 * for the CPU, AMD and NVIDIA GPUs. Work-groups of at most 256 work-items, a power of two. */
#include <kiln/kernel.h>
#include <math.h>

#define MAX_BLOCK 256

/* Tree reduction of red[0..size) into red[0], max or sum; every work-item must call it. */
static inline float group_reduce(KILN_SHARED float *red, unsigned t, unsigned size, int is_max) {
  for (unsigned s = size / 2; s > 0; s /= 2) {
    if (t < s)
      red[t] = is_max ? fmaxf(red[t], red[t + s]) : red[t] + red[t + s];
    kiln_barrier();
  }
  float r = red[0];
  kiln_barrier(); /* everyone has read red[0] before it is reused */
  return r;
}

KILN_KERNEL void softmax_rows(const float *x, float *y, int cols) {
  static KILN_SHARED float red[MAX_BLOCK];
  unsigned t = kiln_local_id(0), size = kiln_group_size(0);
  const float *row = x + (long)kiln_group_id(0) * cols;
  float *out = y + (long)kiln_group_id(0) * cols;

  float m = -INFINITY;
  for (int j = (int)t; j < cols; j += (int)size)
    m = fmaxf(m, row[j]);
  red[t] = m;
  kiln_barrier();
  m = group_reduce(red, t, size, 1);

  float sum = 0.0f;
  for (int j = (int)t; j < cols; j += (int)size) {
    float e = expf(row[j] - m);
    out[j] = e;
    sum += e;
  }
  red[t] = sum;
  kiln_barrier();
  float inv = 1.0f / group_reduce(red, t, size, 0);

  for (int j = (int)t; j < cols; j += (int)size)
    out[j] *= inv;
}
