/* Target names -> canonical targets. */
#include <criterion/criterion.h>
#include <string.h>

#include "tests/compiler/harness.h"

static kiln_target_t parse(const char *name) {
  kiln_target_t t;
  kiln_status_t s = kiln_compiler_target_parse(name, &t);
  cr_assert(!s, "%s: %s", name, s ? kiln_status_message(s) : "");
  return t;
}

Test(targets, cpu_is_the_host) {
  kiln_target_t t = parse("cpu");
  cr_assert_eq(t.kind, KILN_TARGET_CPU);
  cr_assert_str_eq(t.id, "cpu");
  cr_assert(strstr(t.triple, "linux"), "%s", t.triple);
  cr_assert(t.cpu[0] && t.features[0]);
  cr_assert_str_eq(parse("llvm").id, "cpu");
}

Test(targets, amd) {
  kiln_target_t t = parse("gfx90a");
  cr_assert_eq(t.kind, KILN_TARGET_AMDGPU);
  cr_assert_str_eq(t.triple, "amdgcn-amd-amdhsa");
  cr_assert_eq(t.wave_size, 64);
  cr_assert_str_eq(t.features, "");
  t = parse("gfx90a:xnack-:sramecc+");
  cr_assert_str_eq(t.id, "gfx90a:sramecc+:xnack-", "canonical order");
  cr_assert_str_eq(t.features, "+sramecc,-xnack");
  cr_assert_str_eq(parse("gfx942:xnack+").features, "+xnack");
  cr_assert_eq(parse("gfx1100").wave_size, 32);
  cr_assert_eq(parse("gfx1201").wave_size, 32);
  cr_assert_eq(parse("gfx950").wave_size, 64);
  cr_assert_str_eq(parse("gfx11-generic").cpu, "gfx11-generic");
}

Test(targets, nvidia) {
  kiln_target_t t = parse("sm_90");
  cr_assert_eq(t.kind, KILN_TARGET_NVPTX);
  cr_assert_str_eq(t.triple, "nvptx64-nvidia-cuda");
  cr_assert_eq(t.ptx_version, 78);
  cr_assert_str_eq(t.features, "+ptx78");
  cr_assert_eq(parse("sm_80").ptx_version, 70);
  cr_assert_eq(parse("sm_90a").ptx_version, 80);
  cr_assert_eq(parse("sm_120").ptx_version, 87);
}

Test(targets, unknown) {
  static const char *const bad[] = {"gfx", "gfx9000", "sm_99", "cuda", "rocm", "x86", "gfx90a:", "gfx90a:sramecc"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    kiln_target_t t;
    kiln_status_t s = kiln_compiler_target_parse(bad[i], &t);
    cr_assert(s, "%s accepted", bad[i]);
    cr_assert_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
    cr_assert(strstr(kiln_status_message(s), "sm_90"), "examples listed: %s", kiln_status_message(s));
    kiln_status_free(s);
  }
}

Test(targets, identity_and_keys) {
  cr_assert(!kiln_crypto_init());
  const char *id = kiln_compiler_identity();
  cr_assert(strstr(id, "kiln ") && strstr(id, "llvm ") && strstr(id, "device-libs "), "%s", id);
  /* The build key (protocol/payload.h) is kilnd's and the compiler's alike. */
  static const uint8_t p1[] = "abc", p2[] = "abd";
  kiln_build_inputs_t in = {.payload = p1, .size = 3, .kind = KILN_PAYLOAD_AUTO, .target = "gfx942",
                            .host = "x86_64 znver4 0", .opt_level = 3, .identity = id};
  uint8_t k1[KILN_HASH_BYTES], k2[KILN_HASH_BYTES], k3[KILN_HASH_BYTES], k4[KILN_HASH_BYTES];
  kiln_build_key(&in, k1);
  kiln_build_key(&in, k2);
  cr_assert(memcmp(k1, k2, sizeof(k1)) == 0, "deterministic");
  in.kind = KILN_PAYLOAD_LLVM;
  kiln_build_key(&in, k2);
  cr_assert(memcmp(k1, k2, sizeof(k1)) == 0, "naming the format auto resolves to gives one key");
  in.payload = p2;
  kiln_build_key(&in, k3);
  cr_assert(memcmp(k1, k3, sizeof(k1)) != 0, "payload changes the key");
  in.payload = p1;
  in.fast_math = true;
  kiln_build_key(&in, k4);
  cr_assert(memcmp(k1, k4, sizeof(k1)) != 0, "options change the key");
  in.fast_math = false;
  in.target = "gfx942:xnack+";
  kiln_build_key(&in, k4);
  cr_assert(memcmp(k1, k4, sizeof(k1)) != 0, "target spelling changes the key");
  in.target = "gfx942";
  in.host = "another host";
  kiln_build_key(&in, k4);
  cr_assert(memcmp(k1, k4, sizeof(k1)) == 0, "the host counts for cpu only");
  in.target = "cpu";
  kiln_build_key(&in, k3);
  in.host = "x86_64 znver4 0";
  kiln_build_key(&in, k4);
  cr_assert(memcmp(k3, k4, sizeof(k1)) != 0, "the host counts for cpu");
  in.identity = "kiln 0.0.0";
  kiln_build_key(&in, k3);
  cr_assert(memcmp(k3, k4, sizeof(k1)) != 0, "the compiler identity changes the key");
}
