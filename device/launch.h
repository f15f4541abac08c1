/* Checking and converting a launch request against a kernel's signature and a device's
 * limits, before anything runs (DESIGN §3 `launch`). Pure functions; any thread.
 *
 * The worker decodes the protocol's `args` into kiln_launch_arg_t (tensors already resolved
 * to device addresses), converts them into the kernel's parameter types with
 * kiln_launch_values_init, and checks the geometry with kiln_launch_prepare, which fills the
 * kiln_launch_t a backend runs. Errors are E_INVALID_ARGUMENT naming the argument (index and
 * name) or the dimension, and what was expected. */
#ifndef KILN_DEVICE_LAUNCH_H
#define KILN_DEVICE_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

typedef enum kiln_launch_arg_kind {
  KILN_LAUNCH_ARG_TENSOR = 1, /* {"tensor": id}, resolved to its device address */
  KILN_LAUNCH_ARG_INT,        /* a negative msgpack integer (or any signed one) */
  KILN_LAUNCH_ARG_UINT,       /* a non-negative msgpack integer */
  KILN_LAUNCH_ARG_FLOAT,      /* a msgpack float32/float64 */
} kiln_launch_arg_kind_t;

typedef struct kiln_launch_arg {
  kiln_launch_arg_kind_t kind;
  union {
    uint64_t tensor_addr;
    int64_t i;
    uint64_t u;
    double f;
  };
} kiln_launch_arg_t;

/* Per-argument values in the kernel's parameter types: ptrs[i] points at argument i's
 * value (one 8-byte slot each, value in its low bytes), the form kiln_launch_t.args and
 * the cpu ABI and cuLaunchKernel take. Caller-provided storage: _init/_deinit. */
typedef struct kiln_launch_values {
  uint32_t count;
  uint64_t *slots;
  void **ptrs;
} kiln_launch_values_t;

/* Converts `args` (nargs of them) to `kernel`'s explicit parameters. Rules: a pointer
 * parameter takes a tensor only; an integer parameter takes an integer that fits its bits
 * (int32: -2^31 .. 2^32-1, since IR integers have no sign; unsigned kinds: 0 .. 2^n-1;
 * floats are refused rather than truncated); a float parameter takes any number (float16
 * and bfloat16 round to nearest even; a finite value beyond the type's range is refused). */
KILN_MUST_USE kiln_status_t kiln_launch_values_init(kiln_launch_values_t *v, const kiln_kernel_t *kernel,
                                      const kiln_launch_arg_t *args, size_t nargs);
void kiln_launch_values_deinit(kiln_launch_values_t *v);

/* Checks grid (work-groups per dimension) and block (work-items per work-group) against
 * the kernel's max_block and the device's limits, `shared` plus the kernel's static
 * work-group memory against the device's, then fills *out_launch (which borrows kernel and
 * args). A grid that does not divide the problem is fine: the kernel checks its bounds. */
KILN_MUST_USE kiln_status_t kiln_launch_prepare(const kiln_kernel_t *kernel, const kiln_device_info_t *dev,
                                  const uint32_t grid[3], const uint32_t block[3],
                                  uint32_t shared, void *const *args,
                                  kiln_launch_t *out_launch);

/* IEEE binary16 / bfloat16 bits of a float, rounded to nearest even (NaN stays NaN). */
uint16_t kiln_float_to_half(float f);
uint16_t kiln_float_to_bfloat(float f);

#endif
