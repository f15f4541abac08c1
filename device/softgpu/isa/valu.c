/* Vector ALU, 32-bit: operand modifiers, destination writes, the f32 and integer families.
 * Every lane loop computes all 64 lanes (no side effects) and writes only those in EXEC. */
#include <fenv.h>
#include <math.h>
#include <stdio.h>

#include "device/softgpu/isa/valu.h"
#include "device/softgpu/isa/valu_ops.h"

static uint32_t sdwa_sel(uint32_t v, unsigned sel, bool sext) {
  switch (sel) {
  case 0: case 1: case 2: case 3: {
    uint32_t b = (v >> (8 * sel)) & 0xff;
    return sext ? (uint32_t)(int32_t)(int8_t)b : b;
  }
  case 4: return sext ? (uint32_t)(int32_t)(int16_t)(v & 0xffff) : (v & 0xffff);
  case 5: return sext ? (uint32_t)(int32_t)(int16_t)(v >> 16) : (v >> 16);
  default: return v;
  }
}

const uint32_t *vi32(sg_wave_t *w, const sg_inst_t *in, int i, uint32_t buf[SG_LANES]) {
  const uint32_t *p = sg_vsrc32(w, in, i, SG_TY_B32, buf);
  if (in->sdwa && i < 2 && in->src_sel[i] != 6) {
    unsigned sel = in->src_sel[i];
    bool sx = in->src_sext[i];
    FOR_LANES buf[l] = sdwa_sel(p[l], sel, sx);
    return buf;
  }
  return p;
}

const uint32_t *vf32(sg_wave_t *w, const sg_inst_t *in, int i, uint32_t buf[SG_LANES]) {
  const uint32_t *p = sg_vsrc32(w, in, i, SG_TY_F32, buf);
  bool sel = in->sdwa && i < 2 && in->src_sel[i] != 6;
  bool ab = (in->abs >> i) & 1, ng = (in->neg >> i) & 1, fl = flush_in32(w);
  if (!sel && !ab && !ng && !fl) return p;
  uint32_t clear = ab ? 0x7fffffffu : 0xffffffffu, flip = ng ? 0x80000000u : 0;
  FOR_LANES {
    uint32_t v = sel ? sdwa_sel(p[l], in->src_sel[i], in->src_sext[i]) : p[l];
    v = (v & clear) ^ flip;
    buf[l] = fl ? sg_flush32(v) : v;
  }
  return buf;
}

const uint32_t *vf16(sg_wave_t *w, const sg_inst_t *in, int i, uint32_t buf[SG_LANES]) {
  const uint32_t *p = sg_vsrc32(w, in, i, SG_TY_F16, buf);
  bool hi = in->fmt == SG_FMT_VOP3 && ((in->opsel >> i) & 1);
  bool sel = in->sdwa && i < 2;
  bool ab = (in->abs >> i) & 1, ng = (in->neg >> i) & 1, fl = (w->g->job->kd.denorm64 & 1) == 0;
  FOR_LANES {
    uint32_t v = sel ? sdwa_sel(p[l], in->src_sel[i], false) : (hi ? p[l] >> 16 : p[l]);
    v &= 0xffff;
    if (ab) v &= 0x7fff;
    if (ng) v ^= 0x8000;
    buf[l] = fl ? sg_flush16((uint16_t)v) : v;
  }
  return buf;
}

void vi64(sg_wave_t *w, const sg_inst_t *in, int i, uint64_t out[SG_LANES]) {
  uint32_t lo[SG_LANES], hi[SG_LANES];
  sg_vsrc64(w, in, i, SG_TY_B64, lo, hi);
  FOR_LANES out[l] = (uint64_t)lo[l] | (uint64_t)hi[l] << 32;
}

void vf64(sg_wave_t *w, const sg_inst_t *in, int i, uint64_t out[SG_LANES]) {
  uint32_t lo[SG_LANES], hi[SG_LANES];
  sg_vsrc64(w, in, i, SG_TY_F64, lo, hi);
  bool ab = (in->abs >> i) & 1, ng = (in->neg >> i) & 1, fl = flush_in64(w);
  FOR_LANES {
    uint64_t v = (uint64_t)lo[l] | (uint64_t)hi[l] << 32;
    if (ab) v &= 0x7fffffffffffffffull;
    if (ng) v ^= 0x8000000000000000ull;
    out[l] = fl ? sg_flush64(v) : v;
  }
}

static uint32_t *dst_row(sg_wave_t *w, const sg_inst_t *in) { return w->v[sg_vreg(w, in->dst, 8)]; }

void vwrite32(sg_wave_t *w, const sg_inst_t *in, const uint32_t d[SG_LANES]) {
  uint64_t m = sg_exec(w);
  uint32_t *row = dst_row(w, in);
  if (!in->sdwa || in->dst_sel == 6) {
    if (m == ~0ull) {
      memcpy(row, d, sizeof(uint32_t) * SG_LANES);
      return;
    }
    FOR_LANES if ((m >> l) & 1) row[l] = d[l];
    return;
  }
  unsigned sel = in->dst_sel, shift = sel < 4 ? 8 * sel : (sel == 5 ? 16 : 0);
  uint32_t width = sel < 4 ? 8 : 16;
  uint32_t field = ((1u << width) - 1) << shift;
  FOR_LANES {
    if (!((m >> l) & 1)) continue;
    uint32_t v = (d[l] << shift) & field;
    if (in->dst_unused == 2) {
      v |= row[l] & ~field; /* UNUSED_PRESERVE */
    } else if (in->dst_unused == 1 && ((v >> (shift + width - 1)) & 1)) {
      v |= ~((1u << (shift + width)) - 1) & (shift + width < 32 ? 0xffffffffu : 0); /* UNUSED_SEXT */
    }
    row[l] = v;
  }
}

void vwrite_f32(sg_wave_t *w, const sg_inst_t *in, uint32_t d[SG_LANES]) {
  if (in->omod) {
    float k = in->omod == 1 ? 2.0f : in->omod == 2 ? 4.0f : 0.5f;
    FOR_LANES d[l] = sg_u32(sg_f32(d[l]) * k);
  }
  if (in->clamp) {
    FOR_LANES {
      float f = sg_f32(d[l]);
      /* DX10 clamp: NaN clamps to 0 */
      d[l] = isnan(f) ? 0 : sg_u32(f < 0.0f ? 0.0f : f > 1.0f ? 1.0f : f);
    }
  }
  if (flush_out32(w)) FOR_LANES d[l] = sg_flush32(d[l]);
  vwrite32(w, in, d);
}

void vwrite64(sg_wave_t *w, const sg_inst_t *in, const uint64_t d[SG_LANES]) {
  uint64_t m = sg_exec(w);
  unsigned r = sg_vreg(w, in->dst, 8);
  uint32_t *lo = w->v[r], *hi = w->v[(r + 1) & 0xff];
  FOR_LANES if ((m >> l) & 1) {
    lo[l] = (uint32_t)d[l];
    hi[l] = (uint32_t)(d[l] >> 32);
  }
}

void vwrite_f64(sg_wave_t *w, const sg_inst_t *in, uint64_t d[SG_LANES]) {
  if (in->omod) {
    double k = in->omod == 1 ? 2.0 : in->omod == 2 ? 4.0 : 0.5;
    FOR_LANES d[l] = sg_u64(sg_f64(d[l]) * k);
  }
  if (in->clamp) {
    FOR_LANES {
      double f = sg_f64(d[l]);
      d[l] = isnan(f) ? 0 : sg_u64(f < 0.0 ? 0.0 : f > 1.0 ? 1.0 : f);
    }
  }
  if (flush_out64(w)) FOR_LANES d[l] = sg_flush64(d[l]);
  vwrite64(w, in, d);
}

void vwrite16(sg_wave_t *w, const sg_inst_t *in, const uint32_t d[SG_LANES]) {
  if (in->sdwa) {
    vwrite32(w, in, d);
    return;
  }
  uint64_t m = sg_exec(w);
  uint32_t *row = dst_row(w, in);
  bool hi = in->fmt == SG_FMT_VOP3 && ((in->opsel >> 3) & 1);
  FOR_LANES if ((m >> l) & 1) {
    /* gfx9: a 16-bit result zeroes the high half, unless op_sel[3] writes the high half and
     * keeps the low one */
    row[l] = hi ? ((row[l] & 0xffff) | (d[l] << 16)) : (d[l] & 0xffff);
  }
}

void vwrite_mask(sg_wave_t *w, unsigned sdst, uint64_t m) {
  if (sdst == SG_SRC_NULL || sdst >= 127) return;
  sg_set_sgpr64(w, sdst, m);
}

int valu_no_mods(sg_wave_t *w, const sg_inst_t *in) {
  if (in->clamp || in->omod)
    return sg_wave_fail(w, in, SG_ERR_UNIMPLEMENTED, 0, 0, -1,
                        "%s at 0x%llx: clamp/omod on an integer operation is not modelled", in->mnem,
                        (unsigned long long)in->pc);
  return 0;
}

/* ---- f32 ------------------------------------------------------------------------------------ */

static float fl(uint32_t u) { return sg_f32(u); }
static uint32_t ul(float f) { return sg_u32(f); }
static uint32_t qnan(uint32_t u) { return u | 0x00400000u; }
static bool isnan32(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

static uint32_t round_op(unsigned op, uint32_t a) {
  if (isnan32(a)) return qnan(a);
  float f = fl(a), r;
  switch (op) {
  case F_FLOOR: r = floorf(f); break;
  case F_CEIL: r = ceilf(f); break;
  case F_TRUNC: r = truncf(f); break;
  default: r = nearbyintf(f); break; /* RNE under the default rounding mode */
  }
  return ul(r);
}

int valu_f32(sg_wave_t *w, const sg_inst_t *in) {
  unsigned op = in->desc->sub;
  uint32_t b0[SG_LANES], b1[SG_LANES], b2[SG_LANES], d[SG_LANES];
  const uint32_t *a, *b, *c;
  const sg_job_t *job = w->g->job;
  bool ieee = ieee_mode(w);
  switch (op) {
  case F_ADD: case F_SUB: case F_SUBREV: case F_MUL: case F_MUL_LEGACY: case F_MIN: case F_MAX:
    a = vf32(w, in, 0, b0);
    b = vf32(w, in, 1, b1);
    switch (op) {
    case F_ADD: FOR_LANES d[l] = ul(fl(a[l]) + fl(b[l])); break;
    case F_SUB: FOR_LANES d[l] = ul(fl(a[l]) - fl(b[l])); break;
    case F_SUBREV: FOR_LANES d[l] = ul(fl(b[l]) - fl(a[l])); break;
    case F_MUL: FOR_LANES d[l] = ul(fl(a[l]) * fl(b[l])); break;
    case F_MUL_LEGACY: /* DX9: 0 times anything (inf and NaN included) is +0 */
      FOR_LANES d[l] = ((a[l] & 0x7fffffffu) == 0 || (b[l] & 0x7fffffffu) == 0) ? 0 : ul(fl(a[l]) * fl(b[l]));
      break;
    case F_MIN: FOR_LANES d[l] = sg_fmin32(a[l], b[l], ieee); break;
    default: FOR_LANES d[l] = sg_fmax32(a[l], b[l], ieee); break;
    }
    vwrite_f32(w, in, d);
    return 0;
  case F_LDEXP:
    a = vf32(w, in, 0, b0);
    b = vi32(w, in, 1, b1);
    FOR_LANES d[l] = sg_ldexp32(a[l], (int32_t)b[l]);
    vwrite_f32(w, in, d);
    return 0;
  case F_FMA: case F_MAD: case F_FMAC: case F_MAC: case F_FMAAK: case F_FMAMK: case F_MADAK: case F_MADMK:
  case F_DIV_FIXUP: case F_DIV_FMAS: case F_MED3: case F_MIN3: case F_MAX3: {
    a = vf32(w, in, 0, b0);
    if (op == F_FMAMK || op == F_MADMK) {
      FOR_LANES b1[l] = in->lit;
      b = b1;
      c = vf32(w, in, 1, b2);
    } else {
      b = vf32(w, in, 1, b1);
      if (op == F_FMAAK || op == F_MADAK) {
        FOR_LANES b2[l] = in->lit;
        c = b2;
      } else if (op == F_FMAC || op == F_MAC) {
        const uint32_t *old = dst_row(w, in);
        bool fl_in = flush_in32(w);
        FOR_LANES b2[l] = fl_in ? sg_flush32(old[l]) : old[l];
        c = b2;
      } else {
        c = vf32(w, in, 2, b2);
      }
    }
    switch (op) {
    case F_FMA: case F_FMAC: case F_FMAAK: case F_FMAMK:
      sg_fma_lanes(d, a, b, c);
      break;
    case F_MAD: case F_MAC: case F_MADAK: case F_MADMK:
      /* v_mad/v_mac are unfused and do not support denormals on gfx9 */
      FOR_LANES {
        uint32_t p = sg_flush32(ul(fl(sg_flush32(a[l])) * fl(sg_flush32(b[l]))));
        d[l] = sg_flush32(ul(fl(p) + fl(sg_flush32(c[l]))));
      }
      break;
    case F_DIV_FIXUP: FOR_LANES d[l] = sg_div_fixup32(a[l], b[l], c[l]); break;
    case F_DIV_FMAS: {
      uint64_t vcc = sg_vcc(w);
      FOR_LANES d[l] = sg_div_fmas32(a[l], b[l], c[l], (vcc >> l) & 1);
      break;
    }
    case F_MED3: FOR_LANES d[l] = sg_fmed3_32(a[l], b[l], c[l], ieee); break;
    case F_MIN3: FOR_LANES d[l] = sg_fmin32(sg_fmin32(a[l], b[l], ieee), c[l], ieee); break;
    default: FOR_LANES d[l] = sg_fmax32(sg_fmax32(a[l], b[l], ieee), c[l], ieee); break;
    }
    vwrite_f32(w, in, d);
    return 0;
  }
  case F_DIV_SCALE: {
    a = vf32(w, in, 0, b0);
    b = vf32(w, in, 1, b1);
    c = vf32(w, in, 2, b2);
    uint64_t m = sg_exec(w), vcc = 0;
    FOR_LANES {
      bool v;
      d[l] = sg_div_scale32(a[l], b[l], c[l], &v);
      if (v && ((m >> l) & 1)) vcc |= 1ull << l;
    }
    vwrite_f32(w, in, d);
    vwrite_mask(w, in->sdst, vcc);
    return 0;
  }
  case F_RCP: case F_RCP_IFLAG: case F_RSQ: case F_SQRT: case F_EXP: case F_LOG: case F_SIN: case F_COS: {
    static const uint8_t unit[] = {[F_RCP - F_RCP] = SG_T_RCP, [F_RCP_IFLAG - F_RCP] = SG_T_RCP_IFLAG,
                                   [F_RSQ - F_RCP] = SG_T_RSQ, [F_SQRT - F_RCP] = SG_T_SQRT,
                                   [F_EXP - F_RCP] = SG_T_EXP, [F_LOG - F_RCP] = SG_T_LOG,
                                   [F_SIN - F_RCP] = SG_T_SIN, [F_COS - F_RCP] = SG_T_COS};
    unsigned t = unit[op - F_RCP];
    a = vf32(w, in, 0, b0);
    uint64_t m = sg_exec(w);
    FOR_LANES if ((m >> l) & 1) d[l] = sg_trans32(job, t, a[l]);
    vwrite_f32(w, in, d);
    return 0;
  }
  case F_FLOOR: case F_CEIL: case F_TRUNC: case F_RNDNE:
    a = vf32(w, in, 0, b0);
    FOR_LANES d[l] = round_op(op, a[l]);
    vwrite_f32(w, in, d);
    return 0;
  case F_FRACT:
    a = vf32(w, in, 0, b0);
    FOR_LANES d[l] = sg_fract32(a[l]);
    vwrite_f32(w, in, d);
    return 0;
  case F_FREXP_MANT:
    a = vf32(w, in, 0, b0);
    FOR_LANES d[l] = sg_frexp_mant32(a[l]);
    vwrite_f32(w, in, d);
    return 0;
  case F_FREXP_EXP:
    a = vf32(w, in, 0, b0);
    FOR_LANES d[l] = (uint32_t)sg_frexp_exp32(a[l]);
    vwrite32(w, in, d);
    return 0;
  case F_CVT_F32_I32: case F_CVT_F32_U32: case F_CVT_F32_UBYTE0: case F_CVT_F32_UBYTE1:
  case F_CVT_F32_UBYTE2: case F_CVT_F32_UBYTE3:
    a = vi32(w, in, 0, b0);
    if (op == F_CVT_F32_I32) FOR_LANES d[l] = ul((float)(int32_t)a[l]);
    else if (op == F_CVT_F32_U32) FOR_LANES d[l] = ul((float)a[l]);
    else {
      unsigned sh = 8 * (op - F_CVT_F32_UBYTE0);
      FOR_LANES d[l] = ul((float)((a[l] >> sh) & 0xff));
    }
    vwrite_f32(w, in, d);
    return 0;
  case F_CVT_I32_F32: case F_CVT_U32_F32: case F_CVT_RPI_I32_F32: case F_CVT_FLR_I32_F32:
    a = vf32(w, in, 0, b0);
    if (op == F_CVT_I32_F32) FOR_LANES d[l] = (uint32_t)sg_cvt_i32_f32(a[l]);
    else if (op == F_CVT_U32_F32) FOR_LANES d[l] = sg_cvt_u32_f32(a[l]);
    else if (op == F_CVT_RPI_I32_F32) FOR_LANES d[l] = (uint32_t)sg_cvt_i32_f32(ul(floorf(fl(a[l]) + 0.5f)));
    else FOR_LANES d[l] = (uint32_t)sg_cvt_i32_f32(ul(floorf(fl(a[l]))));
    vwrite32(w, in, d);
    return 0;
  case F_CVT_F16_F32:
    a = vf32(w, in, 0, b0);
    FOR_LANES {
      uint16_t h = sg_f32_to_f16(fl(a[l]));
      d[l] = job->kd.denorm64 < 2 ? sg_flush16(h) : h;
    }
    vwrite16(w, in, d);
    return 0;
  case F_CVT_F32_F16:
    a = vf16(w, in, 0, b0);
    FOR_LANES d[l] = ul(sg_f16_to_f32((uint16_t)a[l]));
    vwrite_f32(w, in, d);
    return 0;
  case F_CVT_F32_F64: case F_CVT_I32_F64: case F_CVT_U32_F64: {
    uint64_t q[SG_LANES];
    vf64(w, in, 0, q);
    if (op == F_CVT_F32_F64) {
      FOR_LANES d[l] = ul((float)sg_f64(q[l]));
      vwrite_f32(w, in, d);
    } else {
      if (op == F_CVT_I32_F64) FOR_LANES d[l] = (uint32_t)sg_cvt_i32_f64(q[l]);
      else FOR_LANES d[l] = sg_cvt_u32_f64(q[l]);
      vwrite32(w, in, d);
    }
    return 0;
  }
  default:
    return sg_unimplemented(w, in);
  }
}

/* ---- integer ---------------------------------------------------------------------------------- */

static uint32_t bfe(uint32_t v, uint32_t off, uint32_t wid, bool sgn) {
  off &= 31;
  wid &= 31;
  if (wid == 0) return 0;
  uint32_t r = (v >> off) & ((1u << wid) - 1);
  if (sgn && ((r >> (wid - 1)) & 1)) r |= ~((1u << wid) - 1);
  return r;
}

static uint32_t perm_byte(uint64_t data, uint32_t sel) {
  sel &= 0xff;
  if (sel >= 13) return 0xff;
  if (sel == 12) return 0;
  if (sel >= 8) {
    static const unsigned src_byte[] = {1, 3, 5, 7};
    return ((data >> (src_byte[sel - 8] * 8 + 7)) & 1) ? 0xff : 0;
  }
  return (data >> (8 * sel)) & 0xff;
}

static int med3_i(int32_t a, int32_t b, int32_t c) {
  int32_t mx = a > b ? a : b, mn = a < b ? a : b;
  return c > mx ? mx : c < mn ? mn : c;
}
static uint32_t med3_u(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t mx = a > b ? a : b, mn = a < b ? a : b;
  return c > mx ? mx : c < mn ? mn : c;
}

int valu_i32(sg_wave_t *w, const sg_inst_t *in) {
  unsigned op = in->desc->sub;
  uint32_t b0[SG_LANES], b1[SG_LANES], b2[SG_LANES], d[SG_LANES];
  const uint32_t *a = NULL, *b = NULL, *c = NULL;
  /* clamp on the carry-less u32 add and subtracts saturates to [0, 0xffffffff]: LLVM selects
   * them for llvm.uadd.sat / llvm.usub.sat (VOPBinOpClampPat) */
  bool sat = in->clamp && !in->omod && (op == I_ADD || op == I_SUB || op == I_SUBREV);
  if (op != I_CNDMASK && !sat && valu_no_mods(w, in)) return 1;
  if (op != I_CNDMASK && (in->abs || in->neg) && !in->sdwa)
    return sg_wave_fail(w, in, SG_ERR_UNIMPLEMENTED, 0, 0, -1, "%s at 0x%llx: abs/neg on an integer operation",
                        in->mnem, (unsigned long long)in->pc);
  switch (op) {
  case I_MOV: case I_NOT: case I_BFREV: case I_FFBH_U32: case I_FFBL_B32: case I_FFBH_I32:
    a = vi32(w, in, 0, b0);
    switch (op) {
    case I_MOV: FOR_LANES d[l] = a[l]; break;
    case I_NOT: FOR_LANES d[l] = ~a[l]; break;
    case I_BFREV: FOR_LANES {
      uint32_t v = a[l], r = 0;
      for (int i = 0; i < 32; i++) r |= ((v >> i) & 1u) << (31 - i);
      d[l] = r;
    }
      break;
    case I_FFBH_U32: FOR_LANES d[l] = a[l] ? (uint32_t)__builtin_clz(a[l]) : 0xffffffffu; break;
    case I_FFBL_B32: FOR_LANES d[l] = a[l] ? (uint32_t)__builtin_ctz(a[l]) : 0xffffffffu; break;
    default: FOR_LANES {
      uint32_t v = a[l];
      uint32_t t = (v >> 31) ? ~v : v;
      d[l] = (v == 0 || v == 0xffffffffu) ? 0xffffffffu : (uint32_t)__builtin_clz(t);
    }
      break;
    }
    vwrite32(w, in, d);
    return 0;
  case I_ACC_MOV: {
    /* v_accvgpr_mov_b32 (VOP1): AGPR to AGPR */
    uint64_t m = sg_exec(w);
    unsigned s = (in->src[0] - SG_SRC_VGPR) & 0xff, t = (in->dst - SG_SRC_VGPR) & 0xff;
    FOR_LANES if ((m >> l) & 1) w->a[t][l] = w->a[s][l];
    return 0;
  }
  case I_CNDMASK: {
    /* floating modifiers are allowed on the two data operands */
    a = (in->abs | in->neg) & 1 ? vf32(w, in, 0, b0) : vi32(w, in, 0, b0);
    b = (in->abs | in->neg) & 2 ? vf32(w, in, 1, b1) : vi32(w, in, 1, b1);
    uint64_t m = in->fmt == SG_FMT_VOP3 ? sg_scalar64(w, in, in->src[2], SG_TY_B64) : sg_vcc(w);
    FOR_LANES d[l] = ((m >> l) & 1) ? b[l] : a[l];
    vwrite32(w, in, d);
    return 0;
  }
  case I_ADD_CO: case I_SUB_CO: case I_SUBREV_CO: case I_ADDC_CO: case I_SUBB_CO: case I_SUBBREV_CO: {
    a = vi32(w, in, 0, b0);
    b = vi32(w, in, 1, b1);
    bool vop3 = in->fmt == SG_FMT_VOP3;
    uint64_t cin = 0;
    if (op == I_ADDC_CO || op == I_SUBB_CO || op == I_SUBBREV_CO)
      cin = vop3 ? sg_scalar64(w, in, in->src[2], SG_TY_B64) : sg_vcc(w);
    uint64_t m = sg_exec(w), cout = 0;
    FOR_LANES {
      uint64_t x = a[l], y = b[l], ci = (cin >> l) & 1, r;
      bool co;
      switch (op) {
      case I_ADD_CO: r = x + y; co = r >> 32; break;
      case I_ADDC_CO: r = x + y + ci; co = r >> 32; break;
      case I_SUB_CO: r = x - y; co = y > x; break;
      case I_SUBB_CO: r = x - y - ci; co = y + ci > x; break;
      case I_SUBREV_CO: r = y - x; co = x > y; break;
      default: r = y - x - ci; co = x + ci > y; break;
      }
      d[l] = (uint32_t)r;
      if (co && ((m >> l) & 1)) cout |= 1ull << l;
    }
    vwrite32(w, in, d);
    vwrite_mask(w, vop3 ? in->sdst : SG_SRC_VCC_LO, cout);
    return 0;
  }
  case I_MBCNT_LO: case I_MBCNT_HI:
    a = vi32(w, in, 0, b0);
    b = vi32(w, in, 1, b1);
    FOR_LANES {
      uint32_t mask;
      if (op == I_MBCNT_LO) mask = l >= 32 ? 0xffffffffu : ((1u << l) - 1);
      else mask = l < 32 ? 0 : ((1ull << (l - 32)) - 1);
      d[l] = (uint32_t)__builtin_popcount(a[l] & mask) + b[l];
    }
    vwrite32(w, in, d);
    return 0;
  default:
    break;
  }
  /* two- and three-operand forms */
  a = vi32(w, in, 0, b0);
  b = vi32(w, in, 1, b1);
  bool three = in->fmt == SG_FMT_VOP3;
  if (three) c = vi32(w, in, 2, b2);
  switch (op) {
  case I_ADD: FOR_LANES d[l] = sat && a[l] + b[l] < a[l] ? 0xffffffffu : a[l] + b[l]; break;
  case I_SUB: FOR_LANES d[l] = sat && b[l] > a[l] ? 0 : a[l] - b[l]; break;
  case I_SUBREV: FOR_LANES d[l] = sat && a[l] > b[l] ? 0 : b[l] - a[l]; break;
  case I_AND: FOR_LANES d[l] = a[l] & b[l]; break;
  case I_OR: FOR_LANES d[l] = a[l] | b[l]; break;
  case I_XOR: FOR_LANES d[l] = a[l] ^ b[l]; break;
  case I_LSHLREV: FOR_LANES d[l] = b[l] << (a[l] & 31); break;
  case I_LSHRREV: FOR_LANES d[l] = b[l] >> (a[l] & 31); break;
  case I_ASHRREV: FOR_LANES d[l] = (uint32_t)((int32_t)b[l] >> (a[l] & 31)); break;
  case I_MIN_I32: FOR_LANES d[l] = (int32_t)a[l] < (int32_t)b[l] ? a[l] : b[l]; break;
  case I_MAX_I32: FOR_LANES d[l] = (int32_t)a[l] > (int32_t)b[l] ? a[l] : b[l]; break;
  case I_MIN_U32: FOR_LANES d[l] = a[l] < b[l] ? a[l] : b[l]; break;
  case I_MAX_U32: FOR_LANES d[l] = a[l] > b[l] ? a[l] : b[l]; break;
  case I_MUL_LO: FOR_LANES d[l] = a[l] * b[l]; break;
  case I_MUL_HI_U32: FOR_LANES d[l] = (uint32_t)(((uint64_t)a[l] * b[l]) >> 32); break;
  case I_MUL_HI_I32: FOR_LANES d[l] = (uint32_t)(((int64_t)(int32_t)a[l] * (int32_t)b[l]) >> 32); break;
  case I_MUL_U32_U24: FOR_LANES d[l] = (a[l] & 0xffffff) * (b[l] & 0xffffff); break;
  case I_MUL_HI_U32_U24:
    FOR_LANES d[l] = (uint32_t)(((uint64_t)(a[l] & 0xffffff) * (b[l] & 0xffffff)) >> 32);
    break;
  case I_MUL_I32_I24:
    FOR_LANES d[l] = (uint32_t)((int32_t)(a[l] << 8) >> 8) * (uint32_t)((int32_t)(b[l] << 8) >> 8);
    break;
  case I_MUL_HI_I32_I24:
    FOR_LANES d[l] = (uint32_t)(((int64_t)((int32_t)(a[l] << 8) >> 8) * ((int32_t)(b[l] << 8) >> 8)) >> 32);
    break;
  case I_BFM: FOR_LANES d[l] = ((1u << (a[l] & 31)) - 1) << (b[l] & 31); break;
  case I_BCNT: FOR_LANES d[l] = (uint32_t)__builtin_popcount(a[l]) + b[l]; break;
  case I_ADD3: FOR_LANES d[l] = a[l] + b[l] + c[l]; break;
  case I_ADD_LSHL: FOR_LANES d[l] = (a[l] + b[l]) << (c[l] & 31); break;
  case I_LSHL_ADD: FOR_LANES d[l] = (a[l] << (b[l] & 31)) + c[l]; break;
  case I_LSHL_OR: FOR_LANES d[l] = (a[l] << (b[l] & 31)) | c[l]; break;
  case I_AND_OR: FOR_LANES d[l] = (a[l] & b[l]) | c[l]; break;
  case I_OR3: FOR_LANES d[l] = a[l] | b[l] | c[l]; break;
  case I_XAD: FOR_LANES d[l] = (a[l] ^ b[l]) + c[l]; break;
  case I_ALIGNBIT: FOR_LANES d[l] = (uint32_t)((((uint64_t)a[l] << 32) | b[l]) >> (c[l] & 31)); break;
  case I_ALIGNBYTE: FOR_LANES d[l] = (uint32_t)((((uint64_t)a[l] << 32) | b[l]) >> (8 * (c[l] & 3))); break;
  case I_BFE_U32: FOR_LANES d[l] = bfe(a[l], b[l], c[l], false); break;
  case I_BFE_I32: FOR_LANES d[l] = bfe(a[l], b[l], c[l], true); break;
  case I_BFI: FOR_LANES d[l] = (a[l] & b[l]) | (~a[l] & c[l]); break;
  case I_MED3_I32: FOR_LANES d[l] = (uint32_t)med3_i((int32_t)a[l], (int32_t)b[l], (int32_t)c[l]); break;
  case I_MED3_U32: FOR_LANES d[l] = med3_u(a[l], b[l], c[l]); break;
  case I_MIN3_I32: FOR_LANES {
    int32_t x = (int32_t)a[l] < (int32_t)b[l] ? (int32_t)a[l] : (int32_t)b[l];
    d[l] = (uint32_t)(x < (int32_t)c[l] ? x : (int32_t)c[l]);
  }
    break;
  case I_MAX3_I32: FOR_LANES {
    int32_t x = (int32_t)a[l] > (int32_t)b[l] ? (int32_t)a[l] : (int32_t)b[l];
    d[l] = (uint32_t)(x > (int32_t)c[l] ? x : (int32_t)c[l]);
  }
    break;
  case I_MIN3_U32: FOR_LANES {
    uint32_t x = a[l] < b[l] ? a[l] : b[l];
    d[l] = x < c[l] ? x : c[l];
  }
    break;
  case I_MAX3_U32: FOR_LANES {
    uint32_t x = a[l] > b[l] ? a[l] : b[l];
    d[l] = x > c[l] ? x : c[l];
  }
    break;
  case I_MAD_U32_U24: FOR_LANES d[l] = (a[l] & 0xffffff) * (b[l] & 0xffffff) + c[l]; break;
  case I_MAD_I32_I24:
    FOR_LANES d[l] = (uint32_t)((int32_t)(a[l] << 8) >> 8) * (uint32_t)((int32_t)(b[l] << 8) >> 8) + c[l];
    break;
  case I_PERM: FOR_LANES {
    uint64_t data = ((uint64_t)a[l] << 32) | b[l];
    uint32_t s = c[l];
    d[l] = perm_byte(data, s) | perm_byte(data, s >> 8) << 8 | perm_byte(data, s >> 16) << 16 |
           perm_byte(data, s >> 24) << 24;
  }
    break;
  case I_SAD_U32: FOR_LANES d[l] = (a[l] > b[l] ? a[l] - b[l] : b[l] - a[l]) + c[l]; break;
  default:
    return sg_unimplemented(w, in);
  }
  vwrite32(w, in, d);
  return 0;
}
