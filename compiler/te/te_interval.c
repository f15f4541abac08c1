/* Constant intervals of integer expressions, for proofs in the simplifier and the emitter.
 * Nothing here simplifies: te_simplify.c calls in, and symbolic bounds (te_symbounds.c,
 * which do simplify) sit above both. */
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
