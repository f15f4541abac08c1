/* State shared by lower_cpu.c (work-item function, builtins, work-group memory, the
 * work-group function) and cpu_regions.c (barrier regions and what lives across them). */
#ifndef KILN_COMPILER_CPU_LOWER_H
#define KILN_COMPILER_CPU_LOWER_H

#include "compiler/internal.h"

#define CPU_MAX_BARRIERS 256

/* Extra parameters of the work-item function, after the kernel's own. */
enum { XP_CTX, XP_LX, XP_LY, XP_LZ, XP_WI, XP_NWI, XP_COUNT };

typedef struct cpu_item {
  kc_job_t *job;
  kc_kernel_t *kernel;
  LLVMBuilderRef b;
  LLVMTypeRef i8, i32, i64, ptr;
  /* The work-item function: i32 (kernel params..., ptr ctx, i32 lx, ly, lz, wi, nwi). It
   * returns the region to run next, or -1 when the work-item is done. */
  LLVMValueRef fn;
  LLVMTypeRef fn_type;
  unsigned np; /* the kernel's own parameters */
  /* First block: values every region needs (context fields, work-group memory and scratch
   * addresses). It dominates everything, in every region copy. */
  LLVMBasicBlockRef prologue;
  LLVMValueRef shared, scratch, wi64, nwi64;
  /* Barrier j splits bar_block[j] (which then ends in `br cont[j]`) from cont[j]. Region
   * j+1 starts at cont[j]; region 0 at the kernel's entry. */
  uint32_t nbar;
  LLVMBasicBlockRef bar_block[CPU_MAX_BARRIERS], cont[CPU_MAX_BARRIERS];
  LLVMValueRef regions[CPU_MAX_BARRIERS + 1];
} cpu_item_t;

LLVMValueRef cpu_param(const cpu_item_t *it, unsigned extra);
/* Positions the builder at the end of the prologue (before its branch). */
void cpu_at_prologue(cpu_item_t *it);

/* cpu_regions.c: barriers -> regions (fills nbar, regions[], private_segment_size). */
KILN_MUST_USE kiln_status_t cpu_split_regions(cpu_item_t *it);

#endif
