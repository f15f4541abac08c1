/* Dialect -> CPU work-group functions (protocol/cpu_abi.h, docs/kernels.md "CPU").
 *
 * For kernel K: everything is inlined into K; K's body moves into a work-item function
 * whose extra parameters are the context and the work-item's local id; builtins become
 * parameter reads and context loads; work-group globals become offsets into ctx->shared.
 * Barriers split the work-item function into regions (cpu_regions.c). Finally
 * __kiln_wg_K(ctx, args) runs each region as a z/y/x loop over the work-group's items,
 * which the optimiser inlines and vectorises. */
#include <llvm-c/DebugInfo.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/cpu_lower.h"
#include "protocol/cpu_abi.h"

#define AS_LOCAL 3
#define SHARED_ALIGN 16

LLVMValueRef cpu_param(const cpu_item_t *it, unsigned extra) { return LLVMGetParam(it->fn, it->np + extra); }

void cpu_at_prologue(cpu_item_t *it) {
  LLVMPositionBuilderBefore(it->b, LLVMGetBasicBlockTerminator(it->prologue));
}

static LLVMValueRef ctx_field(cpu_item_t *it, LLVMTypeRef ty, size_t offset, const char *name) {
  LLVMValueRef idx = LLVMConstInt(it->i64, offset, 0);
  LLVMValueRef p = LLVMBuildInBoundsGEP2(it->b, it->i8, cpu_param(it, XP_CTX), &idx, 1, "");
  LLVMValueRef v = LLVMBuildLoad2(it->b, ty, p, name);
  LLVMSetAlignment(v, LLVMGetTypeKind(ty) == LLVMPointerTypeKind ? 8 : 4);
  return v;
}

static void copy_param_attributes(LLVMValueRef from, LLVMValueRef to, unsigned np) {
  for (unsigned i = 0; i < np; i++) {
    LLVMAttributeIndex idx = (LLVMAttributeIndex)(i + 1);
    unsigned n = LLVMGetAttributeCountAtIndex(from, idx);
    if (!n) continue;
    LLVMAttributeRef attrs[64];
    if (n > 64) n = 64;
    LLVMGetAttributesAtIndex(from, idx, attrs);
    for (unsigned k = 0; k < n; k++) LLVMAddAttributeAtIndex(to, idx, attrs[k]);
  }
}

/* Moves K's body into the work-item function, behind a new prologue block. */
static void make_item_function(cpu_item_t *it) {
  LLVMValueRef k = it->kernel->fn;
  LLVMTypeRef kty = LLVMGlobalGetValueType(k);
  it->np = LLVMCountParamTypes(kty);
  LLVMTypeRef params[KC_MAX_PARAMS + XP_COUNT];
  LLVMGetParamTypes(kty, params);
  params[it->np + XP_CTX] = it->ptr;
  for (unsigned i = XP_LX; i < XP_COUNT; i++) params[it->np + i] = it->i32;
  it->fn_type = LLVMFunctionType(it->i32, params, it->np + XP_COUNT, 0);
  char name[160];
  snprintf(name, sizeof(name), "%s.kiln_item", it->kernel->name);
  it->fn = LLVMAddFunction(it->job->mod, name, it->fn_type);
  LLVMSetLinkage(it->fn, LLVMInternalLinkage);
  copy_param_attributes(k, it->fn, it->np);

  it->prologue = LLVMAppendBasicBlockInContext(it->job->ctx, it->fn, "prologue");
  LLVMBasicBlockRef entry = LLVMGetFirstBasicBlock(k);
  for (LLVMBasicBlockRef bb; (bb = LLVMGetFirstBasicBlock(k));) {
    LLVMRemoveBasicBlockFromParent(bb);
    LLVMAppendExistingBasicBlock(it->fn, bb);
  }
  for (unsigned i = 0; i < it->np; i++) LLVMReplaceAllUsesWith(LLVMGetParam(k, i), LLVMGetParam(it->fn, i));

  LLVMPositionBuilderAtEnd(it->b, it->prologue);
  LLVMBuildBr(it->b, entry);
  cpu_at_prologue(it);
  it->shared = ctx_field(it, it->ptr, offsetof(kiln_cpu_wg_ctx_t, shared), "shared");
  it->scratch = ctx_field(it, it->ptr, offsetof(kiln_cpu_wg_ctx_t, scratch), "scratch");
  it->wi64 = LLVMBuildZExt(it->b, cpu_param(it, XP_WI), it->i64, "wi");
  it->nwi64 = LLVMBuildZExt(it->b, cpu_param(it, XP_NWI), it->i64, "nwi");

  /* `ret void` -> `ret i32 -1`: this work-item is done. */
  LLVMValueRef done = LLVMConstInt(it->i32, (unsigned long long)-1, 1);
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(it->fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
    LLVMValueRef t = LLVMGetBasicBlockTerminator(bb);
    if (t && LLVMIsAReturnInst(t)) {
      LLVMPositionBuilderBefore(it->b, t);
      LLVMBuildRet(it->b, done);
      LLVMInstructionEraseFromParent(t);
    }
  }
}

static bool in_item(const cpu_item_t *it, LLVMValueRef inst) {
  return LLVMGetBasicBlockParent(LLVMGetInstructionParent(inst)) == it->fn;
}

/* ---- builtins ---------------------------------------------------------------------- */

static void lower_builtins(cpu_item_t *it, LLVMValueRef dyn_shared) {
  static const struct {
    const char *name;
    bool from_ctx; /* else the work-item function's local-id parameters */
    size_t ctx_offset;
  } queries[] = {
      {"__kiln_local_id", false, 0},
      {"__kiln_group_id", true, offsetof(kiln_cpu_wg_ctx_t, group_id)},
      {"__kiln_group_size", true, offsetof(kiln_cpu_wg_ctx_t, group_size)},
      {"__kiln_num_groups", true, offsetof(kiln_cpu_wg_ctx_t, num_groups)},
  };
  LLVMValueRef *calls = it->job->values;
  for (size_t q = 0; q < sizeof(queries) / sizeof(queries[0]); q++) {
    LLVMValueRef vals[4];
    bool loaded = false;
    size_t n;
    while ((n = kc_collect_calls(it->job->mod, queries[q].name, calls, KC_MAX_VALUES))) {
      size_t done = 0;
      for (size_t i = 0; i < n; i++) {
        if (!in_item(it, calls[i])) continue;
        if (!loaded) {
          cpu_at_prologue(it);
          for (unsigned d = 0; d < 3; d++)
            vals[d] = queries[q].from_ctx ? ctx_field(it, it->i32, queries[q].ctx_offset + 4 * d, "")
                                            : cpu_param(it, XP_LX + d);
          vals[3] = LLVMConstInt(it->i32, q >= 2 ? 1 : 0, 0); /* past the last dimension */
          loaded = true;
        }
        LLVMValueRef d = LLVMGetOperand(calls[i], 0), v;
        if (LLVMIsAConstantInt(d)) {
          unsigned long long dim = LLVMConstIntGetZExtValue(d);
          v = vals[dim < 3 ? dim : 3];
        } else {
          LLVMPositionBuilderBefore(it->b, calls[i]);
          v = vals[3];
          for (int k = 2; k >= 0; k--)
            v = LLVMBuildSelect(it->b, LLVMBuildICmp(it->b, LLVMIntEQ, d, LLVMConstInt(LLVMTypeOf(d), (unsigned)k, 0), ""),
                                vals[k], v, "");
        }
        LLVMReplaceAllUsesWith(calls[i], v);
        LLVMInstructionEraseFromParent(calls[i]);
        done++;
      }
      if (!done) break; /* the rest belong to other kernels */
    }
  }
  size_t n = kc_collect_calls(it->job->mod, "__kiln_dynamic_shared", calls, KC_MAX_VALUES);
  for (size_t i = 0; i < n; i++) {
    if (!in_item(it, calls[i])) continue;
    LLVMValueRef v = dyn_shared;
    if (LLVMTypeOf(v) != LLVMTypeOf(calls[i])) {
      cpu_at_prologue(it);
      v = LLVMBuildAddrSpaceCast(it->b, v, LLVMTypeOf(calls[i]), "");
    }
    LLVMReplaceAllUsesWith(calls[i], v);
    LLVMInstructionEraseFromParent(calls[i]);
  }
}

/* ---- work-group memory ------------------------------------------------------------- */

typedef struct shared_map {
  size_t n;
  LLVMValueRef globals[256];
  LLVMValueRef repl[256];
} shared_map_t;

/* Does `v` (a constant) mention one of the work-group globals? */
static bool mentions(const shared_map_t *sm, LLVMValueRef v, int depth) {
  for (size_t i = 0; i < sm->n; i++)
    if (sm->globals[i] == v) return true;
  if (depth > 16 || !LLVMIsAConstantExpr(v)) return false;
  int n = LLVMGetNumOperands(v);
  for (int i = 0; i < n; i++)
    if (mentions(sm, LLVMGetOperand(v, (unsigned)i), depth + 1)) return true;
  return false;
}

/* Rebuilds a constant expression over work-group globals as prologue instructions. */
static LLVMValueRef materialize(cpu_item_t *it, const shared_map_t *sm, LLVMValueRef v) {
  for (size_t i = 0; i < sm->n; i++)
    if (sm->globals[i] == v) return sm->repl[i];
  if (!mentions(sm, v, 0)) return v;
  LLVMOpcode op = LLVMGetConstOpcode(v);
  int n = LLVMGetNumOperands(v);
  LLVMValueRef ops[16];
  for (int i = 0; i < n && i < 16; i++) ops[i] = materialize(it, sm, LLVMGetOperand(v, (unsigned)i));
  cpu_at_prologue(it);
  switch (op) {
  case LLVMGetElementPtr:
    return LLVMBuildGEPWithNoWrapFlags(it->b, LLVMGetGEPSourceElementType(v), ops[0], ops + 1, (unsigned)n - 1, "",
                                       LLVMGEPGetNoWrapFlags(v));
  case LLVMAddrSpaceCast: case LLVMBitCast: case LLVMPtrToInt: case LLVMIntToPtr: case LLVMTrunc:
  case LLVMZExt: case LLVMSExt:
    return LLVMBuildCast(it->b, op, ops[0], LLVMTypeOf(v), "");
  default:
    return LLVMBuildBinOp(it->b, op, ops[0], ops[1], "");
  }
}

/* Instructions of the item function that use `v`, directly or through constants. */
static kiln_status_t collect_users(cpu_item_t *it, LLVMValueRef v, LLVMValueRef *out, size_t cap, size_t *n,
                                   int depth) {
  for (LLVMUseRef u = LLVMGetFirstUse(v); u; u = LLVMGetNextUse(u)) {
    LLVMValueRef user = LLVMGetUser(u);
    if (LLVMIsAInstruction(user)) {
      if (!in_item(it, user)) continue;
      bool dup = false;
      for (size_t i = 0; i < *n && !dup; i++) dup = out[i] == user;
      if (dup) continue;
      if (*n == cap) return KC_COMPILE_ERROR("kernel '%s' uses work-group memory in too many places", it->kernel->name);
      out[(*n)++] = user;
    } else if (LLVMIsAConstantExpr(user) && depth < 16) {
      KILN_RETURN_IF_ERROR(collect_users(it, user, out, cap, n, depth + 1));
    }
  }
  return KILN_OK;
}

static bool used_in_item(cpu_item_t *it, LLVMValueRef v, int depth) {
  for (LLVMUseRef u = LLVMGetFirstUse(v); u; u = LLVMGetNextUse(u)) {
    LLVMValueRef user = LLVMGetUser(u);
    if (LLVMIsAInstruction(user) ? in_item(it, user)
                                 : LLVMIsAConstantExpr(user) && depth < 16 && used_in_item(it, user, depth + 1))
      return true;
  }
  return false;
}

static kiln_status_t lower_shared(cpu_item_t *it, LLVMValueRef *out_dyn) {
  shared_map_t sm = {0};
  LLVMValueRef *users = it->job->values;
  uint32_t offset = 0;
  cpu_at_prologue(it);
  for (LLVMValueRef g = LLVMGetFirstGlobal(it->job->mod); g; g = LLVMGetNextGlobal(g)) {
    if (LLVMGetPointerAddressSpace(LLVMTypeOf(g)) != AS_LOCAL) continue;
    if (!used_in_item(it, g, 0)) continue;
    if (LLVMIsDeclaration(g))
      return KC_COMPILE_ERROR("work-group global '%s' is declared but not defined: use kiln_dynamic_shared() "
                              "for memory sized at launch", LLVMGetValueName2(g, &(size_t){0}));
    if (sm.n == 256) return KC_COMPILE_ERROR("kernel '%s' uses more than 256 work-group globals", it->kernel->name);
    unsigned long long size = LLVMABISizeOfType(LLVMGetModuleDataLayout(it->job->mod), LLVMGlobalGetValueType(g));
    unsigned align = LLVMGetAlignment(g) > SHARED_ALIGN ? LLVMGetAlignment(g) : SHARED_ALIGN;
    offset = (offset + align - 1) / align * align;
    LLVMValueRef idx = LLVMConstInt(it->i64, offset, 0);
    cpu_at_prologue(it);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(it->b, it->i8, it->shared, &idx, 1, "");
    sm.globals[sm.n] = g;
    sm.repl[sm.n] = LLVMBuildAddrSpaceCast(it->b, p, LLVMTypeOf(g), "");
    sm.n++;
    if (size > (1u << 30) - offset) return KC_COMPILE_ERROR("kernel '%s': work-group memory over 1 GiB", it->kernel->name);
    offset += (uint32_t)size;
  }
  offset = (offset + SHARED_ALIGN - 1) / SHARED_ALIGN * SHARED_ALIGN;
  it->kernel->group_segment_size = offset;

  for (size_t gi = 0; gi < sm.n; gi++) {
    size_t n = 0;
    KILN_RETURN_IF_ERROR(collect_users(it, sm.globals[gi], users, KC_MAX_VALUES, &n, 0));
    for (size_t i = 0; i < n; i++) {
      int nops = LLVMGetNumOperands(users[i]);
      for (int k = 0; k < nops; k++) {
        LLVMValueRef op = LLVMGetOperand(users[i], (unsigned)k);
        if (op && mentions(&sm, op, 0)) LLVMSetOperand(users[i], (unsigned)k, materialize(it, &sm, op));
      }
    }
  }
  /* Dynamic work-group memory follows the static part (cpu_abi.h). */
  LLVMValueRef idx = LLVMConstInt(it->i64, offset, 0);
  cpu_at_prologue(it);
  LLVMValueRef dyn = LLVMBuildInBoundsGEP2(it->b, it->i8, it->shared, &idx, 1, "dynamic_shared");
  *out_dyn = LLVMBuildAddrSpaceCast(it->b, dyn, LLVMPointerTypeInContext(it->job->ctx, AS_LOCAL), "");
  return KILN_OK;
}

/* ---- the work-group function ------------------------------------------------------- */

/* `!llvm.loop !{self, !{"llvm.loop.unroll.disable"}}` on a latch branch. The vectoriser
 * still widens the work-item loop; unrolling it (and its scalar remainder) on top doubles
 * compile time for little. Loops inside the kernel keep their unrolling. */
static void no_unroll(cpu_item_t *it, LLVMValueRef latch_branch) {
  LLVMContextRef c = it->job->ctx;
  LLVMMetadataRef tmp = LLVMTemporaryMDNode(c, NULL, 0);
  LLVMMetadataRef opt = LLVMMDStringInContext2(c, "llvm.loop.unroll.disable", 24);
  LLVMMetadataRef disable = LLVMMDNodeInContext2(c, &opt, 1);
  LLVMMetadataRef ops[2] = {tmp, disable};
  LLVMMetadataRef id = LLVMMDNodeInContext2(c, ops, 2);
  LLVMMetadataReplaceAllUsesWith(tmp, id); /* makes the node refer to itself, as loop ids do */
  LLVMSetMetadata(latch_branch, LLVMGetMDKindIDInContext(c, "llvm.loop", 9), LLVMMetadataAsValue(c, id));
}

/* for z, y, x over the group (bottom-tested: every size is at least 1) call `region`;
 * returns the region's result for the last work-item, in the block the builder ends in. */
static LLVMValueRef build_item_loops(cpu_item_t *it, LLVMValueRef wg, LLVMValueRef region, LLVMValueRef *args,
                                     LLVMValueRef ctx, LLVMValueRef size[3], LLVMValueRef nwi) {
  LLVMContextRef c = it->job->ctx;
  LLVMBuilderRef b = it->b;
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
  LLVMBasicBlockRef zb = LLVMAppendBasicBlockInContext(c, wg, "z");
  LLVMBasicBlockRef yb = LLVMAppendBasicBlockInContext(c, wg, "y");
  LLVMBasicBlockRef xb = LLVMAppendBasicBlockInContext(c, wg, "x");
  LLVMBasicBlockRef xe = LLVMAppendBasicBlockInContext(c, wg, "x.end");
  LLVMBasicBlockRef ye = LLVMAppendBasicBlockInContext(c, wg, "y.end");
  LLVMBasicBlockRef ze = LLVMAppendBasicBlockInContext(c, wg, "z.end");
  LLVMValueRef zero = LLVMConstInt(it->i32, 0, 0), one = LLVMConstInt(it->i32, 1, 0);
  LLVMBuildBr(b, zb);

  LLVMPositionBuilderAtEnd(b, zb);
  LLVMValueRef z = LLVMBuildPhi(b, it->i32, "lz");
  LLVMBuildBr(b, yb);
  LLVMPositionBuilderAtEnd(b, yb);
  LLVMValueRef y = LLVMBuildPhi(b, it->i32, "ly");
  LLVMValueRef row = LLVMBuildMul(b, LLVMBuildAdd(b, LLVMBuildMul(b, z, size[1], ""), y, ""), size[0], "");
  LLVMBuildBr(b, xb);
  LLVMPositionBuilderAtEnd(b, xb);
  LLVMValueRef x = LLVMBuildPhi(b, it->i32, "lx");
  LLVMValueRef wi = LLVMBuildAdd(b, row, x, "wi");
  LLVMValueRef call_args[KC_MAX_PARAMS + XP_COUNT];
  for (unsigned i = 0; i < it->np; i++) call_args[i] = args[i];
  call_args[it->np + XP_CTX] = ctx;
  call_args[it->np + XP_LX] = x;
  call_args[it->np + XP_LY] = y;
  call_args[it->np + XP_LZ] = z;
  call_args[it->np + XP_WI] = wi;
  call_args[it->np + XP_NWI] = nwi;
  LLVMValueRef next = LLVMBuildCall2(b, it->fn_type, region, call_args, it->np + XP_COUNT, "next");
  LLVMValueRef x1 = LLVMBuildNUWAdd(b, x, one, "");
  no_unroll(it, LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, x1, size[0], ""), xb, xe));
  LLVMPositionBuilderAtEnd(b, xe);
  LLVMValueRef y1 = LLVMBuildNUWAdd(b, y, one, "");
  no_unroll(it, LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, y1, size[1], ""), yb, ye));
  LLVMPositionBuilderAtEnd(b, ye);
  LLVMValueRef z1 = LLVMBuildNUWAdd(b, z, one, "");
  no_unroll(it, LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, z1, size[2], ""), zb, ze));

  LLVMValueRef vz[2] = {zero, z1}, vy[2] = {zero, y1}, vx[2] = {zero, x1};
  LLVMBasicBlockRef bz[2] = {pre, ye}, by[2] = {zb, xe}, bx[2] = {yb, xb};
  LLVMAddIncoming(z, vz, bz, 2);
  LLVMAddIncoming(y, vy, by, 2);
  LLVMAddIncoming(x, vx, bx, 2);
  LLVMPositionBuilderAtEnd(b, ze);
  return next;
}

static kiln_status_t build_wg_function(cpu_item_t *it) {
  LLVMContextRef c = it->job->ctx;
  LLVMBuilderRef b = it->b;
  LLVMTypeRef params[2] = {it->ptr, it->ptr};
  LLVMTypeRef ty = LLVMFunctionType(LLVMVoidTypeInContext(c), params, 2, 0);
  char name[160];
  snprintf(name, sizeof(name), KILN_CPU_WG_PREFIX "%s", it->kernel->name);
  if (LLVMGetNamedFunction(it->job->mod, name))
    return KC_COMPILE_ERROR("the module already defines '%s', a name kiln reserves", name);
  LLVMValueRef wg = LLVMAddFunction(it->job->mod, name, ty);
  unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
  LLVMAddAttributeAtIndex(wg, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(c, nounwind, 0));
  /* The context and the argument array are only read, and no kernel pointer can reach
   * them: saying so lets the optimiser hoist their loads out of the work-item loops. */
  static const char *const param_attrs[] = {"noalias", "readonly", "nonnull"};
  for (unsigned p = 1; p <= 2; p++)
    for (size_t a = 0; a < 3; a++)
      LLVMAddAttributeAtIndex(wg, p, LLVMCreateEnumAttribute(c, LLVMGetEnumAttributeKindForName(param_attrs[a], strlen(param_attrs[a])), 0));
  LLVMValueRef ctx = LLVMGetParam(wg, 0), argv = LLVMGetParam(wg, 1);

  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(c, wg, "entry"));
  LLVMTypeRef kparams[KC_MAX_PARAMS];
  LLVMGetParamTypes(LLVMGlobalGetValueType(it->kernel->fn), kparams);
  LLVMValueRef args[KC_MAX_PARAMS];
  for (unsigned i = 0; i < it->np; i++) {
    LLVMValueRef idx = LLVMConstInt(it->i64, i, 0);
    LLVMValueRef slot = LLVMBuildInBoundsGEP2(b, it->ptr, argv, &idx, 1, "");
    LLVMValueRef p = LLVMBuildLoad2(b, it->ptr, slot, "");
    args[i] = LLVMBuildLoad2(b, kparams[i], p, "");
  }
  LLVMValueRef size[3];
  for (unsigned d = 0; d < 3; d++) {
    LLVMValueRef idx = LLVMConstInt(it->i64, offsetof(kiln_cpu_wg_ctx_t, group_size) + 4 * d, 0);
    size[d] = LLVMBuildLoad2(b, it->i32, LLVMBuildInBoundsGEP2(b, it->i8, ctx, &idx, 1, ""), "");
  }
  LLVMValueRef nwi = LLVMBuildMul(b, LLVMBuildMul(b, size[0], size[1], ""), size[2], "nwi");

  if (it->nbar == 0) {
    build_item_loops(it, wg, it->regions[0], args, ctx, size, nwi);
    LLVMBuildRetVoid(b);
    return KILN_OK;
  }
  /* A dispatch loop over regions: every work-item runs region r up to its next barrier,
   * then all of them run the region after that barrier. Barriers are reached by all
   * work-items of a group (the dialect's rule, as on GPUs), so the last work-item's answer
   * is everyone's. */
  LLVMBasicBlockRef entry = LLVMGetInsertBlock(b);
  LLVMBasicBlockRef dispatch = LLVMAppendBasicBlockInContext(c, wg, "dispatch");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c, wg, "done");
  LLVMBuildBr(b, dispatch);
  LLVMPositionBuilderAtEnd(b, dispatch);
  LLVMValueRef region = LLVMBuildPhi(b, it->i32, "region");
  LLVMValueRef zero = LLVMConstInt(it->i32, 0, 0);
  LLVMAddIncoming(region, &zero, &entry, 1);
  LLVMValueRef sw = LLVMBuildSwitch(b, region, done, it->nbar + 1);
  for (uint32_t r = 0; r <= it->nbar; r++) {
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(c, wg, "region");
    LLVMAddCase(sw, LLVMConstInt(it->i32, r, 0), head);
    LLVMPositionBuilderAtEnd(b, head);
    LLVMValueRef next = build_item_loops(it, wg, it->regions[r], args, ctx, size, nwi);
    LLVMBasicBlockRef end = LLVMGetInsertBlock(b);
    LLVMBuildBr(b, dispatch);
    LLVMAddIncoming(region, &next, &end, 1);
  }
  LLVMPositionBuilderAtEnd(b, done);
  LLVMBuildRetVoid(b);
  return KILN_OK;
}

/* ---- driver ------------------------------------------------------------------------ */

static kiln_status_t lower_kernel(kc_job_t *job, kc_kernel_t *k, LLVMBuilderRef b) {
  cpu_item_t *it = calloc(1, sizeof(*it));
  if (!it) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  it->job = job;
  it->kernel = k;
  it->b = b;
  it->i8 = LLVMInt8TypeInContext(job->ctx);
  it->i32 = LLVMInt32TypeInContext(job->ctx);
  it->i64 = LLVMInt64TypeInContext(job->ctx);
  it->ptr = LLVMPointerTypeInContext(job->ctx, 0);
  make_item_function(it);
  LLVMValueRef dyn = NULL;
  kiln_status_t s = lower_shared(it, &dyn);
  if (!s) lower_builtins(it, dyn);
  if (!s) s = cpu_split_regions(it);
  if (!s) s = build_wg_function(it);
  if (!s) {
    for (uint32_t r = 0; r <= it->nbar; r++) {
      LLVMSetLinkage(it->regions[r], LLVMInternalLinkage);
      unsigned ai = LLVMGetEnumAttributeKindForName("alwaysinline", 12);
      LLVMAddAttributeAtIndex(it->regions[r], LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(job->ctx, ai, 0));
    }
    if (LLVMGetFirstUse(k->fn)) s = KC_COMPILE_ERROR("kernel '%s' is called or referenced from other code: kernels cannot be called", k->name);
    else LLVMDeleteFunction(k->fn);
    k->fn = NULL;
  }
  free(it);
  return s;
}

/* Everything the kernels call is inlined into them, so that builtins and work-group
 * memory are only ever used inside a kernel's own body. */
static kiln_status_t inline_all(kc_job_t *job) {
  unsigned noinline = LLVMGetEnumAttributeKindForName("noinline", 8);
  unsigned optnone = LLVMGetEnumAttributeKindForName("optnone", 7);
  unsigned always = LLVMGetEnumAttributeKindForName("alwaysinline", 12);
  for (LLVMValueRef f = LLVMGetFirstFunction(job->mod); f; f = LLVMGetNextFunction(f)) {
    if (LLVMIsDeclaration(f)) continue;
    bool kernel = false;
    for (uint32_t i = 0; i < job->num_kernels; i++) kernel |= job->kernels[i].fn == f;
    if (!kernel) LLVMSetLinkage(f, LLVMInternalLinkage);
    LLVMRemoveEnumAttributeAtIndex(f, LLVMAttributeFunctionIndex, noinline);
    LLVMRemoveEnumAttributeAtIndex(f, LLVMAttributeFunctionIndex, optnone);
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(job->ctx, always, 0));
  }
  return kc_run_passes(job, "always-inline,function(sroa)");
}

/* After lowering, nothing may still use a builtin or work-group global. */
static kiln_status_t check_leftovers(kc_job_t *job) {
  static const char *const names[] = {"__kiln_group_id",   "__kiln_local_id", "__kiln_group_size",
                                      "__kiln_num_groups", "__kiln_barrier",  "__kiln_dynamic_shared"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    LLVMValueRef f = LLVMGetNamedFunction(job->mod, names[i]);
    if (!f) continue;
    if (LLVMGetFirstUse(f))
      return KC_COMPILE_ERROR("%s is used outside a kernel body in a function that cannot be inlined "
                              "(recursion?): on cpu, builtins must be reachable by inlining", names[i]);
    LLVMDeleteFunction(f);
  }
  LLVMValueRef next;
  for (LLVMValueRef g = LLVMGetFirstGlobal(job->mod); g; g = next) {
    next = LLVMGetNextGlobal(g);
    if (LLVMGetPointerAddressSpace(LLVMTypeOf(g)) != AS_LOCAL) continue;
    if (LLVMGetFirstUse(g)) {
      size_t len;
      return KC_COMPILE_ERROR("work-group global '%s' is used outside a kernel body", LLVMGetValueName2(g, &len));
    }
    LLVMDeleteGlobal(g);
  }
  return KILN_OK;
}

kiln_status_t kc_lower_cpu(kc_job_t *job) {
  KILN_RETURN_IF_ERROR(inline_all(job));
  LLVMBuilderRef b = LLVMCreateBuilderInContext(job->ctx);
  kiln_status_t s = KILN_OK;
  for (uint32_t i = 0; i < job->num_kernels && !s; i++) s = lower_kernel(job, &job->kernels[i], b);
  LLVMDisposeBuilder(b);
  if (!s) s = check_leftovers(job);
  if (!s) s = kc_map_math_cpu(job);
  if (!s) s = kc_verify(job, "the IR after lowering to cpu work-group functions");
  return s;
}
