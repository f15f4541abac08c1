#include "device/timing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* TVM stops growing after this many timings that read exactly 0 ns (a clock too coarse
 * for the kernel), instead of looping forever (TVM's limit_zero_time_iterations). */
#define ZERO_TIME_LIMIT 100

void kiln_time_config_default(kiln_time_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->number = 1;
  cfg->repeat = 1;
  cfg->warmup = 1;
}

uint32_t kiln_time_grow_number(uint32_t number, double ms, uint32_t min_repeat_ms) {
  double hi = (double)number * KILN_TIME_GROW_MAX;
  double next = hi;
  if (ms > 0) {
    /* Enough runs, at the rate just seen, for the target; the rate of `number` runs back to
     * back is the best estimate of the rate of a few times more. */
    double want = ceil((double)min_repeat_ms * KILN_TIME_TARGET / (ms / number));
    next = want < hi ? want : hi;
  }
  if (next < (double)number + 1) next = (double)number + 1;
  if (next > (double)UINT32_MAX) return UINT32_MAX;
  return (uint32_t)next;
}

bool kiln_time_continues(double ms, uint32_t min_repeat_ms) {
  return ms > 0 && ms >= (double)min_repeat_ms * KILN_TIME_CONTINUE_FROM;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void kiln_time_stats_compute(const double *x, size_t n, kiln_time_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (n == 0) return;
  double *sorted = malloc(n * sizeof *sorted);
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += x[i];
  double mean = sum / (double)n;
  double var = 0;
  for (size_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
  out->mean = mean;
  out->std = sqrt(var / (double)n);
  out->cv = mean != 0 ? out->std / mean : 0;
  if (!sorted) { /* degrade to a linear min; median unknown */
    out->min = x[0];
    for (size_t i = 1; i < n; i++)
      if (x[i] < out->min) out->min = x[i];
    out->median = mean;
    return;
  }
  memcpy(sorted, x, n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, cmp_double);
  out->min = sorted[0];
  out->median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  free(sorted);
}

/* The most runs one launch call is planned to hold: KILN_TIME_DEADLINE_SHARE of the call's
 * deadline at the rate just measured (a steady kernel's planned call never ends in E_TIMEOUT
 * for growth alone; a kernel that slows down past the margin still can). */
static uint32_t deadline_cap(const kiln_time_config_t *cfg, double ms_per_run) {
  if (!cfg->deadline_ns || !(ms_per_run > 0)) return UINT32_MAX;
  double runs = floor((double)cfg->deadline_ns / 1e6 * KILN_TIME_DEADLINE_SHARE / ms_per_run);
  return runs >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)runs;
}

static bool stop(const kiln_time_config_t *cfg) { return cfg->cancelled && cfg->cancelled(cfg->cancel_ctx); }

static kiln_status_t cancelled(const kiln_time_config_t *cfg, uint32_t repeat) {
  return KILN_STATUS(KILN_E_CANCELLED, "time: cancelled after %u of %u repeats (its client has gone)",
                     repeat, cfg->repeat);
}

kiln_status_t kiln_time_evaluate(const kiln_backend_t *backend, kiln_device_t *dev,
                                 kiln_dmodule_t *mod, const kiln_launch_t *launch,
                                 const kiln_time_config_t *cfg, kiln_time_result_t *out) {
  if (cfg->number == 0 || cfg->repeat == 0)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "time: number and repeat must be at least 1 (got %u, %u)",
                       cfg->number, cfg->repeat);
  if (stop(cfg)) return cancelled(cfg, 0);
  if (cfg->warmup)
    KILN_RETURN_IF_ERROR(backend->launch(dev, mod, launch, cfg->warmup, cfg->deadline_ns, NULL));
  double *results = calloc(cfg->repeat, sizeof *results);
  if (!results)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "time: out of memory for %u repeats", cfg->repeat);
  uint32_t number = cfg->number;
  double per_run = 0; /* ms a run in the last measurement: the deadline's cap on a call */
  kiln_status_t s = KILN_OK;
  for (uint32_t r = 0; r < cfg->repeat && !s; r++) {
    if (cfg->flush && (s = backend->flush_caches(dev))) break;
    uint32_t runs = 0, call = number, cap = deadline_cap(cfg, per_run);
    if (call > cap) call = cap > 0 ? cap : 1; /* a carried number past one call's share */
    double ms = 0;
    int zero_times = 0;
    for (;;) {
      uint64_t ns = 0;
      s = stop(cfg) ? cancelled(cfg, r) : backend->launch(dev, mod, launch, call, cfg->deadline_ns, &ns);
      if (s) break;
      if (ns == 0) zero_times++;
      runs = runs + call < runs ? UINT32_MAX : runs + call;
      ms += (double)ns / 1e6;
      if (ms > 0) per_run = ms / runs;
      if (ms >= cfg->min_repeat_ms || zero_times >= ZERO_TIME_LIMIT || runs == UINT32_MAX) break;
      if (ms <= 0) { /* the clock read nothing: the same runs again (TVM) */
        call = runs;
        runs = 0;
        continue;
      }
      uint32_t next = kiln_time_grow_number(runs, ms, cfg->min_repeat_ms);
      cap = deadline_cap(cfg, per_run);
      if (kiln_time_continues(ms, cfg->min_repeat_ms)) {
        /* The runs it lacks, in calls no longer than the deadline's share. No call of even
         * one run fits: the repeat keeps what it has, short of min_repeat_ms. */
        if (cap == 0) break;
        call = next - runs < cap ? next - runs : cap;
      } else {
        /* Too short a sample to keep: timed again with more runs. No longer call fits the
         * deadline: the repeat stays as measured, short of min_repeat_ms, rather than
         * ending the request with E_TIMEOUT. */
        if (cap <= runs) break;
        call = next < cap ? next : cap;
        runs = 0;
        ms = 0;
      }
    }
    if (s) break;
    number = runs;
    results[r] = ms / 1e3 / runs;
  }
  if (s) {
    free(results);
    return s;
  }
  memset(out, 0, sizeof *out);
  out->number = number;
  out->repeat = cfg->repeat;
  out->results = results;
  kiln_time_stats_compute(results, cfg->repeat, &out->stats);
  return KILN_OK;
}

void kiln_time_result_deinit(kiln_time_result_t *r) {
  free(r->results);
  memset(r, 0, sizeof *r);
}
