/* Function body cloning through the C API (which has no CloneFunctionInto): blocks first,
 * then instructions, then operands remapped, then phis filled. Used by lower_cpu.c to make
 * one copy of a kernel per barrier region. Debug info is stripped before (dialect.c), so
 * no metadata operand can point back into the source function. */
#include "compiler/internal.h"

#include "base/map.h"

static LLVMValueRef mapped(const kiln_map_t *vmap, LLVMValueRef v) {
  LLVMValueRef m = kiln_map_get(vmap, (uint64_t)(uintptr_t)v);
  return m ? m : v;
}

kiln_status_t kc_clone_body(LLVMValueRef src, LLVMValueRef dst, kiln_map_t *vmap) {
  LLVMContextRef ctx = LLVMGetModuleContext(LLVMGetGlobalParent(src));
  unsigned np = LLVMCountParams(src);
  for (unsigned i = 0; i < np; i++)
    KILN_RETURN_IF_ERROR(kiln_map_put(vmap, (uint64_t)(uintptr_t)LLVMGetParam(src, i), LLVMGetParam(dst, i)));
  for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(src); b; b = LLVMGetNextBasicBlock(b)) {
    LLVMBasicBlockRef nb = LLVMAppendBasicBlockInContext(ctx, dst, "");
    KILN_RETURN_IF_ERROR(kiln_map_put(vmap, (uint64_t)(uintptr_t)LLVMBasicBlockAsValue(b), LLVMBasicBlockAsValue(nb)));
  }
  LLVMBuilderRef bld = LLVMCreateBuilderInContext(ctx);
  kiln_status_t s = KILN_OK;
  for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(src); b && !s; b = LLVMGetNextBasicBlock(b)) {
    LLVMBasicBlockRef nb = LLVMValueAsBasicBlock(mapped(vmap, LLVMBasicBlockAsValue(b)));
    LLVMPositionBuilderAtEnd(bld, nb);
    for (LLVMValueRef i = LLVMGetFirstInstruction(b); i && !s; i = LLVMGetNextInstruction(i)) {
      LLVMValueRef c;
      if (LLVMIsAPHINode(i)) {
        c = LLVMBuildPhi(bld, LLVMTypeOf(i), "");
      } else {
        c = LLVMInstructionClone(i);
        LLVMInsertIntoBuilder(bld, c);
      }
      s = kiln_map_put(vmap, (uint64_t)(uintptr_t)i, c);
    }
  }
  for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(src); b && !s; b = LLVMGetNextBasicBlock(b)) {
    for (LLVMValueRef i = LLVMGetFirstInstruction(b); i; i = LLVMGetNextInstruction(i)) {
      LLVMValueRef c = mapped(vmap, i);
      if (LLVMIsAPHINode(i)) {
        unsigned n = LLVMCountIncoming(i);
        for (unsigned k = 0; k < n; k++) {
          LLVMValueRef v = mapped(vmap, LLVMGetIncomingValue(i, k));
          LLVMBasicBlockRef bb = LLVMValueAsBasicBlock(mapped(vmap, LLVMBasicBlockAsValue(LLVMGetIncomingBlock(i, k))));
          LLVMAddIncoming(c, &v, &bb, 1);
        }
        continue;
      }
      int n = LLVMGetNumOperands(i);
      for (int k = 0; k < n; k++) {
        LLVMValueRef op = LLVMGetOperand(i, (unsigned)k);
        LLVMValueRef m = op ? mapped(vmap, op) : NULL;
        if (m != op) LLVMSetOperand(c, (unsigned)k, m);
      }
    }
  }
  LLVMDisposeBuilder(bld);
  return s;
}
