/* Probes on this host: cpu always present; GPU backends either list devices or say why
 * not, from a child process, leaving nothing initialised here. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "device/cuda/arch.h"
#include "device/registry.h"

Test(probe, cpu_is_always_present) {
  kiln_device_info_t info[2];
  size_t n = 0;
  char reason[256];
  cr_assert_eq(kiln_backend_cpu.probe(info, 2, &n, reason, sizeof reason), KILN_OK);
  cr_assert_eq(n, 1);
  cr_expect_str_eq(info[0].id, "cpu:0");
  cr_expect_str_eq(info[0].arch, "cpu");
  cr_expect_gt(info[0].compute_units, 0);
  cr_expect_gt(info[0].memory, 0);
  cr_expect_gt(strlen(info[0].name), 0);
  cr_expect_eq(info[0].wave_size, 1);
}

/* Whatever this host has, a GPU probe must answer: devices, or none with a reason. */
static void probe_answers(const kiln_backend_t *b) {
  kiln_device_info_t info[8];
  size_t n = 99;
  char reason[256] = "unset";
  cr_assert_eq(b->probe(info, 8, &n, reason, sizeof reason), KILN_OK);
  cr_assert_leq(n, 8);
  if (n == 0) {
    cr_expect(strlen(reason) > 0 && strcmp(reason, "unset") != 0, "%s: no reason given", b->kind);
    cr_log_info("%s: no devices: %s", b->kind, reason);
  }
  for (size_t i = 0; i < n; i++) {
    char want[32];
    snprintf(want, sizeof want, "%s:%zu", b->kind, i);
    cr_expect_str_eq(info[i].id, want);
    cr_expect_gt(strlen(info[i].arch), 0);
  }
}

Test(probe, hsa_answers) { probe_answers(&kiln_backend_hsa); }
Test(probe, cuda_answers) { probe_answers(&kiln_backend_cuda); }

/* On the project's machines there is no /dev/kfd: the reason must say so, not a bare
 * OUT_OF_RESOURCES from hsa_init. */
Test(probe, hsa_says_why_without_kfd) {
  if (access("/dev/kfd", F_OK) == 0) cr_skip_test("this host has /dev/kfd");
  kiln_device_info_t info[1];
  size_t n = 1;
  char reason[256] = "";
  cr_assert_eq(kiln_backend_hsa.probe(info, 1, &n, reason, sizeof reason), KILN_OK);
  cr_expect_eq(n, 0);
  cr_expect(strstr(reason, "/dev/kfd") || strstr(reason, "ROCm runtime not found"), "%s", reason);
}

Test(probe, cuda_says_why_without_a_driver) {
  kiln_device_info_t info[1];
  size_t n = 1;
  char reason[256] = "";
  cr_assert_eq(kiln_backend_cuda.probe(info, 1, &n, reason, sizeof reason), KILN_OK);
  if (n > 0) cr_skip_test("this host has an NVIDIA GPU");
  cr_expect(strstr(reason, "libcuda") || strstr(reason, "NVIDIA") || strstr(reason, "cuInit"), "%s",
            reason);
}

Test(cuda_arch, names_and_compatibility) {
  char a[16], why[256];
  kiln_cuda_arch_name(9, 0, a, sizeof a);
  cr_expect_str_eq(a, "sm_90");
  kiln_cuda_arch_name(10, 0, a, sizeof a);
  cr_expect_str_eq(a, "sm_100");
  cr_expect(kiln_cuda_arch_compatible("sm_90", "sm_90", why, sizeof why));
  cr_expect(kiln_cuda_arch_compatible("sm_80", "sm_90", why, sizeof why), "older PTX JITs forward");
  cr_expect_not(kiln_cuda_arch_compatible("sm_100", "sm_90", why, sizeof why));
  cr_expect(strstr(why, "newer"), "%s", why);
  cr_expect(kiln_cuda_arch_compatible("sm_90a", "sm_90", why, sizeof why));
  cr_expect_not(kiln_cuda_arch_compatible("sm_90a", "sm_100", why, sizeof why), "arch-specific");
  cr_expect(kiln_cuda_arch_compatible("sm_100f", "sm_103", why, sizeof why), "family-specific");
  cr_expect_not(kiln_cuda_arch_compatible("sm_100f", "sm_120", why, sizeof why));
  cr_expect_not(kiln_cuda_arch_compatible("gfx90a", "sm_90", why, sizeof why));
  cr_expect_not(kiln_cuda_arch_compatible("sm_9x", "sm_90", why, sizeof why));
}
