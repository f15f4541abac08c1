/* The te program map (docs/te.md §2): version, index dtype, shape vars, tensors in dependency
 * order, the schedule (each primitive read by te_parse_prim.c and applied at once), kernels. */
#include <string.h>

#include "compiler/te/te_expr.h"
#include "compiler/te/te_mp.h"
#include "compiler/te/te_parse.h"

static kiln_status_t parse_vars(te_program_t *p, const msgpack_object *o) {
  static const char *const keys[] = {"name", "dtype", NULL};
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > TE_MAX_SHAPE_VARS)
    return KC_COMPILE_ERROR("te: vars must be an array of at most %d", TE_MAX_SHAPE_VARS);
  for (uint32_t i = 0; i < o->via.array.size; i++) {
    const msgpack_object *v = &o->via.array.ptr[i];
    char name[TE_NAME] = "";
    int id;
    KILN_RETURN_IF_ERROR(te_mp_check_keys(v, "a var", keys));
    if (!te_mp_str(te_mp_get(v, "name"), name, sizeof(name))) return KC_COMPILE_ERROR("te: var %u has no name", i);
    if (te_mp_get(v, "dtype") && te_parse_dtype(te_mp_get(v, "dtype")) != p->index_dtype)
      return KC_COMPILE_ERROR("te: var %s: its dtype must be the index_dtype (%s)", name, te_dtype_name(p->index_dtype));
    KILN_RETURN_IF_ERROR(te_new_var(p, -1, name, TE_V_SHAPE, &id));
    p->shape_vars[p->nshape++] = id;
  }
  return KILN_OK;
}

/* ---- tensors ------------------------------------------------------------------------ */

static kiln_status_t parse_axes(te_program_t *p, int id, const msgpack_object *axes) {
  te_tensor_t *t = &p->tensors[id];
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
  return KILN_OK;
}

static kiln_status_t parse_reduce_axis(te_parse_ctx_t *c, const msgpack_object *r, uint32_t i) {
  static const char *const keys[] = {"name", "min", "extent", NULL};
  te_program_t *p = c->p;
  te_tensor_t *t = &p->tensors[c->stage];
  char name[TE_NAME];
  int v;
  KILN_RETURN_IF_ERROR(te_mp_check_keys(r, "a reduce axis", keys));
  if (!te_mp_str(te_mp_get(r, "name"), name, sizeof(name)) || !te_mp_get(r, "extent"))
    return KC_COMPILE_ERROR("te: compute %s: reduce axis %u needs name and extent", t->name, i);
  if (te_find_var(p, -1, name) >= 0)
    return KC_COMPILE_ERROR("te: compute %s: reduce axis '%s' has the name of a shape var", t->name, name);
  KILN_RETURN_IF_ERROR(te_new_var(p, c->stage, name, TE_V_REDUCE, &v));
  t->red[t->nred++] = v;
  p->vars[v].reduce = true;
  te_expr_t *mn = NULL, *ext = NULL;
  if (te_mp_get(r, "min")) KILN_RETURN_IF_ERROR(te_parse_index(c, te_mp_get(r, "min"), "a reduce min", &mn));
  else mn = te_int(p, 0, p->index_dtype);
  KILN_RETURN_IF_ERROR(te_parse_index(c, te_mp_get(r, "extent"), "a reduce extent", &ext));
  p->vars[v].min = te_simplify(p, mn);
  p->vars[v].extent = te_simplify(p, ext);
  return KILN_OK;
}

static kiln_status_t parse_reduce_axes(te_parse_ctx_t *c, const msgpack_object *red) {
  const te_tensor_t *t = &c->p->tensors[c->stage];
  if (!red) return KILN_OK;
  if (red->type != MSGPACK_OBJECT_ARRAY || red->via.array.size > TE_MAX_DIMS)
    return KC_COMPILE_ERROR("te: compute %s: reduce_axes must be an array of at most %d", t->name, TE_MAX_DIMS);
  c->in_shape = true;
  for (uint32_t i = 0; i < red->via.array.size; i++)
    KILN_RETURN_IF_ERROR(parse_reduce_axis(c, &red->via.array.ptr[i], i));
  c->in_shape = false;
  return KILN_OK;
}

static kiln_status_t parse_body(te_parse_ctx_t *c, const msgpack_object *body) {
  te_tensor_t *t = &c->p->tensors[c->stage];
  if (!body) return KC_COMPILE_ERROR("te: compute %s has no body", t->name);
  c->allow_reduce = true;
  c->depth = 0;
  KILN_RETURN_IF_ERROR(te_parse_expr(c, body, &t->body));
  if (t->nred && t->body->kind != TE_REDUCE)
    return KC_COMPILE_ERROR("te: compute %s declares reduce_axes but its body is not a reduce", t->name);
  te_expr_t *val = t->body->kind == TE_REDUCE ? t->body->args[0] : t->body;
  if (!te_settle(val, t->dtype))
    return KC_COMPILE_ERROR("te: the body of %s is %s but the tensor is %s: insert a cast", t->name,
                            te_dtype_name(val->dtype), te_dtype_name(t->dtype));
  t->body->dtype = t->dtype;
  if (t->body->kind == TE_REDUCE && t->dtype == TE_BOOL) return KC_COMPILE_ERROR("te: %s reduces bool values", t->name);
  return KILN_OK;
}

/* Name, op, dtype and shape. The tensor is counted before its shape is read: its own body's
 * var lookups see it (loads of itself are refused). */
static kiln_status_t parse_header(te_parse_ctx_t *c, const msgpack_object *o, te_tensor_t *t) {
  te_program_t *p = c->p;
  char op[16];
  if (!te_mp_str(te_mp_get(o, "name"), t->name, sizeof(t->name)) || !te_name_ok(t->name))
    return KC_COMPILE_ERROR("te: tensor %d has no valid name", c->stage);
  if (te_find_tensor(p, t->name) >= 0 || te_find_var(p, -1, t->name) >= 0)
    return KC_COMPILE_ERROR("te: the name '%s' is used twice", t->name);
  if (!te_mp_str(te_mp_get(o, "op"), op, sizeof(op)) || (strcmp(op, "placeholder") != 0 && strcmp(op, "compute") != 0))
    return KC_COMPILE_ERROR("te: tensor %s: op must be \"placeholder\" or \"compute\"", t->name);
  t->placeholder = op[0] == 'p';
  t->dtype = (uint8_t)te_parse_dtype(te_mp_get(o, "dtype"));
  if (!t->dtype) return KC_COMPILE_ERROR("te: tensor %s has no valid dtype", t->name);
  const msgpack_object *shape = te_mp_get(o, "shape");
  if (!shape || shape->type != MSGPACK_OBJECT_ARRAY || shape->via.array.size < 1 || shape->via.array.size > TE_MAX_DIMS)
    return KC_COMPILE_ERROR("te: tensor %s: shape must be an array of 1..%d expressions", t->name, TE_MAX_DIMS);
  t->ndim = (int)shape->via.array.size;
  p->ntensors++;
  c->in_shape = true;
  for (int d = 0; d < t->ndim; d++) {
    KILN_RETURN_IF_ERROR(te_parse_index(c, &shape->via.array.ptr[d], "a shape", &t->shape[d]));
    t->shape[d] = te_simplify(p, t->shape[d]);
  }
  c->in_shape = false;
  return KILN_OK;
}

static kiln_status_t parse_tensor(te_parse_ctx_t *c, const msgpack_object *o) {
  static const char *const keys[] = {"name", "op", "dtype", "shape", "axes", "reduce_axes", "body", NULL};
  te_program_t *p = c->p;
  te_tensor_t *t;
  KILN_RETURN_IF_ERROR(te_mp_check_keys(o, "a tensor", keys));
  KILN_RETURN_IF_ERROR(te_new_tensor(p, NULL, &t));
  c->stage = p->ntensors;
  KILN_RETURN_IF_ERROR(parse_header(c, o, t));
  if (t->placeholder) {
    if (te_mp_get(o, "axes") || te_mp_get(o, "body") || te_mp_get(o, "reduce_axes"))
      return KC_COMPILE_ERROR("te: placeholder %s has axes, reduce_axes or a body", t->name);
    return KILN_OK;
  }
  KILN_RETURN_IF_ERROR(parse_axes(p, c->stage, te_mp_get(o, "axes")));
  KILN_RETURN_IF_ERROR(parse_reduce_axes(c, te_mp_get(o, "reduce_axes")));
  for (int d = 0; d < t->ndim; d++) t->leaves[t->nleaves++] = t->axes[d];
  for (int r = 0; r < t->nred; r++) t->leaves[t->nleaves++] = t->red[r];
  return parse_body(c, te_mp_get(o, "body"));
}

static kiln_status_t parse_tensors(te_program_t *p, const msgpack_object *o) {
  if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0)
    return KC_COMPILE_ERROR("te: tensors must be a non-empty array");
  te_parse_ctx_t c = {.p = p, .tensors = o};
  for (uint32_t i = 0; i < o->via.array.size; i++) {
    c.allow_reduce = c.in_shape = false;
    c.depth = 0;
    KILN_RETURN_IF_ERROR(parse_tensor(&c, &o->via.array.ptr[i]));
  }
  p->nuser_tensors = p->ntensors;
  return KILN_OK;
}

/* ---- schedule and kernels ----------------------------------------------------------- */

static kiln_status_t parse_schedule(te_program_t *p, const msgpack_object *o) {
  if (o->type != MSGPACK_OBJECT_ARRAY) return KC_COMPILE_ERROR("te: schedule must be an array");
  te_prim_t *prim = te_alloc(p, sizeof(*prim));
  if (!prim) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < o->via.array.size; i++) {
    kiln_status_t st = te_parse_prim(&o->via.array.ptr[i], prim);
    if (!st) st = te_sched_apply(p, prim);
    if (st) return kiln_status_annotate(st, "schedule primitive %u", i);
  }
  return KILN_OK;
}

/* A kernel argument: a tensor (a stage the schedule made too: computed by its own kernel into
 * a buffer the client allocates) or a shape var, named once. */
static kiln_status_t parse_kernel_arg(te_program_t *p, te_kernel_t *k, const msgpack_object *o, uint32_t i) {
  char name[TE_NAME];
  if (!te_mp_str(o, name, sizeof(name))) return KC_COMPILE_ERROR("te: kernel %s: argument %u is not a name", k->name, i);
  int t = te_find_tensor(p, name), v = t < 0 ? te_find_var(p, -1, name) : -1;
  if (t < 0 && v < 0) return KC_COMPILE_ERROR("te: kernel %s: unknown argument '%s'", k->name, name);
  int arg = t >= 0 ? t : -v - 1;
  for (int j = 0; j < k->nargs; j++)
    if (k->args[j] == arg) return KC_COMPILE_ERROR("te: kernel %s names '%s' twice", k->name, name);
  k->args[k->nargs++] = arg;
  if (t >= 0 && !p->tensors[t].placeholder) k->root = t;
  return KILN_OK;
}

static kiln_status_t parse_kernel_root(te_program_t *p, te_kernel_t *k, const msgpack_object *o) {
  char root[TE_NAME];
  if (!o) return KILN_OK;
  if (!te_mp_str(o, root, sizeof(root))) return KC_COMPILE_ERROR("te: kernel %s: compute must be a tensor name", k->name);
  int t = te_find_tensor(p, root);
  bool in_args = false;
  for (int j = 0; j < k->nargs; j++) in_args |= k->args[j] == t;
  if (t < 0 || p->tensors[t].placeholder || !in_args)
    return KC_COMPILE_ERROR("te: kernel %s: compute '%s' must be a compute tensor among its args", k->name, root);
  k->root = t;
  return KILN_OK;
}

static kiln_status_t parse_kernel(te_program_t *p, const msgpack_object *o, te_kernel_t *k) {
  static const char *const keys[] = {"name", "args", "compute", NULL};
  KILN_RETURN_IF_ERROR(te_mp_check_keys(o, "a kernel", keys));
  if (!te_mp_str(te_mp_get(o, "name"), k->name, sizeof(k->name)) || !te_name_ok(k->name))
    return KC_COMPILE_ERROR("te: a kernel has no valid name");
  const msgpack_object *args = te_mp_get(o, "args");
  if (!args || args->type != MSGPACK_OBJECT_ARRAY || args->via.array.size == 0 ||
      args->via.array.size + (uint32_t)p->nshape > KC_MAX_PARAMS)
    return KC_COMPILE_ERROR("te: kernel %s: args must name 1..%d tensors and vars", k->name, KC_MAX_PARAMS);
  k->root = -1;
  for (uint32_t i = 0; i < args->via.array.size; i++)
    KILN_RETURN_IF_ERROR(parse_kernel_arg(p, k, &args->via.array.ptr[i], i));
  KILN_RETURN_IF_ERROR(parse_kernel_root(p, k, te_mp_get(o, "compute")));
  if (k->root < 0) return KC_COMPILE_ERROR("te: kernel %s has no compute tensor among its args", k->name);
  /* Shape vars not named in args follow, in program order. */
  for (int i = 0; i < p->nshape; i++) {
    bool named = false;
    for (int j = 0; j < k->nargs; j++) named |= k->args[j] == -p->shape_vars[i] - 1;
    if (!named) k->args[k->nargs++] = -p->shape_vars[i] - 1;
  }
  return KILN_OK;
}

static kiln_status_t parse_kernels(te_program_t *p, const msgpack_object *o) {
  if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0 || o->via.array.size > TE_MAX_KERNELS)
    return KC_COMPILE_ERROR("te: kernels must be an array of 1..%d", TE_MAX_KERNELS);
  for (uint32_t i = 0; i < o->via.array.size; i++) {
    p->nkernels = (int)i + 1;
    KILN_RETURN_IF_ERROR(parse_kernel(p, &o->via.array.ptr[i], &p->kernels[i]));
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(p->kernels[j].name, p->kernels[i].name) == 0)
        return KC_COMPILE_ERROR("te: two kernels are named %s", p->kernels[i].name);
  }
  return KILN_OK;
}

/* ---- the program -------------------------------------------------------------------- */

static void *arena_alloc(void *ud, size_t n) { return te_alloc(ud, n); }

static kiln_status_t parse_header_fields(te_program_t *p, const msgpack_object *root) {
  static const char *const keys[] = {"te", "index_dtype", "vars", "tensors", "schedule", "kernels", NULL};
  KILN_RETURN_IF_ERROR(te_mp_check_keys(root, "the program", keys));
  const msgpack_object *o = te_mp_get(root, "te");
  if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 != 1)
    return KC_COMPILE_ERROR("te: the program needs \"te\": 1 (this kiln reads version 1)");
  if ((o = te_mp_get(root, "index_dtype"))) {
    int dt = te_parse_dtype(o);
    if (dt != TE_I32 && dt != TE_I64) return KC_COMPILE_ERROR("te: index_dtype must be \"int32\" or \"int64\"");
    p->index_dtype = (uint8_t)dt;
  }
  return KILN_OK;
}

kiln_status_t te_parse(const uint8_t *bytes, size_t len, te_program_t *p) {
  msgpack_object top;
  const msgpack_object *o;
  KILN_RETURN_IF_ERROR(te_mp_decode(bytes, len, arena_alloc, p, &top));
  KILN_RETURN_IF_ERROR(parse_header_fields(p, &top));
  if ((o = te_mp_get(&top, "vars"))) KILN_RETURN_IF_ERROR(parse_vars(p, o));
  KILN_RETURN_IF_ERROR(parse_tensors(p, te_mp_get(&top, "tensors")));
  if ((o = te_mp_get(&top, "schedule"))) KILN_RETURN_IF_ERROR(parse_schedule(p, o));
  return parse_kernels(p, te_mp_get(&top, "kernels"));
}
