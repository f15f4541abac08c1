/* ROCm device libraries (HSA.md §7): read once per process, linked lazily per job.
 *
 * A job links ocml and ockl only when the module calls them, and the oclc_* control
 * libraries they read. Everything in these files is linkonce_odr, and the IR linker copies
 * such definitions only when referenced, so a lazily parsed library costs only the
 * functions the kernel uses. Which oclc_isa_version file a gfx id gets is a choice written
 * down in docs/kernels.md ("Device libraries"): Debian's rocm-device-libs 5.2 stops at 940. */
#include <dirent.h>
#include <errno.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/Linker.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"

const char *kc_devlibs_default_dir(void) { return "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode"; }

static kiln_status_t read_file(const char *path, uint8_t **out, size_t *out_len) {
  FILE *f = fopen(path, "rb");
  if (!f) return KC_COMPILE_ERROR("cannot open device library %s: %s (install rocm-device-libs or "
                                  "set KILN_DEVICE_LIBS)", path, strerror(errno));
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 1 << 16;
      uint8_t *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory reading %s", path);
      }
      buf = nb;
    }
    size_t r = fread(buf + len, 1, cap - len, f);
    len += r;
    if (r == 0) break;
  }
  fclose(f);
  *out = buf;
  *out_len = len;
  return KILN_OK;
}

static kiln_status_t get_lib(kiln_compiler_t *c, const char *name, kc_devlib_t **out) {
  for (size_t i = 0; i < c->num_devlibs; i++) {
    if (strcmp(c->devlibs[i].name, name) == 0) {
      *out = &c->devlibs[i];
      return KILN_OK;
    }
  }
  if (c->num_devlibs == sizeof(c->devlibs) / sizeof(c->devlibs[0]))
    return KILN_STATUS(KILN_E_INTERNAL, "too many device libraries");
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s.bc", c->devlibs_dir, name);
  kc_devlib_t *lib = &c->devlibs[c->num_devlibs];
  KILN_RETURN_IF_ERROR(read_file(path, &lib->bytes, &lib->len));
  snprintf(lib->name, sizeof(lib->name), "%s", name);
  c->num_devlibs++;
  *out = lib;
  return KILN_OK;
}

void kc_devlibs_release(kiln_compiler_t *c) {
  for (size_t i = 0; i < c->num_devlibs; i++) free(c->devlibs[i].bytes);
  c->num_devlibs = 0;
}

static bool file_exists(const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s.bc", dir, name);
  FILE *f = fopen(path, "rb");
  if (f) fclose(f);
  return f != NULL;
}

/* The oclc_isa_version file for a gfx id: its own when the package has it, else the
 * newest one of the same generation that the package has (what ocml/ockl test against
 * __oclc_ISA_version are minimum-feature checks, so an older value takes older but valid
 * paths). */
static void isa_lib_name(const kiln_compiler_t *c, const char *gfx, char *out, size_t cap) {
  static const struct {
    const char *prefix;
    const char *file;
  } nearest[] = {
      {"gfx94", "940"},        {"gfx95", "940"},         {"gfx9-4-generic", "940"},
      {"gfx9-generic", "900"}, {"gfx10-1-generic", "1010"}, {"gfx10-3-generic", "1030"},
      {"gfx11", "1036"},       {"gfx12", "1036"},
  };
  snprintf(out, cap, "oclc_isa_version_%s", gfx + 3);
  if (file_exists(c->devlibs_dir, out)) return;
  for (size_t i = 0; i < sizeof(nearest) / sizeof(nearest[0]); i++) {
    if (strncmp(gfx, nearest[i].prefix, strlen(nearest[i].prefix)) == 0) {
      snprintf(out, cap, "oclc_isa_version_%s", nearest[i].file);
      return;
    }
  }
  snprintf(out, cap, "oclc_isa_version_%s", strncmp(gfx, "gfx1", 4) == 0 ? "1010" : "900");
}

static bool module_calls_prefix(LLVMModuleRef m, const char *prefix) {
  size_t n = strlen(prefix);
  for (LLVMValueRef f = LLVMGetFirstFunction(m); f; f = LLVMGetNextFunction(f)) {
    size_t len;
    const char *name = LLVMGetValueName2(f, &len);
    if (LLVMIsDeclaration(f) && strncmp(name, prefix, n) == 0) return true;
  }
  return false;
}

static kiln_status_t link_lib(kc_job_t *job, const char *name) {
  kc_devlib_t *lib;
  KILN_RETURN_IF_ERROR(get_lib(job->c, name, &lib));
  LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRange((const char *)lib->bytes, lib->len, lib->name, 0);
  LLVMModuleRef m = NULL;
  if (LLVMGetBitcodeModuleInContext2(job->ctx, mb, &m)) /* takes mb */
    return KC_COMPILE_ERROR("cannot read device library %s/%s.bc with LLVM %s", job->c->devlibs_dir,
                            name, KILN_LLVM_VERSION);
  LLVMSetTarget(m, LLVMGetTarget(job->mod));
  LLVMSetDataLayout(m, LLVMGetDataLayoutStr(job->mod));
  if (LLVMLinkModules2(job->mod, m)) /* destroys m */
    return KC_COMPILE_ERROR("linking device library %s failed: %.*s", name, (int)job->errors.len,
                            (const char *)job->errors.data);
  return KILN_OK;
}

kiln_status_t kc_devlibs_link(kc_job_t *job) {
  bool ocml = module_calls_prefix(job->mod, "__ocml_");
  bool ockl = module_calls_prefix(job->mod, "__ockl_");
  if (!ocml && !ockl) return KILN_OK;
  if (ocml) KILN_RETURN_IF_ERROR(link_lib(job, "ocml"));
  if (ockl || module_calls_prefix(job->mod, "__ockl_")) KILN_RETURN_IF_ERROR(link_lib(job, "ockl"));
  bool fast = job->req->options.fast_math;
  char isa[64];
  isa_lib_name(job->c, job->target.cpu, isa, sizeof(isa));
  const char *control[] = {
      isa,
      job->target.wave_size == 64 ? "oclc_wavefrontsize64_on" : "oclc_wavefrontsize64_off",
      fast ? "oclc_finite_only_on" : "oclc_finite_only_off",
      fast ? "oclc_unsafe_math_on" : "oclc_unsafe_math_off",
      "oclc_daz_opt_off",
      "oclc_correctly_rounded_sqrt_on",
      "oclc_abi_version_500", /* matches the code object v5 module flag (amdgpu.c) */
  };
  for (size_t i = 0; i < sizeof(control) / sizeof(control[0]); i++)
    KILN_RETURN_IF_ERROR(link_lib(job, control[i]));
  kc_mark(job, "devlibs");
  kc_log(job, "note: linked device libraries%s%s with %s", ocml ? " ocml" : "", ockl ? " ockl" : "", isa);
  return KILN_OK;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

bool kc_devlibs_fingerprint(const char *dir, uint8_t out[KILN_HASH_BYTES]) {
  DIR *d = opendir(dir);
  if (!d) return false;
  char *names[256];
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d)) && n < 256;) {
    size_t len = strlen(e->d_name);
    if (len > 3 && strcmp(e->d_name + len - 3, ".bc") == 0) names[n++] = strdup(e->d_name);
  }
  closedir(d);
  if (!n) return false;
  qsort(names, n, sizeof(names[0]), cmp_str);
  kiln_hasher_t h;
  kiln_hasher_init(&h);
  for (size_t i = 0; i < n; i++) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    uint8_t *bytes = NULL;
    size_t len = 0;
    kiln_status_t s = names[i] ? read_file(path, &bytes, &len) : KILN_STATUS(KILN_E_INTERNAL, "oom");
    kiln_hasher_field(&h, names[i] ? names[i] : "", names[i] ? strlen(names[i]) : 0);
    if (!s) kiln_hasher_field(&h, bytes, len);
    kiln_status_free(s);
    free(bytes);
    free(names[i]);
  }
  kiln_hasher_final(&h, out);
  return true;
}
