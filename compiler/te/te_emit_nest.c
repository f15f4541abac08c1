/* Loop nests of te stages (te_emit.h): one loop per leaf var in leaf order (bound vars are
 * ids), reductions initialised before their first reduce loop, stages attached at a var
 * emitted inside its loop, guards as loop bounds, branches or whole-tile versions, loop
 * metadata for unroll and vectorize. */
#include <llvm-c/DebugInfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/te/te_bounds.h"
#include "compiler/te/te_emit.h"
#include "compiler/te/te_expr.h"

static void barrier(te_em_t *m) {
  LLVMTypeRef ft = LLVMFunctionType(LLVMVoidTypeInContext(m->ctx), NULL, 0, 0);
  LLVMValueRef f = LLVMGetNamedFunction(m->mod, "__kiln_barrier");
  if (!f) {
    f = LLVMAddFunction(m->mod, "__kiln_barrier", ft);
    unsigned kind = LLVMGetEnumAttributeKindForName("convergent", 10);
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(m->ctx, kind, 0));
  }
  LLVMBuildFence(m->b, LLVMAtomicOrderingSequentiallyConsistent, 1, "");
  LLVMBuildCall2(m->b, ft, f, NULL, 0, "");
  LLVMBuildFence(m->b, LLVMAtomicOrderingSequentiallyConsistent, 1, "");
}

/* ---- loops -------------------------------------------------------------------------- */

typedef struct loop {
  LLVMBasicBlockRef header, exit;
  LLVMValueRef phi;
  int var;      /* the te var it defines, or -1 */
  int ann;      /* TE_ANN_UNROLL or TE_ANN_VECTORIZE: metadata asking for it; else none */
  int64_t cext; /* constant trip count of an unrolled loop, or -1 */
  bool auto_vec; /* an innermost CPU loop of contiguous accesses: LLVM's cost model decides */
} loop_t;

/* A loop of the index type over [start, end) (start NULL: 0), positioned in its body. */
static void loop_open(te_em_t *m, const char *name, LLVMValueRef start, LLVMValueRef end, loop_t *l) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(m->b);
  l->header = LLVMAppendBasicBlockInContext(m->ctx, m->fn, name);
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "body");
  l->exit = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "exit");
  LLVMBuildBr(m->b, l->header);
  LLVMPositionBuilderAtEnd(m->b, l->header);
  l->phi = LLVMBuildPhi(m->b, m->ity, name);
  if (!start) start = LLVMConstInt(m->ity, 0, 0);
  LLVMAddIncoming(l->phi, &start, &pre, 1);
  LLVMValueRef c = LLVMBuildICmp(m->b, LLVMIntSLT, l->phi, end, "");
  LLVMBuildCondBr(m->b, c, body, l->exit);
  LLVMPositionBuilderAtEnd(m->b, body);
}

static LLVMMetadataRef md_flag(te_em_t *m, const char *name, LLVMValueRef val) {
  LLVMMetadataRef ops[2] = {LLVMMDStringInContext2(m->ctx, name, strlen(name)), NULL};
  if (val) ops[1] = LLVMValueAsMetadata(val);
  return LLVMMDNodeInContext2(m->ctx, ops, val ? 2 : 1);
}

/* llvm.loop metadata on a latch branch: unroll as asked; LLVM's loop vectoriser where the
 * schedule asked for vectorize and kiln could not emit the vectors itself, and left to LLVM's
 * cost model on an innermost loop whose accesses are all contiguous in it (auto_vec: vectors
 * there are plain vector loads and stores, as TVM's LLVM backend gets for any loop); never
 * elsewhere (it would pick any loop, with gathers and scatters). */
static void loop_metadata(te_em_t *m, const loop_t *l, LLVMValueRef br) {
  LLVMMetadataRef ops[4];
  unsigned n = 1;
  if (l->ann == TE_ANN_UNROLL && l->cext > 0 && l->cext <= 64) ops[n++] = md_flag(m, "llvm.loop.unroll.full", NULL);
  else if (l->ann == TE_ANN_UNROLL) ops[n++] = md_flag(m, "llvm.loop.unroll.enable", NULL); /* LLVM's cost model decides */
  if (!l->auto_vec) ops[n++] = md_flag(m, "llvm.loop.vectorize.enable", LLVMConstInt(m->i1, l->ann == TE_ANN_VECTORIZE, 0));
  LLVMMetadataRef tmp = LLVMTemporaryMDNode(m->ctx, NULL, 0);
  ops[0] = tmp;
  LLVMMetadataRef id = LLVMMDNodeInContext2(m->ctx, ops, n);
  LLVMMetadataReplaceAllUsesWith(tmp, id);
  LLVMSetMetadata(br, LLVMGetMDKindIDInContext(m->ctx, "llvm.loop", 9), LLVMMetadataAsValue(m->ctx, id));
}

static void loop_close(te_em_t *m, loop_t *l) {
  if (m->err || !l->header) return;
  LLVMValueRef next = LLVMBuildNSWAdd(m->b, l->phi, LLVMConstInt(m->ity, 1, 0), "");
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(m->b);
  LLVMValueRef br = LLVMBuildBr(m->b, l->header);
  LLVMAddIncoming(l->phi, &next, &latch, 1);
  loop_metadata(m, l, br);
  LLVMPositionBuilderAtEnd(m->b, l->exit);
  if (l->var >= 0) m->val[l->var] = NULL;
}

/* GPUs have no vector loop: a vectorised loop kiln cannot emit as vectors is unrolled there,
 * and LLVM's load/store vectoriser merges the adjacent accesses where it can. */
static int effective_ann(const te_em_t *m, const te_var_t *v) {
  return v->ann == TE_ANN_VECTORIZE && m->job->target.kind != KILN_TARGET_CPU ? TE_ANN_UNROLL : v->ann;
}

/* The loop of leaf `var` over [start, extent). */
static void loop_begin(te_em_t *m, int var, LLVMValueRef start, te_expr_t *extent, loop_t *l) {
  LLVMValueRef ext = te_em_expr(m, extent);
  const te_var_t *v = &m->p->vars[var];
  if (!ext) return;
  l->var = var;
  l->ann = effective_ann(m, v);
  l->cext = v->cext;
  loop_open(m, v->name, start, ext, l);
  m->val[var] = l->phi;
}

/* ---- nests -------------------------------------------------------------------------- */

static void attached_at(te_em_t *m, int st, int var) {
  te_program_t *p = m->p;
  for (int j = 0; j < p->ntensors && !m->err; j++) {
    te_tensor_t *a = &p->tensors[j];
    if (!a->in_kernel || a->attach_stage != st || a->attach_var != var || a->double_buffer) continue;
    bool sh = a->eff_scope == TE_SCOPE_SHARED;
    if (sh) barrier(m);
    te_em_stage(m, j);
    if (sh) barrier(m);
  }
}

/* ---- double buffering (docs/te.md §5 double_buffer) ---------------------------------- */

static void nest(te_em_t *m, int st, int pos, int mode, uint32_t consumed, bool versioned);
static void stage_storage(te_em_t *m, int st);

/* Double-buffered stages attached at (st, var): they are filled once before var's loop
 * (iteration 0 into half 0); iteration i loads iteration i+1's region into registers before
 * its body, reads half i%2 in its body, stores the registers into half (i+1)%2 after it, and
 * ends with one barrier, which both publishes that half and ends the reads of half i%2
 * before iteration i+1 overwrites it. The global loads' latency hides behind the body. */
static bool db_at(te_em_t *m, int st, int var) {
  for (int j = 0; j < m->p->ntensors; j++) {
    const te_tensor_t *a = &m->p->tensors[j];
    if (a->in_kernel && a->double_buffer && a->attach_stage == st && a->attach_var == var) return true;
  }
  return false;
}

/* Every double-buffered stage at (st, var) with var = `at`: the half of `at` is the one in use
 * (half[] of a stage read later is `half_of`'s, NULL: none), its statements store as `mode`. */
static void db_emit(te_em_t *m, int st, int var, LLVMValueRef at, LLVMValueRef half_of, int mode) {
  te_program_t *p = m->p;
  LLVMValueRef keep = m->val[var];
  for (int j = 0; j < p->ntensors && !m->err; j++) {
    te_tensor_t *a = &p->tensors[j];
    if (!a->in_kernel || !a->double_buffer || a->attach_stage != st || a->attach_var != var) continue;
    if (!m->buf[j]) stage_storage(m, j);
    LLVMValueRef one = LLVMConstInt(m->ity, 1, 0), size = LLVMConstInt(m->ity, (unsigned long long)a->storage, 0);
    if (at) {
      m->val[var] = at;
      m->half[j] = LLVMBuildMul(m->b, LLVMBuildAnd(m->b, at, one, ""), size, "half");
      m->db_mode = mode;
      nest(m, j, 0, TE_MODE_PLAIN, 0, false);
      m->db_mode = TE_DB_NONE;
    }
    m->half[j] = half_of ? LLVMBuildMul(m->b, LLVMBuildAnd(m->b, half_of, one, ""), size, "half") : NULL;
  }
  m->val[var] = keep;
}

/* Before var's loop: iteration 0's regions into half 0 of each double-buffered stage. */
static void db_prologue(te_em_t *m, int st, int var) {
  barrier(m);
  db_emit(m, st, var, LLVMConstInt(m->ity, 0, 0), NULL, TE_DB_NONE);
  barrier(m);
}

/* In iteration `i` of var's loop: the next regions into registers when there is a next
 * iteration (a uniform branch: no barrier inside), then half i%2 for the body's reads
 * (store: the registers into the next half, and the barrier). */
static void db_step(te_em_t *m, int st, int var, bool store) {
  LLVMValueRef i = m->val[var], ext = te_em_expr(m, m->p->vars[var].extent);
  if (!i || !ext) return;
  LLVMValueRef next = LLVMBuildNSWAdd(m->b, i, LLVMConstInt(m->ity, 1, 0), "next");
  LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(m->ctx, m->fn, store ? "db.store" : "db.load");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "db.end");
  LLVMBuildCondBr(m->b, LLVMBuildICmp(m->b, LLVMIntSLT, next, ext, ""), then, done);
  LLVMPositionBuilderAtEnd(m->b, then);
  db_emit(m, st, var, next, NULL, store ? TE_DB_STORE : TE_DB_LOAD);
  LLVMBuildBr(m->b, done);
  LLVMPositionBuilderAtEnd(m->b, done);
  if (store) barrier(m);
  db_emit(m, st, var, NULL, store ? NULL : i, TE_DB_NONE);
}

static int first_reduce_leaf(const te_program_t *p, const te_tensor_t *t) {
  if (t->body->kind != TE_REDUCE) return -1;
  for (int i = 0; i < t->nleaves; i++)
    if (p->vars[t->leaves[i]].reduce) return i;
  return t->nleaves;
}

/* Does any stage attached to `st` sit at leaf position >= pos? Loops holding one keep their
 * full extent (their bodies may hold barriers, which every work-item must reach). */
static bool attached_inside(te_em_t *m, int st, int pos) {
  te_program_t *p = m->p;
  const te_tensor_t *t = &p->tensors[st];
  for (int j = 0; j < p->ntensors; j++) {
    const te_tensor_t *a = &p->tensors[j];
    if (!a->in_kernel || a->attach_stage != st) continue;
    for (int i = pos; i < t->nleaves; i++)
      if (t->leaves[i] == a->attach_var) return true;
  }
  return false;
}

/* Does e use a leaf of t at position `from` or later? */
static bool uses_leaves_from(te_em_t *m, const te_tensor_t *t, int from, const te_expr_t *e) {
  te_program_t *p = m->p;
  bool *inner = calloc((size_t)p->nvars, sizeof(bool));
  if (!inner) return true;
  for (int i = from; i < t->nleaves; i++) inner[t->leaves[i]] = true;
  bool r = te_uses_var(e, inner);
  free(inner);
  return r;
}

/* A guard `e < bound` that is `v + rest < bound` with `rest` known outside v's loop becomes
 * the loop bound `v < bound - rest`: the partial tile then runs fewer iterations instead of
 * testing every one, and the loop stays vectorisable. Returns the tightened extent or NULL. */
static te_expr_t *tighten(te_em_t *m, const te_tensor_t *t, int pos, te_expr_t *g) {
  te_program_t *p = m->p;
  if (g->kind != TE_BIN || g->op != TE_LT || g->args[0]->dtype != p->index_dtype) return NULL;
  int v = t->leaves[pos];
  te_expr_t *d = te_simplify(p, te_bin(p, TE_SUB, g->args[0], g->args[1]));
  te_expr_t *bound = te_simplify(p, te_bin(p, TE_SUB, te_varref(p, v), d));
  /* vthread vars have values only inside statements (their copies) */
  return bound && !uses_leaves_from(m, t, pos, bound) && !te_uses_var(bound, m->vtvar) ? bound : NULL;
}

/* `g` (lo or hi of a guard's difference) compared with 0 as the guard compares. */
static te_expr_t *tile_test(te_program_t *p, int op, te_expr_t *lo, te_expr_t *hi) {
  te_expr_t *zero = te_int(p, 0, p->index_dtype);
  switch (op) {
  case TE_LT: return te_bin(p, TE_LT, hi, zero);
  case TE_LE: return te_bin(p, TE_LE, hi, zero);
  case TE_GT: return te_bin(p, TE_GT, lo, zero);
  default: return te_bin(p, TE_GE, lo, zero);
  }
}

/* The condition under which every guard of t that depends on the leaves from `pos` on holds
 * for all their values (leaves from pos range over their extents), or NULL if none can be
 * bounded so. *out_mask gets the guards it covers. */
static te_expr_t *full_tile(te_em_t *m, const te_tensor_t *t, int pos, int mode, uint32_t consumed, uint32_t *out_mask) {
  te_program_t *p = m->p;
  bool *relax = calloc((size_t)p->nvars * 2, sizeof(bool)), *bound = relax + p->nvars;
  if (!relax) return NULL;
  /* Bound leaves take the work-item's id, which may exceed the var's extent (a guard says
   * so): guards on them stay. */
  for (int i = pos; i < t->nleaves; i++) {
    relax[t->leaves[i]] = p->vars[t->leaves[i]].bind < 0;
    bound[t->leaves[i]] = p->vars[t->leaves[i]].bind >= 0;
  }
  for (int v = 0; v < p->nvars; v++) relax[v] |= m->vtvar[v]; /* the tile holds every vthread copy */
  te_expr_t *cond = NULL;
  for (int i = 0; i < t->nguards; i++) {
    te_expr_t *g = t->guards[i], *d, *lo, *hi;
    if (!te_em_guard_open(t, i, mode, consumed) || !te_uses_var(g, relax) || te_uses_var(g, bound)) continue;
    if (g->kind != TE_BIN || g->op < TE_LT || g->op > TE_GE || g->args[0]->dtype != p->index_dtype) continue;
    d = te_simplify(p, te_bin(p, TE_SUB, g->args[0], g->args[1]));
    if (!d || !te_sym_bounds(p, d, relax, &lo, &hi)) continue;
    te_expr_t *c = tile_test(p, g->op, lo, hi);
    cond = cond ? te_bin(p, TE_AND, cond, c) : c;
    *out_mask |= 1u << i;
  }
  free(relax);
  return cond;
}

/* Loop versioning: a whole tile inside the tensor runs without guards. False when no guard
 * can be tested for the whole tile here. */
static bool versioned_nest(te_em_t *m, int st, int pos, int mode, uint32_t consumed) {
  uint32_t full = 0;
  te_expr_t *c = full_tile(m, &m->p->tensors[st], pos, mode, consumed, &full);
  if (!c) return false;
  LLVMValueRef cv = te_em_expr(m, te_simplify(m->p, c));
  if (!cv) return true;
  LLVMBasicBlockRef fast = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "tile.full");
  LLVMBasicBlockRef slow = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "tile.partial");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "tile.end");
  LLVMBuildCondBr(m->b, cv, fast, slow);
  LLVMPositionBuilderAtEnd(m->b, fast);
  nest(m, st, pos, mode, consumed | full, true);
  LLVMBuildBr(m->b, done);
  LLVMPositionBuilderAtEnd(m->b, slow);
  nest(m, st, pos, mode, consumed, true);
  LLVMBuildBr(m->b, done);
  LLVMPositionBuilderAtEnd(m->b, done);
  return true;
}

/* The extent of leaf `pos`'s loop: guards it can absorb become its bound (not for unrolled
 * loops, which keep their constant trip count so that register tiles stay registers, nor
 * around attached stages). */
static te_expr_t *loop_extent(te_em_t *m, const te_tensor_t *t, int pos, int st, int mode, uint32_t *consumed) {
  te_program_t *p = m->p;
  te_var_t *v = &p->vars[t->leaves[pos]];
  te_expr_t *ext = v->extent;
  if (effective_ann(m, v) == TE_ANN_UNROLL || attached_inside(m, st, pos)) return ext;
  for (int i = 0; i < t->nguards; i++) {
    if (!te_em_guard_open(t, i, mode, *consumed)) continue;
    te_expr_t *b = tighten(m, t, pos, t->guards[i]);
    if (!b) continue;
    ext = te_simplify(p, te_bin(p, TE_MIN, ext, b));
    *consumed |= 1u << i;
  }
  return ext;
}

/* Guards whose vars are all defined at leaf `pos` wrap the rest of the nest instead of each
 * statement (not around barriers: only without stages attached further in). */
static bool hoist_guards(te_em_t *m, const te_tensor_t *t, int st, int pos, int mode, uint32_t *consumed,
                         LLVMBasicBlockRef *merge) {
  te_program_t *p = m->p;
  te_expr_t *g = NULL;
  if (attached_inside(m, st, pos + 1)) return true;
  for (int i = 0; i < t->nguards; i++) {
    if (!te_em_guard_open(t, i, mode, *consumed) || uses_leaves_from(m, t, pos + 1, t->guards[i]) ||
        te_uses_var(t->guards[i], m->vtvar))
      continue;
    g = g ? te_bin(p, TE_AND, g, t->guards[i]) : t->guards[i];
    *consumed |= 1u << i;
  }
  return !g || te_em_open_guard(m, g, merge);
}

/* A parallel leaf bound to work-group dimension d: each group runs its share of the
 * iterations, ceil(extent / groups) of them, so any grid from 1 to the extent covers the loop
 * (one group per pool thread on the CPU; docs/te.md §5). `extent` may be tightened by guards;
 * the shares come from the var's own extent. */
static void parallel_begin(te_em_t *m, int var, te_expr_t *extent, loop_t *l) {
  const te_var_t *v = &m->p->vars[var];
  LLVMValueRef full = te_em_expr(m, v->extent), end = te_em_expr(m, extent);
  if (!full || !end) return;
  LLVMBuilderRef B = m->b;
  LLVMValueRef g = te_em_id(m, v->bind), n = te_em_num_groups(m, v->bind);
  LLVMValueRef chunk = LLVMBuildUDiv(B, LLVMBuildAdd(B, full, LLVMBuildSub(B, n, LLVMConstInt(m->ity, 1, 0), ""), ""), n, "");
  LLVMValueRef lo = LLVMBuildMul(B, g, chunk, ""), hi = LLVMBuildAdd(B, lo, chunk, "");
  hi = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, hi, end, ""), hi, end, "");
  l->var = var;
  l->ann = TE_ANN_NONE;
  loop_open(m, v->name, lo, hi, l);
  m->val[var] = l->phi;
}

/* Vector lanes for a statement of elements of `dt`: the loop's whole constant extent when it
 * is small (as TVM emits it), else chunks of the target's vector width. */
static int vector_width(te_em_t *m, int dt, int64_t cext, bool *whole) {
  unsigned bits = dt == TE_BOOL ? 8 : (unsigned)LLVMSizeOfTypeInBits(LLVMGetModuleDataLayout(m->mod), te_em_type(m, dt, true));
  unsigned native = m->job->target.kind != KILN_TARGET_CPU ? 128 : strstr(m->job->target.features, "+avx512f") ? 512
                  : strstr(m->job->target.features, "+avx") ? 256 : 128;
  *whole = cext > 0 && cext <= TE_VEC_MAX_LANES && (uint64_t)cext * bits <= 2048;
  if (*whole) return (int)cext;
  int w = (int)(native / bits);
  return w < 1 ? 1 : w > TE_VEC_MAX_LANES ? TE_VEC_MAX_LANES : w;
}

/* The innermost leaf `var`, marked vectorize, as explicit vectors: one statement over all
 * lanes, or a loop of vector chunks and a scalar loop over the remainder. */
static void vector_nest(te_em_t *m, int st, int var, te_expr_t *extent, int mode, uint32_t consumed) {
  te_program_t *p = m->p;
  int64_t c = -1;
  bool whole;
  te_const(extent, &c);
  int w = vector_width(m, p->tensors[st].dtype, c, &whole);
  te_vec_t v = {.var = var, .width = w, .base_pow2 = 12};
  if (whole) {
    v.base = m->val[var] = LLVMConstInt(m->ity, 0, 0);
    if (w == 1) te_em_statement(m, st, mode, consumed);
    else te_em_vec_statement(m, st, mode, consumed, &v);
    m->val[var] = NULL;
    return;
  }
  LLVMValueRef end = te_em_expr(m, te_simplify(p, te_bin(p, TE_MAX, extent, te_int(p, 0, p->index_dtype))));
  if (!end) return;
  LLVMValueRef wv = LLVMConstInt(m->ity, (unsigned)w, 0), chunks = LLVMBuildUDiv(m->b, end, wv, "");
  loop_t cl = {.var = -1}, rl = {.var = var};
  loop_open(m, "vec.chunk", NULL, chunks, &cl);
  v.base = m->val[var] = LLVMBuildNSWMul(m->b, cl.phi, wv, "");
  v.base_pow2 = __builtin_ctz((unsigned)w);
  te_em_vec_statement(m, st, mode, consumed, &v);
  loop_close(m, &cl);
  if (c >= 0 && c % w == 0) {
    m->val[var] = NULL;
    return;
  }
  loop_open(m, "vec.rest", LLVMBuildNSWMul(m->b, chunks, wv, ""), end, &rl);
  m->val[var] = rl.phi;
  te_em_statement(m, st, mode, consumed);
  loop_close(m, &rl);
}

/* Is leaf `pos` a loop kiln emits as vectors (the innermost leaf, marked vectorize, nothing
 * attached at it, a statement that allows lanes)? *consumed gets the guards its bound takes. */
static bool vector_leaf(te_em_t *m, int st, int pos, int mode, uint32_t *consumed, te_expr_t **out_ext) {
  const te_tensor_t *t = &m->p->tensors[st];
  int var = t->leaves[pos];
  const te_var_t *v = &m->p->vars[var];
  if (v->ann != TE_ANN_VECTORIZE || v->bind >= 0 || pos != t->nleaves - 1 || attached_inside(m, st, pos)) return false;
  uint32_t c = *consumed;
  te_expr_t *ext = v->extent;
  for (int i = 0; i < t->nguards; i++) {
    te_expr_t *b = te_em_guard_open(t, i, mode, c) ? tighten(m, t, pos, t->guards[i]) : NULL;
    if (b) ext = te_simplify(m->p, te_bin(m->p, TE_MIN, ext, b)), c |= 1u << i;
  }
  if (!te_em_vec_ok(m, st, mode, c, var)) return false;
  *consumed = c;
  *out_ext = ext;
  return true;
}

/* May LLVM's loop vectoriser decide on leaf `pos`'s loop: a CPU loop, unannotated or parallel,
 * the innermost leaf with nothing attached at it, whose statement stores at stride 1 in it
 * and loads at stride 0 or 1 (te_em_contiguous): no gather or scatter can come of it. */
static bool auto_vec_leaf(te_em_t *m, int st, int pos, int mode, uint32_t consumed) {
  const te_tensor_t *t = &m->p->tensors[st];
  const te_var_t *v = &m->p->vars[t->leaves[pos]];
  if (m->job->target.kind != KILN_TARGET_CPU || pos != t->nleaves - 1 || attached_inside(m, st, pos)) return false;
  if (v->ann != TE_ANN_NONE && v->ann != TE_ANN_PARALLEL) return false;
  return te_em_contiguous(m, st, mode, consumed, t->leaves[pos]);
}

static void nest(te_em_t *m, int st, int pos, int mode, uint32_t consumed, bool versioned) {
  te_program_t *p = m->p;
  te_tensor_t *t = &p->tensors[st];
  if (m->err) return;
  if (mode == TE_MODE_PLAIN && pos == first_reduce_leaf(p, t)) {
    nest(m, st, pos, TE_MODE_INIT, consumed, versioned);
    nest(m, st, pos, TE_MODE_MAIN, consumed, versioned);
    return;
  }
  if (pos == t->nleaves) {
    te_em_statement(m, st, mode, consumed);
    return;
  }
  if (!versioned && !attached_inside(m, st, pos) && versioned_nest(m, st, pos, mode, consumed)) return;
  int var = t->leaves[pos];
  te_var_t *v = &p->vars[var];
  if (mode == TE_MODE_INIT && v->reduce) {
    nest(m, st, pos + 1, mode, consumed, versioned);
    return;
  }
  te_expr_t *vext;
  if (vector_leaf(m, st, pos, mode, &consumed, &vext)) {
    vector_nest(m, st, var, vext, mode, consumed);
    return;
  }
  loop_t l = {0};
  bool db = mode != TE_MODE_INIT && v->bind < 0 && !v->vthread && db_at(m, st, var);
  if (db) db_prologue(m, st, var);
  if (v->bind >= 0 && v->ann == TE_ANN_PARALLEL) parallel_begin(m, var, loop_extent(m, t, pos, st, mode, &consumed), &l);
  else if (v->bind >= 0) m->val[var] = te_em_id(m, v->bind);
  else if (v->vthread) l.var = -1; /* no loop: the statements inside are copied per value (te_emit_stmt.c) */
  else loop_begin(m, var, NULL, loop_extent(m, t, pos, st, mode, &consumed), &l);
  if (db) db_step(m, st, var, false);
  if (mode != TE_MODE_INIT) attached_at(m, st, var);
  LLVMBasicBlockRef merge = NULL;
  if (!hoist_guards(m, t, st, pos, mode, &consumed, &merge)) return;
  l.auto_vec = l.header && auto_vec_leaf(m, st, pos, mode, consumed);
  nest(m, st, pos + 1, mode, consumed, versioned);
  te_em_close_guard(m, merge);
  if (db) db_step(m, st, var, true);
  if ((v->bind < 0 && !v->vthread) || v->ann == TE_ANN_PARALLEL) loop_close(m, &l);
}

/* ---- stages ------------------------------------------------------------------------- */

/* Storage of an attached stage: a work-group global for shared (within the GPUs' static
 * limits), an alloca for local. */
static void stage_storage(te_em_t *m, int st) {
  te_tensor_t *t = &m->p->tensors[st];
  int64_t n = t->double_buffer ? 2 * t->storage : t->storage * t->vt_store; /* te_bounds.c: at most 2^24 a copy */
  LLVMTypeRef et = te_em_type(m, t->dtype, true), at = LLVMArrayType2(et, (uint64_t)n);
  if (t->double_buffer) { /* the prefetch registers (te_bounds.c bounds them) */
    int64_t r = 1;
    for (int i = 0; i < t->nleaves; i++)
      if (m->p->vars[t->leaves[i]].bind < 0) r *= m->p->vars[t->leaves[i]].cext;
    m->regs[st] = LLVMBuildAlloca(m->eb, LLVMArrayType2(et, (uint64_t)r), "prefetch");
    LLVMSetAlignment(m->regs[st], 16);
  }
  if (t->eff_scope != TE_SCOPE_SHARED) {
    m->buf[st] = LLVMBuildAlloca(m->eb, at, t->name);
    LLVMSetAlignment(m->buf[st], 16);
    return;
  }
  /* Static work-group memory the GPUs have: 48 KiB without opt-in on NVIDIA, 64 KiB of LDS on
   * AMD (the CPU has no such bound). */
  m->shared_bytes += (uint64_t)n * LLVMABISizeOfType(LLVMGetModuleDataLayout(m->mod), et);
  kiln_target_kind_t kind = m->job->target.kind;
  uint64_t cap = kind == KILN_TARGET_NVPTX ? 48 * 1024 : kind == KILN_TARGET_AMDGPU ? 64 * 1024 : UINT64_MAX;
  if (m->shared_bytes > cap) {
    te_em_fail(m, KC_COMPILE_ERROR("te: kernel %s needs %llu bytes of shared memory with %s; %s allows %llu: use "
                                   "smaller tiles",
                                   m->k->name, (unsigned long long)m->shared_bytes, t->name, m->job->target.id,
                                   (unsigned long long)cap));
    return;
  }
  char gname[256];
  snprintf(gname, sizeof(gname), "%s.%s", m->k->name, t->name);
  m->buf[st] = LLVMAddGlobalInAddressSpace(m->mod, at, gname, 3);
  LLVMSetLinkage(m->buf[st], LLVMInternalLinkage);
  LLVMSetInitializer(m->buf[st], LLVMGetPoison(at));
  LLVMSetAlignment(m->buf[st], 16);
}

void te_em_stage(te_em_t *m, int st) {
  if (m->p->tensors[st].kernel_arg < 0 && !m->buf[st]) stage_storage(m, st);
  if (m->err) return;
  nest(m, st, 0, TE_MODE_PLAIN, 0, false);
}
