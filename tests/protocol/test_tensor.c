/* The tensor codec: the dtype table, every dtype through pack and parse, 0-d and empty
 * tensors, and every way a tensor map can be wrong. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/buf.h"
#include "helpers.h"
#include "protocol/rpc.h"
#include "protocol/tensor.h"

static const struct {
  const char *name;
  size_t size;
} numpy[] = {
    {"float16", 2}, {"bfloat16", 2}, {"float32", 4}, {"float64", 8}, {"int8", 1},
    {"int16", 2},   {"int32", 4},    {"int64", 8},   {"uint8", 1},   {"uint16", 2},
    {"uint32", 4},  {"uint64", 8},   {"bool", 1},
};

Test(dtype, table_matches_the_protocol_doc) {
  cr_assert_eq(sizeof(numpy) / sizeof(numpy[0]), KILN_DTYPE_COUNT_ - 1);
  for (size_t i = 0; i < sizeof(numpy) / sizeof(numpy[0]); i++) {
    kiln_dtype_t d = kiln_dtype_parse(numpy[i].name, strlen(numpy[i].name));
    cr_assert_neq(d, KILN_DTYPE_INVALID, "%s", numpy[i].name);
    cr_assert_str_eq(kiln_dtype_name(d), numpy[i].name);
    cr_assert_eq(kiln_dtype_size(d), numpy[i].size, "%s", numpy[i].name);
  }
  cr_assert_str_eq(kiln_dtype_name(KILN_DTYPE_INVALID), "invalid");
  cr_assert_str_eq(kiln_dtype_name((kiln_dtype_t)999), "invalid");
  cr_assert_eq(kiln_dtype_size(KILN_DTYPE_INVALID), 0);
  cr_assert_eq(kiln_dtype_size((kiln_dtype_t)-1), 0);
}

Test(dtype, bad_names) {
  static const char *const bad[] = {"", "float", "Float32", "float32 ", " float32", "f4", "<f4",
                                    "invalid", "int", "uint", "float128", "complex64", "boolean",
                                    "float3", "float322"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    cr_assert_eq(kiln_dtype_parse(bad[i], strlen(bad[i])), KILN_DTYPE_INVALID, "'%s'", bad[i]);
  /* Length is what counts, not a NUL. */
  cr_assert_eq(kiln_dtype_parse("int8x", 4), KILN_INT8);
  cr_assert_eq(kiln_dtype_parse("int8\0", 5), KILN_DTYPE_INVALID);
}

/* Packs a tensor map with the given dtype (a str), shape and data using msgpack-c. */
static bytes_t tensor_map(const char *dtype, const uint64_t *shape, size_t ndim, const void *data,
                          size_t n) {
  packer_t p;
  packer_init(&p);
  msgpack_pack_map(&p.pk, 3);
  pack_str(&p.pk, "dtype");
  pack_str(&p.pk, dtype);
  pack_str(&p.pk, "shape");
  msgpack_pack_array(&p.pk, ndim);
  for (size_t i = 0; i < ndim; i++) msgpack_pack_uint64(&p.pk, shape[i]);
  pack_str(&p.pk, "data");
  pack_bin(&p.pk, data, n);
  bytes_t b = packer_take(&p);
  msgpack_sbuffer_destroy(&p.sb);
  return b;
}

static kiln_status_t parse_bytes(const bytes_t *b, kiln_tensor_desc_t *t, const uint8_t **data) {
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  cr_assert_eq(msgpack_unpack_next(&u, (const char *)b->p, b->n, &off), MSGPACK_UNPACK_SUCCESS);
  kiln_status_t s = kiln_tensor_parse(&u.data, t, data);
  msgpack_unpacked_destroy(&u); /* data points into b, not into the zone */
  return s;
}

static void expect_error(const bytes_t *b, kiln_code_t code, const char *needle) {
  kiln_tensor_desc_t t;
  memset(&t, 0xaa, sizeof(t));
  const uint8_t *data = (const uint8_t *)"untouched";
  kiln_status_t s = parse_bytes(b, &t, &data);
  cr_assert_not_null(s, "expected '%s'", needle);
  cr_assert_eq(kiln_status_code(s), code, "%s", kiln_status_message(s));
  cr_assert(strstr(kiln_status_message(s), needle), "'%s' lacks '%s'", kiln_status_message(s),
            needle);
  cr_assert_str_eq((const char *)data, "untouched", "outputs are set on success only");
  cr_assert_eq(t.ndim, 0xaaaaaaaau, "outputs are set on success only");
  kiln_status_free(s);
}

Test(tensor, every_dtype_round_trips) {
  uint8_t data[2 * 3 * 8];
  for (size_t i = 0; i < sizeof(data); i++) data[i] = (uint8_t)(i * 13);
  for (size_t i = 0; i < sizeof(numpy) / sizeof(numpy[0]); i++) {
    uint64_t shape[2] = {2, 3};
    size_t n = 6 * numpy[i].size;
    bytes_t b = tensor_map(numpy[i].name, shape, 2, data, n);
    kiln_tensor_desc_t t;
    const uint8_t *d = NULL;
    kiln_status_t s = parse_bytes(&b, &t, &d);
    cr_assert_null(s, "%s: %s", numpy[i].name, kiln_status_message(s));
    cr_assert_str_eq(kiln_dtype_name(t.dtype), numpy[i].name);
    cr_assert_eq(t.ndim, 2);
    cr_assert_eq(t.shape[0], 2);
    cr_assert_eq(t.shape[1], 3);
    cr_assert_eq(t.nbytes, n);
    cr_assert(d > b.p && d + n == b.p + b.n, "data points into the message");
    cr_assert_arr_eq(d, data, n);

    /* kiln_tensor_pack_head + the data bytes is the same map msgpack-c packs. */
    kiln_buf_t buf;
    kiln_buf_init(&buf);
    kiln_packer_t p;
    kiln_packer_init(&p, &buf);
    kiln_tensor_pack_head(&p.pk, &t);
    cr_assert_null(kiln_buf_append(&buf, data, n));
    cr_assert_eq(buf.len, b.n, "%s", numpy[i].name);
    cr_assert_arr_eq(buf.data, b.p, b.n, "%s", numpy[i].name);
    kiln_buf_deinit(&buf);
    bytes_free(&b);
  }
}

Test(tensor, zero_d_and_empty) {
  double x = 2.5;
  bytes_t b = tensor_map("float64", NULL, 0, &x, 8);
  kiln_tensor_desc_t t;
  const uint8_t *d;
  cr_assert_null(parse_bytes(&b, &t, &d));
  cr_assert_eq(t.ndim, 0);
  cr_assert_eq(t.nbytes, 8);
  bytes_free(&b);
  /* A 0-d tensor holds one element, not zero. */
  b = tensor_map("float64", NULL, 0, &x, 0);
  expect_error(&b, KILN_E_INVALID_ARGUMENT, "tensor data has 0 bytes but dtype float64");
  bytes_free(&b);

  uint64_t shape[3] = {4, 0, 7};
  b = tensor_map("int32", shape, 3, NULL, 0);
  cr_assert_null(parse_bytes(&b, &t, &d));
  cr_assert_eq(t.nbytes, 0);
  cr_assert_eq(t.shape[1], 0);
  cr_assert_eq(t.shape[2], 7);
  bytes_free(&b);
  b = tensor_map("int32", shape, 3, "abcd", 4);
  expect_error(&b, KILN_E_INVALID_ARGUMENT, "has 4 bytes but dtype int32 and its shape need 0");
  bytes_free(&b);
}

Test(tensor, size_mismatch) {
  uint64_t shape[1] = {4};
  bytes_t b = tensor_map("float32", shape, 1, "0123456789abcdef", 15);
  expect_error(&b, KILN_E_INVALID_ARGUMENT, "tensor data has 15 bytes but dtype float32 and its shape need 16");
  bytes_free(&b);
  b = tensor_map("float16", shape, 1, "0123456789abcdef", 9);
  expect_error(&b, KILN_E_INVALID_ARGUMENT, "need 8");
  bytes_free(&b);
}

Test(tensor, dims) {
  uint64_t ones[33];
  for (int i = 0; i < 33; i++) ones[i] = 1;
  bytes_t b = tensor_map("int64", ones, 32, "01234567", 8);
  kiln_tensor_desc_t t;
  const uint8_t *d;
  cr_assert_null(parse_bytes(&b, &t, &d));
  cr_assert_eq(t.ndim, 32);
  bytes_free(&b);
  b = tensor_map("int64", ones, 33, "01234567", 8);
  expect_error(&b, KILN_E_INVALID_ARGUMENT, "shape has 33 dimensions; at most 32 are allowed");
  bytes_free(&b);
}

Test(tensor, overflowing_shapes) {
  /* Each product passes 2^46 bytes, several wrap a uint64 if multiplied blindly. */
  uint64_t cases[][3] = {
      {1ULL << 32, 1ULL << 32, 1},
      {UINT64_MAX, 1, 1},
      {1ULL << 62, 4, 1},
      {1ULL << 16, 1ULL << 16, 1ULL << 16},
      {3, 0x5555555555555556ULL, 1}, /* 3 * this wraps to 2 */
      {1ULL << 45, 1, 1},            /* 2^45 float32 = 2^47 bytes */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    bytes_t b = tensor_map("float32", cases[i], 3, NULL, 0);
    expect_error(&b, KILN_E_RESOURCE_EXHAUSTED, "larger than kiln's limit");
    bytes_free(&b);
  }
  /* Exactly the limit is accepted by the descriptor parser. */
  packer_t p;
  packer_init(&p);
  pack_str(&p.pk, "uint8");
  msgpack_pack_array(&p.pk, 2);
  msgpack_pack_uint64(&p.pk, 1ULL << 23);
  msgpack_pack_uint64(&p.pk, 1ULL << 23);
  bytes_t b = packer_take(&p);
  msgpack_sbuffer_destroy(&p.sb);
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  cr_assert_eq(msgpack_unpack_next(&u, (const char *)b.p, b.n, &off), MSGPACK_UNPACK_SUCCESS);
  msgpack_object dtype;
  msgpack_unpacked u2;
  msgpack_unpacked_init(&u2);
  cr_assert_eq(msgpack_unpack_next(&u2, (const char *)b.p, b.n, &off), MSGPACK_UNPACK_SUCCESS);
  dtype = u.data;
  kiln_tensor_desc_t t;
  cr_assert_null(kiln_tensor_desc_parse(&dtype, &u2.data, &t));
  cr_assert_eq(t.nbytes, KILN_TENSOR_MAX_BYTES);
  cr_assert_eq(t.dtype, KILN_UINT8);
  msgpack_unpacked_destroy(&u);
  msgpack_unpacked_destroy(&u2);
  bytes_free(&b);
}

Test(tensor, bad_dtypes) {
  uint64_t shape[1] = {1};
  static const char *const bad[] = {"float", "Float32", "float32 ", "", "complex128",
                                    "a_very_long_dtype_name_that_goes_on_and_on_and_on"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    bytes_t b = tensor_map(bad[i], shape, 1, "x", 1);
    expect_error(&b, KILN_E_INVALID_ARGUMENT, "unknown dtype");
    bytes_free(&b);
  }
  bytes_t b = tensor_map("Float32", shape, 1, "x", 1);
  expect_error(&b, KILN_E_INVALID_ARGUMENT, "unknown dtype 'Float32'; use one of float16");
  bytes_free(&b);
  /* dtype as a bin, an int, nil. */
  b = BYTES_LIT(0x83, 0xa5, 'd', 't', 'y', 'p', 'e', 0xc4, 0x04, 'i', 'n', 't', '8', 0xa5, 's',
                'h', 'a', 'p', 'e', 0x90, 0xa4, 'd', 'a', 't', 'a', 0xc4, 0x01, 0x00);
  expect_error(&b, KILN_E_INVALID_ARGUMENT, "dtype must be a string");
  bytes_free(&b);
  b = BYTES_LIT(0x83, 0xa5, 'd', 't', 'y', 'p', 'e', 0x04, 0xa5, 's', 'h', 'a', 'p', 'e', 0x90,
                0xa4, 'd', 'a', 't', 'a', 0xc4, 0x01, 0x00);
  expect_error(&b, KILN_E_INVALID_ARGUMENT, "dtype must be a string");
  bytes_free(&b);
}

/* {"dtype": "int8", "shape": <shape bytes>, "data": bin of 1} */
static bytes_t with_shape(const uint8_t *shape, size_t n) {
  static const uint8_t head[] = {0x83, 0xa5, 'd', 't', 'y', 'p', 'e', 0xa4, 'i', 'n', 't', '8',
                                 0xa5, 's', 'h', 'a', 'p', 'e'};
  static const uint8_t tail[] = {0xa4, 'd', 'a', 't', 'a', 0xc4, 0x01, 0x00};
  bytes_t parts[3] = {{(uint8_t *)head, sizeof(head)}, {(uint8_t *)shape, n},
                      {(uint8_t *)tail, sizeof(tail)}};
  return bytes_concat(parts, 3);
}

Test(tensor, bad_shapes) {
  struct {
    bytes_t shape;
    const char *needle;
  } cases[] = {
      {BYTES_LIT(0x91, 0xff), "shape[0] must be a non-negative integer"},
      {BYTES_LIT(0x92, 0x01, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0), "shape[1] must be"},
      {BYTES_LIT(0x91, 0xa1, '1'), "shape[0] must be"},
      {BYTES_LIT(0x91, 0xc0), "shape[0] must be"},
      {BYTES_LIT(0x91, 0x91, 0x01), "shape[0] must be"},
      {BYTES_LIT(0x01), "shape must be an array"},
      {BYTES_LIT(0xc0), "shape must be an array"},
      {BYTES_LIT(0x81, 0x00, 0x01), "shape must be an array"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    bytes_t b = with_shape(cases[i].shape.p, cases[i].shape.n);
    expect_error(&b, KILN_E_INVALID_ARGUMENT, cases[i].needle);
    bytes_free(&b);
    bytes_free(&cases[i].shape);
  }
}

Test(tensor, wrong_maps) {
  struct {
    bytes_t b;
    const char *needle;
  } cases[] = {
      /* Not a map at all. */
      {BYTES_LIT(0x93, 0xa4, 'i', 'n', 't', '8', 0x90, 0xc4, 0x00), "a tensor is a map"},
      {BYTES_LIT(0xc0), "a tensor is a map"},
      /* Missing fields. */
      {BYTES_LIT(0x82, 0xa5, 's', 'h', 'a', 'p', 'e', 0x90, 0xa4, 'd', 'a', 't', 'a', 0xc4, 0x01,
                 0x00),
       "dtype must be a string"},
      {BYTES_LIT(0x82, 0xa5, 'd', 't', 'y', 'p', 'e', 0xa4, 'i', 'n', 't', '8', 0xa4, 'd', 'a', 't',
                 'a', 0xc4, 0x01, 0x00),
       "shape must be an array"},
      {BYTES_LIT(0x82, 0xa5, 'd', 't', 'y', 'p', 'e', 0xa4, 'i', 'n', 't', '8', 0xa5, 's', 'h', 'a',
                 'p', 'e', 0x90),
       "missing required field 'data'"},
      /* data of the wrong type. */
      {BYTES_LIT(0x83, 0xa5, 'd', 't', 'y', 'p', 'e', 0xa4, 'i', 'n', 't', '8', 0xa5, 's', 'h', 'a',
                 'p', 'e', 0x90, 0xa4, 'd', 'a', 't', 'a', 0x01),
       "field 'data' must be bytes"},
      /* An extra field, named. */
      {BYTES_LIT(0x84, 0xa5, 'd', 't', 'y', 'p', 'e', 0xa4, 'i', 'n', 't', '8', 0xa5, 's', 'h', 'a',
                 'p', 'e', 0x90, 0xa4, 'd', 'a', 't', 'a', 0xc4, 0x01, 0x00, 0xa6, 's', 't', 'r',
                 'i', 'd', 'e', 0x90),
       "tensor: unknown field 'stride'; known fields: dtype, shape, data"},
      /* A field twice. */
      {BYTES_LIT(0x84, 0xa5, 'd', 't', 'y', 'p', 'e', 0xa4, 'i', 'n', 't', '8', 0xa5, 's', 'h', 'a',
                 'p', 'e', 0x90, 0xa4, 'd', 'a', 't', 'a', 0xc4, 0x01, 0x00, 0xa5, 'd', 't', 'y',
                 'p', 'e', 0xa4, 'i', 'n', 't', '8'),
       "tensor: field 'dtype' appears twice"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    expect_error(&cases[i].b, KILN_E_INVALID_ARGUMENT, cases[i].needle);
    bytes_free(&cases[i].b);
  }
  kiln_tensor_desc_t t;
  const uint8_t *d;
  kiln_status_t s = kiln_tensor_parse(NULL, &t, &d);
  cr_assert_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
  kiln_status_free(s);
  s = kiln_tensor_desc_parse(NULL, NULL, &t);
  cr_assert_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
  kiln_status_free(s);
}

/* Data given as a str is accepted (some clients cannot make bins). */
Test(tensor, data_as_str) {
  bytes_t b = BYTES_LIT(0x83, 0xa5, 'd', 't', 'y', 'p', 'e', 0xa5, 'u', 'i', 'n', 't', '8', 0xa5,
                        's', 'h', 'a', 'p', 'e', 0x91, 0x02, 0xa4, 'd', 'a', 't', 'a', 0xa2, 'h',
                        'i');
  kiln_tensor_desc_t t;
  const uint8_t *d;
  cr_assert_null(parse_bytes(&b, &t, &d));
  cr_assert_eq(t.nbytes, 2);
  cr_assert_arr_eq(d, "hi", 2);
  bytes_free(&b);
}
