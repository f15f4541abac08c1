/* kiln's NVPTX math library (compiler/mathlib/kiln_math.c) compiled for the host and
 * measured against the host libm in units in the last place (ulp). The bounds are what the
 * library promises in docs/kernels.md. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#define DECL1(n) double __kiln_math_##n##_f64(double); float __kiln_math_##n##_f32(float);
#define DECL2(n) double __kiln_math_##n##_f64(double, double); float __kiln_math_##n##_f32(float, float);
DECL1(exp) DECL1(exp2) DECL1(exp10) DECL1(expm1) DECL1(log) DECL1(log2) DECL1(log10) DECL1(log1p)
DECL1(sin) DECL1(cos) DECL1(tan) DECL1(asin) DECL1(acos) DECL1(atan) DECL1(sinh) DECL1(cosh) DECL1(tanh)
DECL1(asinh) DECL1(acosh) DECL1(atanh) DECL1(erf) DECL1(erfc) DECL1(cbrt)
DECL2(pow) DECL2(atan2) DECL2(hypot) DECL2(fmod)

static uint64_t rng = 88172645463325252ull;
static double uniform(double lo, double hi) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return lo + (hi - lo) * (double)(rng >> 11) * 0x1p-53;
}

static double ulps(double got, double want, int f32) {
  if (isnan(want)) return isnan(got) ? 0 : 1e9;
  if (isinf(want)) return got == want ? 0 : 1e9;
  double m = fabs(want);
  int e;
  frexp(m, &e);
  double ulp = f32 ? ldexp(1.0, (e - 24 < -149 ? -149 : e - 24)) : ldexp(1.0, (e - 53 < -1074 ? -1074 : e - 53));
  return fabs(got - want) / ulp;
}

typedef struct fn1 {
  const char *name;
  double (*ref)(double);
  double (*f64)(double);
  float (*f32)(float);
  double lo, hi;
  double max64, max32;
} fn1_t;

static void measure1(const fn1_t *f) {
  double worst64 = 0, worst32 = 0, at64 = 0, at32 = 0;
  for (int i = 0; i < 20000; i++) {
    /* Uniform, then log-uniform over the domain (small and large magnitudes alike). */
    double x = i < 10000   ? uniform(f->lo, f->hi)
               : f->lo > 0 ? exp(uniform(log(f->lo), log(f->hi)))
                           : uniform(f->lo, f->hi) * pow(2.0, -uniform(0, 30));
    double u = ulps(f->f64(x), f->ref(x), 0);
    if (u > worst64) worst64 = u, at64 = x;
    float xf = (float)x;
    double uf = ulps(f->f32(xf), (double)(float)f->ref((double)xf), 1);
    if (uf > worst32) worst32 = uf, at32 = xf;
  }
  cr_log_info("%-6s f64 max %.2f ulp (x=%.17g)  f32 max %.2f ulp (x=%.9g)", f->name, worst64, at64, worst32, at32);
  cr_expect_leq(worst64, f->max64, "%s f64: %.2f ulp at %.17g", f->name, worst64, at64);
  cr_expect_leq(worst32, f->max32, "%s f32: %.2f ulp at %.9g", f->name, worst32, at32);
}

#define F1(n, lo, hi, m64, m32) {#n, n, __kiln_math_##n##_f64, __kiln_math_##n##_f32, lo, hi, m64, m32}

Test(mathlib, one_argument_functions) {
  static const fn1_t fns[] = {
      F1(exp, -745, 709, 2, 2),     F1(exp2, -1074, 1023, 2, 1),  F1(exp10, -300, 300, 2, 1),
      F1(expm1, -40, 700, 3, 3),    F1(log, 1e-300, 1e300, 2, 2), F1(log2, 1e-300, 1e300, 2, 1),
      F1(log10, 1e-300, 1e300, 2, 1), F1(log1p, -0.999, 1e10, 3, 1), F1(sin, -1e5, 1e5, 2, 2),
      F1(cos, -1e5, 1e5, 2, 2),     F1(tan, -1e5, 1e5, 3, 1),     F1(asin, -1, 1, 4, 1),
      F1(acos, -1, 1, 4, 1),        F1(atan, -1e6, 1e6, 3, 1),    F1(sinh, -700, 700, 4, 1),
      F1(cosh, -700, 700, 3, 1),    F1(tanh, -30, 30, 4, 3),      F1(asinh, -1e10, 1e10, 4, 1),
      F1(acosh, 1, 1e10, 4, 1),     F1(atanh, -0.9999, 0.9999, 4, 1), F1(erf, -7, 7, 4, 4),
      F1(erfc, -3, 27, 8, 1),       F1(cbrt, -1e300, 1e300, 2, 1),
  };
  for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) measure1(&fns[i]);
}

Test(mathlib, special_values) {
  cr_expect(isnan(__kiln_math_log_f64(-1)));
  cr_expect_eq(__kiln_math_log_f64(0), -INFINITY);
  cr_expect_eq(__kiln_math_exp_f64(INFINITY), INFINITY);
  cr_expect_eq(__kiln_math_exp_f64(-INFINITY), 0);
  cr_expect_eq(__kiln_math_exp_f32(100.0f), INFINITY);
  cr_expect_eq(__kiln_math_log2_f64(1024.0), 10.0, "exact powers of two");
  cr_expect_eq(__kiln_math_pow_f64(-2.0, 3.0), -8.0);
  cr_expect(isnan(__kiln_math_pow_f64(-2.0, 0.5)));
  cr_expect_eq(__kiln_math_pow_f64(0.0, -1.0), INFINITY);
  cr_expect_eq(__kiln_math_pow_f64(-0.0, -3.0), -INFINITY);
  cr_expect_eq(__kiln_math_pow_f64(NAN, 0.0), 1.0);
  cr_expect_eq(__kiln_math_tanh_f32(50.0f), 1.0f);
  cr_expect_eq(__kiln_math_erf_f32(-10.0f), -1.0f);
  cr_expect_eq(__kiln_math_atan2_f64(0.0, -1.0), M_PI);
  cr_expect_eq(__kiln_math_fmod_f64(7.5, 2.0), 1.5);
  cr_expect_eq(__kiln_math_fmod_f64(-7.5, 2.0), -1.5);
  cr_expect_eq(__kiln_math_hypot_f64(3.0, 4.0), 5.0);
  cr_expect_eq(__kiln_math_cbrt_f64(-27.0), -3.0);
}

Test(mathlib, two_argument_functions) {
  double worst_pow = 0, worst_pow32 = 0, worst_atan2 = 0, worst_hypot = 0, worst_fmod = 0;
  for (int i = 0; i < 20000; i++) {
    double x = uniform(0, 100), y = uniform(-20, 20);
    double r = pow(x, y);
    double rel = fabs(__kiln_math_pow_f64(x, y) - r) / fabs(r) / 0x1p-53 / (fabs(y * log(x)) + 1);
    if (rel > worst_pow) worst_pow = rel;
    float xf = (float)x, yf = (float)y;
    double u = ulps(__kiln_math_pow_f32(xf, yf), (double)(float)pow(xf, yf), 1);
    if (u > worst_pow32) worst_pow32 = u;
    double a = uniform(-1e3, 1e3), b = uniform(-1e3, 1e3);
    u = ulps(__kiln_math_atan2_f64(a, b), atan2(a, b), 0);
    if (u > worst_atan2) worst_atan2 = u;
    u = ulps(__kiln_math_hypot_f64(a, b * 1e-3), hypot(a, b * 1e-3), 0);
    if (u > worst_hypot) worst_hypot = u;
    u = ulps(__kiln_math_fmod_f64(a * 1e10, b), fmod(a * 1e10, b), 0);
    if (u > worst_fmod) worst_fmod = u;
  }
  cr_log_info("pow f64 rel err %.2f * 2^-53 * (|y ln x| + 1); pow f32 %.2f ulp; atan2 %.2f; hypot %.2f; fmod %.2f",
              worst_pow, worst_pow32, worst_atan2, worst_hypot, worst_fmod);
  cr_expect_leq(worst_pow, 8);
  cr_expect_leq(worst_pow32, 1);
  cr_expect_leq(worst_atan2, 4);
  cr_expect_leq(worst_hypot, 2);
  cr_expect_eq(worst_fmod, 0, "fmod is exact");
}
