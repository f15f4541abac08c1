/* Vector ALU, the rest: 64-bit and f64, 16-bit and f16, compares, VOP3P (packed f32/f16, AGPR
 * moves), lane reads and writes; and the opcode table of the vector unit. */
#include <math.h>
#include <stdio.h>

#include "device/softgpu/isa/valu.h"
#include "device/softgpu/isa/valu_ops.h"

/* double -> half with one rounding (RNE), for f16 arithmetic computed exactly in double. */
static uint16_t f64_to_f16(double x) {
  uint64_t u = sg_u64(x);
  uint16_t sign = (uint16_t)((u >> 48) & 0x8000);
  double a = fabs(x);
  if (isnan(x)) return (uint16_t)(sign | 0x7e00 | ((u >> 42) & 0x1ff));
  if (a >= 65520.0) return (uint16_t)(sign | 0x7c00);
  /* scale so that the f16 quantum (2^-24 for denormals, 2^(e-10) otherwise) becomes 1 */
  int e;
  frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  int q = e - 11 < -24 ? -24 : e - 11;
  double n = nearbyint(ldexp(a, -q)); /* RNE under the default rounding mode */
  double r = ldexp(n, q);
  if (r >= 65520.0) return (uint16_t)(sign | 0x7c00);
  return (uint16_t)(sign | sg_f32_to_f16((float)r)); /* exact: r is representable */
}

static double h2d(uint32_t h) { return (double)sg_f16_to_f32((uint16_t)h); }

/* ---- 64-bit ------------------------------------------------------------------------------- */

int valu_64(sg_wave_t *w, const sg_inst_t *in) {
  unsigned op = in->desc->sub;
  uint64_t a[SG_LANES], b[SG_LANES], c[SG_LANES], d[SG_LANES];
  uint32_t b0[SG_LANES], b1[SG_LANES];
  const uint32_t *x, *y;
  bool ieee = ieee_mode(w);
  switch (op) {
  case Q_LSHLREV: case Q_LSHRREV: case Q_ASHRREV:
    if (valu_no_mods(w, in)) return 1;
    x = vi32(w, in, 0, b0);
    vi64(w, in, 1, b);
    if (op == Q_LSHLREV) FOR_LANES d[l] = b[l] << (x[l] & 63);
    else if (op == Q_LSHRREV) FOR_LANES d[l] = b[l] >> (x[l] & 63);
    else FOR_LANES d[l] = (uint64_t)((int64_t)b[l] >> (x[l] & 63));
    vwrite64(w, in, d);
    return 0;
  case Q_LSHL_ADD:
    if (valu_no_mods(w, in)) return 1;
    vi64(w, in, 0, a);
    x = vi32(w, in, 1, b0);
    vi64(w, in, 2, c);
    FOR_LANES d[l] = (a[l] << (x[l] & 7)) + c[l];
    vwrite64(w, in, d);
    return 0;
  case Q_MOV:
    vi64(w, in, 0, a);
    vwrite64(w, in, a);
    return 0;
  case Q_MAD_U64_U32: case Q_MAD_I64_I32: {
    if (valu_no_mods(w, in)) return 1;
    x = vi32(w, in, 0, b0);
    y = vi32(w, in, 1, b1);
    vi64(w, in, 2, c);
    uint64_t m = sg_exec(w), carry = 0;
    FOR_LANES {
      bool co;
      if (op == Q_MAD_U64_U32) {
        unsigned __int128 r = (unsigned __int128)x[l] * y[l] + c[l];
        d[l] = (uint64_t)r;
        co = (r >> 64) & 1;
      } else {
        __int128 r = (__int128)(int32_t)x[l] * (int32_t)y[l] + (__int128)(int64_t)c[l];
        d[l] = (uint64_t)r;
        co = ((unsigned __int128)r >> 64) & 1;
      }
      if (co && ((m >> l) & 1)) carry |= 1ull << l;
    }
    vwrite64(w, in, d);
    vwrite_mask(w, in->sdst, carry);
    return 0;
  }
  case Q_CVT_F64_F32: {
    x = vf32(w, in, 0, b0);
    FOR_LANES d[l] = sg_u64((double)sg_f32(x[l]));
    vwrite_f64(w, in, d);
    return 0;
  }
  case Q_CVT_F64_I32: case Q_CVT_F64_U32:
    x = vi32(w, in, 0, b0);
    if (op == Q_CVT_F64_I32) FOR_LANES d[l] = sg_u64((double)(int32_t)x[l]);
    else FOR_LANES d[l] = sg_u64((double)x[l]);
    vwrite_f64(w, in, d);
    return 0;
  case Q_LDEXP_F64:
    vf64(w, in, 0, a);
    x = vi32(w, in, 1, b0);
    FOR_LANES d[l] = sg_ldexp64(a[l], (int32_t)x[l]);
    vwrite_f64(w, in, d);
    return 0;
  case Q_FREXP_EXP_F64: {
    vf64(w, in, 0, a);
    uint32_t r[SG_LANES];
    FOR_LANES {
      int e = 0;
      double f = sg_f64(a[l]);
      if (isfinite(f)) frexp(f, &e);
      r[l] = (uint32_t)e;
    }
    vwrite32(w, in, r);
    return 0;
  }
  default:
    break;
  }
  /* f64 arithmetic */
  vf64(w, in, 0, a);
  bool two = op == Q_ADD_F64 || op == Q_MUL_F64 || op == Q_MIN_F64 || op == Q_MAX_F64 || op == Q_FMAC_F64;
  bool three = op == Q_FMA_F64 || op == Q_DIV_FIXUP_F64 || op == Q_DIV_FMAS_F64 || op == Q_DIV_SCALE_F64;
  if (two || three) vf64(w, in, 1, b);
  if (three) vf64(w, in, 2, c);
  if (op == Q_FMAC_F64) {
    unsigned r = sg_vreg(w, in->dst, 8);
    FOR_LANES c[l] = (uint64_t)w->v[r][l] | (uint64_t)w->v[(r + 1) & 0xff][l] << 32;
    if (flush_in64(w)) FOR_LANES c[l] = sg_flush64(c[l]);
  }
  switch (op) {
  case Q_ADD_F64: FOR_LANES d[l] = sg_u64(sg_f64(a[l]) + sg_f64(b[l])); break;
  case Q_MUL_F64: FOR_LANES d[l] = sg_u64(sg_f64(a[l]) * sg_f64(b[l])); break;
  case Q_FMA_F64: case Q_FMAC_F64: FOR_LANES d[l] = sg_u64(fma(sg_f64(a[l]), sg_f64(b[l]), sg_f64(c[l]))); break;
  case Q_MIN_F64: FOR_LANES d[l] = sg_fmin64(a[l], b[l], ieee); break;
  case Q_MAX_F64: FOR_LANES d[l] = sg_fmax64(a[l], b[l], ieee); break;
  case Q_DIV_FIXUP_F64: FOR_LANES d[l] = sg_div_fixup64(a[l], b[l], c[l]); break;
  case Q_DIV_FMAS_F64: {
    uint64_t vcc = sg_vcc(w);
    FOR_LANES d[l] = sg_div_fmas64(a[l], b[l], c[l], (vcc >> l) & 1);
    break;
  }
  case Q_DIV_SCALE_F64: {
    uint64_t m = sg_exec(w), vcc = 0;
    FOR_LANES {
      bool v;
      d[l] = sg_div_scale64(a[l], b[l], c[l], &v);
      if (v && ((m >> l) & 1)) vcc |= 1ull << l;
    }
    vwrite_f64(w, in, d);
    vwrite_mask(w, in->sdst, vcc);
    return 0;
  }
  case Q_RCP_F64: FOR_LANES d[l] = sg_trans64(SG_T_RCP, a[l]); break;
  case Q_RSQ_F64: FOR_LANES d[l] = sg_trans64(SG_T_RSQ, a[l]); break;
  case Q_SQRT_F64: FOR_LANES d[l] = sg_trans64(SG_T_SQRT, a[l]); break;
  case Q_FRACT_F64: FOR_LANES d[l] = sg_fract64(a[l]); break;
  case Q_TRUNC_F64: FOR_LANES d[l] = sg_u64(trunc(sg_f64(a[l]))); break;
  case Q_FLOOR_F64: FOR_LANES d[l] = sg_u64(floor(sg_f64(a[l]))); break;
  case Q_CEIL_F64: FOR_LANES d[l] = sg_u64(ceil(sg_f64(a[l]))); break;
  case Q_RNDNE_F64: FOR_LANES d[l] = sg_u64(nearbyint(sg_f64(a[l]))); break;
  case Q_FREXP_MANT_F64: FOR_LANES {
    double f = sg_f64(a[l]);
    int e;
    d[l] = isfinite(f) ? sg_u64(frexp(f, &e)) : (isnan(f) ? a[l] | 0x0008000000000000ull : a[l]);
  }
    break;
  default:
    return sg_unimplemented(w, in);
  }
  vwrite_f64(w, in, d);
  return 0;
}

/* ---- 16-bit ------------------------------------------------------------------------------- */

static const uint32_t *h16(sg_wave_t *w, const sg_inst_t *in, int i, uint32_t buf[SG_LANES]) {
  const uint32_t *p = vi32(w, in, i, buf);
  bool hi = in->fmt == SG_FMT_VOP3 && ((in->opsel >> i) & 1);
  FOR_LANES buf[l] = (hi ? p[l] >> 16 : p[l]) & 0xffff;
  return buf;
}

int valu_16(sg_wave_t *w, const sg_inst_t *in) {
  unsigned op = in->desc->sub;
  uint32_t b0[SG_LANES], b1[SG_LANES], b2[SG_LANES], d[SG_LANES];
  const uint32_t *a, *b, *c;
  bool fl_out = w->g->job->kd.denorm64 < 2;
  if (op >= H_ADD_F16 && op <= H_MIN_F16) {
    a = vf16(w, in, 0, b0);
    b = vf16(w, in, 1, b1);
    if (op == H_FMA_F16) c = vf16(w, in, 2, b2);
    else if (op == H_FMAC_F16) {
      const uint32_t *old = w->v[sg_vreg(w, in->dst, 8)];
      FOR_LANES b2[l] = old[l] & 0xffff;
      c = b2;
    } else {
      c = b2;
    }
    FOR_LANES {
      double x = h2d(a[l]), y = h2d(b[l]);
      uint16_t r;
      switch (op) {
      case H_ADD_F16: r = f64_to_f16(x + y); break;
      case H_SUB_F16: r = f64_to_f16(x - y); break;
      case H_SUBREV_F16: r = f64_to_f16(y - x); break;
      case H_MUL_F16: r = f64_to_f16(x * y); break;
      case H_FMA_F16: case H_FMAC_F16: r = f64_to_f16(fma(x, y, h2d(c[l]))); break;
      case H_MAX_F16: r = isnan(x) ? (uint16_t)b[l] : isnan(y) ? (uint16_t)a[l] : (x >= y ? (uint16_t)a[l] : (uint16_t)b[l]); break;
      default: r = isnan(x) ? (uint16_t)b[l] : isnan(y) ? (uint16_t)a[l] : (x <= y ? (uint16_t)a[l] : (uint16_t)b[l]); break;
      }
      d[l] = fl_out ? sg_flush16(r) : r;
    }
    vwrite16(w, in, d);
    return 0;
  }
  if (op == H_CVT_F16_U16 || op == H_CVT_F16_I16) {
    a = h16(w, in, 0, b0);
    FOR_LANES d[l] = f64_to_f16(op == H_CVT_F16_U16 ? (double)a[l] : (double)(int16_t)a[l]);
    vwrite16(w, in, d);
    return 0;
  }
  if (op == H_CVT_U16_F16 || op == H_CVT_I16_F16) {
    a = vf16(w, in, 0, b0);
    FOR_LANES {
      double x = trunc(h2d(a[l]));
      if (isnan(x)) d[l] = 0;
      else if (op == H_CVT_U16_F16) d[l] = x <= 0 ? 0 : x >= 65535 ? 65535 : (uint32_t)x;
      else d[l] = (uint16_t)(int16_t)(x <= -32768 ? -32768 : x >= 32767 ? 32767 : (int)x);
    }
    vwrite16(w, in, d);
    return 0;
  }
  /* clamp on the u16 add and subtracts saturates to [0, 0xffff] (llvm.uadd.sat.i16 and
   * llvm.usub.sat.i16 on gfx9) */
  bool sat = in->clamp && !in->omod && (op == H_ADD_U16 || op == H_SUB_U16 || op == H_SUBREV_U16);
  if (!sat && valu_no_mods(w, in)) return 1;
  a = h16(w, in, 0, b0);
  b = h16(w, in, 1, b1);
  c = (op == H_MAD_U16 || op == H_MAD_LEGACY_U16) ? h16(w, in, 2, b2) : b2;
  switch (op) {
  case H_ADD_U16: FOR_LANES d[l] = sat && a[l] + b[l] > 0xffff ? 0xffff : (a[l] + b[l]) & 0xffff; break;
  case H_SUB_U16: FOR_LANES d[l] = sat && b[l] > a[l] ? 0 : (a[l] - b[l]) & 0xffff; break;
  case H_SUBREV_U16: FOR_LANES d[l] = sat && a[l] > b[l] ? 0 : (b[l] - a[l]) & 0xffff; break;
  case H_MUL_LO_U16: FOR_LANES d[l] = (a[l] * b[l]) & 0xffff; break;
  case H_LSHLREV: FOR_LANES d[l] = (b[l] << (a[l] & 15)) & 0xffff; break;
  case H_LSHRREV: FOR_LANES d[l] = b[l] >> (a[l] & 15); break;
  case H_ASHRREV: FOR_LANES d[l] = (uint32_t)((int16_t)b[l] >> (a[l] & 15)) & 0xffff; break;
  case H_MAX_U16: FOR_LANES d[l] = a[l] > b[l] ? a[l] : b[l]; break;
  case H_MIN_U16: FOR_LANES d[l] = a[l] < b[l] ? a[l] : b[l]; break;
  case H_MAX_I16: FOR_LANES d[l] = (int16_t)a[l] > (int16_t)b[l] ? a[l] : b[l]; break;
  case H_MIN_I16: FOR_LANES d[l] = (int16_t)a[l] < (int16_t)b[l] ? a[l] : b[l]; break;
  case H_MAD_U16: case H_MAD_LEGACY_U16: FOR_LANES d[l] = (a[l] * b[l] + c[l]) & 0xffff; break;
  default: return sg_unimplemented(w, in);
  }
  vwrite16(w, in, d);
  return 0;
}

/* ---- compares ----------------------------------------------------------------------------- */

enum { T_F16, T_F32, T_F64, T_I16, T_U16, T_I32, T_U32, T_I64, T_U64 };
enum { C_CLASS = 16 };

static bool fcmp(unsigned c, double a, double b) {
  switch (c) {
  case 0: return false;
  case 1: return a < b;
  case 2: return a == b;
  case 3: return a <= b;
  case 4: return a > b;
  case 5: return a < b || a > b;
  case 6: return a >= b;
  case 7: return !isnan(a) && !isnan(b);
  case 8: return isnan(a) || isnan(b);
  case 9: return !(a >= b);
  case 10: return !(a < b || a > b);
  case 11: return !(a > b);
  case 12: return !(a <= b);
  case 13: return !(a == b);
  case 14: return !(a < b);
  default: return true;
  }
}

/* integer conditions: f lt eq le gt ne ge t at the float codes 0..6 and 15 */
#define ICMP(c, a, b) ((c) == 1 ? (a) < (b) : (c) == 2 ? (a) == (b) : (c) == 3 ? (a) <= (b) : (c) == 4 ? (a) > (b) \
                       : (c) == 5 ? (a) != (b) : (c) == 6 ? (a) >= (b) : (c) == 15)

int valu_cmp(sg_wave_t *w, const sg_inst_t *in) {
  unsigned sub = in->desc->sub, ty = sub >> 8, cond = (sub >> 1) & 0x1f;
  bool cmpx = sub & 1;
  uint32_t b0[SG_LANES], b1[SG_LANES];
  uint64_t q0[SG_LANES], q1[SG_LANES];
  uint64_t exec = sg_exec(w), m = 0;
  bool r[SG_LANES];
  switch (ty) {
  case T_F16: {
    const uint32_t *a = vf16(w, in, 0, b0);
    if (cond == C_CLASS) {
      const uint32_t *b = vi32(w, in, 1, b1);
      FOR_LANES r[l] = sg_class16((uint16_t)a[l], b[l]);
    } else {
      const uint32_t *b = vf16(w, in, 1, b1);
      FOR_LANES r[l] = fcmp(cond, h2d(a[l]), h2d(b[l]));
    }
    break;
  }
  case T_F32: {
    const uint32_t *a = vf32(w, in, 0, b0);
    if (cond == C_CLASS) {
      const uint32_t *b = vi32(w, in, 1, b1);
      FOR_LANES r[l] = sg_class32(a[l], b[l]);
    } else {
      const uint32_t *b = vf32(w, in, 1, b1);
      FOR_LANES r[l] = fcmp(cond, sg_f32(a[l]), sg_f32(b[l]));
    }
    break;
  }
  case T_F64: {
    vf64(w, in, 0, q0);
    if (cond == C_CLASS) {
      const uint32_t *b = vi32(w, in, 1, b1);
      FOR_LANES r[l] = sg_class64(q0[l], b[l]);
    } else {
      vf64(w, in, 1, q1);
      FOR_LANES r[l] = fcmp(cond, sg_f64(q0[l]), sg_f64(q1[l]));
    }
    break;
  }
  case T_I16: case T_U16: {
    const uint32_t *a = h16(w, in, 0, b0), *b = h16(w, in, 1, b1);
    if (ty == T_I16) FOR_LANES r[l] = ICMP(cond, (int16_t)a[l], (int16_t)b[l]);
    else FOR_LANES r[l] = ICMP(cond, a[l], b[l]);
    break;
  }
  case T_I32: case T_U32: {
    const uint32_t *a = vi32(w, in, 0, b0), *b = vi32(w, in, 1, b1);
    if (ty == T_I32) FOR_LANES r[l] = ICMP(cond, (int32_t)a[l], (int32_t)b[l]);
    else FOR_LANES r[l] = ICMP(cond, a[l], b[l]);
    break;
  }
  default: {
    vi64(w, in, 0, q0);
    vi64(w, in, 1, q1);
    if (ty == T_I64) FOR_LANES r[l] = ICMP(cond, (int64_t)q0[l], (int64_t)q1[l]);
    else FOR_LANES r[l] = ICMP(cond, q0[l], q1[l]);
    break;
  }
  }
  FOR_LANES if (r[l]) m |= 1ull << l;
  m &= exec;
  /* gfx9: v_cmpx writes EXEC and the mask destination too */
  vwrite_mask(w, in->sdst, m);
  if (cmpx) sg_set_exec(w, m);
  return 0;
}

/* ---- VOP3P ------------------------------------------------------------------------------- */

/* A packed 64-bit source: VGPR or SGPR pair; an inline constant or literal fills both halves. */
static void pk_src(sg_wave_t *w, const sg_inst_t *in, int i, uint32_t lo[SG_LANES], uint32_t hi[SG_LANES]) {
  unsigned code = in->src[i];
  if (code >= SG_SRC_VGPR) {
    sg_vsrc64(w, in, i, SG_TY_B64, lo, hi);
    return;
  }
  uint32_t l32, h32;
  if (code < 128) {
    l32 = w->s[code];
    h32 = w->s[(code + 1) & 127];
  } else {
    l32 = h32 = sg_scalar32(w, in, code, SG_TY_F32);
  }
  FOR_LANES {
    lo[l] = l32;
    hi[l] = h32;
  }
}

int valu_vop3p(sg_wave_t *w, const sg_inst_t *in) {
  unsigned op = in->desc->sub;
  uint64_t m = sg_exec(w);
  if (op == P_ACC_READ || op == P_ACC_WRITE) {
    uint32_t buf[SG_LANES];
    if (op == P_ACC_READ) {
      const uint32_t *src = w->a[(in->src[0] - SG_SRC_VGPR) & 0xff];
      uint32_t *dst = w->v[(in->dst - SG_SRC_VGPR) & 0xff];
      FOR_LANES if ((m >> l) & 1) dst[l] = src[l];
    } else {
      const uint32_t *src = sg_vsrc32(w, in, 0, SG_TY_B32, buf);
      uint32_t *dst = w->a[(in->dst - SG_SRC_VGPR) & 0xff];
      FOR_LANES if ((m >> l) & 1) dst[l] = src[l];
    }
    return 0;
  }
  if (in->clamp)
    return sg_wave_fail(w, in, SG_ERR_UNIMPLEMENTED, 0, 0, -1, "%s at 0x%llx: clamp on packed math is not modelled",
                        in->mnem, (unsigned long long)in->pc);
  int nsrc = (op == P_FMA_F32 || op == P_FMA_F16) ? 3 : 2;
  if (op == P_FMA_F32 || op == P_MUL_F32 || op == P_ADD_F32 || op == P_MOV_B32) {
    uint32_t lo[3][SG_LANES], hi[3][SG_LANES], xl[3][SG_LANES], xh[3][SG_LANES];
    bool fl = flush_in32(w) && op != P_MOV_B32;
    for (int i = 0; i < nsrc; i++) {
      pk_src(w, in, i, lo[i], hi[i]);
      bool sl = (in->opsel >> i) & 1, sh = (in->opsel_hi >> i) & 1;
      uint32_t nl = ((in->neg >> i) & 1) && op != P_MOV_B32 ? 0x80000000u : 0;
      uint32_t nh = ((in->neg_hi >> i) & 1) && op != P_MOV_B32 ? 0x80000000u : 0;
      const uint32_t *pl = sl ? hi[i] : lo[i], *ph = sh ? hi[i] : lo[i];
      FOR_LANES {
        xl[i][l] = pl[l] ^ nl;
        xh[i][l] = ph[l] ^ nh;
      }
      if (fl) FOR_LANES {
        xl[i][l] = sg_flush32(xl[i][l]);
        xh[i][l] = sg_flush32(xh[i][l]);
      }
    }
    uint32_t dl[SG_LANES], dh[SG_LANES];
    switch (op) {
    case P_FMA_F32:
      sg_fma_lanes(dl, xl[0], xl[1], xl[2]);
      sg_fma_lanes(dh, xh[0], xh[1], xh[2]);
      break;
    case P_MUL_F32:
      FOR_LANES {
        dl[l] = sg_u32(sg_f32(xl[0][l]) * sg_f32(xl[1][l]));
        dh[l] = sg_u32(sg_f32(xh[0][l]) * sg_f32(xh[1][l]));
      }
      break;
    case P_ADD_F32:
      FOR_LANES {
        dl[l] = sg_u32(sg_f32(xl[0][l]) + sg_f32(xl[1][l]));
        dh[l] = sg_u32(sg_f32(xh[0][l]) + sg_f32(xh[1][l]));
      }
      break;
    default:
      /* v_pk_mov_b32: the low result from src0, the high one from src1, each half chosen by
       * op_sel (LLVM copies a VGPR pair with op_sel:[0,1]) */
      FOR_LANES {
        dl[l] = (in->opsel & 1) ? hi[0][l] : lo[0][l];
        dh[l] = (in->opsel & 2) ? hi[1][l] : lo[1][l];
      }
      break;
    }
    if (op != P_MOV_B32 && flush_out32(w)) FOR_LANES {
      dl[l] = sg_flush32(dl[l]);
      dh[l] = sg_flush32(dh[l]);
    }
    unsigned r = sg_vreg(w, in->dst, 8);
    uint32_t *rl = w->v[r], *rh = w->v[(r + 1) & 0xff];
    FOR_LANES if ((m >> l) & 1) {
      rl[l] = dl[l];
      rh[l] = dh[l];
    }
    return 0;
  }
  /* packed 16-bit */
  uint32_t s[3][SG_LANES], xl[3][SG_LANES], xh[3][SG_LANES], buf[SG_LANES];
  bool fp = op == P_FMA_F16 || op == P_ADD_F16 || op == P_MUL_F16 || op == P_MAX_F16 || op == P_MIN_F16;
  bool fl = fp && (w->g->job->kd.denorm64 & 1) == 0;
  for (int i = 0; i < nsrc; i++) {
    const uint32_t *p = sg_vsrc32(w, in, i, fp ? SG_TY_F16 : SG_TY_B16, buf);
    memcpy(s[i], p, sizeof(buf));
    bool sl = (in->opsel >> i) & 1, sh = (in->opsel_hi >> i) & 1;
    uint32_t nl = fp && ((in->neg >> i) & 1) ? 0x8000 : 0, nh = fp && ((in->neg_hi >> i) & 1) ? 0x8000 : 0;
    FOR_LANES {
      uint32_t vl = ((sl ? s[i][l] >> 16 : s[i][l]) & 0xffff) ^ nl;
      uint32_t vh = ((sh ? s[i][l] >> 16 : s[i][l]) & 0xffff) ^ nh;
      xl[i][l] = fl ? sg_flush16((uint16_t)vl) : vl;
      xh[i][l] = fl ? sg_flush16((uint16_t)vh) : vh;
    }
  }
  uint32_t d[SG_LANES];
  FOR_LANES {
    uint32_t rlo, rhi;
    switch (op) {
    case P_FMA_F16:
      rlo = f64_to_f16(fma(h2d(xl[0][l]), h2d(xl[1][l]), h2d(xl[2][l])));
      rhi = f64_to_f16(fma(h2d(xh[0][l]), h2d(xh[1][l]), h2d(xh[2][l])));
      break;
    case P_ADD_F16:
      rlo = f64_to_f16(h2d(xl[0][l]) + h2d(xl[1][l]));
      rhi = f64_to_f16(h2d(xh[0][l]) + h2d(xh[1][l]));
      break;
    case P_MUL_F16:
      rlo = f64_to_f16(h2d(xl[0][l]) * h2d(xl[1][l]));
      rhi = f64_to_f16(h2d(xh[0][l]) * h2d(xh[1][l]));
      break;
    case P_ADD_U16: rlo = (xl[0][l] + xl[1][l]) & 0xffff; rhi = (xh[0][l] + xh[1][l]) & 0xffff; break;
    case P_SUB_U16: rlo = (xl[0][l] - xl[1][l]) & 0xffff; rhi = (xh[0][l] - xh[1][l]) & 0xffff; break;
    case P_MUL_LO_U16: rlo = (xl[0][l] * xl[1][l]) & 0xffff; rhi = (xh[0][l] * xh[1][l]) & 0xffff; break;
    default: return sg_unimplemented(w, in);
    }
    if (fp && w->g->job->kd.denorm64 < 2) {
      rlo = sg_flush16((uint16_t)rlo);
      rhi = sg_flush16((uint16_t)rhi);
    }
    d[l] = rlo | rhi << 16;
  }
  uint32_t *row = w->v[sg_vreg(w, in->dst, 8)];
  FOR_LANES if ((m >> l) & 1) row[l] = d[l];
  return 0;
}

/* ---- lanes --------------------------------------------------------------------------------- */

int valu_lane(sg_wave_t *w, const sg_inst_t *in) {
  unsigned op = in->desc->sub;
  uint32_t buf[SG_LANES];
  if (op == L_READFIRSTLANE) {
    const uint32_t *v = sg_vsrc32(w, in, 0, SG_TY_B32, buf);
    uint64_t e = sg_exec(w);
    unsigned lane = e ? (unsigned)__builtin_ctzll(e) : 0;
    unsigned sdst = in->fmt == SG_FMT_VOP1 ? (in->dst - SG_SRC_VGPR) & 0x7f : in->dst & 0x7f;
    sg_sdst_write(w, sdst, v[lane]);
    return 0;
  }
  uint32_t sel = sg_scalar32(w, in, in->src[1], SG_TY_B32) & 63;
  if (op == L_READLANE) {
    const uint32_t *v = sg_vsrc32(w, in, 0, SG_TY_B32, buf);
    sg_sdst_write(w, in->dst & 0x7f, v[sel]);
    return 0;
  }
  /* v_writelane_b32 writes its lane whatever EXEC says */
  uint32_t val = sg_scalar32(w, in, in->src[0], SG_TY_B32);
  w->v[sg_vreg(w, in->dst, 8)][sel] = val;
  return 0;
}

/* ---- the table ----------------------------------------------------------------------------- */

#define VF(n, s) {#n, valu_f32, s, SG_TY_F32, 0}
#define VI(n, s) {#n, valu_i32, s, SG_TY_B32, 0}
#define VQ(n, s) {#n, valu_64, s, SG_TY_F64, SG_OPF_64DST | SG_OPF_64SRC}
#define VH(n, s) {#n, valu_16, s, SG_TY_F16, SG_OPF_F16}
#define VP(n, s) {#n, valu_vop3p, s, SG_TY_F32, 0}
#define VL(n, s) {#n, valu_lane, s, SG_TY_B32, 0}
#define CMP1(c, ci, t, ti) {"v_cmp_" #c "_" #t, valu_cmp, (ti) << 8 | (ci) << 1, 0, 0}, \
                           {"v_cmpx_" #c "_" #t, valu_cmp, (ti) << 8 | (ci) << 1 | 1, 0, 0},
#define CMPF(t, ti) CMP1(f, 0, t, ti) CMP1(lt, 1, t, ti) CMP1(eq, 2, t, ti) CMP1(le, 3, t, ti) CMP1(gt, 4, t, ti) \
  CMP1(lg, 5, t, ti) CMP1(ge, 6, t, ti) CMP1(o, 7, t, ti) CMP1(u, 8, t, ti) CMP1(nge, 9, t, ti)                    \
  CMP1(nlg, 10, t, ti) CMP1(ngt, 11, t, ti) CMP1(nle, 12, t, ti) CMP1(neq, 13, t, ti) CMP1(nlt, 14, t, ti)         \
  CMP1(tru, 15, t, ti) CMP1(class, C_CLASS, t, ti)
#define CMPI(t, ti) CMP1(f, 0, t, ti) CMP1(lt, 1, t, ti) CMP1(eq, 2, t, ti) CMP1(le, 3, t, ti) CMP1(gt, 4, t, ti) \
  CMP1(ne, 5, t, ti) CMP1(ge, 6, t, ti) CMP1(t, 15, t, ti)

const sg_opdesc_t sg_ops_valu[] = {
  VF(v_add_f32, F_ADD), VF(v_sub_f32, F_SUB), VF(v_subrev_f32, F_SUBREV), VF(v_mul_f32, F_MUL),
  VF(v_mul_legacy_f32, F_MUL_LEGACY), VF(v_min_f32, F_MIN), VF(v_max_f32, F_MAX), VF(v_ldexp_f32, F_LDEXP),
  VF(v_fma_f32, F_FMA), VF(v_mad_f32, F_MAD), VF(v_fmac_f32, F_FMAC), VF(v_mac_f32, F_MAC),
  VF(v_fmaak_f32, F_FMAAK), VF(v_fmamk_f32, F_FMAMK), VF(v_madak_f32, F_MADAK), VF(v_madmk_f32, F_MADMK),
  VF(v_div_fixup_f32, F_DIV_FIXUP), VF(v_div_fmas_f32, F_DIV_FMAS), VF(v_div_scale_f32, F_DIV_SCALE),
  VF(v_med3_f32, F_MED3), VF(v_min3_f32, F_MIN3), VF(v_max3_f32, F_MAX3), VF(v_rcp_f32, F_RCP),
  VF(v_rcp_iflag_f32, F_RCP_IFLAG), VF(v_rsq_f32, F_RSQ), VF(v_sqrt_f32, F_SQRT), VF(v_exp_f32, F_EXP),
  VF(v_log_f32, F_LOG), VF(v_sin_f32, F_SIN), VF(v_cos_f32, F_COS), VF(v_floor_f32, F_FLOOR),
  VF(v_ceil_f32, F_CEIL), VF(v_trunc_f32, F_TRUNC), VF(v_rndne_f32, F_RNDNE), VF(v_fract_f32, F_FRACT),
  VF(v_frexp_mant_f32, F_FREXP_MANT), VF(v_frexp_exp_i32_f32, F_FREXP_EXP), VF(v_cvt_f32_i32, F_CVT_F32_I32),
  VF(v_cvt_f32_u32, F_CVT_F32_U32), VF(v_cvt_i32_f32, F_CVT_I32_F32), VF(v_cvt_u32_f32, F_CVT_U32_F32),
  VF(v_cvt_f16_f32, F_CVT_F16_F32), VF(v_cvt_f32_f16, F_CVT_F32_F16), VF(v_cvt_f32_ubyte0, F_CVT_F32_UBYTE0),
  VF(v_cvt_f32_ubyte1, F_CVT_F32_UBYTE1), VF(v_cvt_f32_ubyte2, F_CVT_F32_UBYTE2),
  VF(v_cvt_f32_ubyte3, F_CVT_F32_UBYTE3), VF(v_cvt_rpi_i32_f32, F_CVT_RPI_I32_F32),
  VF(v_cvt_flr_i32_f32, F_CVT_FLR_I32_F32), VF(v_cvt_f32_f64, F_CVT_F32_F64), VF(v_cvt_i32_f64, F_CVT_I32_F64),
  VF(v_cvt_u32_f64, F_CVT_U32_F64),
  VI(v_mov_b32, I_MOV), VI(v_not_b32, I_NOT), VI(v_bfrev_b32, I_BFREV), VI(v_ffbh_u32, I_FFBH_U32),
  VI(v_ffbl_b32, I_FFBL_B32), VI(v_ffbh_i32, I_FFBH_I32), VI(v_add_u32, I_ADD), VI(v_sub_u32, I_SUB),
  VI(v_subrev_u32, I_SUBREV), VI(v_and_b32, I_AND), VI(v_or_b32, I_OR), VI(v_xor_b32, I_XOR),
  VI(v_lshlrev_b32, I_LSHLREV), VI(v_lshrrev_b32, I_LSHRREV), VI(v_ashrrev_i32, I_ASHRREV),
  VI(v_min_i32, I_MIN_I32), VI(v_max_i32, I_MAX_I32), VI(v_min_u32, I_MIN_U32), VI(v_max_u32, I_MAX_U32),
  VI(v_mul_lo_u32, I_MUL_LO), VI(v_mul_hi_u32, I_MUL_HI_U32), VI(v_mul_hi_i32, I_MUL_HI_I32),
  VI(v_mul_u32_u24, I_MUL_U32_U24), VI(v_mul_i32_i24, I_MUL_I32_I24), VI(v_mul_hi_u32_u24, I_MUL_HI_U32_U24),
  VI(v_mul_hi_i32_i24, I_MUL_HI_I32_I24), VI(v_bfm_b32, I_BFM), VI(v_cndmask_b32, I_CNDMASK),
  VI(v_add_co_u32, I_ADD_CO), VI(v_sub_co_u32, I_SUB_CO), VI(v_subrev_co_u32, I_SUBREV_CO),
  VI(v_addc_co_u32, I_ADDC_CO), VI(v_subb_co_u32, I_SUBB_CO), VI(v_subbrev_co_u32, I_SUBBREV_CO),
  VI(v_add3_u32, I_ADD3), VI(v_add_lshl_u32, I_ADD_LSHL), VI(v_lshl_add_u32, I_LSHL_ADD),
  VI(v_lshl_or_b32, I_LSHL_OR), VI(v_and_or_b32, I_AND_OR), VI(v_or3_b32, I_OR3), VI(v_xad_u32, I_XAD),
  VI(v_alignbit_b32, I_ALIGNBIT), VI(v_alignbyte_b32, I_ALIGNBYTE), VI(v_bfe_u32, I_BFE_U32),
  VI(v_bfe_i32, I_BFE_I32), VI(v_bfi_b32, I_BFI), VI(v_med3_i32, I_MED3_I32), VI(v_med3_u32, I_MED3_U32),
  VI(v_min3_i32, I_MIN3_I32), VI(v_max3_i32, I_MAX3_I32), VI(v_min3_u32, I_MIN3_U32), VI(v_max3_u32, I_MAX3_U32),
  VI(v_mad_u32_u24, I_MAD_U32_U24), VI(v_mad_i32_i24, I_MAD_I32_I24), VI(v_perm_b32, I_PERM),
  VI(v_bcnt_u32_b32, I_BCNT), VI(v_mbcnt_lo_u32_b32, I_MBCNT_LO), VI(v_mbcnt_hi_u32_b32, I_MBCNT_HI),
  VI(v_sad_u32, I_SAD_U32), VI(v_accvgpr_mov_b32, I_ACC_MOV),
  VQ(v_lshlrev_b64, Q_LSHLREV), VQ(v_lshrrev_b64, Q_LSHRREV), VQ(v_ashrrev_i64, Q_ASHRREV),
  VQ(v_lshl_add_u64, Q_LSHL_ADD), VQ(v_mov_b64, Q_MOV), VQ(v_mad_u64_u32, Q_MAD_U64_U32),
  VQ(v_mad_i64_i32, Q_MAD_I64_I32), VQ(v_add_f64, Q_ADD_F64), VQ(v_mul_f64, Q_MUL_F64), VQ(v_fma_f64, Q_FMA_F64),
  VQ(v_fmac_f64, Q_FMAC_F64), VQ(v_min_f64, Q_MIN_F64), VQ(v_max_f64, Q_MAX_F64), VQ(v_ldexp_f64, Q_LDEXP_F64),
  VQ(v_div_fixup_f64, Q_DIV_FIXUP_F64), VQ(v_div_fmas_f64, Q_DIV_FMAS_F64), VQ(v_div_scale_f64, Q_DIV_SCALE_F64),
  VQ(v_rcp_f64, Q_RCP_F64), VQ(v_rsq_f64, Q_RSQ_F64), VQ(v_sqrt_f64, Q_SQRT_F64), VQ(v_fract_f64, Q_FRACT_F64),
  VQ(v_trunc_f64, Q_TRUNC_F64), VQ(v_floor_f64, Q_FLOOR_F64), VQ(v_ceil_f64, Q_CEIL_F64),
  VQ(v_rndne_f64, Q_RNDNE_F64), VQ(v_frexp_mant_f64, Q_FREXP_MANT_F64), VQ(v_frexp_exp_i32_f64, Q_FREXP_EXP_F64),
  VQ(v_cvt_f64_f32, Q_CVT_F64_F32), VQ(v_cvt_f64_i32, Q_CVT_F64_I32), VQ(v_cvt_f64_u32, Q_CVT_F64_U32),
  VH(v_add_u16, H_ADD_U16), VH(v_sub_u16, H_SUB_U16), VH(v_subrev_u16, H_SUBREV_U16),
  VH(v_mul_lo_u16, H_MUL_LO_U16), VH(v_lshlrev_b16, H_LSHLREV), VH(v_lshrrev_b16, H_LSHRREV),
  VH(v_ashrrev_i16, H_ASHRREV), VH(v_max_u16, H_MAX_U16), VH(v_max_i16, H_MAX_I16), VH(v_min_u16, H_MIN_U16),
  VH(v_min_i16, H_MIN_I16), VH(v_mad_u16, H_MAD_U16), VH(v_mad_legacy_u16, H_MAD_LEGACY_U16),
  VH(v_add_f16, H_ADD_F16), VH(v_sub_f16, H_SUB_F16), VH(v_subrev_f16, H_SUBREV_F16), VH(v_mul_f16, H_MUL_F16),
  VH(v_fma_f16, H_FMA_F16), VH(v_fmac_f16, H_FMAC_F16), VH(v_max_f16, H_MAX_F16), VH(v_min_f16, H_MIN_F16),
  VH(v_cvt_f16_u16, H_CVT_F16_U16), VH(v_cvt_f16_i16, H_CVT_F16_I16), VH(v_cvt_u16_f16, H_CVT_U16_F16),
  VH(v_cvt_i16_f16, H_CVT_I16_F16),
  VP(v_pk_fma_f32, P_FMA_F32), VP(v_pk_mul_f32, P_MUL_F32), VP(v_pk_add_f32, P_ADD_F32),
  VP(v_pk_mov_b32, P_MOV_B32), VP(v_pk_fma_f16, P_FMA_F16), VP(v_pk_add_f16, P_ADD_F16),
  VP(v_pk_mul_f16, P_MUL_F16), VP(v_pk_add_u16, P_ADD_U16), VP(v_pk_sub_u16, P_SUB_U16),
  VP(v_pk_mul_lo_u16, P_MUL_LO_U16), VP(v_accvgpr_read_b32, P_ACC_READ), VP(v_accvgpr_write_b32, P_ACC_WRITE),
  VL(v_readlane_b32, L_READLANE), VL(v_writelane_b32, L_WRITELANE), VL(v_readfirstlane_b32, L_READFIRSTLANE),
  CMPF(f16, T_F16) CMPF(f32, T_F32) CMPF(f64, T_F64)
  CMPI(i16, T_I16) CMPI(u16, T_U16) CMPI(i32, T_I32) CMPI(u32, T_U32) CMPI(i64, T_I64) CMPI(u64, T_U64)
};
const size_t sg_ops_valu_n = sizeof(sg_ops_valu) / sizeof(sg_ops_valu[0]);
