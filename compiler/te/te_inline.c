/* compute_inline (te_inline.h): a load of an inlined stage becomes that stage's body with
 * its axes replaced by the load's indices, recursively (inlined stages may read others). */
#include "compiler/te/te_inline.h"

#include <stdlib.h>

#include "compiler/te/te_expr.h"

static te_expr_t *inline_expr(te_program_t *p, te_expr_t *e, int depth) {
  if (!e || depth > TE_MAX_TENSORS) return e;
  te_expr_t *n = e;
  if (e->nargs) {
    n = te_copy_node(p, e);
    if (!n) return e;
    for (int i = 0; i < e->nargs; i++) n->args[i] = inline_expr(p, e->args[i], depth);
  }
  if (n->kind == TE_LOAD && p->tensors[n->ref].inlined) {
    te_tensor_t *t = &p->tensors[n->ref];
    te_expr_t **sub = calloc((size_t)p->nvars, sizeof(*sub));
    if (!sub) return n;
    for (int d = 0; d < t->ndim; d++) sub[t->axes[d]] = n->args[d];
    te_expr_t *r = te_subst(p, inline_expr(p, t->body, depth + 1), sub);
    free(sub);
    return r;
  }
  return n;
}

kiln_status_t te_inline_all(te_program_t *p) {
  for (int i = 0; i < p->ntensors; i++) {
    te_tensor_t *t = &p->tensors[i];
    if (!t->placeholder && !t->inlined) t->body = inline_expr(p, t->body, 0);
  }
  return KILN_OK;
}
