#include "tests/softgpu/isa/asm.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char frame_head[] =
  ".amdgcn_target \"amdgcn-amd-amdhsa--%s\"\n"
  ".text\n.globl k\n.p2align 8\n.type k,@function\nk:\n"
  "  s_load_dwordx8 s[4:11], s[0:1], 0x0\n"
  "  s_load_dwordx2 s[12:13], s[0:1], 0x20\n"
  "  v_lshlrev_b32 v1, 3, v0\n"
  "  s_waitcnt lgkmcnt(0)\n"
  "  global_load_dwordx2 v[2:3], v1, s[4:5]\n"
  "  global_load_dwordx2 v[4:5], v1, s[6:7]\n"
  "  global_load_dwordx2 v[6:7], v1, s[8:9]\n"
  "  s_waitcnt vmcnt(0)\n"
  "  v_mov_b32 v8, 0\n  v_mov_b32 v9, 0\n  s_mov_b64 vcc, 0\n";

static const char frame_tail[] =
  "  v_cndmask_b32 v10, 0, 1, vcc\n"
  "  v_mov_b32 v11, 0\n"
  "  global_store_dwordx2 v1, v[8:9], s[10:11]\n"
  "  global_store_dwordx2 v1, v[10:11], s[12:13]\n"
  "  s_endpgm\n"
  ".rodata\n.p2align 6\n"
  ".amdhsa_kernel k\n"
  "  .amdhsa_user_sgpr_kernarg_segment_ptr 1\n"
  "  .amdhsa_kernarg_size 40\n"
  "  .amdhsa_next_free_vgpr 32\n"
  "  .amdhsa_next_free_sgpr 40\n"
  "  .amdhsa_accum_offset 32\n"
  "  .amdhsa_float_denorm_mode_32 %d\n"
  "  .amdhsa_float_denorm_mode_16_64 %d\n"
  "  .amdhsa_float_round_mode_32 %d\n"
  "  .amdhsa_ieee_mode %d\n"
  ".end_amdhsa_kernel\n"
  ".amdgpu_metadata\n"
  "---\n"
  "amdhsa.version: [ 1, 2 ]\n"
  "amdhsa.kernels:\n"
  "  - .name: k\n"
  "    .symbol: k.kd\n"
  "    .kernarg_segment_size: 40\n"
  "    .kernarg_segment_align: 8\n"
  "    .group_segment_fixed_size: 0\n"
  "    .private_segment_fixed_size: 0\n"
  "    .wavefront_size: 64\n"
  "    .sgpr_count: 40\n"
  "    .vgpr_count: 32\n"
  "    .max_flat_workgroup_size: 64\n"
  "    .args:\n"
  "      - { .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }\n"
  "      - { .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }\n"
  "      - { .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global }\n"
  "      - { .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global }\n"
  "      - { .offset: 32, .size: 8, .value_kind: global_buffer, .address_space: global }\n"
  ".end_amdgpu_metadata\n";

static int run(const char *cmd, char *out, size_t cap) {
  FILE *f = popen(cmd, "r");
  cr_assert(f, "popen %s", cmd);
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = 0;
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void sgt_asm_load_text(sgt_ctx_t *c, const char *text) {
  char src[] = "/tmp/kiln-sgasm-XXXXXX.s";
  int fd = mkstemps(src, 2);
  cr_assert(fd >= 0);
  cr_assert(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
  char obj[64], so[64], cmd[1024], log[4096];
  snprintf(obj, sizeof(obj), "%.*s.o", (int)strlen(src) - 2, src);
  snprintf(so, sizeof(so), "%.*s.hsaco", (int)strlen(src) - 2, src);
  snprintf(cmd, sizeof(cmd), "%s/llvm-mc -triple amdgcn-amd-amdhsa -mcpu=%s -filetype=obj %s -o %s 2>&1 && %s/ld.lld -shared %s -o %s 2>&1",
           KILN_TEST_LLVM_BINDIR, sgt_target_name(c->target), src, obj, KILN_TEST_LLVM_BINDIR, obj, so);
  int rc = run(cmd, log, sizeof(log));
  unlink(src);
  unlink(obj);
  cr_assert_eq(rc, 0, "assembling for %s failed: %s\n%s", sgt_target_name(c->target), log, text);
  size_t n;
  uint8_t *buf = sgt_read_file(so, &n);
  cr_assert(buf, "ld.lld wrote no %s", so);
  unlink(so);
  sgt_load_elf(c, buf, n);
  free(buf);
}

void sgt_asm_load(sgt_ctx_t *c, const char *body, const sgt_asm_opts_t *o) {
  size_t cap = strlen(body) + sizeof(frame_head) + sizeof(frame_tail) + 256;
  char *text = malloc(cap);
  cr_assert(text);
  int n = snprintf(text, cap, frame_head, sgt_target_name(c->target));
  n += snprintf(text + n, cap - (size_t)n, "%s\n", body);
  snprintf(text + n, cap - (size_t)n, frame_tail, o->denorm32, o->denorm64, o->round32, o->ieee);
  sgt_asm_load_text(c, text);
  free(text);
}

sg_status_t sgt_asm_run(sgt_ctx_t *c, const uint64_t a[64], const uint64_t b[64], const uint64_t cc[64],
                        uint64_t d[64], uint64_t *vcc, sg_report_t *rep) {
  uint64_t va = sgt_upload(c, a, 512), vb = sgt_upload(c, b, 512), vc = sgt_upload(c, cc, 512);
  uint64_t vd = sgt_alloc(c, 512, SG_ACC_READ | SG_ACC_WRITE), vv = sgt_alloc(c, 512, SG_ACC_READ | SG_ACC_WRITE);
  sgt_arg_t args[] = {SGA_PTR(va), SGA_PTR(vb), SGA_PTR(vc), SGA_PTR(vd), SGA_PTR(vv)};
  uint32_t one[3] = {1, 1, 1}, block[3] = {64, 1, 1};
  sg_status_t st = sgt_launch(c, "k", one, block, 0, args, 5, rep);
  if (st == SG_OK) {
    sgt_download(c, vd, d, 512);
    uint64_t bits[64];
    sgt_download(c, vv, bits, 512);
    *vcc = 0;
    for (int l = 0; l < 64; l++) *vcc |= (bits[l] & 1) << l;
  }
  return st;
}
