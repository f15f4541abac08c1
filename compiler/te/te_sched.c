/* Schedule primitives (docs/te.md §5), inlining, and per-kernel bound inference: extents of
 * every leaf, regions of attached stages, guards, launch dimensions. */
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/te/te.h"
#include "compiler/te/te_mp.h"

/* ---- helpers ------------------------------------------------------------------------ */

static kiln_status_t get_stage(kc_te_program_t *p, const msgpack_object *o, const char *key, int *out) {
  char name[TE_NAME];
  if (!te_mp_str(te_mp_get(o, key), name, sizeof(name)))
    return KC_COMPILE_ERROR("te: a schedule primitive lacks '%s'", key);
  int t = te_find_tensor(p, name);
  if (t < 0) return KC_COMPILE_ERROR("te: the schedule names unknown stage '%s'", name);
  if (p->tensors[t].placeholder)
    return KC_COMPILE_ERROR("te: the schedule names %s, a placeholder: only compute stages are scheduled", name);
  *out = t;
  return KILN_OK;
}

static int leaf_pos(const te_tensor_t *t, int v) {
  for (int i = 0; i < t->nleaves; i++)
    if (t->leaves[i] == v) return i;
  return -1;
}

/* A var of the stage that is still a leaf. */
static kiln_status_t get_leaf(kc_te_program_t *p, int stage, const msgpack_object *o, const char *key, int *out) {
  char name[TE_NAME];
  const char *sn = p->tensors[stage].name;
  if (!te_mp_str(te_mp_get(o, key), name, sizeof(name)))
    return KC_COMPILE_ERROR("te: a schedule primitive on %s lacks '%s'", sn, key);
  int v = te_find_var(p, stage, name);
  if (v < 0 || p->vars[v].stage != stage)
    return KC_COMPILE_ERROR("te: stage %s has no var '%s'", sn, name);
  if (leaf_pos(&p->tensors[stage], v) < 0)
    return KC_COMPILE_ERROR("te: var '%s' of %s was already split or fused: name its results instead", name, sn);
  *out = v;
  return KILN_OK;
}

static void name_or(const msgpack_object *o, const char *key, char *dst, size_t cap, const char *a,
                    const char *suffix) {
  if (!te_mp_str(te_mp_get(o, key), dst, cap)) snprintf(dst, cap, "%.50s%s", a, suffix);
}

static kiln_status_t add_rel(te_tensor_t *t, te_rel_t r) {
  if (t->nrels >= TE_MAX_RELS) return KC_COMPILE_ERROR("te: too many splits and fuses on %s", t->name);
  t->rels[t->nrels++] = r;
  return KILN_OK;
}

static kiln_status_t do_split(kc_te_program_t *p, int st, int v, int64_t factor, bool nparts, const char *on,
                              const char *in, int *out_o, int *out_i) {
  te_tensor_t *t = &p->tensors[st];
  if (factor < 1 || factor > (1 << 30))
    return KC_COMPILE_ERROR("te: split of %s.%s needs a factor or nparts of at least 1", t->name, p->vars[v].name);
  if (p->vars[v].bind != TE_BIND_NONE || p->vars[v].ann)
    return KC_COMPILE_ERROR("te: %s.%s is bound or annotated; split it before", t->name, p->vars[v].name);
  int o, i;
  KILN_RETURN_IF_ERROR(te_new_var(p, st, on, TE_V_OUTER, &o));
  KILN_RETURN_IF_ERROR(te_new_var(p, st, in, TE_V_INNER, &i));
  if (t->nleaves + 1 > TE_MAX_LEAVES) return KC_COMPILE_ERROR("te: too many vars in %s", t->name);
  p->vars[o].reduce = p->vars[i].reduce = p->vars[v].reduce;
  int pos = leaf_pos(t, v);
  if (pos < 0) /* callers pass leaves; a program that gets here anyway is refused, not followed */
    return KC_COMPILE_ERROR("te: %s.%s is no longer a loop of %s (already split or fused)", t->name,
                            p->vars[v].name, t->name);
  memmove(&t->leaves[pos + 2], &t->leaves[pos + 1], (size_t)(t->nleaves - pos - 1) * sizeof(int));
  t->leaves[pos] = o;
  t->leaves[pos + 1] = i;
  t->nleaves++;
  KILN_RETURN_IF_ERROR(add_rel(t, (te_rel_t){.kind = 0, .a = v, .b = o, .c = i, .factor = factor, .nparts = nparts}));
  if (out_o) *out_o = o;
  if (out_i) *out_i = i;
  return KILN_OK;
}

static kiln_status_t do_reorder(kc_te_program_t *p, int st, const int *vars, int n) {
  te_tensor_t *t = &p->tensors[st];
  int pos[TE_MAX_LEAVES];
  for (int i = 0; i < n; i++) {
    pos[i] = leaf_pos(t, vars[i]);
    if (pos[i] < 0)
      return KC_COMPILE_ERROR("te: reorder of %s names %s, which is no longer one of its loops", t->name,
                              p->vars[vars[i]].name);
    for (int j = 0; j < i; j++)
      if (vars[j] == vars[i]) return KC_COMPILE_ERROR("te: reorder of %s names %s twice", t->name, p->vars[vars[i]].name);
  }
  for (int i = 1; i < n; i++) /* sort positions */
    for (int j = i; j > 0 && pos[j - 1] > pos[j]; j--) {
      int x = pos[j];
      pos[j] = pos[j - 1];
      pos[j - 1] = x;
    }
  for (int i = 0; i < n; i++) t->leaves[pos[i]] = vars[i];
  return KILN_OK;
}

static int thread_parse(const char *s) {
  static const char *const names[] = {"blockIdx.x", "blockIdx.y", "blockIdx.z",
                                      "threadIdx.x", "threadIdx.y", "threadIdx.z"};
  for (int i = 0; i < 6; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

static const char *const thread_names[] = {"blockIdx.x", "blockIdx.y", "blockIdx.z",
                                           "threadIdx.x", "threadIdx.y", "threadIdx.z"};

/* Replaces loads of tensor `from` with loads of `to` in e (in place: bodies are private). */
static void retarget_loads(te_expr_t *e, int from, int to) {
  if (!e) return;
  if (e->kind == TE_LOAD && e->ref == from) e->ref = to;
  for (int i = 0; i < e->nargs; i++) retarget_loads(e->args[i], from, to);
}

static kiln_status_t new_stage(kc_te_program_t *p, const msgpack_object *o, int like, int *out) {
  char name[TE_NAME];
  if (!te_mp_str(te_mp_get(o, "name"), name, sizeof(name)))
    return KC_COMPILE_ERROR("te: cache_read/cache_write needs the new stage's 'name'");
  if (te_find_tensor(p, name) >= 0 || te_find_var(p, -1, name) >= 0)
    return KC_COMPILE_ERROR("te: the name '%s' is already used", name);
  if (p->ntensors >= TE_MAX_TENSORS) return KC_COMPILE_ERROR("te: more than %d tensors", TE_MAX_TENSORS);
  te_tensor_t *n = &p->tensors[p->ntensors];
  const te_tensor_t *src = &p->tensors[like];
  memset(n, 0, sizeof(*n));
  snprintf(n->name, sizeof(n->name), "%s", name);
  n->dtype = src->dtype;
  n->ndim = src->ndim;
  memcpy(n->shape, src->shape, sizeof(n->shape));
  n->attach_stage = n->attach_var = -1;
  n->kernel_arg = -1;
  char sc[16];
  if (!te_mp_str(te_mp_get(o, "scope"), sc, sizeof(sc)) ||
      (strcmp(sc, "shared") && strcmp(sc, "local") && strcmp(sc, "global")))
    return KC_COMPILE_ERROR("te: cache stage %s needs scope \"shared\", \"local\" or \"global\"", name);
  /* "global" (TVM's CPU spelling) is storage the stage's attach point decides (§5). */
  n->scope = sc[0] == 's' ? TE_SCOPE_SHARED : sc[0] == 'l' ? TE_SCOPE_LOCAL : TE_SCOPE_GLOBAL;
  *out = p->ntensors++;
  return KILN_OK;
}

static kiln_status_t cache_read(kc_te_program_t *p, const msgpack_object *o) {
  static const char *const keys[] = {"op", "tensor", "scope", "readers", "name", NULL};
  KILN_RETURN_IF_ERROR(te_mp_check_keys(o, "cache_read", keys));
  char tn[TE_NAME];
  int src = te_mp_str(te_mp_get(o, "tensor"), tn, sizeof(tn)) ? te_find_tensor(p, tn) : -1;
  if (src < 0) return KC_COMPILE_ERROR("te: cache_read of an unknown tensor");
  const msgpack_object *readers = te_mp_get(o, "readers");
  if (!readers || readers->type != MSGPACK_OBJECT_ARRAY || readers->via.array.size == 0)
    return KC_COMPILE_ERROR("te: cache_read of %s needs readers (an array of stages)", tn);
  int id;
  KILN_RETURN_IF_ERROR(new_stage(p, o, src, &id));
  te_tensor_t *n = &p->tensors[id];
  te_expr_t *ld = te_node(p, TE_LOAD, 0, n->dtype, n->ndim);
  if (!ld) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  ld->ref = src;
  for (int d = 0; d < n->ndim; d++) {
    char an[16];
    snprintf(an, sizeof(an), "ax%d", d);
    KILN_RETURN_IF_ERROR(te_new_var(p, id, an, TE_V_AXIS, &n->axes[d]));
    n->leaves[n->nleaves++] = n->axes[d];
    ld->args[d] = te_varref(p, n->axes[d]);
  }
  n->body = ld;
  for (uint32_t i = 0; i < readers->via.array.size; i++) {
    char rn[TE_NAME];
    int r = te_mp_str(&readers->via.array.ptr[i], rn, sizeof(rn)) ? te_find_tensor(p, rn) : -1;
    if (r < 0 || p->tensors[r].placeholder || r == id)
      return KC_COMPILE_ERROR("te: cache_read of %s: reader %u is not a compute stage", tn, i);
    retarget_loads(p->tensors[r].body, src, id);
  }
  return KILN_OK;
}

static kiln_status_t cache_write(kc_te_program_t *p, const msgpack_object *o) {
  static const char *const keys[] = {"op", "tensor", "scope", "name", NULL};
  KILN_RETURN_IF_ERROR(te_mp_check_keys(o, "cache_write", keys));
  int src;
  KILN_RETURN_IF_ERROR(get_stage(p, o, "tensor", &src));
  if (p->tensors[src].scheduled || p->tensors[src].attach_stage >= 0 || p->tensors[src].inlined)
    return KC_COMPILE_ERROR("te: cache_write of %s must come before any other primitive on it",
                            p->tensors[src].name);
  int id;
  KILN_RETURN_IF_ERROR(new_stage(p, o, src, &id));
  te_tensor_t *n = &p->tensors[id], *t = &p->tensors[src];
  /* The new stage takes the body, axes and reduce axes; the tensor gets fresh axes. */
  n->body = t->body;
  memcpy(n->axes, t->axes, sizeof(n->axes));
  memcpy(n->red, t->red, sizeof(n->red));
  n->nred = t->nred;
  n->nleaves = t->nleaves;
  memcpy(n->leaves, t->leaves, sizeof(n->leaves));
  for (int i = 0; i < n->nleaves; i++) p->vars[n->leaves[i]].stage = id;
  te_expr_t *ld = te_node(p, TE_LOAD, 0, t->dtype, t->ndim);
  if (!ld) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  ld->ref = id;
  t->nred = 0;
  t->nleaves = 0;
  for (int d = 0; d < t->ndim; d++) {
    KILN_RETURN_IF_ERROR(te_new_var(p, src, p->vars[n->axes[d]].name, TE_V_AXIS, &t->axes[d]));
    p->vars[t->axes[d]].min = p->vars[n->axes[d]].min;
    p->vars[t->axes[d]].extent = p->vars[n->axes[d]].extent;
    t->leaves[t->nleaves++] = t->axes[d];
    ld->args[d] = te_varref(p, t->axes[d]);
  }
  t->body = ld;
  return KILN_OK;
}

static kiln_status_t apply_one(kc_te_program_t *p, const msgpack_object *o) {
  char op[24];
  if (!te_mp_str(te_mp_get(o, "op"), op, sizeof(op))) return KC_COMPILE_ERROR("te: a schedule primitive has no 'op'");
  if (strcmp(op, "cache_read") == 0) return cache_read(p, o);
  if (strcmp(op, "cache_write") == 0) return cache_write(p, o);
  int st;
  KILN_RETURN_IF_ERROR(get_stage(p, o, "stage", &st));
  te_tensor_t *t = &p->tensors[st];
  t->scheduled = true;
  char a[TE_NAME], b[TE_NAME];
  if (strcmp(op, "split") == 0) {
    static const char *const keys[] = {"op", "stage", "var", "factor", "nparts", "outer", "inner", NULL};
    KILN_RETURN_IF_ERROR(te_mp_check_keys(o, "split", keys));
    int v;
    KILN_RETURN_IF_ERROR(get_leaf(p, st, o, "var", &v));
    int64_t f = 0;
    bool np = te_mp_get(o, "nparts") != NULL;
    if (np == (te_mp_get(o, "factor") != NULL) || !te_mp_int(te_mp_get(o, np ? "nparts" : "factor"), &f))
      return KC_COMPILE_ERROR("te: split of %s.%s needs exactly one integer factor or nparts", t->name, p->vars[v].name);
    name_or(o, "outer", a, sizeof(a), p->vars[v].name, ".outer");
    name_or(o, "inner", b, sizeof(b), p->vars[v].name, ".inner");
    return do_split(p, st, v, f, np, a, b, NULL, NULL);
  }
  if (strcmp(op, "tile") == 0) {
    static const char *const keys[] = {"op", "stage", "x", "y", "x_factor", "y_factor", "x_outer", "y_outer",
                                       "x_inner", "y_inner", NULL};
    KILN_RETURN_IF_ERROR(te_mp_check_keys(o, "tile", keys));
    int x, y, xo, xi, yo, yi;
    int64_t fx, fy;
    KILN_RETURN_IF_ERROR(get_leaf(p, st, o, "x", &x));
    KILN_RETURN_IF_ERROR(get_leaf(p, st, o, "y", &y));
    if (x == y)
      return KC_COMPILE_ERROR("te: tile of %s names %s as both x and y", t->name, p->vars[x].name);
    if (!te_mp_int(te_mp_get(o, "x_factor"), &fx) || !te_mp_int(te_mp_get(o, "y_factor"), &fy))
      return KC_COMPILE_ERROR("te: tile of %s needs integer x_factor and y_factor", t->name);
    name_or(o, "x_outer", a, sizeof(a), p->vars[x].name, ".outer");
    name_or(o, "x_inner", b, sizeof(b), p->vars[x].name, ".inner");
    KILN_RETURN_IF_ERROR(do_split(p, st, x, fx, false, a, b, &xo, &xi));
    name_or(o, "y_outer", a, sizeof(a), p->vars[y].name, ".outer");
    name_or(o, "y_inner", b, sizeof(b), p->vars[y].name, ".inner");
    KILN_RETURN_IF_ERROR(do_split(p, st, y, fy, false, a, b, &yo, &yi));
    int order[4] = {xo, yo, xi, yi};
    return do_reorder(p, st, order, 4);
  }
  if (strcmp(op, "fuse") == 0) {
    static const char *const keys[] = {"op", "stage", "vars", "fused", NULL};
    KILN_RETURN_IF_ERROR(te_mp_check_keys(o, "fuse", keys));
    const msgpack_object *vs = te_mp_get(o, "vars");
    if (!vs || vs->type != MSGPACK_OBJECT_ARRAY || vs->via.array.size < 2 || vs->via.array.size > 16)
      return KC_COMPILE_ERROR("te: fuse on %s needs 2..16 vars", t->name);
    int vars[16];
    for (uint32_t i = 0; i < vs->via.array.size; i++) {
      msgpack_object key = {.type = MSGPACK_OBJECT_MAP};
      msgpack_object_kv kv = {.key = {.type = MSGPACK_OBJECT_STR, .via.str = {.size = 1, .ptr = "v"}},
                              .val = vs->via.array.ptr[i]};
      key.via.map.size = 1;
      key.via.map.ptr = &kv;
      KILN_RETURN_IF_ERROR(get_leaf(p, st, &key, "v", &vars[i]));
      if (p->vars[vars[i]].bind != TE_BIND_NONE)
        return KC_COMPILE_ERROR("te: fuse of %s.%s, which is bound", t->name, p->vars[vars[i]].name);
      if (i && leaf_pos(t, vars[i]) != leaf_pos(t, vars[i - 1]) + 1)
        return KC_COMPILE_ERROR("te: fuse on %s: %s and %s are not consecutive leaves (reorder first)", t->name,
                                p->vars[vars[i - 1]].name, p->vars[vars[i]].name);
      if (i && p->vars[vars[i]].reduce != p->vars[vars[0]].reduce)
        return KC_COMPILE_ERROR("te: fuse on %s mixes reduce and data vars", t->name);
    }
    int acc = vars[0];
    for (uint32_t i = 1; i < vs->via.array.size; i++) {
      char fn[TE_NAME];
      snprintf(fn, sizeof(fn), "%.30s.%.20s.fused", p->vars[acc].name, p->vars[vars[i]].name);
      if (i + 1 == vs->via.array.size) name_or(o, "fused", fn, sizeof(fn), fn, "");
      int f;
      KILN_RETURN_IF_ERROR(te_new_var(p, st, fn, TE_V_FUSED, &f));
      p->vars[f].reduce = p->vars[acc].reduce;
      int pos = leaf_pos(t, acc);
      t->leaves[pos] = f;
      memmove(&t->leaves[pos + 1], &t->leaves[pos + 2], (size_t)(t->nleaves - pos - 2) * sizeof(int));
      t->nleaves--;
      KILN_RETURN_IF_ERROR(add_rel(t, (te_rel_t){.kind = 1, .a = acc, .b = vars[i], .c = f}));
      acc = f;
    }
    return KILN_OK;
  }
  if (strcmp(op, "reorder") == 0) {
    static const char *const keys[] = {"op", "stage", "vars", NULL};
    KILN_RETURN_IF_ERROR(te_mp_check_keys(o, "reorder", keys));
    const msgpack_object *vs = te_mp_get(o, "vars");
    if (!vs || vs->type != MSGPACK_OBJECT_ARRAY || vs->via.array.size < 1 || vs->via.array.size > TE_MAX_LEAVES)
      return KC_COMPILE_ERROR("te: reorder on %s needs vars", t->name);
    int vars[TE_MAX_LEAVES];
    for (uint32_t i = 0; i < vs->via.array.size; i++) {
      msgpack_object_kv kv = {.key = {.type = MSGPACK_OBJECT_STR, .via.str = {.size = 1, .ptr = "v"}},
                              .val = vs->via.array.ptr[i]};
      msgpack_object key = {.type = MSGPACK_OBJECT_MAP, .via.map = {.size = 1, .ptr = &kv}};
      KILN_RETURN_IF_ERROR(get_leaf(p, st, &key, "v", &vars[i]));
    }
    return do_reorder(p, st, vars, (int)vs->via.array.size);
  }
  if (strcmp(op, "bind") == 0) {
    static const char *const keys[] = {"op", "stage", "var", "thread", NULL};
    KILN_RETURN_IF_ERROR(te_mp_check_keys(o, "bind", keys));
    int v;
    KILN_RETURN_IF_ERROR(get_leaf(p, st, o, "var", &v));
    char th[16];
    int d = te_mp_str(te_mp_get(o, "thread"), th, sizeof(th)) ? thread_parse(th) : -1;
    if (d < 0)
      return KC_COMPILE_ERROR("te: bind of %s.%s: thread must be blockIdx.x/y/z or threadIdx.x/y/z", t->name,
                              p->vars[v].name);
    if (p->vars[v].reduce)
      return KC_COMPILE_ERROR("te: bind of %s.%s, a reduce axis: only data axes can be bound", t->name, p->vars[v].name);
    if (p->vars[v].bind != TE_BIND_NONE)
      return KC_COMPILE_ERROR("te: %s.%s is already bound", t->name, p->vars[v].name);
    for (int i = 0; i < t->nleaves; i++)
      if (p->vars[t->leaves[i]].bind == d)
        return KC_COMPILE_ERROR("te: %s binds %s twice", t->name, th);
    p->vars[v].bind = d;
    return KILN_OK;
  }
  if (strcmp(op, "unroll") == 0 || strcmp(op, "vectorize") == 0 || strcmp(op, "parallel") == 0) {
    static const char *const keys[] = {"op", "stage", "var", NULL};
    KILN_RETURN_IF_ERROR(te_mp_check_keys(o, op, keys));
    int v;
    KILN_RETURN_IF_ERROR(get_leaf(p, st, o, "var", &v));
    if (op[0] == 'p' && p->vars[v].reduce)
      return KC_COMPILE_ERROR("te: parallel on %s.%s, a reduce axis", t->name, p->vars[v].name);
    p->vars[v].ann = op[0] == 'u' ? TE_ANN_UNROLL : op[0] == 'v' ? TE_ANN_VECTORIZE : TE_ANN_PARALLEL;
    return KILN_OK;
  }
  if (strcmp(op, "compute_at") == 0) {
    static const char *const keys[] = {"op", "stage", "parent", "var", NULL};
    KILN_RETURN_IF_ERROR(te_mp_check_keys(o, "compute_at", keys));
    int par;
    KILN_RETURN_IF_ERROR(get_stage(p, o, "parent", &par));
    if (par == st) return KC_COMPILE_ERROR("te: compute_at of %s into itself", t->name);
    for (int s = par; s >= 0; s = p->tensors[s].attach_stage)
      if (s == st) return KC_COMPILE_ERROR("te: compute_at of %s into %s makes a cycle", t->name, p->tensors[par].name);
    char vn[TE_NAME];
    int v = te_mp_str(te_mp_get(o, "var"), vn, sizeof(vn)) ? te_find_var(p, par, vn) : -1;
    if (v < 0 || p->vars[v].stage != par)
      return KC_COMPILE_ERROR("te: compute_at of %s: %s has no var '%s'", t->name, p->tensors[par].name, vn);
    if (t->inlined) return KC_COMPILE_ERROR("te: compute_at of %s, which is inlined", t->name);
    t->attach_stage = par;
    t->attach_var = v;
    return KILN_OK;
  }
  if (strcmp(op, "compute_inline") == 0) {
    static const char *const keys[] = {"op", "stage", NULL};
    KILN_RETURN_IF_ERROR(te_mp_check_keys(o, "compute_inline", keys));
    if (t->nred) return KC_COMPILE_ERROR("te: compute_inline of %s, a reduction", t->name);
    if (t->attach_stage >= 0) return KC_COMPILE_ERROR("te: compute_inline of %s, which is attached", t->name);
    t->inlined = true;
    return KILN_OK;
  }
  return KC_COMPILE_ERROR("te: unknown schedule primitive '%s'", op);
}

kiln_status_t te_apply_schedule(kc_te_program_t *p, const void *schedule_obj) {
  const msgpack_object *s = schedule_obj;
  if (s->type != MSGPACK_OBJECT_ARRAY) return KC_COMPILE_ERROR("te: schedule must be an array");
  for (uint32_t i = 0; i < s->via.array.size; i++) {
    kiln_status_t st = apply_one(p, &s->via.array.ptr[i]);
    if (st) return kiln_status_annotate(st, "schedule primitive %u", i);
  }
  return KILN_OK;
}

/* ---- inlining ------------------------------------------------------------------------ */

static te_expr_t *inline_expr(kc_te_program_t *p, te_expr_t *e, int depth) {
  if (!e || depth > TE_MAX_TENSORS) return e;
  te_expr_t *n = e;
  if (e->nargs) {
    n = te_node(p, e->kind, e->op, e->dtype, e->nargs);
    if (!n) return e;
    n->ref = e->ref;
    n->i = e->i;
    n->f = e->f;
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

kiln_status_t te_inline_all(kc_te_program_t *p) {
  for (int i = 0; i < p->ntensors; i++) {
    te_tensor_t *t = &p->tensors[i];
    if (!t->placeholder && !t->inlined) t->body = inline_expr(p, t->body, 0);
  }
  return KILN_OK;
}

/* ---- bound inference ----------------------------------------------------------------- */

static te_expr_t *simp(kc_te_program_t *p, te_expr_t *e) { return te_simplify(p, e); }

static void set_cext(te_var_t *v) {
  int64_t c;
  v->cext = te_const(v->extent, &c) ? c : -1;
}

static te_expr_t *ceildiv(kc_te_program_t *p, te_expr_t *a, int64_t f) {
  int dt = a->dtype;
  return simp(p, te_bin(p, TE_FLOORDIV, te_bin(p, TE_ADD, a, te_int(p, f - 1, dt)), te_int(p, f, dt)));
}

/* Leaf extents from root extents; relative values of every var; guards. */
static kiln_status_t add_guard(kc_te_program_t *p, te_tensor_t *t, te_expr_t *g, bool red) {
  int64_t k;
  g = te_simplify(p, g);
  if (te_const(g, &k) && k) return KILN_OK;
  if (t->nguards == 32) return KC_COMPILE_ERROR("te: %s needs more than 32 guards", t->name);
  t->guard_red[t->nguards] = red;
  t->guards[t->nguards++] = g;
  return KILN_OK;
}

static bool reads_argument(const kc_te_program_t *p, const te_expr_t *e) {
  if (!e) return false;
  if (e->kind == TE_LOAD && p->tensors[e->ref].kernel_arg >= 0) return true;
  for (int i = 0; i < e->nargs; i++)
    if (reads_argument(p, e->args[i])) return true;
  return false;
}

static kiln_status_t derive(kc_te_program_t *p, int st) {
  te_tensor_t *t = &p->tensors[st];
  int dt = p->index_dtype;
  for (int r = 0; r < t->nrels; r++) {
    te_rel_t *rel = &t->rels[r];
    te_var_t *a = &p->vars[rel->a], *b = &p->vars[rel->b], *c = &p->vars[rel->c];
    if (rel->kind == 0) {
      if (rel->nparts) {
        b->extent = te_int(p, rel->factor, dt);
        c->extent = ceildiv(p, a->extent, rel->factor);
      } else {
        c->extent = te_int(p, rel->factor, dt);
        b->extent = ceildiv(p, a->extent, rel->factor);
      }
    } else {
      c->extent = simp(p, te_bin(p, TE_MUL, a->extent, b->extent));
    }
    set_cext(b);
    set_cext(c);
    if (rel->kind == 1) set_cext(a);
  }
  /* Values, innermost relation first. */
  te_expr_t **val = calloc((size_t)p->nvars, sizeof(*val));
  if (!val) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (int i = 0; i < t->nleaves; i++) val[t->leaves[i]] = te_varref(p, t->leaves[i]);
  kiln_status_t s = KILN_OK;
  t->nguards = 0;
  for (int r = t->nrels - 1; r >= 0 && !s; r--) {
    te_rel_t *rel = &t->rels[r];
    if (rel->kind == 0) {
      te_expr_t *inner_ext = p->vars[rel->c].extent;
      val[rel->a] = simp(p, te_bin(p, TE_ADD, te_bin(p, TE_MUL, val[rel->b], inner_ext), val[rel->c]));
      /* The split covers outer*inner >= extent: guard unless that is exact. */
      te_expr_t *cover = simp(p, te_bin(p, TE_SUB, te_bin(p, TE_MUL, p->vars[rel->b].extent, inner_ext),
                                        p->vars[rel->a].extent));
      int64_t z;
      if (!(te_const(cover, &z) && z == 0))
        s = add_guard(p, t, te_bin(p, TE_LT, val[rel->a], p->vars[rel->a].extent), p->vars[rel->a].reduce);
    } else {
      te_expr_t *ie = p->vars[rel->b].extent;
      val[rel->a] = simp(p, te_bin(p, TE_FLOORDIV, val[rel->c], ie));
      val[rel->b] = simp(p, te_bin(p, TE_FLOORMOD, val[rel->c], ie));
    }
  }
  for (int d = 0; d < t->ndim; d++) {
    int v = t->axes[d];
    te_expr_t *rel_v = val[v] ? val[v] : te_varref(p, v);
    t->val[d] = simp(p, te_bin(p, TE_ADD, t->rmin[d], rel_v));
    if (t->attach_stage >= 0 && reads_argument(p, t->body)) {
      /* An attached region may run past the tensor (partial tiles): the reads of argument
       * tensors there must not happen. A stage that reads only other attached stages reads
       * inside their regions (which cover all of its own region) and writes its own
       * storage, so the elements past the tensor are computed and never used. */
      if (!s) s = add_guard(p, t, te_bin(p, TE_GE, t->val[d], te_int(p, 0, dt)), false);
      if (!s) s = add_guard(p, t, te_bin(p, TE_LT, t->val[d], t->shape[d]), false);
    }
  }
  for (int r = 0; r < t->nred; r++) {
    int v = t->red[r];
    te_expr_t *rel_v = val[v] ? val[v] : te_varref(p, v);
    t->val[t->ndim + r] = simp(p, te_bin(p, TE_ADD, p->vars[v].min, rel_v));
  }
  free(val);
  return s;
}

void te_stage_subst(kc_te_program_t *p, int st, te_expr_t **subst) {
  te_tensor_t *t = &p->tensors[st];
  for (int d = 0; d < t->ndim; d++) subst[t->axes[d]] = t->val[d];
  for (int r = 0; r < t->nred; r++) subst[t->red[r]] = t->val[t->ndim + r];
}

static void collect_loads(te_expr_t *e, int tensor, te_expr_t **out, int *n, int cap) {
  if (!e) return;
  if (e->kind == TE_LOAD && e->ref == tensor && *n < cap) out[(*n)++] = e;
  for (int i = 0; i < e->nargs; i++) collect_loads(e->args[i], tensor, out, n, cap);
}

static bool reads(const te_expr_t *e, int tensor) {
  if (!e) return false;
  if (e->kind == TE_LOAD && e->ref == tensor) return true;
  for (int i = 0; i < e->nargs; i++)
    if (reads(e->args[i], tensor)) return true;
  return false;
}

static bool binds_threads(const kc_te_program_t *p, const te_tensor_t *t) {
  for (int i = 0; i < t->nleaves; i++)
    if (p->vars[t->leaves[i]].bind >= 3) return true;
  return false;
}

/* The region of `st` that its parent reads in one iteration of the attach var. */
static kiln_status_t infer_region(kc_te_program_t *p, int st) {
  te_tensor_t *t = &p->tensors[st], *c = &p->tensors[t->attach_stage];
  /* A var split or fused after compute_at: one iteration of it is one iteration of its inner
   * part, or of the fused var (TVM moves the attachment the same way). */
  for (int r = 0; r < c->nrels; r++) {
    const te_rel_t *rel = &c->rels[r];
    if (rel->kind == 0 && rel->a == t->attach_var) t->attach_var = rel->c;
    else if (rel->kind == 1 && (rel->a == t->attach_var || rel->b == t->attach_var)) t->attach_var = rel->c;
  }
  int apos = leaf_pos(c, t->attach_var);
  if (apos < 0)
    return KC_COMPILE_ERROR("te: %s is computed at %s.%s, which is not a leaf var of %s (it was split or fused)",
                            t->name, c->name, p->vars[t->attach_var].name, c->name);
  bool *relax = calloc((size_t)p->nvars, sizeof(bool));
  te_expr_t **sub = calloc((size_t)p->nvars, sizeof(*sub));
  te_expr_t *loads[64];
  int nl = 0;
  kiln_status_t s = KILN_OK;
  if (!relax || !sub) {
    s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    goto out;
  }
  for (int i = apos + 1; i < c->nleaves; i++) relax[c->leaves[i]] = true;
  if (t->eff_scope == TE_SCOPE_SHARED)
    for (int v = 0; v < p->nvars; v++)
      if (p->vars[v].bind >= 3 && p->vars[v].stage >= 0 && p->tensors[p->vars[v].stage].in_kernel &&
          p->vars[v].leaf)
        relax[v] = true;
  te_stage_subst(p, t->attach_stage, sub);
  collect_loads(c->body, st, loads, &nl, 64);
  if (!nl) {
    s = KC_COMPILE_ERROR("te: %s is computed at %s, which does not read it", t->name, c->name);
    goto out;
  }
  for (int d = 0; d < t->ndim && !s; d++) {
    te_expr_t *lo = NULL, *hi = NULL;
    for (int k = 0; k < nl; k++) {
      te_expr_t *ix = simp(p, te_subst(p, loads[k]->args[d], sub)), *l, *h;
      if (!te_sym_bounds(p, ix, relax, &l, &h)) {
        s = KC_COMPILE_ERROR("te: cannot bound the region of %s read by %s (dimension %d): keep its indices "
                             "affine in the loop vars",
                             t->name, c->name, d);
        break;
      }
      lo = lo ? simp(p, te_bin(p, TE_MIN, lo, l)) : l;
      hi = hi ? simp(p, te_bin(p, TE_MAX, hi, h)) : h;
    }
    if (s) break;
    te_expr_t *ext = simp(p, te_bin(p, TE_ADD, te_bin(p, TE_SUB, hi, lo), te_int(p, 1, p->index_dtype)));
    int64_t e;
    if (!te_const(ext, &e) || e <= 0) {
      /* A constant bound of the extent still gives fixed storage. */
      int64_t l2, h2;
      if (te_const_bounds(p, ext, &l2, &h2) && h2 > 0 && h2 < ((int64_t)1 << 30)) e = h2;
      else {
        s = KC_COMPILE_ERROR("te: the region of %s that %s reads at %s has no constant extent in dimension %d: "
                             "attach it at an inner var or split by constants",
                             t->name, c->name, p->vars[t->attach_var].name, d);
        break;
      }
    }
    t->rmin[d] = lo;
    t->rext[d] = e;
    p->vars[t->axes[d]].extent = te_int(p, e, p->index_dtype);
    p->vars[t->axes[d]].min = lo;
  }
out:
  free(relax);
  free(sub);
  return s;
}

kiln_status_t te_infer_bounds(kc_te_program_t *p, int kernel) {
  te_kernel_t *k = &p->kernels[kernel];
  for (int i = 0; i < p->ntensors; i++) {
    p->tensors[i].in_kernel = false;
    p->tensors[i].kernel_arg = -1;
  }
  for (int v = 0; v < p->nvars; v++) p->vars[v].leaf = false;
  for (int a = 0; a < k->nargs; a++)
    if (k->args[a] >= 0) p->tensors[k->args[a]].kernel_arg = a;
  te_tensor_t *root = &p->tensors[k->root];
  if (root->inlined) return KC_COMPILE_ERROR("te: kernel %s outputs %s, which is inlined", k->name, root->name);
  if (root->attach_stage >= 0)
    return KC_COMPILE_ERROR("te: kernel %s outputs %s, which is computed at another stage", k->name, root->name);
  /* Stages of this kernel: the root and every stage attached to it, transitively. */
  int order[TE_MAX_TENSORS], n = 0;
  order[n++] = k->root;
  root->in_kernel = true;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < p->ntensors; j++)
      if (p->tensors[j].attach_stage == order[i] && !p->tensors[j].in_kernel) {
        p->tensors[j].in_kernel = true;
        order[n++] = j;
      }
  for (int i = 0; i < n; i++) {
    te_tensor_t *t = &p->tensors[order[i]];
    for (int l = 0; l < t->nleaves; l++) p->vars[t->leaves[l]].leaf = true;
    if (i && t->kernel_arg >= 0)
      return KC_COMPILE_ERROR("te: %s is an argument of kernel %s and computed inside it", t->name, k->name);
    t->eff_scope = t->scope;
    if (i && t->scope == TE_SCOPE_GLOBAL) t->eff_scope = binds_threads(p, t) ? TE_SCOPE_SHARED : TE_SCOPE_LOCAL;
  }
  /* Every tensor read must have storage. */
  for (int i = 0; i < n; i++) {
    te_tensor_t *t = &p->tensors[order[i]];
    for (int j = 0; j < p->ntensors; j++) {
      if (!reads(t->body, j)) continue;
      te_tensor_t *r = &p->tensors[j];
      if (r->kernel_arg >= 0) continue;
      if (r->placeholder)
        return KC_COMPILE_ERROR("te: kernel %s reads placeholder %s, which is not among its args", k->name, r->name);
      if (!r->in_kernel)
        return KC_COMPILE_ERROR("te: intermediate tensor %s has no storage in kernel %s: pass it as an argument, "
                                "compute_inline it or compute_at it",
                                r->name, k->name);
      if (r->attach_stage != order[i])
        return KC_COMPILE_ERROR("te: %s reads %s, which is computed at %s: only the stage it is attached to may "
                                "read it",
                                t->name, r->name, p->tensors[r->attach_stage].name);
    }
  }
  /* Launch dimensions from the root's bindings (parallel takes the next free blockIdx). */
  int dt = p->index_dtype;
  for (int d = 0; d < 3; d++) {
    k->grid[d] = te_int(p, 1, dt);
    k->block[d] = 1;
  }
  bool used[6] = {false};
  for (int l = 0; l < root->nleaves; l++)
    if (p->vars[root->leaves[l]].bind >= 0) used[p->vars[root->leaves[l]].bind] = true;
  for (int l = 0; l < root->nleaves; l++) {
    te_var_t *v = &p->vars[root->leaves[l]];
    if (v->ann != TE_ANN_PARALLEL || v->bind >= 0) continue;
    int d = 0;
    while (d < 3 && used[d]) d++;
    if (d == 3) return KC_COMPILE_ERROR("te: %s: more than three parallel or blockIdx vars", root->name);
    v->bind = d;
    used[d] = true;
  }
  /* Bounds, top-down. */
  for (int i = 0; i < n; i++) {
    te_tensor_t *t = &p->tensors[order[i]];
    if (i == 0) {
      for (int d = 0; d < t->ndim; d++) {
        t->rmin[d] = te_int(p, 0, dt);
        p->vars[t->axes[d]].extent = t->shape[d];
        p->vars[t->axes[d]].min = t->rmin[d];
      }
    } else {
      KILN_RETURN_IF_ERROR(infer_region(p, order[i]));
    }
    for (int d = 0; d < t->ndim; d++) set_cext(&p->vars[t->axes[d]]);
    for (int r = 0; r < t->nred; r++) set_cext(&p->vars[t->red[r]]);
    KILN_RETURN_IF_ERROR(derive(p, order[i]));
    for (int l = 0; l < t->nleaves; l++) {
      te_var_t *v = &p->vars[t->leaves[l]];
      if (v->bind < 0) continue;
      if (v->bind < 3) {
        if (i) return KC_COMPILE_ERROR("te: %s binds %s to %s: only the kernel's output stage binds blockIdx",
                                       t->name, v->name, thread_names[v->bind]);
        k->grid[v->bind] = v->extent;
        continue;
      }
      if (v->cext <= 0)
        return KC_COMPILE_ERROR("te: %s.%s is bound to %s with an extent that is not a constant: split it by a "
                                "constant first",
                                t->name, v->name, thread_names[v->bind]);
      int d = v->bind - 3;
      if (i == 0) {
        k->block[d] = v->cext;
      } else if (k->block[d] < v->cext || (k->block[d] == 1 && !used[v->bind])) {
        return KC_COMPILE_ERROR("te: %s binds %s with extent %lld but the kernel's output binds it with %lld",
                                t->name, thread_names[v->bind], (long long)v->cext, (long long)k->block[d]);
      } else if (k->block[d] > v->cext) {
        KILN_RETURN_IF_ERROR(add_guard(p, t, te_bin(p, TE_LT, te_varref(p, t->leaves[l]), te_int(p, v->cext, dt)), false));
      }
    }
  }
  if (k->block[0] * k->block[1] * k->block[2] > 1024)
    return KC_COMPILE_ERROR("te: kernel %s binds %lld work-items per group; at most 1024", k->name,
                            (long long)(k->block[0] * k->block[1] * k->block[2]));
  return KILN_OK;
}
