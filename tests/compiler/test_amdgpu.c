/* AMDGPU: HSACO inspected by our ELF reader and independently by llvm-readelf: linked
 * (ET_DYN), HSA OS ABI, code object v5 (amdhsa.version [1, 2]), e_flags naming the target,
 * the kernels and their argument layout in the metadata. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/compiler/harness.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24); }

static void compile_example(const char *example, const char *target, const kiln_compile_options_t *o, kiln_artifact_t *a) {
  size_t n;
  uint8_t *bc = th_example_bc(example, &n);
  th_compile(bc, n, target, o, a);
  free(bc);
  cr_assert_eq(a->format, KILN_FORMAT_HSACO);
}

/* llvm-readelf's view of the code object: headers and the metadata note as YAML. */
static void readelf(const kiln_artifact_t *a, char *out, size_t cap) {
  char path[256], cmd[512];
  th_write_temp(a->code, a->code_size, ".hsaco", path, sizeof(path));
  snprintf(cmd, sizeof(cmd), "'%s' -h -l --notes '%s'", th_llvm_tool("llvm-readelf"), path);
  cr_assert_eq(th_run(cmd, out, cap), 0, "llvm-readelf failed: %s", out);
  unlink(path);
}

static void check_header(const kiln_artifact_t *a, uint32_t mach, uint32_t features) {
  const uint8_t *p = a->code;
  cr_assert(a->code_size > 64 && memcmp(p, "\x7f" "ELF", 4) == 0);
  cr_assert_eq(p[4], 2, "ELF64");
  cr_assert_eq(p[7], 64, "ELFOSABI_AMDGPU_HSA");
  cr_assert_eq(p[8], 3, "EI_ABIVERSION 3 is code object v5");
  cr_assert_eq(rd16(p + 16), 3, "ET_DYN: linked");
  cr_assert_eq(rd16(p + 18), 224, "EM_AMDGPU");
  cr_assert_eq(rd32(p + 48) & 0xff, mach, "e_flags mach %#x", rd32(p + 48));
  if (features) cr_assert_eq(rd32(p + 48) & 0xf00, features, "e_flags features %#x", rd32(p + 48));
}

Test(amdgpu, vadd_gfx942_code_object_v5) {
  kiln_artifact_t a;
  compile_example("vadd", "gfx942", NULL, &a);
  check_header(&a, 0x4c, 0);
  cr_assert_str_eq(a.target, "gfx942");
  char out[65536];
  readelf(&a, out, sizeof(out));
  cr_assert(strstr(out, "amdhsa.version:\n  - 1\n  - 2"), "code object v5 metadata:\n%s", out);
  cr_assert(strstr(out, ".name:           vadd") && strstr(out, ".symbol:         vadd.kd"), "%s", out);
  cr_assert(strstr(out, "LOAD"), "a loadable segment");

  cr_assert_eq(a.num_kernels, 1);
  const kiln_kernel_t *k = kiln_artifact_kernel(&a, "vadd");
  cr_assert(k);
  cr_assert_eq(k->num_args, 4);
  static const kiln_arg_type_t types[] = {KILN_ARG_PTR, KILN_ARG_PTR, KILN_ARG_PTR, KILN_ARG_I32};
  static const uint32_t offsets[] = {0, 8, 16, 24};
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(k->args[i].type, types[i]);
    cr_assert_eq(k->args[i].offset, offsets[i]);
    cr_assert_eq(k->args[i].size, kiln_arg_type_size(types[i]));
  }
  /* global id needs the group size: v5 keeps it in the hidden arguments. */
  bool group_size_x = false;
  for (uint32_t i = 0; i < k->num_hidden; i++) {
    const kiln_kernel_arg_t *h = &k->args[k->num_args + i];
    cr_assert_eq(h->type, 0);
    cr_assert_neq(h->hidden, KILN_HIDDEN_NONE);
    cr_assert_leq(h->offset + h->size, k->kernarg_size);
    if (h->hidden == KILN_HIDDEN_GROUP_SIZE_X) {
      group_size_x = true;
      cr_assert_eq(h->offset, 32 + 12, "group_size_x at +12 of the hidden block");
    }
  }
  cr_assert(group_size_x);
  cr_assert_geq(k->kernarg_size, 28);
  cr_assert_eq(k->wavefront_size, 64);
  cr_assert_eq(k->max_block, 1024);
  cr_assert_gt(k->sgpr_count, 0);
  cr_assert_gt(k->vgpr_count, 0);
  cr_assert(a.assembly && strstr(a.assembly, "global_load_dword"), "ISA text");
  cr_assert(a.llvm_ir && strstr(a.llvm_ir, "amdgpu_kernel void @vadd"));
  kiln_artifact_deinit(&a);
}

Test(amdgpu, target_features_in_e_flags) {
  kiln_artifact_t a;
  compile_example("vadd", "gfx90a:sramecc+:xnack-", NULL, &a);
  check_header(&a, 0x3f, 0xc00 | 0x200);
  cr_assert_str_eq(a.target, "gfx90a:sramecc+:xnack-");
  kiln_artifact_deinit(&a);
}

Test(amdgpu, gfx1100_is_wave32) {
  kiln_artifact_t a;
  compile_example("vadd", "gfx1100", NULL, &a);
  check_header(&a, 0x41, 0);
  cr_assert_eq(a.kernels[0].wavefront_size, 32);
  kiln_artifact_deinit(&a);
}

Test(amdgpu, gfx950) {
  kiln_artifact_t a;
  compile_example("transpose", "gfx950", NULL, &a);
  check_header(&a, 0x4f, 0);
  kiln_artifact_deinit(&a);
}

Test(amdgpu, shared_memory_and_barriers) {
  kiln_artifact_t a;
  compile_example("reduce", "gfx942", NULL, &a);
  cr_assert_eq(a.num_kernels, 2);
  cr_assert_eq(kiln_artifact_kernel(&a, "reduce")->group_segment_size, 4096);
  cr_assert_eq(kiln_artifact_kernel(&a, "reduce_dyn")->group_segment_size, 0, "dynamic LDS is not static");
  cr_assert(strstr(a.assembly, "s_barrier"), "barrier instruction in the ISA");
  bool dyn_lds = false;
  const kiln_kernel_t *k = kiln_artifact_kernel(&a, "reduce_dyn");
  for (uint32_t i = 0; i < k->num_hidden; i++) dyn_lds |= k->args[k->num_args + i].hidden == KILN_HIDDEN_DYNAMIC_LDS_SIZE;
  cr_assert(strstr(a.llvm_ir, "__kiln_dynamic_shared_mem"), "dynamic shared memory is the zero-sized LDS array");
  (void)dyn_lds;
  kiln_artifact_deinit(&a);
}

Test(amdgpu, math_links_ocml) {
  kiln_artifact_t a;
  compile_example("math", "gfx942", NULL, &a);
  cr_assert(a.log && strstr(a.log, "ocml"), "log says which device libraries: %s", a.log ? a.log : "");
  cr_assert(!strstr(a.llvm_ir, "declare float @__ocml"), "every ocml function is defined (linked)");
  char out[65536];
  readelf(&a, out, sizeof(out));
  cr_assert(strstr(out, "math_f32.kd") && strstr(out, "math_f64.kd"));
  kiln_artifact_deinit(&a);
}

Test(amdgpu, launch_bound_sets_max_flat_workgroup_size) {
  kiln_compile_options_t o = kiln_compile_options_default();
  o.max_block = 256;
  kiln_artifact_t a;
  compile_example("vadd", "gfx942", &o, &a);
  cr_assert_eq(a.kernels[0].max_block, 256);
  kiln_artifact_deinit(&a);
}

Test(amdgpu, opt_levels_and_fast_math) {
  for (uint32_t lvl = 0; lvl <= 3; lvl++) {
    kiln_compile_options_t o = kiln_compile_options_default();
    o.opt_level = lvl;
    o.fast_math = lvl == 2;
    kiln_artifact_t a;
    compile_example("math", "gfx90a", &o, &a);
    check_header(&a, 0x3f, 0);
    kiln_artifact_deinit(&a);
  }
}

/* Target IR written for amdgcn directly: kernels by calling convention. */
Test(amdgpu, target_ir) {
  static const char ir[] =
      "target triple = \"amdgcn-amd-amdhsa\"\n"
      "define amdgpu_kernel void @k(ptr addrspace(1) %p, float %v) {\n"
      "  %i = call i32 @llvm.amdgcn.workitem.id.x()\n"
      "  %q = getelementptr float, ptr addrspace(1) %p, i32 %i\n"
      "  store float %v, ptr addrspace(1) %q\n"
      "  ret void\n"
      "}\n"
      "declare i32 @llvm.amdgcn.workitem.id.x()\n";
  kiln_artifact_t a;
  th_compile((const uint8_t *)ir, sizeof(ir) - 1, "gfx942", NULL, &a);
  check_header(&a, 0x4c, 0);
  const kiln_kernel_t *k = kiln_artifact_kernel(&a, "k");
  cr_assert(k && k->num_args == 2);
  cr_assert_eq(k->args[0].type, KILN_ARG_PTR);
  cr_assert_eq(k->args[1].type, KILN_ARG_F32);
  cr_assert_eq(k->args[1].offset, 8);
  kiln_artifact_deinit(&a);
}

/* Local arrays indexed at run time stay in memory, and clang brackets them with
 * llvm.lifetime.start/end. Those must keep naming the alloca after it moves to the private
 * address space (the verifier rejects a lifetime marker on an addrspacecast). */
static const char LOCAL_ARRAYS[] =
    "#include <kiln/kernel.h>\n"
    "static void fill(float *t, int n, const float *in, int base) {\n"
    "  for (int i = 0; i < n; i++) t[i] = in[base + i];\n"
    "}\n"
    "KILN_KERNEL void local_arrays(float *out, const float *in, int sel) {\n"
    "  int gid = kiln_global_id(0);\n"
    "  float t[256];\n"
    "  fill(t, 256, in, gid * 256);\n"
    "  float acc = 0;\n"
    "  for (int r = 0; r < 4; r++) {\n"
    "    float u[8];\n"
    "    for (int i = 0; i < 8; i++) u[i] = t[(i * 7 + r * sel) & 255] * (float)r;\n"
    "    acc += u[(sel + r + gid) & 7];\n"
    "  }\n"
    "  out[gid] = acc + t[(sel + gid) & 255];\n"
    "}\n";

Test(amdgpu, local_arrays_with_lifetime_markers) {
  size_t n;
  uint8_t *bc = th_source_bc(LOCAL_ARRAYS, &n);
  const char *targets[] = {"gfx942", "gfx90a", "gfx1100"};
  for (size_t t = 0; t < sizeof(targets) / sizeof(targets[0]); t++) {
    kiln_compile_options_t o = kiln_compile_options_default();
    for (uint32_t lvl = 0; lvl <= 3; lvl += 3) {
      o.opt_level = lvl;
      kiln_artifact_t a;
      th_compile(bc, n, targets[t], &o, &a);
      const kiln_kernel_t *k = kiln_artifact_kernel(&a, "local_arrays");
      cr_assert(k, "kernel present for %s", targets[t]);
      cr_assert_gt(k->private_segment_size, 0, "%s O%u: the arrays live in scratch", targets[t], lvl);
      kiln_artifact_deinit(&a);
    }
  }
  free(bc);
}

/* The same with the marker right after its alloca (where the GEMM bench's kernels have it):
 * the lowering walks the block while it replaces both. */
Test(amdgpu, lifetime_marker_next_to_its_alloca) {
  static const char ir[] =
      "define void @k(ptr %out, i32 %n) section \"kiln.kernel\" {\n"
      "  %a = alloca [64 x float], align 4\n"
      "  call void @llvm.lifetime.start.p0(ptr %a)\n"
      "  %b = alloca [64 x float], align 4\n"
      "  call void @llvm.lifetime.start.p0(ptr %b)\n"
      "  %p = getelementptr [64 x float], ptr %a, i32 0, i32 %n\n"
      "  store float 1.0, ptr %p\n"
      "  %q = getelementptr [64 x float], ptr %a, i32 0, i32 3\n"
      "  %v = load float, ptr %q\n"
      "  %r = getelementptr [64 x float], ptr %b, i32 0, i32 %n\n"
      "  store float %v, ptr %r\n"
      "  call void @llvm.lifetime.end.p0(ptr %a)\n"
      "  %s = getelementptr [64 x float], ptr %b, i32 0, i32 5\n"
      "  %w = load float, ptr %s\n"
      "  call void @llvm.lifetime.end.p0(ptr %b)\n"
      "  store float %w, ptr %out\n"
      "  ret void\n"
      "}\n";
  kiln_compile_options_t o = kiln_compile_options_default();
  o.opt_level = 0;
  kiln_artifact_t a;
  th_compile((const uint8_t *)ir, sizeof(ir) - 1, "gfx942", &o, &a);
  cr_assert(strstr(a.llvm_ir, "llvm.lifetime.start.p5"), "the markers name the private alloca:\n%s", a.llvm_ir);
  cr_assert_gt(kiln_artifact_kernel(&a, "k")->private_segment_size, 0);
  kiln_artifact_deinit(&a);
}
