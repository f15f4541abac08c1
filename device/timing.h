/* `time`: TVM's time_evaluator semantics on top of kiln_backend_t.launch (DESIGN §6).
 *
 *   warm-up: `warmup` runs, not measured (TVM makes one call to trigger lazy setup);
 *   for each of `repeat` repeats: flush caches if asked, then time `number` back-to-back
 *   runs with the device's clock; while that took less than `min_repeat_ms`, grow
 *   number = max(min_repeat_ms / (ms / number) + 1, number * 1.618) and time again (the
 *   grown number carries into later repeats, as in TVM);
 *   result: seconds per call for each repeat, plus min/median/mean/std (population)/cv.
 * Called from the worker's thread that owns the device. */
#ifndef KILN_DEVICE_TIMING_H
#define KILN_DEVICE_TIMING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

typedef struct kiln_time_config {
  uint32_t number;        /* runs per repeat before growth; >= 1 */
  uint32_t repeat;        /* >= 1 */
  uint32_t min_repeat_ms; /* 0: no growth */
  uint32_t warmup;        /* unmeasured runs first (TVM: 1) */
  bool flush;             /* backend->flush_caches before every repeat */
  uint64_t deadline_ns;   /* per backend->launch call, passed through; 0 = none */
  /* Asked before every backend->launch call; true ends the evaluation with E_CANCELLED (the
   * client that asked has gone). NULL: never. */
  bool (*cancelled)(void *ctx);
  void *cancel_ctx;
} kiln_time_config_t;

/* Defaults as TVM's: number 1, repeat 1, min_repeat_ms 0, warmup 1, no flush. */
void kiln_time_config_default(kiln_time_config_t *cfg);

typedef struct kiln_time_stats {
  double min, median, mean, std, cv;
} kiln_time_stats_t;

typedef struct kiln_time_result {
  uint32_t number;  /* runs per repeat after growth (of the last repeat) */
  uint32_t repeat;
  double *results;  /* `repeat` entries: seconds per call; owned */
  kiln_time_stats_t stats;
} kiln_time_result_t;

/* Runs the evaluation. E_INVALID_ARGUMENT for number or repeat 0; any backend error
 * (E_DEVICE_FAULT, E_TIMEOUT, ...) is returned as is. *out is set on success only;
 * release it with kiln_time_result_deinit. */
KILN_MUST_USE kiln_status_t kiln_time_evaluate(const kiln_backend_t *backend, kiln_device_t *dev,
                                 kiln_dmodule_t *mod, const kiln_launch_t *launch,
                                 const kiln_time_config_t *cfg, kiln_time_result_t *out);
void kiln_time_result_deinit(kiln_time_result_t *r);

/* Statistics of n >= 1 samples (population std; cv = std / mean, 0 when mean is 0). */
void kiln_time_stats_compute(const double *x, size_t n, kiln_time_stats_t *out);

/* TVM's growth rule: the next `number` after `number` runs took `ms` (> 0) milliseconds. */
uint32_t kiln_time_grow_number(uint32_t number, double ms, uint32_t min_repeat_ms);

#endif
