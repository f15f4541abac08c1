/* A decoded instruction printed in LLVM's AMDGPU assembly syntax (as llvm-objdump prints it),
 * from the decoded fields only, never from the disassembler's text: the decode check
 * (tests/softgpu/test_decode.c) compares the two over every code object the suites build, and
 * error messages can show what the interpreter understood. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "device/softgpu/isa/internal.h"

typedef struct out {
  char *p;
  size_t cap, n;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...) {
  if (o->n >= o->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(o->p + o->n, o->cap - o->n, fmt, ap);
  va_end(ap);
  if (k > 0) o->n += (size_t)k;
  if (o->n >= o->cap) o->n = o->cap - 1;
}

static const char *const fconst_name[9] = {"0.5", "-0.5", "1.0", "-1.0", "2.0", "-2.0", "4.0", "-4.0", "0.15915494"};

/* A register range: s[2:3], v[0:1], a[4:7], or a single register. */
static void reg(out_t *o, char kind, unsigned r, unsigned n) {
  if (n <= 1) put(o, "%c%u", kind, r);
  else put(o, "%c[%u:%u]", kind, r, r + n - 1);
}

/* Scalar-or-vector operand code `c` of `n` dwords. */
static void operand(out_t *o, const sg_inst_t *in, unsigned c, unsigned n) {
  if (c >= SG_SRC_VGPR) {
    reg(o, 'v', c - SG_SRC_VGPR, n);
    return;
  }
  if (c <= 101) {
    reg(o, 's', c, n);
    return;
  }
  if (c >= 108 && c <= 123) {
    reg(o, 't', c - 108, n); /* ttmp: not expected in kernels */
    return;
  }
  if (c >= SG_SRC_ZERO && c <= SG_SRC_INT_MAX) {
    put(o, "%u", c - SG_SRC_ZERO);
    return;
  }
  if (c > SG_SRC_INT_MAX && c <= SG_SRC_INT_NEG_MAX) {
    put(o, "%d", SG_SRC_INT_MAX - (int)c);
    return;
  }
  if (c >= SG_SRC_F_HALF && c <= SG_SRC_F_INV2PI) {
    put(o, "%s", fconst_name[c - SG_SRC_F_HALF]);
    return;
  }
  bool wide = n >= 2;
  switch (c) {
  case SG_SRC_FLAT_SCR_LO: put(o, wide ? "flat_scratch" : "flat_scratch_lo"); return;
  case SG_SRC_FLAT_SCR_HI: put(o, "flat_scratch_hi"); return;
  case 104: put(o, wide ? "xnack_mask" : "xnack_mask_lo"); return;
  case 105: put(o, "xnack_mask_hi"); return;
  case SG_SRC_VCC_LO: put(o, wide ? "vcc" : "vcc_lo"); return;
  case SG_SRC_VCC_HI: put(o, "vcc_hi"); return;
  case SG_SRC_M0: put(o, "m0"); return;
  case SG_SRC_NULL: put(o, "null"); return;
  case SG_SRC_EXEC_LO: put(o, wide ? "exec" : "exec_lo"); return;
  case SG_SRC_EXEC_HI: put(o, "exec_hi"); return;
  case SG_SRC_SHARED_BASE: put(o, "src_shared_base"); return;
  case SG_SRC_SHARED_LIMIT: put(o, "src_shared_limit"); return;
  case SG_SRC_PRIVATE_BASE: put(o, "src_private_base"); return;
  case SG_SRC_PRIVATE_LIMIT: put(o, "src_private_limit"); return;
  case SG_SRC_POPS: put(o, "src_pops_exiting_wave_id"); return;
  case SG_SRC_VCCZ: put(o, "src_vccz"); return;
  case SG_SRC_EXECZ: put(o, "src_execz"); return;
  case SG_SRC_SCC: put(o, "src_scc"); return;
  case SG_SRC_LDS_DIRECT: put(o, "src_lds_direct"); return;
  case SG_SRC_LITERAL: put(o, "0x%x", in->lit); return;
  default: put(o, "?%u", c); return;
  }
}

/* A floating-point source with VOP3/SDWA modifiers. */
static void fsrc(out_t *o, const sg_inst_t *in, int i, unsigned n) {
  bool ab = (in->abs >> i) & 1, ng = (in->neg >> i) & 1;
  if (ng) put(o, "-");
  if (ab) put(o, "|");
  operand(o, in, in->src[i], n);
  if (ab) put(o, "|");
}

static bool ends(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}
static bool starts(const char *s, const char *pre) { return strncmp(s, pre, strlen(pre)) == 0; }

/* Dword widths of the destination and the three sources, from the mnemonic. */
static void widths(const char *b, unsigned *d, unsigned w[3]) {
  *d = 1;
  w[0] = w[1] = w[2] = 1;
  bool b64 = ends(b, "_b64") || ends(b, "_u64") || ends(b, "_i64") || ends(b, "_f64");
  if (starts(b, "v_pk_") && ends(b, "32")) {
    *d = w[0] = w[1] = w[2] = 2;
    return;
  }
  if (starts(b, "v_cmp")) {
    if (b64) w[0] = w[1] = 2;
    if (starts(b, "v_cmp_class_f64") || starts(b, "v_cmpx_class_f64")) w[1] = 1;
    *d = 2;
    return;
  }
  if (strcmp(b, "v_mad_u64_u32") == 0 || strcmp(b, "v_mad_i64_i32") == 0) {
    *d = 2;
    w[2] = 2;
    return;
  }
  if (starts(b, "v_cvt_f64_")) {
    *d = 2;
    return;
  }
  if (starts(b, "v_cvt_") && ends(b, "_f64")) {
    w[0] = 2;
    return;
  }
  if (strcmp(b, "v_frexp_exp_i32_f64") == 0) {
    w[0] = 2;
    return;
  }
  if (!b64) return;
  *d = w[0] = w[1] = w[2] = 2;
  if (strcmp(b, "v_lshlrev_b64") == 0 || strcmp(b, "v_lshrrev_b64") == 0 || strcmp(b, "v_ashrrev_i64") == 0) w[0] = 1;
  if (strcmp(b, "v_lshl_add_u64") == 0 || strcmp(b, "v_ldexp_f64") == 0) w[1] = 1;
  if (starts(b, "s_lshl_") || starts(b, "s_lshr_") || starts(b, "s_ashr_") || starts(b, "s_bfe_")) w[1] = 1;
  if (strcmp(b, "s_bfm_b64") == 0) w[0] = w[1] = 1;
  if (starts(b, "s_bcnt") || starts(b, "s_ff") || starts(b, "s_flbit")) *d = 1;
  if (strcmp(b, "s_bitcmp0_b64") == 0 || strcmp(b, "s_bitcmp1_b64") == 0) w[1] = 1;
}

static void cache_bits(out_t *o, const sg_inst_t *in, sg_target_t t) {
  if (t == SG_GFX942) {
    if (in->glc) put(o, " sc0");
    if (in->slc) put(o, " nt");
    if (in->scc) put(o, " sc1");
  } else {
    if (in->glc) put(o, " glc");
    if (in->slc) put(o, " slc");
    if (in->scc) put(o, " scc");
  }
}

/* Bytes of data a memory mnemonic moves per lane. */
static unsigned mem_dwords(const char *b) {
  if (ends(b, "x2") || ends(b, "_b64") || ends(b, "_u64") || ends(b, "_i64") || ends(b, "_f64")) return 2;
  if (ends(b, "x3") || ends(b, "_b96")) return 3;
  if (ends(b, "x4") || ends(b, "_b128")) return 4;
  return 1;
}

static void print_ds(out_t *o, const sg_inst_t *in, const char *b) {
  char r = in->acc ? 'a' : 'v';
  unsigned n = mem_dwords(b);
  bool two = strstr(b, "read2") || strstr(b, "write2");
  bool is_read = starts(b, "ds_read") || strstr(b, "_rtn_") || starts(b, "ds_bpermute") || starts(b, "ds_permute");
  bool has_data = !starts(b, "ds_read");
  if (is_read) {
    reg(o, r, in->vdst, two ? 2 * n : n);
    put(o, ", ");
  }
  reg(o, 'v', in->addr, 1);
  if (has_data) {
    put(o, ", ");
    reg(o, r, in->data0, n);
    if (two || strstr(b, "cmpst")) {
      put(o, ", ");
      reg(o, r, in->data1, n);
    }
  }
  if (two) {
    if (in->offset0) put(o, " offset0:%u", in->offset0);
    if (in->offset1) put(o, " offset1:%u", in->offset1);
  } else {
    unsigned off = (unsigned)in->offset1 << 8 | in->offset0;
    if (off) put(o, " offset:%u", off);
  }
  if (in->gds) put(o, " gds");
}

static void print_flat(out_t *o, const sg_inst_t *in, const char *b, sg_target_t t) {
  char r = in->acc ? 'a' : 'v';
  unsigned n = mem_dwords(b);
  bool store = strstr(b, "_store_") != NULL;
  bool atomic = strstr(b, "_atomic_") != NULL;
  bool rtn = atomic && in->glc;
  bool saddr = in->saddr != 0x7f;
  if ((!store && !atomic) || rtn) {
    reg(o, r, in->vdst, n);
    put(o, ", ");
  }
  if (in->seg == 1) { /* scratch */
    bool use_v = t == SG_GFX942 ? in->lds : !saddr;
    if (use_v) reg(o, 'v', in->addr, 1);
    else put(o, "off");
  } else if (in->seg == 2 && saddr) {
    reg(o, 'v', in->addr, 1);
  } else {
    reg(o, 'v', in->addr, 2);
  }
  if (store || atomic) {
    put(o, ", ");
    reg(o, r, in->data0, strstr(b, "cmpswap") ? 2 * n : n);
  }
  if (in->seg != 0) {
    put(o, ", ");
    if (saddr) operand(o, in, in->saddr, in->seg == 1 ? 1 : 2);
    else put(o, "off");
  }
  if (in->simm) put(o, " offset:%d", in->simm);
  cache_bits(o, in, t);
}

static void print_mubuf(out_t *o, const sg_inst_t *in, const char *b, sg_target_t t) {
  char r = in->acc ? 'a' : 'v';
  reg(o, r, in->data0, mem_dwords(b));
  put(o, ", ");
  if (in->offen && in->idxen) reg(o, 'v', in->addr, 2);
  else if (in->offen || in->idxen) reg(o, 'v', in->addr, 1);
  else put(o, "off");
  put(o, ", ");
  reg(o, 's', in->srsrc, 4);
  put(o, ", ");
  operand(o, in, in->soffset, 1);
  if (in->idxen) put(o, " idxen");
  if (in->offen) put(o, " offen");
  if (in->simm) put(o, " offset:%d", in->simm);
  cache_bits(o, in, t);
  if (in->lds) put(o, " lds");
}

static void waitcnt(out_t *o, uint32_t imm) {
  unsigned vm = (imm & 0xf) | ((imm >> 14) & 3) << 4, exp = (imm >> 4) & 7, lgkm = (imm >> 8) & 0xf;
  bool any = false;
  if (vm != 63) put(o, "%svmcnt(%u)", any ? " " : "", vm), any = true;
  if (exp != 7) put(o, "%sexpcnt(%u)", any ? " " : "", exp), any = true;
  if (lgkm != 15) put(o, "%slgkmcnt(%u)", any ? " " : "", lgkm), any = true;
  if (!any) put(o, "vmcnt(63) expcnt(7) lgkmcnt(15)");
}

static void bits_array(out_t *o, const char *name, unsigned v, int n) {
  put(o, " %s:[", name);
  for (int i = 0; i < n; i++) put(o, "%s%u", i ? "," : "", (v >> i) & 1);
  put(o, "]");
}

/* Sources of a VALU operation in its VOP3 form: those that exist as VOP1 take one, the
 * three-operand ones (and carry-in and cndmask, whose third is a lane mask) three. */
static int vop_nsrc(const char *b) {
  static const char *const one[] = {"v_mov_", "v_not_", "v_bfrev_", "v_ffb", "v_cvt_", "v_rcp_", "v_rsq_", "v_sqrt_",
                                    "v_exp_", "v_log_", "v_sin_", "v_cos_", "v_floor_", "v_ceil_", "v_trunc_",
                                    "v_rndne_", "v_fract_", "v_frexp_", "v_readfirstlane_", "v_accvgpr_mov_"};
  static const char *const three[] = {"v_fma_", "v_mad_", "v_div_fixup_", "v_div_fmas_", "v_div_scale_", "v_med3_",
                                      "v_min3_", "v_max3_", "v_add3_", "v_bfe_", "v_bfi_", "v_alignbit_", "v_alignbyte_",
                                      "v_lshl_add_", "v_lshl_or_", "v_add_lshl_", "v_and_or_", "v_or3_", "v_xad_",
                                      "v_perm_", "v_sad_", "v_cndmask_", "v_addc_co_", "v_subb_co_", "v_subbrev_co_"};
  for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++)
    if (starts(b, one[i])) return 1;
  for (size_t i = 0; i < sizeof(three) / sizeof(three[0]); i++)
    if (starts(b, three[i])) return 3;
  return 2;
}

static const char *const sdwa_sel_name[7] = {"BYTE_0", "BYTE_1", "BYTE_2", "BYTE_3", "WORD_0", "WORD_1", "DWORD"};
static const char *const sdwa_unused_name[3] = {"UNUSED_PAD", "UNUSED_SEXT", "UNUSED_PRESERVE"};

size_t sg_inst_print(const sg_inst_t *in, sg_target_t t, char *buf, size_t cap) {
  out_t o = {buf, cap, 0};
  if (cap) buf[0] = 0;
  char b[48];
  snprintf(b, sizeof(b), "%s", in->mnem);
  size_t bl = strlen(b);
  if (bl > 4 && (ends(b, "_e32") || ends(b, "_e64"))) b[bl - 4] = 0;
  else if (bl > 5 && ends(b, "_sdwa")) b[bl - 5] = 0;
  put(&o, "%s", in->mnem);
  unsigned dw, sw[3];
  widths(b, &dw, sw);
  switch ((sg_fmt_t)in->fmt) {
  case SG_FMT_SOP2:
    put(&o, " "), operand(&o, in, in->dst, dw), put(&o, ", "), operand(&o, in, in->src[0], sw[0]);
    put(&o, ", "), operand(&o, in, in->src[1], sw[1]);
    break;
  case SG_FMT_SOP1:
    if (strcmp(b, "s_getpc_b64") == 0) put(&o, " "), operand(&o, in, in->dst, 2);
    else if (strcmp(b, "s_setpc_b64") == 0) put(&o, " "), operand(&o, in, in->src[0], 2);
    else put(&o, " "), operand(&o, in, in->dst, dw), put(&o, ", "), operand(&o, in, in->src[0], sw[0]);
    break;
  case SG_FMT_SOPK:
    put(&o, " "), operand(&o, in, in->dst, 1), put(&o, ", 0x%x", (uint16_t)in->simm);
    break;
  case SG_FMT_SOPC:
    if (strcmp(b, "s_set_gpr_idx_on") == 0) {
      static const char *const m[4] = {"SRC0", "SRC1", "SRC2", "DST"};
      unsigned mode = (in->w0 >> 8) & 0xf;
      put(&o, " "), operand(&o, in, in->src[0], 1), put(&o, ", gpr_idx(");
      bool first = true;
      for (int i = 0; i < 4; i++)
        if ((mode >> i) & 1) put(&o, "%s%s", first ? "" : ",", m[i]), first = false;
      put(&o, ")");
    } else {
      put(&o, " "), operand(&o, in, in->src[0], sw[0]), put(&o, ", "), operand(&o, in, in->src[1], sw[1]);
    }
    break;
  case SG_FMT_SOPP:
    if (strcmp(b, "s_waitcnt") == 0) put(&o, " "), waitcnt(&o, (uint16_t)in->simm);
    else if (starts(b, "s_branch") || starts(b, "s_cbranch") || strcmp(b, "s_nop") == 0 || strcmp(b, "s_sleep") == 0 ||
             strcmp(b, "s_setprio") == 0)
      put(&o, " %u", (uint16_t)in->simm);
    else if (strcmp(b, "s_trap") == 0) put(&o, " 0x%x", (uint16_t)in->simm);
    break;
  case SG_FMT_SMEM: {
    unsigned n = 1;
    const char *x = strstr(b, "dwordx");
    if (x) n = (unsigned)(x[6] - '0') * (x[7] >= '0' && x[7] <= '9' ? 10 : 1) + (x[7] >= '0' && x[7] <= '9' ? (unsigned)(x[7] - '0') : 0);
    put(&o, " "), reg(&o, 's', in->dst, n), put(&o, ", "), reg(&o, 's', in->src[0], 2), put(&o, ", ");
    if (in->smem_imm && in->smem_soe) operand(&o, in, in->soffset, 1), put(&o, " offset:0x%x", (unsigned)in->simm);
    else if (in->smem_imm) put(&o, "0x%x", (unsigned)in->simm);
    else operand(&o, in, in->soffset, 1);
    if (in->glc) put(&o, t == SG_GFX942 ? " sc0" : " glc");
    break;
  }
  case SG_FMT_VOP1: case SG_FMT_VOP2: case SG_FMT_VOPC: case SG_FMT_VOP3: {
    bool vop3 = in->fmt == SG_FMT_VOP3;
    bool cmp = starts(b, "v_cmp");
    int nsrc = in->fmt == SG_FMT_VOP1 ? 1 : in->fmt == SG_FMT_VOP3 ? vop_nsrc(b) : 2;
    bool writelane = strcmp(b, "v_writelane_b32") == 0, readlane = strcmp(b, "v_readlane_b32") == 0;
    bool carry_out = strstr(b, "_co_") != NULL;
    bool carry_in = strstr(b, "addc_co") || strstr(b, "subb_co") || strstr(b, "subbrev_co");
    bool vop3b = vop3 && (carry_out || starts(b, "v_div_scale") || strcmp(b, "v_mad_u64_u32") == 0 ||
                          strcmp(b, "v_mad_i64_i32") == 0);
    bool acc_mov = strcmp(b, "v_accvgpr_mov_b32") == 0;
    put(&o, " ");
    if (cmp) {
      operand(&o, in, in->sdst, 2);
    } else if (readlane || (in->fmt == SG_FMT_VOP1 && strcmp(b, "v_readfirstlane_b32") == 0)) {
      operand(&o, in, in->fmt == SG_FMT_VOP1 ? in->dst - SG_SRC_VGPR : in->dst, 1);
    } else if (acc_mov) {
      reg(&o, 'a', in->dst - SG_SRC_VGPR, 1);
    } else {
      operand(&o, in, in->dst, dw);
    }
    if (vop3b) put(&o, ", "), operand(&o, in, in->sdst, 2);
    else if (carry_out && !vop3) put(&o, ", vcc");
    bool is_float = strstr(b, "_f32") || strstr(b, "_f64") || strstr(b, "_f16") || strcmp(b, "v_cndmask_b32") == 0;
    bool cnd = strcmp(b, "v_cndmask_b32") == 0;
    int shown = carry_in || cnd ? 2 : nsrc;
    bool fmaak = strcmp(b, "v_fmaak_f32") == 0 || strcmp(b, "v_madak_f32") == 0;
    bool fmamk = strcmp(b, "v_fmamk_f32") == 0 || strcmp(b, "v_madmk_f32") == 0;
    for (int i = 0; i < shown; i++) {
      put(&o, ", ");
      if (fmamk && i == 1) put(&o, "0x%x, ", in->lit);
      if (acc_mov) {
        reg(&o, 'a', in->src[0] - SG_SRC_VGPR, 1);
        continue;
      }
      unsigned n = sw[i];
      if (writelane || readlane) n = 1;
      if (is_float || in->sdwa) fsrc(&o, in, i, n);
      else operand(&o, in, in->src[i], n);
    }
    if (fmaak) put(&o, ", 0x%x", in->lit);
    if (carry_in) {
      put(&o, ", ");
      if (vop3) operand(&o, in, in->src[2], 2);
      else put(&o, "vcc");
    }
    if (cnd) {
      put(&o, ", ");
      if (vop3) operand(&o, in, in->src[2], 2);
      else put(&o, "vcc");
    }
    if (in->clamp) put(&o, " clamp");
    if (in->omod) put(&o, " %s", in->omod == 1 ? "mul:2" : in->omod == 2 ? "mul:4" : "div:2");
    if (vop3 && !vop3b && in->opsel) bits_array(&o, "op_sel", in->opsel, 4);
    if (in->sdwa) {
      if (in->fmt != SG_FMT_VOPC) {
        put(&o, " dst_sel:%s dst_unused:%s", sdwa_sel_name[in->dst_sel % 7], sdwa_unused_name[in->dst_unused % 3]);
      }
      put(&o, " src0_sel:%s", sdwa_sel_name[in->src_sel[0] % 7]);
      if (in->fmt != SG_FMT_VOP1) put(&o, " src1_sel:%s", sdwa_sel_name[in->src_sel[1] % 7]);
    }
    break;
  }
  case SG_FMT_VOP3P: {
    bool acc_read = strcmp(b, "v_accvgpr_read_b32") == 0, acc_write = strcmp(b, "v_accvgpr_write_b32") == 0;
    put(&o, " ");
    if (acc_read) {
      reg(&o, 'v', in->dst - SG_SRC_VGPR, 1), put(&o, ", "), reg(&o, 'a', in->src[0] - SG_SRC_VGPR, 1);
      break;
    }
    if (acc_write) {
      reg(&o, 'a', in->dst - SG_SRC_VGPR, 1), put(&o, ", "), operand(&o, in, in->src[0], 1);
      break;
    }
    int nsrc = strstr(b, "fma") || strstr(b, "mad") ? 3 : 2;
    operand(&o, in, in->dst, dw);
    for (int i = 0; i < nsrc; i++) put(&o, ", "), operand(&o, in, in->src[i], sw[i]);
    unsigned mask = (1u << nsrc) - 1;
    if (in->opsel & mask) bits_array(&o, "op_sel", in->opsel, nsrc);
    if ((in->opsel_hi & mask) != mask) bits_array(&o, "op_sel_hi", in->opsel_hi, nsrc);
    if (in->neg & mask) bits_array(&o, "neg_lo", in->neg, nsrc);
    if (in->neg_hi & mask) bits_array(&o, "neg_hi", in->neg_hi, nsrc);
    if (in->clamp) put(&o, " clamp");
    break;
  }
  case SG_FMT_DS:
    put(&o, " ");
    print_ds(&o, in, b);
    break;
  case SG_FMT_FLAT:
    put(&o, " ");
    print_flat(&o, in, b, t);
    break;
  case SG_FMT_MUBUF:
    put(&o, " ");
    print_mubuf(&o, in, b, t);
    break;
  default:
    put(&o, " <unknown encoding>");
    break;
  }
  return o.n;
}
