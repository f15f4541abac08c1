/* Bound inference (te_bounds.h): top-down from the kernel's output stage, each stage's root
 * var extents (the output's shape, or an attached stage's region), then its leaf extents and
 * values through its splits and fuses, and the guards its partial tiles need. */
#include "compiler/te/te_bounds.h"

#include <stdlib.h>
#include <string.h>

#include "compiler/te/te_expr.h"

static te_expr_t *simp(te_program_t *p, te_expr_t *e) { return te_simplify(p, e); }

static bool has_align(const te_tensor_t *t) {
  if (t->ordered) return true;
  for (int d = 0; d < t->ndim; d++)
    if (t->align_factor[d]) return true;
  return false;
}

static void set_cext(te_var_t *v) {
  int64_t c;
  v->cext = te_const(v->extent, &c) ? c : -1;
}

static te_expr_t *ceildiv(te_program_t *p, te_expr_t *a, int64_t f) {
  int dt = a->dtype;
  return simp(p, te_bin(p, TE_FLOORDIV, te_bin(p, TE_ADD, a, te_int(p, f - 1, dt)), te_int(p, f, dt)));
}

static kiln_status_t add_guard(te_program_t *p, te_tensor_t *t, te_expr_t *g, bool red) {
  int64_t k;
  g = te_simplify(p, g);
  if (te_const(g, &k) && k) return KILN_OK;
  if (t->nguards == TE_MAX_GUARDS) return KC_COMPILE_ERROR("te: %s needs more than %d guards", t->name, TE_MAX_GUARDS);
  t->guard_red[t->nguards] = red;
  t->guards[t->nguards++] = g;
  return KILN_OK;
}

static bool reads_argument(const te_program_t *p, const te_expr_t *e) {
  if (!e) return false;
  if (e->kind == TE_LOAD && p->tensors[e->ref].kernel_arg >= 0) return true;
  for (int i = 0; i < e->nargs; i++)
    if (reads_argument(p, e->args[i])) return true;
  return false;
}

/* ---- leaves of one stage ------------------------------------------------------------ */

void te_rel_extent(te_program_t *p, const te_rel_t *rel) {
  int dt = p->index_dtype;
  te_var_t *a = &p->vars[rel->a], *b = &p->vars[rel->b], *c = &p->vars[rel->c];
  if (rel->kind == TE_REL_SPLIT && rel->nparts) {
    b->extent = te_int(p, rel->factor, dt);
    c->extent = ceildiv(p, a->extent, rel->factor);
  } else if (rel->kind == TE_REL_SPLIT) {
    c->extent = te_int(p, rel->factor, dt);
    b->extent = ceildiv(p, a->extent, rel->factor);
  } else {
    c->extent = simp(p, te_bin(p, TE_MUL, a->extent, b->extent));
  }
  set_cext(b);
  set_cext(c);
  if (rel->kind == TE_REL_FUSE) set_cext(a);
}

te_expr_t *te_rel_value(te_program_t *p, const te_rel_t *rel, te_expr_t **val) {
  te_var_t *a = &p->vars[rel->a], *b = &p->vars[rel->b], *c = &p->vars[rel->c];
  if (rel->kind == TE_REL_FUSE) {
    val[rel->a] = simp(p, te_bin(p, TE_FLOORDIV, val[rel->c], b->extent));
    val[rel->b] = simp(p, te_bin(p, TE_FLOORMOD, val[rel->c], b->extent));
    return NULL;
  }
  val[rel->a] = simp(p, te_bin(p, TE_ADD, te_bin(p, TE_MUL, val[rel->b], c->extent), val[rel->c]));
  /* The split covers outer*inner >= extent: guard unless that is exact. */
  te_expr_t *cover = simp(p, te_bin(p, TE_SUB, te_bin(p, TE_MUL, b->extent, c->extent), a->extent));
  int64_t z;
  return te_const(cover, &z) && z == 0 ? NULL : te_bin(p, TE_LT, val[rel->a], a->extent);
}

/* val[v] for every var of the stage in terms of its leaves, innermost relation first; a split
 * that does not divide its extent adds a guard. */
static kiln_status_t derive_values(te_program_t *p, te_tensor_t *t, te_expr_t **val) {
  for (int i = 0; i < t->nleaves; i++) val[t->leaves[i]] = te_varref(p, t->leaves[i]);
  for (int r = t->nrels - 1; r >= 0; r--) {
    te_expr_t *g = te_rel_value(p, &t->rels[r], val);
    if (g) KILN_RETURN_IF_ERROR(add_guard(p, t, g, p->vars[t->rels[r].a].reduce));
  }
  return KILN_OK;
}

/* t->val: the stage's axis and reduce values (with their mins) in terms of its leaves. */
static kiln_status_t stage_values(te_program_t *p, te_tensor_t *t, te_expr_t **val) {
  int dt = p->index_dtype;
  for (int d = 0; d < t->ndim; d++) {
    int v = t->axes[d];
    t->val[d] = simp(p, te_bin(p, TE_ADD, t->rmin[d], val[v] ? val[v] : te_varref(p, v)));
    if (t->attach_stage >= 0 && reads_argument(p, t->body)) {
      /* An attached region may run past the tensor (partial tiles): the reads of argument
       * tensors there must not happen. A stage that reads only other attached stages reads
       * inside their regions (which cover all of its own region) and writes its own
       * storage, so the elements past the tensor are computed and never used. */
      KILN_RETURN_IF_ERROR(add_guard(p, t, te_bin(p, TE_GE, t->val[d], te_int(p, 0, dt)), false));
      KILN_RETURN_IF_ERROR(add_guard(p, t, te_bin(p, TE_LT, t->val[d], t->shape[d]), false));
    }
  }
  for (int r = 0; r < t->nred; r++) {
    int v = t->red[r];
    t->val[t->ndim + r] = simp(p, te_bin(p, TE_ADD, p->vars[v].min, val[v] ? val[v] : te_varref(p, v)));
  }
  return KILN_OK;
}

/* Leaf extents from root extents; values of every var; guards. */
static kiln_status_t derive(te_program_t *p, int st) {
  te_tensor_t *t = &p->tensors[st];
  for (int r = 0; r < t->nrels; r++) te_rel_extent(p, &t->rels[r]);
  te_expr_t **val = calloc((size_t)p->nvars, sizeof(*val));
  if (!val) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  t->nguards = 0;
  kiln_status_t s = derive_values(p, t, val);
  if (!s) s = stage_values(p, t, val);
  free(val);
  return s;
}

void te_stage_subst(te_program_t *p, int st, te_expr_t **subst) {
  te_tensor_t *t = &p->tensors[st];
  for (int d = 0; d < t->ndim; d++) subst[t->axes[d]] = t->val[d];
  for (int r = 0; r < t->nred; r++) subst[t->red[r]] = t->val[t->ndim + r];
}

/* ---- regions of attached stages ----------------------------------------------------- */

static void collect_loads(te_expr_t *e, int tensor, te_expr_t **out, int *n, int cap) {
  if (!e) return;
  if (e->kind == TE_LOAD && e->ref == tensor && *n < cap) out[(*n)++] = e;
  for (int i = 0; i < e->nargs; i++) collect_loads(e->args[i], tensor, out, n, cap);
}

static bool binds_threads(const te_program_t *p, const te_tensor_t *t) {
  for (int i = 0; i < t->nleaves; i++)
    if (p->vars[t->leaves[i]].bind >= 3) return true;
  return false;
}

/* A var split or fused after compute_at: one iteration of it is one iteration of its inner
 * part, or of the fused var (TVM moves the attachment the same way). Returns its position
 * among the consumer's leaves, or -1. */
static int follow_attach_var(te_program_t *p, te_tensor_t *t) {
  const te_tensor_t *c = &p->tensors[t->attach_stage];
  for (int r = 0; r < c->nrels; r++) {
    const te_rel_t *rel = &c->rels[r];
    if (rel->kind == TE_REL_SPLIT && rel->a == t->attach_var) t->attach_var = rel->c;
    else if (rel->kind == TE_REL_FUSE && (rel->a == t->attach_var || rel->b == t->attach_var)) t->attach_var = rel->c;
  }
  return te_leaf_pos(c, t->attach_var);
}

/* The vars that range over a whole iteration of the attach var: the consumer's inner leaves,
 * and for shared storage every bound threadIdx and vthread of the kernel (the region serves
 * the group; TVM relaxes vthread for shared and global storage, not for local). */
static void relaxed_vars(te_program_t *p, const te_tensor_t *t, int apos, bool *relax) {
  const te_tensor_t *c = &p->tensors[t->attach_stage];
  for (int i = apos + 1; i < c->nleaves; i++) relax[c->leaves[i]] = true;
  if (t->eff_scope == TE_SCOPE_SHARED)
    for (int v = 0; v < p->nvars; v++)
      if ((p->vars[v].bind >= 3 || p->vars[v].vthread) && p->vars[v].stage >= 0 &&
          p->tensors[p->vars[v].stage].in_kernel && p->vars[v].leaf)
        relax[v] = true;
}

/* Dimension d of the region: the hull of every load's index, with a constant extent. */
static kiln_status_t region_dim(te_program_t *p, int st, int d, te_expr_t **loads, int nl, te_expr_t **sub,
                                const bool *relax) {
  te_tensor_t *t = &p->tensors[st];
  const te_tensor_t *c = &p->tensors[t->attach_stage];
  te_expr_t *lo = NULL, *hi = NULL;
  for (int k = 0; k < nl; k++) {
    te_expr_t *ix = simp(p, te_subst(p, loads[k]->args[d], sub)), *l, *h;
    if (!te_sym_bounds(p, ix, relax, &l, &h))
      return KC_COMPILE_ERROR("te: cannot bound the region of %s read by %s (dimension %d): keep its indices affine "
                              "in the loop vars",
                              t->name, c->name, d);
    lo = lo ? simp(p, te_bin(p, TE_MIN, lo, l)) : l;
    hi = hi ? simp(p, te_bin(p, TE_MAX, hi, h)) : h;
  }
  te_expr_t *ext = simp(p, te_bin(p, TE_ADD, te_bin(p, TE_SUB, hi, lo), te_int(p, 1, p->index_dtype)));
  int64_t e, l2, h2;
  /* A constant bound of a symbolic extent still gives fixed storage. */
  if ((!te_const(ext, &e) || e <= 0) && te_const_bounds(p, ext, &l2, &h2) && h2 > 0 && h2 < ((int64_t)1 << 30)) e = h2;
  else if (!te_const(ext, &e) || e <= 0)
    return KC_COMPILE_ERROR("te: the region of %s that %s reads at %s has no constant extent in dimension %d: "
                            "attach it at an inner var or split by constants",
                            t->name, c->name, p->vars[t->attach_var].name, d);
  t->rmin[d] = lo;
  t->rext[d] = e;
  p->vars[t->axes[d]].extent = te_int(p, e, p->index_dtype);
  p->vars[t->axes[d]].min = lo;
  return KILN_OK;
}

/* The region of `st` that its parent reads in one iteration of the attach var. */
static kiln_status_t infer_region(te_program_t *p, int st) {
  te_tensor_t *t = &p->tensors[st], *c = &p->tensors[t->attach_stage];
  int apos = follow_attach_var(p, t);
  if (apos < 0)
    return KC_COMPILE_ERROR("te: %s is computed at %s.%s, which is not a leaf var of %s (it was split or fused)",
                            t->name, c->name, p->vars[t->attach_var].name, c->name);
  bool *relax = calloc((size_t)p->nvars, sizeof(bool));
  te_expr_t **sub = calloc((size_t)p->nvars, sizeof(*sub));
  te_expr_t *loads[64];
  int nl = 0;
  kiln_status_t s = KILN_OK;
  if (!relax || !sub) s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  if (!s) {
    relaxed_vars(p, t, apos, relax);
    te_stage_subst(p, t->attach_stage, sub);
    collect_loads(c->body, st, loads, &nl, 64);
    if (!nl) s = KC_COMPILE_ERROR("te: %s is computed at %s, which does not read it", t->name, c->name);
  }
  for (int d = 0; d < t->ndim && !s; d++) s = region_dim(p, st, d, loads, nl, sub, relax);
  free(relax);
  free(sub);
  return s;
}

/* ---- storage of attached stages ----------------------------------------------------- */

/* Element strides of an attached stage's storage over its region, row-major with each
 * dimension's stride padded as storage_align asks (TVM's rule: the next k * factor + offset);
 * a double-buffered stage has two halves, each a whole number of 16 bytes. */
static kiln_status_t storage_layout(te_program_t *p, te_tensor_t *t) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    int d = t->ordered ? t->order[i] : i; /* storage_order: the storage's dimensions innermost first */
    int64_t f = t->align_factor[d], o = t->align_offset[d];
    if (f) s += ((o - s) % f + f) % f;
    t->stride[d] = s;
    s *= t->rext[d];
    if (s > (1 << 24)) return KC_COMPILE_ERROR("te: %s needs more than 2^24 elements of storage", t->name);
  }
  if (t->double_buffer) {
    int64_t q = t->dtype == TE_F64 || t->dtype == TE_I64 || t->dtype == TE_U64 ? 2 : 16;
    s = (s + q - 1) / q * q; /* 16 bytes for 1..4-byte elements too: halves keep vector alignment */
  }
  t->storage = s;
  return KILN_OK;
}

/* Elements a work-item stages in registers while it prefetches a double-buffered stage: the
 * product of its loops that are not bound to threads. */
static int64_t staged_elements(const te_program_t *p, const te_tensor_t *t) {
  int64_t n = 1;
  for (int i = 0; i < t->nleaves; i++) {
    const te_var_t *v = &p->vars[t->leaves[i]];
    if (v->bind >= 0) continue;
    if (v->cext <= 0) return -1;
    /* stop past the limit: split factors reach 2^30, and a wrapped product would pass */
    if (__builtin_mul_overflow(n, v->cext, &n) || n > TE_DB_MAX_STAGED) return INT64_MAX;
  }
  return n;
}

/* double_buffer (docs/te.md §5): shared storage filled at a plain loop of its consumer,
 * nothing attached inside it, a bounded number of elements per work-item to prefetch. */
static kiln_status_t check_double_buffer(te_program_t *p, const te_tensor_t *t) {
  const te_tensor_t *c = &p->tensors[t->attach_stage];
  const te_var_t *at = &p->vars[t->attach_var];
  if (t->eff_scope != TE_SCOPE_SHARED)
    return KC_COMPILE_ERROR("te: double_buffer of %s: only shared stages are double-buffered", t->name);
  if (at->bind >= 0 || at->ann == TE_ANN_VECTORIZE || at->ann == TE_ANN_PARALLEL)
    return KC_COMPILE_ERROR("te: double_buffer of %s: it is computed at %s.%s, which is not a plain loop", t->name,
                            c->name, at->name);
  for (int j = 0; j < p->ntensors; j++)
    if (p->tensors[j].in_kernel && p->tensors[j].attach_stage == (int)(t - p->tensors))
      return KC_COMPILE_ERROR("te: double_buffer of %s: %s is computed inside it", t->name, p->tensors[j].name);
  int64_t n = staged_elements(p, t);
  if (n < 0 || n > TE_DB_MAX_STAGED)
    return KC_COMPILE_ERROR("te: double_buffer of %s: a work-item would prefetch %s elements; at most %d (bind more "
                            "of its loops to threads, split by constants)",
                            t->name, n < 0 ? "a non-constant number of" : "too many", TE_DB_MAX_STAGED);
  return KILN_OK;
}

/* ---- vthread ------------------------------------------------------------------------ */

static bool uses_ref(const te_expr_t *e, int v) {
  if (!e) return false;
  if (e->kind == TE_VAR && e->ref == v) return true;
  for (int i = 0; i < e->nargs; i++)
    if (uses_ref(e->args[i], v)) return true;
  return false;
}

static bool region_uses(const te_tensor_t *t, int v) {
  for (int d = 0; d < t->ndim; d++)
    if (uses_ref(t->rmin[d], v)) return true;
  return false;
}

/* The vthread vars whose values stage t's statements are copied over (docs/te.md §5 bind):
 * its own vthread leaves, and for an attached stage those its region depends on (storage per
 * work-item: a region, and a copy of the storage, per value). copy_off is the offset of the
 * copy in use. */
static kiln_status_t vthread_set(te_program_t *p, te_tensor_t *t, bool attached) {
  int64_t copies = 1, store = 1;
  te_expr_t *off = NULL;
  int dt = p->index_dtype;
  t->nvt = 0;
  t->vt_store = 1;
  t->copy_off = NULL;
  for (int v = 0; v < p->nvars; v++) {
    const te_var_t *x = &p->vars[v];
    if (!x->vthread || !x->leaf) continue;
    bool region = x->stage != (int)(t - p->tensors) && attached && region_uses(t, v);
    if (x->stage != (int)(t - p->tensors) && !region) continue;
    if (x->cext < 1 || x->cext > TE_VT_MAX_COPIES)
      return KC_COMPILE_ERROR("te: %s.%s is bound to vthread with extent %s: it must be a constant from 1 to %d (split "
                              "by a constant first)",
                              p->tensors[x->stage].name, x->name, x->cext < 0 ? "not a constant" : x->cext ? "too large" : "0",
                              TE_VT_MAX_COPIES);
    copies *= x->cext;
    if (t->nvt == TE_MAX_VT || copies > TE_VT_MAX_COPIES)
      return KC_COMPILE_ERROR("te: %s would be copied %s times for its vthread vars; at most %d", t->name,
                              t->nvt == TE_MAX_VT ? "too many" : "more than the limit of", TE_VT_MAX_COPIES);
    t->vt[t->nvt++] = v;
    if (!region) continue;
    off = off ? te_bin(p, TE_ADD, te_bin(p, TE_MUL, off, te_int(p, x->cext, dt)), te_varref(p, v)) : te_varref(p, v);
    store *= x->cext;
  }
  if (off) {
    t->vt_store = store;
    t->copy_off = simp(p, te_bin(p, TE_MUL, off, te_int(p, t->storage, dt)));
  }
  if (t->nvt && t->double_buffer)
    return KC_COMPILE_ERROR("te: double_buffer of %s: its statements are copied per vthread value", t->name);
  return KILN_OK;
}

/* ---- the kernel --------------------------------------------------------------------- */

/* order[]: the kernel's output stage and every stage attached to it, transitively, parents
 * first. Marks their leaves and settles their storage. */
static kiln_status_t kernel_stages(te_program_t *p, te_kernel_t *k, int *order, int *out_n) {
  te_tensor_t *root = &p->tensors[k->root];
  int n = 0;
  if (root->inlined) return KC_COMPILE_ERROR("te: kernel %s outputs %s, which is inlined", k->name, root->name);
  if (root->attach_stage >= 0)
    return KC_COMPILE_ERROR("te: kernel %s outputs %s, which is computed at another stage", k->name, root->name);
  if (root->double_buffer || has_align(root))
    return KC_COMPILE_ERROR("te: kernel %s outputs %s into its argument: storage_align, storage_order and "
                            "double_buffer apply to stages attached inside a kernel",
                            k->name, root->name);
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
  *out_n = n;
  return KILN_OK;
}

/* Every tensor a stage of the kernel reads has storage: an argument, or a stage attached to
 * the reader. */
static kiln_status_t check_storage(te_program_t *p, const te_kernel_t *k, const int *order, int n) {
  for (int i = 0; i < n; i++) {
    te_tensor_t *t = &p->tensors[order[i]];
    for (int j = 0; j < p->ntensors; j++) {
      if (!te_reads(t->body, j)) continue;
      te_tensor_t *r = &p->tensors[j];
      if (r->kernel_arg >= 0) continue;
      if (r->placeholder)
        return KC_COMPILE_ERROR("te: kernel %s reads placeholder %s, which is not among its args", k->name, r->name);
      if (!r->in_kernel)
        return KC_COMPILE_ERROR("te: intermediate tensor %s has no storage in kernel %s: pass it as an argument, "
                                "compute_inline it or compute_at it",
                                r->name, k->name);
      if (r->attach_stage != order[i])
        return KC_COMPILE_ERROR("te: %s reads %s, which is computed at %s: only the stage it is attached to may read it",
                                t->name, r->name, p->tensors[r->attach_stage].name);
    }
  }
  return KILN_OK;
}

/* Parallel vars of the output stage take the next free blockIdx dimensions; used[] gets the
 * bound thread dimensions. */
static kiln_status_t bind_parallel(te_program_t *p, te_kernel_t *k, bool *used) {
  te_tensor_t *root = &p->tensors[k->root];
  for (int d = 0; d < 3; d++) {
    k->grid[d] = te_int(p, 1, p->index_dtype);
    k->block[d] = 1;
  }
  k->parallel = 0;
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
  return KILN_OK;
}

/* A bound leaf of stage `t` (i-th of the kernel): the grid from blockIdx of the output, the
 * block from threadIdx; an attached stage binding a smaller extent is guarded. */
static kiln_status_t check_binding(te_program_t *p, te_kernel_t *k, te_tensor_t *t, int i, int leaf, const bool *used) {
  te_var_t *v = &p->vars[leaf];
  if (v->bind < 3) {
    if (i) return KC_COMPILE_ERROR("te: %s binds %s to %s: only the kernel's output stage binds blockIdx", t->name,
                                   v->name, te_thread_names[v->bind]);
    k->grid[v->bind] = v->ann == TE_ANN_PARALLEL && v->chunk ? ceildiv(p, v->extent, v->chunk) : v->extent;
    if (v->ann == TE_ANN_PARALLEL && !v->chunk) k->parallel |= (uint8_t)(1u << v->bind);
    return KILN_OK;
  }
  if (v->cext <= 0)
    return KC_COMPILE_ERROR("te: %s.%s is bound to %s with an extent that is not a constant: split it by a constant "
                            "first",
                            t->name, v->name, te_thread_names[v->bind]);
  int d = v->bind - 3;
  if (i == 0) k->block[d] = v->cext;
  else if (k->block[d] < v->cext || (k->block[d] == 1 && !used[v->bind]))
    return KC_COMPILE_ERROR("te: %s binds %s with extent %lld but the kernel's output binds it with %lld", t->name,
                            te_thread_names[v->bind], (long long)v->cext, (long long)k->block[d]);
  else if (k->block[d] > v->cext)
    return add_guard(p, t, te_bin(p, TE_LT, te_varref(p, leaf), te_int(p, v->cext, p->index_dtype)), false);
  return KILN_OK;
}

static kiln_status_t bound_stage(te_program_t *p, te_kernel_t *k, int st, int i, const bool *used) {
  te_tensor_t *t = &p->tensors[st];
  if (i == 0) {
    for (int d = 0; d < t->ndim; d++) {
      t->rmin[d] = te_int(p, 0, p->index_dtype);
      p->vars[t->axes[d]].extent = t->shape[d];
      p->vars[t->axes[d]].min = t->rmin[d];
    }
  } else {
    KILN_RETURN_IF_ERROR(infer_region(p, st));
    KILN_RETURN_IF_ERROR(storage_layout(p, t));
  }
  for (int d = 0; d < t->ndim; d++) set_cext(&p->vars[t->axes[d]]);
  for (int r = 0; r < t->nred; r++) set_cext(&p->vars[t->red[r]]);
  KILN_RETURN_IF_ERROR(derive(p, st));
  for (int l = 0; l < t->nleaves; l++)
    if (p->vars[t->leaves[l]].bind >= 0) KILN_RETURN_IF_ERROR(check_binding(p, k, t, i, t->leaves[l], used));
  KILN_RETURN_IF_ERROR(vthread_set(p, t, i > 0));
  if (t->double_buffer && i) KILN_RETURN_IF_ERROR(check_double_buffer(p, t));
  if (i && t->min_blocks)
    return KC_COMPILE_ERROR("te: launch_bounds of %s: it is computed inside kernel %s; give it to the kernel's output "
                            "stage",
                            t->name, k->name);
  if (!i) k->min_blocks = t->min_blocks;
  return KILN_OK;
}

kiln_status_t te_infer_bounds(te_program_t *p, int kernel) {
  te_kernel_t *k = &p->kernels[kernel];
  int order[TE_MAX_TENSORS], n = 0;
  bool used[6] = {false};
  for (int i = 0; i < p->ntensors; i++) {
    p->tensors[i].in_kernel = false;
    p->tensors[i].kernel_arg = -1;
  }
  for (int v = 0; v < p->nvars; v++) p->vars[v].leaf = false;
  for (int a = 0; a < k->nargs; a++)
    if (k->args[a] >= 0) p->tensors[k->args[a]].kernel_arg = a;
  KILN_RETURN_IF_ERROR(kernel_stages(p, k, order, &n));
  KILN_RETURN_IF_ERROR(check_storage(p, k, order, n));
  KILN_RETURN_IF_ERROR(bind_parallel(p, k, used));
  for (int i = 0; i < n; i++) KILN_RETURN_IF_ERROR(bound_stage(p, k, order[i], i, used));
  int64_t threads = k->block[0] * k->block[1] * k->block[2];
  if (threads > 1024)
    return KC_COMPILE_ERROR("te: kernel %s binds %lld work-items per group; at most 1024", k->name, (long long)threads);
  return KILN_OK;
}
