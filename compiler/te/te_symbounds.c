/* Symbolic intervals of integer expressions (regions of attached stages, full-tile tests):
 * bounds as expressions over the vars that are not relaxed, simplified as they are built. */
#include "compiler/te/te_expr.h"

static te_expr_t *sbin(te_program_t *p, int op, te_expr_t *a, te_expr_t *b) {
  return te_simplify(p, te_bin(p, op, a, b));
}

static bool sym_mul(te_program_t *p, const te_expr_t *e, te_expr_t *al, te_expr_t *ah, te_expr_t *bl,
                    te_expr_t *bh, te_expr_t **lo, te_expr_t **hi) {
  te_expr_t *l = NULL, *h = NULL, *c = NULL;
  int64_t k;
  if (te_const(e->args[1], &k)) l = al, h = ah, c = e->args[1];
  else if (te_const(e->args[0], &k)) l = bl, h = bh, c = e->args[0];
  else return false;
  if (k < 0) {
    te_expr_t *t = l;
    l = h;
    h = t;
  }
  *lo = sbin(p, TE_MUL, l, c);
  *hi = sbin(p, TE_MUL, h, c);
  return true;
}

static bool sym_bin(te_program_t *p, te_expr_t *e, const bool *relax, te_expr_t **lo, te_expr_t **hi) {
  te_expr_t *al, *ah, *bl, *bh;
  int64_t k;
  int dt = e->dtype;
  if (!te_is_int(dt)) return false;
  if (!te_sym_bounds(p, e->args[0], relax, &al, &ah) || !te_sym_bounds(p, e->args[1], relax, &bl, &bh))
    return false;
  switch (e->op) {
  case TE_ADD:
    *lo = sbin(p, TE_ADD, al, bl);
    *hi = sbin(p, TE_ADD, ah, bh);
    return true;
  case TE_SUB:
    *lo = sbin(p, TE_SUB, al, bh);
    *hi = sbin(p, TE_SUB, ah, bl);
    return true;
  case TE_MUL: return sym_mul(p, e, al, ah, bl, bh, lo, hi);
  case TE_FLOORDIV:
    if (!te_const(e->args[1], &k) || k <= 0) return false;
    *lo = sbin(p, TE_FLOORDIV, al, e->args[1]);
    *hi = sbin(p, TE_FLOORDIV, ah, e->args[1]);
    return true;
  case TE_FLOORMOD:
    if (!te_const(e->args[1], &k) || k <= 0) return false;
    *lo = te_int(p, 0, dt);
    *hi = te_int(p, k - 1, dt);
    return true;
  case TE_MIN:
  case TE_MAX:
    *lo = sbin(p, e->op, al, bl);
    *hi = sbin(p, e->op, ah, bh);
    return true;
  default: return false;
  }
}

bool te_sym_bounds(te_program_t *p, te_expr_t *e, const bool *relax, te_expr_t **lo, te_expr_t **hi) {
  if (!te_uses_var(e, relax)) {
    *lo = *hi = e;
    return true;
  }
  te_expr_t *al, *ah;
  int dt = e->dtype;
  switch (e->kind) {
  case TE_VAR:
    *lo = te_int(p, 0, dt);
    *hi = sbin(p, TE_SUB, p->vars[e->ref].extent, te_int(p, 1, dt));
    return *hi != NULL;
  case TE_UN:
    if (e->op != TE_NEG || !te_sym_bounds(p, e->args[0], relax, &al, &ah)) return false;
    *lo = sbin(p, TE_SUB, te_int(p, 0, dt), ah);
    *hi = sbin(p, TE_SUB, te_int(p, 0, dt), al);
    return true;
  case TE_BIN: return sym_bin(p, e, relax, lo, hi);
  default: return false;
  }
}
