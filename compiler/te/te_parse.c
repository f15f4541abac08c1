/* The te payload (docs/te.md §2-4): MessagePack -> program, with names resolved and
 * expression dtypes checked. Every refusal is E_COMPILE naming the place. */
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/te/te.h"
#include "compiler/te/te_mp.h"

#define MAX_EXPR_DEPTH 200

struct te_chunk {
  te_chunk_t *next;
  size_t used, cap;
  _Alignas(16) uint8_t data[];
};

void *te_alloc(kc_te_program_t *p, size_t n) {
  n = (n + 15) & ~(size_t)15;
  te_chunk_t *c = p->arena;
  if (!c || c->used + n > c->cap) {
    size_t cap = n > 65536 ? n : 65536;
    te_chunk_t *nc = malloc(sizeof(*nc) + cap);
    if (!nc) return NULL;
    nc->next = c;
    nc->used = 0;
    nc->cap = cap;
    p->arena = c = nc;
  }
  void *r = c->data + c->used;
  c->used += n;
  memset(r, 0, n);
  return r;
}

static const char *const dtype_names[] = {
    [TE_BOOL] = "bool",     [TE_I8] = "int8",         [TE_I16] = "int16",     [TE_I32] = "int32",
    [TE_I64] = "int64",     [TE_U8] = "uint8",        [TE_U16] = "uint16",    [TE_U32] = "uint32",
    [TE_U64] = "uint64",    [TE_F16] = "float16",     [TE_F32] = "float32",   [TE_F64] = "float64",
    [TE_WEAK_INT] = "int literal", [TE_WEAK_FLOAT] = "float literal",
};

const char *te_dtype_name(int dt) {
  return dt > 0 && dt < (int)KILN_ARRAY_SIZE(dtype_names) ? dtype_names[dt] : "?";
}
bool te_is_float(int dt) { return dt == TE_F16 || dt == TE_F32 || dt == TE_F64 || dt == TE_WEAK_FLOAT; }
bool te_is_int(int dt) { return (dt >= TE_I8 && dt <= TE_U64) || dt == TE_WEAK_INT; }

static int dtype_parse(const msgpack_object *o) {
  char s[16];
  if (!te_mp_str(o, s, sizeof(s))) return 0;
  for (int i = TE_BOOL; i <= TE_F64; i++)
    if (strcmp(s, dtype_names[i]) == 0) return i;
  return 0;
}

int te_find_tensor(const kc_te_program_t *p, const char *name) {
  for (int i = 0; i < p->ntensors; i++)
    if (strcmp(p->tensors[i].name, name) == 0) return i;
  return -1;
}

/* A var visible in `stage` (its axes, reduce axes and leaves), else a shape var. */
int te_find_var(const kc_te_program_t *p, int stage, const char *name) {
  for (int i = 0; i < p->nvars; i++)
    if (p->vars[i].stage == stage && strcmp(p->vars[i].name, name) == 0) return i;
  for (int i = 0; i < p->nshape; i++)
    if (strcmp(p->vars[p->shape_vars[i]].name, name) == 0) return p->shape_vars[i];
  return -1;
}

static bool name_ok(const char *s) {
  if (!s[0]) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
          *s == '.'))
      return false;
  return true;
}

kiln_status_t te_new_var(kc_te_program_t *p, int stage, const char *name, int kind, int *out) {
  if (!name_ok(name) || strlen(name) >= TE_NAME)
    return KC_COMPILE_ERROR("te: bad name '%s': use 1..63 of [A-Za-z0-9_.]", name);
  if (te_find_var(p, stage, name) >= 0 || (kind == TE_V_SHAPE && te_find_tensor(p, name) >= 0))
    return KC_COMPILE_ERROR("te: the name '%s' is already used%s%s", name, stage >= 0 ? " in stage " : "",
                            stage >= 0 ? p->tensors[stage].name : "");
  if (p->nvars >= TE_MAX_VARS) return KC_COMPILE_ERROR("te: more than %d variables", TE_MAX_VARS);
  te_var_t *v = &p->vars[p->nvars];
  memset(v, 0, sizeof(*v));
  snprintf(v->name, sizeof(v->name), "%s", name);
  v->stage = stage;
  v->kind = (uint8_t)kind;
  v->bind = TE_BIND_NONE;
  v->cext = -1;
  *out = p->nvars++;
  return KILN_OK;
}

/* ---- expressions ------------------------------------------------------------------- */

typedef struct parse_ctx {
  kc_te_program_t *p;
  int stage;        /* the compute being parsed, -1 for shapes */
  bool allow_reduce;
  bool in_shape;
  int depth;
} parse_ctx_t;

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

const char *const te_math_names[] = {
    "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "pow", "sin", "cos",
    "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "erf", "erfc", "cbrt", "hypot", "fmod", "sqrt", "fabs", "floor", "ceil", "trunc", "round",
    "rint", "fmin", "fmax", "fma", "copysign", "abs", "sigmoid", NULL};

int te_math_arity(const char *name) {
  static const char *const two[] = {"pow", "atan2", "hypot", "fmod", "fmin", "fmax", "copysign"};
  if (strcmp(name, "fma") == 0) return 3;
  for (size_t i = 0; i < KILN_ARRAY_SIZE(two); i++)
    if (strcmp(name, two[i]) == 0) return 2;
  return 1;
}

static bool is_cmp(int op) { return op >= TE_EQ && op <= TE_GE; }

/* Gives weak literals a dtype (a weak int may become a float); false if it cannot. */
static bool settle(te_expr_t *e, int dt) {
  if (e->dtype == dt) return true;
  if (e->dtype == TE_WEAK_INT && (te_is_int(dt) || te_is_float(dt))) {
    if (e->kind == TE_INT && te_is_float(dt)) {
      e->kind = TE_FLOAT;
      e->f = (double)e->i;
    }
    if (e->kind == TE_BIN || e->kind == TE_UN || e->kind == TE_SELECT) {
      for (int i = 0; i < e->nargs; i++)
        if (e->args[i] && !(e->kind == TE_SELECT && i == 0) && !settle(e->args[i], dt)) return false;
    }
    e->dtype = (uint8_t)dt;
    return true;
  }
  if (e->dtype == TE_WEAK_FLOAT && te_is_float(dt)) {
    if (e->kind == TE_BIN || e->kind == TE_UN || e->kind == TE_SELECT) {
      for (int i = 0; i < e->nargs; i++)
        if (e->args[i] && !(e->kind == TE_SELECT && i == 0) && !settle(e->args[i], dt)) return false;
    }
    e->dtype = (uint8_t)dt;
    return true;
  }
  return false;
}

/* One dtype for two operands, settling literals. */
static kiln_status_t unify(parse_ctx_t *c, const char *what, te_expr_t *a, te_expr_t *b, int *out) {
  int da = a->dtype, db = b->dtype;
  bool wa = da >= TE_WEAK_INT, wb = db >= TE_WEAK_INT;
  if (wa && wb) {
    *out = da == TE_WEAK_FLOAT || db == TE_WEAK_FLOAT ? TE_WEAK_FLOAT : TE_WEAK_INT;
    if (*out == TE_WEAK_FLOAT) {
      settle(a, TE_F32);
      settle(b, TE_F32);
      *out = TE_F32;
    }
    return KILN_OK;
  }
  int want = wa ? db : da;
  if (settle(a, want) && settle(b, want)) {
    *out = want;
    return KILN_OK;
  }
  return KC_COMPILE_ERROR("te: %s of %s and %s in %s: both sides need one dtype, insert a cast", what,
                          te_dtype_name(da), te_dtype_name(db),
                          c->stage >= 0 ? c->p->tensors[c->stage].name : "a shape");
}

static kiln_status_t parse_expr(parse_ctx_t *c, const msgpack_object *o, te_expr_t **out);

static kiln_status_t parse_args(parse_ctx_t *c, te_expr_t *e, const msgpack_object *arr, int first) {
  for (int i = 0; i < e->nargs; i++)
    KILN_RETURN_IF_ERROR(parse_expr(c, &arr->via.array.ptr[first + i], &e->args[i]));
  return KILN_OK;
}

static kiln_status_t want_index(parse_ctx_t *c, te_expr_t *e, const char *what) {
  if (e->dtype == TE_WEAK_INT) settle(e, c->p->index_dtype);
  if (!te_is_int(e->dtype))
    return KC_COMPILE_ERROR("te: %s in %s is %s: indices must be integers", what,
                            c->stage >= 0 ? c->p->tensors[c->stage].name : "a shape", te_dtype_name(e->dtype));
  return KILN_OK;
}

static bool defined_later(const kc_te_program_t *p, const char *name) {
  const msgpack_object *ts = p->parse_tensors;
  for (uint32_t i = 0; ts && i < ts->via.array.size; i++) {
    char n[TE_NAME];
    if (te_mp_str(te_mp_get(&ts->via.array.ptr[i], "name"), n, sizeof(n)) && strcmp(n, name) == 0) return true;
  }
  return false;
}

static kiln_status_t parse_expr(parse_ctx_t *c, const msgpack_object *o, te_expr_t **out) {
  kc_te_program_t *p = c->p;
  const char *where = c->stage >= 0 ? p->tensors[c->stage].name : "a shape";
  if (++c->depth > MAX_EXPR_DEPTH) return KC_COMPILE_ERROR("te: expression in %s nests too deep", where);
  te_expr_t *e = NULL;
  kiln_status_t s = KILN_OK;
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER || o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 > INT64_MAX)
      return KC_COMPILE_ERROR("te: integer literal out of range in %s", where);
    e = te_int(p, o->via.i64, TE_WEAK_INT);
  } else if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64) {
    e = te_node(p, TE_FLOAT, 0, TE_WEAK_FLOAT, 0);
    if (e) e->f = o->via.f64;
  } else if (o->type == MSGPACK_OBJECT_BOOLEAN) {
    e = te_int(p, o->via.boolean, TE_BOOL);
  } else if (o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size >= 1) {
    char head[16];
    const msgpack_object *a = o->via.array.ptr;
    uint32_t n = o->via.array.size;
    if (!te_mp_str(&a[0], head, sizeof(head)))
      return KC_COMPILE_ERROR("te: an expression in %s starts with a non-string", where);
    if (strcmp(head, "const") == 0) {
      int dt = n == 3 ? dtype_parse(&a[1]) : 0;
      if (!dt) return KC_COMPILE_ERROR("te: [\"const\", DTYPE, number] in %s is malformed", where);
      if (te_is_float(dt)) {
        e = te_node(p, TE_FLOAT, 0, dt, 0);
        if (!e || !te_mp_number(&a[2], &e->f)) return KC_COMPILE_ERROR("te: bad const in %s", where);
      } else {
        double d;
        if (!te_mp_number(&a[2], &d)) return KC_COMPILE_ERROR("te: bad const in %s", where);
        e = te_int(p, a[2].type == MSGPACK_OBJECT_FLOAT64 || a[2].type == MSGPACK_OBJECT_FLOAT32 ? (int64_t)d
                      : a[2].type == MSGPACK_OBJECT_BOOLEAN ? a[2].via.boolean : a[2].via.i64, dt);
      }
    } else if (strcmp(head, "var") == 0) {
      char name[TE_NAME];
      if (n != 2 || !te_mp_str(&a[1], name, sizeof(name)))
        return KC_COMPILE_ERROR("te: [\"var\", name] in %s is malformed", where);
      int v = te_find_var(p, c->stage, name);
      if (v < 0 || (c->in_shape && p->vars[v].kind != TE_V_SHAPE))
        return KC_COMPILE_ERROR("te: unknown var '%s' in %s", name, where);
      if (p->vars[v].kind == TE_V_REDUCE && !c->allow_reduce && !c->in_shape)
        return KC_COMPILE_ERROR("te: reduce axis '%s' used outside its reduce in %s", name, where);
      e = te_varref(p, v);
    } else if (strcmp(head, "load") == 0) {
      char name[TE_NAME];
      if (n != 3 || !te_mp_str(&a[1], name, sizeof(name)) || a[2].type != MSGPACK_OBJECT_ARRAY)
        return KC_COMPILE_ERROR("te: [\"load\", tensor, [indices]] in %s is malformed", where);
      int t = te_find_tensor(p, name);
      if (t < 0 && defined_later(p, name))
        return KC_COMPILE_ERROR("te: %s reads %s, which is defined after it (tensors come in dependency order; "
                                "cycles are refused)",
                                where, name);
      if (t < 0) return KC_COMPILE_ERROR("te: %s loads unknown tensor '%s'", where, name);
      if (t >= c->stage)
        return KC_COMPILE_ERROR("te: %s reads %s, which is not defined before it (tensors come in "
                                "dependency order; cycles are refused)",
                                where, name);
      if ((int)a[2].via.array.size != p->tensors[t].ndim)
        return KC_COMPILE_ERROR("te: %s loads %s with %u indices; it has %d dimensions", where, name,
                                a[2].via.array.size, p->tensors[t].ndim);
      e = te_node(p, TE_LOAD, 0, p->tensors[t].dtype, (int)a[2].via.array.size);
      if (!e) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
      e->ref = t;
      KILN_RETURN_IF_ERROR(parse_args(c, e, &a[2], 0));
      for (int i = 0; i < e->nargs; i++) KILN_RETURN_IF_ERROR(want_index(c, e->args[i], "an index"));
    } else if (strcmp(head, "neg") == 0 || strcmp(head, "not") == 0) {
      if (n != 2) return KC_COMPILE_ERROR("te: [\"%s\", a] in %s is malformed", head, where);
      bool neg = head[0] == 'n' && head[1] == 'e';
      e = te_node(p, TE_UN, neg ? TE_NEG : TE_NOT, 0, 1);
      if (!e) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
      KILN_RETURN_IF_ERROR(parse_args(c, e, o, 1));
      e->dtype = e->args[0]->dtype;
      if (neg ? e->dtype == TE_BOOL : e->dtype != TE_BOOL)
        return KC_COMPILE_ERROR("te: %s of %s in %s", head, te_dtype_name(e->dtype), where);
    } else if (strcmp(head, "cast") == 0) {
      int dt = n == 3 ? dtype_parse(&a[1]) : 0;
      if (!dt) return KC_COMPILE_ERROR("te: [\"cast\", DTYPE, e] in %s is malformed", where);
      e = te_node(p, TE_CAST, 0, dt, 1);
      if (!e) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
      KILN_RETURN_IF_ERROR(parse_expr(c, &a[2], &e->args[0]));
      te_expr_t *x = e->args[0];
      if (x->dtype == TE_WEAK_INT) settle(x, dt == TE_BOOL ? p->index_dtype : dt);
      else if (x->dtype == TE_WEAK_FLOAT) settle(x, te_is_float(dt) ? dt : TE_F32);
    } else if (strcmp(head, "select") == 0 || strcmp(head, "if_then_else") == 0) {
      if (n != 4) return KC_COMPILE_ERROR("te: [\"%s\", c, a, b] in %s is malformed", head, where);
      /* op 1: lazy (only the chosen side is evaluated, so it may guard loads) */
      e = te_node(p, TE_SELECT, head[0] == 'i', 0, 3);
      if (!e) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
      KILN_RETURN_IF_ERROR(parse_args(c, e, o, 1));
      if (e->args[0]->dtype != TE_BOOL)
        return KC_COMPILE_ERROR("te: a select condition in %s is %s, not bool", where,
                                te_dtype_name(e->args[0]->dtype));
      int dt;
      KILN_RETURN_IF_ERROR(unify(c, "select", e->args[1], e->args[2], &dt));
      e->dtype = (uint8_t)dt;
    } else if (strcmp(head, "call") == 0) {
      char name[16];
      if (n != 3 || !te_mp_str(&a[1], name, sizeof(name)) || a[2].type != MSGPACK_OBJECT_ARRAY)
        return KC_COMPILE_ERROR("te: [\"call\", name, [args]] in %s is malformed", where);
      int f = 0;
      while (te_math_names[f] && strcmp(te_math_names[f], name) != 0) f++;
      if (!te_math_names[f]) return KC_COMPILE_ERROR("te: unknown math function '%s' in %s", name, where);
      if ((int)a[2].via.array.size != te_math_arity(name))
        return KC_COMPILE_ERROR("te: %s takes %d arguments, %u given in %s", name, te_math_arity(name),
                                a[2].via.array.size, where);
      e = te_node(p, TE_CALL, f, 0, (int)a[2].via.array.size);
      if (!e) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
      KILN_RETURN_IF_ERROR(parse_args(c, e, &a[2], 0));
      int dt = e->args[0]->dtype;
      for (int i = 1; i < e->nargs; i++) KILN_RETURN_IF_ERROR(unify(c, name, e->args[0], e->args[i], &dt));
      if (dt == TE_WEAK_INT || dt == TE_WEAK_FLOAT) {
        for (int i = 0; i < e->nargs; i++) settle(e->args[i], TE_F32);
        dt = TE_F32;
      }
      if (!te_is_float(dt) && !(strcmp(name, "abs") == 0 && te_is_int(dt)))
        return KC_COMPILE_ERROR("te: %s of %s in %s: math functions take float16/32/64", name,
                                te_dtype_name(dt), where);
      e->dtype = (uint8_t)dt;
    } else if (strcmp(head, "reduce") == 0) {
      if (!c->allow_reduce || c->depth != 1)
        return KC_COMPILE_ERROR("te: a reduce in %s must be the whole body of a compute", where);
      char op[8];
      if ((n != 4 && n != 5) || !te_mp_str(&a[1], op, sizeof(op)) || a[3].type != MSGPACK_OBJECT_ARRAY)
        return KC_COMPILE_ERROR("te: [\"reduce\", OP, source, [axes], cond?] in %s is malformed", where);
      int rop = strcmp(op, "sum") == 0 ? TE_RSUM : strcmp(op, "max") == 0 ? TE_RMAX
              : strcmp(op, "min") == 0 ? TE_RMIN : strcmp(op, "prod") == 0 ? TE_RPROD : 0;
      if (!rop) return KC_COMPILE_ERROR("te: unknown reduce op '%s' in %s: sum, max, min, prod", op, where);
      te_tensor_t *t = &p->tensors[c->stage];
      if ((int)a[3].via.array.size != t->nred)
        return KC_COMPILE_ERROR("te: the reduce in %s names %u axes; the tensor declares %d reduce_axes", where,
                                a[3].via.array.size, t->nred);
      for (uint32_t i = 0; i < a[3].via.array.size; i++) {
        char name[TE_NAME];
        int v = te_mp_str(&a[3].via.array.ptr[i], name, sizeof(name)) ? te_find_var(p, c->stage, name) : -1;
        if (v < 0 || p->vars[v].kind != TE_V_REDUCE)
          return KC_COMPILE_ERROR("te: the reduce in %s names '%s', which is not one of its reduce_axes", where,
                                  v < 0 ? "?" : name);
        for (uint32_t j = 0; j < i; j++) {
          char other[TE_NAME];
          if (te_mp_str(&a[3].via.array.ptr[j], other, sizeof(other)) && strcmp(other, name) == 0)
            return KC_COMPILE_ERROR("te: the reduce in %s names '%s' twice", where, name);
        }
      }
      e = te_node(p, TE_REDUCE, rop, 0, 2);
      if (!e) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
      KILN_RETURN_IF_ERROR(parse_expr(c, &a[2], &e->args[0]));
      if (n >= 5 && a[4].type != MSGPACK_OBJECT_NIL) {
        KILN_RETURN_IF_ERROR(parse_expr(c, &a[4], &e->args[1]));
        if (e->args[1]->dtype != TE_BOOL) return KC_COMPILE_ERROR("te: the reduce condition in %s is not bool", where);
      }
      e->dtype = e->args[0]->dtype;
    } else {
      int op = 0;
      for (size_t i = 0; i < KILN_ARRAY_SIZE(bin_ops); i++)
        if (strcmp(bin_ops[i].name, head) == 0) op = bin_ops[i].op;
      if (!op) return KC_COMPILE_ERROR("te: unknown expression node '%s' in %s", head, where);
      if (n != 3) return KC_COMPILE_ERROR("te: [\"%s\", a, b] in %s needs two operands", head, where);
      e = te_node(p, TE_BIN, op, 0, 2);
      if (!e) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
      KILN_RETURN_IF_ERROR(parse_args(c, e, o, 1));
      int dt;
      KILN_RETURN_IF_ERROR(unify(c, head, e->args[0], e->args[1], &dt));
      bool intonly = op == TE_FLOORDIV || op == TE_FLOORMOD || (op >= TE_BITAND && op <= TE_SHR);
      bool boolonly = op == TE_AND || op == TE_OR;
      if ((intonly && !te_is_int(dt)) || (boolonly && dt != TE_BOOL) ||
          (!boolonly && !is_cmp(op) && dt == TE_BOOL))
        return KC_COMPILE_ERROR("te: %s of %s in %s is not defined", head, te_dtype_name(dt), where);
      if (is_cmp(op) && dt == TE_WEAK_INT) {
        settle(e->args[0], p->index_dtype);
        settle(e->args[1], p->index_dtype);
      }
      e->dtype = (uint8_t)(is_cmp(op) ? TE_BOOL : dt);
    }
  } else {
    return KC_COMPILE_ERROR("te: an expression in %s is neither a number nor an array", where);
  }
  if (!e) s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  c->depth--;
  *out = e;
  return s;
}

static kiln_status_t parse_index_expr(kc_te_program_t *p, int stage, const msgpack_object *o, bool in_shape,
                                      const char *what, te_expr_t **out) {
  parse_ctx_t c = {.p = p, .stage = stage, .in_shape = in_shape};
  KILN_RETURN_IF_ERROR(parse_expr(&c, o, out));
  return want_index(&c, *out, what);
}

/* ---- tensors and kernels ----------------------------------------------------------- */

static kiln_status_t parse_tensor(kc_te_program_t *p, const msgpack_object *o) {
  static const char *const keys[] = {"name", "op", "dtype", "shape", "axes", "reduce_axes", "body", NULL};
  KILN_RETURN_IF_ERROR(te_mp_check_keys(o, "a tensor", keys));
  if (p->ntensors >= TE_MAX_TENSORS) return KC_COMPILE_ERROR("te: more than %d tensors", TE_MAX_TENSORS);
  int id = p->ntensors;
  te_tensor_t *t = &p->tensors[id];
  memset(t, 0, sizeof(*t));
  t->attach_stage = t->attach_var = -1;
  t->kernel_arg = -1;
  char op[16];
  if (!te_mp_str(te_mp_get(o, "name"), t->name, sizeof(t->name)) || !name_ok(t->name))
    return KC_COMPILE_ERROR("te: tensor %d has no valid name", id);
  if (te_find_tensor(p, t->name) >= 0 || te_find_var(p, -1, t->name) >= 0)
    return KC_COMPILE_ERROR("te: the name '%s' is used twice", t->name);
  if (!te_mp_str(te_mp_get(o, "op"), op, sizeof(op)) ||
      (strcmp(op, "placeholder") != 0 && strcmp(op, "compute") != 0))
    return KC_COMPILE_ERROR("te: tensor %s: op must be \"placeholder\" or \"compute\"", t->name);
  t->placeholder = op[0] == 'p';
  t->dtype = (uint8_t)dtype_parse(te_mp_get(o, "dtype"));
  if (!t->dtype) return KC_COMPILE_ERROR("te: tensor %s has no valid dtype", t->name);
  const msgpack_object *shape = te_mp_get(o, "shape");
  if (!shape || shape->type != MSGPACK_OBJECT_ARRAY || shape->via.array.size < 1 ||
      shape->via.array.size > TE_MAX_DIMS)
    return KC_COMPILE_ERROR("te: tensor %s: shape must be an array of 1..%d expressions", t->name, TE_MAX_DIMS);
  t->ndim = (int)shape->via.array.size;
  p->ntensors++; /* visible to its own body's var lookups; loads of itself are refused */
  for (int d = 0; d < t->ndim; d++) {
    KILN_RETURN_IF_ERROR(parse_index_expr(p, id, &shape->via.array.ptr[d], true, "a shape", &t->shape[d]));
    t->shape[d] = te_simplify(p, t->shape[d]);
  }
  if (t->placeholder) {
    if (te_mp_get(o, "axes") || te_mp_get(o, "body") || te_mp_get(o, "reduce_axes"))
      return KC_COMPILE_ERROR("te: placeholder %s has axes, reduce_axes or a body", t->name);
    return KILN_OK;
  }
  const msgpack_object *axes = te_mp_get(o, "axes"), *red = te_mp_get(o, "reduce_axes");
  if (!axes || axes->type != MSGPACK_OBJECT_ARRAY || (int)axes->via.array.size != t->ndim)
    return KC_COMPILE_ERROR("te: compute %s needs one axis name per dimension", t->name);
  for (int d = 0; d < t->ndim; d++) {
    char name[TE_NAME];
    if (!te_mp_str(&axes->via.array.ptr[d], name, sizeof(name)))
      return KC_COMPILE_ERROR("te: compute %s: axis %d is not a string", t->name, d);
    if (te_find_var(p, -1, name) >= 0)
      return KC_COMPILE_ERROR("te: compute %s: axis '%s' has the name of a shape var", t->name, name);
    KILN_RETURN_IF_ERROR(te_new_var(p, id, name, TE_V_AXIS, &t->axes[d]));
    p->vars[t->axes[d]].min = te_int(p, 0, p->index_dtype);
    p->vars[t->axes[d]].extent = t->shape[d];
  }
  if (red) {
    if (red->type != MSGPACK_OBJECT_ARRAY || red->via.array.size > TE_MAX_DIMS)
      return KC_COMPILE_ERROR("te: compute %s: reduce_axes must be an array of at most %d", t->name, TE_MAX_DIMS);
    for (uint32_t i = 0; i < red->via.array.size; i++) {
      const msgpack_object *r = &red->via.array.ptr[i];
      static const char *const rkeys[] = {"name", "min", "extent", NULL};
      KILN_RETURN_IF_ERROR(te_mp_check_keys(r, "a reduce axis", rkeys));
      char name[TE_NAME];
      if (!te_mp_str(te_mp_get(r, "name"), name, sizeof(name)) || !te_mp_get(r, "extent"))
        return KC_COMPILE_ERROR("te: compute %s: reduce axis %u needs name and extent", t->name, i);
      if (te_find_var(p, -1, name) >= 0)
        return KC_COMPILE_ERROR("te: compute %s: reduce axis '%s' has the name of a shape var", t->name, name);
      int v;
      KILN_RETURN_IF_ERROR(te_new_var(p, id, name, TE_V_REDUCE, &v));
      t->red[t->nred++] = v;
      p->vars[v].reduce = true;
      te_expr_t *mn = NULL, *ext = NULL;
      if (te_mp_get(r, "min"))
        KILN_RETURN_IF_ERROR(parse_index_expr(p, id, te_mp_get(r, "min"), true, "a reduce min", &mn));
      else mn = te_int(p, 0, p->index_dtype);
      KILN_RETURN_IF_ERROR(parse_index_expr(p, id, te_mp_get(r, "extent"), true, "a reduce extent", &ext));
      p->vars[v].min = te_simplify(p, mn);
      p->vars[v].extent = te_simplify(p, ext);
    }
  }
  for (int d = 0; d < t->ndim; d++) t->leaves[t->nleaves++] = t->axes[d];
  for (int r = 0; r < t->nred; r++) t->leaves[t->nleaves++] = t->red[r];
  const msgpack_object *body = te_mp_get(o, "body");
  if (!body) return KC_COMPILE_ERROR("te: compute %s has no body", t->name);
  parse_ctx_t c = {.p = p, .stage = id, .allow_reduce = true};
  KILN_RETURN_IF_ERROR(parse_expr(&c, body, &t->body));
  if (t->nred && t->body->kind != TE_REDUCE)
    return KC_COMPILE_ERROR("te: compute %s declares reduce_axes but its body is not a reduce", t->name);
  te_expr_t *val = t->body->kind == TE_REDUCE ? t->body->args[0] : t->body;
  if (!settle(val, t->dtype))
    return KC_COMPILE_ERROR("te: the body of %s is %s but the tensor is %s: insert a cast", t->name,
                            te_dtype_name(val->dtype), te_dtype_name(t->dtype));
  t->body->dtype = t->dtype;
  if (t->body->kind == TE_REDUCE && t->dtype == TE_BOOL)
    return KC_COMPILE_ERROR("te: %s reduces bool values", t->name);
  return KILN_OK;
}

static kiln_status_t parse_kernel(kc_te_program_t *p, const msgpack_object *o, te_kernel_t *k) {
  static const char *const keys[] = {"name", "args", "compute", NULL};
  KILN_RETURN_IF_ERROR(te_mp_check_keys(o, "a kernel", keys));
  if (!te_mp_str(te_mp_get(o, "name"), k->name, sizeof(k->name)) || !name_ok(k->name))
    return KC_COMPILE_ERROR("te: a kernel has no valid name");
  const msgpack_object *args = te_mp_get(o, "args");
  if (!args || args->type != MSGPACK_OBJECT_ARRAY || args->via.array.size == 0 ||
      args->via.array.size + (uint32_t)p->nshape > KC_MAX_PARAMS)
    return KC_COMPILE_ERROR("te: kernel %s: args must name 1..%d tensors and vars", k->name, KC_MAX_PARAMS);
  k->root = -1;
  for (uint32_t i = 0; i < args->via.array.size; i++) {
    char name[TE_NAME];
    if (!te_mp_str(&args->via.array.ptr[i], name, sizeof(name)))
      return KC_COMPILE_ERROR("te: kernel %s: argument %u is not a name", k->name, i);
    int t = te_find_tensor(p, name), v = t < 0 ? te_find_var(p, -1, name) : -1;
    if (t < 0 && v < 0) return KC_COMPILE_ERROR("te: kernel %s: unknown argument '%s'", k->name, name);
    if (t >= 0 && t >= p->nuser_tensors)
      return KC_COMPILE_ERROR("te: kernel %s: %s is a cache stage, not an argument", k->name, name);
    for (int j = 0; j < k->nargs; j++)
      if (k->args[j] == (t >= 0 ? t : -v - 1))
        return KC_COMPILE_ERROR("te: kernel %s names '%s' twice", k->name, name);
    k->args[k->nargs++] = t >= 0 ? t : -v - 1;
    if (t >= 0 && !p->tensors[t].placeholder) k->root = t;
  }
  char root[TE_NAME];
  if (te_mp_get(o, "compute")) {
    if (!te_mp_str(te_mp_get(o, "compute"), root, sizeof(root)))
      return KC_COMPILE_ERROR("te: kernel %s: compute must be a tensor name", k->name);
    int t = te_find_tensor(p, root);
    bool in_args = false;
    for (int j = 0; j < k->nargs; j++) in_args |= k->args[j] == t;
    if (t < 0 || p->tensors[t].placeholder || !in_args)
      return KC_COMPILE_ERROR("te: kernel %s: compute '%s' must be a compute tensor among its args", k->name, root);
    k->root = t;
  }
  if (k->root < 0) return KC_COMPILE_ERROR("te: kernel %s has no compute tensor among its args", k->name);
  /* Shape vars not named in args follow, in program order. */
  for (int i = 0; i < p->nshape; i++) {
    bool named = false;
    for (int j = 0; j < k->nargs; j++) named |= k->args[j] == -p->shape_vars[i] - 1;
    if (!named) k->args[k->nargs++] = -p->shape_vars[i] - 1;
  }
  return KILN_OK;
}

static void *arena_alloc(void *ud, size_t n) { return te_alloc(ud, n); }

kiln_status_t te_parse(const uint8_t *bytes, size_t len, kc_te_program_t *p) {
  kiln_status_t s = KILN_OK;
  msgpack_object top;
  if (!te_mp_decode(bytes, len, arena_alloc, p, &top))
    return KC_COMPILE_ERROR("te: the payload is not one MessagePack value nested at most %d deep (send the "
                            "program map of docs/te.md)",
                            TE_MP_MAX_DEPTH);
  const msgpack_object *root = &top;
  static const char *const keys[] = {"te", "index_dtype", "vars", "tensors", "schedule", "kernels", NULL};
  s = te_mp_check_keys(root, "the program", keys);
  const msgpack_object *o;
  if (!s) {
    o = te_mp_get(root, "te");
    if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 != 1)
      s = KC_COMPILE_ERROR("te: the program needs \"te\": 1 (this kiln reads version 1)");
  }
  p->index_dtype = TE_I32;
  if (!s && (o = te_mp_get(root, "index_dtype"))) {
    int dt = dtype_parse(o);
    if (dt != TE_I32 && dt != TE_I64) s = KC_COMPILE_ERROR("te: index_dtype must be \"int32\" or \"int64\"");
    p->index_dtype = (uint8_t)dt;
  }
  if (!s && (o = te_mp_get(root, "vars"))) {
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > 64)
      s = KC_COMPILE_ERROR("te: vars must be an array of at most 64");
    for (uint32_t i = 0; !s && i < o->via.array.size; i++) {
      const msgpack_object *v = &o->via.array.ptr[i];
      static const char *const vkeys[] = {"name", "dtype", NULL};
      char name[TE_NAME] = "";
      s = te_mp_check_keys(v, "a var", vkeys);
      if (!s && !te_mp_str(te_mp_get(v, "name"), name, sizeof(name)))
        s = KC_COMPILE_ERROR("te: var %u has no name", i);
      if (!s && te_mp_get(v, "dtype") && dtype_parse(te_mp_get(v, "dtype")) != p->index_dtype)
        s = KC_COMPILE_ERROR("te: var %s: its dtype must be the index_dtype (%s)", name, te_dtype_name(p->index_dtype));
      int id;
      if (!s) s = te_new_var(p, -1, name, TE_V_SHAPE, &id);
      if (!s) p->shape_vars[p->nshape++] = id;
    }
  }
  if (!s) {
    o = te_mp_get(root, "tensors");
    if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0)
      s = KC_COMPILE_ERROR("te: tensors must be a non-empty array");
    p->parse_tensors = o;
    for (uint32_t i = 0; !s && i < o->via.array.size; i++) s = parse_tensor(p, &o->via.array.ptr[i]);
    p->parse_tensors = NULL;
    p->nuser_tensors = p->ntensors;
  }
  if (!s && (o = te_mp_get(root, "schedule"))) s = te_apply_schedule(p, o);
  if (!s) {
    o = te_mp_get(root, "kernels");
    if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0 || o->via.array.size > TE_MAX_KERNELS)
      s = KC_COMPILE_ERROR("te: kernels must be an array of 1..%d", TE_MAX_KERNELS);
    for (uint32_t i = 0; !s && i < o->via.array.size; i++) {
      s = parse_kernel(p, &o->via.array.ptr[i], &p->kernels[i]);
      p->nkernels = (int)i + 1;
      for (uint32_t j = 0; !s && j < i; j++)
        if (strcmp(p->kernels[j].name, p->kernels[i].name) == 0)
          s = KC_COMPILE_ERROR("te: two kernels are named %s", p->kernels[i].name);
    }
  }
  return s;
}

void te_arena_free(kc_te_program_t *p) {
  for (te_chunk_t *c = p->arena, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  p->arena = NULL;
}
