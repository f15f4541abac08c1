/* NVPTX: PTX text with the right .version/.target, kernels as .entry, assembled by ptxas
 * when the CUDA toolkit is installed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/compiler/harness.h"

static void compile_example(const char *example, const char *target, kiln_artifact_t *a) {
  size_t n;
  uint8_t *bc = th_example_bc(example, &n);
  th_compile(bc, n, target, NULL, a);
  free(bc);
  cr_assert_eq(a->format, KILN_FORMAT_PTX);
  cr_assert_eq(a->code[a->code_size - 1], 0, "PTX is stored NUL-terminated");
}

static void ptxas(const kiln_artifact_t *a, const char *sm) {
  if (access(KILN_TEST_PTXAS, X_OK) != 0) cr_skip_test("ptxas not installed at %s (CUDA toolkit)", KILN_TEST_PTXAS);
  char path[256], cmd[512], out[8192];
  th_write_temp(a->code, a->code_size - 1, ".ptx", path, sizeof(path));
  snprintf(cmd, sizeof(cmd), "'%s' -arch=%s '%s' -o /dev/null 2>&1", KILN_TEST_PTXAS, sm, path);
  int rc = th_run(cmd, out, sizeof(out));
  unlink(path);
  cr_assert_eq(rc, 0, "ptxas -arch=%s rejected the PTX: %s\n%s", sm, out, (const char *)a->code);
}

Test(nvptx, vadd_sm90) {
  kiln_artifact_t a;
  compile_example("vadd", "sm_90", &a);
  const char *ptx = (const char *)a.code;
  cr_assert(strstr(ptx, ".version 7.8"), "%s", ptx);
  cr_assert(strstr(ptx, ".target sm_90"));
  cr_assert(strstr(ptx, ".entry vadd"));
  cr_assert(strstr(ptx, "%ctaid.x") && strstr(ptx, "%ntid.x") && strstr(ptx, "%tid.x"));
  const kiln_kernel_t *k = kiln_artifact_kernel(&a, "vadd");
  cr_assert(k && k->num_args == 4 && k->args[3].type == KILN_ARG_I32 && k->args[3].offset == 24);
  cr_assert_eq(k->kernarg_size, 28);
  ptxas(&a, "sm_90");
  kiln_artifact_deinit(&a);
}

Test(nvptx, vadd_sm80) {
  kiln_artifact_t a;
  compile_example("vadd", "sm_80", &a);
  cr_assert(strstr((const char *)a.code, ".version 7.0") && strstr((const char *)a.code, ".target sm_80"));
  ptxas(&a, "sm_80");
  kiln_artifact_deinit(&a);
}

Test(nvptx, shared_memory_and_barriers) {
  kiln_artifact_t a;
  compile_example("reduce", "sm_90", &a);
  const char *ptx = (const char *)a.code;
  cr_assert(strstr(ptx, "bar.sync") || strstr(ptx, "barrier.sync"), "%s", ptx);
  cr_assert(strstr(ptx, ".shared"));
  cr_assert(strstr(ptx, ".extern .shared .align 16 .b8 __kiln_dynamic_shared_mem[]"), "%s", ptx);
  ptxas(&a, "sm_90");
  kiln_artifact_deinit(&a);
}

Test(nvptx, transpose) {
  kiln_artifact_t a;
  compile_example("transpose", "sm_120", &a);
  cr_assert(strstr((const char *)a.code, ".target sm_120"));
  ptxas(&a, "sm_120");
  kiln_artifact_deinit(&a);
}

Test(nvptx, math_without_libdevice) {
  kiln_artifact_t a;
  compile_example("math", "sm_90", &a);
  const char *ptx = (const char *)a.code;
  cr_assert(!strstr(ptx, ".extern .func"), "no external functions: every math function is defined:\n%s", ptx);
  ptxas(&a, "sm_90");
  kiln_artifact_deinit(&a);
}

Test(nvptx, launch_bound_sets_maxntid) {
  size_t n;
  uint8_t *bc = th_example_bc("vadd", &n);
  kiln_compile_options_t o = kiln_compile_options_default();
  o.max_block = 128;
  kiln_artifact_t a;
  th_compile(bc, n, "sm_90", &o, &a);
  free(bc);
  cr_assert(strstr((const char *)a.code, ".maxntid 128"));
  kiln_artifact_deinit(&a);
}

/* A host vectoriser's llvm.exp.v4f32 / llvm.sin.v2f64 must not reach instruction selection:
 * NVPTX and AMDGPU cannot select them (LLVM would end the process). */
Test(nvptx, vector_math_intrinsics) {
  static const char ir[] = "declare <4 x float> @llvm.exp.v4f32(<4 x float>)\n"
                           "declare <2 x double> @llvm.sin.v2f64(<2 x double>)\n"
                           "define void @k(ptr %p, ptr %q) section \"kiln.kernel\" {\n"
                           "  %v = load <4 x float>, ptr %p\n"
                           "  %e = call <4 x float> @llvm.exp.v4f32(<4 x float> %v)\n"
                           "  store <4 x float> %e, ptr %p\n"
                           "  %w = load <2 x double>, ptr %q\n"
                           "  %s = call <2 x double> @llvm.sin.v2f64(<2 x double> %w)\n"
                           "  store <2 x double> %s, ptr %q\n"
                           "  ret void\n"
                           "}\n";
  kiln_artifact_t a;
  th_compile((const uint8_t *)ir, sizeof(ir) - 1, "gfx942", NULL, &a);
  kiln_artifact_deinit(&a);
  th_compile((const uint8_t *)ir, sizeof(ir) - 1, "sm_90", NULL, &a);
  ptxas(&a, "sm_90");
  kiln_artifact_deinit(&a);
}
