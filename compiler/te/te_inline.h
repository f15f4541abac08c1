/* compute_inline: the bodies of inlined stages substituted into their readers. */
#ifndef KILN_COMPILER_TE_TE_INLINE_H
#define KILN_COMPILER_TE_TE_INLINE_H

#include "compiler/te/te_program.h"

/* Rewrites the body of every compute stage that is not inlined itself so that it no longer
 * loads an inlined stage. */
KILN_MUST_USE kiln_status_t te_inline_all(te_program_t *p);

#endif
