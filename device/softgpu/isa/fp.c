/* Floating point as the CDNA vector ALU computes it (SOFTGPU.md §5).
 *
 * Exact by construction: the division helpers (div_scale/div_fmas/div_fixup, from the ISA
 * pseudocode), min/max/med3 under IEEE mode, ldexp, frexp, fract, class, the conversions.
 * Approximate in hardware: the transcendental unit (rcp, rsq, sqrt, exp, log, sin, cos) is
 * computed in double and rounded once to the destination, with the hardware's flush of
 * denormal inputs and outputs (ocml and LLVM scale around these instructions because the
 * hardware does not handle denormals there). SOFTGPU_JITTER perturbs those results by +-1 ulp
 * so that a test whose tolerance only exact host math meets fails here too. */
#include <fenv.h>
#include <math.h>
#include <string.h>

#include "device/softgpu/isa/internal.h"

#define F32_SIGN 0x80000000u
#define F32_INF 0x7f800000u
#define F32_QNAN 0x7fc00000u
#define F64_SIGN 0x8000000000000000ull
#define F64_INF 0x7ff0000000000000ull

static bool nan32(uint32_t u) { return (u & 0x7fffffffu) > F32_INF; }
static bool nan64(uint64_t u) { return (u & ~F64_SIGN) > F64_INF; }
static int exp32(uint32_t u) { return (int)((u >> 23) & 0xff); }
static int exp64(uint64_t u) { return (int)((u >> 52) & 0x7ff); }
static bool denorm32(uint32_t u) { return exp32(u) == 0 && (u & 0x7fffff); }
static bool denorm64(uint64_t u) { return exp64(u) == 0 && (u & 0xfffffffffffffull); }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("fma", "default")))
#endif
void sg_fma_lanes(uint32_t *d, const uint32_t *a, const uint32_t *b, const uint32_t *c) {
  for (int l = 0; l < SG_LANES; l++) d[l] = sg_u32(fmaf(sg_f32(a[l]), sg_f32(b[l]), sg_f32(c[l])));
}

uint32_t sg_flush32(uint32_t u) { return denorm32(u) ? (u & F32_SIGN) : u; }
uint64_t sg_flush64(uint64_t u) { return denorm64(u) ? (u & F64_SIGN) : u; }
uint16_t sg_flush16(uint16_t u) { return ((u & 0x7c00) == 0 && (u & 0x3ff)) ? (uint16_t)(u & 0x8000) : u; }

/* float -> half, round to nearest even, NaN kept quiet. */
uint16_t sg_f32_to_f16(float f) {
  uint32_t u = sg_u32(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > F32_INF) return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x1ff));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf (65520 and up) */
  if (a < 0x33000001u) return sign;                       /* below half the smallest denormal */
  int e = (int)(a >> 23) - 127;
  uint32_t m = (a & 0x7fffff) | 0x800000;
  int shift;
  uint32_t base;
  if (e < -14) { /* denormal half */
    shift = 13 + (-14 - e);
    base = 0;
  } else {
    shift = 13;
    base = (uint32_t)(e + 15) << 10;
    m &= 0x7fffff;
  }
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) q++;
  return (uint16_t)(sign | (base + q));
}

float sg_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0x1f) return sg_f32(sign | F32_INF | (m << 13));
  if (e == 0) {
    if (m == 0) return sg_f32(sign);
    float f = (float)m * 0x1p-24f;
    return sg_f32(sign | sg_u32(f));
  }
  return sg_f32(sign | ((e + 112) << 23) | (m << 13));
}

/* ---- jitter ---------------------------------------------------------------------------------- */

/* MurmurHash3's 64-bit finaliser: every input bit moves every output bit. */
static uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 33)) * 0xff51afd7ed558ccdull;
  x = (x ^ (x >> 33)) * 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* Jitter: with SOFTGPU_JITTER set, a transcendental result may be the other float next to the
 * exact value instead of the nearest one: still within 1 ulp of the true result, as the
 * hardware promises, but not what exact host math gives. The choice is a pure function of
 * (seed, op, input), so a rerun with the same seed repeats it whatever the thread order. */
static bool jitter_moves(const sg_job_t *job, unsigned op, uint32_t input) {
  return job && job->jitter && (mix64(job->jitter_seed ^ ((uint64_t)op << 40) ^ input) & 1);
}

/* ---- transcendental unit --------------------------------------------------------------------- */

static double trans_d(unsigned op, double x) {
  switch (op) {
  case SG_T_RCP:
  case SG_T_RCP_IFLAG: return 1.0 / x;
  case SG_T_RSQ: return 1.0 / sqrt(x);
  case SG_T_SQRT: return sqrt(x);
  case SG_T_EXP: return exp2(x);
  case SG_T_LOG: return log2(x);
  case SG_T_SIN:
  case SG_T_COS: {
    /* The argument is in revolutions: sin(2*pi*x). Reduce exactly first. */
    if (isinf(x)) return NAN;
    double f = x - nearbyint(x);
    return op == SG_T_SIN ? sin(2.0 * M_PI * f) : cos(2.0 * M_PI * f);
  }
  default: return NAN;
  }
}

uint32_t sg_trans32(const sg_job_t *job, unsigned op, uint32_t x) {
  uint32_t in = x;
  x = sg_flush32(x);
  if (nan32(x)) return x | 0x00400000u;
  double exact = trans_d(op, (double)sg_f32(x));
  float r = (float)exact;
  uint32_t u = sg_u32(r);
  if (isfinite(r) && r != 0.0f && (double)r != exact && jitter_moves(job, op, in)) {
    /* step to the neighbour on the other side of the exact value */
    bool above = fabs((double)r) > fabs(exact);
    uint32_t a = u & 0x7fffffffu;
    if (above && a > 1) u--;
    else if (!above && a < 0x7f7fffffu) u++;
  }
  return sg_flush32(u);
}

uint64_t sg_trans64(unsigned op, uint64_t x) {
  x = sg_flush64(x);
  if (nan64(x)) return x | 0x0008000000000000ull;
  long double v = (long double)sg_f64(x), r;
  switch (op) {
  case SG_T_RCP: r = 1.0L / v; break;
  case SG_T_RSQ: r = 1.0L / sqrtl(v); break;
  case SG_T_SQRT: r = sqrtl(v); break;
  default: r = (long double)trans_d(op, (double)v); break;
  }
  return sg_flush64(sg_u64((double)r));
}

/* ---- division helpers (ISA pseudocode; see the file comment) -------------------------------- */

uint32_t sg_div_fixup32(uint32_t q, uint32_t d, uint32_t n) {
  uint32_t sign = (d ^ n) & F32_SIGN, da = d & 0x7fffffffu, na = n & 0x7fffffffu;
  if (nan32(n)) return n | 0x00400000u;
  if (nan32(d)) return d | 0x00400000u;
  if ((da == 0 && na == 0) || (da == F32_INF && na == F32_INF)) return 0xffc00000u;
  if (da == 0 || na == F32_INF) return sign | F32_INF;
  if (da == F32_INF || na == 0) return sign;
  /* UNDERFLOW_F32 is not defined by the ISA text; a quotient this far below the smallest
   * denormal rounds to a signed zero, which is what measured hardware returns. */
  if (exp32(n) - exp32(d) < -150) return sign;
  /* A NaN estimate from valid operands (the Newton steps overflowed) becomes signed infinity. */
  if (nan32(q)) return sign | F32_INF;
  return sign | (q & 0x7fffffffu);
}

uint64_t sg_div_fixup64(uint64_t q, uint64_t d, uint64_t n) {
  uint64_t sign = (d ^ n) & F64_SIGN, da = d & ~F64_SIGN, na = n & ~F64_SIGN;
  if (nan64(n)) return n | 0x0008000000000000ull;
  if (nan64(d)) return d | 0x0008000000000000ull;
  if ((da == 0 && na == 0) || (da == F64_INF && na == F64_INF)) return 0xfff8000000000000ull;
  if (da == 0 || na == F64_INF) return sign | F64_INF;
  if (da == F64_INF || na == 0) return sign;
  if (exp64(n) - exp64(d) < -1075) return sign;
  if (nan64(q)) return sign | F64_INF;
  return sign | (q & ~F64_SIGN);
}

uint32_t sg_ldexp32(uint32_t x, int32_t e) {
  if (nan32(x)) return x | 0x00400000u;
  return sg_u32(ldexpf(sg_f32(x), e));
}

uint64_t sg_ldexp64(uint64_t x, int32_t e) {
  if (nan64(x)) return x | 0x0008000000000000ull;
  return sg_u64(ldexp(sg_f64(x), e));
}

/* DENORM tests of the pseudocode are on the f32 value the expression would produce. */
static bool would_be_denorm32(double v) { return v != 0 && fabs(v) < 0x1p-126; }

uint32_t sg_div_scale32(uint32_t s0, uint32_t d, uint32_t n, bool *vcc) {
  *vcc = false;
  float fd = sg_f32(d), fn = sg_f32(n);
  if (fn == 0.0f || fd == 0.0f) return F32_QNAN;
  if (exp32(n) - exp32(d) >= 96) {
    *vcc = true; /* N/D near the largest float */
    return s0 == d ? sg_ldexp32(s0, 64) : s0;
  }
  if (denorm32(d)) return sg_ldexp32(s0, 64);
  double q = (double)fn / (double)fd;
  bool rcp_den = would_be_denorm32(1.0 / (double)fd);
  bool q_den = would_be_denorm32(q);
  if (rcp_den && q_den) {
    /* The ISA text scales the denominator by 2^64 here, which overflows a denominator this
     * large; the division macro needs it scaled down (1/D' and N/D' normal again, VCC asking
     * div_fmas for 2^-64), and measured hardware does that. */
    *vcc = true;
    return s0 == d ? sg_ldexp32(s0, -64) : s0;
  }
  if (rcp_den) return sg_ldexp32(s0, -64);
  if (q_den) {
    *vcc = true;
    return s0 == n ? sg_ldexp32(s0, 64) : s0;
  }
  if (exp32(n) <= 23) return sg_ldexp32(s0, 64); /* the numerator is tiny */
  return s0;
}

static bool would_be_denorm64(long double v) { return v != 0 && fabsl(v) < 0x1p-1022L; }

uint64_t sg_div_scale64(uint64_t s0, uint64_t d, uint64_t n, bool *vcc) {
  *vcc = false;
  double fd = sg_f64(d), fn = sg_f64(n);
  if (fn == 0.0 || fd == 0.0) return 0x7ff8000000000000ull;
  if (exp64(n) - exp64(d) >= 768) {
    *vcc = true;
    return s0 == d ? sg_ldexp64(s0, 128) : s0;
  }
  if (denorm64(d)) return sg_ldexp64(s0, 128);
  long double q = (long double)fn / (long double)fd;
  bool rcp_den = would_be_denorm64(1.0L / (long double)fd);
  bool q_den = would_be_denorm64(q);
  if (rcp_den && q_den) {
    *vcc = true; /* scaled down, as in sg_div_scale32 */
    return s0 == d ? sg_ldexp64(s0, -128) : s0;
  }
  if (rcp_den) return sg_ldexp64(s0, -128);
  if (q_den) {
    *vcc = true;
    return s0 == n ? sg_ldexp64(s0, 128) : s0;
  }
  if (exp64(n) <= 53) return sg_ldexp64(s0, 128);
  return s0;
}

/* The ISA text says 2^32 for f32 (2^64 for f64); the scale that undoes div_scale's is 2^64
 * (2^128) up when the estimate S2 is at least 2 and 2^-64 (2^-128) down otherwise, which is
 * what the division macro needs and what hardware measurements show. The fma is rounded once
 * in double, then scaled and rounded to f32. */
uint32_t sg_div_fmas32(uint32_t a, uint32_t b, uint32_t c, bool vcc) {
  double r = fma((double)sg_f32(a), (double)sg_f32(b), (double)sg_f32(c));
  if (vcc) r = ldexp(r, exp32(c) > 127 ? 64 : -64);
  return sg_u32((float)r);
}

uint64_t sg_div_fmas64(uint64_t a, uint64_t b, uint64_t c, bool vcc) {
  double r = fma(sg_f64(a), sg_f64(b), sg_f64(c));
  if (vcc) r = ldexp(r, exp64(c) > 1023 ? 128 : -128);
  return sg_u64(r);
}

/* ---- min, max, med3 under IEEE mode --------------------------------------------------------- */

static uint32_t quiet32(uint32_t u) { return u | 0x00400000u; }
static bool snan32(uint32_t u) { return nan32(u) && !(u & 0x00400000u); }

/* IEEE mode: a signalling NaN operand is returned quieted; a quiet NaN loses to a number.
 * +0 is larger than -0. */
uint32_t sg_fmax32(uint32_t a, uint32_t b, bool ieee) {
  if (ieee && snan32(a)) return quiet32(a);
  if (ieee && snan32(b)) return quiet32(b);
  if (nan32(a)) return b;
  if (nan32(b)) return a;
  float fa = sg_f32(a), fb = sg_f32(b);
  if (fa == fb) return (a & F32_SIGN) ? b : a;
  return fa > fb ? a : b;
}

uint32_t sg_fmin32(uint32_t a, uint32_t b, bool ieee) {
  if (ieee && snan32(a)) return quiet32(a);
  if (ieee && snan32(b)) return quiet32(b);
  if (nan32(a)) return b;
  if (nan32(b)) return a;
  float fa = sg_f32(a), fb = sg_f32(b);
  if (fa == fb) return (a & F32_SIGN) ? a : b;
  return fa < fb ? a : b;
}

static bool snan64(uint64_t u) { return nan64(u) && !(u & 0x0008000000000000ull); }

uint64_t sg_fmax64(uint64_t a, uint64_t b, bool ieee) {
  if (ieee && snan64(a)) return a | 0x0008000000000000ull;
  if (ieee && snan64(b)) return b | 0x0008000000000000ull;
  if (nan64(a)) return b;
  if (nan64(b)) return a;
  double fa = sg_f64(a), fb = sg_f64(b);
  if (fa == fb) return (a & F64_SIGN) ? b : a;
  return fa > fb ? a : b;
}

uint64_t sg_fmin64(uint64_t a, uint64_t b, bool ieee) {
  if (ieee && snan64(a)) return a | 0x0008000000000000ull;
  if (ieee && snan64(b)) return b | 0x0008000000000000ull;
  if (nan64(a)) return b;
  if (nan64(b)) return a;
  double fa = sg_f64(a), fb = sg_f64(b);
  if (fa == fb) return (a & F64_SIGN) ? a : b;
  return fa < fb ? a : b;
}

/* V_MED3_F32: with a NaN among the operands the result is min3 (IEEE mode quiets it);
 * otherwise the middle value. */
uint32_t sg_fmed3_32(uint32_t a, uint32_t b, uint32_t c, bool ieee) {
  if (nan32(a) || nan32(b) || nan32(c)) return sg_fmin32(sg_fmin32(a, b, ieee), c, ieee);
  uint32_t mx = sg_fmax32(sg_fmax32(a, b, ieee), c, ieee);
  if (mx == a) return sg_fmax32(b, c, ieee);
  if (mx == b) return sg_fmax32(a, c, ieee);
  return sg_fmax32(a, b, ieee);
}

/* ---- class, frexp, fract, conversions ------------------------------------------------------- */

/* Class bits: 0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denormal, 5 -0, 6 +0, 7 +denormal,
 * 8 +normal, 9 +inf. */
static unsigned class_index(bool neg, bool is_nan, bool quiet, bool inf, bool zero, bool den) {
  if (is_nan) return quiet ? 1 : 0;
  if (inf) return neg ? 2 : 9;
  if (zero) return neg ? 5 : 6;
  if (den) return neg ? 4 : 7;
  return neg ? 3 : 8;
}

bool sg_class32(uint32_t x, uint32_t mask) {
  uint32_t a = x & 0x7fffffffu;
  unsigned i = class_index(x >> 31, a > F32_INF, x & 0x00400000u, a == F32_INF, a == 0, denorm32(x));
  return (mask >> i) & 1;
}

bool sg_class64(uint64_t x, uint32_t mask) {
  uint64_t a = x & ~F64_SIGN;
  unsigned i = class_index(x >> 63, a > F64_INF, (x >> 51) & 1, a == F64_INF, a == 0, denorm64(x));
  return (mask >> i) & 1;
}

bool sg_class16(uint16_t x, uint32_t mask) {
  uint16_t a = x & 0x7fff;
  unsigned i = class_index(x >> 15, a > 0x7c00, (x >> 9) & 1, a == 0x7c00, a == 0, (a & 0x7c00) == 0 && a);
  return (mask >> i) & 1;
}

/* V_FREXP_MANT_F32: inf and NaN come back unchanged (NaN quieted); else the mantissa in
 * [0.5, 1) with the sign. */
uint32_t sg_frexp_mant32(uint32_t x) {
  if (nan32(x)) return x | 0x00400000u;
  if ((x & 0x7fffffffu) == F32_INF) return x;
  int e;
  return sg_u32(frexpf(sg_f32(x), &e));
}

/* V_FREXP_EXP_I32_F32: 0 for inf and NaN. */
int32_t sg_frexp_exp32(uint32_t x) {
  if ((x & 0x7fffffffu) >= F32_INF) return 0;
  int e;
  frexpf(sg_f32(x), &e);
  return e;
}

/* V_FRACT_F32: x - floor(x), clamped below 1.0 (0x3f7fffff); inf gives NaN, NaN stays. */
uint32_t sg_fract32(uint32_t x) {
  if (nan32(x)) return x | 0x00400000u;
  if ((x & 0x7fffffffu) == F32_INF) return F32_QNAN;
  float f = sg_f32(x);
  float r = f - floorf(f);
  if (r >= 1.0f) r = sg_f32(0x3f7fffffu);
  return sg_u32(r);
}

uint64_t sg_fract64(uint64_t x) {
  if (nan64(x)) return x | 0x0008000000000000ull;
  if ((x & ~F64_SIGN) == F64_INF) return 0x7ff8000000000000ull;
  double f = sg_f64(x);
  double r = f - floor(f);
  if (r >= 1.0) r = sg_f64(0x3fefffffffffffffull);
  return sg_u64(r);
}

/* float -> int: truncate, saturate, NaN -> 0. */
int32_t sg_cvt_i32_f32(uint32_t x) {
  if (nan32(x)) return 0;
  float f = truncf(sg_f32(x));
  if (f >= 2147483648.0f) return INT32_MAX;
  if (f < -2147483648.0f) return INT32_MIN;
  return (int32_t)f;
}

uint32_t sg_cvt_u32_f32(uint32_t x) {
  if (nan32(x)) return 0;
  float f = truncf(sg_f32(x));
  if (f >= 4294967296.0f) return UINT32_MAX;
  if (f <= 0.0f) return 0;
  return (uint32_t)f;
}

int32_t sg_cvt_i32_f64(uint64_t x) {
  if (nan64(x)) return 0;
  double f = trunc(sg_f64(x));
  if (f >= 2147483648.0) return INT32_MAX;
  if (f < -2147483648.0) return INT32_MIN;
  return (int32_t)f;
}

uint32_t sg_cvt_u32_f64(uint64_t x) {
  if (nan64(x)) return 0;
  double f = trunc(sg_f64(x));
  if (f >= 4294967296.0) return UINT32_MAX;
  if (f <= 0.0) return 0;
  return (uint32_t)f;
}
