/* Emission of one te kernel as the kernel dialect (docs/kernels.md) through LLVM's C API,
 * after bound inference: te_emit.c makes the kernel function, te_emit_nest.c the storage,
 * loop nests, guards and statements of its stages, te_emit_expr.c the expressions. */
#ifndef KILN_COMPILER_TE_TE_EMIT_H
#define KILN_COMPILER_TE_TE_EMIT_H

#include <llvm-c/Core.h>

#include "compiler/te/te_program.h"

/* Adds kernel `kernel` of p to job->mod. */
kiln_status_t te_emit_kernel(kc_job_t *job, te_program_t *p, int kernel);

/* ---- shared by the emitter's files ------------------------------------------------- */

typedef struct te_em {
  kc_job_t *job;
  te_program_t *p;
  te_kernel_t *k;
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b, eb; /* eb: at the end of the entry block (allocas, ids) */
  LLVMValueRef fn;
  LLVMTypeRef ity, i1, i8, i32, i64, ptr;
  LLVMValueRef ids[6];
  LLVMValueRef *val; /* per var: its value where it is defined (loop phi, id, parameter) */
  LLVMValueRef *buf; /* per tensor: storage of a stage computed inside the kernel */
  te_expr_t **sub;   /* scratch substitution (p->nvars + 1) */
  uint64_t shared_bytes;
  kiln_status_t err; /* the first failure; emission stops adding code after it */
} te_em_t;

/* te_emit_expr.c */
void te_em_fail(te_em_t *m, kiln_status_t s);
LLVMTypeRef te_em_type(te_em_t *m, int dt, bool mem); /* mem: bool is i8 in memory */
bool te_em_is_fp(int dt);
LLVMValueRef te_em_expr(te_em_t *m, te_expr_t *e);
/* idx[] are index expressions over leaf vars; they may be replaced by casts in place. */
LLVMValueRef te_em_load(te_em_t *m, int tensor, te_expr_t **idx);
void te_em_store(te_em_t *m, int tensor, te_expr_t **idx, LLVMValueRef v);
/* __kiln_group_id / __kiln_local_id of bind 0..5, called once in the entry block. */
LLVMValueRef te_em_id(te_em_t *m, int which);

/* te_emit_nest.c: stage st (its storage unless it is an argument, its loop nest, the stages
 * attached inside it) at the builder's position. */
void te_em_stage(te_em_t *m, int st);

#endif
