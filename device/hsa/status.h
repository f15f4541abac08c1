/* hsa_status_t -> kiln_status_t, once, at the boundary (STYLE rule 2). */
#ifndef KILN_DEVICE_HSA_STATUS_H
#define KILN_DEVICE_HSA_STATUS_H

#include <hsa/hsa.h>

#include "base/status.h"

/* The kiln code for an HSA status (pure): resource errors -> E_RESOURCE_EXHAUSTED, bad code
 * objects and arguments -> E_INVALID_ARGUMENT, faults in a kernel -> E_DEVICE_FAULT, the rest
 * -> E_DEVICE. */
kiln_code_t kiln_hsa_status_code(hsa_status_t s);
/* "HSA_STATUS_ERROR_OUT_OF_RESOURCES" etc. (pure; "HSA_STATUS_0x..." if unknown). */
const char *kiln_hsa_status_name(hsa_status_t s, char *buf, size_t cap);

/* Makes the status for a failed call `what`, with ROCr's own text when the runtime is loaded. */
KILN_MUST_USE kiln_status_t kiln_hsa_error(hsa_status_t s, const char *file, int line, const char *what);

/* Evaluates an HSA call; on failure returns its converted status from the enclosing function. */
#define KILN_HSA_TRY(call)                                                  \
  do {                                                                      \
    hsa_status_t kiln_hs_ = (call);                                         \
    if (kiln_hs_ != HSA_STATUS_SUCCESS && kiln_hs_ != HSA_STATUS_INFO_BREAK) \
      return kiln_hsa_error(kiln_hs_, __FILE__, __LINE__, #call);           \
  } while (0)

#endif
