/* Launch recipes (docs/te.md §7): a kernel's grid, block and shape-var parameters, encoded as
 * MessagePack for the compile reply and the artifact. */
#ifndef KILN_COMPILER_TE_TE_LAUNCH_H
#define KILN_COMPILER_TE_TE_LAUNCH_H

#include "compiler/te/te_program.h"

/* Sets k->launch after bound inference; E_COMPILE if the grid is not expressible over the
 * shape vars. */
KILN_MUST_USE kiln_status_t te_launch_encode(te_program_t *p, te_kernel_t *k);

#endif
