/* Operand values: SGPRs and the special registers, inline constants (whose bit pattern depends
 * on the operand's width and type), the literal, VGPRs with the VGPR-indexing mode. */
#include "device/softgpu/isa/internal.h"

static const uint32_t fconst32[9] = {0x3f000000, 0xbf000000, 0x3f800000, 0xbf800000, 0x40000000,
                                     0xc0000000, 0x40800000, 0xc0800000, 0x3e22f983};
static const uint64_t fconst64[9] = {0x3fe0000000000000ull, 0xbfe0000000000000ull, 0x3ff0000000000000ull,
                                     0xbff0000000000000ull, 0x4000000000000000ull, 0xc000000000000000ull,
                                     0x4010000000000000ull, 0xc010000000000000ull, 0x3fc45f306dc9c882ull};
static const uint16_t fconst16[9] = {0x3800, 0xb800, 0x3c00, 0xbc00, 0x4000, 0xc000, 0x4400, 0xc400, 0x3118};

static uint64_t special(const sg_wave_t *w, unsigned code, bool wide) {
  const sg_job_t *j = w->g->job;
  uint64_t v;
  switch (code) {
  case SG_SRC_SHARED_BASE: v = j->d.shared_aperture_base; break;
  case SG_SRC_SHARED_LIMIT: v = j->d.shared_aperture_base + 0xffffffffull; break;
  case SG_SRC_PRIVATE_BASE: v = j->d.private_aperture_base; break;
  case SG_SRC_PRIVATE_LIMIT: v = j->d.private_aperture_base + 0xffffffffull; break;
  case SG_SRC_VCCZ: return sg_vcc(w) == 0;
  case SG_SRC_EXECZ: return sg_exec(w) == 0;
  case SG_SRC_SCC: return w->scc;
  default: return 0;
  }
  /* The aperture registers read as their high half in a 32-bit operand, whole in a 64-bit one. */
  return wide ? v : v >> 32;
}

uint32_t sg_scalar32(const sg_wave_t *w, const sg_inst_t *in, unsigned code, sg_ty_t ty) {
  if (code < 128) return code == SG_SRC_NULL ? 0 : w->s[code];
  if (code <= SG_SRC_INT_MAX) return code - SG_SRC_ZERO;
  if (code <= SG_SRC_INT_NEG_MAX) return (uint32_t)(SG_SRC_INT_MAX - (int)code);
  if (code >= SG_SRC_F_HALF && code <= SG_SRC_F_INV2PI) {
    unsigned i = code - SG_SRC_F_HALF;
    if (ty == SG_TY_F16 || ty == SG_TY_B16) return fconst16[i];
    return fconst32[i];
  }
  if (code == SG_SRC_LITERAL) return in->lit;
  return (uint32_t)special(w, code, false);
}

uint64_t sg_scalar64(const sg_wave_t *w, const sg_inst_t *in, unsigned code, sg_ty_t ty) {
  if (code < 128) return code == SG_SRC_NULL ? 0 : sg_sgpr64(w, code);
  if (code <= SG_SRC_INT_MAX) return code - SG_SRC_ZERO;
  if (code <= SG_SRC_INT_NEG_MAX) return (uint64_t)(int64_t)(SG_SRC_INT_MAX - (int)code);
  if (code >= SG_SRC_F_HALF && code <= SG_SRC_F_INV2PI) return fconst64[code - SG_SRC_F_HALF];
  if (code == SG_SRC_LITERAL) {
    /* A 32-bit literal in a 64-bit operand: the high half of a double, else sign-extended
     * (LLVM's assembler encodes -256 for a b64 operand as the literal 0xffffff00). */
    if (ty == SG_TY_F64) return (uint64_t)in->lit << 32;
    return (uint64_t)(int64_t)(int32_t)in->lit;
  }
  return special(w, code, true);
}

void sg_sdst_write(sg_wave_t *w, unsigned code, uint32_t v) {
  if (code < 128 && code != SG_SRC_NULL) w->s[code] = v;
}

unsigned sg_vreg(const sg_wave_t *w, unsigned code, unsigned which_bit) {
  unsigned r = code - SG_SRC_VGPR;
  /* s_set_gpr_idx_on: M0[15:12] enables SRC0, SRC1, SRC2, DST; M0[7:0] is the index. */
  if (w->gpr_idx_on && ((w->s[SG_SRC_M0] >> 12) & which_bit)) r += w->s[SG_SRC_M0] & 0xff;
  return r & 0xff;
}

const uint32_t *sg_vsrc32(sg_wave_t *w, const sg_inst_t *in, int i, sg_ty_t ty, uint32_t buf[SG_LANES]) {
  unsigned code = in->src[i];
  if (code >= SG_SRC_VGPR) return w->v[sg_vreg(w, code, 1u << i)];
  uint32_t v = sg_scalar32(w, in, code, ty);
  for (int l = 0; l < SG_LANES; l++) buf[l] = v;
  return buf;
}

void sg_vsrc64(sg_wave_t *w, const sg_inst_t *in, int i, sg_ty_t ty, uint32_t lo[SG_LANES], uint32_t hi[SG_LANES]) {
  unsigned code = in->src[i];
  if (code >= SG_SRC_VGPR) {
    unsigned r = sg_vreg(w, code, 1u << i);
    memcpy(lo, w->v[r], sizeof(uint32_t) * SG_LANES);
    memcpy(hi, w->v[(r + 1) & 0xff], sizeof(uint32_t) * SG_LANES);
    return;
  }
  uint64_t v = sg_scalar64(w, in, code, ty);
  for (int l = 0; l < SG_LANES; l++) {
    lo[l] = (uint32_t)v;
    hi[l] = (uint32_t)(v >> 32);
  }
}
