/* Object -> shared object with in-process lld (lld_link.cpp). lld reads and writes files,
 * so each compiler keeps a private temporary directory for the two files of a link. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler/internal.h"

static kiln_status_t write_file(const char *path, const uint8_t *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return KILN_STATUS(KILN_E_INTERNAL, "cannot create %s: %s", path, strerror(errno));
  size_t w = fwrite(p, 1, n, f);
  int rc = fclose(f);
  if (w != n || rc != 0) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cannot write %s", path);
  return KILN_OK;
}

static kiln_status_t read_all(const char *path, uint8_t **out, size_t *out_len) {
  FILE *f = fopen(path, "rb");
  if (!f) return KILN_STATUS(KILN_E_INTERNAL, "the linker wrote no %s: %s", path, strerror(errno));
  kiln_status_t s = KILN_OK;
  uint8_t *buf = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n < 0 || fseek(f, 0, SEEK_SET) != 0) s = KILN_STATUS(KILN_E_INTERNAL, "cannot size %s", path);
  if (!s && !(buf = malloc((size_t)n + 1))) s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  if (!s && fread(buf, 1, (size_t)n, f) != (size_t)n) s = KILN_STATUS(KILN_E_INTERNAL, "cannot read %s", path);
  fclose(f);
  if (s) {
    free(buf);
    return s;
  }
  *out = buf;
  *out_len = (size_t)n;
  return KILN_OK;
}

static kiln_status_t ensure_tmpdir(kiln_compiler_t *c) {
  if (c->tmpdir[0]) return KILN_OK;
  const char *base = getenv("TMPDIR");
  snprintf(c->tmpdir, sizeof(c->tmpdir), "%s/kiln-cc-XXXXXX", base && base[0] ? base : "/tmp");
  if (!mkdtemp(c->tmpdir)) {
    kiln_status_t s = KILN_STATUS(KILN_E_INTERNAL, "cannot create a temporary directory %s: %s", c->tmpdir,
                                  strerror(errno));
    c->tmpdir[0] = 0;
    return s;
  }
  return KILN_OK;
}

void kc_link_cleanup(kiln_compiler_t *c) {
  if (!c->tmpdir[0]) return;
  char path[300];
  snprintf(path, sizeof(path), "%s/in.o", c->tmpdir);
  unlink(path);
  snprintf(path, sizeof(path), "%s/out.so", c->tmpdir);
  unlink(path);
  rmdir(c->tmpdir);
  c->tmpdir[0] = 0;
}

kiln_status_t kc_link_shared(kc_job_t *job, const uint8_t *obj, size_t obj_len,
                             const char *const *extra_args, size_t n_extra, uint8_t **out,
                             size_t *out_len) {
  KILN_RETURN_IF_ERROR(ensure_tmpdir(job->c));
  char in[300], outp[300];
  snprintf(in, sizeof(in), "%s/in.o", job->c->tmpdir);
  snprintf(outp, sizeof(outp), "%s/out.so", job->c->tmpdir);
  unlink(outp);
  KILN_RETURN_IF_ERROR(write_file(in, obj, obj_len));
  /* --no-dependent-libraries: an object's .deplibs section (from llvm.dependent-libraries)
   * would add libraries the kernel never asked kiln for. */
  const char *argv[32] = {"ld.lld", "-shared", "--no-undefined", "--no-dependent-libraries", "-o", outp, in};
  int argc = 7;
  for (size_t i = 0; i < n_extra && argc < 31; i++) argv[argc++] = extra_args[i];
  char err[2048];
  err[0] = 0;
  int rc = kc_lld_link(argv, argc, err, sizeof(err));
  unlink(in);
  if (rc != 0) {
    size_t n = strlen(err);
    while (n && err[n - 1] == '\n') n--;
    return KC_COMPILE_ERROR("linking the %s code object failed: %.*s", job->target.id, (int)n, err);
  }
  kiln_status_t s = read_all(outp, out, out_len);
  unlink(outp);
  kc_mark(job, "link");
  return s;
}
