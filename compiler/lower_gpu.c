/* Dialect -> AMDGPU / NVPTX: work-item builtins to target intrinsics, the barrier, dynamic
 * shared memory, the kernel calling convention and launch bounds, allocas in the private
 * address space, work-group globals without initial values. Target IR passes through
 * here too and only gets the launch bound. docs/kernels.md, "Per-target lowering". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"

#define AS_LOCAL 3
#define AS_PRIVATE_AMDGPU 5
#define DYN_SHARED_NAME "__kiln_dynamic_shared_mem"

/* v5 hidden arguments read through the implicit-argument pointer (HSA.md §4). */
#define IMPLICIT_BLOCK_COUNT 0
#define IMPLICIT_GROUP_SIZE 12

static LLVMValueRef intrinsic(kc_job_t *job, const char *name) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  return id ? LLVMGetIntrinsicDeclaration(job->mod, id, NULL, 0) : NULL;
}

static LLVMValueRef call0(LLVMBuilderRef b, LLVMValueRef fn) {
  return LLVMBuildCall2(b, LLVMGlobalGetValueType(fn), fn, NULL, 0, "");
}

typedef enum { Q_GROUP_ID, Q_LOCAL_ID, Q_GROUP_SIZE, Q_NUM_GROUPS } query_t;

static const char *const query_builtin[] = {"__kiln_group_id", "__kiln_local_id",
                                            "__kiln_group_size", "__kiln_num_groups"};

/* The value of query `q` for constant dimension `dim` at the builder's position. */
static kiln_status_t query_dim(kc_job_t *job, LLVMBuilderRef b, query_t q, unsigned dim, LLVMValueRef *out) {
  LLVMTypeRef i32 = LLVMInt32TypeInContext(job->ctx);
  if (dim > 2) { /* CUDA and OpenCL agree: ids 0, sizes 1 past the last dimension */
    *out = LLVMConstInt(i32, q == Q_GROUP_SIZE || q == Q_NUM_GROUPS ? 1 : 0, 0);
    return KILN_OK;
  }
  static const char xyz[] = "xyz";
  char name[64];
  if (job->target.kind == KILN_TARGET_NVPTX) {
    static const char *const sreg[] = {"ctaid", "tid", "ntid", "nctaid"};
    snprintf(name, sizeof(name), "llvm.nvvm.read.ptx.sreg.%s.%c", sreg[q], xyz[dim]);
  } else if (q == Q_GROUP_ID || q == Q_LOCAL_ID) {
    snprintf(name, sizeof(name), "llvm.amdgcn.%s.id.%c", q == Q_GROUP_ID ? "workgroup" : "workitem", xyz[dim]);
  } else {
    /* Sizes live in the v5 hidden arguments; block_count is in work-groups because kiln
     * launches whole work-groups only. */
    LLVMValueRef ip = intrinsic(job, "llvm.amdgcn.implicitarg.ptr");
    if (!ip) return KILN_STATUS(KILN_E_INTERNAL, "LLVM lacks llvm.amdgcn.implicitarg.ptr");
    LLVMValueRef base = call0(b, ip);
    unsigned off = q == Q_GROUP_SIZE ? IMPLICIT_GROUP_SIZE + 2 * dim : IMPLICIT_BLOCK_COUNT + 4 * dim;
    LLVMTypeRef i8 = LLVMInt8TypeInContext(job->ctx);
    LLVMValueRef idx = LLVMConstInt(LLVMInt64TypeInContext(job->ctx), off, 0);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(b, i8, base, &idx, 1, "");
    LLVMTypeRef ty = q == Q_GROUP_SIZE ? LLVMInt16TypeInContext(job->ctx) : i32;
    LLVMValueRef v = LLVMBuildLoad2(b, ty, p, "");
    LLVMSetAlignment(v, q == Q_GROUP_SIZE ? 2 : 4);
    /* The hidden arguments do not change during a dispatch. */
    LLVMSetMetadata(v, LLVMGetMDKindIDInContext(job->ctx, "invariant.load", 14), LLVMMetadataAsValue(job->ctx, LLVMMDNodeInContext2(job->ctx, NULL, 0)));
    *out = q == Q_GROUP_SIZE ? LLVMBuildZExt(b, v, i32, "") : v;
    return KILN_OK;
  }
  LLVMValueRef fn = intrinsic(job, name);
  if (!fn) return KILN_STATUS(KILN_E_INTERNAL, "LLVM %s lacks intrinsic %s", KILN_LLVM_VERSION, name);
  *out = call0(b, fn);
  return KILN_OK;
}

static kiln_status_t lower_queries(kc_job_t *job, LLVMBuilderRef b) {
  LLVMValueRef *calls = job->values;
  for (query_t q = Q_GROUP_ID; q <= Q_NUM_GROUPS; q++) {
    /* Collected in batches of at most KC_MAX_VALUES; each batch is rewritten away. */
    for (size_t n; (n = kc_collect_calls(job->mod, query_builtin[q], calls, KC_MAX_VALUES));)
    for (size_t i = 0; i < n; i++) {
      LLVMValueRef call = calls[i];
      LLVMPositionBuilderBefore(b, call);
      LLVMValueRef d = LLVMGetOperand(call, 0);
      LLVMValueRef v;
      if (LLVMIsAConstantInt(d)) {
        KILN_RETURN_IF_ERROR(query_dim(job, b, q, (unsigned)LLVMConstIntGetZExtValue(d), &v));
      } else { /* a run-time dimension: select among the three */
        LLVMValueRef vals[4];
        for (unsigned k = 0; k < 4; k++) KILN_RETURN_IF_ERROR(query_dim(job, b, q, k, &vals[k]));
        v = vals[3];
        for (int k = 2; k >= 0; k--) {
          LLVMValueRef is_k = LLVMBuildICmp(b, LLVMIntEQ, d, LLVMConstInt(LLVMTypeOf(d), (unsigned)k, 0), "");
          v = LLVMBuildSelect(b, is_k, vals[k], v, "");
        }
      }
      LLVMReplaceAllUsesWith(call, v);
      LLVMInstructionEraseFromParent(call);
    }
  }
  return KILN_OK;
}

static kiln_status_t lower_barrier(kc_job_t *job, LLVMBuilderRef b) {
  LLVMValueRef *calls = job->values;
  size_t n = kc_collect_calls(job->mod, "__kiln_barrier", calls, KC_MAX_VALUES);
  if (!n) return KILN_OK;
  LLVMValueRef fn;
  LLVMValueRef arg = LLVMConstInt(LLVMInt32TypeInContext(job->ctx), 0, 0);
  unsigned nargs = 0;
  if (job->target.kind == KILN_TARGET_NVPTX) {
    /* bar.sync 0; LLVM 21 renamed llvm.nvvm.barrier0. */
    fn = intrinsic(job, "llvm.nvvm.barrier.cta.sync.aligned.all");
    if (fn) nargs = 1;
    else fn = intrinsic(job, "llvm.nvvm.barrier0");
  } else {
    fn = intrinsic(job, "llvm.amdgcn.s.barrier");
  }
  if (!fn) return KILN_STATUS(KILN_E_INTERNAL, "LLVM %s has no barrier intrinsic for %s", KILN_LLVM_VERSION, job->target.id);
  unsigned wg = LLVMGetSyncScopeID(job->ctx, "workgroup", 9);
  for (size_t i = 0; i < n; i++) {
    LLVMPositionBuilderBefore(b, calls[i]);
    /* AMDGPU: s_barrier alone orders no memory; HIP's __syncthreads brackets it with
     * work-group fences, and so do we. bar.sync on NVPTX is a memory barrier for the CTA. */
    if (job->target.kind == KILN_TARGET_AMDGPU)
      LLVMBuildFenceSyncScope(b, LLVMAtomicOrderingRelease, wg, "");
    LLVMBuildCall2(b, LLVMGlobalGetValueType(fn), fn, &arg, nargs, "");
    if (job->target.kind == KILN_TARGET_AMDGPU)
      LLVMBuildFenceSyncScope(b, LLVMAtomicOrderingAcquire, wg, "");
    LLVMInstructionEraseFromParent(calls[i]);
  }
  return KILN_OK;
}

/* An external zero-length array in the local address space is the launch's dynamic shared
 * memory on both GPU targets (HIP's and CUDA's extern __shared__). */
static kiln_status_t lower_dynamic_shared(kc_job_t *job, LLVMBuilderRef b) {
  LLVMValueRef *calls = job->values;
  size_t n = kc_collect_calls(job->mod, "__kiln_dynamic_shared", calls, KC_MAX_VALUES);
  if (!n) return KILN_OK;
  LLVMTypeRef arr = LLVMArrayType2(LLVMInt8TypeInContext(job->ctx), 0);
  LLVMValueRef g = LLVMAddGlobalInAddressSpace(job->mod, arr, DYN_SHARED_NAME, AS_LOCAL);
  LLVMSetAlignment(g, 16);
  LLVMSetLinkage(g, LLVMExternalLinkage);
  for (size_t i = 0; i < n; i++) {
    LLVMTypeRef want = LLVMTypeOf(calls[i]);
    LLVMValueRef v = g;
    if (LLVMGetTypeKind(want) != LLVMPointerTypeKind)
      return KC_COMPILE_ERROR("__kiln_dynamic_shared must return a pointer");
    if (LLVMGetPointerAddressSpace(want) != AS_LOCAL) {
      LLVMPositionBuilderBefore(b, calls[i]);
      v = LLVMBuildAddrSpaceCast(b, g, want, "");
    }
    LLVMReplaceAllUsesWith(calls[i], v);
    LLVMInstructionEraseFromParent(calls[i]);
  }
  return KILN_OK;
}

/* NVPTX cannot select single-thread (signal) fences. kernel.h brackets the barrier with
 * them to keep the optimiser from moving memory across it; on NVPTX the barrier intrinsic
 * itself does that (it is how clang compiles CUDA's __syncthreads), so they can go. */
static void drop_signal_fences(kc_job_t *job) {
  for (LLVMValueRef f = LLVMGetFirstFunction(job->mod); f; f = LLVMGetNextFunction(f))
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb)) {
      LLVMValueRef next;
      for (LLVMValueRef i = LLVMGetFirstInstruction(bb); i; i = next) {
        next = LLVMGetNextInstruction(i);
        if (LLVMGetInstructionOpcode(i) == LLVMFence && LLVMIsAtomicSingleThread(i)) LLVMInstructionEraseFromParent(i);
      }
    }
}

static void delete_builtin_declarations(kc_job_t *job) {
  static const char *const names[] = {"__kiln_group_id",   "__kiln_local_id", "__kiln_group_size",
                                      "__kiln_num_groups", "__kiln_barrier",  "__kiln_dynamic_shared"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    LLVMValueRef f = LLVMGetNamedFunction(job->mod, names[i]);
    if (f && !LLVMGetFirstUse(f)) LLVMDeleteFunction(f);
  }
}

/* Work-group memory has no initial value on GPUs and the back ends reject initialisers
 * (clang gives static arrays zeroinitializer). */
static kiln_status_t clear_shared_initializers(kc_job_t *job) {
  for (LLVMValueRef g = LLVMGetFirstGlobal(job->mod); g; g = LLVMGetNextGlobal(g)) {
    if (LLVMGetPointerAddressSpace(LLVMTypeOf(g)) != AS_LOCAL) continue;
    size_t len;
    const char *name = LLVMGetValueName2(g, &len);
    if (strcmp(name, DYN_SHARED_NAME) == 0) continue;
    if (LLVMIsDeclaration(g))
      return KC_COMPILE_ERROR("work-group global '%s' is declared but not defined: use "
                              "kiln_dynamic_shared() for memory sized at launch",
                              name);
    LLVMSetInitializer(g, LLVMGetPoison(LLVMGlobalGetValueType(g)));
    if (LLVMGetLinkage(g) != LLVMInternalLinkage) LLVMSetLinkage(g, LLVMInternalLinkage);
  }
  return KILN_OK;
}

/* clang brackets the life of a local variable with llvm.lifetime.start/end, whose pointer
 * operand must be the alloca itself. Once the alloca moved to address space 5 the markers
 * are re-made for it (the .p5 overload); the ones on the old generic alloca go away. */
static LLVMValueRef find_lifetime_marker(LLVMValueRef alloca, const unsigned ids[2]) {
  for (LLVMUseRef u = LLVMGetFirstUse(alloca); u; u = LLVMGetNextUse(u)) {
    LLVMValueRef v = LLVMGetUser(u);
    if (!LLVMIsACallInst(v)) continue;
    unsigned id = LLVMGetIntrinsicID(LLVMGetCalledValue(v));
    if (id && (id == ids[0] || id == ids[1])) return v;
  }
  return NULL;
}

static void retarget_lifetime_markers(kc_job_t *job, LLVMBuilderRef b, LLVMValueRef old, LLVMValueRef priv) {
  static const char start[] = "llvm.lifetime.start", end[] = "llvm.lifetime.end";
  const unsigned ids[2] = {LLVMLookupIntrinsicID(start, sizeof(start) - 1),
                           LLVMLookupIntrinsicID(end, sizeof(end) - 1)};
  LLVMTypeRef ptr_ty = LLVMTypeOf(priv);
  for (LLVMValueRef marker; (marker = find_lifetime_marker(old, ids));) {
    /* LLVM 22's markers take the pointer alone; older ones a size first. */
    LLVMValueRef args[2];
    unsigned argc = (unsigned)LLVMGetNumArgOperands(marker);
    if (argc > 2) argc = 2;
    for (unsigned a = 0; a < argc; a++) {
      LLVMValueRef op = LLVMGetOperand(marker, a);
      args[a] = op == old ? priv : op;
    }
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(job->mod, LLVMGetIntrinsicID(LLVMGetCalledValue(marker)), &ptr_ty, 1);
    LLVMPositionBuilderBefore(b, marker);
    LLVMBuildCall2(b, LLVMGlobalGetValueType(fn), fn, args, argc, "");
    LLVMInstructionEraseFromParent(marker);
  }
}

/* AMDGPU's allocas live in address space 5 (the data layout's A5). Each alloca is recreated
 * there and cast back to generic; infer-address-spaces then removes the casts. */
static void allocas_to_private(kc_job_t *job, LLVMBuilderRef b) {
  for (LLVMValueRef f = LLVMGetFirstFunction(job->mod); f; f = LLVMGetNextFunction(f)) {
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb)) {
      LLVMValueRef next;
      for (LLVMValueRef i = LLVMGetFirstInstruction(bb); i; i = next) {
        next = LLVMGetNextInstruction(i);
        if (!LLVMIsAAllocaInst(i) || LLVMGetPointerAddressSpace(LLVMTypeOf(i)) == AS_PRIVATE_AMDGPU) continue;
        LLVMPositionBuilderBefore(b, i);
        LLVMValueRef count = LLVMGetOperand(i, 0);
        LLVMTypeRef ty = LLVMGetAllocatedType(i);
        LLVMValueRef a = LLVMIsAConstantInt(count) && LLVMConstIntGetZExtValue(count) == 1
                             ? LLVMBuildAlloca(b, ty, "")
                             : LLVMBuildArrayAlloca(b, ty, count, "");
        LLVMSetAlignment(a, LLVMGetAlignment(i));
        retarget_lifetime_markers(job, b, i, a);
        LLVMPositionBuilderBefore(b, i);
        LLVMValueRef cast = LLVMBuildAddrSpaceCast(b, a, LLVMTypeOf(i), "");
        LLVMReplaceAllUsesWith(i, cast);
        next = LLVMGetNextInstruction(i); /* the markers after it may have just gone */
        LLVMInstructionEraseFromParent(i);
      }
    }
  }
}

#if LLVM_VERSION_MAJOR < 20
/* LLVM 19 reads NVPTX kernels and launch bounds from !nvvm.annotations. */
static void nvvm_annotate(kc_job_t *job, LLVMValueRef f, const char *key, uint32_t value) {
  LLVMMetadataRef ops[3] = {LLVMValueAsMetadata(f), LLVMMDStringInContext2(job->ctx, key, strlen(key)),
                            LLVMValueAsMetadata(LLVMConstInt(LLVMInt32TypeInContext(job->ctx), value, 0))};
  LLVMAddNamedMetadataOperand(job->mod, "nvvm.annotations",
                              LLVMMetadataAsValue(job->ctx, LLVMMDNodeInContext2(job->ctx, ops, 3)));
}
#endif

static void set_kernel_abi(kc_job_t *job) {
  char bound[32];
  uint32_t max_block = job->req->options.max_block;
  for (uint32_t k = 0; k < job->num_kernels; k++) {
    LLVMValueRef f = job->kernels[k].fn;
    LLVMSetLinkage(f, LLVMExternalLinkage);
    LLVMSetVisibility(f, LLVMProtectedVisibility);
    bool amd = job->target.kind == KILN_TARGET_AMDGPU;
    LLVMSetFunctionCallConv(f, amd ? LLVMAMDGPUKERNELCallConv : LLVMPTXKernelCallConv);
    if (!amd) LLVMSetVisibility(f, LLVMDefaultVisibility);
#if LLVM_VERSION_MAJOR < 20
    if (!amd) {
      nvvm_annotate(job, f, "kernel", 1);
      if (max_block) nvvm_annotate(job, f, "maxntidx", max_block);
      continue;
    }
#endif
    if (!max_block) continue;
    /* The launch bound: AMDGPU takes a "min,max" range, NVPTX the maximum. */
    const char *attr = amd ? "amdgpu-flat-work-group-size" : "nvvm.maxntid";
    snprintf(bound, sizeof(bound), amd ? "1,%u" : "%u", max_block);
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(job->ctx, attr, (unsigned)strlen(attr), bound,
                                                      (unsigned)strlen(bound)));
  }
}

kiln_status_t kc_lower_gpu(kc_job_t *job) {
  LLVMBuilderRef b = LLVMCreateBuilderInContext(job->ctx);
  kiln_status_t s = KILN_OK;
  if (job->ir_kind == KC_IR_DIALECT) {
    s = lower_queries(job, b);
    if (!s) s = lower_barrier(job, b);
    if (!s) s = lower_dynamic_shared(job, b);
    if (!s) s = clear_shared_initializers(job);
    if (!s) delete_builtin_declarations(job);
    if (!s && job->target.kind == KILN_TARGET_AMDGPU) allocas_to_private(job, b);
  }
  if (!s && job->target.kind == KILN_TARGET_NVPTX) drop_signal_fences(job);
  if (!s) set_kernel_abi(job);
  LLVMDisposeBuilder(b);
  if (!s) s = kc_map_math(job);
  if (!s) s = kc_verify(job, "the IR after lowering for the target");
  return s;
}
