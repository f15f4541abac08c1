/* Loop nests of one te kernel emitted as the kernel dialect (docs/kernels.md) through LLVM's
 * C API: a void function in section "kiln.kernel", ids from __kiln_group_id/__kiln_local_id,
 * shared stages as address-space-3 globals with __kiln_barrier(), local stages as allocas,
 * llvm.loop metadata for unroll and vectorize. */
#include <llvm-c/DebugInfo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/te/te.h"

typedef struct em {
  kc_job_t *job;
  kc_te_program_t *p;
  te_kernel_t *k;
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b, eb; /* eb: at the end of the entry block (allocas, ids) */
  LLVMValueRef fn;
  LLVMTypeRef ity, i1, i8, i32, i64, ptr;
  LLVMValueRef ids[6];
  te_expr_t **sub;
  uint64_t shared_bytes;
  kiln_status_t err;
} em_t;

static LLVMTypeRef ty(em_t *m, int dt, bool mem) {
  switch (dt) {
  case TE_BOOL: return mem ? m->i8 : m->i1;
  case TE_I8: case TE_U8: return m->i8;
  case TE_I16: case TE_U16: return LLVMInt16TypeInContext(m->ctx);
  case TE_I32: case TE_U32: return m->i32;
  case TE_I64: case TE_U64: return m->i64;
  case TE_F16: return LLVMHalfTypeInContext(m->ctx);
  case TE_F32: return LLVMFloatTypeInContext(m->ctx);
  case TE_F64: return LLVMDoubleTypeInContext(m->ctx);
  default: return m->i32;
  }
}

static bool is_unsigned(int dt) { return dt >= TE_U8 && dt <= TE_U64; }
static bool is_fp(int dt) { return dt == TE_F16 || dt == TE_F32 || dt == TE_F64; }

static void fail(em_t *m, kiln_status_t s) {
  if (!m->err) m->err = s;
  else kiln_status_free(s);
}

static LLVMValueRef builtin_id(em_t *m, int which) {
  if (m->ids[which]) return m->ids[which];
  LLVMTypeRef ft = LLVMFunctionType(m->i32, &m->i32, 1, 0);
  LLVMValueRef f = kc_get_function(m->mod, which < 3 ? "__kiln_group_id" : "__kiln_local_id", ft);
  LLVMValueRef d = LLVMConstInt(m->i32, (unsigned)(which % 3), 0);
  LLVMValueRef v = LLVMBuildCall2(m->eb, ft, f, &d, 1, which < 3 ? "bid" : "tid");
  if (m->ity != m->i32) v = LLVMBuildZExt(m->eb, v, m->ity, "");
  return m->ids[which] = v;
}

static void barrier(em_t *m) {
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

/* ---- expressions -------------------------------------------------------------------- */

static LLVMValueRef emit(em_t *m, te_expr_t *e);

/* Address of element idx[] (index expressions over leaf vars) of tensor t. */
static LLVMValueRef address(em_t *m, int tid, te_expr_t **idx) {
  kc_te_program_t *p = m->p;
  te_tensor_t *t = &p->tensors[tid];
  int dt = p->index_dtype;
  te_expr_t *flat = NULL;
  LLVMValueRef base;
  for (int d = 0; d < t->ndim; d++)
    if (idx[d]->dtype != dt) {
      te_expr_t *c = te_node(p, TE_CAST, 0, dt, 1);
      if (!c) return NULL;
      c->args[0] = idx[d];
      idx[d] = c;
    }
  if (t->kernel_arg >= 0) {
    base = LLVMGetParam(m->fn, (unsigned)t->kernel_arg);
    for (int d = 0; d < t->ndim; d++)
      flat = flat ? te_bin(p, TE_ADD, te_bin(p, TE_MUL, flat, t->shape[d]), idx[d]) : idx[d];
  } else if (t->buf) {
    base = t->buf;
    for (int d = 0; d < t->ndim; d++) {
      te_expr_t *rel = te_bin(p, TE_SUB, idx[d], t->rmin[d]);
      flat = flat ? te_bin(p, TE_ADD, te_bin(p, TE_MUL, flat, te_int(p, t->rext[d], dt)), rel) : rel;
    }
  } else {
    fail(m, KC_COMPILE_ERROR("te: kernel %s reads %s, which has no storage here", m->k->name, t->name));
    return NULL;
  }
  LLVMValueRef off = emit(m, te_simplify(p, flat));
  if (!off) return NULL;
  if (LLVMTypeOf(off) != m->i64) off = LLVMBuildSExt(m->b, off, m->i64, "");
  return LLVMBuildInBoundsGEP2(m->b, ty(m, t->dtype, true), base, &off, 1, "");
}

static LLVMValueRef load_elem(em_t *m, int tid, te_expr_t **idx) {
  LLVMValueRef a = address(m, tid, idx);
  if (!a) return NULL;
  int dt = m->p->tensors[tid].dtype;
  LLVMValueRef v = LLVMBuildLoad2(m->b, ty(m, dt, true), a, "");
  if (dt == TE_BOOL) v = LLVMBuildICmp(m->b, LLVMIntNE, v, LLVMConstInt(m->i8, 0, 0), "");
  return v;
}

static void store_elem(em_t *m, int tid, te_expr_t **idx, LLVMValueRef v) {
  LLVMValueRef a = address(m, tid, idx);
  if (!a || !v) return;
  if (m->p->tensors[tid].dtype == TE_BOOL) v = LLVMBuildZExt(m->b, v, m->i8, "");
  LLVMBuildStore(m->b, v, a);
}

static LLVMValueRef cast(em_t *m, LLVMValueRef v, int from, int to) {
  if (from == to) return v;
  LLVMTypeRef t = ty(m, to, false);
  if (to == TE_BOOL)
    return is_fp(from) ? LLVMBuildFCmp(m->b, LLVMRealUNE, v, LLVMConstReal(LLVMTypeOf(v), 0), "")
                       : LLVMBuildICmp(m->b, LLVMIntNE, v, LLVMConstInt(LLVMTypeOf(v), 0, 0), "");
  if (is_fp(from) && is_fp(to)) return LLVMBuildFPCast(m->b, v, t, "");
  if (is_fp(from)) return is_unsigned(to) ? LLVMBuildFPToUI(m->b, v, t, "") : LLVMBuildFPToSI(m->b, v, t, "");
  bool src_unsigned = is_unsigned(from) || from == TE_BOOL;
  if (is_fp(to)) return src_unsigned ? LLVMBuildUIToFP(m->b, v, t, "") : LLVMBuildSIToFP(m->b, v, t, "");
  return LLVMBuildIntCast2(m->b, v, t, !src_unsigned, "");
}

static LLVMValueRef call_math(em_t *m, const char *name, LLVMValueRef *args, int n, int dt) {
  bool half = dt == TE_F16;
  LLVMTypeRef ft_el = half ? LLVMFloatTypeInContext(m->ctx) : ty(m, dt, false);
  LLVMValueRef a[3];
  for (int i = 0; i < n; i++) a[i] = half ? LLVMBuildFPExt(m->b, args[i], ft_el, "") : args[i];
  char cname[24];
  snprintf(cname, sizeof(cname), "%s%s", name, dt == TE_F64 ? "" : "f");
  LLVMTypeRef params[3] = {ft_el, ft_el, ft_el};
  LLVMTypeRef ft = LLVMFunctionType(ft_el, params, (unsigned)n, 0);
  LLVMValueRef f = kc_get_function(m->mod, cname, ft);
  LLVMValueRef r = LLVMBuildCall2(m->b, ft, f, a, (unsigned)n, "");
  return half ? LLVMBuildFPTrunc(m->b, r, ty(m, TE_F16, false), "") : r;
}

static LLVMValueRef emit_bin(em_t *m, te_expr_t *e) {
  kc_te_program_t *p = m->p;
  int dt = e->args[0]->dtype;
  LLVMValueRef a = emit(m, e->args[0]), b = emit(m, e->args[1]);
  if (!a || !b) return NULL;
  bool fp = is_fp(dt), un = is_unsigned(dt) || dt == TE_BOOL;
  bool idx = dt == p->index_dtype;
  LLVMBuilderRef B = m->b;
  int64_t lo, hi;
  switch (e->op) {
  case TE_ADD:
    if (fp) return LLVMBuildFAdd(B, a, b, "");
    return idx ? LLVMBuildNSWAdd(B, a, b, "") : LLVMBuildAdd(B, a, b, "");
  case TE_SUB:
    if (fp) return LLVMBuildFSub(B, a, b, "");
    return idx ? LLVMBuildNSWSub(B, a, b, "") : LLVMBuildSub(B, a, b, "");
  case TE_MUL:
    if (fp) return LLVMBuildFMul(B, a, b, "");
    return idx ? LLVMBuildNSWMul(B, a, b, "") : LLVMBuildMul(B, a, b, "");
  case TE_DIV: return fp ? LLVMBuildFDiv(B, a, b, "") : un ? LLVMBuildUDiv(B, a, b, "") : LLVMBuildSDiv(B, a, b, "");
  case TE_MOD: return fp ? LLVMBuildFRem(B, a, b, "") : un ? LLVMBuildURem(B, a, b, "") : LLVMBuildSRem(B, a, b, "");
  case TE_FLOORDIV:
  case TE_FLOORMOD: {
    bool is_div = e->op == TE_FLOORDIV;
    int64_t c;
    if (un) return is_div ? LLVMBuildUDiv(B, a, b, "") : LLVMBuildURem(B, a, b, "");
    /* Non-negative numerator, positive divisor: C division is floor division. */
    int64_t dlo, dhi;
    if (te_const_bounds(p, e->args[1], &dlo, &dhi) && dlo >= 0 && te_const_bounds(p, e->args[0], &lo, &hi) &&
        lo >= 0)
      return is_div ? LLVMBuildUDiv(B, a, b, "") : LLVMBuildURem(B, a, b, "");
    (void)c;
    LLVMValueRef q = LLVMBuildSDiv(B, a, b, ""), r = LLVMBuildSRem(B, a, b, "");
    LLVMValueRef zero = LLVMConstInt(LLVMTypeOf(a), 0, 0);
    LLVMValueRef nz = LLVMBuildICmp(B, LLVMIntNE, r, zero, "");
    LLVMValueRef sd = LLVMBuildICmp(B, LLVMIntSLT, LLVMBuildXor(B, r, b, ""), zero, "");
    LLVMValueRef adj = LLVMBuildAnd(B, nz, sd, "");
    if (is_div) return LLVMBuildSub(B, q, LLVMBuildZExt(B, adj, LLVMTypeOf(a), ""), "");
    return LLVMBuildAdd(B, r, LLVMBuildSelect(B, adj, b, zero, ""), "");
  }
  case TE_MIN:
  case TE_MAX: {
    bool mn = e->op == TE_MIN;
    LLVMValueRef c = fp ? LLVMBuildFCmp(B, mn ? LLVMRealOLT : LLVMRealOGT, a, b, "")
                        : LLVMBuildICmp(B, mn ? (un ? LLVMIntULT : LLVMIntSLT) : (un ? LLVMIntUGT : LLVMIntSGT), a, b, "");
    return LLVMBuildSelect(B, c, a, b, "");
  }
  case TE_EQ: case TE_NE: case TE_LT: case TE_LE: case TE_GT: case TE_GE: {
    static const LLVMRealPredicate fpp[] = {LLVMRealOEQ, LLVMRealUNE, LLVMRealOLT, LLVMRealOLE, LLVMRealOGT, LLVMRealOGE};
    static const LLVMIntPredicate sp[] = {LLVMIntEQ, LLVMIntNE, LLVMIntSLT, LLVMIntSLE, LLVMIntSGT, LLVMIntSGE};
    static const LLVMIntPredicate up[] = {LLVMIntEQ, LLVMIntNE, LLVMIntULT, LLVMIntULE, LLVMIntUGT, LLVMIntUGE};
    int i = e->op - TE_EQ;
    return fp ? LLVMBuildFCmp(B, fpp[i], a, b, "") : LLVMBuildICmp(B, un ? up[i] : sp[i], a, b, "");
  }
  case TE_AND: case TE_BITAND: return LLVMBuildAnd(B, a, b, "");
  case TE_OR: case TE_BITOR: return LLVMBuildOr(B, a, b, "");
  case TE_BITXOR: return LLVMBuildXor(B, a, b, "");
  case TE_SHL: return LLVMBuildShl(B, a, b, "");
  case TE_SHR: return un ? LLVMBuildLShr(B, a, b, "") : LLVMBuildAShr(B, a, b, "");
  default: break;
  }
  fail(m, KILN_STATUS(KILN_E_INTERNAL, "te: unhandled binary op %d", e->op));
  return NULL;
}

static LLVMValueRef emit(em_t *m, te_expr_t *e) {
  if (m->err || !e) {
    if (!e) fail(m, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory building expressions"));
    return NULL;
  }
  kc_te_program_t *p = m->p;
  switch (e->kind) {
  case TE_INT: return LLVMConstInt(ty(m, e->dtype, false), (unsigned long long)e->i, !is_unsigned(e->dtype));
  case TE_FLOAT: return LLVMConstReal(ty(m, e->dtype, false), e->f);
  case TE_VAR: {
    te_var_t *v = &p->vars[e->ref];
    if (!v->value) {
      fail(m, KC_COMPILE_ERROR("te: kernel %s uses var %s where it has no value (compute_at under a var the stage "
                               "does not have?)",
                               m->k->name, v->name));
      return NULL;
    }
    return v->value;
  }
  case TE_LOAD: {
    te_expr_t *idx[TE_MAX_DIMS];
    for (int d = 0; d < e->nargs; d++) idx[d] = e->args[d];
    return load_elem(m, e->ref, idx);
  }
  case TE_BIN: return emit_bin(m, e);
  case TE_UN: {
    LLVMValueRef a = emit(m, e->args[0]);
    if (!a) return NULL;
    if (e->op == TE_NOT) return LLVMBuildNot(m->b, a, "");
    return is_fp(e->dtype) ? LLVMBuildFNeg(m->b, a, "") : LLVMBuildNeg(m->b, a, "");
  }
  case TE_CAST: {
    LLVMValueRef a = emit(m, e->args[0]);
    return a ? cast(m, a, e->args[0]->dtype, e->dtype) : NULL;
  }
  case TE_SELECT: {
    if (e->op == 1) { /* if_then_else: branches; LLVM if-converts (masked loads) where legal */
      LLVMValueRef c = emit(m, e->args[0]);
      if (!c) return NULL;
      LLVMBasicBlockRef tb = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "then");
      LLVMBasicBlockRef fb = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "else");
      LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "endif");
      LLVMBuildCondBr(m->b, c, tb, fb);
      LLVMPositionBuilderAtEnd(m->b, tb);
      LLVMValueRef a = emit(m, e->args[1]);
      LLVMBasicBlockRef ta = LLVMGetInsertBlock(m->b);
      LLVMBuildBr(m->b, done);
      LLVMPositionBuilderAtEnd(m->b, fb);
      LLVMValueRef b = emit(m, e->args[2]);
      LLVMBasicBlockRef fa = LLVMGetInsertBlock(m->b);
      LLVMBuildBr(m->b, done);
      LLVMPositionBuilderAtEnd(m->b, done);
      if (!a || !b) return NULL;
      LLVMValueRef phi = LLVMBuildPhi(m->b, LLVMTypeOf(a), "");
      LLVMValueRef vals[2] = {a, b};
      LLVMBasicBlockRef blocks[2] = {ta, fa};
      LLVMAddIncoming(phi, vals, blocks, 2);
      return phi;
    }
    LLVMValueRef c = emit(m, e->args[0]), a = emit(m, e->args[1]), b = emit(m, e->args[2]);
    return c && a && b ? LLVMBuildSelect(m->b, c, a, b, "") : NULL;
  }
  case TE_CALL: {
    LLVMValueRef a[3];
    for (int i = 0; i < e->nargs; i++)
      if (!(a[i] = emit(m, e->args[i]))) return NULL;
    const char *name = te_math_names[e->op];
    int dt = e->dtype;
    if (strcmp(name, "abs") == 0) {
      if (is_fp(dt)) return call_math(m, "fabs", a, 1, dt);
      if (is_unsigned(dt)) return a[0];
      LLVMValueRef neg = LLVMBuildICmp(m->b, LLVMIntSLT, a[0], LLVMConstInt(LLVMTypeOf(a[0]), 0, 0), "");
      return LLVMBuildSelect(m->b, neg, LLVMBuildNeg(m->b, a[0], ""), a[0], "");
    }
    if (strcmp(name, "sigmoid") == 0) {
      LLVMValueRef nx = LLVMBuildFNeg(m->b, a[0], "");
      LLVMValueRef ex = call_math(m, "exp", &nx, 1, dt);
      LLVMValueRef one = LLVMConstReal(LLVMTypeOf(a[0]), 1.0);
      return LLVMBuildFDiv(m->b, one, LLVMBuildFAdd(m->b, one, ex, ""), "");
    }
    return call_math(m, name, a, e->nargs, dt);
  }
  default: break;
  }
  fail(m, KC_COMPILE_ERROR("te: a reduce can only be the whole body of a compute"));
  return NULL;
}

/* ---- loops --------------------------------------------------------------------------- */

typedef struct loop {
  LLVMBasicBlockRef header, exit;
  LLVMValueRef phi;
  te_var_t *var;
} loop_t;

static void loop_begin(em_t *m, te_var_t *v, te_expr_t *extent, loop_t *l) {
  LLVMValueRef ext = emit(m, extent);
  if (!ext) return;
  l->var = v;
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(m->b);
  l->header = LLVMAppendBasicBlockInContext(m->ctx, m->fn, v->name);
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "body");
  l->exit = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "exit");
  LLVMBuildBr(m->b, l->header);
  LLVMPositionBuilderAtEnd(m->b, l->header);
  l->phi = LLVMBuildPhi(m->b, m->ity, v->name);
  LLVMValueRef zero = LLVMConstInt(m->ity, 0, 0);
  LLVMAddIncoming(l->phi, &zero, &pre, 1);
  LLVMValueRef c = LLVMBuildICmp(m->b, LLVMIntSLT, l->phi, ext, "");
  LLVMBuildCondBr(m->b, c, body, l->exit);
  LLVMPositionBuilderAtEnd(m->b, body);
  v->value = l->phi;
}

/* GPUs have no vector loop: a vectorised loop is unrolled there, and LLVM's load/store
 * vectoriser merges the adjacent accesses where it can. */
static int effective_ann(const em_t *m, const te_var_t *v) {
  return v->ann == TE_ANN_VECTORIZE && m->job->target.kind != KILN_TARGET_CPU ? TE_ANN_UNROLL : v->ann;
}

static LLVMMetadataRef md_flag(em_t *m, const char *name, LLVMValueRef val) {
  LLVMMetadataRef ops[2] = {LLVMMDStringInContext2(m->ctx, name, strlen(name)), NULL};
  if (val) ops[1] = LLVMValueAsMetadata(val);
  return LLVMMDNodeInContext2(m->ctx, ops, val ? 2 : 1);
}

static void loop_end(em_t *m, loop_t *l) {
  if (m->err || !l->header) return;
  te_var_t *v = l->var;
  LLVMValueRef next = LLVMBuildNSWAdd(m->b, l->phi, LLVMConstInt(m->ity, 1, 0), "");
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(m->b);
  LLVMValueRef br = LLVMBuildBr(m->b, l->header);
  LLVMAddIncoming(l->phi, &next, &latch, 1);
  LLVMMetadataRef ops[4];
  unsigned n = 1;
  int ann = effective_ann(m, v);
  if (ann == TE_ANN_UNROLL) {
    if (v->cext > 0 && v->cext <= 64) ops[n++] = md_flag(m, "llvm.loop.unroll.full", NULL);
    else ops[n++] = md_flag(m, "llvm.loop.unroll.enable", NULL); /* a symbolic extent: LLVM's cost model decides */
  } else if (ann == TE_ANN_VECTORIZE) {
    ops[n++] = md_flag(m, "llvm.loop.vectorize.enable", LLVMConstInt(m->i1, 1, 0));
  }
  if (n > 1) {
    LLVMMetadataRef tmp = LLVMTemporaryMDNode(m->ctx, NULL, 0);
    ops[0] = tmp;
    LLVMMetadataRef id = LLVMMDNodeInContext2(m->ctx, ops, n);
    LLVMMetadataReplaceAllUsesWith(tmp, id);
    LLVMSetMetadata(br, LLVMGetMDKindIDInContext(m->ctx, "llvm.loop", 9), LLVMMetadataAsValue(m->ctx, id));
  }
  LLVMPositionBuilderAtEnd(m->b, l->exit);
  v->value = NULL;
}

/* ---- statements ---------------------------------------------------------------------- */

enum { MODE_PLAIN, MODE_INIT, MODE_MAIN };

static te_expr_t *in_leaves(em_t *m, int st, te_expr_t *e) {
  memset(m->sub, 0, (size_t)m->p->nvars * sizeof(*m->sub));
  te_stage_subst(m->p, st, m->sub);
  return te_simplify(m->p, te_subst(m->p, e, m->sub));
}

static LLVMValueRef identity(em_t *m, int op, int dt) {
  LLVMTypeRef t = ty(m, dt, false);
  unsigned w = is_fp(dt) ? 0 : LLVMGetIntTypeWidth(t);
  switch (op) {
  case TE_RSUM: return is_fp(dt) ? LLVMConstReal(t, 0) : LLVMConstInt(t, 0, 0);
  case TE_RPROD: return is_fp(dt) ? LLVMConstReal(t, 1) : LLVMConstInt(t, 1, 0);
  case TE_RMAX:
    if (is_fp(dt)) return LLVMConstReal(t, -INFINITY);
    return is_unsigned(dt) ? LLVMConstInt(t, 0, 0) : LLVMConstInt(t, (unsigned long long)1 << (w - 1), 0);
  default:
    if (is_fp(dt)) return LLVMConstReal(t, INFINITY);
    return is_unsigned(dt) ? LLVMConstAllOnes(t) : LLVMConstInt(t, ((unsigned long long)1 << (w - 1)) - 1, 0);
  }
}

/* Branches on guard `g` into a new block and sets *merge to the block after it (the caller
 * closes it); false when the guard could not be emitted (the error is recorded). */
static bool open_guard(em_t *m, te_expr_t *g, LLVMBasicBlockRef *merge) {
  LLVMValueRef c = emit(m, te_simplify(m->p, g));
  if (!c) return false;
  LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "guard");
  *merge = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "guard.end");
  LLVMBuildCondBr(m->b, c, then, *merge);
  LLVMPositionBuilderAtEnd(m->b, then);
  return true;
}

static void statement(em_t *m, int st, int mode, uint32_t consumed) {
  kc_te_program_t *p = m->p;
  te_tensor_t *t = &p->tensors[st];
  te_expr_t *g = NULL;
  for (int i = 0; i < t->nguards; i++)
    if (!(consumed >> i & 1) && !(mode == MODE_INIT && t->guard_red[i]))
      g = g ? te_bin(p, TE_AND, g, t->guards[i]) : t->guards[i];
  LLVMBasicBlockRef merge = NULL;
  if (g && !open_guard(m, g, &merge)) return;
  te_expr_t *idx[TE_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) idx[d] = t->val[d];
  te_expr_t *body = t->body;
  if (body->kind != TE_REDUCE) {
    store_elem(m, st, idx, emit(m, in_leaves(m, st, body)));
  } else if (mode == MODE_INIT) {
    store_elem(m, st, idx, identity(m, body->op, t->dtype));
  } else {
    int dt = t->dtype;
    bool fp = is_fp(dt), un = is_unsigned(dt);
    te_expr_t *source = in_leaves(m, st, body->args[0]);
    /* acc + a*b contracts to llvm.fmuladd, as C compilers do by default (FP_CONTRACT on):
     * an FMA where the target has one. */
    bool contract = fp && body->op == TE_RSUM && source && source->kind == TE_BIN && source->op == TE_MUL;
    LLVMValueRef src = NULL, fa = NULL, fb = NULL;
    if (contract) {
      fa = emit(m, source->args[0]);
      fb = emit(m, source->args[1]);
      src = fa && fb ? fa : NULL;
    } else {
      src = emit(m, source);
    }
    LLVMValueRef cond = body->args[1] ? emit(m, in_leaves(m, st, body->args[1])) : NULL;
    LLVMValueRef acc = load_elem(m, st, idx);
    if (src && acc) {
      LLVMValueRef r;
      switch (body->op) {
      case TE_RSUM:
        if (contract) {
          LLVMTypeRef et = LLVMTypeOf(acc);
          unsigned id = LLVMLookupIntrinsicID("llvm.fmuladd", 12);
          LLVMValueRef fn = LLVMGetIntrinsicDeclaration(m->mod, id, &et, 1);
          LLVMValueRef ops[3] = {fa, fb, acc};
          r = LLVMBuildCall2(m->b, LLVMIntrinsicGetType(m->ctx, id, &et, 1), fn, ops, 3, "");
        } else {
          r = fp ? LLVMBuildFAdd(m->b, acc, src, "") : LLVMBuildAdd(m->b, acc, src, "");
        }
        break;
      case TE_RPROD: r = fp ? LLVMBuildFMul(m->b, acc, src, "") : LLVMBuildMul(m->b, acc, src, ""); break;
      default: {
        bool mx = body->op == TE_RMAX;
        LLVMValueRef c = fp ? LLVMBuildFCmp(m->b, mx ? LLVMRealOGT : LLVMRealOLT, src, acc, "")
                            : LLVMBuildICmp(m->b, mx ? (un ? LLVMIntUGT : LLVMIntSGT) : (un ? LLVMIntULT : LLVMIntSLT),
                                            src, acc, "");
        r = LLVMBuildSelect(m->b, c, src, acc, "");
      }
      }
      if (cond) r = LLVMBuildSelect(m->b, cond, r, acc, "");
      store_elem(m, st, idx, r);
    }
  }
  if (merge) {
    LLVMBuildBr(m->b, merge);
    LLVMPositionBuilderAtEnd(m->b, merge);
  }
}

static void stage(em_t *m, int st);

static void attached_at(em_t *m, int st, int var) {
  kc_te_program_t *p = m->p;
  for (int j = 0; j < p->ntensors && !m->err; j++) {
    te_tensor_t *a = &p->tensors[j];
    if (!a->in_kernel || a->attach_stage != st || a->attach_var != var) continue;
    bool sh = a->eff_scope == TE_SCOPE_SHARED;
    if (sh) barrier(m);
    stage(m, j);
    if (sh) barrier(m);
  }
}

static int first_reduce_leaf(const kc_te_program_t *p, const te_tensor_t *t) {
  if (t->body->kind != TE_REDUCE) return -1;
  for (int i = 0; i < t->nleaves; i++)
    if (p->vars[t->leaves[i]].reduce) return i;
  return t->nleaves;
}

/* Does any stage attached to `st` sit at leaf position >= pos? Loops holding one keep their
 * full extent (their bodies may hold barriers, which every work-item must reach). */
static bool attached_inside(em_t *m, int st, int pos) {
  kc_te_program_t *p = m->p;
  const te_tensor_t *t = &p->tensors[st];
  for (int j = 0; j < p->ntensors; j++) {
    const te_tensor_t *a = &p->tensors[j];
    if (!a->in_kernel || a->attach_stage != st) continue;
    for (int i = pos; i < t->nleaves; i++)
      if (t->leaves[i] == a->attach_var) return true;
  }
  return false;
}

/* A guard `e < bound` that is `v + rest < bound` with `rest` known outside v's loop becomes
 * the loop bound `v < bound - rest`: the partial tile then runs fewer iterations instead of
 * testing every one, and the loop stays vectorisable. Returns the tightened extent or NULL. */
static te_expr_t *tighten(em_t *m, const te_tensor_t *t, int pos, te_expr_t *g) {
  kc_te_program_t *p = m->p;
  if (g->kind != TE_BIN || g->op != TE_LT || g->args[0]->dtype != p->index_dtype) return NULL;
  int v = t->leaves[pos];
  te_expr_t *d = te_simplify(p, te_bin(p, TE_SUB, g->args[0], g->args[1]));
  te_expr_t *bound = te_simplify(p, te_bin(p, TE_SUB, te_varref(p, v), d));
  bool *inner = calloc((size_t)p->nvars, sizeof(bool));
  if (!inner) return NULL;
  for (int i = pos; i < t->nleaves; i++) inner[t->leaves[i]] = true;
  bool ok = bound && !te_uses_var(bound, inner);
  free(inner);
  return ok ? bound : NULL;
}

/* Does g use no leaf of t after position pos (all its vars have values here)? */
static bool defined_at(em_t *m, const te_tensor_t *t, int pos, const te_expr_t *g) {
  kc_te_program_t *p = m->p;
  bool *inner = calloc((size_t)p->nvars, sizeof(bool));
  if (!inner) return false;
  for (int i = pos + 1; i < t->nleaves; i++) inner[t->leaves[i]] = true;
  bool ok = !te_uses_var(g, inner);
  free(inner);
  return ok;
}

/* The condition under which every guard of t that depends on the leaves from `pos` on
 * holds for all their values (leaves from pos range over their extents), or NULL if none
 * can be bounded so. *out_mask gets the guards it covers. */
static te_expr_t *full_tile(em_t *m, const te_tensor_t *t, int pos, int mode, uint32_t consumed,
                            uint32_t *out_mask) {
  kc_te_program_t *p = m->p;
  bool *relax = calloc((size_t)p->nvars * 2, sizeof(bool)), *bound = relax + p->nvars;
  if (!relax) return NULL;
  /* Bound leaves take the work-item's id, which may exceed the var's extent (a guard says
   * so): guards on them stay. */
  for (int i = pos; i < t->nleaves; i++) {
    relax[t->leaves[i]] = p->vars[t->leaves[i]].bind < 0;
    bound[t->leaves[i]] = p->vars[t->leaves[i]].bind >= 0;
  }
  te_expr_t *cond = NULL;
  for (int i = 0; i < t->nguards; i++) {
    te_expr_t *g = t->guards[i];
    if (consumed >> i & 1 || (mode == MODE_INIT && t->guard_red[i]) || !te_uses_var(g, relax) ||
        te_uses_var(g, bound))
      continue;
    if (g->kind != TE_BIN || g->op < TE_LT || g->op > TE_GE || g->args[0]->dtype != p->index_dtype) continue;
    te_expr_t *d = te_simplify(p, te_bin(p, TE_SUB, g->args[0], g->args[1])), *lo, *hi;
    if (!d || !te_sym_bounds(p, d, relax, &lo, &hi)) continue;
    int dt = p->index_dtype;
    te_expr_t *c = g->op == TE_LT ? te_bin(p, TE_LT, hi, te_int(p, 0, dt))
                 : g->op == TE_LE ? te_bin(p, TE_LE, hi, te_int(p, 0, dt))
                 : g->op == TE_GT ? te_bin(p, TE_GT, lo, te_int(p, 0, dt))
                                  : te_bin(p, TE_GE, lo, te_int(p, 0, dt));
    cond = cond ? te_bin(p, TE_AND, cond, c) : c;
    *out_mask |= 1u << i;
  }
  free(relax);
  return cond;
}

static void nest(em_t *m, int st, int pos, int mode, uint32_t consumed, bool versioned) {
  kc_te_program_t *p = m->p;
  te_tensor_t *t = &p->tensors[st];
  if (m->err) return;
  int p0 = first_reduce_leaf(p, t);
  if (mode == MODE_PLAIN && pos == p0) {
    nest(m, st, pos, MODE_INIT, consumed, versioned);
    nest(m, st, pos, MODE_MAIN, consumed, versioned);
    return;
  }
  if (pos == t->nleaves) {
    statement(m, st, mode, consumed);
    return;
  }
  if (!versioned && !attached_inside(m, st, pos)) {
    uint32_t full = 0;
    te_expr_t *c = full_tile(m, t, pos, mode, consumed, &full);
    if (c) {
      /* Loop versioning: a whole tile inside the tensor runs without guards. */
      LLVMValueRef cv = emit(m, te_simplify(p, c));
      if (!cv) return;
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
      return;
    }
  }
  te_var_t *v = &p->vars[t->leaves[pos]];
  if (mode == MODE_INIT && v->reduce) {
    nest(m, st, pos + 1, mode, consumed, versioned);
    return;
  }
  loop_t l = {0};
  if (v->bind >= 0) {
    v->value = builtin_id(m, v->bind);
  } else {
    te_expr_t *ext = v->extent;
    /* An unrolled loop keeps its constant trip count (register tiles stay registers): its
     * guards stay predicates on the statement. */
    if (effective_ann(m, v) != TE_ANN_UNROLL && !attached_inside(m, st, pos)) {
      for (int i = 0; i < t->nguards; i++) {
        if (consumed >> i & 1 || (mode == MODE_INIT && t->guard_red[i])) continue;
        te_expr_t *b = tighten(m, t, pos, t->guards[i]);
        if (!b) continue;
        ext = te_simplify(p, te_bin(p, TE_MIN, ext, b));
        consumed |= 1u << i;
      }
    }
    loop_begin(m, v, ext, &l);
  }
  if (mode != MODE_INIT) attached_at(m, st, t->leaves[pos]);
  /* Guards whose vars are all defined by now wrap the rest of the nest instead of each
   * statement (not around barriers: only without stages attached further in). */
  LLVMBasicBlockRef merge = NULL;
  if (!attached_inside(m, st, pos + 1)) {
    te_expr_t *g = NULL;
    for (int i = 0; i < t->nguards; i++) {
      if (consumed >> i & 1 || (mode == MODE_INIT && t->guard_red[i])) continue;
      if (!defined_at(m, t, pos, t->guards[i])) continue;
      g = g ? te_bin(p, TE_AND, g, t->guards[i]) : t->guards[i];
      consumed |= 1u << i;
    }
    if (g && !open_guard(m, g, &merge)) return;
  }
  nest(m, st, pos + 1, mode, consumed, versioned);
  if (merge) {
    LLVMBuildBr(m->b, merge);
    LLVMPositionBuilderAtEnd(m->b, merge);
  }
  if (v->bind < 0) loop_end(m, &l);
}

static void stage(em_t *m, int st) {
  kc_te_program_t *p = m->p;
  te_tensor_t *t = &p->tensors[st];
  if (t->kernel_arg < 0 && !t->buf) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->rext[d];
    if (n > (1 << 24)) {
      fail(m, KC_COMPILE_ERROR("te: %s needs %lld elements of storage", t->name, (long long)n));
      return;
    }
    LLVMTypeRef at = LLVMArrayType2(ty(m, t->dtype, true), (uint64_t)n);
    if (t->eff_scope == TE_SCOPE_SHARED) {
      /* Static work-group memory the GPUs have: 48 KiB without opt-in on NVIDIA, 64 KiB of
       * LDS on AMD (the CPU has no such bound). */
      m->shared_bytes += (uint64_t)n * LLVMABISizeOfType(LLVMGetModuleDataLayout(m->mod), ty(m, t->dtype, true));
      uint64_t cap = m->job->target.kind == KILN_TARGET_NVPTX ? 48 * 1024
                   : m->job->target.kind == KILN_TARGET_AMDGPU ? 64 * 1024 : UINT64_MAX;
      if (m->shared_bytes > cap) {
        fail(m, KC_COMPILE_ERROR("te: kernel %s needs %llu bytes of shared memory with %s; %s allows %llu: use "
                                 "smaller tiles",
                                 m->k->name, (unsigned long long)m->shared_bytes, t->name, m->job->target.id,
                                 (unsigned long long)cap));
        return;
      }
      char gname[256];
      snprintf(gname, sizeof(gname), "%s.%s", m->k->name, t->name);
      t->buf = LLVMAddGlobalInAddressSpace(m->mod, at, gname, 3);
      LLVMSetLinkage(t->buf, LLVMInternalLinkage);
      LLVMSetInitializer(t->buf, LLVMGetPoison(at));
      LLVMSetAlignment(t->buf, 16);
    } else {
      t->buf = LLVMBuildAlloca(m->eb, at, t->name);
      LLVMSetAlignment(t->buf, 16);
    }
  }
  nest(m, st, 0, MODE_PLAIN, 0, false);
}

/* ---- the kernel ------------------------------------------------------------------------ */

kiln_status_t te_emit_kernel(kc_job_t *job, kc_te_program_t *p, int kernel) {
  te_kernel_t *k = &p->kernels[kernel];
  em_t m = {.job = job, .p = p, .k = k, .ctx = job->ctx, .mod = job->mod};
  m.i1 = LLVMInt1TypeInContext(m.ctx);
  m.i8 = LLVMInt8TypeInContext(m.ctx);
  m.i32 = LLVMInt32TypeInContext(m.ctx);
  m.i64 = LLVMInt64TypeInContext(m.ctx);
  m.ptr = LLVMPointerTypeInContext(m.ctx, 0);
  m.ity = p->index_dtype == TE_I64 ? m.i64 : m.i32;
  m.sub = calloc((size_t)p->nvars + 1, sizeof(*m.sub));
  if (!m.sub) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  LLVMTypeRef params[KC_MAX_PARAMS];
  for (int a = 0; a < k->nargs; a++) params[a] = k->args[a] >= 0 ? m.ptr : m.ity;
  LLVMTypeRef ft = LLVMFunctionType(LLVMVoidTypeInContext(m.ctx), params, (unsigned)k->nargs, 0);
  if (LLVMGetNamedFunction(m.mod, k->name)) {
    free(m.sub);
    return KC_COMPILE_ERROR("te: kernel name %s clashes with a function kiln declares", k->name);
  }
  m.fn = LLVMAddFunction(m.mod, k->name, ft);
  LLVMSetSection(m.fn, KC_KERNEL_SECTION);
  /* The block is known: GPU back ends get it as the launch bound (more registers per
   * work-item than the 1024 default allows), unless the request sets max_block. */
  int64_t threads = k->block[0] * k->block[1] * k->block[2];
  if (job->target.kind != KILN_TARGET_CPU && !job->req->options.max_block) {
    bool amd = job->target.kind == KILN_TARGET_AMDGPU;
    const char *attr = amd ? "amdgpu-flat-work-group-size" : "nvvm.maxntid";
    char bound[32];
    snprintf(bound, sizeof(bound), amd ? "1,%lld" : "%lld", (long long)threads);
    LLVMAddAttributeAtIndex(m.fn, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(m.ctx, attr, (unsigned)strlen(attr), bound, (unsigned)strlen(bound)));
  }
  unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
  for (int a = 0; a < k->nargs; a++) {
    LLVMValueRef prm = LLVMGetParam(m.fn, (unsigned)a);
    if (k->args[a] >= 0) {
      LLVMSetValueName2(prm, p->tensors[k->args[a]].name, strlen(p->tensors[k->args[a]].name));
      LLVMAddAttributeAtIndex(m.fn, (unsigned)a + 1, LLVMCreateEnumAttribute(m.ctx, noalias, 0));
    } else {
      te_var_t *v = &p->vars[-k->args[a] - 1];
      LLVMSetValueName2(prm, v->name, strlen(v->name));
      v->value = prm;
    }
  }
  for (int i = 0; i < p->ntensors; i++) p->tensors[i].buf = NULL;
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(m.ctx, m.fn, "entry");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(m.ctx, m.fn, "start");
  m.b = LLVMCreateBuilderInContext(m.ctx);
  m.eb = LLVMCreateBuilderInContext(m.ctx);
  LLVMPositionBuilderAtEnd(m.eb, entry);
  LLVMPositionBuilderAtEnd(m.b, body);
  stage(&m, k->root);
  if (!m.err) {
    LLVMBuildRetVoid(m.b);
    LLVMBuildBr(m.eb, body);
  }
  LLVMDisposeBuilder(m.b);
  LLVMDisposeBuilder(m.eb);
  free(m.sub);
  for (int v = 0; v < p->nvars; v++)
    if (p->vars[v].kind != TE_V_SHAPE) p->vars[v].value = NULL;
  return m.err;
}
