/* Expressions: construction, substitution, simplification (constant folding and a linear
 * normal form for index arithmetic), constant and symbolic bounds. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/te/te.h"

#define BIG ((int64_t)1 << 40) /* stands for "unbounded" in constant bounds */

te_expr_t *te_node(kc_te_program_t *p, int kind, int op, int dtype, int nargs) {
  te_expr_t *e = te_alloc(p, sizeof(*e) + (size_t)nargs * sizeof(te_expr_t *));
  if (!e) return NULL;
  e->kind = (uint8_t)kind;
  e->op = (uint8_t)op;
  e->dtype = (uint8_t)dtype;
  e->nargs = (uint8_t)nargs;
  e->args = nargs ? (te_expr_t **)(e + 1) : NULL;
  return e;
}

te_expr_t *te_int(kc_te_program_t *p, int64_t v, int dtype) {
  te_expr_t *e = te_node(p, TE_INT, 0, dtype, 0);
  if (e) e->i = v;
  return e;
}

te_expr_t *te_varref(kc_te_program_t *p, int var) {
  te_expr_t *e = te_node(p, TE_VAR, 0, p->index_dtype, 0);
  if (e) e->ref = var;
  return e;
}

te_expr_t *te_bin(kc_te_program_t *p, int op, te_expr_t *a, te_expr_t *b) {
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

te_expr_t *te_subst(kc_te_program_t *p, te_expr_t *e, te_expr_t **subst) {
  if (!e) return NULL;
  if (e->kind == TE_VAR) return subst[e->ref] ? subst[e->ref] : e;
  if (!e->nargs) return e;
  te_expr_t *n = NULL;
  for (int i = 0; i < e->nargs; i++) {
    te_expr_t *a = te_subst(p, e->args[i], subst);
    if (a != e->args[i] && !n) {
      n = te_node(p, e->kind, e->op, e->dtype, e->nargs);
      if (!n) return NULL;
      n->ref = e->ref;
      n->i = e->i;
      n->f = e->f;
      memcpy(n->args, e->args, e->nargs * sizeof(*n->args));
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

/* ---- constant bounds ----------------------------------------------------------------- */

static int64_t clampv(int64_t v) { return v > BIG ? BIG : v < -BIG ? -BIG : v; }

static int64_t fdiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

bool te_const_bounds(const kc_te_program_t *p, const te_expr_t *e, int64_t *lo, int64_t *hi) {
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
  case TE_BIN:
    if (!te_is_int(e->dtype)) return false;
    if (!te_const_bounds(p, e->args[0], &al, &ah) || !te_const_bounds(p, e->args[1], &bl, &bh)) return false;
    switch (e->op) {
    case TE_ADD: *lo = clampv(al + bl); *hi = clampv(ah + bh); return true;
    case TE_SUB: *lo = clampv(al - bh); *hi = clampv(ah - bl); return true;
    case TE_MUL: {
      int64_t c[4];
      /* Unbounded stays unbounded: products past BIG are clamped (bounds of indices, never
       * values that must be exact). */
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
    case TE_FLOORDIV:
    case TE_DIV:
      if (bl != bh && bl >= 0 && al >= 0) { /* non-negative by a non-negative range (0 is UB) */
        *lo = 0;
        *hi = bl > 0 ? ah / bl : ah;
        return true;
      }
      if (bl != bh || bl <= 0 || (e->op == TE_DIV && al < 0)) return false;
      *lo = fdiv(al, bl);
      *hi = fdiv(ah, bl);
      return true;
    case TE_FLOORMOD:
    case TE_MOD:
      if (bl != bh && bl >= 0 && al >= 0) {
        *lo = 0;
        *hi = ah < bh - 1 ? ah : bh - 1;
        return true;
      }
      if (bl != bh || bl <= 0 || (e->op == TE_MOD && al < 0)) return false;
      if (fdiv(al, bl) == fdiv(ah, bl)) {
        *lo = al - fdiv(al, bl) * bl;
        *hi = ah - fdiv(ah, bl) * bl;
      } else {
        *lo = 0;
        *hi = bl - 1;
      }
      return true;
    case TE_MIN: *lo = al < bl ? al : bl; *hi = ah < bh ? ah : bh; return true;
    case TE_MAX: *lo = al > bl ? al : bl; *hi = ah > bh ? ah : bh; return true;
    default: return false;
    }
  case TE_SELECT:
    if (!te_const_bounds(p, e->args[1], &al, &ah) || !te_const_bounds(p, e->args[2], &bl, &bh)) return false;
    *lo = al < bl ? al : bl;
    *hi = ah > bh ? ah : bh;
    return true;
  default: return false;
  }
}

/* ---- linear normal form ------------------------------------------------------------ */

#define LIN_MAX 24

typedef struct lin {
  int n;
  int64_t c;
  int64_t coef[LIN_MAX];
  te_expr_t *atom[LIN_MAX];
} lin_t;

static bool lin_is_index(int dt) { return dt == TE_I32 || dt == TE_I64; }

static bool lin_add_atom(lin_t *l, te_expr_t *a, int64_t coef) {
  for (int i = 0; i < l->n; i++)
    if (te_equal(l->atom[i], a)) {
      l->coef[i] += coef;
      return true;
    }
  if (l->n == LIN_MAX) return false;
  l->atom[l->n] = a;
  l->coef[l->n++] = coef;
  return true;
}

static bool to_lin(te_expr_t *e, int64_t scale, lin_t *l) {
  int64_t k;
  if (e->kind == TE_INT) {
    l->c += scale * e->i;
    return true;
  }
  if (e->kind == TE_BIN && lin_is_index(e->dtype)) {
    if (e->op == TE_ADD) return to_lin(e->args[0], scale, l) && to_lin(e->args[1], scale, l);
    if (e->op == TE_SUB) return to_lin(e->args[0], scale, l) && to_lin(e->args[1], -scale, l);
    if (e->op == TE_MUL && te_const(e->args[1], &k)) return to_lin(e->args[0], scale * k, l);
    if (e->op == TE_MUL && te_const(e->args[0], &k)) return to_lin(e->args[1], scale * k, l);
  }
  if (e->kind == TE_UN && e->op == TE_NEG && lin_is_index(e->dtype)) return to_lin(e->args[0], -scale, l);
  return lin_add_atom(l, e, scale);
}

static te_expr_t *from_lin(kc_te_program_t *p, const lin_t *l, int dt) {
  te_expr_t *acc = NULL;
  for (int i = 0; i < l->n; i++) {
    int64_t c = l->coef[i];
    if (!c) continue;
    int64_t m = acc && c < 0 ? -c : c;
    te_expr_t *t = m == 1 ? l->atom[i] : te_bin(p, TE_MUL, l->atom[i], te_int(p, m, dt));
    acc = !acc ? t : te_bin(p, c < 0 ? TE_SUB : TE_ADD, acc, t);
  }
  if (!acc) return te_int(p, l->c, dt);
  if (l->c > 0) acc = te_bin(p, TE_ADD, acc, te_int(p, l->c, dt));
  if (l->c < 0) acc = te_bin(p, TE_SUB, acc, te_int(p, -l->c, dt));
  return acc;
}

static bool lin_of(te_expr_t *e, lin_t *l) {
  memset(l, 0, sizeof(*l));
  return to_lin(e, 1, l);
}

static te_expr_t *lin_norm(kc_te_program_t *p, te_expr_t *e) {
  lin_t l;
  if (!lin_of(e, &l)) return e;
  te_expr_t *r = from_lin(p, &l, e->dtype);
  return r ? r : e;
}

/* (a*c + b) / c and % c with 0 <= b < c provable. */
static te_expr_t *div_mod(kc_te_program_t *p, te_expr_t *e, int64_t c) {
  lin_t l, d, r;
  if (c <= 0 || !lin_of(e->args[0], &l)) return e;
  memset(&d, 0, sizeof(d));
  memset(&r, 0, sizeof(r));
  for (int i = 0; i < l.n; i++) {
    if (l.coef[i] % c == 0) lin_add_atom(&d, l.atom[i], l.coef[i] / c);
    else lin_add_atom(&r, l.atom[i], l.coef[i]);
  }
  r.c = l.c - fdiv(l.c, c) * c;
  d.c = fdiv(l.c, c);
  te_expr_t *rest = from_lin(p, &r, e->dtype);
  int64_t lo, hi;
  if (!rest || !te_const_bounds(p, rest, &lo, &hi) || lo < 0 || hi >= c) {
    /* Not provable; for a non-negative numerator, a division of a constant multiple still folds. */
    return e;
  }
  bool is_div = e->op == TE_FLOORDIV || e->op == TE_DIV;
  te_expr_t *res = is_div ? from_lin(p, &d, e->dtype) : rest;
  return res ? res : e;
}

static bool is_float_dt(int dt) { return dt == TE_F16 || dt == TE_F32 || dt == TE_F64; }

te_expr_t *te_simplify(kc_te_program_t *p, te_expr_t *e) {
  if (!e || !e->nargs) return e;
  te_expr_t *n = te_node(p, e->kind, e->op, e->dtype, e->nargs);
  if (!n) return e;
  n->ref = e->ref;
  n->i = e->i;
  n->f = e->f;
  for (int i = 0; i < e->nargs; i++) n->args[i] = te_simplify(p, e->args[i]);
  e = n;
  int64_t a = 0, b = 0;
  te_expr_t *x = e->args[0], *y = e->nargs > 1 ? e->args[1] : NULL;
  switch (e->kind) {
  case TE_CAST:
    if (te_const(x, &a) && te_is_int(e->dtype) && te_is_int(x->dtype) && e->dtype == TE_I64) return te_int(p, a, TE_I64);
    if (te_const(x, &a) && e->dtype == TE_I32 && a >= INT32_MIN && a <= INT32_MAX) return te_int(p, a, TE_I32);
    if (x->dtype == e->dtype) return x;
    return e;
  case TE_SELECT:
    if (te_const(x, &a)) return a ? e->args[1] : e->args[2];
    return e;
  case TE_UN:
    if (e->op == TE_NOT && te_const(x, &a)) return te_int(p, !a, TE_BOOL);
    if (e->op == TE_NEG && lin_is_index(e->dtype)) return lin_norm(p, e);
    return e;
  case TE_BIN: break;
  default: return e;
  }
  bool cx = te_const(x, &a), cy = te_const(y, &b);
  if (lin_is_index(e->dtype) && (e->op == TE_ADD || e->op == TE_SUB || e->op == TE_MUL)) return lin_norm(p, e);
  if (te_is_int(e->dtype) && !lin_is_index(e->dtype)) {
    if (e->op == TE_MUL && cy && b == 1) return x;
    if ((e->op == TE_ADD || e->op == TE_SUB) && cy && b == 0) return x;
    return e;
  }
  switch (e->op) {
  case TE_FLOORDIV:
  case TE_FLOORMOD:
  case TE_DIV:
  case TE_MOD:
    if (is_float_dt(e->dtype)) return e;
    if (cx && cy && b != 0) {
      bool floor = e->op == TE_FLOORDIV || e->op == TE_FLOORMOD;
      int64_t q = floor ? fdiv(a, b) : a / b;
      return te_int(p, e->op == TE_FLOORDIV || e->op == TE_DIV ? q : a - q * b, e->dtype);
    }
    if (cy && b == 1) return e->op == TE_FLOORDIV || e->op == TE_DIV ? x : te_int(p, 0, e->dtype);
    if (cy && b > 0) {
      int64_t lo, hi;
      if ((e->op == TE_DIV || e->op == TE_MOD) && (!te_const_bounds(p, x, &lo, &hi) || lo < 0)) return e;
      return div_mod(p, e, b);
    }
    return e;
  case TE_MIN:
  case TE_MAX:
    if (is_float_dt(e->dtype)) return e;
    if (cx && cy) return te_int(p, e->op == TE_MIN ? (a < b ? a : b) : (a > b ? a : b), e->dtype);
    {
      te_expr_t *d = te_simplify(p, te_bin(p, TE_SUB, x, y));
      int64_t lo, hi;
      if (d && te_const_bounds(p, d, &lo, &hi)) {
        if (hi <= 0) return e->op == TE_MIN ? x : y;
        if (lo >= 0) return e->op == TE_MIN ? y : x;
      }
    }
    return e;
  case TE_AND:
    if (cx) return a ? y : x;
    if (cy) return b ? x : y;
    return e;
  case TE_OR:
    if (cx) return a ? x : y;
    if (cy) return b ? y : x;
    return e;
  case TE_EQ: case TE_NE: case TE_LT: case TE_LE: case TE_GT: case TE_GE: {
    if (!te_is_int(x->dtype)) return e;
    te_expr_t *d = lin_is_index(x->dtype) ? te_simplify(p, te_bin(p, TE_SUB, x, y)) : NULL;
    int64_t lo, hi;
    if (cx && cy) lo = hi = a - b;
    else if (!d || !te_const_bounds(p, d, &lo, &hi)) return e;
    int r = -1;
    switch (e->op) {
    case TE_LT: r = hi < 0 ? 1 : lo >= 0 ? 0 : -1; break;
    case TE_LE: r = hi <= 0 ? 1 : lo > 0 ? 0 : -1; break;
    case TE_GT: r = lo > 0 ? 1 : hi <= 0 ? 0 : -1; break;
    case TE_GE: r = lo >= 0 ? 1 : hi < 0 ? 0 : -1; break;
    case TE_EQ: r = lo == 0 && hi == 0 ? 1 : (lo > 0 || hi < 0) ? 0 : -1; break;
    case TE_NE: r = lo == 0 && hi == 0 ? 0 : (lo > 0 || hi < 0) ? 1 : -1; break;
    }
    return r < 0 ? e : te_int(p, r, TE_BOOL);
  }
  default: return e;
  }
}

/* ---- symbolic bounds ----------------------------------------------------------------- */

static te_expr_t *smin(kc_te_program_t *p, int op, te_expr_t *a, te_expr_t *b) {
  return te_simplify(p, te_bin(p, op, a, b));
}

bool te_sym_bounds(kc_te_program_t *p, te_expr_t *e, const bool *relax, te_expr_t **lo, te_expr_t **hi) {
  if (!te_uses_var(e, relax)) {
    *lo = *hi = e;
    return true;
  }
  te_expr_t *al, *ah, *bl, *bh;
  int64_t k;
  int dt = e->dtype;
  switch (e->kind) {
  case TE_VAR:
    *lo = te_int(p, 0, dt);
    *hi = te_simplify(p, te_bin(p, TE_SUB, p->vars[e->ref].extent, te_int(p, 1, dt)));
    return *hi != NULL;
  case TE_UN:
    if (e->op != TE_NEG || !te_sym_bounds(p, e->args[0], relax, &al, &ah)) return false;
    *lo = te_simplify(p, te_bin(p, TE_SUB, te_int(p, 0, dt), ah));
    *hi = te_simplify(p, te_bin(p, TE_SUB, te_int(p, 0, dt), al));
    return true;
  case TE_BIN:
    if (!te_is_int(dt)) return false;
    if (!te_sym_bounds(p, e->args[0], relax, &al, &ah) || !te_sym_bounds(p, e->args[1], relax, &bl, &bh))
      return false;
    switch (e->op) {
    case TE_ADD:
      *lo = te_simplify(p, te_bin(p, TE_ADD, al, bl));
      *hi = te_simplify(p, te_bin(p, TE_ADD, ah, bh));
      return true;
    case TE_SUB:
      *lo = te_simplify(p, te_bin(p, TE_SUB, al, bh));
      *hi = te_simplify(p, te_bin(p, TE_SUB, ah, bl));
      return true;
    case TE_MUL: {
      te_expr_t *l = NULL, *h = NULL, *c = NULL;
      if (te_const(e->args[1], &k)) l = al, h = ah, c = e->args[1];
      else if (te_const(e->args[0], &k)) l = bl, h = bh, c = e->args[0];
      else return false;
      if (k < 0) {
        te_expr_t *t = l;
        l = h;
        h = t;
      }
      *lo = te_simplify(p, te_bin(p, TE_MUL, l, c));
      *hi = te_simplify(p, te_bin(p, TE_MUL, h, c));
      return true;
    }
    case TE_FLOORDIV:
      if (!te_const(e->args[1], &k) || k <= 0) return false;
      *lo = te_simplify(p, te_bin(p, TE_FLOORDIV, al, e->args[1]));
      *hi = te_simplify(p, te_bin(p, TE_FLOORDIV, ah, e->args[1]));
      return true;
    case TE_FLOORMOD:
      if (!te_const(e->args[1], &k) || k <= 0) return false;
      *lo = te_int(p, 0, dt);
      *hi = te_int(p, k - 1, dt);
      return true;
    case TE_MIN:
    case TE_MAX:
      *lo = smin(p, e->op, al, bl);
      *hi = smin(p, e->op, ah, bh);
      return true;
    default: return false;
    }
  default: return false;
  }
}
