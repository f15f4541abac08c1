/* An independent HSA client against the stand-in: Debian's rocminfo (AMD's code) links
 * libhsa-runtime64.so.1 at ROCR_1 and prints what the HSA API reports. rocminfo.sh explains the
 * placeholders it needs for rocminfo's driver checks. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spawn.h"

static sp_result_t rocminfo(const char *target, const char *vram) {
  char script[4096], libdir[4096];
  snprintf(script, sizeof script, "%s/rocminfo.sh", getenv("SGRT_SOURCE_DIR"));
  snprintf(libdir, sizeof libdir, "%s", getenv("SGRT_LIBRARY"));
  *strrchr(libdir, '/') = '\0';
  char *argv[] = {"/bin/sh", script, libdir, NULL};
  static char t[64], v[64];
  snprintf(t, sizeof t, "SOFTGPU_TARGET=%s", target);
  snprintf(v, sizeof v, "SOFTGPU_VRAM=%s", vram);
  const char *env[] = {t, v, "ASAN_OPTIONS=detect_leaks=0", NULL};
  sp_result_t r;
  sp_run(argv, env, 60, &r);
  cr_log_info("rocminfo %s: exit %d\n%s\n%s", target, r.exit_code, r.out, r.err);
  if (r.exit_code == 77) cr_skip_test("%s", r.err); /* only where rocminfo is not installed */
  cr_assert_eq(r.exit_code, 0, "rocminfo failed:\n%s\n%s", r.out, r.err);
  return r;
}

#define HAS(what) cr_expect(strstr(r.out, (what)) != NULL, "rocminfo did not print \"%s\":\n%s", (what), r.out)

Test(rocminfo, prints_the_stand_ins_agents_pools_and_isa_for_gfx942) {
  sp_result_t r = rocminfo("gfx942", "16G");
  HAS("System Timestamp Freq.:  1000.000000MHz");
  HAS("Marketing Name:          softgpu host CPU");
  HAS("Marketing Name:          softgpu gfx942 (kiln stand-in, not hardware)");
  HAS("Segment:                 GLOBAL; FLAGS: KERNARG, FINE GRAINED");
  HAS("Segment:                 GLOBAL; FLAGS: COARSE GRAINED");
  HAS("Size:                    16777216(0x1000000) KB"); /* SOFTGPU_VRAM */
  HAS("Segment:                 GROUP");
  HAS("Wavefront Size:          64(0x40)");
  HAS("Name:                    amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-");
  HAS("*** Done ***");
  /* the CPU agent comes first, as ROCr lists them */
  cr_assert_lt(strstr(r.out, "softgpu host CPU") - r.out, strstr(r.out, "Name:                    gfx942") - r.out);
  sp_free(&r);
}

Test(rocminfo, follows_softgpu_target_and_vram) {
  sp_result_t r = rocminfo("gfx90a", "10G");
  HAS("Name:                    gfx90a");
  HAS("Name:                    amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-");
  HAS("Size:                    10485760(0xa00000) KB");
  sp_free(&r);
}
