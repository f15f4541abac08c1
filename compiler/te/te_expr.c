/* Expression construction, comparison and substitution (te_expr.h). */
#include "compiler/te/te_expr.h"

#include <string.h>

te_expr_t *te_node(te_program_t *p, int kind, int op, int dtype, int nargs) {
  te_expr_t *e = te_alloc(p, sizeof(*e) + (size_t)nargs * sizeof(te_expr_t *));
  if (!e) return NULL;
  e->kind = (uint8_t)kind;
  e->op = (uint8_t)op;
  e->dtype = (uint8_t)dtype;
  e->nargs = (uint8_t)nargs;
  e->args = nargs ? (te_expr_t **)(e + 1) : NULL;
  return e;
}

te_expr_t *te_copy_node(te_program_t *p, const te_expr_t *e) {
  te_expr_t *n = te_node(p, e->kind, e->op, e->dtype, e->nargs);
  if (!n) return NULL;
  n->ref = e->ref;
  n->i = e->i;
  n->f = e->f;
  if (e->nargs) memcpy(n->args, e->args, e->nargs * sizeof(*n->args));
  return n;
}

te_expr_t *te_int(te_program_t *p, int64_t v, int dtype) {
  te_expr_t *e = te_node(p, TE_INT, 0, dtype, 0);
  if (e) e->i = v;
  return e;
}

te_expr_t *te_varref(te_program_t *p, int var) {
  te_expr_t *e = te_node(p, TE_VAR, 0, p->index_dtype, 0);
  if (e) e->ref = var;
  return e;
}

te_expr_t *te_bin(te_program_t *p, int op, te_expr_t *a, te_expr_t *b) {
  if (!a || !b) return NULL;
  bool cmp = op >= TE_EQ && op <= TE_GE;
  te_expr_t *e = te_node(p, TE_BIN, op, cmp ? TE_BOOL : a->dtype, 2);
  if (!e) return NULL;
  e->args[0] = a;
  e->args[1] = b;
  return e;
}

bool te_const(const te_expr_t *e, int64_t *out) {
  if (!e || e->kind != TE_INT) return false;
  *out = e->i;
  return true;
}

bool te_equal(const te_expr_t *a, const te_expr_t *b) {
  if (a == b) return true;
  if (!a || !b || a->kind != b->kind || a->op != b->op || a->dtype != b->dtype || a->nargs != b->nargs ||
      a->ref != b->ref || a->i != b->i || (a->kind == TE_FLOAT && a->f != b->f))
    return false;
  for (int i = 0; i < a->nargs; i++)
    if (!te_equal(a->args[i], b->args[i])) return false;
  return true;
}

te_expr_t *te_subst(te_program_t *p, te_expr_t *e, te_expr_t **subst) {
  if (!e) return NULL;
  if (e->kind == TE_VAR) return subst[e->ref] ? subst[e->ref] : e;
  if (!e->nargs) return e;
  te_expr_t *n = NULL;
  for (int i = 0; i < e->nargs; i++) {
    te_expr_t *a = te_subst(p, e->args[i], subst);
    if (a != e->args[i] && !n) {
      n = te_copy_node(p, e);
      if (!n) return NULL;
    }
    if (n) n->args[i] = a;
  }
  return n ? n : e;
}

bool te_uses_var(const te_expr_t *e, const bool *set) {
  if (!e) return false;
  if (e->kind == TE_VAR) return set[e->ref];
  for (int i = 0; i < e->nargs; i++)
    if (te_uses_var(e->args[i], set)) return true;
  return false;
}

bool te_reads(const te_expr_t *e, int tensor) {
  if (!e) return false;
  if (e->kind == TE_LOAD && e->ref == tensor) return true;
  for (int i = 0; i < e->nargs; i++)
    if (te_reads(e->args[i], tensor)) return true;
  return false;
}
