#include <kiln/kernel.h>

/* 2-D 5-point stencil on a w x h grid; edges are copied. */
KILN_KERNEL void stencil5(const float *in, float *out, int w, int h) {
  int x = (int)kiln_global_id(0), y = (int)kiln_global_id(1);
  if (x >= w || y >= h) return;
  int i = y * w + x;
  if (x == 0 || y == 0 || x == w - 1 || y == h - 1) {
    out[i] = in[i];
    return;
  }
  out[i] = 0.5f * in[i] + 0.125f * (in[i - 1] + in[i + 1] + in[i - w] + in[i + w]);
}
