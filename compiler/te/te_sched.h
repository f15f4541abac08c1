/* Schedule primitives (docs/te.md §5) applied to the program model. The parser hands each
 * primitive over as a te_prim_t with its fields read and typed; te_sched_apply resolves the
 * names against the program as it stands after the primitives before it, checks the rules
 * and records the transformation. */
#ifndef KILN_COMPILER_TE_TE_SCHED_H
#define KILN_COMPILER_TE_TE_SCHED_H

#include "compiler/te/te_program.h"

typedef enum te_prim_op {
  TE_P_SPLIT = 1, TE_P_TILE, TE_P_FUSE, TE_P_REORDER, TE_P_BIND, TE_P_UNROLL, TE_P_VECTORIZE, TE_P_PARALLEL,
  TE_P_COMPUTE_AT, TE_P_COMPUTE_INLINE, TE_P_CACHE_READ, TE_P_CACHE_WRITE, TE_P_RFACTOR,
  TE_P_STORAGE_ALIGN, TE_P_DOUBLE_BUFFER, TE_P_LAUNCH_BOUNDS, TE_P_STORAGE_ORDER,
  TE_P_COUNT
} te_prim_op_t;

#define TE_PRIM_MAX_VARS TE_MAX_LEAVES

/* One primitive. Names are NUL-terminated; an empty name is an optional field left out (the
 * new var gets TVM's default name). Which fields a primitive uses:
 *   split:      stage, vars[0] (the var), factor[0] (nparts: as nparts), names[0..1] outer, inner
 *   tile:       stage, vars[0..1] x, y, factor[0..1], names[0..3] x_outer, x_inner, y_outer, y_inner
 *   fuse:       stage, vars[0..nvars-1], names[0] fused
 *   reorder:    stage, vars[0..nvars-1]
 *   bind:       stage, vars[0], thread (0..5: blockIdx.x..threadIdx.z, TE_THREAD_VTHREAD)
 *   unroll, vectorize: stage, vars[0]
 *   parallel:   stage, vars[0], factor[0] (iterations per work-group; 0: unset)
 *   compute_at: stage, parent, vars[0] (a var of parent)
 *   compute_inline: stage
 *   cache_read: stage (the tensor read), scope, vars[] (the readers), names[0] (the new stage)
 *   cache_write: stage (the tensor), scope, names[0] (the new stage)
 *   rfactor:    stage, vars[0] (a reduce leaf), names[0] (the new stage), factor[0] (factor_axis)
 *   storage_align: stage, vars[0] (an axis of the stage), factor[0] factor, factor[1] offset
 *   storage_order: stage, vars[0..nvars-1] (every axis of the stage, outermost storage dimension first)
 *   double_buffer: stage
 *   launch_bounds: stage, factor[0] (min_blocks) */
typedef struct te_prim {
  int op;
  char stage[TE_NAME];
  char parent[TE_NAME];
  int nvars;
  char vars[TE_PRIM_MAX_VARS][TE_NAME];
  char names[4][TE_NAME];
  int64_t factor[2];
  bool nparts;
  int thread;
  int scope; /* TE_SCOPE_* */
} te_prim_t;

/* E_COMPILE naming the stage and var for a primitive the program's state refuses. */
KILN_MUST_USE kiln_status_t te_sched_apply(te_program_t *p, const te_prim_t *prim);

#endif
