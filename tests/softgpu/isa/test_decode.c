/* The decode check: every instruction of every gfx942 and gfx90a code object the suites build
 * (the conformance kernels, this folder's kernels, the te/topi corpus) decoded by the
 * interpreter (mnemonic and length from LLVM's disassembler, operands from the raw bits),
 * printed from the decoded fields, and compared with llvm-objdump's text. */
#include <criterion/criterion.h>
#include <elf.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/softgpu/isa/internal.h"
#include "protocol/artifact.h"
#include "tests/softgpu/isa/harness.h"

/* collapses runs of blanks, trims both ends */
static void squeeze(char *s) {
  char *w = s;
  bool blank = true;
  for (char *r = s; *r; r++) {
    bool b = *r == ' ' || *r == '\t';
    if (b && blank) continue;
    *w++ = b ? ' ' : *r;
    blank = b;
  }
  while (w > s && w[-1] == ' ') w--;
  *w = 0;
}

typedef struct stats {
  size_t insts, files, mismatches, unimplemented;
  char first[8][1400];
  char missing[600];
} stats_t;

static void check_object(const char *kart, sg_target_t t, void *disasm, stats_t *st) {
  size_t n;
  uint8_t *bytes = sgt_read_file(kart, &n);
  cr_assert(bytes, "%s", kart);
  cr_assert(memcmp(bytes, "KILN-COMPILE-FAILED", 19) != 0, "%s did not compile: %s", kart, bytes);
  kiln_artifact_t a;
  kiln_status_t s = kiln_artifact_decode(bytes, n, &a);
  cr_assert(!s, "%s", kart);
  free(bytes);
  char path[] = "/tmp/kiln-sgdec-XXXXXX.hsaco";
  int fd = mkstemps(path, 6);
  cr_assert(fd >= 0 && write(fd, a.code, a.code_size) == (ssize_t)a.code_size);
  close(fd);
  char cmd[1024];
  snprintf(cmd, sizeof(cmd), "%s/llvm-objdump -d --mcpu=%s %s", KILN_TEST_LLVM_BINDIR, t == SG_GFX90A ? "gfx90a" : "gfx942",
           path);
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)a.code;
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(a.code + eh->e_shoff);
  char line[560];
  while (fgets(line, sizeof(line), p)) {
    if (line[0] != '\t') continue;
    char *c = strstr(line, "// ");
    if (!c) continue;
    unsigned long long addr;
    if (sscanf(c + 3, "%llx:", &addr) != 1) continue;
    *c = 0;
    squeeze(line);
    /* the file bytes of that address */
    const uint8_t *ib = NULL;
    size_t avail = 0;
    for (int i = 0; i < eh->e_shnum; i++) {
      if (!(sh[i].sh_flags & SHF_EXECINSTR) || addr < sh[i].sh_addr || addr >= sh[i].sh_addr + sh[i].sh_size) continue;
      ib = a.code + sh[i].sh_offset + (addr - sh[i].sh_addr);
      avail = (size_t)(sh[i].sh_addr + sh[i].sh_size - addr);
    }
    cr_assert(ib, "%s: address 0x%llx is in no code section", kart, addr);
    sg_inst_t in;
    char err[200], mine[600];
    cr_assert(sg_decode(t, disasm, addr, ib, avail, &in, err, sizeof(err)), "%s: %s", kart, err);
    sg_inst_print(&in, t, mine, sizeof(mine));
    squeeze(mine);
    st->insts++;
    if (!in.desc) {
      /* an opcode of the corpus the interpreter would refuse to run */
      if (!strstr(st->missing, in.mnem) && strlen(st->missing) + strlen(in.mnem) + 2 < sizeof(st->missing))
        strcat(strcat(st->missing, " "), in.mnem);
      st->unimplemented++;
    }
    if (strcmp(mine, line) != 0) {
      if (st->mismatches < 8)
        snprintf(st->first[st->mismatches], sizeof(st->first[0]), "%s @0x%llx:\n  llvm: %s\n  mine: %s", kart, addr,
                 line, mine);
      st->mismatches++;
    }
  }
  cr_assert_eq(pclose(p), 0, "llvm-objdump failed on %s", kart);
  unlink(path);
  kiln_artifact_deinit(&a);
  st->files++;
}

static void check_target(sg_target_t t) {
  const char *name = t == SG_GFX90A ? "gfx90a" : "gfx942";
  void *disasm = sg_disasm_create(t);
  cr_assert(disasm);
  stats_t st;
  memset(&st, 0, sizeof(st));
  const char *dirs[] = {KILN_TEST_KART_DIR, KILN_TEST_OWN_KART_DIR};
  for (int d = 0; d < 2; d++) {
    char pat[600];
    snprintf(pat, sizeof(pat), "%s/*.%s.kart", dirs[d], name);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0) continue;
    for (size_t i = 0; i < g.gl_pathc; i++) check_object(g.gl_pathv[i], t, disasm, &st);
    globfree(&g);
  }
  sg_disasm_destroy(disasm);
  cr_log_info("%s: %zu instructions in %zu code objects, %zu differ", name, st.insts, st.files, st.mismatches);
  /* the conformance kernels alone are 11 objects; this folder adds its own and the te corpus */
  cr_assert_geq(st.files, 12, "%s: only %zu code objects found", name, st.files);
  cr_assert_eq(st.unimplemented, 0, "%s: %zu instructions of the corpus are not implemented:%s", name,
               st.unimplemented, st.missing);
  cr_assert_eq(st.mismatches, 0, "%s: %zu of %zu instructions decode differently from llvm-objdump, e.g.\n%s\n%s\n%s\n%s",
               name, st.mismatches, st.insts, st.first[0], st.first[1], st.first[2], st.first[3]);
}

Test(softgpu_decode, gfx942_agrees_with_llvm_objdump, .timeout = 300) { check_target(SG_GFX942); }
Test(softgpu_decode, gfx90a_agrees_with_llvm_objdump, .timeout = 300) { check_target(SG_GFX90A); }

/* The 194 opcodes SOFTGPU.md counts in kiln's kernels (both targets, every test suite and
 * the extra kernels of the survey): each has an implementation in the opcode table. The
 * corpus check above runs the ones the suites here build. */
static const char *const survey[] = {
  "buffer_load_dword", "buffer_store_dword", "ds_read2_b32", "ds_read2_b64", "ds_read2st64_b32", "ds_read_b128",
  "ds_read_b32", "ds_write2_b32", "ds_write2st64_b32", "ds_write2st64_b64", "ds_write_b16", "ds_write_b32",
  "ds_write_b64", "ds_write_b8", "flat_store_dword", "global_atomic_add", "global_load_dword", "global_load_dwordx2",
  "global_load_dwordx3", "global_load_dwordx4", "global_load_ubyte", "global_load_ushort", "global_store_byte",
  "global_store_dword", "global_store_dwordx2", "global_store_dwordx4", "global_store_short", "s_add_i32", "s_add_u32",
  "s_addc_u32", "s_addk_i32", "s_and_b32", "s_and_b64", "s_and_saveexec_b64", "s_andn2_b64", "s_andn2_saveexec_b64",
  "s_ashr_i32", "s_barrier", "s_branch", "s_brev_b32", "s_cbranch_execnz", "s_cbranch_execz", "s_cbranch_scc0",
  "s_cbranch_scc1", "s_cbranch_vccnz", "s_cbranch_vccz", "s_cmp_eq_u32", "s_cmp_eq_u64", "s_cmp_ge_i32",
  "s_cmp_gt_i32", "s_cmp_lg_u32", "s_cmp_lt_i32", "s_cmpk_eq_i32", "s_cselect_b64", "s_endpgm", "s_load_dword",
  "s_load_dwordx16", "s_load_dwordx2", "s_load_dwordx4", "s_load_dwordx8", "s_lshl_b32", "s_lshl_b64", "s_lshr_b32",
  "s_mov_b32", "s_mov_b64", "s_movk_i32", "s_mul_hi_i32", "s_mul_hi_u32", "s_mul_i32", "s_mulk_i32", "s_nop",
  "s_or_b64", "s_or_saveexec_b64", "s_orn2_b64", "s_set_gpr_idx_off", "s_set_gpr_idx_on", "s_sub_i32", "s_waitcnt",
  "s_xor_b64", "scratch_load_dword", "scratch_store_dword", "scratch_store_dwordx2", "scratch_store_dwordx3",
  "scratch_store_dwordx4", "v_accvgpr_read_b32", "v_accvgpr_write_b32", "v_add3_u32", "v_add_co_u32", "v_add_f32",
  "v_add_lshl_u32", "v_add_u16", "v_add_u32", "v_addc_co_u32", "v_alignbit_b32", "v_and_b32", "v_and_or_b32",
  "v_ashrrev_i32", "v_bfe_u32", "v_bfi_b32", "v_bfrev_b32", "v_cmp_class_f32", "v_cmp_eq_f32", "v_cmp_eq_u32",
  "v_cmp_eq_u64", "v_cmp_ge_f32", "v_cmp_ge_i32", "v_cmp_gt_f32", "v_cmp_gt_i32", "v_cmp_gt_i64", "v_cmp_gt_u32",
  "v_cmp_gt_u64", "v_cmp_le_i64", "v_cmp_le_u32", "v_cmp_lt_f32", "v_cmp_lt_i32", "v_cmp_lt_u32", "v_cmp_lt_u64",
  "v_cmp_ne_u16", "v_cmp_ne_u32", "v_cmp_ne_u64", "v_cmp_neq_f32", "v_cmp_ngt_f32", "v_cmp_nlg_f32", "v_cmp_nlt_f32",
  "v_cmp_o_f32", "v_cmp_u_f32", "v_cndmask_b32", "v_cvt_f32_i32", "v_cvt_f32_u32", "v_cvt_i32_f32", "v_cvt_u32_f32",
  "v_div_fixup_f32", "v_div_fmas_f32", "v_div_scale_f32", "v_exp_f32", "v_ffbh_u32", "v_floor_f32", "v_fma_f32",
  "v_fmaak_f32", "v_fmac_f32", "v_fmac_f64", "v_fmamk_f32", "v_fract_f32", "v_frexp_exp_i32_f32", "v_frexp_mant_f32",
  "v_ldexp_f32", "v_log_f32", "v_lshl_add_u32", "v_lshl_add_u64", "v_lshl_or_b32", "v_lshlrev_b16", "v_lshlrev_b32",
  "v_lshlrev_b64", "v_lshrrev_b16", "v_lshrrev_b32", "v_lshrrev_b64", "v_mad_i64_i32", "v_mad_legacy_u16",
  "v_mad_u32_u24", "v_mad_u64_u32", "v_max3_f32", "v_max_f32", "v_max_i32", "v_max_u32", "v_med3_i32", "v_med3_u32",
  "v_min_i32", "v_min_u32", "v_mov_b32", "v_mov_b64", "v_mul_f32", "v_mul_hi_u32", "v_mul_lo_u32", "v_mul_u32_u24",
  "v_not_b32", "v_or_b32", "v_pk_add_f32", "v_pk_fma_f16", "v_pk_fma_f32", "v_pk_mov_b32", "v_pk_mul_f32",
  "v_rcp_f32", "v_rcp_iflag_f32", "v_readlane_b32", "v_rndne_f32", "v_sqrt_f32", "v_sub_co_u32", "v_sub_f32",
  "v_sub_u32", "v_subbrev_co_u32", "v_subrev_u32", "v_trunc_f32", "v_writelane_b32", "v_xor_b32",
};

Test(softgpu_decode, every_surveyed_opcode_has_an_implementation) {
  size_t n = sizeof(survey) / sizeof(survey[0]);
  cr_assert_eq(n, 194);
  for (size_t i = 0; i < n; i++) cr_assert(sg_op_lookup(survey[i]), "%s has no implementation", survey[i]);
  cr_log_info("opcode table: %zu rows", sg_op_count());
}
