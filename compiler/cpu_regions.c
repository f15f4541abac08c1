/* Barriers on the CPU: the work-item function is cut at each barrier into regions; the
 * work-group function runs one region for all work-items before the next (lower_cpu.c).
 *
 * What must survive from one region to the next lives per work-item in ctx->scratch:
 * every alloca of the kernel, and every SSA value that may be used after a barrier it was
 * defined before. The test is conservative and cheap: value V (block D) is kept in scratch
 * if some use block U is reachable from the start of a region whose barrier is reachable
 * from D. Slots are laid out structure-of-arrays (slot s of work-item w at
 * scratch + off_s * n + w * size_s, n = work-items per group), so that consecutive
 * work-items touch consecutive bytes and region loops still vectorise. Slots are sorted by
 * alignment, so each is naturally aligned; the kernel table's private_segment_size is the
 * sum of slot sizes per work-item.
 *
 * Each region then gets its own copy of the work-item function, entered at the region's
 * first block, with each barrier turned into `ret <next region>`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/map.h"
#include "compiler/cpu_lower.h"

#define MAX_BLOCKS 4096
#define MAX_SLOTS 4096

typedef struct slot {
  LLVMValueRef value; /* alloca or spilled instruction */
  uint64_t size;
  uint32_t align;
  uint64_t offset;
  LLVMValueRef addr; /* prologue pointer for this work-item */
} slot_t;

typedef struct regions {
  cpu_item_t *it;
  size_t nblocks;
  LLVMBasicBlockRef blocks[MAX_BLOCKS];
  kiln_map_t index;                 /* block value -> index + 1 */
  uint64_t *reach;                  /* nblocks x words: reachable in one or more steps */
  size_t words;
  uint64_t *from, *to;              /* per block: barriers reachable from it / reaching it */
  size_t bwords;
  size_t nslots;
  slot_t slots[MAX_SLOTS];
} regions_t;

static bool bit(const uint64_t *set, size_t i) { return set[i / 64] >> (i % 64) & 1; }
static void set_bit(uint64_t *set, size_t i) { set[i / 64] |= 1ull << (i % 64); }

static size_t block_index(const regions_t *r, LLVMBasicBlockRef b) {
  return (size_t)(uintptr_t)kiln_map_get(&r->index, (uint64_t)(uintptr_t)LLVMBasicBlockAsValue(b)) - 1;
}

/* ---- splitting --------------------------------------------------------------------- */

/* Phis in `succ` that name `old` as a predecessor now come from `new`. The C API cannot
 * change a phi's incoming block, so such phis are rebuilt. */
static void retarget_phis(LLVMBuilderRef b, LLVMBasicBlockRef succ, LLVMBasicBlockRef old, LLVMBasicBlockRef new) {
  LLVMValueRef next;
  for (LLVMValueRef phi = LLVMGetFirstInstruction(succ); phi && LLVMIsAPHINode(phi); phi = next) {
    next = LLVMGetNextInstruction(phi);
    unsigned n = LLVMCountIncoming(phi);
    bool hit = false;
    for (unsigned i = 0; i < n; i++) hit |= LLVMGetIncomingBlock(phi, i) == old;
    if (!hit) continue;
    LLVMPositionBuilderBefore(b, phi);
    LLVMValueRef np = LLVMBuildPhi(b, LLVMTypeOf(phi), "");
    for (unsigned i = 0; i < n; i++) {
      LLVMValueRef v = LLVMGetIncomingValue(phi, i);
      LLVMBasicBlockRef bb = LLVMGetIncomingBlock(phi, i);
      if (bb == old) bb = new;
      LLVMAddIncoming(np, &v, &bb, 1);
    }
    LLVMReplaceAllUsesWith(phi, np);
    LLVMInstructionEraseFromParent(phi);
  }
}

static kiln_status_t split_barriers(cpu_item_t *it) {
  LLVMValueRef calls[CPU_MAX_BARRIERS + 1];
  size_t n = kc_collect_calls(it->job->mod, "__kiln_barrier", calls, CPU_MAX_BARRIERS + 1);
  size_t mine = 0;
  for (size_t i = 0; i < n; i++)
    if (LLVMGetBasicBlockParent(LLVMGetInstructionParent(calls[i])) == it->fn) calls[mine++] = calls[i];
  if (mine > CPU_MAX_BARRIERS)
    return KC_COMPILE_ERROR("kernel '%s' has more than %d barriers after inlining", it->kernel->name, CPU_MAX_BARRIERS);
  for (size_t k = 0; k < mine; k++) {
    LLVMValueRef call = calls[k];
    LLVMBasicBlockRef bb = LLVMGetInstructionParent(call);
    LLVMBasicBlockRef cont = LLVMAppendBasicBlockInContext(it->job->ctx, it->fn, "after.barrier");
    LLVMPositionBuilderAtEnd(it->b, cont);
    for (LLVMValueRef i = LLVMGetNextInstruction(call), next; i; i = next) {
      next = LLVMGetNextInstruction(i);
      LLVMInstructionRemoveFromParent(i);
      LLVMInsertIntoBuilder(it->b, i);
    }
    LLVMInstructionEraseFromParent(call);
    /* Calls come in use-list order, not program order: a barrier later in this block may
     * have been split already, and its `br` to its continuation has just moved into cont. */
    for (size_t j = 0; j < k; j++)
      if (it->bar_block[j] == bb) it->bar_block[j] = cont;
    LLVMPositionBuilderAtEnd(it->b, bb);
    LLVMBuildBr(it->b, cont);
    LLVMValueRef term = LLVMGetBasicBlockTerminator(cont);
    for (unsigned s = 0; term && s < LLVMGetNumSuccessors(term); s++)
      retarget_phis(it->b, LLVMGetSuccessor(term, s), bb, cont);
    it->bar_block[k] = bb;
    it->cont[k] = cont;
  }
  it->nbar = (uint32_t)mine;
  return KILN_OK;
}

/* ---- reachability ------------------------------------------------------------------ */

static kiln_status_t analyse(regions_t *r) {
  cpu_item_t *it = r->it;
  for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(it->fn); b; b = LLVMGetNextBasicBlock(b)) {
    if (r->nblocks == MAX_BLOCKS)
      return KC_COMPILE_ERROR("kernel '%s' has more than %d blocks: too large for cpu barrier lowering",
                              it->kernel->name, MAX_BLOCKS);
    r->blocks[r->nblocks] = b;
    KILN_RETURN_IF_ERROR(kiln_map_put(&r->index, (uint64_t)(uintptr_t)LLVMBasicBlockAsValue(b),
                                      (void *)(uintptr_t)(r->nblocks + 1)));
    r->nblocks++;
  }
  r->words = (r->nblocks + 63) / 64;
  r->bwords = (it->nbar + 63) / 64;
  r->reach = calloc(r->nblocks * r->words, 8);
  r->from = calloc(r->nblocks * r->bwords, 8);
  r->to = calloc(r->nblocks * r->bwords, 8);
  size_t *stack = malloc(r->nblocks * sizeof(size_t));
  if (!r->reach || !r->from || !r->to || !stack) {
    free(stack);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory analysing barriers");
  }
  for (size_t s = 0; s < r->nblocks; s++) {
    uint64_t *set = r->reach + s * r->words;
    size_t top = 0;
    stack[top++] = s;
    while (top) {
      LLVMValueRef term = LLVMGetBasicBlockTerminator(r->blocks[stack[--top]]);
      for (unsigned k = 0; term && k < LLVMGetNumSuccessors(term); k++) {
        size_t j = block_index(r, LLVMGetSuccessor(term, k));
        if (!bit(set, j)) {
          set_bit(set, j);
          stack[top++] = j;
        }
      }
    }
  }
  free(stack);
  for (uint32_t k = 0; k < it->nbar; k++) {
    size_t c = block_index(r, it->cont[k]);
    for (size_t b = 0; b < r->nblocks; b++) {
      if (bit(r->reach + b * r->words, c)) set_bit(r->from + b * r->bwords, k);
      if (b == c || bit(r->reach + c * r->words, b)) set_bit(r->to + b * r->bwords, k);
    }
  }
  return KILN_OK;
}

static bool crosses_barrier(const regions_t *r, size_t def_block, size_t use_block) {
  for (size_t w = 0; w < r->bwords; w++)
    if (r->from[def_block * r->bwords + w] & r->to[use_block * r->bwords + w]) return true;
  return false;
}

static bool needs_slot(const regions_t *r, LLVMValueRef v) {
  size_t d = block_index(r, LLVMGetInstructionParent(v));
  for (LLVMUseRef u = LLVMGetFirstUse(v); u; u = LLVMGetNextUse(u)) {
    LLVMValueRef user = LLVMGetUser(u);
    if (!LLVMIsAInstruction(user)) continue;
    if (LLVMIsAPHINode(user)) {
      unsigned n = LLVMCountIncoming(user);
      for (unsigned i = 0; i < n; i++)
        if (LLVMGetIncomingValue(user, i) == v && crosses_barrier(r, d, block_index(r, LLVMGetIncomingBlock(user, i))))
          return true;
    } else if (crosses_barrier(r, d, block_index(r, LLVMGetInstructionParent(user)))) {
      return true;
    }
  }
  return false;
}

/* ---- slots ------------------------------------------------------------------------- */

static kiln_status_t add_slot(regions_t *r, LLVMValueRef v, uint64_t size, uint32_t align) {
  if (r->nslots == MAX_SLOTS)
    return KC_COMPILE_ERROR("kernel '%s' keeps more than %d values across barriers", r->it->kernel->name, MAX_SLOTS);
  if (align < 1) align = 1;
  size = (size + align - 1) / align * align;
  r->slots[r->nslots++] = (slot_t){.value = v, .size = size ? size : align, .align = align};
  return KILN_OK;
}

static kiln_status_t collect_slots(regions_t *r) {
  cpu_item_t *it = r->it;
  LLVMTargetDataRef td = LLVMGetModuleDataLayout(it->job->mod);
  for (size_t bi = 0; bi < r->nblocks; bi++) {
    if (r->blocks[bi] == it->prologue) continue;
    for (LLVMValueRef i = LLVMGetFirstInstruction(r->blocks[bi]); i; i = LLVMGetNextInstruction(i)) {
      LLVMTypeRef ty = LLVMTypeOf(i);
      if (LLVMIsAAllocaInst(i)) {
        LLVMValueRef count = LLVMGetOperand(i, 0);
        if (!LLVMIsAConstantInt(count))
          return KC_COMPILE_ERROR("kernel '%s' has a variable-sized stack array and barriers: on cpu, size "
                                  "private arrays with constants", it->kernel->name);
        LLVMTypeRef at = LLVMGetAllocatedType(i);
        uint32_t align = LLVMGetAlignment(i);
        if (LLVMABIAlignmentOfType(td, at) > align) align = LLVMABIAlignmentOfType(td, at);
        KILN_RETURN_IF_ERROR(add_slot(r, i, LLVMABISizeOfType(td, at) * LLVMConstIntGetZExtValue(count), align));
        continue;
      }
      LLVMTypeKind kind = LLVMGetTypeKind(ty);
      if (kind == LLVMVoidTypeKind || kind == LLVMLabelTypeKind || kind == LLVMMetadataTypeKind) continue;
      if (!needs_slot(r, i)) continue;
      if (kind == LLVMTokenTypeKind || LLVMIsATerminatorInst(i))
        return KC_COMPILE_ERROR("kernel '%s': a token or terminator value lives across a barrier", it->kernel->name);
      KILN_RETURN_IF_ERROR(add_slot(r, i, LLVMABISizeOfType(td, ty), LLVMABIAlignmentOfType(td, ty)));
    }
  }
  return KILN_OK;
}

static int by_align_desc(const void *a, const void *b) {
  const slot_t *x = a, *y = b;
  return x->align != y->align ? (x->align < y->align ? 1 : -1) : 0;
}

static kiln_status_t layout_slots(regions_t *r) {
  cpu_item_t *it = r->it;
  qsort(r->slots, r->nslots, sizeof(slot_t), by_align_desc);
  uint64_t off = 0;
  cpu_at_prologue(it);
  for (size_t s = 0; s < r->nslots; s++) {
    slot_t *sl = &r->slots[s];
    off = (off + sl->align - 1) / sl->align * sl->align;
    sl->offset = off;
    off += sl->size;
    LLVMValueRef base = LLVMBuildMul(it->b, LLVMConstInt(it->i64, sl->offset, 0), it->nwi64, "");
    LLVMValueRef mine = LLVMBuildMul(it->b, LLVMConstInt(it->i64, sl->size, 0), it->wi64, "");
    LLVMValueRef idx = LLVMBuildAdd(it->b, base, mine, "");
    sl->addr = LLVMBuildInBoundsGEP2(it->b, it->i8, it->scratch, &idx, 1, "slot");
  }
  off = (off + 15) / 16 * 16;
  if (off > (1u << 24))
    return KC_COMPILE_ERROR("kernel '%s' keeps %llu bytes per work-item across barriers (limit 16 MiB)",
                            it->kernel->name, (unsigned long long)off);
  it->kernel->private_segment_size = (uint32_t)off;
  return KILN_OK;
}

static bool is_lifetime_marker(LLVMValueRef v) {
  if (!LLVMIsACallInst(v)) return false;
  LLVMValueRef callee = LLVMGetCalledValue(v);
  size_t len;
  const char *name = callee ? LLVMGetValueName2(callee, &len) : "";
  return strncmp(name, "llvm.lifetime.", 14) == 0;
}

static void rewrite_slot(regions_t *r, slot_t *sl) {
  cpu_item_t *it = r->it;
  LLVMValueRef v = sl->value;
  if (LLVMIsAAllocaInst(v)) {
    /* Lifetime markers must name an alloca; the memory now lives in scratch. */
    LLVMUseRef u = LLVMGetFirstUse(v);
    while (u) {
      LLVMValueRef user = LLVMGetUser(u);
      u = LLVMGetNextUse(u);
      if (is_lifetime_marker(user)) LLVMInstructionEraseFromParent(user);
    }
    LLVMReplaceAllUsesWith(v, sl->addr);
    LLVMInstructionEraseFromParent(v);
    return;
  }
  LLVMTypeRef ty = LLVMTypeOf(v);
  /* Users first: rewriting changes the use list. */
  size_t nusers = 0, cap = 16;
  LLVMValueRef *users = malloc(cap * sizeof(*users));
  for (LLVMUseRef u = LLVMGetFirstUse(v); u && users; u = LLVMGetNextUse(u)) {
    LLVMValueRef user = LLVMGetUser(u);
    bool dup = false;
    for (size_t i = 0; i < nusers && !dup; i++) dup = users[i] == user;
    if (dup) continue;
    if (nusers == cap) {
      LLVMValueRef *nu = realloc(users, 2 * cap * sizeof(*users));
      if (!nu) break;
      users = nu;
      cap *= 2;
    }
    users[nusers++] = user;
  }
  LLVMValueRef at = LLVMIsAPHINode(v) ? LLVMGetFirstInstruction(LLVMGetInstructionParent(v)) : LLVMGetNextInstruction(v);
  while (LLVMIsAPHINode(at)) at = LLVMGetNextInstruction(at);
  LLVMPositionBuilderBefore(it->b, at);
  LLVMValueRef st = LLVMBuildStore(it->b, v, sl->addr);
  LLVMSetAlignment(st, sl->align);
  for (size_t u = 0; u < nusers; u++) {
    LLVMValueRef user = users[u];
    if (LLVMIsAPHINode(user)) {
      unsigned n = LLVMCountIncoming(user);
      LLVMBasicBlockRef done_bb[64];
      LLVMValueRef done_ld[64];
      unsigned ndone = 0;
      for (unsigned i = 0; i < n; i++) {
        if (LLVMGetIncomingValue(user, i) != v) continue;
        LLVMBasicBlockRef bb = LLVMGetIncomingBlock(user, i);
        LLVMValueRef ld = NULL;
        for (unsigned k = 0; k < ndone && !ld; k++)
          if (done_bb[k] == bb) ld = done_ld[k];
        if (!ld) {
          LLVMPositionBuilderBefore(it->b, LLVMGetBasicBlockTerminator(bb));
          ld = LLVMBuildLoad2(it->b, ty, sl->addr, "");
          LLVMSetAlignment(ld, sl->align);
          if (ndone < 64) {
            done_bb[ndone] = bb;
            done_ld[ndone++] = ld;
          }
        }
        LLVMSetOperand(user, i, ld);
      }
    } else if (user != st) {
      LLVMPositionBuilderBefore(it->b, user);
      LLVMValueRef ld = LLVMBuildLoad2(it->b, ty, sl->addr, "");
      LLVMSetAlignment(ld, sl->align);
      int n = LLVMGetNumOperands(user);
      for (int k = 0; k < n; k++)
        if (LLVMGetOperand(user, (unsigned)k) == v) LLVMSetOperand(user, (unsigned)k, ld);
    }
  }
  free(users);
}

/* ---- region copies ----------------------------------------------------------------- */

static void barrier_to_return(cpu_item_t *it, LLVMBasicBlockRef bb, uint32_t next_region) {
  LLVMValueRef term = LLVMGetBasicBlockTerminator(bb);
  LLVMPositionBuilderBefore(it->b, term);
  LLVMBuildRet(it->b, LLVMConstInt(it->i32, next_region, 0));
  LLVMInstructionEraseFromParent(term);
}

static kiln_status_t make_regions(cpu_item_t *it) {
  for (uint32_t r = 1; r <= it->nbar; r++) {
    char name[160];
    snprintf(name, sizeof(name), "%s.kiln_region%u", it->kernel->name, r);
    LLVMValueRef fn = LLVMAddFunction(it->job->mod, name, it->fn_type);
    kiln_map_t vmap;
    kiln_map_init(&vmap);
    kiln_status_t s = kc_clone_body(it->fn, fn, &vmap);
    if (!s) {
#define MAPPED_BLOCK(bb) LLVMValueAsBasicBlock(kiln_map_get(&vmap, (uint64_t)(uintptr_t)LLVMBasicBlockAsValue(bb)))
      LLVMSetSuccessor(LLVMGetBasicBlockTerminator(LLVMGetFirstBasicBlock(fn)), 0, MAPPED_BLOCK(it->cont[r - 1]));
      for (uint32_t j = 0; j < it->nbar; j++) barrier_to_return(it, MAPPED_BLOCK(it->bar_block[j]), j + 1);
#undef MAPPED_BLOCK
    }
    kiln_map_deinit(&vmap);
    KILN_RETURN_IF_ERROR(s);
    it->regions[r] = fn;
  }
  for (uint32_t j = 0; j < it->nbar; j++) barrier_to_return(it, it->bar_block[j], j + 1);
  it->regions[0] = it->fn;
  return KILN_OK;
}

kiln_status_t cpu_split_regions(cpu_item_t *it) {
  KILN_RETURN_IF_ERROR(split_barriers(it));
  if (it->nbar == 0) {
    it->regions[0] = it->fn;
    return KILN_OK;
  }
  regions_t *r = calloc(1, sizeof(*r));
  if (!r) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  r->it = it;
  kiln_map_init(&r->index);
  kiln_status_t s = analyse(r);
  if (!s) s = collect_slots(r);
  if (!s) s = layout_slots(r);
  for (size_t i = 0; !s && i < r->nslots; i++) rewrite_slot(r, &r->slots[i]);
  kiln_map_deinit(&r->index);
  free(r->reach);
  free(r->from);
  free(r->to);
  free(r);
  if (!s) s = make_regions(it);
  return s;
}
