/* The calling contract between CPU code made by the compiler (format KILN_FORMAT_CPU_SO)
 * and the cpu device backend that runs it. docs/kernels.md describes it for humans.
 *
 * For each dialect kernel `K` the shared object exports
 *
 *     void __kiln_wg_K(const kiln_cpu_wg_ctx_t *ctx, void *const *args);
 *
 * which runs ONE whole work-group: every work-item of it, barriers included. `args[i]`
 * points at the value of explicit argument i (a pointer argument's value is the pointer,
 * so args[i] is a `void **` for it; an i32 argument's args[i] is an `int32_t *`). The
 * backend calls it once per work-group, from any of its threads, concurrently. */
#ifndef KILN_PROTOCOL_CPU_ABI_H
#define KILN_PROTOCOL_CPU_ABI_H

#include <stdint.h>

#define KILN_CPU_WG_PREFIX "__kiln_wg_"
#define KILN_CPU_ABI_VERSION 1
/* Exported `uint32_t __kiln_cpu_abi_version` must equal KILN_CPU_ABI_VERSION. */
#define KILN_CPU_ABI_SYMBOL "__kiln_cpu_abi_version"

typedef struct kiln_cpu_wg_ctx {
  uint32_t group_id[3];   /* this work-group's index in the grid */
  uint32_t group_size[3]; /* work-items per work-group (the launch's block) */
  uint32_t num_groups[3]; /* work-groups in the grid (the launch's grid) */
  uint32_t reserved;
  /* Work-group memory for this call: the kernel's static work-group globals first (their
   * total is the kernel table's group_segment_size, each aligned to 16), then the launch's
   * dynamic shared bytes. 64-byte aligned; owned by the calling thread. */
  void *shared;
  /* Per-work-item private scratch the generated code may use for values that live across
   * barriers: group_size product * kernel private_segment_size bytes; 64-byte aligned. */
  void *scratch;
} kiln_cpu_wg_ctx_t;

typedef void (*kiln_cpu_wg_fn_t)(const kiln_cpu_wg_ctx_t *ctx, void *const *args);

#endif
