/* Schedule primitives (te_sched.h): a table of one function per primitive. Loop
 * transformations are recorded as relations (split, fuse) and a leaf order; bound inference
 * (te_bounds.c) later derives extents and values from them. */
#include "compiler/te/te_sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/te/te_bounds.h"
#include "compiler/te/te_expr.h"

/* ---- names to ids ------------------------------------------------------------------- */

static kiln_status_t find_stage(te_program_t *p, const char *name, int *out) {
  int t = te_find_tensor(p, name);
  if (t < 0) return KC_COMPILE_ERROR("te: the schedule names unknown stage '%s'", name);
  if (p->tensors[t].placeholder)
    return KC_COMPILE_ERROR("te: the schedule names %s, a placeholder: only compute stages are scheduled", name);
  *out = t;
  return KILN_OK;
}

/* A var of the stage that is still a leaf. */
static kiln_status_t find_leaf(te_program_t *p, int stage, const char *name, int *out) {
  const char *sn = p->tensors[stage].name;
  int v = te_find_var(p, stage, name);
  if (v < 0 || p->vars[v].stage != stage) return KC_COMPILE_ERROR("te: stage %s has no var '%s'", sn, name);
  if (te_leaf_pos(&p->tensors[stage], v) < 0)
    return KC_COMPILE_ERROR("te: var '%s' of %s was already split or fused: name its results instead", name, sn);
  *out = v;
  return KILN_OK;
}

/* The given name, or TVM's default: the var's name with a suffix. */
static void name_or(const char *given, char *dst, size_t cap, const char *a, const char *suffix) {
  if (given[0]) snprintf(dst, cap, "%s", given);
  else snprintf(dst, cap, "%.50s%s", a, suffix);
}

/* ---- loop transformations ----------------------------------------------------------- */

static kiln_status_t add_rel(te_tensor_t *t, te_rel_t r) {
  if (t->nrels >= TE_MAX_RELS) return KC_COMPILE_ERROR("te: too many splits and fuses on %s", t->name);
  t->rels[t->nrels++] = r;
  return KILN_OK;
}

static kiln_status_t do_split(te_program_t *p, int st, int v, int64_t factor, bool nparts, const char *on,
                              const char *in, int *out_o, int *out_i) {
  te_tensor_t *t = &p->tensors[st];
  if (factor < 1 || factor > (1 << 30))
    return KC_COMPILE_ERROR("te: split of %s.%s needs a factor or nparts of at least 1", t->name, p->vars[v].name);
  if (p->vars[v].bind != TE_BIND_NONE || p->vars[v].vthread || p->vars[v].ann)
    return KC_COMPILE_ERROR("te: %s.%s is bound or annotated; split it before", t->name, p->vars[v].name);
  int o, i;
  KILN_RETURN_IF_ERROR(te_new_var(p, st, on, TE_V_OUTER, &o));
  KILN_RETURN_IF_ERROR(te_new_var(p, st, in, TE_V_INNER, &i));
  if (t->nleaves + 1 > TE_MAX_LEAVES) return KC_COMPILE_ERROR("te: too many vars in %s", t->name);
  p->vars[o].reduce = p->vars[i].reduce = p->vars[v].reduce;
  int pos = te_leaf_pos(t, v);
  if (pos < 0) /* callers pass leaves; a program that gets here anyway is refused, not followed */
    return KC_COMPILE_ERROR("te: %s.%s is no longer a loop of %s (already split or fused)", t->name,
                            p->vars[v].name, t->name);
  memmove(&t->leaves[pos + 2], &t->leaves[pos + 1], (size_t)(t->nleaves - pos - 1) * sizeof(int));
  t->leaves[pos] = o;
  t->leaves[pos + 1] = i;
  t->nleaves++;
  te_rel_t rel = {.kind = TE_REL_SPLIT, .a = v, .b = o, .c = i, .factor = factor, .nparts = nparts};
  KILN_RETURN_IF_ERROR(add_rel(t, rel));
  if (out_o) *out_o = o;
  if (out_i) *out_i = i;
  return KILN_OK;
}

static kiln_status_t do_reorder(te_program_t *p, int st, const int *vars, int n) {
  te_tensor_t *t = &p->tensors[st];
  int pos[TE_MAX_LEAVES];
  for (int i = 0; i < n; i++) {
    pos[i] = te_leaf_pos(t, vars[i]);
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

static kiln_status_t split(te_program_t *p, const te_prim_t *m, int st) {
  int v;
  char a[TE_NAME], b[TE_NAME];
  KILN_RETURN_IF_ERROR(find_leaf(p, st, m->vars[0], &v));
  name_or(m->names[0], a, sizeof(a), p->vars[v].name, ".outer");
  name_or(m->names[1], b, sizeof(b), p->vars[v].name, ".inner");
  return do_split(p, st, v, m->factor[0], m->nparts, a, b, NULL, NULL);
}

static kiln_status_t tile(te_program_t *p, const te_prim_t *m, int st) {
  int x, y, xo, xi, yo, yi;
  char a[TE_NAME], b[TE_NAME];
  KILN_RETURN_IF_ERROR(find_leaf(p, st, m->vars[0], &x));
  KILN_RETURN_IF_ERROR(find_leaf(p, st, m->vars[1], &y));
  if (x == y) return KC_COMPILE_ERROR("te: tile of %s names %s as both x and y", p->tensors[st].name, p->vars[x].name);
  name_or(m->names[0], a, sizeof(a), p->vars[x].name, ".outer");
  name_or(m->names[1], b, sizeof(b), p->vars[x].name, ".inner");
  KILN_RETURN_IF_ERROR(do_split(p, st, x, m->factor[0], false, a, b, &xo, &xi));
  name_or(m->names[2], a, sizeof(a), p->vars[y].name, ".outer");
  name_or(m->names[3], b, sizeof(b), p->vars[y].name, ".inner");
  KILN_RETURN_IF_ERROR(do_split(p, st, y, m->factor[1], false, a, b, &yo, &yi));
  int order[4] = {xo, yo, xi, yi};
  return do_reorder(p, st, order, 4);
}

static kiln_status_t check_fusable(te_program_t *p, const te_tensor_t *t, const int *vars, int i) {
  if (p->vars[vars[i]].bind != TE_BIND_NONE || p->vars[vars[i]].vthread)
    return KC_COMPILE_ERROR("te: fuse of %s.%s, which is bound", t->name, p->vars[vars[i]].name);
  if (i && te_leaf_pos(t, vars[i]) != te_leaf_pos(t, vars[i - 1]) + 1)
    return KC_COMPILE_ERROR("te: fuse on %s: %s and %s are not consecutive leaves (reorder first)", t->name,
                            p->vars[vars[i - 1]].name, p->vars[vars[i]].name);
  if (i && p->vars[vars[i]].reduce != p->vars[vars[0]].reduce)
    return KC_COMPILE_ERROR("te: fuse on %s mixes reduce and data vars", t->name);
  return KILN_OK;
}

static kiln_status_t fuse(te_program_t *p, const te_prim_t *m, int st) {
  te_tensor_t *t = &p->tensors[st];
  int vars[TE_PRIM_MAX_VARS];
  for (int i = 0; i < m->nvars; i++) {
    KILN_RETURN_IF_ERROR(find_leaf(p, st, m->vars[i], &vars[i]));
    KILN_RETURN_IF_ERROR(check_fusable(p, t, vars, i));
  }
  int acc = vars[0];
  for (int i = 1; i < m->nvars; i++) {
    char fn[TE_NAME];
    snprintf(fn, sizeof(fn), "%.30s.%.20s.fused", p->vars[acc].name, p->vars[vars[i]].name);
    if (i + 1 == m->nvars && m->names[0][0]) snprintf(fn, sizeof(fn), "%s", m->names[0]);
    else if (i + 1 == m->nvars) fn[50] = 0; /* default names are cut at 50 bytes */
    int f;
    KILN_RETURN_IF_ERROR(te_new_var(p, st, fn, TE_V_FUSED, &f));
    p->vars[f].reduce = p->vars[acc].reduce;
    int pos = te_leaf_pos(t, acc);
    t->leaves[pos] = f;
    memmove(&t->leaves[pos + 1], &t->leaves[pos + 2], (size_t)(t->nleaves - pos - 2) * sizeof(int));
    t->nleaves--;
    KILN_RETURN_IF_ERROR(add_rel(t, (te_rel_t){.kind = TE_REL_FUSE, .a = acc, .b = vars[i], .c = f}));
    acc = f;
  }
  return KILN_OK;
}

static kiln_status_t reorder(te_program_t *p, const te_prim_t *m, int st) {
  int vars[TE_PRIM_MAX_VARS];
  for (int i = 0; i < m->nvars; i++) KILN_RETURN_IF_ERROR(find_leaf(p, st, m->vars[i], &vars[i]));
  return do_reorder(p, st, vars, m->nvars);
}

/* ---- annotations -------------------------------------------------------------------- */

static kiln_status_t bind_var(te_program_t *p, const te_prim_t *m, int st) {
  te_tensor_t *t = &p->tensors[st];
  int v;
  KILN_RETURN_IF_ERROR(find_leaf(p, st, m->vars[0], &v));
  if (p->vars[v].reduce)
    return KC_COMPILE_ERROR("te: bind of %s.%s, a reduce axis: only data axes can be bound", t->name, p->vars[v].name);
  if (p->vars[v].bind != TE_BIND_NONE || p->vars[v].vthread)
    return KC_COMPILE_ERROR("te: %s.%s is already bound", t->name, p->vars[v].name);
  if (m->thread == TE_THREAD_VTHREAD) {
    if (p->vars[v].ann)
      return KC_COMPILE_ERROR("te: bind of %s.%s to vthread: it is unrolled, vectorized or parallel", t->name,
                              p->vars[v].name); /* several vthread vars per stage: each its own (TVM's thread_axis per name) */
    p->vars[v].vthread = true;
    return KILN_OK;
  }
  for (int i = 0; i < t->nleaves; i++)
    if (p->vars[t->leaves[i]].bind == m->thread)
      return KC_COMPILE_ERROR("te: %s binds %s twice", t->name, te_thread_names[m->thread]);
  p->vars[v].bind = m->thread;
  return KILN_OK;
}

static kiln_status_t annotate(te_program_t *p, const te_prim_t *m, int st) {
  int v;
  KILN_RETURN_IF_ERROR(find_leaf(p, st, m->vars[0], &v));
  if (m->op == TE_P_PARALLEL && p->vars[v].reduce)
    return KC_COMPILE_ERROR("te: parallel on %s.%s, a reduce axis", p->tensors[st].name, p->vars[v].name);
  if (p->vars[v].vthread)
    return KC_COMPILE_ERROR("te: %s.%s is bound to vthread: its copies are unrolled already, nothing else applies",
                            p->tensors[st].name, p->vars[v].name);
  p->vars[v].ann = m->op == TE_P_UNROLL ? TE_ANN_UNROLL : m->op == TE_P_VECTORIZE ? TE_ANN_VECTORIZE : TE_ANN_PARALLEL;
  if (m->op == TE_P_PARALLEL) p->vars[v].chunk = m->factor[0];
  return KILN_OK;
}

/* ---- placement ---------------------------------------------------------------------- */

static kiln_status_t compute_at(te_program_t *p, const te_prim_t *m, int st) {
  te_tensor_t *t = &p->tensors[st];
  int par;
  KILN_RETURN_IF_ERROR(find_stage(p, m->parent, &par));
  if (par == st) return KC_COMPILE_ERROR("te: compute_at of %s into itself", t->name);
  for (int s = par; s >= 0; s = p->tensors[s].attach_stage)
    if (s == st) return KC_COMPILE_ERROR("te: compute_at of %s into %s makes a cycle", t->name, p->tensors[par].name);
  int v = te_find_var(p, par, m->vars[0]);
  if (v < 0 || p->vars[v].stage != par)
    return KC_COMPILE_ERROR("te: compute_at of %s: %s has no var '%s'", t->name, p->tensors[par].name, m->vars[0]);
  if (t->inlined) return KC_COMPILE_ERROR("te: compute_at of %s, which is inlined", t->name);
  t->attach_stage = par;
  t->attach_var = v;
  return KILN_OK;
}

static kiln_status_t compute_inline(te_program_t *p, const te_prim_t *m, int st) {
  (void)m;
  te_tensor_t *t = &p->tensors[st];
  if (t->nred) return KC_COMPILE_ERROR("te: compute_inline of %s, a reduction", t->name);
  if (t->attach_stage >= 0) return KC_COMPILE_ERROR("te: compute_inline of %s, which is attached", t->name);
  t->inlined = true;
  return KILN_OK;
}

/* ---- storage ------------------------------------------------------------------------ */

/* The storage stride of dimension `axis` becomes the next k * factor + offset (bank-conflict
 * padding of shared tiles); it applies where the stage has storage of its own in a kernel. */
static kiln_status_t storage_align(te_program_t *p, const te_prim_t *m, int st) {
  te_tensor_t *t = &p->tensors[st];
  int v = te_find_var(p, st, m->vars[0]);
  for (int d = 0; d < t->ndim; d++)
    if (t->axes[d] == v) {
      t->align_factor[d] = m->factor[0];
      t->align_offset[d] = m->factor[1];
      return KILN_OK;
    }
  return KC_COMPILE_ERROR("te: storage_align of %s: '%s' is not one of its axes", t->name, m->vars[0]);
}

/* The storage's dimensions in another order than the axes' (a transposed shared tile: the
 * reads along the other axis become contiguous); every axis once. */
static kiln_status_t storage_order(te_program_t *p, const te_prim_t *m, int st) {
  te_tensor_t *t = &p->tensors[st];
  bool seen[TE_MAX_DIMS] = {false};
  if (m->nvars != t->ndim)
    return KC_COMPILE_ERROR("te: storage_order of %s names %d axes; it has %d (name each once)", t->name, m->nvars,
                            t->ndim);
  for (int i = 0; i < m->nvars; i++) {
    int v = te_find_var(p, st, m->vars[i]), d = 0;
    while (d < t->ndim && t->axes[d] != v) d++;
    if (v < 0 || d == t->ndim)
      return KC_COMPILE_ERROR("te: storage_order of %s: '%s' is not one of its axes", t->name, m->vars[i]);
    if (seen[d]) return KC_COMPILE_ERROR("te: storage_order of %s names '%s' twice", t->name, m->vars[i]);
    seen[d] = true;
    t->order[i] = (int8_t)d;
  }
  t->ordered = true;
  return KILN_OK;
}

/* Checked where the kernel is known (te_bounds.c: shared storage, attached at a loop, no
 * reduction). */
static kiln_status_t double_buffer(te_program_t *p, const te_prim_t *m, int st) {
  (void)m;
  te_tensor_t *t = &p->tensors[st];
  if (t->nred) return KC_COMPILE_ERROR("te: double_buffer of %s, a reduction: only copies and element-wise stages", t->name);
  t->double_buffer = true;
  return KILN_OK;
}

/* The occupancy hint of the kernel computing this stage (te_emit.c: nvvm.minctasm on NVPTX,
 * amdgpu-waves-per-eu on AMDGPU; nothing on the CPU). */
static kiln_status_t launch_bounds(te_program_t *p, const te_prim_t *m, int st) {
  p->tensors[st].min_blocks = (int)m->factor[0];
  return KILN_OK;
}

/* ---- cache stages ------------------------------------------------------------------- */

/* Replaces loads of tensor `from` with loads of `to` in e (in place: bodies are private). */
static void retarget_loads(te_expr_t *e, int from, int to) {
  if (!e) return;
  if (e->kind == TE_LOAD && e->ref == from) e->ref = to;
  for (int i = 0; i < e->nargs; i++) retarget_loads(e->args[i], from, to);
}

/* A new stage named m->names[0] shaped like tensor `like`, in m->scope. */
static kiln_status_t new_stage(te_program_t *p, const te_prim_t *m, int like, int *out) {
  const char *name = m->names[0];
  if (te_find_tensor(p, name) >= 0 || te_find_var(p, -1, name) >= 0)
    return KC_COMPILE_ERROR("te: the name '%s' is already used", name);
  te_tensor_t *n;
  KILN_RETURN_IF_ERROR(te_new_tensor(p, name, &n));
  const te_tensor_t *src = &p->tensors[like];
  n->dtype = src->dtype;
  n->ndim = src->ndim;
  memcpy(n->shape, src->shape, sizeof(n->shape));
  /* "global" (TVM's CPU spelling) is storage the stage's attach point decides (§5). */
  n->scope = m->scope;
  *out = p->ntensors++;
  return KILN_OK;
}

static kiln_status_t cache_read(te_program_t *p, const te_prim_t *m) {
  int src = te_find_tensor(p, m->stage);
  if (src < 0) return KC_COMPILE_ERROR("te: cache_read of an unknown tensor");
  int id;
  KILN_RETURN_IF_ERROR(new_stage(p, m, src, &id));
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
  for (int i = 0; i < m->nvars; i++) {
    int r = te_find_tensor(p, m->vars[i]);
    if (r < 0 || p->tensors[r].placeholder || r == id)
      return KC_COMPILE_ERROR("te: cache_read of %s: reader %d is not a compute stage", m->stage, i);
    retarget_loads(p->tensors[r].body, src, id);
  }
  return KILN_OK;
}

/* The new stage takes the body, axes and reduce axes; the tensor gets fresh axes of the same
 * names and becomes a copy of the new stage. */
static kiln_status_t cache_write(te_program_t *p, const te_prim_t *m) {
  int src, id;
  KILN_RETURN_IF_ERROR(find_stage(p, m->stage, &src));
  if (p->tensors[src].scheduled || p->tensors[src].attach_stage >= 0 || p->tensors[src].inlined)
    return KC_COMPILE_ERROR("te: cache_write of %s must come before any other primitive on it", p->tensors[src].name);
  KILN_RETURN_IF_ERROR(new_stage(p, m, src, &id));
  te_tensor_t *n = &p->tensors[id], *t = &p->tensors[src];
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

/* ---- rfactor ------------------------------------------------------------------------ */

/* An rfactor in progress: the stage t, the reduce leaf `var` factored out, the new stage rf. */
typedef struct rf_ctx {
  te_program_t *p;
  te_tensor_t *t, *rf;
  int st, id, var, fa;
  te_expr_t **sub; /* t's root vars and reduce leaves -> expressions over rf's vars */
  te_expr_t *cond; /* rf's reduce condition: t's, and the guards of inexact splits */
} rf_ctx_t;

static kiln_status_t rf_var(rf_ctx_t *c, const char *name, int kind, te_expr_t *extent, int *out) {
  KILN_RETURN_IF_ERROR(te_new_var(c->p, c->id, name, kind, out));
  c->p->vars[*out].min = te_int(c->p, 0, c->p->index_dtype);
  c->p->vars[*out].extent = extent;
  c->p->vars[*out].reduce = kind == TE_V_REDUCE;
  return KILN_OK;
}

/* rf's axes: t's axes with the factored var's range inserted at factor_axis; its reduce axes:
 * t's other reduce leaves. sub[] maps the leaves to them. */
static kiln_status_t rf_axes(rf_ctx_t *c) {
  te_program_t *p = c->p;
  te_tensor_t *t = c->t, *rf = c->rf;
  for (int d = 0, s = 0; d < rf->ndim; d++) {
    bool f = d == c->fa;
    int src = f ? c->var : t->axes[s++];
    KILN_RETURN_IF_ERROR(rf_var(c, p->vars[src].name, TE_V_AXIS, f ? p->vars[c->var].extent : t->shape[d - (d > c->fa)], &rf->axes[d]));
    rf->shape[d] = p->vars[rf->axes[d]].extent;
    rf->leaves[rf->nleaves++] = rf->axes[d];
    c->sub[src] = te_varref(p, rf->axes[d]);
  }
  for (int i = 0; i < t->nleaves; i++) {
    int l = t->leaves[i];
    if (!p->vars[l].reduce || l == c->var) continue;
    if (rf->nred == TE_MAX_DIMS) return KC_COMPILE_ERROR("te: rfactor of %s: too many reduce loops", t->name);
    KILN_RETURN_IF_ERROR(rf_var(c, p->vars[l].name, TE_V_REDUCE, p->vars[l].extent, &rf->red[rf->nred]));
    rf->leaves[rf->nleaves++] = rf->red[rf->nred];
    c->sub[l] = te_varref(p, rf->red[rf->nred++]);
  }
  return KILN_OK;
}

/* sub[] of t's root reduce vars: min + their value over the reduce leaves (through the splits
 * and fuses of reduce vars), with a condition for each split that does not divide. */
static kiln_status_t rf_reduce_values(rf_ctx_t *c) {
  te_program_t *p = c->p;
  te_tensor_t *t = c->t;
  te_expr_t **val = calloc((size_t)p->nvars, sizeof(*val));
  if (!val) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (int i = 0; i < t->nleaves; i++) val[t->leaves[i]] = te_varref(p, t->leaves[i]);
  for (int r = t->nrels - 1; r >= 0; r--) {
    if (!p->vars[t->rels[r].a].reduce) continue;
    te_expr_t *g = te_rel_value(p, &t->rels[r], val);
    if (g) c->cond = c->cond ? te_bin(p, TE_AND, c->cond, g) : g;
  }
  if (c->cond) c->cond = te_subst(p, c->cond, c->sub);
  for (int r = 0; r < t->nred; r++) {
    int v = t->red[r];
    val[v] = te_subst(p, val[v], c->sub);
    c->sub[v] = te_simplify(p, te_bin(p, TE_ADD, p->vars[v].min, val[v]));
  }
  free(val);
  return KILN_OK;
}

/* t becomes a reduction over one new var, `var.v`, of loads of rf; its other reduce loops and
 * their splits and fuses go. */
static kiln_status_t rf_rewrite(rf_ctx_t *c) {
  te_program_t *p = c->p;
  te_tensor_t *t = c->t, *rf = c->rf;
  char name[TE_NAME];
  int r, n = 0;
  snprintf(name, sizeof(name), "%.60s.v", p->vars[c->var].name);
  KILN_RETURN_IF_ERROR(te_new_var(p, c->st, name, TE_V_REDUCE, &r));
  p->vars[r].reduce = true;
  p->vars[r].min = te_int(p, 0, p->index_dtype);
  p->vars[r].extent = p->vars[c->var].extent;
  te_expr_t *ld = te_node(p, TE_LOAD, 0, t->dtype, rf->ndim), *red = te_node(p, TE_REDUCE, t->body->op, t->dtype, 2);
  if (!ld || !red) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  ld->ref = c->id;
  for (int d = 0, s = 0; d < rf->ndim; d++) ld->args[d] = te_varref(p, d == c->fa ? r : t->axes[s++]);
  red->args[0] = ld;
  t->body = red;
  t->nred = 1;
  t->red[0] = r;
  for (int i = 0; i < t->nleaves; i++)
    if (!p->vars[t->leaves[i]].reduce) t->leaves[n++] = t->leaves[i];
  t->leaves[n++] = r;
  t->nleaves = n;
  n = 0;
  for (int i = 0; i < t->nrels; i++)
    if (!p->vars[t->rels[i].a].reduce) t->rels[n++] = t->rels[i];
  t->nrels = n;
  return KILN_OK;
}

static kiln_status_t rfactor_build(rf_ctx_t *c, const te_prim_t *m) {
  te_program_t *p = c->p;
  te_tensor_t *t = c->t, *rf;
  te_expr_t *body = t->body;
  if (te_find_tensor(p, m->names[0]) >= 0 || te_find_var(p, -1, m->names[0]) >= 0)
    return KC_COMPILE_ERROR("te: the name '%s' is already used", m->names[0]);
  KILN_RETURN_IF_ERROR(te_new_tensor(p, m->names[0], &rf));
  c->rf = rf;
  c->id = p->ntensors++;
  rf->dtype = t->dtype;
  rf->ndim = t->ndim + 1;
  for (int r = 0; r < t->nrels; r++) /* the extents of the reduce loops */
    if (p->vars[t->rels[r].a].reduce) te_rel_extent(p, &t->rels[r]);
  KILN_RETURN_IF_ERROR(rf_axes(c));
  KILN_RETURN_IF_ERROR(rf_reduce_values(c));
  te_expr_t *red = te_node(p, TE_REDUCE, body->op, t->dtype, 2);
  if (!red) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  red->args[0] = te_subst(p, body->args[0], c->sub);
  red->args[1] = body->args[1] ? te_subst(p, body->args[1], c->sub) : NULL;
  if (c->cond) red->args[1] = red->args[1] ? te_bin(p, TE_AND, red->args[1], c->cond) : c->cond;
  rf->body = red;
  return rf_rewrite(c);
}

/* TVM's rfactor: the reduce leaf `var` of t becomes a data axis of a new stage that reduces
 * over t's other reduce loops; t then reduces that stage over `var`'s range. */
static kiln_status_t rfactor(te_program_t *p, const te_prim_t *m, int st) {
  te_tensor_t *t = &p->tensors[st];
  int v;
  KILN_RETURN_IF_ERROR(find_leaf(p, st, m->vars[0], &v));
  if (!p->vars[v].reduce || t->body->kind != TE_REDUCE)
    return KC_COMPILE_ERROR("te: rfactor of %s.%s, which is not a reduce loop", t->name, p->vars[v].name);
  if (t->ndim + 1 > TE_MAX_DIMS || m->factor[0] > t->ndim)
    return KC_COMPILE_ERROR("te: rfactor of %s: factor_axis %lld is past its rank %d", t->name,
                            (long long)m->factor[0], t->ndim);
  if (t->attach_stage >= 0 || t->inlined) return KC_COMPILE_ERROR("te: rfactor of %s after it was placed", t->name);
  rf_ctx_t c = {.p = p, .t = t, .st = st, .var = v, .fa = (int)m->factor[0]};
  c.sub = calloc((size_t)TE_MAX_VARS, sizeof(*c.sub));
  if (!c.sub) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  kiln_status_t s = rfactor_build(&c, m);
  free(c.sub);
  return s;
}

/* ---- the table ---------------------------------------------------------------------- */

typedef kiln_status_t (*stage_prim_fn)(te_program_t *p, const te_prim_t *m, int stage);

static const stage_prim_fn stage_prims[TE_P_COUNT] = {
    [TE_P_SPLIT] = split,           [TE_P_TILE] = tile,         [TE_P_FUSE] = fuse,
    [TE_P_REORDER] = reorder,       [TE_P_BIND] = bind_var,         [TE_P_UNROLL] = annotate,
    [TE_P_VECTORIZE] = annotate,    [TE_P_PARALLEL] = annotate, [TE_P_COMPUTE_AT] = compute_at,
    [TE_P_COMPUTE_INLINE] = compute_inline, [TE_P_RFACTOR] = rfactor,
    [TE_P_STORAGE_ALIGN] = storage_align, [TE_P_DOUBLE_BUFFER] = double_buffer,
    [TE_P_LAUNCH_BOUNDS] = launch_bounds, [TE_P_STORAGE_ORDER] = storage_order,
};

kiln_status_t te_sched_apply(te_program_t *p, const te_prim_t *m) {
  if (m->op == TE_P_CACHE_READ) return cache_read(p, m);
  if (m->op == TE_P_CACHE_WRITE) return cache_write(p, m);
  if (m->op <= 0 || m->op >= TE_P_COUNT || !stage_prims[m->op])
    return KILN_STATUS(KILN_E_INTERNAL, "te: schedule primitive %d has no implementation", m->op);
  int st;
  KILN_RETURN_IF_ERROR(find_stage(p, m->stage, &st));
  p->tensors[st].scheduled = true;
  return stage_prims[m->op](p, m, st);
}
