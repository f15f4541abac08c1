/* CHECK for fuzz targets: an invariant that fails aborts, so libFuzzer keeps the input. */
#ifndef KILN_FUZZ_CHECK_H
#define KILN_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#endif
