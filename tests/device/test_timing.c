/* time_evaluator statistics and growth (device/timing.h), and the evaluation against a
 * simulated backend whose clock the test writes (how long `count` runs took), so that the
 * chosen `number` is checked without timing anything; the evaluation also runs in the
 * conformance suite against real backends. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "device/timing.h"

Test(timing, statistics_match_numpy) {
  double x[] = {4, 1, 3, 2};
  kiln_time_stats_t s;
  kiln_time_stats_compute(x, 4, &s);
  cr_expect_float_eq(s.min, 1.0, 1e-12);
  cr_expect_float_eq(s.median, 2.5, 1e-12);
  cr_expect_float_eq(s.mean, 2.5, 1e-12);
  cr_expect_float_eq(s.std, sqrt(1.25), 1e-12, "population std, as numpy.std");
  cr_expect_float_eq(s.cv, sqrt(1.25) / 2.5, 1e-12);
  double one[] = {7e-6};
  kiln_time_stats_compute(one, 1, &s);
  cr_expect_float_eq(s.median, 7e-6, 1e-18);
  cr_expect_float_eq(s.std, 0.0, 1e-18);
  double odd[] = {5, 9, 1};
  kiln_time_stats_compute(odd, 3, &s);
  cr_expect_float_eq(s.median, 5.0, 1e-12);
  double zero[] = {0, 0};
  kiln_time_stats_compute(zero, 2, &s);
  cr_expect_float_eq(s.cv, 0.0, 1e-12, "cv is 0, not NaN, when the mean is 0");
}

Test(timing, grows_number_by_kilns_rule) {
  /* 1 run took 0.1 ms, 10 ms wanted: ceil(10 * 1.02 / 0.1) = 102, at most 4x a step. */
  cr_expect_eq(kiln_time_grow_number(1, 0.1, 10), 4, "TVM's rule jumps to 101");
  /* 100 runs took 9 ms: ceil(10.2 / 0.09) = 114 (TVM: max(112.1, 161.8) = 161). */
  cr_expect_eq(kiln_time_grow_number(100, 9.0, 10), 114);
  /* Just short: aims KILN_TIME_TARGET (1.02) times min_repeat_ms. */
  cr_expect_eq(kiln_time_grow_number(1000, 9.99, 10), 1022);
  cr_expect_eq(kiln_time_grow_number(1, 9.99, 10), 2, "at least one run more");
  cr_expect_eq(kiln_time_grow_number(10, 20.0, 10), 11, "at least one run more");
  cr_expect_eq(kiln_time_grow_number(7, 0.0, 10), 28, "a clock that read nothing: 4x");
  cr_expect_eq(kiln_time_grow_number(1u << 31, 1e-9, 4000000000u), UINT32_MAX, "saturates");
  cr_expect_eq(kiln_time_grow_number(UINT32_MAX, 1.0, 10), UINT32_MAX, "saturates");
}

Test(timing, continues_a_measurement_of_a_quarter_of_min_repeat_ms) {
  cr_expect(kiln_time_continues(12.5, 50));
  cr_expect(kiln_time_continues(49.9, 50));
  cr_expect_not(kiln_time_continues(12.49, 50), "too short a sample: timed again");
  cr_expect_not(kiln_time_continues(0.0, 50), "a clock that read nothing");
  cr_expect_not(kiln_time_continues(0.0, 0));
}

/* ---- the evaluation on a simulated device ----------------------------------------------
 * sim_launch answers each backend->launch call (`count` runs back to back) with the
 * elapsed time the scenario says, and records what the evaluation asked. */
enum { FAST_FIRST_RUN, PREEMPTED_AFTER_SLICE, SLOW_FIRST_RUN, STEADY };
static struct {
  int scenario;
  double steady_ms; /* STEADY's cost of a run */
  uint32_t calls, runs, cancel_checks;
  uint32_t counts[64];
  uint64_t deadlines[64];
} sim;

static kiln_status_t sim_launch(kiln_device_t *dev, kiln_dmodule_t *mod, const kiln_launch_t *launch,
                                uint32_t count, uint64_t deadline_ns, uint64_t *out_elapsed_ns) {
  (void)dev, (void)mod, (void)launch;
  double ms = 0;
  switch (sim.scenario) {
    case FAST_FIRST_RUN: /* last session's measurement: one run alone 0.16 ms, back to back 1.36 */
      ms = count == 1 ? 0.16 : 1.36 * count;
      break;
    case PREEMPTED_AFTER_SLICE: /* runs at 0.16 ms until 4 ms in, then at 1.36 (a loaded CPU) */
      ms = count * 0.16 <= 4 ? count * 0.16 : 4 + (count - 25) * 1.36;
      break;
    case SLOW_FIRST_RUN: /* the first run of all 10 ms (cold), every later one 0.1 ms */
      ms = (sim.runs == 0 ? 10.0 : 0.1) + (count - 1) * 0.1;
      break;
    case STEADY:
      ms = count * sim.steady_ms;
      break;
  }
  /* a call that outlasts its deadline ends as the backends end it */
  if (deadline_ns && ms * 1e6 > (double)deadline_ns)
    return KILN_STATUS(KILN_E_TIMEOUT, "sim: %u runs took %.1f ms, past the deadline", count, ms);
  if (sim.calls < 64) {
    sim.counts[sim.calls] = count;
    sim.deadlines[sim.calls] = deadline_ns;
  }
  sim.calls++;
  sim.runs += count;
  if (out_elapsed_ns) *out_elapsed_ns = (uint64_t)llround(ms * 1e6);
  return KILN_OK;
}

static kiln_status_t sim_flush(kiln_device_t *dev) {
  (void)dev;
  return KILN_OK;
}

static bool sim_cancelled(void *ctx) {
  (void)ctx;
  sim.cancel_checks++;
  return false;
}

static const kiln_backend_t sim_backend = {.kind = "sim", .launch = sim_launch, .flush_caches = sim_flush};

static kiln_time_result_t sim_time_deadline(int scenario, uint32_t min_repeat_ms, uint32_t repeat,
                                            uint32_t warmup, uint64_t deadline_ns) {
  memset(&sim, 0, sizeof sim);
  sim.scenario = scenario;
  sim.steady_ms = 0.013;
  kiln_time_config_t cfg;
  kiln_time_config_default(&cfg);
  cfg.repeat = repeat;
  cfg.min_repeat_ms = min_repeat_ms;
  cfg.warmup = warmup;
  cfg.deadline_ns = deadline_ns;
  cfg.cancelled = sim_cancelled;
  kiln_time_result_t r;
  kiln_status_t s = kiln_time_evaluate(&sim_backend, NULL, NULL, NULL, &cfg, &r);
  cr_assert_null(s, "%s", s ? kiln_status_message(s) : "");
  return r;
}

static kiln_time_result_t sim_time(int scenario, uint32_t min_repeat_ms, uint32_t repeat, uint32_t warmup) {
  return sim_time_deadline(scenario, min_repeat_ms, repeat, warmup, 7000000000ull);
}

/* Every repeat took at least min_repeat_ms and at most `bound` times it (seconds per call
 * times the reported number: what the evaluation timed, not the test's own clock). */
static void expect_repeats_within(const kiln_time_result_t *r, double min_repeat_ms, double bound) {
  for (uint32_t i = 0; i < r->repeat; i++) {
    double ms = r->results[i] * 1e3 * r->number;
    cr_expect_geq(ms, min_repeat_ms * 0.999, "repeat %u: %.2f ms, under min_repeat_ms", i, ms);
    cr_expect_leq(ms, min_repeat_ms * bound, "repeat %u: %.2f ms for min_repeat_ms %.0f (number %u)", i, ms,
                  min_repeat_ms, r->number);
  }
}

/* The launch calls the last evaluation made, in order. */
static void expect_calls(const uint32_t *want, uint32_t n) {
  cr_assert_eq(sim.calls, n, "%u launch calls, expected %u", sim.calls, n);
  for (uint32_t i = 0; i < n; i++) cr_expect_eq(sim.counts[i], want[i], "launch call %u: %u runs", i, sim.counts[i]);
}

Test(timing, fast_first_run_does_not_blow_up_number) {
  /* TVM's rule: 0.16 ms -> number 313, 425 ms a repeat. kiln: 1 (0.16 ms) and 4 (5.4 ms)
   * timed again, 16 (21.8 ms, a quarter of 50 or more) continued with the 22 runs that make
   * 38 (51.7 ms at 1.36 ms a run). */
  kiln_time_result_t r = sim_time(FAST_FIRST_RUN, 50, 3, 0);
  cr_expect_eq(r.number, 38);
  expect_repeats_within(&r, 50, 1.04);
  cr_expect_float_eq(r.stats.median, 1.36e-3, 1e-9);
  /* 5 runs thrown away, then 3 repeats of 38: 119 runs where TVM's rule made 940. */
  expect_calls((uint32_t[]){1, 4, 16, 22, 38, 38}, 6);
  cr_expect_eq(sim.runs, 1 + 4 + 3 * 38);
  kiln_time_result_deinit(&r);
}

Test(timing, preempted_runs_keep_one_repeat_near_min_repeat_ms) {
  kiln_time_result_t r = sim_time(PREEMPTED_AFTER_SLICE, 50, 3, 1);
  expect_repeats_within(&r, 50, 1.25);
  cr_expect_leq(r.number, 64);
  kiln_time_result_deinit(&r);
}

Test(timing, slow_first_run_still_reaches_min_repeat_ms) {
  kiln_time_result_t r = sim_time(SLOW_FIRST_RUN, 50, 3, 0);
  expect_repeats_within(&r, 50, 1.25);
  cr_expect_float_eq(r.stats.median, 1e-4, 1e-9);
  kiln_time_result_deinit(&r);
}

Test(timing, steady_kernel_grows_fourfold_then_settles) {
  /* 0.013 ms a run: 1, 4, 16, 64, 256 timed again; 1024 (13.3 ms) continued with 2900 runs to
   * 3924 (51.0 ms), kept for the later repeats. The repeat's result is its whole time over
   * its whole runs. */
  kiln_time_result_t r = sim_time(STEADY, 50, 5, 1);
  cr_expect_eq(r.number, 3924);
  expect_repeats_within(&r, 50, KILN_TIME_TARGET + 1e-3);
  cr_expect_float_eq(r.stats.median, 1.3e-5, 1e-12);
  expect_calls((uint32_t[]){1, 1, 4, 16, 64, 256, 1024, 2900, 3924, 3924, 3924, 3924}, 12);
  for (uint32_t i = 0; i < 12; i++)
    cr_expect_eq(sim.deadlines[i], 7000000000ull, "every call carries the request's deadline");
  cr_expect_eq(sim.cancel_checks, sim.calls, "asked once before the warm-up and before every timed call");
  /* Thrown away: 341 runs (4.4 ms), where timing every short step again threw away 1365
   * (17.7 ms, a third of a repeat). */
  cr_expect_eq(sim.runs, 1 + 341 + 5 * 3924);
  kiln_time_result_deinit(&r);
}

Test(timing, growth_stays_inside_the_deadline) {
  /* timeout_ms 53 for min_repeat_ms 50: a call of 3924 runs (51 ms) would be past 0.8 of the
   * deadline, so no call is planned past 3261 runs (42.39 ms of 42.4); the repeats still
   * reach min_repeat_ms, each in two calls: the first 1024 + 2900, the later ones 3261 + 663. */
  kiln_time_result_t r = sim_time_deadline(STEADY, 50, 3, 1, 53000000ull);
  cr_expect_eq(r.number, 3924);
  expect_repeats_within(&r, 50, KILN_TIME_TARGET + 1e-3);
  expect_calls((uint32_t[]){1, 1, 4, 16, 64, 256, 1024, 2900, 3261, 663, 3261, 663}, 12);
  for (uint32_t i = 0; i < sim.calls; i++)
    cr_expect_leq(sim.counts[i] * 0.013, 53 * KILN_TIME_DEADLINE_SHARE + 1e-6, "call %u: %u runs", i, sim.counts[i]);
  kiln_time_result_deinit(&r);
  /* With room in the deadline, one call a repeat: 3924 runs (51 ms) fit 0.8 of 100 ms. */
  r = sim_time_deadline(STEADY, 50, 3, 1, 100000000ull);
  cr_expect_eq(r.number, 3924);
  expect_calls((uint32_t[]){1, 1, 4, 16, 64, 256, 1024, 2900, 3924, 3924}, 10);
  kiln_time_result_deinit(&r);
}

Test(timing, no_growth_without_min_repeat_ms) {
  kiln_time_result_t r = sim_time(FAST_FIRST_RUN, 0, 2, 0);
  cr_expect_eq(r.number, 1);
  cr_expect_eq(sim.calls, 2);
  kiln_time_result_deinit(&r);
}

Test(timing, config_defaults_are_tvms) {
  kiln_time_config_t c;
  kiln_time_config_default(&c);
  cr_expect_eq(c.number, 1);
  cr_expect_eq(c.repeat, 1);
  cr_expect_eq(c.min_repeat_ms, 0);
  cr_expect_eq(c.warmup, 1);
  cr_expect_not(c.flush);
}
