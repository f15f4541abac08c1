/* `time`: TVM's time_evaluator semantics on top of kiln_backend_t.launch (DESIGN §6), with
 * kiln's rule for growing `number` (docs/protocol.md, `time`).
 *
 *   warm-up: `warmup` runs, not measured (TVM makes one call to trigger lazy setup);
 *   for each of `repeat` repeats: flush caches if asked, then time `number` back-to-back
 *   runs with the device's clock; while the repeat's measurement is shorter than
 *   `min_repeat_ms`, it grows (kiln_time_grow_number) and is timed again, or continued (below);
 *   the grown number carries into later repeats, as in TVM; a timing that read 0 ns is taken
 *   again with the same number, at most 100 times, as TVM.
 *   result: seconds per call for each repeat, plus min/median/mean/std (population)/cv.
 *
 * The growth differs from TVM's on purpose, in two ways.
 *
 * 1. Steps. TVM jumps from one timing straight to max(min_repeat_ms / per_run + 1,
 *    number * 1.618) runs: when the first short timing is unrepresentatively fast (one run
 *    that fits between two preemptions of a loaded CPU, caches warm from the check run
 *    before it), the jump overshoots min_repeat_ms by the same factor (measured: 0.16 ms a
 *    run alone, 1.36 ms back to back; number 313 and 425 ms a repeat for min_repeat_ms 50).
 *    kiln grows at most KILN_TIME_GROW_MAX times a step, each step planned at the rate of
 *    the runs before it:
 *
 *      next = clamp(ceil(min_repeat_ms * KILN_TIME_TARGET / (ms / runs)),
 *                   runs + 1, runs * KILN_TIME_GROW_MAX)
 *
 * 2. Continuing. TVM throws every short timing away and times the repeat again from its
 *    first run. kiln does so only while the measurement is shorter than
 *    KILN_TIME_CONTINUE_FROM of min_repeat_ms (a few runs, which may not be what runs back
 *    to back cost): past that it is a sample of back-to-back runs worth keeping, and the
 *    repeat continues with the `next - runs` runs it lacks, timed as further launch calls
 *    whose times add up (the calls follow each other with nothing between them but this
 *    loop). A repeat's result is its total time over its total runs, and `number` its total
 *    runs. Restarting cost the steps before the one that reached min_repeat_ms: about a third
 *    of a repeat at 4x a step (1, 4, 16, 64 runs thrown away before 256), up to a whole one
 *    for a kernel near min_repeat_ms / 16 (2.5 ms of 50: 1, 4 and 16 runs, 52 ms). With
 *    continuing, what is thrown away is under KILN_TIME_CONTINUE_FROM / (GROW_MAX - 1) of a
 *    repeat, and since a continued repeat that falls a little short only adds a few runs,
 *    KILN_TIME_TARGET aims barely above min_repeat_ms (restarting, it aimed 1.125 times it
 *    so that noise would not cost a repeat timed again).
 *
 * A repeat therefore lasts at most KILN_TIME_TARGET times min_repeat_ms times the change in
 * a run's cost within it (runs grow at most GROW_MAX times the runs timed before), and a
 * call is never planned longer than KILN_TIME_DEADLINE_SHARE of the request's deadline at
 * the rate measured: a repeat longer than that is timed in several calls. Each call is one
 * backend->launch with the request's deadline, preceded by the cancellation check (the
 * worker's watchdog heartbeat), as every run was before. Called from the worker's thread
 * that owns the device. */
#ifndef KILN_DEVICE_TIMING_H
#define KILN_DEVICE_TIMING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KILN_TIME_GROW_MAX 4
#define KILN_TIME_TARGET 1.02
/* A repeat's measurement at least this share of min_repeat_ms is continued, not restarted. */
#define KILN_TIME_CONTINUE_FROM 0.25
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

/* The runs a repeat should have after `number` runs took `ms` milliseconds (the rule above;
 * ms <= 0, a clock that read nothing: number * KILN_TIME_GROW_MAX). Always more than
 * `number` below UINT32_MAX, where it saturates. */
uint32_t kiln_time_grow_number(uint32_t number, double ms, uint32_t min_repeat_ms);

/* Whether a repeat's measurement of `ms` milliseconds, short of min_repeat_ms, is continued
 * (true) or timed again from its first run with more runs (false). */
bool kiln_time_continues(double ms, uint32_t min_repeat_ms);

#endif
