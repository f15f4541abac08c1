/* The cache directory as a trust boundary, through the real kilnd (tests/server's harness
 * starts it): an entry forged with a recomputed checksum is rebuilt and the right kernel
 * runs; a cache directory others can write stops kilnd at start, with nothing in it
 * deleted; and a second kilnd never takes a live daemon's unix socket, not even one that
 * then fails to start. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/status.h"
#include "base/util.h"
#include "tests/server/harness.h"

static char work[64]; /* outlives each daemon: holds the cache directory */
static void setup(void) {
  strcpy(work, "/tmp/kiln-cache-live-XXXXXX");
  cr_assert(mkdtemp(work));
}
static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", work);
  if (system(cmd) != 0) {}
}
TestSuite(cache_live, .init = setup, .fini = teardown, .timeout = 120);

/* Compiles; returns whether the reply said "cached", the module id in out. */
static bool compile_ok(client_t *c, const char *ir, char out[65]) {
  client_send_compile(c, 1, ir, "cpu");
  cr_assert(client_recv(c, 60000), "no compile reply");
  char t[512];
  cr_assert_eq(code_of(c), 0, "compile failed: %s", text_of(c, t, sizeof(t)));
  const msgpack_object *m = kiln_params_find(c->msg.result, "module");
  cr_assert(m && m->type == MSGPACK_OBJECT_STR && m->via.str.size == 64);
  memcpy(out, m->via.str.ptr, 64);
  out[64] = 0;
  const msgpack_object *cached = kiln_params_find(c->msg.result, "cached");
  return cached && cached->type == MSGPACK_OBJECT_BOOLEAN && cached->via.boolean;
}

/* Launches kernel k of module with one int32 tensor argument; returns the value it wrote. */
static int32_t run_k(client_t *c, const char *module) {
  float zero = 0;
  char t[512];
  client_send_upload_f32(c, 2, NULL, &zero, 1);
  cr_assert(client_recv(c, 10000));
  cr_assert_eq(code_of(c), 0, "upload: %s", text_of(c, t, sizeof(t)));
  uint64_t id = kiln_params_find(c->msg.result, "id")->via.u64;
  pbuild_t b;
  pb_begin(&b, 5);
  kiln_pack_kv_str(&b.p.pk, "module", module);
  kiln_pack_kv_str(&b.p.pk, "kernel", "k");
  for (int i = 0; i < 2; i++) {
    kiln_pack_cstr(&b.p.pk, i ? "block" : "grid");
    msgpack_pack_array(&b.p.pk, 1);
    msgpack_pack_uint32(&b.p.pk, 1);
  }
  kiln_pack_cstr(&b.p.pk, "args");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_map(&b.p.pk, 1);
  kiln_pack_kv_u64(&b.p.pk, "tensor", id);
  client_send(c, 3, "launch", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(c, 30000));
  cr_assert_eq(code_of(c), 0, "launch: %s", text_of(c, t, sizeof(t)));
  client_send_id(c, 4, "download", id);
  cr_assert(client_recv(c, 10000));
  int32_t v;
  memcpy(&v, kiln_params_find(c->msg.result, "data")->via.bin.ptr, 4);
  return v;
}

static const char kernel_a[] = "define void @k(ptr %p) section \"kiln.kernel\" {\n  store i32 111, ptr %p\n  ret void\n}\n";
static const char kernel_b[] = "define void @k(ptr %p) section \"kiln.kernel\" {\n  store i32 222, ptr %p\n  ret void\n}\n";

static void entry_path(const char *cache, const char *module, char *out, size_t cap) {
  snprintf(out, cap, "%s/objects/%.2s/%s", cache, module, module);
}

static size_t read_whole(const char *path, uint8_t **out) {
  FILE *f = fopen(path, "rb");
  cr_assert(f, "no cache entry at %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *out = malloc((size_t)n);
  cr_assert(*out && fread(*out, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  return (size_t)n;
}

Test(cache_live, a_forged_entry_is_rebuilt_and_the_right_kernel_runs) {
  char cache[128], cachearg[160];
  snprintf(cache, sizeof(cache), "%s/cache", work);
  snprintf(cachearg, sizeof(cachearg), "%s", cache);
  const char *extra[] = {"--cache-dir", cachearg, NULL};
  daemon_t d;
  daemon_start(&d, extra);
  client_t c;
  client_connect_unix(&c, &d);
  char mod_a[65], mod_b[65];
  compile_ok(&c, kernel_a, mod_a);
  compile_ok(&c, kernel_b, mod_b);
  cr_assert_eq(run_k(&c, mod_a), 111);
  client_close(&c);
  cr_assert_eq(daemon_stop(&d), 0); /* the drain makes the entries durable */

  /* B's artifact under A's name and key, its checksum recomputed as format 1 did: all a
   * forger without the secret can do. */
  char pa[300], pb[300];
  entry_path(cache, mod_a, pa, sizeof(pa));
  entry_path(cache, mod_b, pb, sizeof(pb));
  uint8_t *fb;
  size_t nb = read_whole(pb, &fb);
  cr_assert_gt(nb, 88);
  uint8_t key_a[32];
  for (int i = 0; i < 32; i++) cr_assert_eq(sscanf(mod_a + 2 * i, "%2hhx", &key_a[i]), 1);
  memcpy(fb + 24, key_a, 32);
  kiln_hasher_t h;
  kiln_hasher_init(&h);
  kiln_hasher_update(&h, fb, 56);
  kiln_hasher_update(&h, fb + 88, nb - 88);
  kiln_hasher_final(&h, fb + 56);
  FILE *f = fopen(pa, "wb");
  cr_assert(f && fwrite(fb, 1, nb, f) == nb);
  fclose(f);
  free(fb);

  daemon_start(&d, extra);
  client_connect_unix(&c, &d);
  char again[65];
  cr_assert_not(compile_ok(&c, kernel_a, again), "the forged entry was served as a cache hit");
  cr_assert_str_eq(again, mod_a);
  cr_assert_eq(run_k(&c, again), 111, "the forged artifact ran");
  client_close(&c);
  cr_assert_eq(daemon_stop(&d), 0);
}

/* Runs kilnd with args until it exits (at most 30 s); returns its exit status, its
 * output in log. A kilnd that keeps running fails the test. */
static int run_kilnd(const char *const *args, char *log, size_t cap) {
  char logpath[128];
  snprintf(logpath, sizeof(logpath), "%s/second.log", work);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    const char *argv[16] = {getenv("KILND")};
    int n = 1;
    for (; *args && n < 15; args++) argv[n++] = *args;
    argv[n] = NULL;
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  int status = 0;
  uint64_t t0 = kiln_now_ns();
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (kiln_now_ns() - t0 > 30000000000ull) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      cr_assert_fail("the second kilnd kept running");
    }
    usleep(20000);
  }
  FILE *f = fopen(logpath, "r");
  size_t n = f ? fread(log, 1, cap - 1, f) : 0;
  log[n] = 0;
  if (f) fclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void expect_alive(const daemon_t *d) {
  client_t c;
  client_connect_unix(&c, d);
  client_send(&c, 9, "ping", NULL);
  cr_assert(client_recv(&c, 10000), "the first kilnd no longer answers on its socket");
  cr_assert_eq(code_of(&c), 0);
  client_close(&c);
}

Test(cache_live, a_second_kilnd_never_takes_a_live_socket) {
  daemon_t d;
  daemon_start(&d, NULL);
  char unixarg[300], cache2[160], tcparg[160], log[4096];
  snprintf(unixarg, sizeof(unixarg), "unix:%s", d.unix_path);
  snprintf(cache2, sizeof(cache2), "%s/cache2", work);
  snprintf(tcparg, sizeof(tcparg), "tcp:%s", d.tcp);
  /* the socket alone */
  const char *a1[] = {"--listen", unixarg, "--cache-dir", cache2, "--compile-workers", "1", NULL};
  int rc = run_kilnd(a1, log, sizeof(log));
  cr_expect_neq(rc, 0, "a second kilnd started on a live socket");
  cr_expect(strstr(log, "is in use"), "%s", log);
  expect_alive(&d);
  /* the socket, then a port the first holds: the second fails to start after the socket */
  const char *a2[] = {"--listen", unixarg, "--listen", tcparg, "--cache-dir", cache2, "--compile-workers", "1", NULL};
  rc = run_kilnd(a2, log, sizeof(log));
  cr_expect_neq(rc, 0);
  expect_alive(&d);
  cr_assert_eq(daemon_stop(&d), 0);

  /* a socket file nobody listens on (a kilnd that was SIGKILLed) is taken over as before */
  char stale[100];
  snprintf(stale, sizeof(stale), "%s/stale.sock", work);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", stale);
  cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  close(fd); /* the file stays, nothing listens */
  daemon_t d2;
  char stalearg[200];
  snprintf(stalearg, sizeof(stalearg), "unix:%s", stale);
  const char *extra[] = {"--listen", stalearg, NULL};
  daemon_start(&d2, extra);
  client_t c;
  client_connect_unix(&c, &d2); /* the harness's own socket */
  client_close(&c);
  fd = socket(AF_UNIX, SOCK_STREAM, 0);
  cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "kilnd did not take over a stale socket");
  close(fd);
  cr_assert_eq(daemon_stop(&d2), 0);
}

Test(cache_live, kilnd_refuses_a_cache_dir_others_can_write) {
  char cache[128], keep[192], log[4096], cmd[512];
  snprintf(cache, sizeof(cache), "%s/open", work);
  cr_assert_eq(mkdir(cache, 0700), 0);
  snprintf(cmd, sizeof(cmd), "mkdir -p %s/objects/00 && echo keep > %s/objects/00/stray", cache, cache);
  cr_assert_eq(system(cmd), 0);
  cr_assert_eq(chmod(cache, 0777), 0);
  snprintf(keep, sizeof(keep), "%s/objects/00/stray", cache);
  char sock[200];
  snprintf(sock, sizeof(sock), "unix:%s/x.sock", work);
  const char *a[] = {"--listen", sock, "--cache-dir", cache, "--compile-workers", "1", NULL};
  int rc = run_kilnd(a, log, sizeof(log));
  cr_expect_neq(rc, 0, "kilnd started on a world-writable cache dir");
  cr_expect(strstr(log, "writable by no one else"), "%s", log);
  cr_expect_eq(access(keep, F_OK), 0, "kilnd deleted a file in a cache dir it refused");
}
