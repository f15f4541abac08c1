/* `time`: TVM's time_evaluator semantics on top of kiln_backend_t.launch (DESIGN §6), with
 * kiln's rule for growing `number` (docs/protocol.md, `time`).
 *
 *   warm-up: `warmup` runs, not measured (TVM makes one call to trigger lazy setup);
 *   for each of `repeat` repeats: flush caches if asked, then time `number` back-to-back
 *   runs with the device's clock; while that took less than `min_repeat_ms`, grow `number`
 *   by kiln_time_grow_number and time again (the grown number carries into later repeats,
 *   as in TVM; a timing that read 0 ns is taken again with the same number, at most 100
 *   times, as TVM). The last timing is the repeat's result.
 *   result: seconds per call for each repeat, plus min/median/mean/std (population)/cv.
 *
 * The growth differs from TVM's on purpose. TVM jumps from one timing straight to
 * max(min_repeat_ms / per_run + 1, number * 1.618) runs: when the first short timing is
 * unrepresentatively fast (one run that fits between two preemptions of a loaded CPU,
 * caches warm from the check run before it), the jump overshoots min_repeat_ms by the same
 * factor (measured: 0.16 ms a run alone, 1.36 ms back to back; number 313 and 425 ms a
 * repeat for min_repeat_ms 50). kiln grows at most KILN_TIME_GROW_MAX times a step, each
 * step timed with the number it grows from, and aims a little above min_repeat_ms
 * (KILN_TIME_TARGET) so that a repeat of a steady kernel is not re-timed for noise:
 *
 *   next = clamp(ceil(min_repeat_ms * KILN_TIME_TARGET / (ms / number)),
 *                number + 1, number * KILN_TIME_GROW_MAX)
 *
 * The step that reaches min_repeat_ms therefore lasts at most KILN_TIME_TARGET times it
 * when a run costs what it cost in the step before (up to GROW_MAX times as many runs
 * back to back), and at a steady rate the steps before it add about 1 / (GROW_MAX - 1)
 * of it at most (they grew by GROW_MAX each, or fewer of them were needed). Each
 * step is one backend->launch call with the request's deadline, preceded by the
 * cancellation check (the worker's watchdog heartbeat), as every run was before.
 * Called from the worker's thread that owns the device. */
#ifndef KILN_DEVICE_TIMING_H
#define KILN_DEVICE_TIMING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KILN_TIME_GROW_MAX 4
#define KILN_TIME_TARGET 1.125
/* Growth never plans a launch call longer than this share of its deadline (timeout_ms). */
#define KILN_TIME_DEADLINE_SHARE 0.8

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

/* The next `number` after `number` runs took `ms` milliseconds (the rule above; ms <= 0,
 * a clock that read nothing: number * KILN_TIME_GROW_MAX). Always more than `number`
 * below UINT32_MAX, where it saturates. */
uint32_t kiln_time_grow_number(uint32_t number, double ms, uint32_t min_repeat_ms);

#endif
