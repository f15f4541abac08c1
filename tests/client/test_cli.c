/* The kiln CLI against the real kilnd: put/get round trips of .npy files (also files numpy
 * wrote, when python3 with numpy is present), output, and exit codes. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "npy.h"

TestSuite(cli, .init = fixture_up, .fini = fixture_down, .timeout = 120);

/* Runs $KILN_CLI with args (NULL-terminated); returns its exit code, stdout in out. */
static int run_cli(char *out, size_t cap, const char *const *args) {
  const char *cli = getenv("KILN_CLI");
  cr_assert(cli && *cli, "set KILN_CLI to the kiln binary");
  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    const char *argv[32] = {cli};
    int n = 1;
    for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    execv(cli, (char *const *)argv);
    _exit(127);
  }
  close(p[1]);
  size_t len = 0;
  ssize_t r;
  while ((r = read(p[0], out + len, cap - 1 - len)) > 0 || (r < 0 && errno == EINTR))
    if (r > 0) len += (size_t)r;
  out[len] = 0;
  close(p[0]);
  int st;
  waitpid(pid, &st, 0);
  cr_assert(WIFEXITED(st), "kiln died (wait status 0x%x)", st);
  return WEXITSTATUS(st);
}

#define CLI(out, ...) run_cli(out, sizeof(out), (const char *const[]){__VA_ARGS__, NULL})

static char *tmp_path(const char *name) {
  static char path[4][256];
  static int k;
  char *p = path[k++ % 4];
  snprintf(p, 256, "%s/%s", g_kilnd.dir, name);
  return p;
}

static void *slurp(const char *path, size_t *out_n) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  void *p = malloc((size_t)n + 1);
  cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *out_n = (size_t)n;
  return p;
}

Test(cli, ping_devices_stats) {
  char out[8192];
  cr_assert_eq(CLI(out, "--url", g_kilnd.tcp_url, "ping"), 0);
  cr_expect(strstr(out, "pong") != NULL, "%s", out);
  cr_assert_eq(CLI(out, "--url", g_kilnd.unix_url, "devices"), 0);
  cr_expect(strstr(out, "cpu:0") != NULL, "%s", out);
  cr_assert_eq(CLI(out, "--url", g_kilnd.unix_url, "devices", "--json"), 0);
  cr_expect(strstr(out, "\"id\": \"cpu:0\"") != NULL, "%s", out);
  cr_assert_eq(CLI(out, "--url", g_kilnd.unix_url, "stats", "--json"), 0);
  cr_expect(strstr(out, "\"connections\"") != NULL, "%s", out);
}

/* `kiln stats` prints tables: a tenant row that counts a tensor put through the CLI, the
 * compile queues and the device. */
Test(cli, stats_tables) {
  static const uint64_t shape[] = {4};
  float data[4] = {1, 2, 3, 4};
  kiln_tensor_desc_t d = {.dtype = KILN_FLOAT32, .ndim = 1, .nbytes = sizeof(data)};
  memcpy(d.shape, shape, sizeof(shape));
  char *in = tmp_path("stats.npy");
  ASSERT_OK(kiln_npy_write(in, &d, data));
  char out[8192];
  cr_assert_eq(CLI(out, "--url", g_kilnd.tcp_url, "put", in), 0);
  char id[32];
  snprintf(id, sizeof(id), "%llu", strtoull(out, NULL, 10));
  cr_assert_eq(CLI(out, "--url", g_kilnd.tcp_url, "stats"), 0);
  cr_assert(strstr(out, "TENANT") && strstr(out, "QUEUED") && strstr(out, "compile batch") &&
                strstr(out, "DEVICE"),
            "%s", out);
  /* default's row: name, connections (this one), tensors, memory */
  const char *row = strstr(out, "\ndefault ");
  cr_assert(row, "no row for tenant default:\n%s", out);
  unsigned conns = 0, tensors = 0, mem = 0;
  cr_assert_eq(sscanf(row, "\ndefault %u %u %u B", &conns, &tensors, &mem), 3, "%s", out);
  cr_assert_eq(tensors, 1, "%s", out);
  cr_assert_eq(mem, 16, "%s", out);
  cr_assert(strstr(out, "cpu:0"), "%s", out);
  cr_assert_eq(CLI(out, "--url", g_kilnd.tcp_url, "free", id), 0);
  cr_assert_eq(CLI(out, "--url", g_kilnd.tcp_url, "stats", "--bogus"), 2);
}

Test(cli, put_get_round_trip) {
  static const uint64_t shape[] = {3, 4, 5};
  int16_t data[60];
  for (int i = 0; i < 60; i++) data[i] = (int16_t)(i * 37 - 1000);
  kiln_tensor_desc_t d = {.dtype = KILN_INT16, .ndim = 3, .nbytes = sizeof(data)};
  memcpy(d.shape, shape, sizeof(shape));
  char *in = tmp_path("in.npy"), *back = tmp_path("back.npy");
  ASSERT_OK(kiln_npy_write(in, &d, data));
  char out[256];
  cr_assert_eq(CLI(out, "--url", g_kilnd.tcp_url, "put", in), 0);
  char *end;
  unsigned long long id = strtoull(out, &end, 10);
  cr_assert(end != out && *end == '\n', "put printed '%s', not an id", out);
  char idstr[32];
  snprintf(idstr, sizeof(idstr), "%llu", id);
  cr_assert_eq(CLI(out, "--url", g_kilnd.tcp_url, "get", idstr, back), 0);
  size_t na, nb;
  void *a = slurp(in, &na), *b = slurp(back, &nb);
  cr_assert(na == nb && memcmp(a, b, na) == 0, "the file came back different");
  free(a);
  free(b);
  cr_assert_eq(CLI(out, "--url", g_kilnd.tcp_url, "free", idstr), 0);
  cr_assert_eq(CLI(out, "--url", g_kilnd.tcp_url, "free", idstr), 1, "freeing twice");
}

Test(cli, exit_codes) {
  char out[8192];
  cr_expect_eq(CLI(out, "--url", g_kilnd.tcp_url, "get", "12345", tmp_path("x.npy")), 1,
               "unknown id: kilnd's E_NOT_FOUND");
  cr_expect_eq(CLI(out, "--url", g_kilnd.tcp_url, "frobnicate"), 2, "unknown command");
  cr_expect_eq(CLI(out, "--url", g_kilnd.tcp_url, "get", "notanumber", "x.npy"), 2);
  cr_expect_eq(CLI(out, "--url", "gopher:x", "ping"), 2, "malformed URL");
  cr_expect_eq(CLI(out, "--url", "unix:/nonexistent/kiln.sock", "ping"), 3, "nothing listens");
  cr_expect_eq(CLI(out, "--url", g_kilnd.tcp_url, "put", tmp_path("missing.npy")), 4);
  /* A Fortran-order file: rejected locally with exit 4. */
  char *f = tmp_path("fortran.npy");
  FILE *fp = fopen(f, "wb");
  static const char hdr[] = "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }";
  char buf[128];
  memset(buf, ' ', sizeof(buf));
  memcpy(buf, "\x93NUMPY\x01\x00\x76\x00", 10);
  memcpy(buf + 10, hdr, sizeof(hdr) - 1);
  buf[127] = '\n';
  fwrite(buf, 1, sizeof(buf), fp);
  float zeros[4] = {0};
  fwrite(zeros, 1, sizeof(zeros), fp);
  fclose(fp);
  cr_expect_eq(CLI(out, "--url", g_kilnd.tcp_url, "put", f), 4, "Fortran order");
  cr_expect_eq(CLI(out, "--help"), 0);
  cr_expect(strstr(out, "exit status") != NULL, "--help documents the exit codes");
}

/* numpy writes the files, kiln moves them through kilnd, numpy checks what came back. */
Test(cli, numpy_interop) {
  if (access("/usr/bin/python3", X_OK) != 0 ||
      system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
    cr_skip_test("python3 with numpy is not installed");
  static const char *const dtypes[] = {"float16", "float32", "float64", "int8", "int16",
                                       "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                       "bool"};
  char cmd[2048], out[256];
  for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
    char *in = tmp_path("np_in.npy"), *back = tmp_path("np_back.npy");
    snprintf(cmd, sizeof(cmd),
             "/usr/bin/python3 -c \"import numpy as np; "
             "a = (np.arange(2*3*7) %% 5 * 3 - 4).astype('%s').reshape(2, 3, 7); "
             "np.save('%s', a)\"",
             dtypes[i], in);
    cr_assert_eq(system(cmd), 0, "numpy could not write %s", dtypes[i]);
    cr_assert_eq(CLI(out, "--url", g_kilnd.unix_url, "put", in), 0, "put %s", dtypes[i]);
    out[strcspn(out, "\n")] = 0;
    char id[sizeof(out)];
    memcpy(id, out, sizeof(out));
    cr_assert_eq(CLI(out, "--url", g_kilnd.unix_url, "get", id, back), 0, "get %s", dtypes[i]);
    snprintf(cmd, sizeof(cmd),
             "/usr/bin/python3 -c \"import numpy as np, sys; a = np.load('%s'); b = np.load('%s'); "
             "sys.exit(0 if a.dtype == b.dtype and a.shape == b.shape and (a == b).all() else 1)\"",
             in, back);
    cr_expect_eq(system(cmd), 0, "%s did not survive put/get", dtypes[i]);
  }
  /* 0-d and empty arrays too. */
  char *in = tmp_path("np_0d.npy");
  snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c \"import numpy as np; np.save('%s', np.float64(2.5))\"", in);
  cr_assert_eq(system(cmd), 0);
  cr_assert_eq(CLI(out, "--url", g_kilnd.unix_url, "put", in), 0);
  snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c \"import numpy as np; np.save('%s', np.zeros((3, 0)))\"", in);
  cr_assert_eq(system(cmd), 0);
  cr_assert_eq(CLI(out, "--url", g_kilnd.unix_url, "put", in), 0);
}
