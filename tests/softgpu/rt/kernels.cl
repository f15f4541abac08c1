/* Kernels for the stand-in runtime's tests, compiled by clang for amdgcn-amd-amdhsa (OpenCL C,
 * no device library: only work-item builtins). Work-groups are 64 wide in every test. */

__kernel void vadd(__global const float *a, __global const float *b, __global float *c, uint n) {
  uint i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
  if (i < n) c[i] = a[i] + b[i];
}

/* Spins until the host sets *flag, then counts itself in *out: keeps a dispatch in flight for as
 * long as a test needs. */
__kernel void spin(volatile __global int *flag, __global int *out) {
  while (*flag == 0) {
  }
  __atomic_fetch_add(out, 1, __ATOMIC_RELAXED);
}

/* Writes one word of dynamic LDS at `index` and copies it out: with a group_segment_size too small
 * for `index` the access lies beyond the group segment. */
__kernel void lds(__local int *dyn, __global int *out, uint index) {
  if (__builtin_amdgcn_workitem_id_x() == 0) {
    dyn[index] = 42;
    out[0] = dyn[index];
  }
}

/* Static LDS of 4 KiB: the packet's group_segment_size must cover it. */
__kernel void uses_lds(__global int *out) {
  __local int buf[1024];
  uint t = __builtin_amdgcn_workitem_id_x();
  buf[t] = (int)t;
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  out[t] = buf[63 - t];
}

/* Stores through a pointer argument: given an address nothing is mapped at, the GPU faults. */
__kernel void poke(__global int *p) {
  if (__builtin_amdgcn_workitem_id_x() == 0) *(volatile __global int *)p = 1;
}
