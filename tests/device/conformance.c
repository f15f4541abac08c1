#include "conformance.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support.h"

#define DEADLINE_NS (30ull * 1000 * 1000 * 1000)

bool conf_in_child = false;

/* A failed check: a Criterion assertion in the test process; in a forked child (the fault
 * test) a line on stderr and exit 101, since Criterion's messages from a process its runner
 * did not start are never acknowledged and the child would block on them forever. */
#define CONF_FAIL(...)                   \
  do {                                   \
    if (conf_in_child) {                 \
      fprintf(stderr, "child: ");        \
      fprintf(stderr, __VA_ARGS__);      \
      fputc('\n', stderr);               \
      _exit(101);                        \
    }                                    \
    cr_assert_fail(__VA_ARGS__);         \
  } while (0)
#define CONF_CHECK(cond, ...)            \
  do {                                   \
    if (!(cond)) CONF_FAIL(__VA_ARGS__); \
  } while (0)

conf_param_t *conf_params(size_t *out_count) {
  const char *only = getenv("KILN_TEST_BACKENDS");
  size_t n = kiln_device_backend_count(), k = 0;
  conf_param_t *p = cr_malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) {
    const char *kind = kiln_device_backend_at(i)->kind;
    if (only && *only) {
      char list[256];
      snprintf(list, sizeof list, ",%s,", only);
      char needle[16];
      snprintf(needle, sizeof needle, ",%s,", kind);
      if (!strstr(list, needle)) continue;
    }
    memset(&p[k], 0, sizeof p[k]);
    snprintf(p[k].kind, sizeof p[k].kind, "%s", kind);
    k++;
  }
  *out_count = k;
  return p;
}

static uint32_t device_index(void) {
  const char *idx = getenv("KILN_TEST_DEVICE_INDEX");
  return idx ? (uint32_t)strtoul(idx, NULL, 10) : 0;
}

void conf_require(const char *kind) {
  const kiln_backend_t *b = kiln_device_backend_find(kind);
  CONF_CHECK(b, "no backend %s", kind);
  uint32_t index = device_index();
  kiln_device_info_t infos[16];
  size_t n = 0;
  char reason[256] = "";
  kiln_status_t s = b->probe(infos, 16, &n, reason, sizeof reason);
  CONF_CHECK((s) == (KILN_OK), "%s probe: %s", kind, s ? kiln_status_message(s) : "");
  CONF_CHECK(!conf_in_child || index < n, "%s: no device %u (%zu present)", kind, index, n);
  if (n == 0) cr_skip_test("%s: no device: %s", kind, reason);
  if (index >= n) cr_skip_test("%s: no device %u (%zu present)", kind, index, n);
}

void conf_open(conf_t *c, const char *kind) {
  memset(c, 0, sizeof *c);
  conf_require(kind);
  c->b = kiln_device_backend_find(kind);
  uint32_t index = device_index();
  kiln_status_t s = c->b->open(index, NULL, 0, &c->dev);
  CONF_CHECK((s) == (KILN_OK), "opening %s:%u: %s", kind, index, s ? kiln_status_message(s) : "");
  c->info = c->b->info(c->dev);
}

/* The artifact file for this device: cpu -> "cpu"; hsa -> the processor ("gfx90a" from
 * "gfx90a:sramecc+:xnack-"; bare ids run on either feature setting); cuda -> its own sm_XY,
 * else the newest older sm_XY present (PTX JIT-compiles forward). */
static bool artifact_path(conf_t *c, const char *stem, char *path, size_t cap) {
  const char *dir = kiln_test_data_dir();
  char target[96];
  snprintf(target, sizeof target, "%.*s", (int)strcspn(c->info->arch, ":"), c->info->arch);
  snprintf(path, cap, "%s/%s.%s.kart", dir, stem, target);
  FILE *f = fopen(path, "rb");
  if (f) {
    fclose(f);
    return true;
  }
  if (strcmp(c->info->kind, "cuda") != 0) return false;
  int want = atoi(target + 3), best = -1;
  DIR *d = opendir(dir);
  if (!d) return false;
  char prefix[256];
  snprintf(prefix, sizeof prefix, "%s.sm_", stem);
  for (struct dirent *e; (e = readdir(d));) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    int cc = atoi(e->d_name + strlen(prefix));
    if (cc <= want && cc > best) best = cc;
  }
  closedir(d);
  if (best < 0) return false;
  snprintf(path, cap, "%s/%s.sm_%d.kart", dir, stem, best);
  return true;
}

void conf_load(conf_t *c, const char *stem) {
  char path[4096];
  if (!artifact_path(c, stem, path, sizeof path))
    CONF_FAIL("no artifact of %s for %s (%s) in %s: build one with kiln-test-kernelc DIR %.*s %s.bc",
                   stem, c->info->id, c->info->arch, kiln_test_data_dir(),
                   (int)strcspn(c->info->arch, ":"), c->info->arch, stem);
  const char *name = strrchr(path, '/') + 1;
  size_t len;
  uint8_t *bytes = kiln_test_read_data(name, &len);
  /* kiln-test-kernelc leaves this marker where the compiler failed at build time. */
  static const char failed[] = "KILN-COMPILE-FAILED\n";
  if (len >= sizeof failed - 1 && memcmp(bytes, failed, sizeof failed - 1) == 0)
    CONF_FAIL("%s did not compile for %s at build time: %s", stem, c->info->arch,
                   (char *)bytes + sizeof failed - 1);
  kiln_status_t s = kiln_artifact_decode(bytes, len, &c->art);
  free(bytes);
  CONF_CHECK((s) == (KILN_OK), "decoding %s: %s", path, s ? kiln_status_message(s) : "");
  s = c->b->module_load(c->dev, &c->art, &c->mod);
  CONF_CHECK((s) == (KILN_OK), "loading %s on %s: %s", path, c->info->id, s ? kiln_status_message(s) : "");
}

void conf_close(conf_t *c) {
  if (c->mod) c->b->module_unload(c->dev, c->mod);
  kiln_artifact_deinit(&c->art);
  if (c->dev) c->b->close(c->dev);
  memset(c, 0, sizeof *c);
}

kiln_dmem_t *conf_alloc(conf_t *c, size_t bytes) {
  kiln_dmem_t *m;
  kiln_status_t s = c->b->mem_alloc(c->dev, bytes, &m);
  CONF_CHECK((s) == (KILN_OK), "alloc %zu: %s", bytes, s ? kiln_status_message(s) : "");
  return m;
}

kiln_dmem_t *conf_upload(conf_t *c, const void *host, size_t bytes) {
  kiln_dmem_t *m = conf_alloc(c, bytes);
  kiln_status_t s = c->b->copy_in(c->dev, m, 0, host, bytes);
  CONF_CHECK((s) == (KILN_OK), "copy_in: %s", s ? kiln_status_message(s) : "");
  return m;
}

void conf_download(conf_t *c, kiln_dmem_t *m, void *host, size_t bytes) {
  kiln_status_t s = c->b->copy_out(c->dev, m, 0, host, bytes);
  CONF_CHECK((s) == (KILN_OK), "copy_out: %s", s ? kiln_status_message(s) : "");
}

void conf_free(conf_t *c, kiln_dmem_t *m) { c->b->mem_free(c->dev, m); }

kiln_launch_arg_t conf_tensor(conf_t *c, kiln_dmem_t *m) {
  return (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_TENSOR, .tensor_addr = c->b->mem_address(c->dev, m)};
}

kiln_launch_arg_t conf_int(int64_t v) {
  return v < 0 ? (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_INT, .i = v}
               : (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_UINT, .u = (uint64_t)v};
}

kiln_launch_arg_t conf_float(double v) { return (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_FLOAT, .f = v}; }

kiln_status_t conf_try(conf_t *c, const char *kernel, const uint32_t grid[3], const uint32_t block[3],
                       uint32_t shared, const kiln_launch_arg_t *args, size_t nargs, uint32_t count,
                       uint64_t *out_elapsed_ns) {
  const kiln_kernel_t *k = kiln_artifact_kernel(&c->art, kernel);
  CONF_CHECK(k, "artifact has no kernel %s", kernel);
  kiln_launch_values_t v;
  kiln_status_t s = kiln_launch_values_init(&v, k, args, nargs);
  CONF_CHECK((s) == (KILN_OK), "%s args: %s", kernel, s ? kiln_status_message(s) : "");
  kiln_launch_t l;
  s = kiln_launch_prepare(k, c->info, grid, block, shared, v.ptrs, &l);
  CONF_CHECK((s) == (KILN_OK), "%s geometry: %s", kernel, s ? kiln_status_message(s) : "");
  s = c->b->launch(c->dev, c->mod, &l, count, DEADLINE_NS, out_elapsed_ns);
  kiln_launch_values_deinit(&v);
  return s;
}

void conf_run(conf_t *c, const char *kernel, const uint32_t grid[3], const uint32_t block[3],
              uint32_t shared, const kiln_launch_arg_t *args, size_t nargs) {
  kiln_status_t s = conf_try(c, kernel, grid, block, shared, args, nargs, 1, NULL);
  CONF_CHECK((s) == (KILN_OK), "%s on %s: %s", kernel, c->info->id, s ? kiln_status_message(s) : "");
}

uint32_t conf_ulp_diff(float a, float b) {
  if (a == b) return 0;
  if (isnan(a) || isnan(b)) return UINT32_MAX;
  int32_t ia, ib;
  memcpy(&ia, &a, 4);
  memcpy(&ib, &b, 4);
  /* Map sign-magnitude to a monotonic integer line. */
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  int64_t d = (int64_t)ia - ib;
  return (uint32_t)(d < 0 ? -d : d);
}
