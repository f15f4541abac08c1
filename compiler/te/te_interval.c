/* Intervals of integer expressions: constant bounds (for proofs in the simplifier and the
 * emitter) and symbolic bounds (regions of attached stages, full-tile tests). */
#include "compiler/te/te_expr.h"

#define BIG ((int64_t)1 << 40) /* stands for "unbounded" in constant bounds */

static int64_t clampv(int64_t v) { return v > BIG ? BIG : v < -BIG ? -BIG : v; }

int64_t te_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* Unbounded stays unbounded: products past BIG are clamped (bounds of indices, never values
 * that must be exact). */
static bool mul_bounds(int64_t al, int64_t ah, int64_t bl, int64_t bh, int64_t *lo, int64_t *hi) {
  int64_t c[4];
  if (__builtin_mul_overflow(al, bl, &c[0]) || __builtin_mul_overflow(al, bh, &c[1]) ||
      __builtin_mul_overflow(ah, bl, &c[2]) || __builtin_mul_overflow(ah, bh, &c[3]))
    return false;
  *lo = *hi = c[0];
  for (int i = 1; i < 4; i++) {
    if (c[i] < *lo) *lo = c[i];
    if (c[i] > *hi) *hi = c[i];
  }
  *lo = clampv(*lo);
  *hi = clampv(*hi);
  return true;
}

static bool div_bounds(int op, int64_t al, int64_t ah, int64_t bl, int64_t bh, int64_t *lo, int64_t *hi) {
  if (bl != bh && bl >= 0 && al >= 0) { /* non-negative by a non-negative range (0 is UB) */
    *lo = 0;
    *hi = bl > 0 ? ah / bl : ah;
    return true;
  }
  if (bl != bh || bl <= 0 || (op == TE_DIV && al < 0)) return false;
  *lo = te_floordiv(al, bl);
  *hi = te_floordiv(ah, bl);
  return true;
}

static bool mod_bounds(int op, int64_t al, int64_t ah, int64_t bl, int64_t bh, int64_t *lo, int64_t *hi) {
  if (bl != bh && bl >= 0 && al >= 0) {
    *lo = 0;
    *hi = ah < bh - 1 ? ah : bh - 1;
    return true;
  }
  if (bl != bh || bl <= 0 || (op == TE_MOD && al < 0)) return false;
  if (te_floordiv(al, bl) == te_floordiv(ah, bl)) {
    *lo = al - te_floordiv(al, bl) * bl;
    *hi = ah - te_floordiv(ah, bl) * bl;
  } else {
    *lo = 0;
    *hi = bl - 1;
  }
  return true;
}

static bool bin_bounds(const te_program_t *p, const te_expr_t *e, int64_t *lo, int64_t *hi) {
  int64_t al, ah, bl, bh;
  if (!te_is_int(e->dtype)) return false;
  if (!te_const_bounds(p, e->args[0], &al, &ah) || !te_const_bounds(p, e->args[1], &bl, &bh)) return false;
  switch (e->op) {
  case TE_ADD: *lo = clampv(al + bl); *hi = clampv(ah + bh); return true;
  case TE_SUB: *lo = clampv(al - bh); *hi = clampv(ah - bl); return true;
  case TE_MUL: return mul_bounds(al, ah, bl, bh, lo, hi);
  case TE_FLOORDIV:
  case TE_DIV: return div_bounds(e->op, al, ah, bl, bh, lo, hi);
  case TE_FLOORMOD:
  case TE_MOD: return mod_bounds(e->op, al, ah, bl, bh, lo, hi);
  case TE_MIN: *lo = al < bl ? al : bl; *hi = ah < bh ? ah : bh; return true;
  case TE_MAX: *lo = al > bl ? al : bl; *hi = ah > bh ? ah : bh; return true;
  default: return false;
  }
}

bool te_const_bounds(const te_program_t *p, const te_expr_t *e, int64_t *lo, int64_t *hi) {
  int64_t al, ah, bl, bh;
  switch (e->kind) {
  case TE_INT: *lo = *hi = e->i; return true;
  case TE_VAR: {
    const te_var_t *v = &p->vars[e->ref];
    *lo = 0;
    *hi = v->cext > 0 ? v->cext - 1 : BIG;
    return true;
  }
  case TE_UN:
    if (e->op != TE_NEG || !te_const_bounds(p, e->args[0], &al, &ah)) return false;
    *lo = -ah;
    *hi = -al;
    return true;
  case TE_BIN: return bin_bounds(p, e, lo, hi);
  case TE_SELECT:
    if (!te_const_bounds(p, e->args[1], &al, &ah) || !te_const_bounds(p, e->args[2], &bl, &bh)) return false;
    *lo = al < bl ? al : bl;
    *hi = ah > bh ? ah : bh;
    return true;
  default: return false;
  }
}

/* ---- symbolic bounds ----------------------------------------------------------------- */

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
