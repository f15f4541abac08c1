/* The simplifier: constant folding and a linear normal form for index arithmetic, with
 * proofs from constant bounds ((a*c + b) / c -> a when 0 <= b < c, min/max and comparisons
 * decided by the sign of a difference). */
#include <limits.h>
#include <string.h>

#include "compiler/te/te_expr.h"

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

static te_expr_t *from_lin(te_program_t *p, const lin_t *l, int dt) {
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

static te_expr_t *lin_norm(te_program_t *p, te_expr_t *e) {
  lin_t l;
  if (!lin_of(e, &l)) return e;
  te_expr_t *r = from_lin(p, &l, e->dtype);
  return r ? r : e;
}

/* (a*c + b) / c and % c with 0 <= b < c provable. */
static te_expr_t *div_mod(te_program_t *p, te_expr_t *e, int64_t c) {
  lin_t l, d, r;
  if (c <= 0 || !lin_of(e->args[0], &l)) return e;
  memset(&d, 0, sizeof(d));
  memset(&r, 0, sizeof(r));
  for (int i = 0; i < l.n; i++) {
    if (l.coef[i] % c == 0) lin_add_atom(&d, l.atom[i], l.coef[i] / c);
    else lin_add_atom(&r, l.atom[i], l.coef[i]);
  }
  r.c = l.c - te_floordiv(l.c, c) * c;
  d.c = te_floordiv(l.c, c);
  te_expr_t *rest = from_lin(p, &r, e->dtype);
  int64_t lo, hi;
  if (!rest || !te_const_bounds(p, rest, &lo, &hi) || lo < 0 || hi >= c) return e;
  bool is_div = e->op == TE_FLOORDIV || e->op == TE_DIV;
  te_expr_t *res = is_div ? from_lin(p, &d, e->dtype) : rest;
  return res ? res : e;
}

static bool is_float_dt(int dt) { return dt == TE_F16 || dt == TE_F32 || dt == TE_F64; }

static te_expr_t *simplify_div(te_program_t *p, te_expr_t *e) {
  int64_t a = 0, b = 0;
  te_expr_t *x = e->args[0];
  bool cx = te_const(x, &a), cy = te_const(e->args[1], &b);
  bool is_div = e->op == TE_FLOORDIV || e->op == TE_DIV;
  if (is_float_dt(e->dtype)) return e;
  if (cx && cy && b != 0) {
    bool floor = e->op == TE_FLOORDIV || e->op == TE_FLOORMOD;
    int64_t q = floor ? te_floordiv(a, b) : a / b;
    return te_int(p, is_div ? q : a - q * b, e->dtype);
  }
  if (cy && b == 1) return is_div ? x : te_int(p, 0, e->dtype);
  if (cy && b > 0) {
    int64_t lo, hi;
    if ((e->op == TE_DIV || e->op == TE_MOD) && (!te_const_bounds(p, x, &lo, &hi) || lo < 0)) return e;
    return div_mod(p, e, b);
  }
  return e;
}

static te_expr_t *simplify_minmax(te_program_t *p, te_expr_t *e) {
  int64_t a = 0, b = 0;
  te_expr_t *x = e->args[0], *y = e->args[1];
  if (is_float_dt(e->dtype)) return e;
  if (te_const(x, &a) && te_const(y, &b))
    return te_int(p, e->op == TE_MIN ? (a < b ? a : b) : (a > b ? a : b), e->dtype);
  te_expr_t *d = te_simplify(p, te_bin(p, TE_SUB, x, y));
  int64_t lo, hi;
  if (d && te_const_bounds(p, d, &lo, &hi)) {
    if (hi <= 0) return e->op == TE_MIN ? x : y;
    if (lo >= 0) return e->op == TE_MIN ? y : x;
  }
  return e;
}

/* A comparison decided by the constant bounds of x - y: 1, 0, or -1 (undecided). */
static int decide_cmp(int op, int64_t lo, int64_t hi) {
  switch (op) {
  case TE_LT: return hi < 0 ? 1 : lo >= 0 ? 0 : -1;
  case TE_LE: return hi <= 0 ? 1 : lo > 0 ? 0 : -1;
  case TE_GT: return lo > 0 ? 1 : hi <= 0 ? 0 : -1;
  case TE_GE: return lo >= 0 ? 1 : hi < 0 ? 0 : -1;
  case TE_EQ: return lo == 0 && hi == 0 ? 1 : (lo > 0 || hi < 0) ? 0 : -1;
  case TE_NE: return lo == 0 && hi == 0 ? 0 : (lo > 0 || hi < 0) ? 1 : -1;
  default: return -1;
  }
}

static te_expr_t *simplify_cmp(te_program_t *p, te_expr_t *e) {
  int64_t a = 0, b = 0, lo, hi;
  te_expr_t *x = e->args[0], *y = e->args[1];
  if (!te_is_int(x->dtype)) return e;
  te_expr_t *d = lin_is_index(x->dtype) ? te_simplify(p, te_bin(p, TE_SUB, x, y)) : NULL;
  if (te_const(x, &a) && te_const(y, &b)) lo = hi = a - b;
  else if (!d || !te_const_bounds(p, d, &lo, &hi)) return e;
  int r = decide_cmp(e->op, lo, hi);
  return r < 0 ? e : te_int(p, r, TE_BOOL);
}

static te_expr_t *simplify_bin(te_program_t *p, te_expr_t *e) {
  int64_t a = 0, b = 0;
  te_expr_t *x = e->args[0], *y = e->args[1];
  bool cx = te_const(x, &a), cy = te_const(y, &b);
  if (lin_is_index(e->dtype) && (e->op == TE_ADD || e->op == TE_SUB || e->op == TE_MUL)) return lin_norm(p, e);
  if (te_is_int(e->dtype) && !lin_is_index(e->dtype)) {
    if (e->op == TE_MUL && cy && b == 1) return x;
    if ((e->op == TE_ADD || e->op == TE_SUB) && cy && b == 0) return x;
    return e;
  }
  switch (e->op) {
  case TE_FLOORDIV: case TE_FLOORMOD: case TE_DIV: case TE_MOD: return simplify_div(p, e);
  case TE_MIN: case TE_MAX: return simplify_minmax(p, e);
  case TE_AND:
    if (cx) return a ? y : x;
    if (cy) return b ? x : y;
    return e;
  case TE_OR:
    if (cx) return a ? x : y;
    if (cy) return b ? y : x;
    return e;
  case TE_EQ: case TE_NE: case TE_LT: case TE_LE: case TE_GT: case TE_GE: return simplify_cmp(p, e);
  default: return e;
  }
}

te_expr_t *te_simplify(te_program_t *p, te_expr_t *e) {
  if (!e || !e->nargs) return e;
  te_expr_t *n = te_copy_node(p, e);
  if (!n) return e;
  for (int i = 0; i < e->nargs; i++) n->args[i] = te_simplify(p, e->args[i]);
  e = n;
  int64_t a = 0;
  te_expr_t *x = e->args[0];
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
  case TE_BIN: return simplify_bin(p, e);
  default: return e;
  }
}
