/* Expressions over a vectorised loop var (te_emit.h): the var is lanes base + <0, 1, ...,
 * width-1>; a subexpression that does not use it is a scalar, broadcast where it meets a
 * vector. Contiguous accesses (stride 1 in the var) are vector loads and stores aligned as
 * far as the index proves; a lazy select whose chosen side loads only at stride 1 (padding)
 * reads those under its condition as a mask (llvm.masked.load); other accesses, lazy
 * selects and math calls go lane by lane, as TVM's code generator does. */
#include "compiler/te/te_emit.h"
#include "compiler/te/te_expr.h"

bool te_em_uses(const te_expr_t *e, int var) {
  if (!e) return false;
  if (e->kind == TE_VAR) return e->ref == var;
  for (int i = 0; i < e->nargs; i++)
    if (te_em_uses(e->args[i], var)) return true;
  return false;
}

LLVMValueRef te_em_splat(te_em_t *m, LLVMValueRef v, int width) {
  if (!v || LLVMGetTypeKind(LLVMTypeOf(v)) == LLVMVectorTypeKind) return v;
  LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(v), (unsigned)width);
  LLVMValueRef one = LLVMBuildInsertElement(m->b, LLVMGetPoison(vt), v, LLVMConstInt(m->i32, 0, 0), "");
  LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(m->i32, (unsigned)width));
  return LLVMBuildShuffleVector(m->b, one, LLVMGetPoison(vt), zeros, "");
}

/* The stride of e in var when e is affine in it (var, constants, other vars, + - and * by a
 * constant, casts between index types); false otherwise. */
static bool stride_of(const te_expr_t *e, int var, int64_t *out) {
  int64_t a, b, k;
  if (!te_em_uses(e, var)) return *out = 0, true;
  switch (e->kind) {
  case TE_VAR: return *out = 1, true;
  case TE_CAST: return te_is_int(e->dtype) && te_is_int(e->args[0]->dtype) && stride_of(e->args[0], var, out);
  case TE_BIN:
    if (e->op == TE_ADD || e->op == TE_SUB) {
      if (!stride_of(e->args[0], var, &a) || !stride_of(e->args[1], var, &b)) return false;
      return *out = e->op == TE_ADD ? a + b : a - b, true;
    }
    if (e->op == TE_MUL && te_const(e->args[1], &k) && stride_of(e->args[0], var, &a)) return *out = a * k, true;
    if (e->op == TE_MUL && te_const(e->args[0], &k) && stride_of(e->args[1], var, &a)) return *out = a * k, true;
    return false;
  default: return false;
  }
}

/* log2 of the largest power of two (up to 2^12) that divides e for every value of the vars;
 * var (the lanes' base) is a multiple of `base_pow2`. */
static int pow2_divisor(const te_expr_t *e, int var, int base_pow2) {
  int a, b;
  switch (e->kind) {
  case TE_INT: return e->i == 0 || __builtin_ctzll((unsigned long long)e->i) > 12 ? 12 : __builtin_ctzll((unsigned long long)e->i);
  case TE_VAR: return e->ref == var ? base_pow2 : 0;
  case TE_CAST: return pow2_divisor(e->args[0], var, base_pow2);
  case TE_BIN:
    if (e->op != TE_ADD && e->op != TE_SUB && e->op != TE_MUL) return 0;
    a = pow2_divisor(e->args[0], var, base_pow2);
    b = pow2_divisor(e->args[1], var, base_pow2);
    if (e->op == TE_MUL) return a + b < 12 ? a + b : 12;
    return a < b ? a : b;
  default: return 0;
  }
}

/* Alignment in bytes of the element at flat index `flat` (lane 0): argument tensors and
 * kiln's own buffers start at least 16-byte aligned (docs/te.md §6). */
static unsigned alignment(te_em_t *m, int tid, const te_expr_t *flat, const te_vec_t *v) {
  unsigned size = (unsigned)LLVMABISizeOfType(LLVMGetModuleDataLayout(m->mod), te_em_type(m, m->p->tensors[tid].dtype, true));
  int k = pow2_divisor(flat, v->var, v->base_pow2);
  unsigned long long a = (unsigned long long)size << (k < 5 ? k : 5);
  return a > 16 ? 16 : (unsigned)a;
}

/* Lane by lane: e evaluated as a scalar with var = base + lane, gathered into a vector. */
static LLVMValueRef by_lane(te_em_t *m, te_expr_t *e, const te_vec_t *v) {
  LLVMValueRef out = NULL;
  for (int l = 0; l < v->width && !m->err; l++) {
    m->val[v->var] = l ? LLVMBuildNSWAdd(m->b, v->base, LLVMConstInt(m->ity, (unsigned)l, 0), "") : v->base;
    LLVMValueRef s = te_em_expr(m, e);
    if (!s) break;
    if (!out) out = LLVMGetPoison(LLVMVectorType(LLVMTypeOf(s), (unsigned)v->width));
    out = LLVMBuildInsertElement(m->b, out, s, LLVMConstInt(m->i32, (unsigned)l, 0), "");
  }
  m->val[v->var] = v->base;
  return m->err ? NULL : out;
}

/* llvm.masked.load of vt at ptr under m->vmask, zeros in the lanes it leaves out (LLVM 22
 * takes the alignment as the pointer's attribute, older ones as an operand). */
static LLVMValueRef masked_load(te_em_t *m, LLVMTypeRef vt, LLVMValueRef ptr, unsigned align) {
  static const char name[] = "llvm.masked.load";
  LLVMTypeRef tys[2] = {vt, m->ptr};
  unsigned id = LLVMLookupIntrinsicID(name, sizeof(name) - 1);
  LLVMValueRef fn = id ? LLVMGetIntrinsicDeclaration(m->mod, id, tys, 2) : NULL;
  if (!fn) {
    te_em_fail(m, KILN_STATUS(KILN_E_INTERNAL, "te: LLVM has no %s", name));
    return NULL;
  }
  LLVMTypeRef ft = LLVMGlobalGetValueType(fn);
  LLVMValueRef args[4];
  unsigned n = 0;
  args[n++] = ptr;
  if (LLVMCountParamTypes(ft) == 4) args[n++] = LLVMConstInt(m->i32, align, 0);
  args[n++] = m->vmask;
  args[n++] = LLVMConstNull(vt);
  LLVMValueRef r = LLVMBuildCall2(m->b, ft, fn, args, n, "");
  if (n == 3) {
    unsigned kind = LLVMGetEnumAttributeKindForName("align", 5);
    LLVMAddCallSiteAttribute(r, 1, LLVMCreateEnumAttribute(m->ctx, kind, align));
  }
  return r;
}

/* May e be evaluated for every lane with its loads masked: each load at stride 1 in var (a
 * masked vector load; a load that does not use var would be an unmasked scalar load, and
 * masked gathers were slower on Zen 4 than the lane-by-lane code), no lazy select inside. */
static bool maskable(te_em_t *m, const te_expr_t *e, int var) {
  if (!e) return true;
  if (e->kind == TE_SELECT && e->op == 1) return false;
  if (e->kind == TE_LOAD && (!te_em_uses(e, var) || te_em_stride(m, e->ref, e->args, var) != 1)) return false;
  for (int i = 0; i < e->nargs; i++)
    if (!maskable(m, e->args[i], var)) return false;
  return true;
}

static bool loads_any(const te_expr_t *e) {
  if (!e) return false;
  if (e->kind == TE_LOAD) return true;
  for (int i = 0; i < e->nargs; i++)
    if (loads_any(e->args[i])) return true;
  return false;
}

LLVMValueRef te_em_vload(te_em_t *m, int tid, te_expr_t **idx, const te_vec_t *v) {
  te_expr_t *flat = te_em_flat(m, tid, idx);
  LLVMValueRef base = te_em_base(m, tid);
  int64_t stride;
  int dt = m->p->tensors[tid].dtype;
  if (!flat || !base) return NULL;
  flat = te_simplify(m->p, flat);
  if (!te_em_uses(flat, v->var)) return te_em_load(m, tid, idx);
  if (!stride_of(flat, v->var, &stride) || stride != 1) {
    te_expr_t *ld = te_node(m->p, TE_LOAD, 0, dt, m->p->tensors[tid].ndim);
    if (!ld) return NULL;
    ld->ref = tid;
    for (int d = 0; d < ld->nargs; d++) ld->args[d] = idx[d];
    return by_lane(m, ld, v);
  }
  LLVMValueRef off = te_em_expr(m, flat);
  if (!off) return NULL;
  LLVMTypeRef vt = LLVMVectorType(te_em_type(m, dt, true), (unsigned)v->width);
  LLVMValueRef r;
  if (m->vmask) {
    r = masked_load(m, vt, te_em_gep(m, tid, base, off), alignment(m, tid, flat, v));
    if (!r) return NULL;
  } else {
    r = LLVMBuildLoad2(m->b, vt, te_em_gep(m, tid, base, off), "");
    LLVMSetAlignment(r, alignment(m, tid, flat, v));
  }
  if (dt == TE_BOOL) r = LLVMBuildICmp(m->b, LLVMIntNE, r, LLVMConstNull(vt), "");
  return r;
}

void te_em_vstore(te_em_t *m, int tid, te_expr_t **idx, LLVMValueRef val, const te_vec_t *v) {
  te_expr_t *flat = te_em_flat(m, tid, idx);
  LLVMValueRef base = te_em_base(m, tid);
  int64_t stride;
  if (!flat || !base || !val) return;
  flat = te_simplify(m->p, flat);
  val = te_em_splat(m, val, v->width);
  if (m->p->tensors[tid].dtype == TE_BOOL) val = LLVMBuildZExt(m->b, val, LLVMVectorType(m->i8, (unsigned)v->width), "");
  if (stride_of(flat, v->var, &stride) && stride == 1) {
    LLVMValueRef off = te_em_expr(m, flat);
    if (!off) return;
    LLVMValueRef st = LLVMBuildStore(m->b, val, te_em_gep(m, tid, base, off));
    LLVMSetAlignment(st, alignment(m, tid, flat, v));
    return;
  }
  for (int l = 0; l < v->width && !m->err; l++) { /* a scatter, lane by lane */
    m->val[v->var] = l ? LLVMBuildNSWAdd(m->b, v->base, LLVMConstInt(m->ity, (unsigned)l, 0), "") : v->base;
    LLVMValueRef off = te_em_expr(m, flat);
    if (!off) break;
    LLVMValueRef x = LLVMBuildExtractElement(m->b, val, LLVMConstInt(m->i32, (unsigned)l, 0), "");
    LLVMBuildStore(m->b, x, te_em_gep(m, tid, base, off));
  }
  m->val[v->var] = v->base;
}

int64_t te_em_stride(te_em_t *m, int tid, te_expr_t *const *idx, int var) {
  te_expr_t *copy[TE_MAX_DIMS];
  int64_t stride;
  for (int d = 0; d < m->p->tensors[tid].ndim; d++) copy[d] = idx[d];
  te_expr_t *flat = te_em_flat(m, tid, copy);
  if (!flat || !(flat = te_simplify(m->p, flat)) || !stride_of(flat, var, &stride)) return -1;
  return stride;
}

bool te_em_loads_contiguous(te_em_t *m, const te_expr_t *e, int var) {
  if (!e || !te_em_uses(e, var)) return true;
  if (e->kind == TE_SELECT && e->op == 1) /* lazy: masked (see vselect) or lane by lane */
    return !loads_any(e->args[0]) && !loads_any(e->args[2]) && maskable(m, e->args[1], var);
  if (e->kind == TE_LOAD) {
    int64_t s = te_em_stride(m, e->ref, e->args, var);
    if (s != 0 && s != 1) return false;
  }
  for (int i = 0; i < e->nargs; i++)
    if (!te_em_loads_contiguous(m, e->args[i], var)) return false;
  return true;
}

static LLVMValueRef lanes(te_em_t *m, const te_vec_t *v) {
  LLVMValueRef steps[64];
  for (int l = 0; l < v->width; l++) steps[l] = LLVMConstInt(m->ity, (unsigned)l, 0);
  return LLVMBuildNSWAdd(m->b, te_em_splat(m, v->base, v->width), LLVMConstVector(steps, (unsigned)v->width), "");
}

static LLVMValueRef vbin(te_em_t *m, te_expr_t *e, const te_vec_t *v) {
  LLVMValueRef a = te_em_vexpr(m, e->args[0], v), b = te_em_vexpr(m, e->args[1], v);
  if (!a || !b) return NULL;
  return te_em_binop(m, e, te_em_splat(m, a, v->width), te_em_splat(m, b, v->width));
}

static LLVMValueRef vselect(te_em_t *m, te_expr_t *e, const te_vec_t *v) {
  if (e->op == 1 && !loads_any(e->args[0]) && !loads_any(e->args[2]) && maskable(m, e->args[1], v->var)) {
    /* padding: the chosen side's contiguous loads under the condition as a mask (a condition
     * that does not use the var is the same for every lane) */
    LLVMValueRef c = te_em_vexpr(m, e->args[0], v), b = te_em_vexpr(m, e->args[2], v);
    if (!c || !b) return NULL;
    c = te_em_splat(m, c, v->width);
    LLVMValueRef outer = m->vmask;
    m->vmask = outer ? LLVMBuildAnd(m->b, outer, c, "") : c;
    LLVMValueRef a = te_em_vexpr(m, e->args[1], v);
    m->vmask = outer;
    if (!a) return NULL;
    return LLVMBuildSelect(m->b, c, te_em_splat(m, a, v->width), te_em_splat(m, b, v->width), "");
  }
  if (e->op == 1 && te_em_uses(e->args[0], v->var)) return by_lane(m, e, v); /* lazy per lane */
  LLVMValueRef c = te_em_vexpr(m, e->args[0], v), a = te_em_vexpr(m, e->args[1], v), b = te_em_vexpr(m, e->args[2], v);
  if (!c || !a || !b) return NULL;
  return LLVMBuildSelect(m->b, c, te_em_splat(m, a, v->width), te_em_splat(m, b, v->width), "");
}

LLVMValueRef te_em_vexpr(te_em_t *m, te_expr_t *e, const te_vec_t *v) {
  LLVMValueRef a;
  te_expr_t *idx[TE_MAX_DIMS];
  if (m->err || !e || !te_em_uses(e, v->var)) return te_em_expr(m, e);
  switch (e->kind) {
  case TE_VAR: return lanes(m, v);
  case TE_LOAD:
    for (int d = 0; d < e->nargs; d++) idx[d] = e->args[d];
    return te_em_vload(m, e->ref, idx, v);
  case TE_BIN: return vbin(m, e, v);
  case TE_UN:
    if (!(a = te_em_vexpr(m, e->args[0], v))) return NULL;
    if (e->op == TE_NOT) return LLVMBuildNot(m->b, a, "");
    return te_em_is_fp(e->dtype) ? LLVMBuildFNeg(m->b, a, "") : LLVMBuildNeg(m->b, a, "");
  case TE_CAST:
    a = te_em_vexpr(m, e->args[0], v);
    return a ? te_em_cast(m, a, e->args[0]->dtype, e->dtype) : NULL;
  case TE_SELECT: return vselect(m, e, v);
  default: return by_lane(m, e, v); /* math calls */
  }
}
