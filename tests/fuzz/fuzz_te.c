/* libFuzzer target: the te front end (compiler/te: payload parsing, schedule primitives,
 * inlining, bound inference) on arbitrary bytes, as the compile worker reads `format: "te"`
 * payloads. Emission needs LLVM and is left out. Besides memory errors it checks that a
 * rejection is E_COMPILE with a message, and that an accepted kernel has launch dimensions. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/te/te.h"
#include "tests/fuzz/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kc_te_program_t *p = calloc(1, sizeof(*p));
  CHECK(p);
  p->vars = calloc(TE_MAX_VARS, sizeof(*p->vars));
  p->tensors = calloc(TE_MAX_TENSORS, sizeof(*p->tensors));
  CHECK(p->vars && p->tensors);
  kiln_status_t st = te_parse(data, size, p);
  if (!st) st = te_inline_all(p);
  for (int k = 0; !st && k < p->nkernels; k++) {
    st = te_infer_bounds(p, k);
    if (!st)
      for (int d = 0; d < 3; d++) CHECK(p->kernels[k].grid[d] && p->kernels[k].block[d] >= 1);
  }
  if (st) {
    CHECK(kiln_status_code(st) == KILN_E_COMPILE || kiln_status_code(st) == KILN_E_RESOURCE_EXHAUSTED);
    CHECK(kiln_status_message(st)[0] != 0);
    kiln_status_free(st);
  }
  te_arena_free(p);
  free(p->vars);
  free(p->tensors);
  free(p);
  return 0;
}
