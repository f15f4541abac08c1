/* libFuzzer target: the te front end (compiler/te: payload parsing, schedule primitives,
 * inlining, bound inference, launch recipes) on arbitrary bytes, as the compile worker reads
 * `format: "te"` payloads. Emission needs LLVM and is left out. Besides memory errors it
 * checks that a rejection is E_COMPILE with a message, and that an accepted kernel has launch
 * dimensions and a recipe. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/te/te_bounds.h"
#include "compiler/te/te_inline.h"
#include "compiler/te/te_launch.h"
#include "compiler/te/te_parse.h"
#include "tests/fuzz/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  te_program_t *p = te_program_create();
  CHECK(p);
  kiln_status_t st = te_parse(data, size, p);
  if (!st) st = te_inline_all(p);
  for (int k = 0; !st && k < p->nkernels; k++) {
    st = te_infer_bounds(p, k);
    if (!st)
      for (int d = 0; d < 3; d++) CHECK(p->kernels[k].grid[d] && p->kernels[k].block[d] >= 1);
    if (!st) st = te_launch_encode(p, &p->kernels[k]);
    if (!st) CHECK(p->kernels[k].launch && p->kernels[k].launch_size > 0);
  }
  if (st) {
    CHECK(kiln_status_code(st) == KILN_E_COMPILE || kiln_status_code(st) == KILN_E_RESOURCE_EXHAUSTED);
    CHECK(kiln_status_message(st)[0] != 0);
    kiln_status_free(st);
  }
  te_program_destroy(p);
  return 0;
}
