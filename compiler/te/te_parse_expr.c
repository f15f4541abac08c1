/* Expression nodes of the te payload (docs/te.md §3-4): literals, then a table of one parser
 * per array node ("var", "load", "cast", ...; the binary operators share one). Literals are
 * weak until an operand of known dtype settles them. */
#include <string.h>

#include "compiler/te/te_expr.h"
#include "compiler/te/te_mp.h"
#include "compiler/te/te_parse.h"

#define MAX_EXPR_DEPTH 200

typedef kiln_status_t (*node_fn)(te_parse_ctx_t *c, const char *head, const msgpack_object *a, uint32_t n,
                                 te_expr_t **out);

static const char *where(const te_parse_ctx_t *c) { return c->stage >= 0 ? c->p->tensors[c->stage].name : "a shape"; }

static kiln_status_t oom(void) { return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory"); }

int te_parse_dtype(const msgpack_object *o) {
  char s[16];
  return te_mp_str(o, s, sizeof(s)) ? te_dtype_from_name(s) : 0;
}

static bool settle_args(te_expr_t *e, int dt) {
  if (e->kind == TE_BIN || e->kind == TE_UN || e->kind == TE_SELECT)
    for (int i = 0; i < e->nargs; i++)
      if (e->args[i] && !(e->kind == TE_SELECT && i == 0) && !te_settle(e->args[i], dt)) return false;
  return true;
}

bool te_settle(te_expr_t *e, int dt) {
  if (e->dtype == dt) return true;
  if (e->dtype == TE_WEAK_INT && (te_is_int(dt) || te_is_float(dt))) {
    if (e->kind == TE_INT && te_is_float(dt)) {
      e->kind = TE_FLOAT;
      e->f = (double)e->i;
    }
    if (!settle_args(e, dt)) return false;
    e->dtype = (uint8_t)dt;
    return true;
  }
  if (e->dtype == TE_WEAK_FLOAT && te_is_float(dt)) {
    if (!settle_args(e, dt)) return false;
    e->dtype = (uint8_t)dt;
    return true;
  }
  return false;
}

/* One dtype for two operands, settling literals. */
static kiln_status_t unify(te_parse_ctx_t *c, const char *what, te_expr_t *a, te_expr_t *b, int *out) {
  int da = a->dtype, db = b->dtype;
  bool wa = da >= TE_WEAK_INT, wb = db >= TE_WEAK_INT;
  if (wa && wb) {
    *out = da == TE_WEAK_FLOAT || db == TE_WEAK_FLOAT ? TE_WEAK_FLOAT : TE_WEAK_INT;
    if (*out == TE_WEAK_FLOAT) {
      te_settle(a, TE_F32);
      te_settle(b, TE_F32);
      *out = TE_F32;
    }
    return KILN_OK;
  }
  int want = wa ? db : da;
  if (te_settle(a, want) && te_settle(b, want)) {
    *out = want;
    return KILN_OK;
  }
  return KC_COMPILE_ERROR("te: %s of %s and %s in %s: both sides need one dtype, insert a cast", what,
                          te_dtype_name(da), te_dtype_name(db), where(c));
}

static kiln_status_t parse_args(te_parse_ctx_t *c, te_expr_t *e, const msgpack_object *items) {
  for (int i = 0; i < e->nargs; i++) KILN_RETURN_IF_ERROR(te_parse_expr(c, &items[i], &e->args[i]));
  return KILN_OK;
}

static kiln_status_t want_index(te_parse_ctx_t *c, te_expr_t *e, const char *what) {
  if (e->dtype == TE_WEAK_INT) te_settle(e, c->p->index_dtype);
  if (!te_is_int(e->dtype))
    return KC_COMPILE_ERROR("te: %s in %s is %s: indices must be integers", what, where(c), te_dtype_name(e->dtype));
  return KILN_OK;
}

/* ---- nodes -------------------------------------------------------------------------- */

static kiln_status_t parse_const(te_parse_ctx_t *c, const char *head, const msgpack_object *a, uint32_t n,
                                 te_expr_t **out) {
  (void)head;
  int dt = n == 3 ? te_parse_dtype(&a[1]) : 0;
  double d;
  if (!dt) return KC_COMPILE_ERROR("te: [\"const\", DTYPE, number] in %s is malformed", where(c));
  if (!te_mp_number(&a[2], &d)) return KC_COMPILE_ERROR("te: bad const in %s", where(c));
  if (te_is_float(dt)) {
    *out = te_node(c->p, TE_FLOAT, 0, dt, 0);
    if (*out) (*out)->f = d;
    return KILN_OK;
  }
  bool fl = a[2].type == MSGPACK_OBJECT_FLOAT64 || a[2].type == MSGPACK_OBJECT_FLOAT32;
  *out = te_int(c->p, fl ? (int64_t)d : a[2].type == MSGPACK_OBJECT_BOOLEAN ? a[2].via.boolean : a[2].via.i64, dt);
  return KILN_OK;
}

static kiln_status_t parse_var(te_parse_ctx_t *c, const char *head, const msgpack_object *a, uint32_t n,
                               te_expr_t **out) {
  (void)head;
  te_program_t *p = c->p;
  char name[TE_NAME];
  if (n != 2 || !te_mp_str(&a[1], name, sizeof(name)))
    return KC_COMPILE_ERROR("te: [\"var\", name] in %s is malformed", where(c));
  int v = te_find_var(p, c->stage, name);
  if (v < 0 || (c->in_shape && p->vars[v].kind != TE_V_SHAPE))
    return KC_COMPILE_ERROR("te: unknown var '%s' in %s", name, where(c));
  if (p->vars[v].kind == TE_V_REDUCE && !c->allow_reduce && !c->in_shape)
    return KC_COMPILE_ERROR("te: reduce axis '%s' used outside its reduce in %s", name, where(c));
  *out = te_varref(p, v);
  return KILN_OK;
}

static bool defined_later(const te_parse_ctx_t *c, const char *name) {
  const msgpack_object *ts = c->tensors;
  for (uint32_t i = 0; ts && i < ts->via.array.size; i++) {
    char n[TE_NAME];
    if (te_mp_str(te_mp_get(&ts->via.array.ptr[i], "name"), n, sizeof(n)) && strcmp(n, name) == 0) return true;
  }
  return false;
}

static kiln_status_t find_loaded(te_parse_ctx_t *c, const char *name, int *out) {
  int t = te_find_tensor(c->p, name);
  if (t < 0 && defined_later(c, name))
    return KC_COMPILE_ERROR("te: %s reads %s, which is defined after it (tensors come in dependency order; "
                            "cycles are refused)",
                            where(c), name);
  if (t < 0) return KC_COMPILE_ERROR("te: %s loads unknown tensor '%s'", where(c), name);
  if (t >= c->stage)
    return KC_COMPILE_ERROR("te: %s reads %s, which is not defined before it (tensors come in dependency order; "
                            "cycles are refused)",
                            where(c), name);
  *out = t;
  return KILN_OK;
}

static kiln_status_t parse_load(te_parse_ctx_t *c, const char *head, const msgpack_object *a, uint32_t n,
                                te_expr_t **out) {
  (void)head;
  char name[TE_NAME];
  int t = -1;
  if (n != 3 || !te_mp_str(&a[1], name, sizeof(name)) || a[2].type != MSGPACK_OBJECT_ARRAY)
    return KC_COMPILE_ERROR("te: [\"load\", tensor, [indices]] in %s is malformed", where(c));
  KILN_RETURN_IF_ERROR(find_loaded(c, name, &t));
  const te_tensor_t *src = &c->p->tensors[t];
  if ((int)a[2].via.array.size != src->ndim)
    return KC_COMPILE_ERROR("te: %s loads %s with %u indices; it has %d dimensions", where(c), name,
                            a[2].via.array.size, src->ndim);
  te_expr_t *e = *out = te_node(c->p, TE_LOAD, 0, src->dtype, src->ndim);
  if (!e) return oom();
  e->ref = t;
  KILN_RETURN_IF_ERROR(parse_args(c, e, a[2].via.array.ptr));
  for (int i = 0; i < e->nargs; i++) KILN_RETURN_IF_ERROR(want_index(c, e->args[i], "an index"));
  return KILN_OK;
}

static kiln_status_t parse_unary(te_parse_ctx_t *c, const char *head, const msgpack_object *a, uint32_t n,
                                 te_expr_t **out) {
  if (n != 2) return KC_COMPILE_ERROR("te: [\"%s\", a] in %s is malformed", head, where(c));
  bool neg = strcmp(head, "neg") == 0;
  te_expr_t *e = *out = te_node(c->p, TE_UN, neg ? TE_NEG : TE_NOT, 0, 1);
  if (!e) return oom();
  KILN_RETURN_IF_ERROR(parse_args(c, e, &a[1]));
  e->dtype = e->args[0]->dtype;
  if (neg ? e->dtype == TE_BOOL : e->dtype != TE_BOOL)
    return KC_COMPILE_ERROR("te: %s of %s in %s", head, te_dtype_name(e->dtype), where(c));
  return KILN_OK;
}

static kiln_status_t parse_cast(te_parse_ctx_t *c, const char *head, const msgpack_object *a, uint32_t n,
                                te_expr_t **out) {
  (void)head;
  int dt = n == 3 ? te_parse_dtype(&a[1]) : 0;
  if (!dt) return KC_COMPILE_ERROR("te: [\"cast\", DTYPE, e] in %s is malformed", where(c));
  te_expr_t *e = *out = te_node(c->p, TE_CAST, 0, dt, 1);
  if (!e) return oom();
  KILN_RETURN_IF_ERROR(te_parse_expr(c, &a[2], &e->args[0]));
  te_expr_t *x = e->args[0];
  if (x->dtype == TE_WEAK_INT) te_settle(x, dt == TE_BOOL ? c->p->index_dtype : dt);
  else if (x->dtype == TE_WEAK_FLOAT) te_settle(x, te_is_float(dt) ? dt : TE_F32);
  return KILN_OK;
}

/* "select" evaluates both sides; "if_then_else" (op 1) only the chosen one, so it may guard
 * loads. */
static kiln_status_t parse_select(te_parse_ctx_t *c, const char *head, const msgpack_object *a, uint32_t n,
                                  te_expr_t **out) {
  if (n != 4) return KC_COMPILE_ERROR("te: [\"%s\", c, a, b] in %s is malformed", head, where(c));
  te_expr_t *e = *out = te_node(c->p, TE_SELECT, head[0] == 'i', 0, 3);
  if (!e) return oom();
  KILN_RETURN_IF_ERROR(parse_args(c, e, &a[1]));
  if (e->args[0]->dtype != TE_BOOL)
    return KC_COMPILE_ERROR("te: a select condition in %s is %s, not bool", where(c), te_dtype_name(e->args[0]->dtype));
  int dt;
  KILN_RETURN_IF_ERROR(unify(c, "select", e->args[1], e->args[2], &dt));
  e->dtype = (uint8_t)dt;
  return KILN_OK;
}

static kiln_status_t call_dtype(te_parse_ctx_t *c, const char *name, te_expr_t *e) {
  int dt = e->args[0]->dtype;
  for (int i = 1; i < e->nargs; i++) KILN_RETURN_IF_ERROR(unify(c, name, e->args[0], e->args[i], &dt));
  if (dt == TE_WEAK_INT || dt == TE_WEAK_FLOAT) {
    for (int i = 0; i < e->nargs; i++) te_settle(e->args[i], TE_F32);
    dt = TE_F32;
  }
  if (!te_is_float(dt) && !(strcmp(name, "abs") == 0 && te_is_int(dt)))
    return KC_COMPILE_ERROR("te: %s of %s in %s: math functions take float16/32/64", name, te_dtype_name(dt),
                            where(c));
  e->dtype = (uint8_t)dt;
  return KILN_OK;
}

static kiln_status_t parse_call(te_parse_ctx_t *c, const char *head, const msgpack_object *a, uint32_t n,
                                te_expr_t **out) {
  (void)head;
  char name[16];
  if (n != 3 || !te_mp_str(&a[1], name, sizeof(name)) || a[2].type != MSGPACK_OBJECT_ARRAY)
    return KC_COMPILE_ERROR("te: [\"call\", name, [args]] in %s is malformed", where(c));
  int f = 0;
  while (te_math_names[f] && strcmp(te_math_names[f], name) != 0) f++;
  if (!te_math_names[f]) return KC_COMPILE_ERROR("te: unknown math function '%s' in %s", name, where(c));
  if ((int)a[2].via.array.size != te_math_arity(name))
    return KC_COMPILE_ERROR("te: %s takes %d arguments, %u given in %s", name, te_math_arity(name),
                            a[2].via.array.size, where(c));
  te_expr_t *e = *out = te_node(c->p, TE_CALL, f, 0, (int)a[2].via.array.size);
  if (!e) return oom();
  KILN_RETURN_IF_ERROR(parse_args(c, e, a[2].via.array.ptr));
  return call_dtype(c, name, e);
}

/* The reduce names exactly the tensor's reduce axes, each once. */
static kiln_status_t check_reduce_axes(te_parse_ctx_t *c, const msgpack_object *axes) {
  te_program_t *p = c->p;
  const te_tensor_t *t = &p->tensors[c->stage];
  if ((int)axes->via.array.size != t->nred)
    return KC_COMPILE_ERROR("te: the reduce in %s names %u axes; the tensor declares %d reduce_axes", where(c),
                            axes->via.array.size, t->nred);
  for (uint32_t i = 0; i < axes->via.array.size; i++) {
    char name[TE_NAME];
    int v = te_mp_str(&axes->via.array.ptr[i], name, sizeof(name)) ? te_find_var(p, c->stage, name) : -1;
    if (v < 0 || p->vars[v].kind != TE_V_REDUCE)
      return KC_COMPILE_ERROR("te: the reduce in %s names '%s', which is not one of its reduce_axes", where(c),
                              v < 0 ? "?" : name);
    for (uint32_t j = 0; j < i; j++) {
      char other[TE_NAME];
      if (te_mp_str(&axes->via.array.ptr[j], other, sizeof(other)) && strcmp(other, name) == 0)
        return KC_COMPILE_ERROR("te: the reduce in %s names '%s' twice", where(c), name);
    }
  }
  return KILN_OK;
}

static kiln_status_t parse_reduce(te_parse_ctx_t *c, const char *head, const msgpack_object *a, uint32_t n,
                                  te_expr_t **out) {
  (void)head;
  if (!c->allow_reduce || c->depth != 1)
    return KC_COMPILE_ERROR("te: a reduce in %s must be the whole body of a compute", where(c));
  char op[8];
  if ((n != 4 && n != 5) || !te_mp_str(&a[1], op, sizeof(op)) || a[3].type != MSGPACK_OBJECT_ARRAY)
    return KC_COMPILE_ERROR("te: [\"reduce\", OP, source, [axes], cond?] in %s is malformed", where(c));
  int rop = strcmp(op, "sum") == 0 ? TE_RSUM : strcmp(op, "max") == 0 ? TE_RMAX
          : strcmp(op, "min") == 0 ? TE_RMIN : strcmp(op, "prod") == 0 ? TE_RPROD : 0;
  if (!rop) return KC_COMPILE_ERROR("te: unknown reduce op '%s' in %s: sum, max, min, prod", op, where(c));
  KILN_RETURN_IF_ERROR(check_reduce_axes(c, &a[3]));
  te_expr_t *e = *out = te_node(c->p, TE_REDUCE, rop, 0, 2);
  if (!e) return oom();
  KILN_RETURN_IF_ERROR(te_parse_expr(c, &a[2], &e->args[0]));
  if (n >= 5 && a[4].type != MSGPACK_OBJECT_NIL) {
    KILN_RETURN_IF_ERROR(te_parse_expr(c, &a[4], &e->args[1]));
    if (e->args[1]->dtype != TE_BOOL) return KC_COMPILE_ERROR("te: the reduce condition in %s is not bool", where(c));
  }
  e->dtype = e->args[0]->dtype;
  return KILN_OK;
}

static const struct {
  const char *name;
  int op;
} bin_ops[] = {
    {"add", TE_ADD},       {"sub", TE_SUB},       {"mul", TE_MUL},       {"div", TE_DIV},
    {"mod", TE_MOD},       {"floordiv", TE_FLOORDIV}, {"floormod", TE_FLOORMOD}, {"min", TE_MIN},
    {"max", TE_MAX},       {"eq", TE_EQ},         {"ne", TE_NE},         {"lt", TE_LT},
    {"le", TE_LE},         {"gt", TE_GT},         {"ge", TE_GE},         {"and", TE_AND},
    {"or", TE_OR},         {"bitand", TE_BITAND}, {"bitor", TE_BITOR},   {"bitxor", TE_BITXOR},
    {"shl", TE_SHL},       {"shr", TE_SHR},
};

static bool is_cmp(int op) { return op >= TE_EQ && op <= TE_GE; }

static kiln_status_t parse_binary(te_parse_ctx_t *c, const char *head, const msgpack_object *a, uint32_t n,
                                  te_expr_t **out) {
  int op = 0, dt;
  for (size_t i = 0; i < KILN_ARRAY_SIZE(bin_ops); i++)
    if (strcmp(bin_ops[i].name, head) == 0) op = bin_ops[i].op;
  if (!op) return KC_COMPILE_ERROR("te: unknown expression node '%s' in %s", head, where(c));
  if (n != 3) return KC_COMPILE_ERROR("te: [\"%s\", a, b] in %s needs two operands", head, where(c));
  te_expr_t *e = *out = te_node(c->p, TE_BIN, op, 0, 2);
  if (!e) return oom();
  KILN_RETURN_IF_ERROR(parse_args(c, e, &a[1]));
  KILN_RETURN_IF_ERROR(unify(c, head, e->args[0], e->args[1], &dt));
  bool intonly = op == TE_FLOORDIV || op == TE_FLOORMOD || (op >= TE_BITAND && op <= TE_SHR);
  bool boolonly = op == TE_AND || op == TE_OR;
  if ((intonly && !te_is_int(dt)) || (boolonly && dt != TE_BOOL) || (!boolonly && !is_cmp(op) && dt == TE_BOOL))
    return KC_COMPILE_ERROR("te: %s of %s in %s is not defined", head, te_dtype_name(dt), where(c));
  if (is_cmp(op) && dt == TE_WEAK_INT) {
    te_settle(e->args[0], c->p->index_dtype);
    te_settle(e->args[1], c->p->index_dtype);
  }
  e->dtype = (uint8_t)(is_cmp(op) ? TE_BOOL : dt);
  return KILN_OK;
}

static const struct {
  const char *head;
  node_fn parse;
} nodes[] = {
    {"const", parse_const}, {"var", parse_var},       {"load", parse_load},           {"neg", parse_unary},
    {"not", parse_unary},   {"cast", parse_cast},     {"select", parse_select},       {"if_then_else", parse_select},
    {"call", parse_call},   {"reduce", parse_reduce},
};

static kiln_status_t parse_node(te_parse_ctx_t *c, const msgpack_object *o, te_expr_t **out) {
  char head[16];
  const msgpack_object *a = o->via.array.ptr;
  if (!te_mp_str(&a[0], head, sizeof(head)))
    return KC_COMPILE_ERROR("te: an expression in %s starts with a non-string", where(c));
  for (size_t i = 0; i < KILN_ARRAY_SIZE(nodes); i++)
    if (strcmp(head, nodes[i].head) == 0) return nodes[i].parse(c, head, a, o->via.array.size, out);
  return parse_binary(c, head, a, o->via.array.size, out);
}

static kiln_status_t parse_literal(te_parse_ctx_t *c, const msgpack_object *o, te_expr_t **out) {
  switch (o->type) {
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
    if (o->via.u64 > INT64_MAX) return KC_COMPILE_ERROR("te: integer literal out of range in %s", where(c));
    /* fall through */
  case MSGPACK_OBJECT_NEGATIVE_INTEGER: *out = te_int(c->p, o->via.i64, TE_WEAK_INT); return KILN_OK;
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64:
    *out = te_node(c->p, TE_FLOAT, 0, TE_WEAK_FLOAT, 0);
    if (*out) (*out)->f = o->via.f64;
    return KILN_OK;
  case MSGPACK_OBJECT_BOOLEAN: *out = te_int(c->p, o->via.boolean, TE_BOOL); return KILN_OK;
  default: return KC_COMPILE_ERROR("te: an expression in %s is neither a number nor an array", where(c));
  }
}

kiln_status_t te_parse_expr(te_parse_ctx_t *c, const msgpack_object *o, te_expr_t **out) {
  if (++c->depth > MAX_EXPR_DEPTH) return KC_COMPILE_ERROR("te: expression in %s nests too deep", where(c));
  te_expr_t *e = NULL;
  bool node = o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size >= 1;
  KILN_RETURN_IF_ERROR(node ? parse_node(c, o, &e) : parse_literal(c, o, &e));
  if (!e) return oom();
  c->depth--;
  *out = e;
  return KILN_OK;
}

kiln_status_t te_parse_index(te_parse_ctx_t *c, const msgpack_object *o, const char *what, te_expr_t **out) {
  KILN_RETURN_IF_ERROR(te_parse_expr(c, o, out));
  return want_index(c, *out, what);
}
