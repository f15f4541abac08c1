/* Target names -> canonical kiln_target_t. The tables list what LLVM's AMDGPU and NVPTX back
 * ends know (`llc -mcpu=help`), by the first LLVM major that has each processor, because the
 * C API cannot ask whether a CPU name is valid (LLVM only prints a warning and carries on). */
#include <ctype.h>
#include <llvm-c/TargetMachine.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"

static const struct {
  const char *name;
  int since_llvm; /* first LLVM major with it */
  int until_llvm; /* last LLVM major with it, 0 = still there */
} gfx_table[] = {
    {"gfx600", 0, 0},  {"gfx601", 0, 0},  {"gfx602", 0, 0},  {"gfx700", 0, 0},
    {"gfx701", 0, 0},  {"gfx702", 0, 0},  {"gfx703", 0, 0},  {"gfx704", 0, 0},
    {"gfx705", 0, 0},  {"gfx801", 0, 0},  {"gfx802", 0, 0},  {"gfx803", 0, 0},
    {"gfx805", 0, 0},  {"gfx810", 0, 0},  {"gfx900", 0, 0},  {"gfx902", 0, 0},
    {"gfx904", 0, 0},  {"gfx906", 0, 0},  {"gfx908", 0, 0},  {"gfx909", 0, 0},
    {"gfx90a", 0, 0},  {"gfx90c", 0, 0},  {"gfx940", 0, 20}, {"gfx941", 0, 20},
    {"gfx942", 0, 0},  {"gfx950", 20, 0}, {"gfx1010", 0, 0}, {"gfx1011", 0, 0},
    {"gfx1012", 0, 0}, {"gfx1013", 0, 0}, {"gfx1030", 0, 0}, {"gfx1031", 0, 0},
    {"gfx1032", 0, 0}, {"gfx1033", 0, 0}, {"gfx1034", 0, 0}, {"gfx1035", 0, 0},
    {"gfx1036", 0, 0}, {"gfx1100", 0, 0}, {"gfx1101", 0, 0}, {"gfx1102", 0, 0},
    {"gfx1103", 0, 0}, {"gfx1150", 0, 0}, {"gfx1151", 0, 0}, {"gfx1152", 19, 0},
    {"gfx1153", 20, 0}, {"gfx1200", 0, 0}, {"gfx1201", 0, 0}, {"gfx1250", 22, 0},
    {"gfx1251", 22, 0}, {"gfx9-generic", 19, 0}, {"gfx9-4-generic", 20, 0},
    {"gfx10-1-generic", 19, 0}, {"gfx10-3-generic", 19, 0}, {"gfx11-generic", 19, 0},
    {"gfx12-generic", 19, 0},
};

/* Minimum PTX ISA version (times 10) each sm_ needs; LLVM refuses lower ones. */
static const struct {
  const char *name;
  uint32_t ptx;
  int since_llvm;
} sm_table[] = {
    {"sm_50", 60, 0},   {"sm_52", 60, 0},   {"sm_53", 60, 0},   {"sm_60", 60, 0},
    {"sm_61", 60, 0},   {"sm_62", 60, 0},   {"sm_70", 60, 0},   {"sm_72", 61, 0},
    {"sm_75", 63, 0},   {"sm_80", 70, 0},   {"sm_86", 71, 0},   {"sm_87", 74, 0},
    {"sm_88", 90, 22},  {"sm_89", 78, 0},   {"sm_90", 78, 0},   {"sm_90a", 80, 0},
    {"sm_100", 86, 20}, {"sm_100a", 86, 20}, {"sm_100f", 88, 21}, {"sm_101", 86, 20},
    {"sm_101a", 86, 20}, {"sm_101f", 88, 21}, {"sm_103", 88, 21}, {"sm_103a", 88, 21},
    {"sm_103f", 88, 21}, {"sm_110", 90, 22}, {"sm_110a", 90, 22}, {"sm_110f", 90, 22},
    {"sm_120", 87, 20}, {"sm_120a", 87, 20}, {"sm_120f", 88, 21}, {"sm_121", 88, 21},
    {"sm_121a", 88, 21}, {"sm_121f", 88, 21},
};

static const char examples[] =
    "use \"cpu\", an AMD GPU such as \"gfx90a\", \"gfx942\", \"gfx950\", \"gfx1100\" (with target "
    "features as in \"gfx90a:sramecc+:xnack-\"), or an NVIDIA GPU such as \"sm_80\", \"sm_90\"";

static bool llvm_has(int since, int until) {
  return LLVM_VERSION_MAJOR >= since && (until == 0 || LLVM_VERSION_MAJOR <= until);
}

bool kc_target_is_known_gfx(const char *gfx, uint32_t *out_default_wave) {
  for (size_t i = 0; i < sizeof(gfx_table) / sizeof(gfx_table[0]); i++) {
    if (strcmp(gfx_table[i].name, gfx) != 0 || !llvm_has(gfx_table[i].since_llvm, gfx_table[i].until_llvm))
      continue;
    /* gfx10 and later run wave32 by default; earlier ones have only wave64. */
    if (out_default_wave) *out_default_wave = strncmp(gfx, "gfx1", 4) == 0 && isdigit((unsigned char)gfx[4]) ? 32 : 64;
    return true;
  }
  return false;
}

static bool gfx_has_sramecc(const char *gfx) {
  static const char *const with[] = {"gfx906", "gfx908", "gfx90a", "gfx940", "gfx941",
                                     "gfx942", "gfx950", "gfx9-4-generic"};
  for (size_t i = 0; i < sizeof(with) / sizeof(with[0]); i++)
    if (strcmp(with[i], gfx) == 0) return true;
  return false;
}

static bool gfx_has_xnack(const char *gfx) {
  if (strcmp(gfx, "gfx801") == 0 || strcmp(gfx, "gfx810") == 0) return true;
  if (strncmp(gfx, "gfx9", 4) == 0) return true;
  return strncmp(gfx, "gfx101", 6) == 0 || strcmp(gfx, "gfx10-1-generic") == 0;
}

static kiln_status_t parse_amdgpu(const char *name, kiln_target_t *t) {
  char buf[96];
  snprintf(buf, sizeof(buf), "%s", name);
  if (name[strlen(name) - 1] == ':' || strstr(name, "::"))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "empty target feature in '%s'; %s", name, examples);
  char *save = NULL;
  char *gfx = strtok_r(buf, ":", &save);
  uint32_t wave = 64;
  if (!gfx || !kc_target_is_known_gfx(gfx, &wave))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "unknown AMD GPU '%s': LLVM %d does not know that processor; %s", name,
                       LLVM_VERSION_MAJOR, examples);
  int sramecc = 0, xnack = 0; /* 0 any, +1 on, -1 off */
  for (char *f = strtok_r(NULL, ":", &save); f; f = strtok_r(NULL, ":", &save)) {
    size_t n = strlen(f);
    int on = n > 1 && f[n - 1] == '+' ? 1 : n > 1 && f[n - 1] == '-' ? -1 : 0;
    if (on) f[n - 1] = 0;
    int *slot = strcmp(f, "sramecc") == 0 && gfx_has_sramecc(gfx) ? &sramecc
                : strcmp(f, "xnack") == 0 && gfx_has_xnack(gfx)    ? &xnack
                                                                    : NULL;
    if (!on || !slot || *slot)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "bad target feature '%s' in '%s': %s supports %s%s%s, each once, "
                         "written as \"feature+\" or \"feature-\"; %s",
                         f, name, gfx, gfx_has_sramecc(gfx) ? "sramecc " : "",
                         gfx_has_xnack(gfx) ? "xnack" : "",
                         gfx_has_sramecc(gfx) || gfx_has_xnack(gfx) ? "" : "no features", examples);
    *slot = on;
  }
  t->kind = KILN_TARGET_AMDGPU;
  snprintf(t->triple, sizeof(t->triple), "amdgcn-amd-amdhsa");
  snprintf(t->cpu, sizeof(t->cpu), "%s", gfx);
  /* Canonical target ID order is alphabetical: sramecc before xnack. */
  snprintf(t->id, sizeof(t->id), "%s%s%s", gfx,
           sramecc ? (sramecc > 0 ? ":sramecc+" : ":sramecc-") : "",
           xnack ? (xnack > 0 ? ":xnack+" : ":xnack-") : "");
  snprintf(t->features, sizeof(t->features), "%s%s%s",
           sramecc ? (sramecc > 0 ? "+sramecc" : "-sramecc") : "", sramecc && xnack ? "," : "",
           xnack ? (xnack > 0 ? "+xnack" : "-xnack") : "");
  t->wave_size = wave;
  return KILN_OK;
}

static kiln_status_t parse_nvptx(const char *name, kiln_target_t *t) {
  for (size_t i = 0; i < sizeof(sm_table) / sizeof(sm_table[0]); i++) {
    if (strcmp(sm_table[i].name, name) != 0 || LLVM_VERSION_MAJOR < sm_table[i].since_llvm) continue;
    t->kind = KILN_TARGET_NVPTX;
    snprintf(t->triple, sizeof(t->triple), "nvptx64-nvidia-cuda");
    snprintf(t->cpu, sizeof(t->cpu), "%s", name);
    snprintf(t->id, sizeof(t->id), "%s", name);
    t->ptx_version = sm_table[i].ptx;
    snprintf(t->features, sizeof(t->features), "+ptx%u", t->ptx_version);
    t->wave_size = 32;
    return KILN_OK;
  }
  return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                     "unknown NVIDIA GPU '%s' (LLVM %d knows sm_50 to sm_121); %s", name,
                     LLVM_VERSION_MAJOR, examples);
}

static void parse_cpu(kiln_target_t *t) {
  t->kind = KILN_TARGET_CPU;
  snprintf(t->id, sizeof(t->id), "cpu");
  char *triple = LLVMGetDefaultTargetTriple();
  char *norm = LLVMNormalizeTargetTriple(triple);
  snprintf(t->triple, sizeof(t->triple), "%s", norm);
  LLVMDisposeMessage(norm);
  LLVMDisposeMessage(triple);
  char *cpu = LLVMGetHostCPUName();
  snprintf(t->cpu, sizeof(t->cpu), "%s", cpu);
  LLVMDisposeMessage(cpu);
  char *features = LLVMGetHostCPUFeatures();
  snprintf(t->features, sizeof(t->features), "%s", features);
  LLVMDisposeMessage(features);
  t->wave_size = 1;
}

kiln_status_t kiln_compiler_target_parse(const char *name, kiln_target_t *out_target) {
  kiln_target_t t;
  memset(&t, 0, sizeof(t));
  if (!name || !name[0])
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "no target given; %s", examples);
  if (strlen(name) >= sizeof(t.id))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "target name is too long; %s", examples);
  if (strcmp(name, "cpu") == 0 || strcmp(name, "host") == 0 || strcmp(name, "llvm") == 0) {
    parse_cpu(&t);
  } else if (strncmp(name, "gfx", 3) == 0) {
    KILN_RETURN_IF_ERROR(parse_amdgpu(name, &t));
  } else if (strncmp(name, "sm_", 3) == 0) {
    KILN_RETURN_IF_ERROR(parse_nvptx(name, &t));
  } else {
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "unknown target '%s'; %s", name, examples);
  }
  *out_target = t;
  return KILN_OK;
}
