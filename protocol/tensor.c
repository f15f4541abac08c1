#include "protocol/tensor.h"

#include <string.h>

#include "protocol/rpc.h"

static const struct {
  const char *name;
  size_t size;
} dtypes[KILN_DTYPE_COUNT_] = {
    [KILN_DTYPE_INVALID] = {"invalid", 0},
    [KILN_FLOAT16] = {"float16", 2}, [KILN_BFLOAT16] = {"bfloat16", 2},
    [KILN_FLOAT32] = {"float32", 4}, [KILN_FLOAT64] = {"float64", 8},
    [KILN_INT8] = {"int8", 1},       [KILN_INT16] = {"int16", 2},
    [KILN_INT32] = {"int32", 4},     [KILN_INT64] = {"int64", 8},
    [KILN_UINT8] = {"uint8", 1},     [KILN_UINT16] = {"uint16", 2},
    [KILN_UINT32] = {"uint32", 4},   [KILN_UINT64] = {"uint64", 8},
    [KILN_BOOL] = {"bool", 1},
};

const char *kiln_dtype_name(kiln_dtype_t d) {
  return (unsigned)d < KILN_DTYPE_COUNT_ ? dtypes[d].name : "invalid";
}

size_t kiln_dtype_size(kiln_dtype_t d) {
  return (unsigned)d < KILN_DTYPE_COUNT_ ? dtypes[d].size : 0;
}

kiln_dtype_t kiln_dtype_parse(const char *name, size_t len) {
  for (int i = 1; i < KILN_DTYPE_COUNT_; i++)
    if (strlen(dtypes[i].name) == len && memcmp(dtypes[i].name, name, len) == 0)
      return (kiln_dtype_t)i;
  return KILN_DTYPE_INVALID;
}

kiln_status_t kiln_tensor_desc_parse(const msgpack_object *dtype, const msgpack_object *shape,
                                     kiln_tensor_desc_t *out) {
  if (!dtype || dtype->type != MSGPACK_OBJECT_STR)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "dtype must be a string such as \"float32\" (numpy dtype names)");
  kiln_dtype_t d = kiln_dtype_parse(dtype->via.str.ptr, dtype->via.str.size);
  if (!d)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "unknown dtype '%.*s'; use one of float16 bfloat16 float32 float64 int8 "
                       "int16 int32 int64 uint8 uint16 uint32 uint64 bool",
                       (int)(dtype->via.str.size < 32 ? dtype->via.str.size : 32),
                       dtype->via.str.ptr);
  if (!shape || shape->type != MSGPACK_OBJECT_ARRAY)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "shape must be an array of non-negative integers");
  if (shape->via.array.size > KILN_MAX_DIMS)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "shape has %u dimensions; at most %d are allowed",
                       shape->via.array.size, KILN_MAX_DIMS);
  kiln_tensor_desc_t t = {.dtype = d, .ndim = shape->via.array.size};
  uint64_t n = kiln_dtype_size(d);
  bool zero = false;
  for (uint32_t i = 0; i < t.ndim; i++) {
    const msgpack_object *e = &shape->via.array.ptr[i];
    if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "shape[%u] must be a non-negative integer", i);
    t.shape[i] = e->via.u64;
    if (t.shape[i] == 0) zero = true;
    else if (!zero) {
      if (t.shape[i] > KILN_TENSOR_MAX_BYTES || n > KILN_TENSOR_MAX_BYTES / t.shape[i])
        return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                           "tensor is larger than kiln's limit of 2^46 bytes");
      n *= t.shape[i];
    }
  }
  t.nbytes = zero ? 0 : n;
  *out = t;
  return KILN_OK;
}

kiln_status_t kiln_tensor_parse(const msgpack_object *map, kiln_tensor_desc_t *out,
                                const uint8_t **out_data) {
  if (!map || map->type != MSGPACK_OBJECT_MAP)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "a tensor is a map {\"dtype\": str, \"shape\": [ints], \"data\": bin}");
  static const char *const fields[] = {"dtype", "shape", "data", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(map, "tensor", fields));
  kiln_tensor_desc_t t;
  KILN_RETURN_IF_ERROR(kiln_tensor_desc_parse(kiln_params_find(map, "dtype"),
                                              kiln_params_find(map, "shape"), &t));
  const uint8_t *data = NULL;
  size_t len = 0;
  KILN_RETURN_IF_ERROR(kiln_params_bytes(map, "data", true, &data, &len));
  if (len != t.nbytes)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "tensor data has %zu bytes but dtype %s and its shape need %llu", len,
                       kiln_dtype_name(t.dtype), (unsigned long long)t.nbytes);
  *out = t;
  *out_data = data;
  return KILN_OK;
}

void kiln_tensor_pack_head(msgpack_packer *pk, const kiln_tensor_desc_t *t) {
  /* The map ends before its last value's bytes, which the caller appends or sends without a
   * copy: three fields, a fixmap, so its one-byte header is set here, in place. */
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_str(&m, "dtype", kiln_dtype_name(t->dtype));
  kiln_fields_key(&m, "shape");
  msgpack_pack_array(pk, t->ndim);
  for (uint32_t i = 0; i < t->ndim; i++) msgpack_pack_uint64(pk, t->shape[i]);
  kiln_fields_key(&m, "data");
  msgpack_pack_bin(pk, (size_t)t->nbytes);
  kiln_fields_end(&m);
}
