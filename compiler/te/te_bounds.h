/* Bound inference for one kernel (docs/te.md §6): the stages it computes, the extents and
 * values of every loop var, the regions of attached stages, the guards around statements
 * and the launch dimensions. The results are kept in the program model (te_tensor_t's
 * per-kernel fields, te_kernel_t's grid and block) for emission. */
#ifndef KILN_COMPILER_TE_TE_BOUNDS_H
#define KILN_COMPILER_TE_TE_BOUNDS_H

#include "compiler/te/te_program.h"

/* E_COMPILE for a schedule the kernel cannot have (storage, bindings, regions). */
KILN_MUST_USE kiln_status_t te_infer_bounds(te_program_t *p, int kernel);
/* The extents of a split's or fuse's new vars from its parents' (relations outermost first). */
void te_rel_extent(te_program_t *p, const te_rel_t *rel);
/* val[] of a relation's parents from val[] of its results (relations innermost first); the
 * guard a split needs when it does not divide its extent, else NULL. */
te_expr_t *te_rel_value(te_program_t *p, const te_rel_t *rel, te_expr_t **val);
/* subst[axis/reduce var of stage] = its value in terms of the stage's leaves (NULL elsewhere). */
void te_stage_subst(te_program_t *p, int stage, te_expr_t **subst);

#endif
