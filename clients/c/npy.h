/* .npy files (numpy's format, versions 1.0, 2.0 and 3.0) for the kiln CLI.
 *
 * Only what a kiln tensor is: little-endian, C-contiguous arrays of the dtypes in
 * protocol/tensor.h. Fortran order, big-endian, object, structured and other dtypes are
 * rejected with a message that says so. bfloat16 has no numpy name: it is written as raw
 * uint16 bits ("<u2"), and read back with an explicit dtype override. */
#ifndef KILN_CLIENTS_C_NPY_H
#define KILN_CLIENTS_C_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "protocol/tensor.h"

/* A mapped .npy file: data points into the mapping (no copy of large arrays). */
typedef struct kiln_npy {
  kiln_tensor_desc_t desc;
  const void *data;
  void *map;
  size_t map_len;
} kiln_npy_t;

/* Parses the header of a .npy image of `len` bytes: the descriptor and the data offset.
 * E_INVALID_ARGUMENT with a reason for anything kiln cannot take. */
KILN_MUST_USE kiln_status_t kiln_npy_parse(const uint8_t *p, size_t len, kiln_tensor_desc_t *out_desc,
                             size_t *out_data_offset);

/* Maps and parses a file (_open/_close: the caller's struct). */
KILN_MUST_USE kiln_status_t kiln_npy_open(const char *path, kiln_npy_t *out);
void kiln_npy_close(kiln_npy_t *n);

/* Writes a version 1.0 .npy header (2.0 when the header does not fit 1.0) into out:
 * returns its length (a multiple of 64), 0 if cap is too small. */
size_t kiln_npy_header(const kiln_tensor_desc_t *desc, char *out, size_t cap);
/* Writes header and data to path, through a temporary file renamed into place. */
KILN_MUST_USE kiln_status_t kiln_npy_write(const char *path, const kiln_tensor_desc_t *desc, const void *data);

#endif
