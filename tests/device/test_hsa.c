/* The parts of the hsa backend that need no GPU: target ids, fault text, pool choice,
 * status mapping, AQL packets, kernarg packing, and the probe's reason on this host. */
#include <criterion/criterion.h>
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <string.h>

#include "device/hsa/fault.h"
#include "device/hsa/kernarg.h"
#include "device/hsa/packet.h"
#include "device/hsa/pools.h"
#include "device/hsa/status.h"
#include "device/hsa/target.h"

static bool compat(const char *code, const char *agent, char *why) {
  return kiln_hsa_target_compatible(code, agent, why, 256);
}

Test(hsa_target, strips_the_isa_prefix) {
  char out[96];
  kiln_hsa_target_from_isa("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", out, sizeof out);
  cr_expect_str_eq(out, "gfx90a:sramecc+:xnack-");
  kiln_hsa_target_from_isa("gfx1030", out, sizeof out);
  cr_expect_str_eq(out, "gfx1030");
}

Test(hsa_target, matches_like_rocr) {
  char why[256];
  cr_expect(compat("gfx90a", "gfx90a:sramecc+:xnack-", why), "bare processor means any");
  cr_expect(compat("gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack-", why));
  cr_expect(compat("gfx90a:xnack-", "gfx90a:sramecc+:xnack-", why), "unset sramecc means any");
  cr_expect(compat("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", "gfx942:sramecc+:xnack-", why));
  cr_expect_not(compat("gfx90a:xnack+", "gfx90a:sramecc+:xnack-", why));
  cr_expect(strstr(why, "xnack+") && strstr(why, "xnack-"), "%s", why);
  cr_expect_not(compat("gfx908", "gfx90a:sramecc+:xnack-", why));
  cr_expect(strstr(why, "gfx908") && strstr(why, "gfx90a"), "%s", why);
  cr_expect_not(compat("gfx90", "gfx90a", why), "processor names compare whole");
  cr_expect_not(compat("gfx1030:xnack-", "gfx1030", why), "the agent has no xnack setting");
  cr_expect_not(compat("gfx90a:xnack", "gfx90a:xnack-", why), "malformed feature");
}

Test(hsa_fault, names_each_reason) {
  char out[256];
  cr_expect_str_eq(kiln_hsa_fault_reason(HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT, out, sizeof out),
                   "page not present or supervisor privilege");
  kiln_hsa_fault_reason(HSA_AMD_MEMORY_FAULT_READ_ONLY | HSA_AMD_MEMORY_FAULT_IMPRECISE, out, sizeof out);
  cr_expect_str_eq(out, "write to a read-only page, imprecise fault (address may be inexact)");
  kiln_hsa_fault_reason(HSA_AMD_MEMORY_FAULT_HANG | (1u << 9), out, sizeof out);
  cr_expect_str_eq(out, "GPU hang, unknown reason (mask 0x200)");
  char tiny[8];
  kiln_hsa_fault_reason(0xFF, tiny, sizeof tiny);
  cr_expect_eq(strlen(tiny), 7, "truncates within cap");
}

Test(hsa_pools, picks_roles) {
  uint32_t G = HSA_AMD_SEGMENT_GLOBAL;
  cr_expect_eq(kiln_hsa_pool_role(true, G, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, true),
               KILN_HSA_POOL_DEVICE);
  cr_expect_eq(kiln_hsa_pool_role(true, G, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, true),
               KILN_HSA_POOL_NONE, "fine VRAM (XGMI) is not for tensors");
  cr_expect_eq(kiln_hsa_pool_role(true, HSA_AMD_SEGMENT_GROUP, 0, false), KILN_HSA_POOL_NONE);
  cr_expect_eq(kiln_hsa_pool_role(false, G,
                                  HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED |
                                      HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT,
                                  true),
               KILN_HSA_POOL_KERNARG);
  cr_expect_eq(kiln_hsa_pool_role(false, G, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, true),
               KILN_HSA_POOL_HOST_FINE);
  cr_expect_eq(kiln_hsa_pool_role(false, G, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, true),
               KILN_HSA_POOL_NONE);
  cr_expect_eq(kiln_hsa_pool_role(true, G, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, false),
               KILN_HSA_POOL_NONE, "runtime allocation not allowed");
}

Test(hsa_status, maps_codes) {
  cr_expect_eq(kiln_hsa_status_code(HSA_STATUS_ERROR_OUT_OF_RESOURCES), KILN_E_RESOURCE_EXHAUSTED);
  cr_expect_eq(kiln_hsa_status_code(HSA_STATUS_ERROR_INVALID_CODE_OBJECT), KILN_E_INVALID_ARGUMENT);
  cr_expect_eq(kiln_hsa_status_code((hsa_status_t)HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION),
               KILN_E_DEVICE_FAULT);
  cr_expect_eq(kiln_hsa_status_code(HSA_STATUS_ERROR_EXCEPTION), KILN_E_DEVICE_FAULT);
  cr_expect_eq(kiln_hsa_status_code((hsa_status_t)0x7777), KILN_E_DEVICE);
  char buf[32];
  cr_expect_str_eq(kiln_hsa_status_name(HSA_STATUS_ERROR_INVALID_ISA, buf, sizeof buf),
                   "HSA_STATUS_ERROR_INVALID_ISA");
  cr_expect_str_eq(kiln_hsa_status_name((hsa_status_t)0x7777, buf, sizeof buf), "HSA_STATUS_0x7777");
  kiln_status_t s = kiln_hsa_error(HSA_STATUS_ERROR_OUT_OF_RESOURCES, "f.c", 1, "hsa_init()");
  cr_expect_eq(kiln_status_code(s), KILN_E_RESOURCE_EXHAUSTED);
  cr_expect(strstr(kiln_status_message(s), "hsa_init() failed: HSA_STATUS_ERROR_OUT_OF_RESOURCES"),
            "%s", kiln_status_message(s));
  kiln_status_free(s);
}

static kiln_kernel_t dummy_kernel = {.name = "k"};

Test(hsa_packet, fills_body_and_header) {
  _Alignas(64) hsa_kernel_dispatch_packet_t p;
  memset(&p, 0xAB, sizeof p);
  p.header = HSA_PACKET_TYPE_INVALID;
  kiln_launch_t l = {.kernel = &dummy_kernel, .grid = {10, 3, 1}, .block = {64, 2, 1}, .dims = 2, .shared = 512};
  kiln_hsa_kernel_code_t code = {.kernel_object = 0xDEADBEEF000, .group_segment_size = 1024,
                                 .private_segment_size = 48};
  hsa_signal_t sig = {.handle = 0x1234};
  char kernarg[16] = {0};
  uint32_t hs = 0;
  cr_assert_eq(kiln_hsa_packet_fill(&p, &l, &code, kernarg, sig, &hs), KILN_OK);
  cr_expect_eq(p.header, HSA_PACKET_TYPE_INVALID, "the header is left to the release store");
  cr_expect_eq(p.setup, 0xABAB, "nor is setup written early");
  cr_expect_eq(p.workgroup_size_x, 64);
  cr_expect_eq(p.workgroup_size_y, 2);
  cr_expect_eq(p.workgroup_size_z, 1);
  cr_expect_eq(p.grid_size_x, 640, "grid sizes are work-items");
  cr_expect_eq(p.grid_size_y, 6);
  cr_expect_eq(p.grid_size_z, 1);
  cr_expect_eq(p.group_segment_size, 1536, "static + dynamic LDS");
  cr_expect_eq(p.private_segment_size, 48);
  cr_expect_eq(p.kernel_object, 0xDEADBEEF000);
  cr_expect_eq(p.kernarg_address, kernarg);
  cr_expect_eq(p.completion_signal.handle, 0x1234);
  cr_expect_eq(p.reserved0, 0);
  cr_expect_eq(p.reserved2, 0);
  uint16_t header = hs & 0xFFFF, setup = hs >> 16;
  cr_expect_eq((header >> HSA_PACKET_HEADER_TYPE) & 0xFF, HSA_PACKET_TYPE_KERNEL_DISPATCH);
  cr_expect_eq((header >> HSA_PACKET_HEADER_BARRIER) & 1, 1);
  cr_expect_eq((header >> HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) & 3, HSA_FENCE_SCOPE_SYSTEM);
  cr_expect_eq((header >> HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 3, HSA_FENCE_SCOPE_SYSTEM);
  cr_expect_eq(setup, 2, "setup holds the dimension count");
  kiln_hsa_packet_publish(&p, hs);
  cr_expect_eq(p.header, header);
  cr_expect_eq(p.setup, setup);
}

Test(hsa_packet, refuses_grids_past_32_bits) {
  hsa_kernel_dispatch_packet_t p;
  kiln_launch_t l = {.kernel = &dummy_kernel, .grid = {1u << 23, 1, 1}, .block = {1024, 1, 1}, .dims = 1};
  kiln_hsa_kernel_code_t code = {0};
  uint32_t hs;
  kiln_status_t s = kiln_hsa_packet_fill(&p, &l, &code, NULL, (hsa_signal_t){0}, &hs);
  cr_assert(s);
  cr_expect_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
  kiln_status_free(s);
}

/* A v5 table as the compiler writes it for `void k(float *out, int n)` that reads its
 * local size: explicit args, then the hidden block at 16 (offsets of LLVM's COV5 layout). */
static kiln_kernel_arg_t v5_args[] = {
    {.name = "out", .type = KILN_ARG_PTR, .offset = 0, .size = 8},
    {.name = "n", .type = KILN_ARG_I32, .offset = 8, .size = 4},
    {.hidden = KILN_HIDDEN_BLOCK_COUNT_X, .offset = 16, .size = 4},
    {.hidden = KILN_HIDDEN_BLOCK_COUNT_Y, .offset = 20, .size = 4},
    {.hidden = KILN_HIDDEN_BLOCK_COUNT_Z, .offset = 24, .size = 4},
    {.hidden = KILN_HIDDEN_GROUP_SIZE_X, .offset = 28, .size = 2},
    {.hidden = KILN_HIDDEN_GROUP_SIZE_Y, .offset = 30, .size = 2},
    {.hidden = KILN_HIDDEN_GROUP_SIZE_Z, .offset = 32, .size = 2},
    {.hidden = KILN_HIDDEN_REMAINDER_X, .offset = 34, .size = 2},
    {.hidden = KILN_HIDDEN_REMAINDER_Y, .offset = 36, .size = 2},
    {.hidden = KILN_HIDDEN_REMAINDER_Z, .offset = 38, .size = 2},
    {.hidden = KILN_HIDDEN_GLOBAL_OFFSET_X, .offset = 56, .size = 8},
    {.hidden = KILN_HIDDEN_GRID_DIMS, .offset = 80, .size = 2},
    {.hidden = KILN_HIDDEN_OTHER, .offset = 96, .size = 8},
    {.hidden = KILN_HIDDEN_DYNAMIC_LDS_SIZE, .offset = 136, .size = 4},
    {.hidden = KILN_HIDDEN_PRIVATE_BASE, .offset = 208, .size = 4},
    {.hidden = KILN_HIDDEN_SHARED_BASE, .offset = 212, .size = 4},
    {.hidden = KILN_HIDDEN_QUEUE_PTR, .offset = 216, .size = 8},
};

static kiln_kernel_t v5_kernel = {.name = "k", .num_args = 2, .num_hidden = 16, .args = v5_args,
                                  .kernarg_size = 272, .kernarg_align = 8};

static uint64_t rd(const uint8_t *p, uint32_t size) {
  uint64_t v = 0;
  memcpy(&v, p, size);
  return v;
}

Test(hsa_kernarg, packs_explicit_and_hidden_arguments) {
  uint64_t out = 0x7F0000001000;
  int32_t n = -7;
  void *args[] = {&out, &n};
  kiln_launch_t l = {.kernel = &v5_kernel, .grid = {5, 2, 1}, .block = {64, 4, 1}, .dims = 2,
                     .shared = 256, .args = args};
  kiln_hsa_kernarg_env_t env = {.queue_ptr = 0x1122334455667788, .private_base_hi = 0x10000,
                                .shared_base_hi = 0x20000};
  _Alignas(16) uint8_t seg[512];
  memset(seg, 0xCC, sizeof seg);
  cr_assert_eq(kiln_hsa_kernarg_pack(&l, &env, seg, sizeof seg), KILN_OK);
  cr_expect_eq(rd(seg + 0, 8), out);
  cr_expect_eq((int32_t)rd(seg + 8, 4), -7);
  cr_expect_eq(rd(seg + 12, 4), 0, "padding is zeroed");
  cr_expect_eq(rd(seg + 16, 4), 5, "block_count_x = work-groups");
  cr_expect_eq(rd(seg + 20, 4), 2);
  cr_expect_eq(rd(seg + 24, 4), 1);
  cr_expect_eq(rd(seg + 28, 2), 64);
  cr_expect_eq(rd(seg + 30, 2), 4);
  cr_expect_eq(rd(seg + 32, 2), 1);
  cr_expect_eq(rd(seg + 34, 2), 0, "remainders are 0: kiln grids are whole work-groups");
  cr_expect_eq(rd(seg + 56, 8), 0);
  cr_expect_eq(rd(seg + 80, 2), 2, "grid_dims");
  cr_expect_eq(rd(seg + 96, 8), 0, "unknown hidden kinds stay zero");
  cr_expect_eq(rd(seg + 136, 4), 256, "dynamic LDS");
  cr_expect_eq(rd(seg + 208, 4), 0x10000);
  cr_expect_eq(rd(seg + 212, 4), 0x20000);
  cr_expect_eq(rd(seg + 216, 8), 0x1122334455667788);
  cr_expect_eq(rd(seg + 224, 8), 0, "the rest of the segment is zero");
  cr_expect_eq(seg[272], 0xCC, "nothing past kernarg_size is written");
}

Test(hsa_kernarg, refuses_tables_that_do_not_fit) {
  kiln_kernel_arg_t bad_args[] = {{.name = "x", .type = KILN_ARG_I64, .offset = 8, .size = 8}};
  kiln_kernel_t bad = {.name = "bad", .num_args = 1, .args = bad_args, .kernarg_size = 12};
  int64_t x = 1;
  void *args[] = {&x};
  kiln_launch_t l = {.kernel = &bad, .grid = {1, 1, 1}, .block = {1, 1, 1}, .dims = 1, .args = args};
  kiln_hsa_kernarg_env_t env = {0};
  uint8_t seg[64];
  kiln_status_t s = kiln_hsa_kernarg_pack(&l, &env, seg, sizeof seg);
  cr_assert(s);
  cr_expect(strstr(kiln_status_message(s), "outside the 12-byte kernarg segment"), "%s",
            kiln_status_message(s));
  kiln_status_free(s);
  bad.kernarg_size = 16;
  s = kiln_hsa_kernarg_pack(&l, &env, seg, 8);
  cr_assert(s);
  cr_expect(strstr(kiln_status_message(s), "exceeds the 8-byte slab"), "%s", kiln_status_message(s));
  kiln_status_free(s);
}

/* Kernarg packing from metadata the real compiler wrote (the conformance artifacts built
 * for gfx90a and gfx942): every kernel's table fits its segment, and the hidden arguments
 * the code reads land where the metadata says. */
#include "protocol/artifact.h"
#include "support.h"

static void pack_real(const char *file, bool reads_group_size) {
  size_t len;
  uint8_t *bytes = kiln_test_read_data(file, &len);
  if (len >= 20 && memcmp(bytes, "KILN-COMPILE-FAILED\n", 20) == 0)
    cr_assert_fail("%s did not compile at build time: %s", file, (char *)bytes + 20);
  kiln_artifact_t art;
  kiln_status_t s = kiln_artifact_decode(bytes, len, &art);
  free(bytes);
  cr_assert_eq(s, KILN_OK, "%s: %s", file, s ? kiln_status_message(s) : "");
  cr_assert_eq(art.format, KILN_FORMAT_HSACO);
  for (uint32_t k = 0; k < art.num_kernels; k++) {
    const kiln_kernel_t *kt = &art.kernels[k];
    cr_assert_leq(kt->kernarg_size, 64 * 1024, "%s", kt->name);
    uint64_t slots[128] = {0};
    void *args[128];
    for (uint32_t i = 0; i < kt->num_args && i < 128; i++) {
      slots[i] = 0x0101010101010101ull * (i + 1);
      args[i] = &slots[i];
    }
    kiln_launch_t l = {.kernel = kt, .grid = {7, 3, 1}, .block = {64, 2, 1}, .dims = 2, .shared = 32, .args = args};
    kiln_hsa_kernarg_env_t env = {.queue_ptr = 0xABCDEF0000, .private_base_hi = 1, .shared_base_hi = 2};
    _Alignas(16) uint8_t seg[64 * 1024];
    s = kiln_hsa_kernarg_pack(&l, &env, seg, sizeof seg);
    cr_assert_eq(s, KILN_OK, "%s/%s: %s", file, kt->name, s ? kiln_status_message(s) : "");
    bool any_hidden = false;
    for (uint32_t i = 0; i < kt->num_args + kt->num_hidden; i++) {
      const kiln_kernel_arg_t *a = &kt->args[i];
      if (i < kt->num_args) {
        cr_expect_eq(memcmp(seg + a->offset, &slots[i], a->size), 0, "%s arg %u", kt->name, i);
        continue;
      }
      any_hidden = true;
      uint64_t v = rd(seg + a->offset, a->size);
      switch (a->hidden) {
        case KILN_HIDDEN_BLOCK_COUNT_X: cr_expect_eq(v, 7, "%s block_count_x", kt->name); break;
        case KILN_HIDDEN_BLOCK_COUNT_Y: cr_expect_eq(v, 3); break;
        case KILN_HIDDEN_GROUP_SIZE_X: cr_expect_eq(v, 64, "%s group_size_x", kt->name); break;
        case KILN_HIDDEN_GROUP_SIZE_Y: cr_expect_eq(v, 2); break;
        case KILN_HIDDEN_GROUP_SIZE_Z: cr_expect_eq(v, 1); break;
        case KILN_HIDDEN_GRID_DIMS: cr_expect_eq(v, 2); break;
        case KILN_HIDDEN_DYNAMIC_LDS_SIZE: cr_expect_eq(v, 32); break;
        case KILN_HIDDEN_QUEUE_PTR: cr_expect_eq(v, 0xABCDEF0000); break;
        default: break;
      }
    }
    /* A kernel that reads its group size (kiln_global_id) takes it from the v5 hidden
     * block: a table without hidden arguments would leave it 0 (HSA.md §4). */
    if (reads_group_size) cr_expect(any_hidden, "%s/%s lists no hidden arguments", file, kt->name);
  }
  kiln_artifact_deinit(&art);
}

Test(hsa_kernarg, packs_compiler_made_tables) {
  const char *files[] = {"vadd.gfx90a.kart", "vadd.gfx942.kart", "reduce.gfx90a.kart",
                         "many_args.gfx942.kart", "math.gfx90a.kart"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) pack_real(files[i], true);
  /* transpose indexes with its constant tile size: group ids and local ids only. */
  pack_real("transpose.gfx942.kart", false);
}
