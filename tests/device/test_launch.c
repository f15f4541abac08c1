/* Launch argument conversion and geometry checks (device/launch.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "device/launch.h"

static kiln_kernel_arg_t args_tbl[] = {
    {.name = "out", .type = KILN_ARG_PTR, .size = 8},
    {.name = "n", .type = KILN_ARG_I32, .size = 4},
    {.name = "", .type = KILN_ARG_U8, .size = 1},
    {.name = "alpha", .type = KILN_ARG_F32, .size = 4},
    {.name = "h", .type = KILN_ARG_F16, .size = 2},
    {.name = "big", .type = KILN_ARG_I64, .size = 8},
    {.name = "d", .type = KILN_ARG_F64, .size = 8},
    {.name = "bf", .type = KILN_ARG_BF16, .size = 2},
};

static kiln_kernel_t kernel = {
    .name = "k", .num_args = 8, .args = args_tbl, .max_block = 256, .group_segment_size = 1024};

static kiln_launch_arg_t good[8];

static void setup(void) {
  good[0] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = 0x1000};
  good[1] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_INT, .i = -5};
  good[2] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_UINT, .u = 255};
  good[3] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_FLOAT, .f = 1.5};
  good[4] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_UINT, .u = 2};
  good[5] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_INT, .i = INT64_MIN};
  good[6] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_INT, .i = -3};
  good[7] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_FLOAT, .f = 1.0};
}

static void expect_error(const kiln_launch_arg_t *args, size_t n, const char *needle) {
  kiln_launch_values_t v;
  kiln_status_t s = kiln_launch_values_init(&v, &kernel, args, n);
  cr_assert(s != KILN_OK, "expected an error containing \"%s\"", needle);
  cr_expect_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
  cr_expect(strstr(kiln_status_message(s), needle), "message \"%s\" lacks \"%s\"",
            kiln_status_message(s), needle);
  kiln_status_free(s);
}

TestSuite(launch_args, .init = setup);

Test(launch_args, converts_to_parameter_types) {
  kiln_launch_values_t v;
  cr_assert_eq(kiln_launch_values_init(&v, &kernel, good, 8), KILN_OK);
  cr_assert_eq(v.count, 8);
  cr_expect_eq(*(uint64_t *)v.ptrs[0], 0x1000);
  cr_expect_eq(*(int32_t *)v.ptrs[1], -5);
  cr_expect_eq(*(uint8_t *)v.ptrs[2], 255);
  cr_expect_eq(*(float *)v.ptrs[3], 1.5f);
  cr_expect_eq(*(uint16_t *)v.ptrs[4], 0x4000, "2.0 as float16");
  cr_expect_eq(*(int64_t *)v.ptrs[5], INT64_MIN);
  cr_expect_eq(*(double *)v.ptrs[6], -3.0);
  cr_expect_eq(*(uint16_t *)v.ptrs[7], 0x3F80, "1.0 as bfloat16");
  /* Values sit in the low bytes of zeroed 8-byte slots. */
  cr_expect_eq(v.slots[1] >> 32, 0);
  kiln_launch_values_deinit(&v);
}

Test(launch_args, signed_kinds_take_unsigned_values) {
  kiln_launch_arg_t a[8];
  memcpy(a, good, sizeof a);
  a[1] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_UINT, .u = UINT32_MAX};
  a[5] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_UINT, .u = UINT64_MAX};
  kiln_launch_values_t v;
  cr_assert_eq(kiln_launch_values_init(&v, &kernel, a, 8), KILN_OK);
  cr_expect_eq(*(uint32_t *)v.ptrs[1], UINT32_MAX, "a uint32_t parameter seen as i32");
  cr_expect_eq(*(uint64_t *)v.ptrs[5], UINT64_MAX);
  kiln_launch_values_deinit(&v);
}

Test(launch_args, names_the_argument_and_the_expectation) {
  kiln_launch_arg_t a[8];
  memcpy(a, good, sizeof a);
  a[0] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_UINT, .u = 1};
  expect_error(a, 8, "argument 0 (\"out\"): expected a tensor");
  memcpy(a, good, sizeof a);
  a[1] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = 1};
  expect_error(a, 8, "argument 1 (\"n\"): expected an integer (int32), got a tensor");
  memcpy(a, good, sizeof a);
  a[1] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_FLOAT, .f = 2.5};
  expect_error(a, 8, "expected an integer (int32), got a float");
  memcpy(a, good, sizeof a);
  a[1] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_UINT, .u = 1ull << 32};
  expect_error(a, 8, "4294967296 does not fit int32 (range -2147483648..4294967295)");
  memcpy(a, good, sizeof a);
  a[1] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_INT, .i = INT32_MIN - 1ll};
  expect_error(a, 8, "-2147483649 does not fit int32");
  memcpy(a, good, sizeof a);
  a[2] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_INT, .i = -1};
  expect_error(a, 8, "argument 2: -1 does not fit uint8");
  memcpy(a, good, sizeof a);
  a[2] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_UINT, .u = 256};
  expect_error(a, 8, "256 does not fit uint8");
  memcpy(a, good, sizeof a);
  a[3] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_FLOAT, .f = 1e300};
  expect_error(a, 8, "argument 3 (\"alpha\"): 1e+300 is out of range for float32");
  memcpy(a, good, sizeof a);
  a[4] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_FLOAT, .f = 70000};
  expect_error(a, 8, "out of range for float16");
  memcpy(a, good, sizeof a);
  a[6] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_TENSOR};
  expect_error(a, 8, "argument 6 (\"d\"): expected a number (float64), got a tensor");
  expect_error(good, 7, "kernel \"k\" takes 8 arguments, got 7");
}

Test(launch_args, infinities_and_nan_pass_through) {
  kiln_launch_arg_t a[8];
  memcpy(a, good, sizeof a);
  a[3].f = INFINITY;
  a[4].kind = KILN_LAUNCH_ARG_FLOAT;
  a[4].f = NAN;
  kiln_launch_values_t v;
  cr_assert_eq(kiln_launch_values_init(&v, &kernel, a, 8), KILN_OK);
  cr_expect(isinf(*(float *)v.ptrs[3]));
  cr_expect_eq(*(uint16_t *)v.ptrs[4] & 0x7C00, 0x7C00);
  cr_expect_neq(*(uint16_t *)v.ptrs[4] & 0x3FF, 0, "NaN stays NaN");
  kiln_launch_values_deinit(&v);
}

Test(half, rounds_to_nearest_even) {
  cr_expect_eq(kiln_float_to_half(0.0f), 0x0000);
  cr_expect_eq(kiln_float_to_half(-0.0f), 0x8000);
  cr_expect_eq(kiln_float_to_half(1.0f), 0x3C00);
  cr_expect_eq(kiln_float_to_half(-2.5f), 0xC100);
  cr_expect_eq(kiln_float_to_half(65504.0f), 0x7BFF);
  cr_expect_eq(kiln_float_to_half(65520.0f), 0x7C00, "rounds up to infinity");
  cr_expect_eq(kiln_float_to_half(5.9604645e-8f), 0x0001, "smallest subnormal");
  cr_expect_eq(kiln_float_to_half(2.9802322e-8f), 0x0000, "half of it ties to even zero");
  cr_expect_eq(kiln_float_to_half(6.1035156e-5f), 0x0400, "smallest normal");
  /* 1 + 2^-11 is exactly between 1 and the next half: ties to even (1.0). */
  cr_expect_eq(kiln_float_to_half(1.00048828125f), 0x3C00);
  cr_expect_eq(kiln_float_to_half(1.00146484375f), 0x3C02, "3 * 2^-11 ties up to even");
  cr_expect_eq(kiln_float_to_bfloat(1.0f), 0x3F80);
  cr_expect_eq(kiln_float_to_bfloat(1.00390625f), 0x3F80, "tie to even");
  cr_expect_eq(kiln_float_to_bfloat(1.01171875f), 0x3F82, "tie up to even");
}

static kiln_device_info_t dev_info(void) {
  kiln_device_info_t d;
  memset(&d, 0, sizeof d);
  strcpy(d.id, "x:0");
  d.max_block = 1024;
  d.max_block_dim[0] = d.max_block_dim[1] = 1024;
  d.max_block_dim[2] = 64;
  d.max_grid[0] = 1u << 31;
  d.max_grid[1] = d.max_grid[2] = 65535;
  d.max_grid_items = UINT32_MAX;
  d.max_shared = 65536;
  return d;
}

static void expect_geometry_error(uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by,
                                  uint32_t bz, uint32_t shared, const char *needle) {
  kiln_device_info_t d = dev_info();
  uint32_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  kiln_launch_t l;
  kiln_status_t s = kiln_launch_prepare(&kernel, &d, grid, block, shared, NULL, &l);
  cr_assert(s != KILN_OK, "expected \"%s\"", needle);
  cr_expect_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
  cr_expect(strstr(kiln_status_message(s), needle), "message \"%s\" lacks \"%s\"",
            kiln_status_message(s), needle);
  kiln_status_free(s);
}

/* Review H3: the cpu device allows UINT32_MAX per dimension, so the count of work-groups
 * wrapped at 2^64 (2^31 x 2^31 x 4 ran none and answered OK): refused. */
Test(launch_geometry, a_grid_of_more_than_2_64_groups_is_refused) {
  kiln_device_info_t d = dev_info();
  memset(d.max_grid, 0, sizeof(d.max_grid));
  d.max_grid_items = 0;
  uint32_t grid[3] = {1u << 31, 1u << 31, 4}, block[3] = {1, 1, 1};
  kiln_launch_t l;
  kiln_status_t s = kiln_launch_prepare(&kernel, &d, grid, block, 0, NULL, &l);
  cr_assert_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
  cr_expect(strstr(kiln_status_message(s), "grid of 2147483648 x 2147483648 x 4 work-groups"), "%s",
            kiln_status_message(s));
  kiln_status_free(s);
  grid[2] = 3; /* 3 x 2^62 fits */
  cr_expect_eq(kiln_launch_prepare(&kernel, &d, grid, block, 0, NULL, &l), KILN_OK);
}

Test(launch_geometry, fills_the_launch_and_its_dims) {
  kiln_device_info_t d = dev_info();
  void *argv[1] = {NULL};
  uint32_t grid[3] = {4, 1, 1}, block[3] = {64, 1, 1};
  kiln_launch_t l;
  cr_assert_eq(kiln_launch_prepare(&kernel, &d, grid, block, 128, argv, &l), KILN_OK);
  cr_expect_eq(l.dims, 1);
  cr_expect_eq(l.shared, 128);
  cr_expect_eq(l.kernel, &kernel);
  cr_expect_eq(l.args, argv);
  uint32_t grid2[3] = {4, 1, 2}, block2[3] = {8, 8, 1};
  cr_assert_eq(kiln_launch_prepare(&kernel, &d, grid2, block2, 0, argv, &l), KILN_OK);
  cr_expect_eq(l.dims, 3);
  uint32_t grid3[3] = {1, 1, 1}, block3[3] = {1, 1, 1};
  cr_assert_eq(kiln_launch_prepare(&kernel, &d, grid3, block3, 0, argv, &l), KILN_OK);
  cr_expect_eq(l.dims, 1);
}

Test(launch_geometry, checks_every_limit) {
  expect_geometry_error(0, 1, 1, 64, 1, 1, 0, "grid x is 0");
  expect_geometry_error(1, 1, 1, 64, 0, 1, 0, "block y is 0");
  expect_geometry_error(1, 1, 1, 16, 1, 128, 0, "block z = 128 exceeds x:0's limit of 64");
  expect_geometry_error(1, 70000, 1, 1, 1, 1, 0, "grid y = 70000 work-groups exceeds x:0's limit of 65535");
  expect_geometry_error(1u << 30, 1, 1, 8, 1, 1, 0, "work-items exceeds x:0's limit");
  expect_geometry_error(1, 1, 1, 32, 16, 1, 0, "= 512 work-items exceeds kernel \"k\"'s maximum of 256");
  expect_geometry_error(1, 1, 1, 64, 1, 1, 65000, "work-group memory 66024 bytes (1024 static + 65000 shared)");
}
