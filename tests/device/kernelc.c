/* kiln-test-kernelc: compiles the conformance kernels (portable-dialect bitcode) for a list
 * of targets with the real compiler and writes one encoded artifact per kernel file and
 * target: OUT_DIR/<stem>.<target>.kart. The conformance suite loads these, so it runs on a
 * machine without LLVM (copy the build's tests/device directory there).
 *
 *   kiln-test-kernelc OUT_DIR TARGET[,TARGET...] FILE.bc|FILE.te...
 *
 * Add a target for a GPU the build did not cover, e.g. `... kernels gfx1100 *.bc`.
 *
 * A kernel that does not compile for a target must not stop the build, and LLVM may end
 * the process on some inputs, so every compile runs in a forked child. A failure leaves a
 * marker file instead of the artifact ("KILN-COMPILE-FAILED\n" and the compiler's words),
 * which the suite turns into a failed test naming the kernel, target and message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compiler/compiler.h"

static uint8_t *read_file(const char *path, size_t *out_len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *out_len = (size_t)n;
  return buf;
}

static void output_path(const char *out_dir, const char *target, const char *path, char *out, size_t cap);

/* "dir/vadd.bc" -> "vadd" */
static void stem(const char *path, char *out, size_t cap) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strcspn(base, ".");
  snprintf(out, cap, "%.*s", (int)n, base);
}

static int compile_one(kiln_compiler_t *c, const char *out_dir, const char *target, const char *path) {
  size_t len;
  uint8_t *ir = read_file(path, &len);
  if (!ir) {
    fprintf(stderr, "kernelc: cannot read %s\n", path);
    return 1;
  }
  /* FILE.te: a te program (tests/softgpu's topi corpus); anything else LLVM bitcode */
  size_t pl = strlen(path);
  kiln_payload_kind_t kind = pl > 3 && strcmp(path + pl - 3, ".te") == 0 ? KILN_PAYLOAD_TE : KILN_PAYLOAD_LLVM;
  kiln_compile_request_t req = {.payload = ir, .payload_size = len, .kind = kind,
                                .target = target, .options = kiln_compile_options_default()};
  kiln_artifact_t art;
  kiln_status_t s = kiln_compiler_compile(c, &req, &art);
  free(ir);
  if (s) {
    fprintf(stderr, "kernelc: %s for %s: %s\n", path, target, kiln_status_message(s));
    kiln_status_free(s);
    return 1;
  }
  uint8_t *bytes;
  size_t n;
  s = kiln_artifact_encode(&art, &bytes, &n);
  kiln_artifact_deinit(&art);
  if (s) {
    fprintf(stderr, "kernelc: encoding %s: %s\n", path, kiln_status_message(s));
    kiln_status_free(s);
    return 1;
  }
  char out[4096];
  output_path(out_dir, target, path, out, sizeof out);
  FILE *f = fopen(out, "wb");
  int rc = !f || fwrite(bytes, 1, n, f) != n;
  if (f && fclose(f) != 0) rc = 1;
  if (rc) fprintf(stderr, "kernelc: cannot write %s\n", out);
  free(bytes);
  return rc;
}

#define FAILED_MARKER "KILN-COMPILE-FAILED\n"

static void output_path(const char *out_dir, const char *target, const char *path, char *out, size_t cap) {
  char name[256];
  stem(path, name, sizeof name);
  snprintf(out, cap, "%s/%s.%s.kart", out_dir, name, target);
}

/* Runs compile_one in a child with stderr captured; on failure writes the marker file with
 * what the child said. Returns 0 when the artifact was written. */
static int compile_isolated(kiln_compiler_t *c, const char *out_dir, const char *target, const char *path) {
  int fds[2];
  if (pipe(fds) != 0) return 1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    _exit(compile_one(c, out_dir, target, path));
  }
  close(fds[1]);
  char said[8192];
  size_t n = 0;
  ssize_t r;
  while ((r = read(fds[0], said + n, sizeof said - 1 - n)) > 0) n += (size_t)r;
  said[n] = '\0';
  close(fds[0]);
  int ws = 0;
  waitpid(pid, &ws, 0);
  if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) return 0;
  if (WIFSIGNALED(ws))
    snprintf(said + n, sizeof said - n, "compiler died of signal %d", WTERMSIG(ws));
  fprintf(stderr, "kernelc: %s for %s failed:\n%s\n", path, target, said);
  char out[4096];
  output_path(out_dir, target, path, out, sizeof out);
  FILE *f = fopen(out, "wb");
  if (f) {
    fputs(FAILED_MARKER, f);
    fputs(said, f);
    fclose(f);
  }
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s OUT_DIR TARGET[,TARGET...] FILE.bc...\n", argv[0]);
    return 2;
  }
  kiln_compiler_t *c;
  kiln_status_t s = kiln_compiler_create(NULL, &c);
  if (s) {
    fprintf(stderr, "kernelc: %s\n", kiln_status_message(s));
    return 1;
  }
  int failed = 0;
  char *targets = strdup(argv[2]);
  for (char *save, *t = strtok_r(targets, ",", &save); t; t = strtok_r(NULL, ",", &save))
    for (int i = 3; i < argc; i++) failed += compile_isolated(c, argv[1], t, argv[i]);
  free(targets);
  kiln_compiler_destroy(c);
  if (failed) fprintf(stderr, "kernelc: %d compile(s) failed; their tests will fail with the message\n", failed);
  /* Success all the same: the build goes on and the suite reports each failure. */
  return 0;
}
