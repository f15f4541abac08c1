/* Faults and checks, each reported exactly: the address, the reason, the instruction and the
 * work-item; a dispatch after a fault runs normally; SOFTGPU_CHECK findings reach the warn
 * callback (asserted when the suite runs with SOFTGPU_CHECK=uninit,race, absent otherwise). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <elf.h>

#include "protocol/artifact.h"
#include "tests/softgpu/isa/asm.h"

static const sg_target_t targets[] = {SG_GFX942, SG_GFX90A};

static bool check_on(const char *what) {
  const char *c = getenv("SOFTGPU_CHECK");
  return c && strstr(c, what);
}

Test(softgpu_faults, out_of_bounds_store_then_the_next_launch_works) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "fault");
    uint64_t buf = sgt_alloc(&c, 4096, SG_ACC_READ | SG_ACC_WRITE);
    const int64_t off = 1ll << 28; /* 1 GiB past the buffer, in unmapped device space */
    sgt_arg_t args[] = {SGA_PTR(buf), SGA_I64(off)};
    uint32_t grid[3] = {4, 1, 1}, block[3] = {64, 1, 1};
    sg_report_t r;
    sg_status_t st = sgt_launch(&c, "fault", grid, block, 0, args, 2, &r);
    cr_assert_eq(st, SG_FAULT_MEMORY, "%s: status %d: %s", sgt_target_name(targets[t]), (int)st, r.message);
    cr_assert_eq(r.status, SG_FAULT_MEMORY);
    cr_assert_eq(r.fault_reason, SG_FAULT_PAGE_NOT_PRESENT);
    /* the first faulting lane of the group that stopped the dispatch */
    uint64_t want = buf + (uint64_t)off * 4 + 4ull * (r.group[0] * 64 + r.item[0]);
    cr_assert_eq(r.address, want, "%s: address 0x%llx, want 0x%llx", sgt_target_name(targets[t]),
                 (unsigned long long)r.address, (unsigned long long)want);
    cr_assert(strstr(r.message, "flat_store_dword") || strstr(r.message, "global_store_dword"), "%s", r.message);
    cr_assert(strstr(r.message, "no allocation"), "%s", r.message);
    cr_assert(r.pc >= c.image_va && r.pc < c.image_va + c.image_size);
    cr_assert_eq(r.item[1], 0);
    /* the same context runs a correct launch afterwards */
    sgt_load_kart(&c, "vadd");
    float a[64], b[64], o[64];
    for (int i = 0; i < 64; i++) a[i] = (float)i, b[i] = 1.0f;
    uint64_t va = sgt_upload(&c, a, sizeof(a)), vb = sgt_upload(&c, b, sizeof(b));
    uint64_t vo = sgt_alloc(&c, sizeof(o), SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t vargs[] = {SGA_PTR(va), SGA_PTR(vb), SGA_PTR(vo), SGA_I32(64)};
    uint32_t one[3] = {1, 1, 1};
    sgt_run(&c, "vadd", one, block, 0, vargs, 4);
    sgt_download(&c, vo, o, sizeof(o));
    for (int i = 0; i < 64; i++) cr_assert_eq(o[i], (float)i + 1.0f);
    sgt_deinit(&c);
  }
}

Test(softgpu_faults, write_to_code_is_read_only) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "vadd");
    float a[64] = {0};
    uint64_t va = sgt_upload(&c, a, sizeof(a));
    /* the output pointer aims at the loaded code object */
    sgt_arg_t args[] = {SGA_PTR(va), SGA_PTR(va), SGA_PTR(c.image_va + 0x100), SGA_I32(64)};
    uint32_t one[3] = {1, 1, 1}, block[3] = {64, 1, 1};
    sg_report_t r;
    cr_assert_eq(sgt_launch(&c, "vadd", one, block, 0, args, 4, &r), SG_FAULT_MEMORY, "%s", r.message);
    cr_assert_eq(r.fault_reason, SG_FAULT_READ_ONLY, "%s", r.message);
    cr_assert_eq(r.address, c.image_va + 0x100, "0x%llx", (unsigned long long)r.address);
    cr_assert_eq(r.item[0], 0);
    cr_assert(strstr(r.message, "read-only"), "%s", r.message);
    sgt_deinit(&c);
  }
}

Test(softgpu_faults, read_of_unallocated_memory) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "vadd");
    uint64_t o = sgt_alloc(&c, 256, SG_ACC_READ | SG_ACC_WRITE);
    uint64_t ok = sgt_alloc(&c, 256, SG_ACC_READ | SG_ACC_WRITE);
    /* a: 64 floats, but only 32 of them allocated: work-item 32 reads past the end */
    uint64_t small = sgt_alloc(&c, 128, SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t args[] = {SGA_PTR(small), SGA_PTR(ok), SGA_PTR(o), SGA_I32(64)};
    uint32_t one[3] = {1, 1, 1}, block[3] = {64, 1, 1};
    sg_report_t r;
    cr_assert_eq(sgt_launch(&c, "vadd", one, block, 0, args, 4, &r), SG_FAULT_MEMORY, "%s", r.message);
    cr_assert_eq(r.fault_reason, SG_FAULT_PAGE_NOT_PRESENT);
    cr_assert_eq(r.item[0], 32, "%s", r.message);
    cr_assert_eq(r.address, small + 128, "0x%llx", (unsigned long long)r.address);
    cr_assert(strstr(r.message, "read of 4 bytes"), "%s", r.message);
    sgt_deinit(&c);
  }
}

Test(softgpu_faults, lds_overrun) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "reduce");
    int in[256] = {0}, part[1];
    uint64_t vi = sgt_upload(&c, in, sizeof(in)), vp = sgt_alloc(&c, sizeof(part), SG_ACC_READ | SG_ACC_WRITE);
    sgt_arg_t args[] = {SGA_PTR(vi), SGA_PTR(vp), SGA_I32(256)};
    uint32_t one[3] = {1, 1, 1}, block[3] = {256, 1, 1};
    /* the kernel keeps 1024 bytes of LDS; the packet grants 512 */
    c.lds_override = 512;
    sg_report_t r;
    cr_assert_eq(sgt_launch(&c, "reduce_sum", one, block, 0, args, 3, &r), SG_ERR_LDS_RANGE, "%s", r.message);
    cr_assert_eq(r.address, 512, "LDS offset %llu", (unsigned long long)r.address);
    cr_assert_eq(r.item[0], 128, "%s", r.message);
    cr_assert(strstr(r.message, "ds_write_b32"), "%s", r.message);
    sgt_deinit(&c);
  }
}

Test(softgpu_faults, unimplemented_instruction_is_named) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_asm_opts_t o = SGT_ASM_DEFAULT;
    sgt_asm_load(&c, "v_sad_u16 v8, v2, v4, v6", &o);
    uint64_t z[64] = {0}, d[64], vcc;
    sg_report_t r;
    cr_assert_eq(sgt_asm_run(&c, z, z, z, d, &vcc, &r), SG_ERR_UNIMPLEMENTED);
    cr_assert(strstr(r.message, "v_sad_u16"), "%s", r.message);
    char at[32];
    snprintf(at, sizeof(at), "0x%llx", (unsigned long long)r.pc);
    cr_assert(strstr(r.message, at), "%s does not name %s", r.message, at);
    sgt_deinit(&c);
  }
}

Test(softgpu_faults, flat_address_outside_every_aperture) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "fault");
    sgt_arg_t args[] = {SGA_PTR(0x0000900000000000ull), SGA_I64(0)};
    uint32_t one[3] = {1, 1, 1}, block[3] = {64, 1, 1};
    sg_report_t r;
    cr_assert_eq(sgt_launch(&c, "fault", one, block, 0, args, 2, &r), SG_FAULT_APERTURE, "%s", r.message);
    cr_assert_eq(r.address, 0x0000900000000000ull);
    sgt_deinit(&c);
  }
}

Test(softgpu_checks, uninitialised_read) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "vadd");
    float a[64] = {0};
    uint64_t va = sgt_upload(&c, a, sizeof(a));
    uint64_t vb = sgt_alloc(&c, sizeof(a), SG_ACC_READ | SG_ACC_WRITE); /* never written */
    uint64_t vo = sgt_alloc(&c, sizeof(a), SG_ACC_READ | SG_ACC_WRITE);
    sgt_track_init(&c, va);
    sgt_mark_init(&c, va, sizeof(a));
    sgt_track_init(&c, vb);
    sgt_track_init(&c, vo);
    sgt_arg_t args[] = {SGA_PTR(va), SGA_PTR(vb), SGA_PTR(vo), SGA_I32(64)};
    uint32_t one[3] = {1, 1, 1}, block[3] = {64, 1, 1};
    sgt_run(&c, "vadd", one, block, 0, args, 4);
    if (check_on("uninit")) {
      cr_assert_geq(c.nwarnings, 1, "no uninitialised-read report");
      char addr[32];
      snprintf(addr, sizeof(addr), "0x%llx", (unsigned long long)vb);
      cr_assert(strstr(c.warnings[0], "uninitialised read") && strstr(c.warnings[0], addr), "%s", c.warnings[0]);
      cr_assert(strstr(c.warnings[0], "work-item 0,0,0") && strstr(c.warnings[0], "global_load_dword"), "%s",
                c.warnings[0]);
      /* the output's bytes are written now: reading them back is clean */
      int before = c.nwarnings;
      sgt_arg_t again[] = {SGA_PTR(vo), SGA_PTR(va), SGA_PTR(vo), SGA_I32(64)};
      sgt_run(&c, "vadd", one, block, 0, again, 4);
      cr_assert_eq(c.nwarnings, before, "%s", c.warnings[before < 16 ? before : 15]);
    } else {
      cr_assert_eq(c.nwarnings, 0, "a report without SOFTGPU_CHECK: %s", c.warnings[0]);
    }
    sgt_deinit(&c);
  }
}

/* Two waves of one group store to the same LDS dword with no barrier between. */
static const char race_kernel[] =
  ".amdgcn_target \"amdgcn-amd-amdhsa--%s\"\n"
  ".text\n.globl r\n.p2align 8\n.type r,@function\nr:\n"
  "  v_mov_b32 v1, 0\n"
  "  v_mov_b32 v2, 7\n"
  "  ds_write_b32 v1, v2\n"
  "  s_waitcnt lgkmcnt(0)\n"
  "  s_barrier\n"
  "  ds_read_b32 v3, v1\n"
  "  s_endpgm\n"
  ".rodata\n.p2align 6\n"
  ".amdhsa_kernel r\n"
  "  .amdhsa_group_segment_fixed_size 256\n"
  "  .amdhsa_next_free_vgpr 8\n  .amdhsa_next_free_sgpr 8\n  .amdhsa_accum_offset 8\n"
  ".end_amdhsa_kernel\n"
  ".amdgpu_metadata\n---\namdhsa.version: [ 1, 2 ]\namdhsa.kernels:\n"
  "  - .name: r\n    .symbol: r.kd\n    .kernarg_segment_size: 0\n    .kernarg_segment_align: 8\n"
  "    .group_segment_fixed_size: 256\n    .private_segment_fixed_size: 0\n    .wavefront_size: 64\n"
  "    .sgpr_count: 8\n    .vgpr_count: 8\n    .max_flat_workgroup_size: 128\n"
  ".end_amdgpu_metadata\n";

Test(softgpu_checks, lds_race_between_waves) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    char text[sizeof(race_kernel) + 32];
    snprintf(text, sizeof(text), race_kernel, sgt_target_name(targets[t]));
    sgt_asm_load_text(&c, text);
    uint32_t one[3] = {1, 1, 1}, block[3] = {128, 1, 1};
    sgt_run(&c, "r", one, block, 0, NULL, 0);
    if (check_on("race")) {
      cr_assert_eq(c.nwarnings, 1, "want one race report, got %d", c.nwarnings);
      cr_assert(strstr(c.warnings[0], "LDS race") && strstr(c.warnings[0], "ds_write_b32") &&
                strstr(c.warnings[0], "work-item 64,0,0"), "%s", c.warnings[0]);
    } else {
      cr_assert_eq(c.nwarnings, 0, "%s", c.warnings[0]);
    }
    /* with one wave there is no one to race with */
    sgt_init(&c, targets[t]);
    sgt_asm_load_text(&c, text);
    uint32_t b64[3] = {64, 1, 1};
    sgt_run(&c, "r", one, b64, 0, NULL, 0);
    cr_assert_eq(c.nwarnings, 0, "%s", c.warnings[0]);
    sgt_deinit(&c);
  }
}

/* Hostile code: vadd with bits flipped in its instructions, then with its code replaced by
 * random dwords. Whatever the bytes say, the dispatch ends with a status and a message (a
 * fault, an undecodable or unimplemented instruction, the instruction budget), never a crash
 * of the process the interpreter lives in (the suite also runs under ASan and UBSan). */
Test(softgpu_faults, hostile_code_ends_with_a_status, .timeout = 300) {
  for (int t = 0; t < 2; t++) {
    char path[600];
    snprintf(path, sizeof(path), "%s/vadd.%s.kart", KILN_TEST_KART_DIR, sgt_target_name(targets[t]));
    size_t n;
    uint8_t *bytes = sgt_read_file(path, &n);
    cr_assert(bytes, "%s", path);
    kiln_artifact_t a;
    kiln_status_t s = kiln_artifact_decode(bytes, n, &a);
    cr_assert(!s);
    free(bytes);
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)a.code;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(a.code + eh->e_shoff);
    size_t text = 0, text_size = 0;
    for (int i = 0; i < eh->e_shnum; i++)
      if (sh[i].sh_flags & SHF_EXECINSTR) text = sh[i].sh_offset, text_size = sh[i].sh_size;
    cr_assert(text_size >= 64);
    uint8_t *elf = malloc(a.code_size);
    cr_assert(elf);
    unsigned seed = 77 + (unsigned)t;
    int outcomes[8] = {0};
    for (int trial = 0; trial < 120; trial++) {
      memcpy(elf, a.code, a.code_size);
      if (trial < 80) {
        for (int f = 0; f < 1 + trial % 3; f++) {
          size_t at = text + (size_t)rand_r(&seed) % (text_size < 0x90 ? text_size : 0x90);
          elf[at] ^= (uint8_t)(1u << (rand_r(&seed) % 8));
        }
      } else {
        for (size_t i = 0; i < text_size; i++) elf[text + i] = (uint8_t)rand_r(&seed);
      }
      sgt_ctx_t c;
      sgt_init(&c, targets[t]);
      sgt_load_elf(&c, elf, a.code_size);
      c.max_instructions = 20000;
      float x[256] = {0};
      uint64_t va = sgt_upload(&c, x, sizeof(x)), vo = sgt_alloc(&c, sizeof(x), SG_ACC_READ | SG_ACC_WRITE);
      sgt_arg_t args[] = {SGA_PTR(va), SGA_PTR(va), SGA_PTR(vo), SGA_I32(256)};
      uint32_t grid[3] = {2, 1, 1}, block[3] = {128, 1, 1};
      sg_report_t r;
      sg_status_t st = sgt_launch(&c, "vadd", grid, block, 0, args, 4, &r);
      cr_assert(st == SG_OK || st == SG_FAULT_MEMORY || st == SG_FAULT_APERTURE || st == SG_ERR_LDS_RANGE ||
                st == SG_ERR_UNIMPLEMENTED || st == SG_ERR_ILLEGAL || st == SG_ERR_BUDGET,
                "%s trial %d: status %d", sgt_target_name(targets[t]), trial, (int)st);
      cr_assert_eq(r.status, st);
      if (st != SG_OK) cr_assert(r.message[0], "%s trial %d: status %d without a message", sgt_target_name(targets[t]), trial, (int)st);
      outcomes[st < 8 ? st : 7]++;
      sgt_deinit(&c);
    }
    cr_log_info("%s: ok %d, memory %d, aperture %d, lds %d, unimplemented %d, illegal %d, budget %d",
                sgt_target_name(targets[t]), outcomes[SG_OK], outcomes[SG_FAULT_MEMORY], outcomes[SG_FAULT_APERTURE],
                outcomes[SG_ERR_LDS_RANGE], outcomes[SG_ERR_UNIMPLEMENTED], outcomes[SG_ERR_ILLEGAL],
                outcomes[SG_ERR_BUDGET] + outcomes[7]);
    /* random bytes must have stopped somewhere other than a clean end at least once */
    cr_assert_lt(outcomes[SG_OK], 120);
    free(elf);
    kiln_artifact_deinit(&a);
  }
}

Test(softgpu_faults, descriptors_that_cannot_run_are_refused) {
  for (int t = 0; t < 2; t++) {
    sgt_ctx_t c;
    sgt_init(&c, targets[t]);
    sgt_load_kart(&c, "vadd");
    sgt_kernel_t *k = (sgt_kernel_t *)sgt_kernel(&c, "vadd");
    uint8_t *kd = c.image + (k->kd_va - c.image_va);
    float x[64] = {0};
    uint64_t va = sgt_upload(&c, x, sizeof(x));
    sgt_arg_t args[] = {SGA_PTR(va), SGA_PTR(va), SGA_PTR(va), SGA_I32(64)};
    uint32_t one[3] = {1, 1, 1}, block[3] = {64, 1, 1};
    sg_report_t r;
    /* these edits precede the first dispatch: nothing of the image is decoded yet */
    kd[57] |= 1u << 2; /* kernel_code_properties bit 10: wavefront size 32 */
    cr_assert_eq(sgt_launch(&c, "vadd", one, block, 0, args, 4, &r), SG_ERR_ILLEGAL);
    cr_assert(strstr(r.message, "wave32"), "%s", r.message);
    kd[57] &= (uint8_t)~(1u << 2);
    kd[58] = 2; /* kernarg preload of 2 dwords */
    cr_assert_eq(sgt_launch(&c, "vadd", one, block, 0, args, 4, &r), SG_ERR_ILLEGAL);
    cr_assert(strstr(r.message, "preload"), "%s", r.message);
    kd[58] = 0;
    int64_t far = 1ll << 40;
    memcpy(kd + 16, &far, 8); /* the entry far outside the image */
    cr_assert_eq(sgt_launch(&c, "vadd", one, block, 0, args, 4, &r), SG_ERR_ILLEGAL);
    cr_assert(strstr(r.message, "outside the code image"), "%s", r.message);
    /* a kernel object that is no descriptor of this image */
    k->kd_va = c.image_va + c.image_size + 64;
    cr_assert_eq(sgt_launch(&c, "vadd", one, block, 0, args, 4, &r), SG_ERR_ILLEGAL);
    cr_assert(strstr(r.message, "kernel descriptor"), "%s", r.message);
    sgt_deinit(&c);
  }
}
