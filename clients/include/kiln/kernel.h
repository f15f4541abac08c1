/* kiln/kernel.h: write kiln kernels in C.
 *
 *     #include <kiln/kernel.h>
 *     KILN_KERNEL void vadd(const float *a, const float *b, float *c, int n) {
 *       int i = kiln_global_id(0);
 *       if (i < n) c[i] = a[i] + b[i];
 *     }
 *
 * Compile to the portable kernel dialect with any clang, for any 64-bit target:
 *
 *     clang -O2 -emit-llvm -c vadd.c -o vadd.bc     (or -S for text IR)
 *
 * and send the result to kiln for "cpu", a gfx target or an sm_ target. docs/kernels.md is
 * the reference. Kernels return void, take pointers (global memory) and scalars, and use the
 * work-item functions below. Work-group memory is a KILN_SHARED global; it has no initial
 * value. Use the C math names (expf, tanhf, ...) from <math.h>; kiln maps them per target. */
#ifndef KILN_KERNEL_H
#define KILN_KERNEL_H

#if !defined(__clang__)
#error "kiln kernels are compiled with clang (-O2 -emit-llvm)"
#endif

#ifdef __cplusplus
#define KILN_EXTERN_C extern "C"
#else
#define KILN_EXTERN_C
#endif

/* A kernel: an externally visible void function in section "kiln.kernel". `used` keeps it
 * when nothing in the file calls it; `noinline` keeps it whole if another kernel calls it. */
#define KILN_KERNEL KILN_EXTERN_C __attribute__((section("kiln.kernel"), used, noinline, visibility("default")))

/* Work-group ("shared") memory: `static KILN_SHARED float tile[16][17];` inside a kernel or
 * at file scope. Address space 3 in the dialect. */
#define KILN_SHARED __attribute__((address_space(3)))

/* The builtins. `const`: a work-item's ids do not change while it runs, so the optimiser
 * may reuse them; the barrier is deliberately not const. */
KILN_EXTERN_C __attribute__((const)) unsigned __kiln_group_id(unsigned dim);
KILN_EXTERN_C __attribute__((const)) unsigned __kiln_local_id(unsigned dim);
KILN_EXTERN_C __attribute__((const)) unsigned __kiln_group_size(unsigned dim);
KILN_EXTERN_C __attribute__((const)) unsigned __kiln_num_groups(unsigned dim);
/* convergent: clang must not duplicate or move the barrier into divergent code. */
KILN_EXTERN_C __attribute__((convergent, nothrow)) void __kiln_barrier(void);
KILN_EXTERN_C __attribute__((const)) KILN_SHARED void *__kiln_dynamic_shared(void);

/* Index of this work-group in the grid, dimension 0..2 (x, y, z). */
static inline __attribute__((always_inline)) unsigned kiln_group_id(unsigned dim) { return __kiln_group_id(dim); }
/* Index of this work-item in its work-group. */
static inline __attribute__((always_inline)) unsigned kiln_local_id(unsigned dim) { return __kiln_local_id(dim); }
/* Work-items per work-group (the launch's block). */
static inline __attribute__((always_inline)) unsigned kiln_group_size(unsigned dim) { return __kiln_group_size(dim); }
/* Work-groups in the grid (the launch's grid). */
static inline __attribute__((always_inline)) unsigned kiln_num_groups(unsigned dim) { return __kiln_num_groups(dim); }
/* group_id * group_size + local_id. */
static inline __attribute__((always_inline)) unsigned kiln_global_id(unsigned dim) {
  return __kiln_group_id(dim) * __kiln_group_size(dim) + __kiln_local_id(dim);
}
/* Total work-items in the grid along dim. */
static inline __attribute__((always_inline)) unsigned kiln_global_size(unsigned dim) {
  return __kiln_num_groups(dim) * __kiln_group_size(dim);
}

/* Work-group barrier with a work-group memory fence: every work-item of the group must
 * reach it (uniform control flow), as on GPUs. The signal fences stop the compiler from
 * moving memory accesses across the call, even to memory it believes is private to the
 * kernel (COMPILER.md); they cost nothing in machine code. */
static inline __attribute__((always_inline, convergent)) void kiln_barrier(void) {
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  __kiln_barrier();
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

/* The launch's dynamic work-group memory (the `shared` bytes of a launch), 16-byte aligned,
 * after the kernel's static KILN_SHARED variables. */
static inline __attribute__((always_inline)) KILN_SHARED void *kiln_dynamic_shared(void) {
  return __kiln_dynamic_shared();
}

#endif
