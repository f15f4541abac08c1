/* OpenCL C twins of the conformance kernels in tests/device/kernels/*.c, statement for
 * statement, so that bench/pocl/pocl_vs_kiln.c can run the same problem on PoCL and on
 * kiln's cpu backend and compare time and outputs. Keep them in step with the originals. */

/* vadd.c */
__kernel void vadd(__global const float *a, __global const float *b, __global float *c, int n) {
  int i = (int)get_global_id(0);
  if (i < n) c[i] = a[i] + b[i];
}

/* saxpy.c: y = alpha * x + y. FP_CONTRACT is on by default in OpenCL C, as clang's
 * -ffp-contract=on is for the kiln kernel (its .bc has llvm.fmuladd), so both may fuse. */
__kernel void saxpy(float alpha, __global const float *x, __global float *y, int n) {
  int i = (int)get_global_id(0);
  if (i < n) y[i] = alpha * x[i] + y[i];
}

/* transpose.c: 16x16 tile in local memory with a padding column; 16x16 work-groups. */
#define TILE 16
__kernel void transpose(__global const float *in, __global float *out, int rows, int cols) {
  __local float tile[TILE][TILE + 1];
  int lx = (int)get_local_id(0), ly = (int)get_local_id(1);
  int bx = (int)get_group_id(0) * TILE, by = (int)get_group_id(1) * TILE;
  int x = bx + lx, y = by + ly;
  if (x < cols && y < rows) tile[ly][lx] = in[y * cols + x];
  barrier(CLK_LOCAL_MEM_FENCE);
  int ox = by + lx, oy = bx + ly;
  if (ox < rows && oy < cols) out[oy * rows + ox] = tile[lx][ly];
}

/* reduce.c: partial[group] = sum of the group's 256 elements, tree with a barrier per level. */
__kernel void reduce_sum(__global const int *in, __global int *partial, int n) {
  __local int buf[256];
  uint l = (uint)get_local_id(0);
  int i = (int)get_global_id(0);
  buf[l] = i < n ? in[i] : 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = (uint)get_local_size(0) / 2; s > 0; s /= 2) {
    if (l < s) buf[l] += buf[l + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (l == 0) partial[get_group_id(0)] = buf[0];
}

/* histogram.c: bins[in[i] % nbins] += 1 with global atomics (relaxed in kiln; OpenCL 1.2
 * atomic_inc is the equivalent). */
__kernel void histogram(__global const uint *in, __global uint *bins, int n, int nbins) {
  int i = (int)get_global_id(0);
  if (i < n) atomic_inc(&bins[in[i] % (uint)nbins]);
}

/* stencil.c: 2-D 5-point stencil on a w x h grid; edges copied. */
__kernel void stencil5(__global const float *in, __global float *out, int w, int h) {
  int x = (int)get_global_id(0), y = (int)get_global_id(1);
  if (x >= w || y >= h) return;
  int i = y * w + x;
  if (x == 0 || y == 0 || x == w - 1 || y == h - 1) {
    out[i] = in[i];
    return;
  }
  out[i] = 0.5f * in[i] + 0.125f * (in[i - 1] + in[i + 1] + in[i - w] + in[i + w]);
}

/* math.c: y[i] = f(x[i]) with the full-precision built-ins (no native_/half_, no
 * -cl-fast-relaxed-math), as kiln maps the C math names. */
#define UNARY(name, fn)                                                          \
  __kernel void name(__global const float *x, __global float *y, int n) {        \
    int i = (int)get_global_id(0);                                               \
    if (i < n) y[i] = fn(x[i]);                                                  \
  }
UNARY(math_exp, exp)
UNARY(math_log, log)
UNARY(math_sqrt, sqrt)
UNARY(math_tanh, tanh)
UNARY(math_erf, erf)
UNARY(math_sin, sin)

__kernel void math_pow(__global const float *x, __global const float *e, __global float *y, int n) {
  int i = (int)get_global_id(0);
  if (i < n) y[i] = pow(x[i], e[i]);
}
