/* Expressions of a te kernel as LLVM IR (te_emit.h): types, element addresses, loads and
 * stores, casts, math calls, operators. */
#include <stdio.h>
#include <string.h>

#include "compiler/te/te_emit.h"
#include "compiler/te/te_expr.h"

LLVMTypeRef te_em_type(te_em_t *m, int dt, bool mem) {
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

bool te_em_is_fp(int dt) { return dt == TE_F16 || dt == TE_F32 || dt == TE_F64; }

void te_em_fail(te_em_t *m, kiln_status_t s) {
  if (!m->err) m->err = s;
  else kiln_status_free(s);
}

LLVMValueRef te_em_id(te_em_t *m, int which) {
  if (m->ids[which]) return m->ids[which];
  LLVMTypeRef ft = LLVMFunctionType(m->i32, &m->i32, 1, 0);
  LLVMValueRef f = kc_get_function(m->mod, which < 3 ? "__kiln_group_id" : "__kiln_local_id", ft);
  LLVMValueRef d = LLVMConstInt(m->i32, (unsigned)(which % 3), 0);
  LLVMValueRef v = LLVMBuildCall2(m->eb, ft, f, &d, 1, which < 3 ? "bid" : "tid");
  if (m->ity != m->i32) v = LLVMBuildZExt(m->eb, v, m->ity, "");
  return m->ids[which] = v;
}

LLVMValueRef te_em_num_groups(te_em_t *m, int d) {
  if (m->groups[d]) return m->groups[d];
  LLVMTypeRef ft = LLVMFunctionType(m->i32, &m->i32, 1, 0);
  LLVMValueRef f = kc_get_function(m->mod, "__kiln_num_groups", ft);
  LLVMValueRef dim = LLVMConstInt(m->i32, (unsigned)d, 0);
  LLVMValueRef v = LLVMBuildCall2(m->eb, ft, f, &dim, 1, "groups");
  if (m->ity != m->i32) v = LLVMBuildZExt(m->eb, v, m->ity, "");
  return m->groups[d] = v;
}

/* ---- memory ------------------------------------------------------------------------- */

te_expr_t *te_em_flat(te_em_t *m, int tid, te_expr_t **idx) {
  te_program_t *p = m->p;
  te_tensor_t *t = &p->tensors[tid];
  int dt = p->index_dtype;
  te_expr_t *flat = NULL;
  for (int d = 0; d < t->ndim; d++)
    if (idx[d]->dtype != dt) {
      te_expr_t *c = te_node(p, TE_CAST, 0, dt, 1);
      if (!c) return NULL;
      c->args[0] = idx[d];
      idx[d] = c;
    }
  for (int d = 0; d < t->ndim; d++) {
    if (t->kernel_arg >= 0) {
      flat = flat ? te_bin(p, TE_ADD, te_bin(p, TE_MUL, flat, t->shape[d]), idx[d]) : idx[d];
    } else { /* the region from its min, at the storage's strides (storage_align pads them) */
      te_expr_t *rel = te_bin(p, TE_MUL, te_bin(p, TE_SUB, idx[d], t->rmin[d]), te_int(p, t->stride[d], dt));
      flat = flat ? te_bin(p, TE_ADD, flat, rel) : rel;
    }
  }
  if (flat && t->kernel_arg < 0 && t->copy_off) flat = te_bin(p, TE_ADD, flat, t->copy_off); /* its vthread copy */
  return flat;
}

LLVMValueRef te_em_base(te_em_t *m, int tid) {
  te_tensor_t *t = &m->p->tensors[tid];
  LLVMValueRef base = t->kernel_arg >= 0 ? LLVMGetParam(m->fn, (unsigned)t->kernel_arg) : m->buf[tid];
  if (!base) te_em_fail(m, KC_COMPILE_ERROR("te: kernel %s reads %s, which has no storage here", m->k->name, t->name));
  if (base && m->half[tid]) base = te_em_gep(m, tid, base, m->half[tid]); /* a whole number of 16 bytes */
  return base;
}

LLVMValueRef te_em_gep(te_em_t *m, int tid, LLVMValueRef base, LLVMValueRef off) {
  if (LLVMTypeOf(off) != m->i64) off = LLVMBuildSExt(m->b, off, m->i64, "");
  return LLVMBuildInBoundsGEP2(m->b, te_em_type(m, m->p->tensors[tid].dtype, true), base, &off, 1, "");
}

/* Address of element idx[] (index expressions over leaf vars) of tensor t. */
static LLVMValueRef address(te_em_t *m, int tid, te_expr_t **idx) {
  LLVMValueRef base = te_em_base(m, tid);
  te_expr_t *flat = base ? te_em_flat(m, tid, idx) : NULL;
  LLVMValueRef off = flat ? te_em_expr(m, te_simplify(m->p, flat)) : NULL;
  return off ? te_em_gep(m, tid, base, off) : NULL;
}

LLVMValueRef te_em_load(te_em_t *m, int tid, te_expr_t **idx) {
  LLVMValueRef a = address(m, tid, idx);
  if (!a) return NULL;
  int dt = m->p->tensors[tid].dtype;
  LLVMValueRef v = LLVMBuildLoad2(m->b, te_em_type(m, dt, true), a, "");
  if (dt == TE_BOOL) v = LLVMBuildICmp(m->b, LLVMIntNE, v, LLVMConstInt(m->i8, 0, 0), "");
  return v;
}

void te_em_store(te_em_t *m, int tid, te_expr_t **idx, LLVMValueRef v) {
  LLVMValueRef a = address(m, tid, idx);
  if (!a || !v) return;
  if (m->p->tensors[tid].dtype == TE_BOOL) v = LLVMBuildZExt(m->b, v, m->i8, "");
  LLVMBuildStore(m->b, v, a);
}

/* ---- operators ---------------------------------------------------------------------- */

LLVMTypeRef te_em_like(LLVMValueRef v, LLVMTypeRef scalar) {
  LLVMTypeRef t = LLVMTypeOf(v);
  return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMVectorType(scalar, LLVMGetVectorSize(t)) : scalar;
}

LLVMValueRef te_em_cast(te_em_t *m, LLVMValueRef v, int from, int to) {
  if (from == to) return v;
  LLVMTypeRef t = te_em_like(v, te_em_type(m, to, false));
  bool ffp = te_em_is_fp(from), tfp = te_em_is_fp(to);
  if (to == TE_BOOL)
    return ffp ? LLVMBuildFCmp(m->b, LLVMRealUNE, v, LLVMConstNull(LLVMTypeOf(v)), "")
               : LLVMBuildICmp(m->b, LLVMIntNE, v, LLVMConstNull(LLVMTypeOf(v)), "");
  if (ffp && tfp) return LLVMBuildFPCast(m->b, v, t, "");
  if (ffp) return te_is_unsigned(to) ? LLVMBuildFPToUI(m->b, v, t, "") : LLVMBuildFPToSI(m->b, v, t, "");
  bool src_unsigned = te_is_unsigned(from) || from == TE_BOOL;
  if (tfp) return src_unsigned ? LLVMBuildUIToFP(m->b, v, t, "") : LLVMBuildSIToFP(m->b, v, t, "");
  return LLVMBuildIntCast2(m->b, v, t, !src_unsigned, "");
}

static LLVMValueRef call_math(te_em_t *m, const char *name, LLVMValueRef *args, int n, int dt) {
  bool half = dt == TE_F16;
  LLVMTypeRef ft_el = half ? LLVMFloatTypeInContext(m->ctx) : te_em_type(m, dt, false);
  LLVMValueRef a[3];
  for (int i = 0; i < n; i++) a[i] = half ? LLVMBuildFPExt(m->b, args[i], ft_el, "") : args[i];
  char cname[24];
  snprintf(cname, sizeof(cname), "%s%s", name, dt == TE_F64 ? "" : "f");
  LLVMTypeRef params[3] = {ft_el, ft_el, ft_el};
  LLVMTypeRef ft = LLVMFunctionType(ft_el, params, (unsigned)n, 0);
  LLVMValueRef f = kc_get_function(m->mod, cname, ft);
  LLVMValueRef r = LLVMBuildCall2(m->b, ft, f, a, (unsigned)n, "");
  return half ? LLVMBuildFPTrunc(m->b, r, te_em_type(m, TE_F16, false), "") : r;
}

/* Floor division and modulo of signed integers; C division where both sides are provably
 * non-negative (then they agree). */
static LLVMValueRef floor_divmod(te_em_t *m, te_expr_t *e, LLVMValueRef a, LLVMValueRef b, bool un) {
  LLVMBuilderRef B = m->b;
  bool is_div = e->op == TE_FLOORDIV;
  int64_t lo, hi, dlo, dhi;
  if (un) return is_div ? LLVMBuildUDiv(B, a, b, "") : LLVMBuildURem(B, a, b, "");
  if (te_const_bounds(m->p, e->args[1], &dlo, &dhi) && dlo >= 0 && te_const_bounds(m->p, e->args[0], &lo, &hi) &&
      lo >= 0)
    return is_div ? LLVMBuildUDiv(B, a, b, "") : LLVMBuildURem(B, a, b, "");
  LLVMValueRef q = LLVMBuildSDiv(B, a, b, ""), r = LLVMBuildSRem(B, a, b, "");
  LLVMValueRef zero = LLVMConstNull(LLVMTypeOf(a));
  LLVMValueRef nz = LLVMBuildICmp(B, LLVMIntNE, r, zero, "");
  LLVMValueRef sd = LLVMBuildICmp(B, LLVMIntSLT, LLVMBuildXor(B, r, b, ""), zero, "");
  LLVMValueRef adj = LLVMBuildAnd(B, nz, sd, "");
  if (is_div) return LLVMBuildSub(B, q, LLVMBuildZExt(B, adj, LLVMTypeOf(a), ""), "");
  return LLVMBuildAdd(B, r, LLVMBuildSelect(B, adj, b, zero, ""), "");
}

static LLVMValueRef compare(te_em_t *m, int op, LLVMValueRef a, LLVMValueRef b, bool fp, bool un) {
  static const LLVMRealPredicate fpp[] = {LLVMRealOEQ, LLVMRealUNE, LLVMRealOLT, LLVMRealOLE, LLVMRealOGT, LLVMRealOGE};
  static const LLVMIntPredicate sp[] = {LLVMIntEQ, LLVMIntNE, LLVMIntSLT, LLVMIntSLE, LLVMIntSGT, LLVMIntSGE};
  static const LLVMIntPredicate up[] = {LLVMIntEQ, LLVMIntNE, LLVMIntULT, LLVMIntULE, LLVMIntUGT, LLVMIntUGE};
  int i = op - TE_EQ;
  return fp ? LLVMBuildFCmp(m->b, fpp[i], a, b, "") : LLVMBuildICmp(m->b, un ? up[i] : sp[i], a, b, "");
}

static LLVMValueRef min_max(te_em_t *m, bool mn, LLVMValueRef a, LLVMValueRef b, bool fp, bool un) {
  LLVMValueRef c = fp ? LLVMBuildFCmp(m->b, mn ? LLVMRealOLT : LLVMRealOGT, a, b, "")
                      : LLVMBuildICmp(m->b, mn ? (un ? LLVMIntULT : LLVMIntSLT) : (un ? LLVMIntUGT : LLVMIntSGT), a, b, "");
  return LLVMBuildSelect(m->b, c, a, b, "");
}

/* add, sub, mul: no signed wrap on the index dtype (indices are in range by construction). */
static LLVMValueRef arith(te_em_t *m, int op, LLVMValueRef a, LLVMValueRef b, bool fp, bool idx) {
  LLVMBuilderRef B = m->b;
  switch (op) {
  case TE_ADD: return fp ? LLVMBuildFAdd(B, a, b, "") : idx ? LLVMBuildNSWAdd(B, a, b, "") : LLVMBuildAdd(B, a, b, "");
  case TE_SUB: return fp ? LLVMBuildFSub(B, a, b, "") : idx ? LLVMBuildNSWSub(B, a, b, "") : LLVMBuildSub(B, a, b, "");
  default: return fp ? LLVMBuildFMul(B, a, b, "") : idx ? LLVMBuildNSWMul(B, a, b, "") : LLVMBuildMul(B, a, b, "");
  }
}

LLVMValueRef te_em_binop(te_em_t *m, const te_expr_t *e, LLVMValueRef a, LLVMValueRef b) {
  int dt = e->args[0]->dtype;
  bool fp = te_em_is_fp(dt), un = te_is_unsigned(dt) || dt == TE_BOOL;
  LLVMBuilderRef B = m->b;
  switch (e->op) {
  case TE_ADD: case TE_SUB: case TE_MUL: return arith(m, e->op, a, b, fp, dt == m->p->index_dtype);
  case TE_DIV: return fp ? LLVMBuildFDiv(B, a, b, "") : un ? LLVMBuildUDiv(B, a, b, "") : LLVMBuildSDiv(B, a, b, "");
  case TE_MOD: return fp ? LLVMBuildFRem(B, a, b, "") : un ? LLVMBuildURem(B, a, b, "") : LLVMBuildSRem(B, a, b, "");
  case TE_FLOORDIV: case TE_FLOORMOD: return floor_divmod(m, (te_expr_t *)e, a, b, un);
  case TE_MIN: case TE_MAX: return min_max(m, e->op == TE_MIN, a, b, fp, un);
  case TE_EQ: case TE_NE: case TE_LT: case TE_LE: case TE_GT: case TE_GE: return compare(m, e->op, a, b, fp, un);
  case TE_AND: case TE_BITAND: return LLVMBuildAnd(B, a, b, "");
  case TE_OR: case TE_BITOR: return LLVMBuildOr(B, a, b, "");
  case TE_BITXOR: return LLVMBuildXor(B, a, b, "");
  case TE_SHL: return LLVMBuildShl(B, a, b, "");
  case TE_SHR: return un ? LLVMBuildLShr(B, a, b, "") : LLVMBuildAShr(B, a, b, "");
  default: break;
  }
  te_em_fail(m, KILN_STATUS(KILN_E_INTERNAL, "te: unhandled binary op %d", e->op));
  return NULL;
}

static LLVMValueRef emit_bin(te_em_t *m, te_expr_t *e) {
  LLVMValueRef a = te_em_expr(m, e->args[0]), b = te_em_expr(m, e->args[1]);
  return a && b ? te_em_binop(m, e, a, b) : NULL;
}

/* if_then_else: branches, evaluating only the chosen side; LLVM if-converts (masked loads)
 * where legal. */
static LLVMValueRef lazy_select(te_em_t *m, te_expr_t *e) {
  LLVMValueRef c = te_em_expr(m, e->args[0]);
  if (!c) return NULL;
  LLVMBasicBlockRef tb = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "then");
  LLVMBasicBlockRef fb = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "else");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(m->ctx, m->fn, "endif");
  LLVMBuildCondBr(m->b, c, tb, fb);
  LLVMPositionBuilderAtEnd(m->b, tb);
  LLVMValueRef a = te_em_expr(m, e->args[1]);
  LLVMBasicBlockRef ta = LLVMGetInsertBlock(m->b);
  LLVMBuildBr(m->b, done);
  LLVMPositionBuilderAtEnd(m->b, fb);
  LLVMValueRef b = te_em_expr(m, e->args[2]);
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

static LLVMValueRef emit_select(te_em_t *m, te_expr_t *e) {
  if (e->op == 1) return lazy_select(m, e);
  LLVMValueRef c = te_em_expr(m, e->args[0]), a = te_em_expr(m, e->args[1]), b = te_em_expr(m, e->args[2]);
  return c && a && b ? LLVMBuildSelect(m->b, c, a, b, "") : NULL;
}

static LLVMValueRef emit_call(te_em_t *m, te_expr_t *e) {
  LLVMValueRef a[3];
  for (int i = 0; i < e->nargs; i++)
    if (!(a[i] = te_em_expr(m, e->args[i]))) return NULL;
  const char *name = te_math_names[e->op];
  int dt = e->dtype;
  if (strcmp(name, "abs") == 0) {
    if (te_em_is_fp(dt)) return call_math(m, "fabs", a, 1, dt);
    if (te_is_unsigned(dt)) return a[0];
    LLVMValueRef neg = LLVMBuildICmp(m->b, LLVMIntSLT, a[0], LLVMConstNull(LLVMTypeOf(a[0])), "");
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

static LLVMValueRef emit_var(te_em_t *m, te_expr_t *e) {
  if (m->val[e->ref]) return m->val[e->ref];
  te_em_fail(m, KC_COMPILE_ERROR("te: kernel %s uses var %s where it has no value (compute_at under a var the stage "
                                 "does not have?)",
                                 m->k->name, m->p->vars[e->ref].name));
  return NULL;
}

LLVMValueRef te_em_expr(te_em_t *m, te_expr_t *e) {
  if (m->err || !e) {
    if (!e) te_em_fail(m, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory building expressions"));
    return NULL;
  }
  LLVMValueRef a;
  te_expr_t *idx[TE_MAX_DIMS];
  switch (e->kind) {
  case TE_INT: return LLVMConstInt(te_em_type(m, e->dtype, false), (unsigned long long)e->i, !te_is_unsigned(e->dtype));
  case TE_FLOAT: return LLVMConstReal(te_em_type(m, e->dtype, false), e->f);
  case TE_VAR: return emit_var(m, e);
  case TE_LOAD:
    for (int d = 0; d < e->nargs; d++) idx[d] = e->args[d];
    return te_em_load(m, e->ref, idx);
  case TE_BIN: return emit_bin(m, e);
  case TE_UN:
    if (!(a = te_em_expr(m, e->args[0]))) return NULL;
    if (e->op == TE_NOT) return LLVMBuildNot(m->b, a, "");
    return te_em_is_fp(e->dtype) ? LLVMBuildFNeg(m->b, a, "") : LLVMBuildNeg(m->b, a, "");
  case TE_CAST:
    a = te_em_expr(m, e->args[0]);
    return a ? te_em_cast(m, a, e->args[0]->dtype, e->dtype) : NULL;
  case TE_SELECT: return emit_select(m, e);
  case TE_CALL: return emit_call(m, e);
  default: break;
  }
  te_em_fail(m, KC_COMPILE_ERROR("te: a reduce can only be the whole body of a compute"));
  return NULL;
}
