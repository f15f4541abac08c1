/* A worker that cannot be started (issue 11 §2) against the real kilnd: the compile worker
 * made non-executable in a copied --worker-dir, then its process killed. kilnd used to abort
 * (uv__finish_close read the incarnation it had already freed); now the compiles that needed
 * the worker get E_UNAVAILABLE, the failure is in the log and the metrics, and once the
 * binary is back kilnd starts it again by itself.
 *
 * And bounded descriptors: under a hard RLIMIT_NOFILE of 1024 (systemd's default soft
 * limit, set here as the hard one, so kilnd cannot raise it), one compile_batch of 1100
 * distinct items completes. Queued items used to hold a memfd each until a worker took
 * them; past ~1000 the compile worker could not be restarted and the rest hung. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/security/common.h"

static daemon_t d;
static char *wdir;

static void stop(void) {
  if (d.pid) daemon_stop(&d);
  if (wdir) {
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", wdir);
    if (system(cmd) != 0) {}
    free(wdir);
    wdir = NULL;
  }
}

TestSuite(spawn, .fini = stop, .timeout = 300);

static int compile_worker_pid(client_t *c) {
  call(c, "stats", NULL);
  const msgpack_object *p = field(c->msg.result, "compile.pids");
  cr_assert(p && p->type == MSGPACK_OBJECT_ARRAY && p->via.array.size == 1);
  return (int)p->via.array.ptr[0].via.u64;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

Test(spawn, compile_worker_that_cannot_start_fails_its_compiles_and_comes_back) {
  wdir = copy_workers();
  const char *extra[] = {"--worker-dir", wdir, "--compile-workers", "1", "--metrics", "tcp:127.0.0.1:0",
                         NULL};
  daemon_start(&d, extra);
  client_t c;
  client_connect_tcp(&c, &d);
  char mod[65], *ir;
  ir = inc_ir("spawn: before");
  cr_assert_eq(compile(&c, ir, strlen(ir), NULL, mod), 0, "%s", err_text(&c));
  free(ir);

  char path[600];
  snprintf(path, sizeof(path), "%s/kiln-compile-worker", wdir);
  cr_assert_eq(chmod(path, 0644), 0);
  int pid = compile_worker_pid(&c);
  cr_assert(pid > 0);
  cr_assert_eq(kill(pid, SIGKILL), 0);
  for (int i = 0; i < 500 && compile_worker_pid(&c) != 0; i++) usleep(10000);
  cr_assert_eq(compile_worker_pid(&c), 0, "kilnd did not notice its compile worker died");

  /* Each of these needs a compile worker that cannot be started. */
  for (int i = 0; i < 3; i++) {
    char salt[64];
    snprintf(salt, sizeof(salt), "spawn: while broken %d", i);
    ir = inc_ir(salt);
    uint64_t code = compile(&c, ir, strlen(ir), NULL, mod);
    char text[1024];
    snprintf(text, sizeof(text), "%s", err_text(&c));
    free(ir);
    call(&c, "ping", NULL); /* kilnd aborted here (uv__finish_close) before the fix */
    cr_assert_eq(code_of(&c), 0);
    cr_assert_eq(code, E_UNAVAILABLE, "compile %d answered %llu: %s", i, (unsigned long long)code, text);
    cr_assert(strstr(text, "could not be started"), "%s", text);
    if (i == 2) cr_log_info("while broken: %s", text);
  }
  cr_assert_eq(kill(d.pid, 0), 0, "kilnd died");
  call(&c, "ping", NULL);
  cr_assert_eq(code_of(&c), 0);
  cr_assert_geq(metric(&d, "kiln_worker_spawn_failures_total{kind=\"compile\"}"), 1);

  /* Back in place: kilnd's retry timer starts it again without a request to wait for. */
  cr_assert_eq(chmod(path, 0755), 0);
  double t0 = now_s();
  while (compile_worker_pid(&c) == 0 && now_s() - t0 < 40) usleep(20000);
  cr_assert_neq(compile_worker_pid(&c), 0, "the compile worker was not started again");
  cr_log_info("compile worker back after %.2f s", now_s() - t0);
  ir = inc_ir("spawn: after");
  cr_assert_eq(compile(&c, ir, strlen(ir), NULL, mod), 0, "%s", err_text(&c));
  free(ir);
  client_close(&c);
  int status = daemon_stop(&d);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "kilnd ended with status %d", status);
}

/* compile_batch {"items": [{"ir": ..., "target": "cpu"} x n]}, each item unique. */
static void send_batch(client_t *c, uint32_t msgid, int n) {
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_cstr(&b.p.pk, "items");
  msgpack_pack_array(&b.p.pk, (uint32_t)n);
  for (int i = 0; i < n; i++) {
    char salt[64];
    snprintf(salt, sizeof(salt), "batch item %d", i);
    char *ir = inc_ir(salt);
    msgpack_pack_map(&b.p.pk, 2);
    kiln_pack_cstr(&b.p.pk, "ir");
    msgpack_pack_str(&b.p.pk, strlen(ir));
    msgpack_pack_str_body(&b.p.pk, ir, strlen(ir));
    kiln_pack_kv_str(&b.p.pk, "target", "cpu");
    free(ir);
  }
  client_send(c, msgid, "compile_batch", &b.buf);
  pb_end(&b);
}

Test(spawn, batch_of_1100_completes_under_nofile_1024, .timeout = 600) {
  struct rlimit rl = {1024, 1024};
  cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0); /* this test's process only; kilnd inherits it */
  const char *extra[] = {"--compile-workers", "2", NULL};
  daemon_start(&d, extra);
  client_t c;
  client_connect_tcp(&c, &d);
  enum { N = 1100 };
  send_batch(&c, 5, N);
  int peak = 0;
  for (;;) {
    int fds = count_fds(d.pid);
    if (fds > peak) peak = fds;
    if (client_recv(&c, 200)) break;
    cr_assert_eq(kill(d.pid, 0), 0, "kilnd died");
  }
  cr_assert_eq(code_of(&c), 0, "compile_batch failed: %s", err_text(&c));
  const msgpack_object *r = c.msg.result;
  cr_assert(r && r->type == MSGPACK_OBJECT_ARRAY && r->via.array.size == N);
  int failed = 0;
  for (uint32_t i = 0; i < N; i++) {
    const msgpack_object *e = kiln_params_find(&r->via.array.ptr[i], "error");
    if (e && failed++ < 3)
      cr_log_error("item %u: %.*s", i, (int)e->via.array.ptr[1].via.str.size, e->via.array.ptr[1].via.str.ptr);
  }
  cr_assert_eq(failed, 0, "%d of %d items failed", failed, N);
  cr_log_info("kilnd held at most %d fds (sampled) during the batch", peak);
  cr_assert_lt(peak, 200, "kilnd held %d fds for a batch", peak);
  /* And the daemon still compiles afterwards. */
  char mod[65], *ir = inc_ir("after the batch");
  cr_assert_eq(compile(&c, ir, strlen(ir), NULL, mod), 0, "%s", err_text(&c));
  free(ir);
  client_close(&c);
}
