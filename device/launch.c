#include "device/launch.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* "argument 3 (\"n\")" or "argument 3" when the kernel table has no name. */
static const char *arg_label(char *buf, size_t cap, uint32_t i, const kiln_kernel_arg_t *a) {
  if (a->name[0])
    snprintf(buf, cap, "argument %u (\"%s\")", i, a->name);
  else
    snprintf(buf, cap, "argument %u", i);
  return buf;
}

static const char *given_name(kiln_launch_arg_kind_t k) {
  switch (k) {
    case KILN_LAUNCH_ARG_TENSOR: return "a tensor";
    case KILN_LAUNCH_ARG_INT:
    case KILN_LAUNCH_ARG_UINT: return "an integer";
    case KILN_LAUNCH_ARG_FLOAT: return "a float";
  }
  return "an unknown value";
}

/* LLVM IR integers carry no sign, so the compiler reports every integer parameter as
 * signed (i8..i64): the C source may have said uint32_t. A signed kind therefore takes
 * anything its bits can hold, -2^(n-1) .. 2^n - 1, stored as two's complement. */
static bool int_range(kiln_arg_type_t t, int64_t *lo, uint64_t *hi) {
  switch (t) {
    case KILN_ARG_I8: *lo = INT8_MIN; *hi = UINT8_MAX; return true;
    case KILN_ARG_I16: *lo = INT16_MIN; *hi = UINT16_MAX; return true;
    case KILN_ARG_I32: *lo = INT32_MIN; *hi = UINT32_MAX; return true;
    case KILN_ARG_I64: *lo = INT64_MIN; *hi = UINT64_MAX; return true;
    case KILN_ARG_U8: *lo = 0; *hi = UINT8_MAX; return true;
    case KILN_ARG_U16: *lo = 0; *hi = UINT16_MAX; return true;
    case KILN_ARG_U32: *lo = 0; *hi = UINT32_MAX; return true;
    case KILN_ARG_U64: *lo = 0; *hi = UINT64_MAX; return true;
    default: return false;
  }
}

/* Stores the low `size` bytes of v (little-endian host) in the slot. */
static void store_int(uint64_t *slot, uint64_t v, uint32_t size) {
  *slot = 0;
  memcpy(slot, &v, size);
}

static kiln_status_t convert_int(const kiln_launch_arg_t *in, const kiln_kernel_arg_t *a,
                                 const char *label, uint64_t *slot) {
  int64_t lo;
  uint64_t hi;
  int_range(a->type, &lo, &hi);
  const char *tname = kiln_arg_type_name(a->type);
  if (in->kind == KILN_LAUNCH_ARG_INT && in->i < 0) {
    if (in->i < lo)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "%s: %" PRId64 " does not fit %s (range %" PRId64 "..%" PRIu64 ")", label,
                         in->i, tname, lo, hi);
    store_int(slot, (uint64_t)in->i, a->size);
    return KILN_OK;
  }
  uint64_t u = in->kind == KILN_LAUNCH_ARG_INT ? (uint64_t)in->i : in->u;
  if (u > hi)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "%s: %" PRIu64 " does not fit %s (range %" PRId64 "..%" PRIu64 ")", label, u,
                       tname, lo, hi);
  store_int(slot, u, a->size);
  return KILN_OK;
}

static kiln_status_t convert_float(const kiln_launch_arg_t *in, const kiln_kernel_arg_t *a,
                                   const char *label, uint64_t *slot) {
  double d = in->kind == KILN_LAUNCH_ARG_FLOAT ? in->f
             : in->kind == KILN_LAUNCH_ARG_INT ? (double)in->i
                                               : (double)in->u;
  double max = a->type == KILN_ARG_F16 ? 65519.0 /* rounds to 65504, the largest half */
               : a->type == KILN_ARG_F64 ? DBL_MAX
                                         : (double)FLT_MAX;
  if (a->type == KILN_ARG_BF16) max = 3.3961514e38; /* largest value rounding to a finite bf16 */
  if (isfinite(d) && fabs(d) > max)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: %g is out of range for %s", label, d,
                       kiln_arg_type_name(a->type));
  *slot = 0;
  switch (a->type) {
    case KILN_ARG_F16: {
      uint16_t h = kiln_float_to_half((float)d);
      memcpy(slot, &h, 2);
      break;
    }
    case KILN_ARG_BF16: {
      uint16_t h = kiln_float_to_bfloat((float)d);
      memcpy(slot, &h, 2);
      break;
    }
    case KILN_ARG_F32: {
      float f = (float)d;
      memcpy(slot, &f, 4);
      break;
    }
    default:
      memcpy(slot, &d, 8);
      break;
  }
  return KILN_OK;
}

static kiln_status_t convert_one(const kiln_launch_arg_t *in, const kiln_kernel_arg_t *a,
                                 uint32_t i, uint64_t *slot) {
  char label[96];
  arg_label(label, sizeof label, i, a);
  const char *tname = kiln_arg_type_name(a->type);
  switch (a->type) {
    case KILN_ARG_PTR:
      if (in->kind != KILN_LAUNCH_ARG_TENSOR)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                           "%s: expected a tensor ({\"tensor\": id}) for a pointer parameter, got %s",
                           label, given_name(in->kind));
      *slot = in->tensor_addr;
      return KILN_OK;
    case KILN_ARG_F16:
    case KILN_ARG_BF16:
    case KILN_ARG_F32:
    case KILN_ARG_F64:
      if (in->kind == KILN_LAUNCH_ARG_TENSOR)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: expected a number (%s), got a tensor",
                           label, tname);
      return convert_float(in, a, label, slot);
    default: {
      int64_t lo;
      uint64_t hi;
      if (!int_range(a->type, &lo, &hi))
        return KILN_STATUS(KILN_E_INTERNAL, "%s: kernel table has unknown type %d", label,
                           (int)a->type);
      if (in->kind != KILN_LAUNCH_ARG_INT && in->kind != KILN_LAUNCH_ARG_UINT)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: expected an integer (%s), got %s", label,
                           tname, given_name(in->kind));
      return convert_int(in, a, label, slot);
    }
  }
}

kiln_status_t kiln_launch_values_init(kiln_launch_values_t *v, const kiln_kernel_t *kernel,
                                      const kiln_launch_arg_t *args, size_t nargs) {
  memset(v, 0, sizeof *v);
  if (nargs != kernel->num_args)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "kernel \"%s\" takes %u arguments, got %zu",
                       kernel->name, kernel->num_args, nargs);
  uint32_t n = kernel->num_args;
  /* At least one slot so that an argument-less kernel still gets a valid array. */
  v->slots = calloc(n ? n : 1, sizeof *v->slots);
  v->ptrs = calloc(n ? n : 1, sizeof *v->ptrs);
  if (!v->slots || !v->ptrs) {
    kiln_launch_values_deinit(v);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for %u launch arguments", n);
  }
  for (uint32_t i = 0; i < n; i++) {
    kiln_status_t s = convert_one(&args[i], &kernel->args[i], i, &v->slots[i]);
    if (s) {
      kiln_launch_values_deinit(v);
      return s;
    }
    v->ptrs[i] = &v->slots[i];
  }
  v->count = n;
  return KILN_OK;
}

void kiln_launch_values_deinit(kiln_launch_values_t *v) {
  free(v->slots);
  free(v->ptrs);
  memset(v, 0, sizeof *v);
}

static const char dim_name[3] = {'x', 'y', 'z'};

kiln_status_t kiln_launch_prepare(const kiln_kernel_t *kernel, const kiln_device_info_t *dev,
                                  const uint32_t grid[3], const uint32_t block[3],
                                  uint32_t shared, void *const *args,
                                  kiln_launch_t *out_launch) {
  uint64_t items = 1;
  uint32_t dims = 1;
  for (int d = 0; d < 3; d++) {
    if (grid[d] == 0 || block[d] == 0)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "%s %c is 0: every dimension needs at least 1 (use 1 for unused ones)",
                         grid[d] == 0 ? "grid" : "block", dim_name[d]);
    if (dev->max_block_dim[d] && block[d] > dev->max_block_dim[d])
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "block %c = %u exceeds %s's limit of %u",
                         dim_name[d], block[d], dev->id, dev->max_block_dim[d]);
    if (dev->max_grid[d] && grid[d] > dev->max_grid[d])
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "grid %c = %u work-groups exceeds %s's limit of %u", dim_name[d], grid[d],
                         dev->id, dev->max_grid[d]);
    if (dev->max_grid_items && (uint64_t)grid[d] * block[d] > dev->max_grid_items)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "grid %c * block %c = %" PRIu64 " work-items exceeds %s's limit of %" PRIu64,
                         dim_name[d], dim_name[d], (uint64_t)grid[d] * block[d], dev->id,
                         dev->max_grid_items);
    items *= block[d];
    if (grid[d] > 1 || block[d] > 1) dims = (uint32_t)d + 1;
  }
  uint64_t groups; /* a backend counts work-groups in 64 bits: a grid past that would wrap */
  if (__builtin_mul_overflow((uint64_t)grid[0] * grid[1], (uint64_t)grid[2], &groups))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "grid of %u x %u x %u work-groups exceeds 2^64 work-groups", grid[0], grid[1], grid[2]);
  if (kernel->max_block && items > kernel->max_block)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "block %ux%ux%u = %" PRIu64 " work-items exceeds kernel \"%s\"'s maximum of %u",
                       block[0], block[1], block[2], items, kernel->name, kernel->max_block);
  if (dev->max_block && items > dev->max_block)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "block %ux%ux%u = %" PRIu64 " work-items exceeds %s's maximum of %u", block[0],
                       block[1], block[2], items, dev->id, dev->max_block);
  uint64_t lds = (uint64_t)shared + kernel->group_segment_size;
  if (dev->max_shared && lds > dev->max_shared)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "work-group memory %" PRIu64 " bytes (%u static + %u shared) exceeds %s's "
                       "limit of %u",
                       lds, kernel->group_segment_size, shared, dev->id, dev->max_shared);
  memset(out_launch, 0, sizeof *out_launch);
  out_launch->kernel = kernel;
  memcpy(out_launch->grid, grid, sizeof out_launch->grid);
  memcpy(out_launch->block, block, sizeof out_launch->block);
  out_launch->dims = dims;
  out_launch->shared = shared;
  out_launch->args = args;
  return KILN_OK;
}

uint16_t kiln_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xFFu;
  uint32_t mant = x & 0x7FFFFFu;
  if (exp == 0xFF) return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u | (mant >> 13) : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7C00u);
  if (e <= 0) {
    /* Subnormal half: value / 2^-24 = (1.mant) * 2^(exp-126) = M >> (14 - e). Below
     * e = -10 the value is under half the smallest subnormal and rounds to zero. */
    if (e < -10) return (uint16_t)sign;
    uint32_t m = mant | 0x800000u;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = sign | ((uint32_t)e << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1FFFu;
  /* A carry out of the mantissa correctly bumps the exponent (up to infinity). */
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (uint16_t)h;
}

uint16_t kiln_float_to_bfloat(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFFu)) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}
