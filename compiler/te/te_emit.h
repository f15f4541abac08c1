/* Emission of one te kernel as the kernel dialect (docs/kernels.md) through LLVM's C API,
 * after bound inference: te_emit.c makes the kernel function, te_emit_nest.c the storage and
 * loop nests of its stages, te_emit_stmt.c their statements and guards, te_emit_expr.c the
 * expressions, te_emit_vec.c expressions over a vectorised loop var. */
#ifndef KILN_COMPILER_TE_TE_EMIT_H
#define KILN_COMPILER_TE_TE_EMIT_H

#include <llvm-c/Core.h>

#include "compiler/te/te_program.h"

/* Adds kernel `kernel` of p to job->mod. */
KILN_MUST_USE kiln_status_t te_emit_kernel(kc_job_t *job, te_program_t *p, int kernel);

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
  LLVMValueRef groups[3]; /* __kiln_num_groups(0..2) */
  LLVMValueRef *val; /* per var: its value where it is defined (loop phi, id, parameter) */
  LLVMValueRef *buf; /* per tensor: storage of a stage computed inside the kernel */
  LLVMValueRef *half; /* per tensor: element offset of the double buffer's half in use, or NULL */
  LLVMValueRef *regs; /* per tensor: a double-buffered stage's prefetch registers (an alloca) */
  int db_mode;        /* TE_DB_*: how the statements of the stage being emitted store */
  bool *vtvar;        /* per var: a vthread leaf of this kernel, valued only inside statements */
  te_expr_t **sub;   /* scratch substitution (p->nvars + 1) */
  uint64_t shared_bytes;
  LLVMValueRef vmask; /* vector lanes whose loads may be read (a lazy select's side), or NULL: all */
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
LLVMValueRef te_em_num_groups(te_em_t *m, int d);
/* The flat element index of idx[] in tensor t (row-major over the shape for arguments, over
 * the region from its min for stages stored in the kernel); casts idx[] to the index dtype
 * in place. */
te_expr_t *te_em_flat(te_em_t *m, int tensor, te_expr_t **idx);
/* The tensor's storage (a parameter or the stage's buffer); NULL and an error without. */
LLVMValueRef te_em_base(te_em_t *m, int tensor);
LLVMValueRef te_em_gep(te_em_t *m, int tensor, LLVMValueRef base, LLVMValueRef offset);
/* Operators on values of e's operand dtype, scalars or vectors alike. */
LLVMValueRef te_em_binop(te_em_t *m, const te_expr_t *e, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef te_em_cast(te_em_t *m, LLVMValueRef v, int from, int to);
/* `scalar`, or a vector of it as wide as v is. */
LLVMTypeRef te_em_like(LLVMValueRef v, LLVMTypeRef scalar);

/* te_emit_vec.c: a vectorised loop var `var` whose lanes are base + <0..width-1>; base (a
 * scalar of the index type) is a multiple of 2^base_pow2. */
typedef struct te_vec {
  int var;
  int width; /* 1..TE_VEC_MAX_LANES */
  LLVMValueRef base;
  int base_pow2;
} te_vec_t;

#define TE_VEC_MAX_LANES 64

bool te_em_uses(const te_expr_t *e, int var);
LLVMValueRef te_em_splat(te_em_t *m, LLVMValueRef v, int width);
/* e with v's var as lanes: a vector, or a scalar where e does not use the var. */
LLVMValueRef te_em_vexpr(te_em_t *m, te_expr_t *e, const te_vec_t *v);
LLVMValueRef te_em_vload(te_em_t *m, int tensor, te_expr_t **idx, const te_vec_t *v);
void te_em_vstore(te_em_t *m, int tensor, te_expr_t **idx, LLVMValueRef val, const te_vec_t *v);
/* The stride in var of the access to tensor at idx[] (not modified), or -1 where it is not
 * affine in var (or there is no memory for the flat index). */
int64_t te_em_stride(te_em_t *m, int tensor, te_expr_t *const *idx, int var);
/* Does every load in e access memory at stride 0 or 1 in var, with no lazy select over var? */
bool te_em_loads_contiguous(te_em_t *m, const te_expr_t *e, int var);

/* Statements of a double-buffered stage (te_emit_nest.c): stored to its storage (the
 * prologue), their values kept in the work-item's prefetch registers, or stored from them. */
enum { TE_DB_NONE, TE_DB_LOAD, TE_DB_STORE };

/* te_emit_stmt.c: the statement of stage st at the innermost point of its nest. mode is
 * TE_MODE_PLAIN, or for reductions TE_MODE_INIT (the identity) / TE_MODE_MAIN (one step);
 * guards whose bit is set in `consumed` were dealt with by the nest. */
enum { TE_MODE_PLAIN, TE_MODE_INIT, TE_MODE_MAIN };
bool te_em_guard_open(const te_tensor_t *t, int i, int mode, uint32_t consumed);
/* Branches on g into a new block; *merge is the block after it, closed by te_em_close_guard.
 * False when g could not be emitted (the error is recorded). */
bool te_em_open_guard(te_em_t *m, te_expr_t *g, LLVMBasicBlockRef *merge);
void te_em_close_guard(te_em_t *m, LLVMBasicBlockRef merge);
void te_em_statement(te_em_t *m, int st, int mode, uint32_t consumed);
/* Can the statement run with v's var as vector lanes: its output depends on the var and no
 * guard left to test uses it. */
bool te_em_vec_ok(te_em_t *m, int st, int mode, uint32_t consumed, int var);
void te_em_vec_statement(te_em_t *m, int st, int mode, uint32_t consumed, const te_vec_t *v);
/* te_em_vec_ok, and the statement stores at stride 1 in var and loads only at stride 0 or 1
 * (no lazy select over the var): LLVM's loop vectoriser would make plain vector accesses. */
bool te_em_contiguous(te_em_t *m, int st, int mode, uint32_t consumed, int var);

/* te_emit_nest.c: stage st (its storage unless it is an argument, its loop nest, the stages
 * attached inside it) at the builder's position. */
void te_em_stage(te_em_t *m, int st);

#endif
