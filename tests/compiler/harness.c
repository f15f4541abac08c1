#include "tests/compiler/harness.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint8_t *read_file(const char *path, size_t *out_len) {
  FILE *f = fopen(path, "rb");
  cr_assert(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = malloc((size_t)n + 1);
  cr_assert(p && fread(p, 1, (size_t)n, f) == (size_t)n);
  p[n] = 0;
  fclose(f);
  *out_len = (size_t)n;
  return p;
}

void th_write_temp(const void *p, size_t n, const char *suffix, char *out_path, size_t cap) {
  snprintf(out_path, cap, "/tmp/kiln-test-XXXXXX%s", suffix);
  int fd = mkstemps(out_path, (int)strlen(suffix));
  cr_assert(fd >= 0, "mkstemps");
  cr_assert(write(fd, p, n) == (ssize_t)n);
  close(fd);
}

int th_run(const char *cmd, char *out, size_t cap) {
  FILE *f = popen(cmd, "r");
  cr_assert(f, "popen %s", cmd);
  size_t n = 0;
  char sink[4096];
  for (;;) {
    char *dst = out && n + 1 < cap ? out + n : sink;
    size_t room = out && n + 1 < cap ? cap - 1 - n : sizeof(sink);
    size_t r = fread(dst, 1, room, f);
    if (r == 0) break;
    if (dst != sink) n += r;
  }
  if (out) out[n] = 0;
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const char *th_llvm_tool(const char *name) {
  static char path[512];
  snprintf(path, sizeof(path), "%s/%s", KILN_TEST_LLVM_BINDIR, name);
  return path;
}

static uint8_t *clang_compile(const char *src_path, bool text, size_t *out_len) {
  if (!KILN_TEST_CLANG[0]) cr_skip_test("clang was not found at configure time");
  char out[256], cmd[2048], log[4096];
  snprintf(out, sizeof(out), "/tmp/kiln-test-XXXXXX%s", text ? ".ll" : ".bc");
  int fd = mkstemps(out, 3);
  cr_assert(fd >= 0);
  close(fd);
  snprintf(cmd, sizeof(cmd), "'%s' -O2 -emit-llvm %s -I'%s' '%s' -o '%s' 2>&1", KILN_TEST_CLANG, text ? "-S" : "-c",
           KILN_TEST_INCLUDE, src_path, out);
  int rc = th_run(cmd, log, sizeof(log));
  cr_assert_eq(rc, 0, "clang failed on %s: %s", src_path, log);
  uint8_t *p = read_file(out, out_len);
  unlink(out);
  return p;
}

uint8_t *th_example_bc(const char *name, size_t *out_len) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s.c", KILN_TEST_EXAMPLES, name);
  return clang_compile(path, false, out_len);
}

char *th_example_ll(const char *name) {
  char path[512];
  size_t n;
  snprintf(path, sizeof(path), "%s/%s.c", KILN_TEST_EXAMPLES, name);
  return (char *)clang_compile(path, true, &n);
}

uint8_t *th_source_bc(const char *source, size_t *out_len) {
  char path[256];
  th_write_temp(source, strlen(source), ".c", path, sizeof(path));
  uint8_t *p = clang_compile(path, false, out_len);
  unlink(path);
  return p;
}

char *th_source_ll(const char *source) {
  char path[256];
  size_t n;
  th_write_temp(source, strlen(source), ".c", path, sizeof(path));
  char *p = (char *)clang_compile(path, true, &n);
  unlink(path);
  return p;
}

void th_compile(const uint8_t *payload, size_t len, const char *target, const kiln_compile_options_t *opts,
                kiln_artifact_t *out) {
  kiln_compiler_t *c;
  kiln_status_t s = kiln_compiler_create(NULL, &c);
  cr_assert(!s, "create: %s", kiln_status_message(s));
  kiln_compile_request_t req = {.payload = payload, .payload_size = len, .kind = KILN_PAYLOAD_AUTO,
                                .target = target, .options = opts ? *opts : kiln_compile_options_default()};
  s = kiln_compiler_compile(c, &req, out);
  cr_assert(!s, "compile for %s: %s: %s", target, s ? kiln_code_name(kiln_status_code(s)) : "",
            s ? kiln_status_message(s) : "");
  kiln_compiler_destroy(c);
}

kiln_status_t th_compile_status(const uint8_t *payload, size_t len, kiln_payload_kind_t kind, const char *target) {
  kiln_compiler_t *c;
  kiln_status_t s = kiln_compiler_create(NULL, &c);
  cr_assert(!s);
  kiln_compile_request_t req = {.payload = payload, .payload_size = len, .kind = kind, .target = target,
                                .options = kiln_compile_options_default()};
  kiln_artifact_t a;
  s = kiln_compiler_compile(c, &req, &a);
  if (!s) kiln_artifact_deinit(&a);
  kiln_compiler_destroy(c);
  return s;
}

void th_cpu_load(const kiln_artifact_t *a, th_cpu_module_t *out) {
  cr_assert_eq(a->format, KILN_FORMAT_CPU_SO);
  th_write_temp(a->code, a->code_size, ".so", out->path, sizeof(out->path));
  out->handle = dlopen(out->path, RTLD_NOW | RTLD_LOCAL);
  cr_assert(out->handle, "dlopen: %s", dlerror());
  const uint32_t *abi = dlsym(out->handle, KILN_CPU_ABI_SYMBOL);
  cr_assert(abi && *abi == KILN_CPU_ABI_VERSION, "cpu ABI version symbol");
}

void th_cpu_unload(th_cpu_module_t *m) {
  dlclose(m->handle);
  unlink(m->path);
}

void th_cpu_run(const th_cpu_module_t *m, const kiln_artifact_t *a, const char *name, const uint32_t grid[3],
                const uint32_t block[3], uint32_t dynamic_shared, void *const *args) {
  const kiln_kernel_t *k = kiln_artifact_kernel(a, name);
  cr_assert(k, "kernel %s not in the artifact", name);
  char sym[160];
  snprintf(sym, sizeof(sym), KILN_CPU_WG_PREFIX "%s", name);
  kiln_cpu_wg_fn_t fn = (kiln_cpu_wg_fn_t)dlsym(m->handle, sym);
  cr_assert(fn, "%s not exported", sym);
  size_t nwi = (size_t)block[0] * block[1] * block[2];
  void *shared = aligned_alloc(64, ((size_t)k->group_segment_size + dynamic_shared + 64) / 64 * 64);
  void *scratch = aligned_alloc(64, (nwi * k->private_segment_size + 64) / 64 * 64);
  cr_assert(shared && scratch);
  kiln_cpu_wg_ctx_t ctx = {0};
  ctx.shared = shared;
  ctx.scratch = scratch;
  for (int d = 0; d < 3; d++) {
    ctx.group_size[d] = block[d];
    ctx.num_groups[d] = grid[d];
  }
  for (uint32_t z = 0; z < grid[2]; z++)
    for (uint32_t y = 0; y < grid[1]; y++)
      for (uint32_t x = 0; x < grid[0]; x++) {
        ctx.group_id[0] = x;
        ctx.group_id[1] = y;
        ctx.group_id[2] = z;
        /* Fresh garbage each group: nothing may rely on memory left by another group. */
        memset(shared, 0xa5, ((size_t)k->group_segment_size + dynamic_shared + 64) / 64 * 64);
        fn(&ctx, args);
      }
  free(shared);
  free(scratch);
}
