/* Tenants, tokens, isolation, quotas, device permissions and leases, through the real
 * kilnd started with a tokens file. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include "tests/server/harness.h"

static daemon_t d;
static char tokens_path[128];

#define TOK_A "alpha-token-0123456789"
#define TOK_B "bravo-token-0123456789"
#define TOK_C "charlie-token-0123456789"

static void write_tokens(const char *text) { write_text_file(tokens_path, text); }

static void start(void) {
  snprintf(tokens_path, sizeof(tokens_path), "/tmp/kiln-tokens-%d", (int)getpid());
  write_tokens("# token tenant options\n"
               TOK_A " alpha\n"
               TOK_B " bravo tensors=1 memory=1M\n"
               TOK_C " charlie devices=cuda:0 stats=all\n");
  const char *extra[] = {"--tokens", tokens_path, NULL};
  daemon_start(&d, extra);
}

static void stop(void) {
  if (d.pid) daemon_stop(&d);
  unlink(tokens_path);
}

TestSuite(tenants, .init = start, .fini = stop, .timeout = 120);

static void hello(client_t *c, const char *token, uint64_t want_code) {
  client_send_hello(c, 1, token);
  cr_assert(client_recv(c, 5000));
  cr_assert_eq(code_of(c), want_code);
}

static uint64_t upload4(client_t *c, uint64_t want_code) {
  float v[4] = {1, 2, 3, 4};
  client_send_upload_f32(c, 2, NULL, v, 4);
  cr_assert(client_recv(c, 10000));
  char t[256];
  cr_assert_eq(code_of(c), want_code, "upload: %s", code_of(c) ? text_of(c, t, sizeof(t)) : "ok");
  return want_code ? 0 : kiln_params_find(c->msg.result, "id")->via.u64;
}

static void send_id(client_t *c, const char *method, uint64_t id) {
  client_send_id(c, 3, method, id);
  cr_assert(client_recv(c, 5000));
}

static const char vadd_ll[] =
    "declare i32 @__kiln_local_id(i32)\n"
    "define void @inc(ptr %a) section \"kiln.kernel\" {\n"
    "  %i = call i32 @__kiln_local_id(i32 0)\n"
    "  %e = zext i32 %i to i64\n"
    "  %p = getelementptr float, ptr %a, i64 %e\n"
    "  %x = load float, ptr %p\n"
    "  %y = fadd float %x, 1.0\n"
    "  store float %y, ptr %p\n"
    "  ret void\n"
    "}\n";

static void compile_inc(client_t *c, char out[65]) { compile_module(c, 4, vadd_ll, out); }

static void send_inc(client_t *c, uint32_t msgid, const char *module, uint64_t tensor, bool wait) {
  pbuild_t b;
  pb_begin(&b, 6);
  kiln_pack_kv_str(&b.p.pk, "module", module);
  kiln_pack_kv_str(&b.p.pk, "kernel", "inc");
  kiln_pack_cstr(&b.p.pk, "grid");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, 1);
  kiln_pack_cstr(&b.p.pk, "block");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, 4);
  kiln_pack_cstr(&b.p.pk, "args");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_map(&b.p.pk, 1);
  kiln_pack_kv_u64(&b.p.pk, "tensor", tensor);
  kiln_pack_kv_bool(&b.p.pk, "wait", wait);
  client_send(c, msgid, "launch", &b.buf);
  pb_end(&b);
}

static void launch_inc(client_t *c, const char *module, uint64_t tensor, bool wait, uint64_t want) {
  send_inc(c, 5, module, tensor, wait);
  cr_assert(client_recv(c, 30000));
  char t[256];
  cr_assert_eq(code_of(c), want, "launch: %s", code_of(c) ? text_of(c, t, sizeof(t)) : "ok");
}

Test(tenants, anonymous_connections_may_only_hello_and_ping) {
  client_t c;
  client_connect_tcp(&c, &d);
  client_send(&c, 1, "ping", NULL);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(code_of(&c), 0);
  client_send(&c, 2, "devices", NULL);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(code_of(&c), 3);
  hello(&c, "not-a-valid-token-at-all", 3);
  client_send(&c, 3, "hello", NULL);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(code_of(&c), 3);
  hello(&c, TOK_A, 0);
  cr_assert(kiln_obj_str_eq(kiln_params_find(c.msg.result, "tenant"), "alpha"));
  client_send(&c, 4, "devices", NULL);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(code_of(&c), 0);
  client_close(&c);
}

Test(tenants, handles_are_invisible_to_other_tenants) {
  client_t a, b;
  client_connect_tcp(&a, &d);
  client_connect_unix(&b, &d);
  hello(&a, TOK_A, 0);
  hello(&b, TOK_B, 0);
  uint64_t id = upload4(&a, 0);
  send_id(&b, "download", id);
  cr_assert_eq(code_of(&b), 5);
  send_id(&b, "free", id);
  cr_assert_eq(code_of(&b), 5);
  char mod[65];
  compile_inc(&a, mod);
  uint64_t bid = upload4(&b, 0);
  launch_inc(&b, mod, bid, true, 5); /* bravo never compiled it */
  launch_inc(&a, mod, id, true, 0);
  send_id(&a, "download", id);
  float f[4];
  memcpy(f, kiln_params_find(a.msg.result, "data")->via.bin.ptr, sizeof(f));
  cr_assert(f[0] == 2 && f[3] == 5);
  /* A compile by bravo of the same payload is a cache hit that makes it bravo's too. */
  char mod_b[65];
  compile_inc(&b, mod_b);
  cr_assert_str_eq(mod, mod_b);
  cr_assert(kiln_params_find(b.msg.result, "cached")->via.boolean);
  launch_inc(&b, mod, bid, true, 0);
  client_close(&a);
  client_close(&b);
}

Test(tenants, quotas_and_device_permissions) {
  client_t b, c;
  client_connect_tcp(&b, &d);
  client_connect_tcp(&c, &d);
  hello(&b, TOK_B, 0);
  hello(&c, TOK_C, 0);
  uint64_t id = upload4(&b, 0);
  upload4(&b, 6); /* tensors=1 */
  char t[256];
  cr_assert(strstr(text_of(&b, t, sizeof(t)), "tensors"), "%s", t);
  send_id(&b, "free", id);
  cr_assert_eq(code_of(&b), 0);
  upload4(&b, 0); /* the quota was given back */
  upload4(&c, 4); /* charlie may use cuda:0 only */
  client_send(&c, 9, "devices", NULL);
  cr_assert(client_recv(&c, 5000));
  for (uint32_t i = 0; i < c.msg.result->via.array.size; i++)
    cr_assert_not(kiln_obj_str_eq(kiln_params_find(&c.msg.result->via.array.ptr[i], "id"), "cpu:0"));
  client_close(&b);
  client_close(&c);
}

Test(tenants, lease_excludes_other_tenants) {
  client_t a, b;
  client_connect_tcp(&a, &d);
  client_connect_tcp(&b, &d);
  hello(&a, TOK_A, 0);
  hello(&b, TOK_B, 0);
  char mod[65];
  compile_inc(&a, mod);
  compile_inc(&b, mod);
  uint64_t ta = upload4(&a, 0), tb = upload4(&b, 0);
  pbuild_t p;
  pb_begin(&p, 1);
  kiln_pack_kv_str(&p.p.pk, "device", "cpu:0");
  client_send(&a, 10, "lease", &p.buf);
  pb_end(&p);
  cr_assert(client_recv(&a, 10000));
  cr_assert_eq(code_of(&a), 0);
  uint64_t lease = kiln_params_find(a.msg.result, "lease")->via.u64;
  launch_inc(&b, mod, tb, false, 13); /* leased by alpha, bravo asked not to wait */
  launch_inc(&a, mod, ta, false, 0);  /* the holder runs */
  /* bravo queues behind the lease; alpha's release lets it through */
  send_inc(&b, 11, mod, tb, true);
  cr_assert_not(client_recv(&b, 300), "a held launch was answered while the lease stood");
  pb_begin(&p, 1);
  kiln_pack_kv_u64(&p.p.pk, "lease", lease);
  client_send(&a, 12, "release", &p.buf);
  pb_end(&p);
  cr_assert(client_recv(&a, 5000));
  cr_assert_eq(code_of(&a), 0);
  cr_assert(client_recv(&b, 10000));
  cr_assert_eq(b.msg.msgid, 11);
  cr_assert_eq(code_of(&b), 0);
  client_close(&a);
  client_close(&b);
}

Test(tenants, sighup_reloads_tokens) {
  client_t b;
  client_connect_tcp(&b, &d);
  hello(&b, TOK_B, 0);
  write_tokens(TOK_A " alpha\n");
  kill(d.pid, SIGHUP);
  cr_assert(client_wait_closed(&b, 5000), "bravo's connection outlived its tenant");
  client_close(&b);
  client_connect_tcp(&b, &d);
  hello(&b, TOK_B, 3);
  hello(&b, TOK_A, 0);
  client_close(&b);
}

Test(tenants_start, non_loopback_needs_tokens) {
  const char *kilnd = getenv("KILND");
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", 1);
    dup2(null, 2);
    execl(kilnd, kilnd, "--listen", "tcp:0.0.0.0:0", "--cache-dir", "/tmp/kiln-nl-cache", NULL);
    _exit(127);
  }
  int ws;
  waitpid(pid, &ws, 0);
  cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 1, "kilnd started on 0.0.0.0 without tokens");
}

/* With a tokens file, `stats` shows a tenant its own workers and usage only; a tenant with
 * stats=all sees every tenant. */
static void stats_names(client_t *c, char tenants[8][64], int *nt, char workers[8][64], int *nw) {
  client_send(c, 7, "stats", NULL);
  cr_assert(client_recv(c, 5000));
  cr_assert_eq(code_of(c), 0);
  const msgpack_object *ts = kiln_params_find(c->msg.result, "tenants");
  const msgpack_object *ws = kiln_params_find(c->msg.result, "workers");
  *nt = *nw = 0;
  for (uint32_t i = 0; i < ts->via.array.size && *nt < 8; i++) {
    const msgpack_object *n = kiln_params_find(&ts->via.array.ptr[i], "name");
    snprintf(tenants[(*nt)++], 64, "%.*s", (int)n->via.str.size, n->via.str.ptr);
  }
  for (uint32_t i = 0; i < ws->via.array.size && *nw < 8; i++) {
    const msgpack_object *n = kiln_params_find(&ws->via.array.ptr[i], "tenant");
    snprintf(workers[(*nw)++], 64, "%.*s", (int)n->via.str.size, n->via.str.ptr);
  }
}

Test(tenants, stats_shows_others_only_with_stats_all) {
  client_t a, b, c;
  client_connect_tcp(&a, &d);
  client_connect_tcp(&b, &d);
  client_connect_tcp(&c, &d);
  hello(&a, TOK_A, 0);
  hello(&b, TOK_B, 0);
  hello(&c, TOK_C, 0);
  upload4(&a, 0); /* each gets a device worker on cpu:0 */
  upload4(&b, 0);
  char tn[8][64], wn[8][64];
  int nt, nw;
  stats_names(&a, tn, &nt, wn, &nw);
  cr_assert_eq(nt, 1, "alpha sees %d tenants", nt);
  cr_assert_str_eq(tn[0], "alpha");
  cr_assert_eq(nw, 1, "alpha sees %d workers", nw);
  cr_assert_str_eq(wn[0], "alpha");
  stats_names(&c, tn, &nt, wn, &nw);
  bool alpha = false, bravo = false;
  for (int i = 0; i < nt; i++) alpha |= strcmp(tn[i], "alpha") == 0, bravo |= strcmp(tn[i], "bravo") == 0;
  cr_assert(alpha && bravo && nt == 3, "charlie (stats=all) sees every tenant (%d)", nt);
  cr_assert_eq(nw, 2, "charlie sees both workers (%d)", nw);
  client_close(&a);
  client_close(&b);
  client_close(&c);
}
