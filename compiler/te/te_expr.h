/* Expressions of the te program: construction (te_expr.c), simplification (te_simplify.c),
 * constant intervals (te_interval.c), symbolic ones (te_symbounds.c). Nodes live in the program's arena; a
 * constructor returns NULL when memory is exhausted, and takes NULL operands to NULL. */
#ifndef KILN_COMPILER_TE_TE_EXPR_H
#define KILN_COMPILER_TE_TE_EXPR_H

#include "compiler/te/te_program.h"

te_expr_t *te_node(te_program_t *p, int kind, int op, int dtype, int nargs);
/* A node of e's kind, op, dtype, literal and reference with e's argument pointers. */
te_expr_t *te_copy_node(te_program_t *p, const te_expr_t *e);
te_expr_t *te_int(te_program_t *p, int64_t v, int dtype);
te_expr_t *te_varref(te_program_t *p, int var);
te_expr_t *te_bin(te_program_t *p, int op, te_expr_t *a, te_expr_t *b);
bool te_const(const te_expr_t *e, int64_t *out);
bool te_equal(const te_expr_t *a, const te_expr_t *b);
/* Replaces every TE_VAR v with subst[v] where subst[v] is non-NULL (array of p->nvars). */
te_expr_t *te_subst(te_program_t *p, te_expr_t *e, te_expr_t **subst);
bool te_uses_var(const te_expr_t *e, const bool *set);
/* Does e load tensor t? */
bool te_reads(const te_expr_t *e, int tensor);

/* Constant folding and linear normalisation; uses constant var extents for proofs. */
te_expr_t *te_simplify(te_program_t *p, te_expr_t *e);

/* Constant bounds of an integer expression over var ranges [0, cext-1] (shape vars >= 0). */
bool te_const_bounds(const te_program_t *p, const te_expr_t *e, int64_t *lo, int64_t *hi);
/* Symbolic bounds where vars with relax[v] range over [0, extent-1]. false if not affine enough. */
bool te_sym_bounds(te_program_t *p, te_expr_t *e, const bool *relax, te_expr_t **lo, te_expr_t **hi);
/* Floor division of integers (b != 0). */
int64_t te_floordiv(int64_t a, int64_t b);

#endif
