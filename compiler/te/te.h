/* Tensor-expression programs (docs/te.md): the te front end's entry points for compiler.c.
 * The program model is te_program.h; the steps are te_parse.h (payload), te_sched.h
 * (schedule primitives), te_inline.h, te_bounds.h (bound inference), te_emit.h (the kernel
 * dialect) and te_launch.c (launch recipes). */
#ifndef KILN_COMPILER_TE_TE_H
#define KILN_COMPILER_TE_TE_H

#include "compiler/internal.h"

typedef struct kc_te_program kc_te_program_t;

/* Parses the te payload of job->req, lowers it and leaves the kernel-dialect module in
 * job->mod. *out_prog (freed with kc_te_free) keeps the launch recipes; it is set even when
 * the build fails. E_COMPILE for the program. */
KILN_MUST_USE kiln_status_t kc_te_build(kc_job_t *job, kc_te_program_t **out_prog);
/* Copies each kernel's launch recipe into the artifact's kernel table. */
KILN_MUST_USE kiln_status_t kc_te_attach_launch(const kc_te_program_t *p, kiln_artifact_t *art);
void kc_te_free(kc_te_program_t *p);
/* After CPU lowering: te kernels are loop nests written for the vector unit, so on hosts
 * with 512-bit vectors the vectoriser may use them (LLVM prefers 256 bits by default). */
void kc_te_tune_cpu(kc_job_t *job);

#endif
