/* Kernels written in assembly for per-instruction tests: a fixed frame loads three 64-bit
 * inputs per lane into v[2:3], v[4:5], v[6:7], runs the test's instructions, and stores
 * v[8:9] and the VCC bit of every lane. Assembled with llvm-mc and linked with ld.lld at test
 * time into a code object v5 with its metadata note, then loaded through the harness. */
#ifndef KILN_TESTS_SOFTGPU_ISA_ASM_H
#define KILN_TESTS_SOFTGPU_ISA_ASM_H

#include "tests/softgpu/isa/harness.h"

typedef struct sgt_asm_opts {
  int denorm32, denorm64; /* FLOAT_DENORM_MODE: 0 flush in+out, 1 flush out, 2 flush in, 3 none */
  int round32;            /* FLOAT_ROUND_MODE_32: 0 nearest even, 1 +inf, 2 -inf, 3 zero */
  int ieee;               /* IEEE_MODE */
} sgt_asm_opts_t;
#define SGT_ASM_DEFAULT ((sgt_asm_opts_t){3, 3, 0, 1})

/* Assembles `body` into the frame and loads it as kernel "k" (asserts on assembler errors). */
void sgt_asm_load(sgt_ctx_t *c, const char *body, const sgt_asm_opts_t *o);
/* Assembles a whole file of the caller's (its own kernel and metadata); loads it. */
void sgt_asm_load_text(sgt_ctx_t *c, const char *text);
/* Runs k on one wave of 64 lanes. */
sg_status_t sgt_asm_run(sgt_ctx_t *c, const uint64_t a[64], const uint64_t b[64], const uint64_t cc[64],
                        uint64_t d[64], uint64_t *vcc, sg_report_t *rep);

#endif
