/* Decoding: LLVM's disassembler (C API) gives the mnemonic and the length of each instruction,
 * the operands come from the raw bits through one extractor per encoding family. Field
 * positions are the GCN/CDNA microcode formats (SOP1/2/K/C/P, SMEM, VOP1/2/C, VOP3a/b, VOP3P,
 * SDWA, DS, FLAT/GLOBAL/SCRATCH, MUBUF) of the gfx9 family that gfx90a and gfx942 share;
 * tests/softgpu/test_decode.c checks every field against llvm-objdump over the corpus of code
 * objects kiln builds. */
#include <llvm-c/Disassembler.h>
#include <llvm-c/Target.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/softgpu/isa/internal.h"

/* LLVMInitialize* are not documented as thread-safe: once per process. */
static pthread_once_t llvm_once = PTHREAD_ONCE_INIT;
static void llvm_init(void) {
  LLVMInitializeAMDGPUTargetInfo();
  LLVMInitializeAMDGPUTargetMC();
  LLVMInitializeAMDGPUDisassembler();
}

void *sg_disasm_create(sg_target_t target) {
  pthread_once(&llvm_once, llvm_init);
  const char *cpu = target == SG_GFX90A ? "gfx90a" : "gfx942";
  return LLVMCreateDisasmCPU("amdgcn-amd-amdhsa", cpu, NULL, 0, NULL, NULL);
}

void sg_disasm_destroy(void *disasm) {
  if (disasm) LLVMDisasmDispose((LLVMDisasmContextRef)disasm);
}

static sg_fmt_t classify(uint32_t w0) {
  if ((w0 >> 31) == 0) {
    uint32_t top7 = w0 >> 25;
    if (top7 == 0x3f) return SG_FMT_VOP1;
    if (top7 == 0x3e) return SG_FMT_VOPC;
    return SG_FMT_VOP2;
  }
  if ((w0 >> 30) == 2) {
    uint32_t top9 = w0 >> 23;
    if (top9 == 0x17d) return SG_FMT_SOP1;
    if (top9 == 0x17e) return SG_FMT_SOPC;
    if (top9 == 0x17f) return SG_FMT_SOPP;
    if ((w0 >> 28) == 0xb) return SG_FMT_SOPK;
    return SG_FMT_SOP2;
  }
  if ((w0 >> 23) == 0x1a7) return SG_FMT_VOP3P;
  switch (w0 >> 26) {
  case 0x30: return SG_FMT_SMEM;
  case 0x34: return SG_FMT_VOP3;
  case 0x36: return SG_FMT_DS;
  case 0x37: return SG_FMT_FLAT;
  case 0x38: return SG_FMT_MUBUF;
  default: return SG_FMT_OTHER;
  }
}

static unsigned base_size(sg_fmt_t f, uint32_t w0) {
  switch (f) {
  case SG_FMT_VOP1: case SG_FMT_VOP2: case SG_FMT_VOPC: {
    unsigned s0 = w0 & 0x1ff;
    return (s0 == SG_SRC_SDWA || s0 == SG_SRC_DPP) ? 8 : 4;
  }
  case SG_FMT_SOP1: case SG_FMT_SOP2: case SG_FMT_SOPC: case SG_FMT_SOPK: case SG_FMT_SOPP:
    return 4;
  default:
    return 8;
  }
}

/* "v_add_f32_e32" -> "v_add_f32" */
static void base_name(const char *mnem, char *out, size_t cap) {
  snprintf(out, cap, "%s", mnem);
  static const char *suffix[] = {"_e32", "_e64", "_sdwa", "_dpp"};
  size_t n = strlen(out);
  for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
    size_t k = strlen(suffix[i]);
    if (n > k && strcmp(out + n - k, suffix[i]) == 0) {
      out[n - k] = 0;
      return;
    }
  }
}

/* VOP3 instructions whose bits 14:8 are a scalar destination instead of abs/op_sel (VOP3b). */
static bool is_vop3b(const char *base) {
  return strstr(base, "_co_") || strncmp(base, "v_div_scale_", 12) == 0 ||
         strcmp(base, "v_mad_u64_u32") == 0 || strcmp(base, "v_mad_i64_i32") == 0;
}

static void extract(sg_inst_t *in, const char *base) {
  uint32_t w0 = in->w0, w1 = in->w1;
  switch ((sg_fmt_t)in->fmt) {
  case SG_FMT_SOP2:
    in->src[0] = w0 & 0xff;
    in->src[1] = (w0 >> 8) & 0xff;
    in->dst = (w0 >> 16) & 0x7f;
    break;
  case SG_FMT_SOPK:
    in->dst = (w0 >> 16) & 0x7f;
    in->simm = (int16_t)(w0 & 0xffff);
    break;
  case SG_FMT_SOP1:
    in->src[0] = w0 & 0xff;
    in->dst = (w0 >> 16) & 0x7f;
    break;
  case SG_FMT_SOPC:
    in->src[0] = w0 & 0xff;
    in->src[1] = (w0 >> 8) & 0xff;
    break;
  case SG_FMT_SOPP:
    in->simm = (int16_t)(w0 & 0xffff);
    break;
  case SG_FMT_SMEM:
    in->src[0] = (w0 & 0x3f) << 1;          /* sbase: an aligned SGPR pair */
    in->dst = (w0 >> 6) & 0x7f;            /* sdata */
    in->smem_soe = (w0 >> 14) & 1;
    in->glc = (w0 >> 16) & 1;
    in->smem_imm = (w0 >> 17) & 1;
    if (in->smem_imm) {
      /* gfx9: a signed 21-bit byte offset */
      in->simm = (int32_t)(w1 << 11) >> 11;
      in->soffset = in->smem_soe ? (w1 >> 25) & 0x7f : SG_SRC_NULL;
    } else {
      in->simm = 0;
      in->soffset = in->smem_soe ? (w1 >> 25) & 0x7f : (w1 & 0x7f);
    }
    break;
  case SG_FMT_VOP2:
  case SG_FMT_VOPC:
  case SG_FMT_VOP1:
    in->src[0] = w0 & 0x1ff;
    if (in->fmt == SG_FMT_VOP2 || in->fmt == SG_FMT_VOPC) in->src[1] = SG_SRC_VGPR + ((w0 >> 9) & 0xff);
    if (in->fmt != SG_FMT_VOPC) in->dst = SG_SRC_VGPR + ((w0 >> 17) & 0xff);
    else in->sdst = SG_SRC_VCC_LO;
    if (in->src[0] == SG_SRC_SDWA) {
      in->sdwa = 1;
      in->src[0] = (w1 & 0xff) + (((w1 >> 23) & 1) ? 0 : SG_SRC_VGPR);
      if (in->fmt == SG_FMT_VOPC) {
        /* gfx9 VOPC SDWA: bit 15 selects an explicit SGPR destination in bits 14:8 */
        in->sdst = ((w1 >> 15) & 1) ? (w1 >> 8) & 0x7f : SG_SRC_VCC_LO;
        in->sdwa_sdst = (w1 >> 15) & 1;
      } else {
        in->dst_sel = (w1 >> 8) & 7;
        in->dst_unused = (w1 >> 11) & 3;
        in->omod = (w1 >> 14) & 3;
      }
      in->clamp = (w1 >> 13) & 1;
      in->src_sel[0] = (w1 >> 16) & 7;
      in->src_sext[0] = (w1 >> 19) & 1;
      in->neg |= ((w1 >> 20) & 1);
      in->abs |= ((w1 >> 21) & 1);
      in->src_sel[1] = (w1 >> 24) & 7;
      in->src_sext[1] = (w1 >> 27) & 1;
      in->neg |= ((w1 >> 28) & 1) << 1;
      in->abs |= ((w1 >> 29) & 1) << 1;
      if (in->fmt != SG_FMT_VOP1 && ((w1 >> 31) & 1)) in->src[1] = (w0 >> 9) & 0xff;
    }
    /* v_fmaak/fmamk/madak/madmk: K is the trailing literal (the other operands stay). */
    break;
  case SG_FMT_VOP3:
    in->dst = SG_SRC_VGPR + (w0 & 0xff);
    if (is_vop3b(base)) {
      in->sdst = (w0 >> 8) & 0x7f;
    } else {
      in->abs = (w0 >> 8) & 7;
      in->opsel = (w0 >> 11) & 0xf;
    }
    in->clamp = (w0 >> 15) & 1;
    in->src[0] = w1 & 0x1ff;
    in->src[1] = (w1 >> 9) & 0x1ff;
    in->src[2] = (w1 >> 18) & 0x1ff;
    in->omod = (w1 >> 27) & 3;
    in->neg = (w1 >> 29) & 7;
    if (strncmp(base, "v_cmp", 5) == 0) {
      in->sdst = w0 & 0xff;                  /* VOPC in VOP3: vdst is the mask destination */
      in->dst = 0;
    } else if (strcmp(base, "v_readlane_b32") == 0 || strcmp(base, "v_readfirstlane_b32") == 0) {
      in->dst = w0 & 0xff;                   /* scalar destination */
    }
    break;
  case SG_FMT_VOP3P:
    in->dst = SG_SRC_VGPR + (w0 & 0xff);
    in->neg_hi = (w0 >> 8) & 7;
    in->opsel = (w0 >> 11) & 7;
    in->opsel_hi = (uint8_t)(((w0 >> 14) & 1) << 2 | ((w1 >> 27) & 3));
    in->clamp = (w0 >> 15) & 1;
    in->src[0] = w1 & 0x1ff;
    in->src[1] = (w1 >> 9) & 0x1ff;
    in->src[2] = (w1 >> 18) & 0x1ff;
    in->neg = (w1 >> 29) & 7;
    break;
  case SG_FMT_DS:
    in->offset0 = w0 & 0xff;
    in->offset1 = (w0 >> 8) & 0xff;
    in->gds = (w0 >> 16) & 1;
    in->acc = (w0 >> 25) & 1;
    in->addr = w1 & 0xff;
    in->data0 = (w1 >> 8) & 0xff;
    in->data1 = (w1 >> 16) & 0xff;
    in->vdst = (w1 >> 24) & 0xff;
    break;
  case SG_FMT_FLAT:
    in->seg = (w0 >> 14) & 3;
    in->lds = (w0 >> 13) & 1;                /* gfx942 scratch: SVE (vaddr in use) */
    in->glc = (w0 >> 16) & 1;
    in->slc = (w0 >> 17) & 1;
    in->scc = (w0 >> 25) & 1;
    /* 13-bit offset: unsigned for flat, signed for global and scratch */
    in->simm = in->seg == 0 ? (int32_t)(w0 & 0xfff) : (int32_t)(w0 << 19) >> 19;
    in->addr = w1 & 0xff;
    in->data0 = (w1 >> 8) & 0xff;
    in->saddr = (w1 >> 16) & 0x7f;
    in->acc = (w1 >> 23) & 1;
    in->vdst = (w1 >> 24) & 0xff;
    break;
  case SG_FMT_MUBUF:
    in->simm = (int32_t)(w0 & 0xfff);
    in->offen = (w0 >> 12) & 1;
    in->idxen = (w0 >> 13) & 1;
    in->glc = (w0 >> 14) & 1;
    in->scc = (w0 >> 15) & 1;
    in->lds = (w0 >> 16) & 1;
    in->slc = (w0 >> 17) & 1;
    in->addr = w1 & 0xff;
    in->data0 = (w1 >> 8) & 0xff;
    in->srsrc = (uint8_t)(((w1 >> 16) & 0x1f) << 2);
    in->acc = (w1 >> 23) & 1;
    in->soffset = (w1 >> 24) & 0xff;
    break;
  default:
    break;
  }
}

bool sg_decode(sg_target_t target, void *disasm, uint64_t pc, const uint8_t *bytes, size_t avail,
               sg_inst_t *out, char *err, size_t errcap) {
  memset(out, 0, sizeof(*out));
  out->pc = pc;
  if (avail < 4) {
    snprintf(err, errcap, "instruction at 0x%llx runs past the end of the code", (unsigned long long)pc);
    return false;
  }
  char text[160];
  size_t n = LLVMDisasmInstruction((LLVMDisasmContextRef)disasm, (uint8_t *)bytes, avail, pc, text, sizeof(text));
  if (n == 0 || n > 12 || (n & 3)) {
    snprintf(err, errcap, "undecodable instruction at 0x%llx (dword 0x%08x)", (unsigned long long)pc,
             (unsigned)(bytes[0] | bytes[1] << 8 | bytes[2] << 16 | (uint32_t)bytes[3] << 24));
    return false;
  }
  const char *p = text;
  while (*p == ' ' || *p == '\t') p++;
  size_t k = strcspn(p, " \t");
  if (k >= sizeof(out->mnem)) k = sizeof(out->mnem) - 1;
  memcpy(out->mnem, p, k);
  out->mnem[k] = 0;
  out->size = (uint8_t)n;
  uint32_t w[3] = {0, 0, 0};
  memcpy(w, bytes, n);
  out->w0 = w[0];
  out->w1 = w[1];
  out->fmt = (uint8_t)classify(w[0]);
  unsigned bs = base_size((sg_fmt_t)out->fmt, w[0]);
  if (n > bs) {
    out->has_lit = 1;
    out->lit = w[bs / 4];
  }
  if (bs == 4) out->w1 = 0;
  char base[48];
  base_name(out->mnem, base, sizeof(base));
  extract(out, base);
  out->desc = sg_op_lookup(base);
  out->fn = out->desc ? out->desc->fn : sg_unimplemented;
  (void)target;
  return true;
}

const sg_inst_t *sg_code_fetch(sg_code_t *code, uint64_t pc, char *err, size_t errcap) {
  if (pc < code->va || pc >= code->va + code->size || (pc & 3)) {
    snprintf(err, errcap, "the program counter 0x%llx is outside the loaded code [0x%llx, 0x%llx)",
             (unsigned long long)pc, (unsigned long long)code->va, (unsigned long long)(code->va + code->size));
    return NULL;
  }
  size_t slot = (size_t)((pc - code->va) >> 2);
  sg_inst_t *in = atomic_load_explicit(&code->slots[slot], memory_order_acquire);
  if (in) return in;
  pthread_mutex_lock(&code->lock);
  in = atomic_load_explicit(&code->slots[slot], memory_order_relaxed);
  if (!in) {
    sg_inst_t *d = malloc(sizeof(*d));
    if (!d) {
      snprintf(err, errcap, "out of memory decoding 0x%llx", (unsigned long long)pc);
    } else if (!sg_decode(code->target, code->disasm, pc, code->image + (pc - code->va),
                          (size_t)(code->va + code->size - pc), d, err, errcap)) {
      free(d);
    } else {
      /* release: another worker reads the slot without the lock */
      atomic_store_explicit(&code->slots[slot], d, memory_order_release);
      in = d;
    }
  }
  pthread_mutex_unlock(&code->lock);
  return in;
}

sg_code_t *sg_code_create(sg_target_t target, uint64_t va, const uint8_t *image, uint64_t size, char *err,
                          size_t errcap) {
  if (target != SG_GFX90A && target != SG_GFX942) {
    snprintf(err, errcap, "unknown softgpu target %d", (int)target);
    return NULL;
  }
  if (!image || size == 0 || (va & 3) || size > (1ull << 32)) {
    snprintf(err, errcap, "a code image needs bytes, a dword-aligned address and at most 4 GiB");
    return NULL;
  }
  sg_code_t *c = calloc(1, sizeof(*c));
  if (!c) goto oom;
  c->target = target;
  c->va = va;
  c->size = size;
  c->image = image;
  c->slots = calloc((size_t)(size / 4 + 1), sizeof(*c->slots));
  if (!c->slots) goto oom;
  c->disasm = sg_disasm_create(target);
  if (!c->disasm) {
    snprintf(err, errcap, "LLVM has no AMDGPU disassembler for %s", target == SG_GFX90A ? "gfx90a" : "gfx942");
    free(c->slots);
    free(c);
    return NULL;
  }
  pthread_mutex_init(&c->lock, NULL);
  return c;
oom:
  if (c) free(c);
  snprintf(err, errcap, "out of memory");
  return NULL;
}

void sg_code_destroy(sg_code_t *c) {
  if (!c) return;
  for (uint64_t i = 0; i < c->size / 4 + 1; i++) free(atomic_load(&c->slots[i]));
  free(c->slots);
  sg_disasm_destroy(c->disasm);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

/* ---- the opcode table ---------------------------------------------------------------------- */

static const sg_opdesc_t **sorted;
static size_t nsorted;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static int by_name(const void *a, const void *b) {
  return strcmp((*(const sg_opdesc_t *const *)a)->name, (*(const sg_opdesc_t *const *)b)->name);
}

static void table_init(void) {
  size_t n = sg_ops_salu_n + sg_ops_valu_n + sg_ops_mem_n;
  sorted = malloc(n * sizeof(*sorted));
  if (!sorted) return;
  for (size_t i = 0; i < sg_ops_salu_n; i++) sorted[nsorted++] = &sg_ops_salu[i];
  for (size_t i = 0; i < sg_ops_valu_n; i++) sorted[nsorted++] = &sg_ops_valu[i];
  for (size_t i = 0; i < sg_ops_mem_n; i++) sorted[nsorted++] = &sg_ops_mem[i];
  qsort(sorted, nsorted, sizeof(*sorted), by_name);
}

const sg_opdesc_t *sg_op_lookup(const char *base) {
  pthread_once(&table_once, table_init);
  sg_opdesc_t key = {.name = base};
  const sg_opdesc_t *kp = &key;
  const sg_opdesc_t **hit = bsearch(&kp, sorted, nsorted, sizeof(*sorted), by_name);
  return hit ? *hit : NULL;
}

size_t sg_op_count(void) {
  pthread_once(&table_once, table_init);
  return nsorted;
}

const sg_opdesc_t *sg_op_at(size_t i) {
  pthread_once(&table_once, table_init);
  return i < nsorted ? sorted[i] : NULL;
}
