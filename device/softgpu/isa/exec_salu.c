/* The scalar unit: SOP1, SOP2, SOPK, SOPC, SOPP and SMEM loads. SCC is written exactly where
 * the ISA guide says (arithmetic carries, logic results != 0, compares). */
#include <stdio.h>

#include "device/softgpu/isa/internal.h"

enum {
  /* SOP2 */
  S_ADD_U32 = 1, S_SUB_U32, S_ADD_I32, S_SUB_I32, S_ADDC_U32, S_SUBB_U32, S_MIN_I32, S_MIN_U32, S_MAX_I32,
  S_MAX_U32, S_CSELECT_B32, S_CSELECT_B64, S_AND_B32, S_AND_B64, S_OR_B32, S_OR_B64, S_XOR_B32, S_XOR_B64,
  S_ANDN2_B32, S_ANDN2_B64, S_ORN2_B32, S_ORN2_B64, S_NAND_B32, S_NAND_B64, S_NOR_B32, S_NOR_B64, S_XNOR_B32,
  S_XNOR_B64, S_LSHL_B32, S_LSHL_B64, S_LSHR_B32, S_LSHR_B64, S_ASHR_I32, S_ASHR_I64, S_BFM_B32, S_BFM_B64,
  S_MUL_I32, S_MUL_HI_U32, S_MUL_HI_I32, S_BFE_U32, S_BFE_I32, S_BFE_U64, S_BFE_I64, S_ABSDIFF_I32,
  S_LSHL1_ADD_U32, S_LSHL2_ADD_U32, S_LSHL3_ADD_U32, S_LSHL4_ADD_U32, S_PACK_LL_B32_B16, S_PACK_LH_B32_B16,
  S_PACK_HH_B32_B16,
  /* SOP1 */
  S_MOV_B32, S_MOV_B64, S_CMOV_B32, S_CMOV_B64, S_NOT_B32, S_NOT_B64, S_WQM_B64, S_BREV_B32, S_BREV_B64,
  S_BCNT0_I32_B32, S_BCNT1_I32_B32, S_BCNT1_I32_B64, S_FF1_I32_B32, S_FF1_I32_B64, S_FLBIT_I32_B32,
  S_FLBIT_I32_B64, S_FLBIT_I32, S_SEXT_I32_I8, S_SEXT_I32_I16, S_BITSET0_B32, S_BITSET1_B32, S_GETPC_B64,
  S_SETPC_B64, S_SWAPPC_B64, S_AND_SAVEEXEC_B64, S_OR_SAVEEXEC_B64, S_XOR_SAVEEXEC_B64, S_ANDN2_SAVEEXEC_B64,
  S_ORN2_SAVEEXEC_B64, S_NAND_SAVEEXEC_B64, S_NOR_SAVEEXEC_B64, S_XNOR_SAVEEXEC_B64, S_ANDN1_SAVEEXEC_B64,
  S_ORN1_SAVEEXEC_B64, S_ANDN1_WREXEC_B64, S_ANDN2_WREXEC_B64, S_ABS_I32,
  /* SOPK */
  S_MOVK_I32, S_CMOVK_I32, S_ADDK_I32, S_MULK_I32, S_CMPK_EQ_I32, S_CMPK_LG_I32, S_CMPK_GT_I32, S_CMPK_GE_I32,
  S_CMPK_LT_I32, S_CMPK_LE_I32, S_CMPK_EQ_U32, S_CMPK_LG_U32, S_CMPK_GT_U32, S_CMPK_GE_U32, S_CMPK_LT_U32,
  S_CMPK_LE_U32,
  /* SOPC */
  S_CMP_EQ_I32, S_CMP_LG_I32, S_CMP_GT_I32, S_CMP_GE_I32, S_CMP_LT_I32, S_CMP_LE_I32, S_CMP_EQ_U32,
  S_CMP_LG_U32, S_CMP_GT_U32, S_CMP_GE_U32, S_CMP_LT_U32, S_CMP_LE_U32, S_CMP_EQ_U64, S_CMP_LG_U64,
  S_BITCMP0_B32, S_BITCMP1_B32, S_BITCMP0_B64, S_BITCMP1_B64, S_SET_GPR_IDX_ON,
  /* SOPP */
  S_NOP, S_ENDPGM, S_BRANCH, S_CBRANCH_SCC0, S_CBRANCH_SCC1, S_CBRANCH_VCCZ, S_CBRANCH_VCCNZ,
  S_CBRANCH_EXECZ, S_CBRANCH_EXECNZ, S_BARRIER, S_WAITCNT, S_SET_GPR_IDX_OFF, S_SET_GPR_IDX_MODE,
  S_SET_GPR_IDX_IDX, S_SLEEP, S_SETPRIO, S_TRAP, S_ICACHE_INV,
};

/* The six compares of SOPC/SOPK in their encoding order: eq, lg, gt, ge, lt, le. */
#define CMP6(a, b, c) ((c) == 0 ? (a) == (b) : (c) == 1 ? (a) != (b) : (c) == 2 ? (a) > (b) \
                       : (c) == 3 ? (a) >= (b) : (c) == 4 ? (a) < (b) : (a) <= (b))
static uint32_t cmp_u(uint32_t a, uint32_t b, int c) { return CMP6(a, b, c); }
static uint32_t cmp_i(int32_t a, int32_t b, int c) { return CMP6(a, b, c); }

static int sop2(sg_wave_t *w, const sg_inst_t *in) {
  unsigned op = in->desc->sub;
  bool wide = in->desc->flags & SG_OPF_64SRC;
  uint64_t a, b;
  if (wide) {
    a = sg_scalar64(w, in, in->src[0], SG_TY_B64);
    /* shift amounts and bfm/bfe's second operand stay 32-bit */
    bool b32 = op == S_LSHL_B64 || op == S_LSHR_B64 || op == S_ASHR_I64 || op == S_BFE_U64 || op == S_BFE_I64;
    b = b32 ? sg_scalar32(w, in, in->src[1], SG_TY_B32) : sg_scalar64(w, in, in->src[1], SG_TY_B64);
  } else {
    a = sg_scalar32(w, in, in->src[0], SG_TY_B32);
    b = sg_scalar32(w, in, in->src[1], SG_TY_B32);
  }
  if (op == S_BFM_B64) a = sg_scalar32(w, in, in->src[0], SG_TY_B32);
  uint32_t a32 = (uint32_t)a, b32 = (uint32_t)b;
  uint64_t d = 0;
  int scc = -1;
  switch (op) {
  case S_ADD_U32: d = (uint64_t)a32 + b32; scc = (int)(d >> 32); break;
  case S_SUB_U32: d = (uint32_t)(a32 - b32); scc = b32 > a32; break;
  case S_ADD_I32: d = (uint32_t)(a32 + b32); scc = ((~(a32 ^ b32)) & (a32 ^ (uint32_t)d)) >> 31; break;
  case S_SUB_I32: d = (uint32_t)(a32 - b32); scc = ((a32 ^ b32) & (a32 ^ (uint32_t)d)) >> 31; break;
  case S_ADDC_U32: d = (uint64_t)a32 + b32 + w->scc; scc = (int)(d >> 32); break;
  case S_SUBB_U32: d = (uint32_t)(a32 - b32 - w->scc); scc = (uint64_t)b32 + w->scc > a32; break;
  case S_MIN_I32: scc = (int32_t)a32 < (int32_t)b32; d = scc ? a32 : b32; break;
  case S_MIN_U32: scc = a32 < b32; d = scc ? a32 : b32; break;
  case S_MAX_I32: scc = (int32_t)a32 > (int32_t)b32; d = scc ? a32 : b32; break;
  case S_MAX_U32: scc = a32 > b32; d = scc ? a32 : b32; break;
  case S_CSELECT_B32: d = w->scc ? a32 : b32; break;
  case S_CSELECT_B64: d = w->scc ? a : b; break;
  case S_AND_B32: case S_AND_B64: d = a & b; break;
  case S_OR_B32: case S_OR_B64: d = a | b; break;
  case S_XOR_B32: case S_XOR_B64: d = a ^ b; break;
  case S_ANDN2_B32: case S_ANDN2_B64: d = a & ~b; break;
  case S_ORN2_B32: case S_ORN2_B64: d = a | ~b; break;
  case S_NAND_B32: case S_NAND_B64: d = ~(a & b); break;
  case S_NOR_B32: case S_NOR_B64: d = ~(a | b); break;
  case S_XNOR_B32: case S_XNOR_B64: d = ~(a ^ b); break;
  case S_LSHL_B32: d = (uint32_t)(a32 << (b32 & 31)); break;
  case S_LSHL_B64: d = a << (b32 & 63); break;
  case S_LSHR_B32: d = a32 >> (b32 & 31); break;
  case S_LSHR_B64: d = a >> (b32 & 63); break;
  case S_ASHR_I32: d = (uint32_t)((int32_t)a32 >> (b32 & 31)); break;
  case S_ASHR_I64: d = (uint64_t)((int64_t)a >> (b32 & 63)); break;
  case S_BFM_B32: d = (uint32_t)(((1ull << (a32 & 31)) - 1) << (b32 & 31)); break;
  case S_BFM_B64: d = (((a32 & 63) == 0 ? 0 : ((1ull << (a32 & 63)) - 1))) << (b32 & 63); break;
  case S_MUL_I32: d = (uint32_t)(a32 * b32); break;
  case S_MUL_HI_U32: d = (uint32_t)(((uint64_t)a32 * b32) >> 32); break;
  case S_MUL_HI_I32: d = (uint32_t)(((int64_t)(int32_t)a32 * (int32_t)b32) >> 32); break;
  case S_BFE_U32: case S_BFE_I32: {
    unsigned off = b32 & 31, wid = (b32 >> 16) & 0x7f;
    uint32_t v = wid == 0 ? 0 : (a32 >> off) & (wid >= 32 ? 0xffffffffu : ((1u << wid) - 1));
    if (op == S_BFE_I32 && wid > 0 && wid < 32 && (v >> (wid - 1)) & 1) v |= ~((1u << wid) - 1);
    d = v;
    break;
  }
  case S_BFE_U64: case S_BFE_I64: {
    unsigned off = b32 & 63, wid = (b32 >> 16) & 0x7f;
    uint64_t v = wid == 0 ? 0 : (a >> off) & (wid >= 64 ? ~0ull : ((1ull << wid) - 1));
    if (op == S_BFE_I64 && wid > 0 && wid < 64 && (v >> (wid - 1)) & 1) v |= ~((1ull << wid) - 1);
    d = v;
    break;
  }
  case S_ABSDIFF_I32: {
    int64_t x = (int64_t)(int32_t)a32 - (int32_t)b32;
    d = (uint32_t)(x < 0 ? -x : x);
    break;
  }
  case S_LSHL1_ADD_U32: case S_LSHL2_ADD_U32: case S_LSHL3_ADD_U32: case S_LSHL4_ADD_U32: {
    unsigned sh = op - S_LSHL1_ADD_U32 + 1;
    uint64_t s = ((uint64_t)a32 << sh) + b32;
    d = (uint32_t)s;
    scc = (s >> 32) != 0;
    break;
  }
  case S_PACK_LL_B32_B16: d = (a32 & 0xffff) | (b32 << 16); break;
  case S_PACK_LH_B32_B16: d = (a32 & 0xffff) | (b32 & 0xffff0000u); break;
  case S_PACK_HH_B32_B16: d = (a32 >> 16) | (b32 & 0xffff0000u); break;
  default: return sg_unimplemented(w, in);
  }
  bool dwide = in->desc->flags & SG_OPF_64DST;
  if (!dwide) d = (uint32_t)d;
  /* logic, shifts and bfe set SCC = result != 0 */
  if (scc < 0 && op >= S_AND_B32 && op <= S_ASHR_I64) scc = d != 0;
  if (scc < 0 && (op == S_BFE_U32 || op == S_BFE_I32 || op == S_BFE_U64 || op == S_BFE_I64 || op == S_ABSDIFF_I32))
    scc = d != 0;
  if (dwide) sg_set_sgpr64(w, in->dst, d);
  else sg_sdst_write(w, in->dst, (uint32_t)d);
  if (scc >= 0) w->scc = (uint8_t)scc;
  return 0;
}

static int saveexec(sg_wave_t *w, const sg_inst_t *in, unsigned op, uint64_t s) {
  uint64_t e = sg_exec(w), n;
  switch (op) {
  case S_AND_SAVEEXEC_B64: n = s & e; break;
  case S_OR_SAVEEXEC_B64: n = s | e; break;
  case S_XOR_SAVEEXEC_B64: n = s ^ e; break;
  case S_ANDN2_SAVEEXEC_B64: n = s & ~e; break;
  case S_ORN2_SAVEEXEC_B64: n = s | ~e; break;
  case S_NAND_SAVEEXEC_B64: n = ~(s & e); break;
  case S_NOR_SAVEEXEC_B64: n = ~(s | e); break;
  case S_XNOR_SAVEEXEC_B64: n = ~(s ^ e); break;
  case S_ANDN1_SAVEEXEC_B64: n = ~s & e; break;
  case S_ORN1_SAVEEXEC_B64: n = ~s | e; break;
  case S_ANDN1_WREXEC_B64: n = ~s & e; break;
  case S_ANDN2_WREXEC_B64: n = s & ~e; break;
  default: return sg_unimplemented(w, in);
  }
  /* saveexec: the old EXEC goes to the destination; wrexec: the new one */
  uint64_t saved = (op == S_ANDN1_WREXEC_B64 || op == S_ANDN2_WREXEC_B64) ? n : e;
  sg_set_sgpr64(w, in->dst, saved);
  sg_set_exec(w, n);
  w->scc = n != 0;
  return 0;
}

static int sop1(sg_wave_t *w, const sg_inst_t *in) {
  unsigned op = in->desc->sub;
  bool wide = in->desc->flags & SG_OPF_64SRC;
  uint64_t s = wide ? sg_scalar64(w, in, in->src[0], SG_TY_B64) : sg_scalar32(w, in, in->src[0], SG_TY_B32);
  uint32_t s32 = (uint32_t)s;
  uint64_t d = 0;
  int scc = -1;
  switch (op) {
  case S_MOV_B32: case S_MOV_B64: d = s; break;
  case S_CMOV_B32: case S_CMOV_B64:
    if (!w->scc) return 0;
    d = s;
    break;
  case S_NOT_B32: d = (uint32_t)~s32; scc = d != 0; break;
  case S_NOT_B64: d = ~s; scc = d != 0; break;
  case S_WQM_B64: {
    d = 0;
    for (int q = 0; q < 16; q++)
      if ((s >> (4 * q)) & 0xf) d |= 0xfull << (4 * q);
    scc = d != 0;
    break;
  }
  case S_BREV_B32: {
    uint32_t r = 0;
    for (int i = 0; i < 32; i++) r |= ((s32 >> i) & 1u) << (31 - i);
    d = r;
    break;
  }
  case S_BREV_B64: {
    uint64_t r = 0;
    for (int i = 0; i < 64; i++) r |= ((s >> i) & 1ull) << (63 - i);
    d = r;
    break;
  }
  case S_BCNT0_I32_B32: d = 32 - (unsigned)__builtin_popcount(s32); scc = d != 0; break;
  case S_BCNT1_I32_B32: d = (unsigned)__builtin_popcount(s32); scc = d != 0; break;
  case S_BCNT1_I32_B64: d = (unsigned)__builtin_popcountll(s); scc = d != 0; break;
  case S_FF1_I32_B32: d = s32 ? (unsigned)__builtin_ctz(s32) : 0xffffffffu; break;
  case S_FF1_I32_B64: d = s ? (unsigned)__builtin_ctzll(s) : 0xffffffffu; break;
  case S_FLBIT_I32_B32: d = s32 ? (unsigned)__builtin_clz(s32) : 0xffffffffu; break;
  case S_FLBIT_I32_B64: d = s ? (unsigned)__builtin_clzll(s) : 0xffffffffu; break;
  case S_FLBIT_I32: {
    uint32_t v = (s32 >> 31) ? ~s32 : s32;
    d = (s32 == 0 || s32 == 0xffffffffu) ? 0xffffffffu : (unsigned)__builtin_clz(v) - 1 + 1;
    break;
  }
  case S_SEXT_I32_I8: d = (uint32_t)(int32_t)(int8_t)s32; break;
  case S_SEXT_I32_I16: d = (uint32_t)(int32_t)(int16_t)s32; break;
  case S_ABS_I32: d = (uint32_t)((int32_t)s32 < 0 ? -(int64_t)(int32_t)s32 : (int32_t)s32); scc = d != 0; break;
  case S_BITSET0_B32: d = w->s[in->dst & 127] & ~(1u << (s32 & 31)); break;
  case S_BITSET1_B32: d = w->s[in->dst & 127] | (1u << (s32 & 31)); break;
  case S_GETPC_B64: d = in->pc + 4; break;
  case S_SETPC_B64: w->pc = s & ~3ull; return 0;
  case S_SWAPPC_B64:
    sg_set_sgpr64(w, in->dst, in->pc + 4);
    w->pc = s & ~3ull;
    return 0;
  default:
    if (op >= S_AND_SAVEEXEC_B64 && op <= S_ANDN2_WREXEC_B64) return saveexec(w, in, op, s);
    return sg_unimplemented(w, in);
  }
  if (in->desc->flags & SG_OPF_64DST) sg_set_sgpr64(w, in->dst, d);
  else sg_sdst_write(w, in->dst, (uint32_t)d);
  if (scc >= 0) w->scc = (uint8_t)scc;
  return 0;
}

static int sopk(sg_wave_t *w, const sg_inst_t *in) {
  unsigned op = in->desc->sub;
  int32_t k = in->simm;                 /* sign-extended simm16 */
  uint32_t ku = (uint16_t)in->simm;     /* zero-extended, for the unsigned compares */
  uint32_t d = w->s[in->dst & 127];
  switch (op) {
  case S_MOVK_I32: sg_sdst_write(w, in->dst, (uint32_t)k); return 0;
  case S_CMOVK_I32: if (w->scc) sg_sdst_write(w, in->dst, (uint32_t)k); return 0;
  case S_ADDK_I32: {
    uint32_t r = d + (uint32_t)k;
    w->scc = ((~(d ^ (uint32_t)k)) & (d ^ r)) >> 31;
    sg_sdst_write(w, in->dst, r);
    return 0;
  }
  case S_MULK_I32: sg_sdst_write(w, in->dst, d * (uint32_t)k); return 0;
  default:
    if (op >= S_CMPK_EQ_I32 && op <= S_CMPK_LE_I32) {
      w->scc = (uint8_t)cmp_i((int32_t)d, k, (int)(op - S_CMPK_EQ_I32));
      return 0;
    }
    if (op >= S_CMPK_EQ_U32 && op <= S_CMPK_LE_U32) {
      w->scc = (uint8_t)cmp_u(d, ku, (int)(op - S_CMPK_EQ_U32));
      return 0;
    }
    return sg_unimplemented(w, in);
  }
}

static int sopc(sg_wave_t *w, const sg_inst_t *in) {
  unsigned op = in->desc->sub;
  if (op == S_CMP_EQ_U64 || op == S_CMP_LG_U64) {
    uint64_t a = sg_scalar64(w, in, in->src[0], SG_TY_B64), b = sg_scalar64(w, in, in->src[1], SG_TY_B64);
    w->scc = op == S_CMP_EQ_U64 ? a == b : a != b;
    return 0;
  }
  if (op == S_BITCMP0_B64 || op == S_BITCMP1_B64) {
    uint64_t a = sg_scalar64(w, in, in->src[0], SG_TY_B64);
    uint32_t b = sg_scalar32(w, in, in->src[1], SG_TY_B32);
    uint32_t bit = (uint32_t)(a >> (b & 63)) & 1;
    w->scc = op == S_BITCMP1_B64 ? bit : !bit;
    return 0;
  }
  uint32_t a = sg_scalar32(w, in, in->src[0], SG_TY_B32), b = sg_scalar32(w, in, in->src[1], SG_TY_B32);
  if (op >= S_CMP_EQ_I32 && op <= S_CMP_LE_I32) {
    w->scc = (uint8_t)cmp_i((int32_t)a, (int32_t)b, (int)(op - S_CMP_EQ_I32));
  } else if (op >= S_CMP_EQ_U32 && op <= S_CMP_LE_U32) {
    w->scc = (uint8_t)cmp_u(a, b, (int)(op - S_CMP_EQ_U32));
  } else if (op == S_BITCMP0_B32 || op == S_BITCMP1_B32) {
    uint32_t bit = (a >> (b & 31)) & 1;
    w->scc = op == S_BITCMP1_B32 ? bit : !bit;
  } else if (op == S_SET_GPR_IDX_ON) {
    /* M0[7:0] = index, M0[15:12] = the operands it applies to (SOPC's second field) */
    uint32_t mode = (in->w0 >> 8) & 0xf;
    w->s[SG_SRC_M0] = (w->s[SG_SRC_M0] & ~0xf0ffu) | (a & 0xff) | (mode << 12);
    w->gpr_idx_on = 1;
  } else {
    return sg_unimplemented(w, in);
  }
  return 0;
}

static int sopp(sg_wave_t *w, const sg_inst_t *in) {
  unsigned op = in->desc->sub;
  uint64_t target = in->pc + 4 + (int64_t)in->simm * 4;
  bool take = false;
  switch (op) {
  case S_NOP: case S_WAITCNT: case S_SLEEP: case S_SETPRIO: case S_ICACHE_INV:
    /* Memory operations complete in order before the next instruction here, so waits are
     * already satisfied. */
    return 0;
  case S_ENDPGM: w->state = SG_W_DONE; return 1;
  case S_BARRIER: w->state = SG_W_BARRIER; return 1;
  case S_SET_GPR_IDX_OFF: w->gpr_idx_on = 0; return 0;
  case S_SET_GPR_IDX_MODE:
    w->s[SG_SRC_M0] = (w->s[SG_SRC_M0] & ~0xf000u) | ((uint32_t)(in->simm & 0xf) << 12);
    return 0;
  case S_TRAP:
    return sg_wave_fail(w, in, SG_ERR_ILLEGAL, 0, 0, -1, "s_trap %d at 0x%llx (the kernel called abort or trap)",
                        in->simm & 0xff, (unsigned long long)in->pc);
  case S_BRANCH: take = true; break;
  case S_CBRANCH_SCC0: take = !w->scc; break;
  case S_CBRANCH_SCC1: take = w->scc; break;
  case S_CBRANCH_VCCZ: take = sg_vcc(w) == 0; break;
  case S_CBRANCH_VCCNZ: take = sg_vcc(w) != 0; break;
  case S_CBRANCH_EXECZ: take = sg_exec(w) == 0; break;
  case S_CBRANCH_EXECNZ: take = sg_exec(w) != 0; break;
  default: return sg_unimplemented(w, in);
  }
  if (take) w->pc = target;
  return 0;
}

static int s_set_gpr_idx_idx(sg_wave_t *w, const sg_inst_t *in) {
  uint32_t a = sg_scalar32(w, in, in->src[0], SG_TY_B32);
  w->s[SG_SRC_M0] = (w->s[SG_SRC_M0] & ~0xffu) | (a & 0xff);
  return 0;
}

/* s_load_dword*: SGPR-pair base + offset, dword-aligned, through the memory checks. */
static int smem(sg_wave_t *w, const sg_inst_t *in) {
  unsigned n = in->desc->sub;
  uint64_t base = sg_sgpr64(w, in->src[0]) & 0xffffffffffffull;
  uint64_t off = (uint64_t)(int64_t)in->simm;
  if (in->soffset != SG_SRC_NULL && (!in->smem_imm || in->smem_soe)) off += w->s[in->soffset & 127];
  uint64_t va = (base + off) & ~3ull;
  sg_region_t *r;
  uint8_t *p = sg_mem_global(w, in, va, n * 4, SG_ACC_READ, -1, &r);
  if (!p) return 1;
  if (r && r->init_bits && (w->g->job->check & SG_CHECK_UNINIT)) sg_mem_init_check(w, in, r, va, n * 4, -1);
  for (unsigned i = 0; i < n; i++) {
    uint32_t v;
    memcpy(&v, p + 4 * i, 4);
    sg_sdst_write(w, (in->dst + i) & 127, v);
  }
  return 0;
}

static int nop(sg_wave_t *w, const sg_inst_t *in) {
  (void)w, (void)in;
  return 0;
}

#define OP2(n, s, f) {#n, sop2, s, 0, f}
#define OP1(n, s, f) {#n, sop1, s, 0, f}
#define OPK(n, s) {#n, sopk, s, 0, 0}
#define OPC(n, s) {#n, sopc, s, 0, 0}
#define OPP(n, s) {#n, sopp, s, 0, 0}
#define W64 (SG_OPF_64SRC | SG_OPF_64DST)

const sg_opdesc_t sg_ops_salu[] = {
  OP2(s_add_u32, S_ADD_U32, 0), OP2(s_sub_u32, S_SUB_U32, 0), OP2(s_add_i32, S_ADD_I32, 0),
  OP2(s_sub_i32, S_SUB_I32, 0), OP2(s_addc_u32, S_ADDC_U32, 0), OP2(s_subb_u32, S_SUBB_U32, 0),
  OP2(s_min_i32, S_MIN_I32, 0), OP2(s_min_u32, S_MIN_U32, 0), OP2(s_max_i32, S_MAX_I32, 0),
  OP2(s_max_u32, S_MAX_U32, 0), OP2(s_cselect_b32, S_CSELECT_B32, 0), OP2(s_cselect_b64, S_CSELECT_B64, W64),
  OP2(s_and_b32, S_AND_B32, 0), OP2(s_and_b64, S_AND_B64, W64), OP2(s_or_b32, S_OR_B32, 0),
  OP2(s_or_b64, S_OR_B64, W64), OP2(s_xor_b32, S_XOR_B32, 0), OP2(s_xor_b64, S_XOR_B64, W64),
  OP2(s_andn2_b32, S_ANDN2_B32, 0), OP2(s_andn2_b64, S_ANDN2_B64, W64), OP2(s_orn2_b32, S_ORN2_B32, 0),
  OP2(s_orn2_b64, S_ORN2_B64, W64), OP2(s_nand_b32, S_NAND_B32, 0), OP2(s_nand_b64, S_NAND_B64, W64),
  OP2(s_nor_b32, S_NOR_B32, 0), OP2(s_nor_b64, S_NOR_B64, W64), OP2(s_xnor_b32, S_XNOR_B32, 0),
  OP2(s_xnor_b64, S_XNOR_B64, W64), OP2(s_lshl_b32, S_LSHL_B32, 0), OP2(s_lshl_b64, S_LSHL_B64, W64),
  OP2(s_lshr_b32, S_LSHR_B32, 0), OP2(s_lshr_b64, S_LSHR_B64, W64), OP2(s_ashr_i32, S_ASHR_I32, 0),
  OP2(s_ashr_i64, S_ASHR_I64, W64), OP2(s_bfm_b32, S_BFM_B32, 0), OP2(s_bfm_b64, S_BFM_B64, SG_OPF_64DST),
  OP2(s_mul_i32, S_MUL_I32, 0), OP2(s_mul_hi_u32, S_MUL_HI_U32, 0), OP2(s_mul_hi_i32, S_MUL_HI_I32, 0),
  OP2(s_bfe_u32, S_BFE_U32, 0), OP2(s_bfe_i32, S_BFE_I32, 0), OP2(s_bfe_u64, S_BFE_U64, W64),
  OP2(s_bfe_i64, S_BFE_I64, W64), OP2(s_absdiff_i32, S_ABSDIFF_I32, 0),
  OP2(s_lshl1_add_u32, S_LSHL1_ADD_U32, 0), OP2(s_lshl2_add_u32, S_LSHL2_ADD_U32, 0),
  OP2(s_lshl3_add_u32, S_LSHL3_ADD_U32, 0), OP2(s_lshl4_add_u32, S_LSHL4_ADD_U32, 0),
  OP2(s_pack_ll_b32_b16, S_PACK_LL_B32_B16, 0), OP2(s_pack_lh_b32_b16, S_PACK_LH_B32_B16, 0),
  OP2(s_pack_hh_b32_b16, S_PACK_HH_B32_B16, 0),
  OP1(s_mov_b32, S_MOV_B32, 0), OP1(s_mov_b64, S_MOV_B64, W64), OP1(s_cmov_b32, S_CMOV_B32, 0),
  OP1(s_cmov_b64, S_CMOV_B64, W64), OP1(s_not_b32, S_NOT_B32, 0), OP1(s_not_b64, S_NOT_B64, W64),
  OP1(s_wqm_b64, S_WQM_B64, W64), OP1(s_brev_b32, S_BREV_B32, 0), OP1(s_brev_b64, S_BREV_B64, W64),
  OP1(s_bcnt0_i32_b32, S_BCNT0_I32_B32, 0), OP1(s_bcnt1_i32_b32, S_BCNT1_I32_B32, 0),
  OP1(s_bcnt1_i32_b64, S_BCNT1_I32_B64, SG_OPF_64SRC), OP1(s_ff1_i32_b32, S_FF1_I32_B32, 0),
  OP1(s_ff1_i32_b64, S_FF1_I32_B64, SG_OPF_64SRC), OP1(s_flbit_i32_b32, S_FLBIT_I32_B32, 0),
  OP1(s_flbit_i32_b64, S_FLBIT_I32_B64, SG_OPF_64SRC), OP1(s_sext_i32_i8, S_SEXT_I32_I8, 0),
  OP1(s_sext_i32_i16, S_SEXT_I32_I16, 0), OP1(s_bitset0_b32, S_BITSET0_B32, 0),
  OP1(s_bitset1_b32, S_BITSET1_B32, 0), OP1(s_getpc_b64, S_GETPC_B64, SG_OPF_64DST),
  OP1(s_setpc_b64, S_SETPC_B64, SG_OPF_64SRC), OP1(s_swappc_b64, S_SWAPPC_B64, W64),
  OP1(s_and_saveexec_b64, S_AND_SAVEEXEC_B64, W64), OP1(s_or_saveexec_b64, S_OR_SAVEEXEC_B64, W64),
  OP1(s_xor_saveexec_b64, S_XOR_SAVEEXEC_B64, W64), OP1(s_andn2_saveexec_b64, S_ANDN2_SAVEEXEC_B64, W64),
  OP1(s_orn2_saveexec_b64, S_ORN2_SAVEEXEC_B64, W64), OP1(s_nand_saveexec_b64, S_NAND_SAVEEXEC_B64, W64),
  OP1(s_nor_saveexec_b64, S_NOR_SAVEEXEC_B64, W64), OP1(s_xnor_saveexec_b64, S_XNOR_SAVEEXEC_B64, W64),
  OP1(s_andn1_saveexec_b64, S_ANDN1_SAVEEXEC_B64, W64), OP1(s_orn1_saveexec_b64, S_ORN1_SAVEEXEC_B64, W64),
  OP1(s_andn1_wrexec_b64, S_ANDN1_WREXEC_B64, W64), OP1(s_andn2_wrexec_b64, S_ANDN2_WREXEC_B64, W64),
  OP1(s_abs_i32, S_ABS_I32, 0),
  OPK(s_movk_i32, S_MOVK_I32), OPK(s_cmovk_i32, S_CMOVK_I32), OPK(s_addk_i32, S_ADDK_I32),
  OPK(s_mulk_i32, S_MULK_I32), OPK(s_cmpk_eq_i32, S_CMPK_EQ_I32), OPK(s_cmpk_lg_i32, S_CMPK_LG_I32),
  OPK(s_cmpk_gt_i32, S_CMPK_GT_I32), OPK(s_cmpk_ge_i32, S_CMPK_GE_I32), OPK(s_cmpk_lt_i32, S_CMPK_LT_I32),
  OPK(s_cmpk_le_i32, S_CMPK_LE_I32), OPK(s_cmpk_eq_u32, S_CMPK_EQ_U32), OPK(s_cmpk_lg_u32, S_CMPK_LG_U32),
  OPK(s_cmpk_gt_u32, S_CMPK_GT_U32), OPK(s_cmpk_ge_u32, S_CMPK_GE_U32), OPK(s_cmpk_lt_u32, S_CMPK_LT_U32),
  OPK(s_cmpk_le_u32, S_CMPK_LE_U32),
  OPC(s_cmp_eq_i32, S_CMP_EQ_I32), OPC(s_cmp_lg_i32, S_CMP_LG_I32), OPC(s_cmp_gt_i32, S_CMP_GT_I32),
  OPC(s_cmp_ge_i32, S_CMP_GE_I32), OPC(s_cmp_lt_i32, S_CMP_LT_I32), OPC(s_cmp_le_i32, S_CMP_LE_I32),
  OPC(s_cmp_eq_u32, S_CMP_EQ_U32), OPC(s_cmp_lg_u32, S_CMP_LG_U32), OPC(s_cmp_gt_u32, S_CMP_GT_U32),
  OPC(s_cmp_ge_u32, S_CMP_GE_U32), OPC(s_cmp_lt_u32, S_CMP_LT_U32), OPC(s_cmp_le_u32, S_CMP_LE_U32),
  OPC(s_cmp_eq_u64, S_CMP_EQ_U64), OPC(s_cmp_lg_u64, S_CMP_LG_U64), OPC(s_bitcmp0_b32, S_BITCMP0_B32),
  OPC(s_bitcmp1_b32, S_BITCMP1_B32), OPC(s_bitcmp0_b64, S_BITCMP0_B64), OPC(s_bitcmp1_b64, S_BITCMP1_B64),
  OPC(s_set_gpr_idx_on, S_SET_GPR_IDX_ON),
  OPP(s_nop, S_NOP), OPP(s_endpgm, S_ENDPGM), OPP(s_branch, S_BRANCH), OPP(s_cbranch_scc0, S_CBRANCH_SCC0),
  OPP(s_cbranch_scc1, S_CBRANCH_SCC1), OPP(s_cbranch_vccz, S_CBRANCH_VCCZ),
  OPP(s_cbranch_vccnz, S_CBRANCH_VCCNZ), OPP(s_cbranch_execz, S_CBRANCH_EXECZ),
  OPP(s_cbranch_execnz, S_CBRANCH_EXECNZ), OPP(s_barrier, S_BARRIER), OPP(s_waitcnt, S_WAITCNT),
  OPP(s_set_gpr_idx_off, S_SET_GPR_IDX_OFF), OPP(s_set_gpr_idx_mode, S_SET_GPR_IDX_MODE),
  OPP(s_sleep, S_SLEEP), OPP(s_setprio, S_SETPRIO), OPP(s_trap, S_TRAP), OPP(s_icache_inv, S_ICACHE_INV),
  {"s_set_gpr_idx_idx", s_set_gpr_idx_idx, 0, 0, 0},
  {"s_load_dword", smem, 1, 0, 0}, {"s_load_dwordx2", smem, 2, 0, 0}, {"s_load_dwordx4", smem, 4, 0, 0},
  {"s_load_dwordx8", smem, 8, 0, 0}, {"s_load_dwordx16", smem, 16, 0, 0},
  {"s_dcache_wb", nop, 0, 0, 0}, {"s_dcache_inv", nop, 0, 0, 0},
};
const size_t sg_ops_salu_n = sizeof(sg_ops_salu) / sizeof(sg_ops_salu[0]);
