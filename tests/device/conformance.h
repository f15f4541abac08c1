/* The conformance suite's view of one backend: open its first device (or skip with the
 * probe's reason), load a conformance kernel's artifact for the device's arch, move
 * buffers, and launch through device/launch.h exactly as the worker does. */
#ifndef KILN_TESTS_DEVICE_CONFORMANCE_H
#define KILN_TESTS_DEVICE_CONFORMANCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device/launch.h"
#include "device/registry.h"

/* Set in a forked child: failed checks print and _exit(101) instead of asserting. */
extern bool conf_in_child;

/* Criterion parameter: one backend kind. */
typedef struct conf_param {
  char kind[8];
} conf_param_t;

/* All backends, for ParameterizedTestParameters; $KILN_TEST_BACKENDS ("cpu,cuda") limits them. */
conf_param_t *conf_params(size_t *out_count);

typedef struct conf {
  const kiln_backend_t *b;
  kiln_device_t *dev;
  const kiln_device_info_t *info;
  kiln_artifact_t art;
  kiln_dmodule_t *mod;
} conf_t;

/* Opens device $KILN_TEST_DEVICE_INDEX (default 0) of `kind`, or skips the test saying why. */
void conf_open(conf_t *c, const char *kind);
/* Skips the test unless `kind` has that device; opens nothing (a GPU runtime initialised
 * before fork() is unusable in the child). */
void conf_require(const char *kind);
/* Loads <stem>.<target>.kart for the device from the test data directory. */
void conf_load(conf_t *c, const char *stem);
void conf_close(conf_t *c);

kiln_dmem_t *conf_alloc(conf_t *c, size_t bytes);
kiln_dmem_t *conf_upload(conf_t *c, const void *host, size_t bytes);
void conf_download(conf_t *c, kiln_dmem_t *m, void *host, size_t bytes);
void conf_free(conf_t *c, kiln_dmem_t *m);

kiln_launch_arg_t conf_tensor(conf_t *c, kiln_dmem_t *m);
kiln_launch_arg_t conf_int(int64_t v);
kiln_launch_arg_t conf_float(double v);

/* Converts, checks and runs `count` times; returns the backend's status (asserting none of
 * the checks fail). Deadline 30 s. */
KILN_MUST_USE kiln_status_t conf_try(conf_t *c, const char *kernel, const uint32_t grid[3], const uint32_t block[3],
                       uint32_t shared, const kiln_launch_arg_t *args, size_t nargs, uint32_t count,
                       uint64_t *out_elapsed_ns);
/* conf_try that must succeed. */
void conf_run(conf_t *c, const char *kernel, const uint32_t grid[3], const uint32_t block[3],
              uint32_t shared, const kiln_launch_arg_t *args, size_t nargs);

/* Distance in units in the last place between two floats (0 when equal, huge across NaN). */
uint32_t conf_ulp_diff(float a, float b);

#endif
