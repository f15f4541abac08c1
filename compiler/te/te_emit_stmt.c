/* Statements of te stages (te_emit.h): the store of a value, the initialisation and the step
 * of a reduction, each under the guards the nest left to it; the same over vector lanes. */
#include <math.h>
#include <string.h>

#include "compiler/te/te_bounds.h"
#include "compiler/te/te_emit.h"
#include "compiler/te/te_expr.h"

static te_expr_t *in_leaves(te_em_t *m, int st, te_expr_t *e) {
  memset(m->sub, 0, (size_t)m->p->nvars * sizeof(*m->sub));
  te_stage_subst(m->p, st, m->sub);
  return te_simplify(m->p, te_subst(m->p, e, m->sub));
}

static LLVMValueRef identity(te_em_t *m, int op, int dt) {
  LLVMTypeRef t = te_em_type(m, dt, false);
  bool fp = te_em_is_fp(dt), un = te_is_unsigned(dt);
  unsigned w = fp ? 0 : LLVMGetIntTypeWidth(t);
  switch (op) {
  case TE_RSUM: return fp ? LLVMConstReal(t, 0) : LLVMConstInt(t, 0, 0);
  case TE_RPROD: return fp ? LLVMConstReal(t, 1) : LLVMConstInt(t, 1, 0);
  case TE_RMAX:
    if (fp) return LLVMConstReal(t, -INFINITY);
    return un ? LLVMConstInt(t, 0, 0) : LLVMConstInt(t, (unsigned long long)1 << (w - 1), 0);
  default:
    if (fp) return LLVMConstReal(t, INFINITY);
    return un ? LLVMConstAllOnes(t) : LLVMConstInt(t, ((unsigned long long)1 << (w - 1)) - 1, 0);
  }
}

/* Branches on guard `g` into a new block and sets *merge to the block after it (the caller
 * closes it); false when the guard could not be emitted (the error is recorded). */
bool te_em_open_guard(te_em_t *m, te_expr_t *g, LLVMBasicBlockRef *merge) {
  LLVMValueRef c = te_em_expr(m, te_simplify(m->p, g));
  if (!c) return false;
  LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "guard");
  *merge = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "guard.end");
  LLVMBuildCondBr(m->b, c, then, *merge);
  LLVMPositionBuilderAtEnd(m->b, then);
  return true;
}

void te_em_close_guard(te_em_t *m, LLVMBasicBlockRef merge) {
  if (!merge) return;
  LLVMBuildBr(m->b, merge);
  LLVMPositionBuilderAtEnd(m->b, merge);
}

/* A guard applies in this mode unless a loop bound or an outer branch consumed it; the
 * initialisation of a reduction skips those on reduce vars. */
bool te_em_guard_open(const te_tensor_t *t, int i, int mode, uint32_t consumed) {
  return !(consumed >> i & 1) && !(mode == TE_MODE_INIT && t->guard_red[i]);
}

/* acc (+) src by the reduce op; a sum of a float product contracts to llvm.fmuladd, as C
 * compilers do by default (FP_CONTRACT on): an FMA where the target has one. */
static LLVMValueRef combine(te_em_t *m, int op, int dt, LLVMValueRef acc, LLVMValueRef src, LLVMValueRef fb) {
  bool fp = te_em_is_fp(dt), un = te_is_unsigned(dt);
  if (op == TE_RSUM && fb) {
    LLVMTypeRef et = LLVMTypeOf(acc);
    unsigned id = LLVMLookupIntrinsicID("llvm.fmuladd", 12);
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(m->mod, id, &et, 1);
    LLVMValueRef ops[3] = {src, fb, acc};
    return LLVMBuildCall2(m->b, LLVMIntrinsicGetType(m->ctx, id, &et, 1), fn, ops, 3, "");
  }
  if (op == TE_RSUM) return fp ? LLVMBuildFAdd(m->b, acc, src, "") : LLVMBuildAdd(m->b, acc, src, "");
  if (op == TE_RPROD) return fp ? LLVMBuildFMul(m->b, acc, src, "") : LLVMBuildMul(m->b, acc, src, "");
  bool mx = op == TE_RMAX;
  LLVMValueRef c = fp ? LLVMBuildFCmp(m->b, mx ? LLVMRealOGT : LLVMRealOLT, src, acc, "")
                      : LLVMBuildICmp(m->b, mx ? (un ? LLVMIntUGT : LLVMIntSGT) : (un ? LLVMIntULT : LLVMIntSLT), src,
                                      acc, "");
  return LLVMBuildSelect(m->b, c, src, acc, "");
}

static LLVMValueRef value(te_em_t *m, te_expr_t *e, const te_vec_t *v) {
  return v ? te_em_splat(m, te_em_vexpr(m, e, v), v->width) : te_em_expr(m, e);
}

static LLVMValueRef load(te_em_t *m, int st, te_expr_t **idx, const te_vec_t *v) {
  return v ? te_em_vload(m, st, idx, v) : te_em_load(m, st, idx);
}

static void store(te_em_t *m, int st, te_expr_t **idx, LLVMValueRef x, const te_vec_t *v) {
  if (v) te_em_vstore(m, st, idx, x, v);
  else te_em_store(m, st, idx, x);
}

/* One step of a reduction: out[idx] = out[idx] (+) source where cond. */
static void accumulate(te_em_t *m, int st, te_expr_t **idx, const te_vec_t *v) {
  te_tensor_t *t = &m->p->tensors[st];
  te_expr_t *body = t->body, *source = in_leaves(m, st, body->args[0]);
  bool contract = te_em_is_fp(t->dtype) && body->op == TE_RSUM && source && source->kind == TE_BIN &&
                  source->op == TE_MUL;
  LLVMValueRef src, fb = NULL;
  if (contract) {
    src = value(m, source->args[0], v);
    fb = value(m, source->args[1], v);
    if (!fb) src = NULL;
  } else {
    src = value(m, source, v);
  }
  te_expr_t *c = body->args[1] ? in_leaves(m, st, body->args[1]) : NULL;
  LLVMValueRef cond = !c ? NULL : v ? te_em_vexpr(m, c, v) : te_em_expr(m, c);
  LLVMValueRef acc = load(m, st, idx, v);
  if (!src || !acc) return;
  LLVMValueRef r = combine(m, body->op, t->dtype, acc, src, fb);
  if (cond) r = LLVMBuildSelect(m->b, cond, r, acc, "");
  store(m, st, idx, r, v);
}

/* The prefetch register of this statement instance (double_buffer): its loops that are not
 * bound to threads, row-major; the vector var is the innermost leaf, so lanes are adjacent. */
static LLVMValueRef reg_address(te_em_t *m, int st) {
  const te_tensor_t *t = &m->p->tensors[st];
  LLVMValueRef i = LLVMConstInt(m->ity, 0, 0);
  for (int l = 0; l < t->nleaves; l++) {
    const te_var_t *x = &m->p->vars[t->leaves[l]];
    if (x->bind >= 0) continue;
    if (!m->val[t->leaves[l]]) {
      te_em_fail(m, KILN_STATUS(KILN_E_INTERNAL, "te: %s.%s has no value in its statement", t->name, x->name));
      return NULL;
    }
    i = LLVMBuildNSWMul(m->b, i, LLVMConstInt(m->ity, (unsigned long long)x->cext, 0), "");
    i = LLVMBuildNSWAdd(m->b, i, m->val[t->leaves[l]], "");
  }
  return te_em_gep(m, st, m->regs[st], i);
}

/* A double-buffered stage's statement: its value into the prefetch registers (TE_DB_LOAD),
 * or the registers into its storage (TE_DB_STORE), under the same guards. */
static void db_statement(te_em_t *m, int st, te_expr_t **idx, const te_vec_t *v) {
  const te_tensor_t *t = &m->p->tensors[st];
  LLVMValueRef r = reg_address(m, st), x;
  LLVMTypeRef et = te_em_type(m, t->dtype, true), vt = v ? LLVMVectorType(et, (unsigned)v->width) : et;
  if (!r) return;
  if (m->db_mode == TE_DB_LOAD) {
    if (!(x = value(m, in_leaves(m, st, t->body), v))) return;
    if (t->dtype == TE_BOOL) x = LLVMBuildZExt(m->b, x, vt, "");
    LLVMBuildStore(m->b, x, r);
    return;
  }
  x = LLVMBuildLoad2(m->b, vt, r, "");
  if (t->dtype == TE_BOOL) x = LLVMBuildICmp(m->b, LLVMIntNE, x, LLVMConstNull(vt), "");
  store(m, st, idx, x, v);
}

static void statement(te_em_t *m, int st, int mode, uint32_t consumed, const te_vec_t *v) {
  te_program_t *p = m->p;
  te_tensor_t *t = &p->tensors[st];
  te_expr_t *g = NULL;
  for (int i = 0; i < t->nguards; i++)
    if (te_em_guard_open(t, i, mode, consumed)) g = g ? te_bin(p, TE_AND, g, t->guards[i]) : t->guards[i];
  LLVMBasicBlockRef merge = NULL;
  if (g && !te_em_open_guard(m, g, &merge)) return;
  te_expr_t *idx[TE_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) idx[d] = t->val[d];
  if (m->db_mode != TE_DB_NONE) db_statement(m, st, idx, v);
  else if (t->body->kind != TE_REDUCE) store(m, st, idx, value(m, in_leaves(m, st, t->body), v), v);
  else if (mode == TE_MODE_INIT) store(m, st, idx, identity(m, t->body->op, t->dtype), v);
  else accumulate(m, st, idx, v);
  te_em_close_guard(m, merge);
}

/* The statement once per combination of its stage's vthread values (TVM's InjectVirtualThread,
 * unrolled at the innermost point): each copy sees its vthread vars as constants, writes its
 * own elements (its own storage copy for per-work-item stages), and the loops around it,
 * barriers included, run once for all copies. */
static void copies(te_em_t *m, int st, int mode, uint32_t consumed, const te_vec_t *v) {
  const te_tensor_t *t = &m->p->tensors[st];
  int64_t n = 1;
  for (int i = 0; i < t->nvt; i++) n *= m->p->vars[t->vt[i]].cext;
  for (int64_t c = 0; c < n && !m->err; c++) {
    int64_t r = c;
    for (int i = t->nvt - 1; i >= 0; i--) {
      int64_t e = m->p->vars[t->vt[i]].cext;
      m->val[t->vt[i]] = LLVMConstInt(m->ity, (unsigned long long)(r % e), 0);
      r /= e;
    }
    statement(m, st, mode, consumed, v);
  }
  for (int i = 0; i < t->nvt; i++) m->val[t->vt[i]] = NULL;
}

void te_em_statement(te_em_t *m, int st, int mode, uint32_t consumed) { copies(m, st, mode, consumed, NULL); }

void te_em_vec_statement(te_em_t *m, int st, int mode, uint32_t consumed, const te_vec_t *v) {
  copies(m, st, mode, consumed, v);
}

bool te_em_vec_ok(te_em_t *m, int st, int mode, uint32_t consumed, int var) {
  const te_tensor_t *t = &m->p->tensors[st];
  bool out = false;
  for (int d = 0; d < t->ndim; d++) out |= te_em_uses(t->val[d], var);
  if (!out) return false; /* every lane would update one element: a reduction across lanes */
  for (int i = 0; i < t->nguards; i++)
    if (te_em_guard_open(t, i, mode, consumed) && te_em_uses(t->guards[i], var)) return false;
  return true;
}

bool te_em_contiguous(te_em_t *m, int st, int mode, uint32_t consumed, int var) {
  const te_tensor_t *t = &m->p->tensors[st];
  te_expr_t *idx[TE_MAX_DIMS], *body = t->body;
  for (int d = 0; d < t->ndim; d++) idx[d] = t->val[d];
  if (!te_em_vec_ok(m, st, mode, consumed, var) || te_em_stride(m, st, idx, var) != 1) return false;
  if (body->kind == TE_REDUCE && body->args[1] && !te_em_loads_contiguous(m, in_leaves(m, st, body->args[1]), var))
    return false;
  return te_em_loads_contiguous(m, in_leaves(m, st, body->kind == TE_REDUCE ? body->args[0] : body), var);
}
