/* Tensors on the wire (docs/protocol.md §Tensors): {"dtype": "float32", "shape": [..],
 * "data": bin}, numpy dtype names, little-endian, C-contiguous. */
#ifndef KILN_PROTOCOL_TENSOR_H
#define KILN_PROTOCOL_TENSOR_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define KILN_MAX_DIMS 32

typedef enum kiln_dtype {
  KILN_DTYPE_INVALID = 0,
  KILN_FLOAT16, KILN_BFLOAT16, KILN_FLOAT32, KILN_FLOAT64,
  KILN_INT8, KILN_INT16, KILN_INT32, KILN_INT64,
  KILN_UINT8, KILN_UINT16, KILN_UINT32, KILN_UINT64,
  KILN_BOOL,
  KILN_DTYPE_COUNT_
} kiln_dtype_t;

const char *kiln_dtype_name(kiln_dtype_t d);
size_t kiln_dtype_size(kiln_dtype_t d);
/* Accepts the numpy names; KILN_DTYPE_INVALID if unknown. */
kiln_dtype_t kiln_dtype_parse(const char *name, size_t len);

typedef struct kiln_tensor_desc {
  kiln_dtype_t dtype;
  uint32_t ndim;
  uint64_t shape[KILN_MAX_DIMS];
  uint64_t nbytes; /* product(shape) * dtype size */
} kiln_tensor_desc_t;

/* Largest tensor kiln accepts (bytes); larger requests get E_RESOURCE_EXHAUSTED. */
#define KILN_TENSOR_MAX_BYTES (1ULL << 46)

/* Validates dtype and shape (array of non-negative ints) objects and computes nbytes, with
 * overflow checks. */
KILN_MUST_USE kiln_status_t kiln_tensor_desc_parse(const msgpack_object *dtype, const msgpack_object *shape,
                                     kiln_tensor_desc_t *out);
/* Decodes a tensor map; *out_data points into the message (no copy). Checks that the data
 * length equals nbytes and that the map has no other fields. */
KILN_MUST_USE kiln_status_t kiln_tensor_parse(const msgpack_object *map, kiln_tensor_desc_t *out,
                                const uint8_t **out_data);

/* Packs {"dtype","shape","data": <bin header of nbytes>}: the caller sends the nbytes of
 * data right after the packed bytes (so large data goes out without a copy). */
void kiln_tensor_pack_head(msgpack_packer *pk, const kiln_tensor_desc_t *t);

#endif
