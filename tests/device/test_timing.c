/* time_evaluator statistics and growth (device/timing.h); the evaluation itself runs in
 * the conformance suite against real backends. */
#include <criterion/criterion.h>
#include <math.h>

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

Test(timing, grows_number_like_tvm) {
  /* 1 run took 0.1 ms, 10 ms wanted: max(10 / 0.1 + 1, 1.618) = 101. */
  cr_expect_eq(kiln_time_grow_number(1, 0.1, 10), 101);
  /* 100 runs took 9 ms: max(10 / 0.09 + 1, 161.8) = 161 (truncated, as TVM's int cast). */
  cr_expect_eq(kiln_time_grow_number(100, 9.0, 10), 161);
  cr_expect_eq(kiln_time_grow_number(1, 1e-9, 4000000000u), UINT32_MAX, "saturates");
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
