/* kiln's cpu replacements for libm functions that LLVM cannot vectorise as calls: written
 * without branches or calls, so that once inlined into a work-item loop the loop vectoriser
 * turns them into vector code (libm's tanhf stays one scalar call per work-item). Built for
 * the host into bitcode at build time (compiler/meson.build), linked only when used
 * (mathnames.c). Accuracy is checked against glibc by tests/compiler/test_cpu.c and the
 * device conformance suite. */
#include <stdint.h>
#include <string.h>

static inline float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* e^y for 0 <= y <= 18: y = k ln2 + r with |r| <= ln2/2 (ln2 split in two so k * hi is
 * exact), e^r by its Taylor polynomial to r^7, 2^k built in the exponent field. */
static inline float exp_0_18(float y) {
  float k = __builtin_rintf(y * 1.44269504f);
  float r = __builtin_fmaf(-k, 0.693145751953125f, y);
  r = __builtin_fmaf(-k, 1.428606765330187e-06f, r);
  float p = 1.0f / 5040.0f;
  p = __builtin_fmaf(p, r, 1.0f / 720.0f);
  p = __builtin_fmaf(p, r, 1.0f / 120.0f);
  p = __builtin_fmaf(p, r, 1.0f / 24.0f);
  p = __builtin_fmaf(p, r, 1.0f / 6.0f);
  p = __builtin_fmaf(p, r, 0.5f);
  p = __builtin_fmaf(p, r, 1.0f);
  p = __builtin_fmaf(p, r, 1.0f);
  return p * bits_to_float((uint32_t)((int32_t)k + 127) << 23);
}

/* tanh in float, at most 2 ulp from the correctly rounded result: below |x| = 0.55 the odd
 * Taylor series to x^17, above it 1 - 2 / (e^2|x| + 1) with |x| capped at 9 (tanh(9) rounds
 * to 1); both are computed and one is selected. */
float __kiln_math_tanh_f32(float x) {
  float a = __builtin_fabsf(x);
  float e = exp_0_18(2.0f * __builtin_fminf(a, 9.0f));
  float big = 1.0f - 2.0f / (e + 1.0f);
  float s = a * a;
  float p = 6404582.0f / 10854718875.0f;
  p = __builtin_fmaf(p, s, -929569.0f / 638512875.0f);
  p = __builtin_fmaf(p, s, 21844.0f / 6081075.0f);
  p = __builtin_fmaf(p, s, -1382.0f / 155925.0f);
  p = __builtin_fmaf(p, s, 62.0f / 2835.0f);
  p = __builtin_fmaf(p, s, -17.0f / 315.0f);
  p = __builtin_fmaf(p, s, 2.0f / 15.0f);
  p = __builtin_fmaf(p, s, -1.0f / 3.0f);
  float small = __builtin_fmaf(a * s, p, a);
  float r = a < 0.55f ? small : big;
  r = x != x ? x : r; /* NaN in, NaN out */
  return __builtin_copysignf(r, x);
}
