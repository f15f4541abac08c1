/* GET /metrics through a real kilnd started with --metrics: the page passes
 * `promtool check metrics`, counters move with real requests (compile miss then hit, an
 * upload, a launch, a compile worker killed with SIGKILL), bad HTTP costs only its own
 * connection, and scrapers that stall do not stall RPC. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/util.h"
#include "tests/server/harness.h"

static daemon_t d;

static void start(void) {
  const char *extra[] = {"--metrics", "tcp:127.0.0.1:0", "--compile-workers", "1", NULL};
  daemon_start(&d, extra);
  cr_assert(d.metrics[0], "kilnd reported no metrics URL on its ready fd");
}

static void stop(void) {
  if (d.pid) daemon_stop(&d);
}

TestSuite(metrics, .init = start, .fini = stop, .timeout = 180);

static int metrics_port(void) {
  const char *colon = strrchr(d.metrics, ':');
  cr_assert(colon);
  return atoi(colon + 1);
}

static int http_connect(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)metrics_port())};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect: %s", strerror(errno));
  return fd;
}

static void send_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return; /* the server may close on us; callers check the answer */
    c += w;
    n -= (size_t)w;
  }
}

/* Reads until the server closes (HTTP/1.0 without keep-alive), at most timeout_ms of
 * silence. Returns the malloc'ed bytes (NUL-terminated). */
static char *read_all(int fd, int timeout_ms, size_t *out_len) {
  size_t cap = 65536, len = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) break;
    ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
    if (n <= 0) break;
    len += (size_t)n;
  }
  buf[len] = 0;
  if (out_len) *out_len = len;
  return buf;
}

/* One HTTP exchange: sends `request` as is and returns the whole answer. */
static char *http(const char *request, size_t len) {
  int fd = http_connect();
  send_all(fd, request, len);
  char *r = read_all(fd, 15000, NULL);
  close(fd);
  return r;
}

static int status_of(const char *answer) {
  if (strncmp(answer, "HTTP/1.", 7) != 0) return 0;
  return atoi(answer + 9);
}

/* The body of a successful scrape (a malloc'ed copy). */
static char *scrape(void) {
  static const char req[] = "GET /metrics HTTP/1.0\r\nHost: test\r\n\r\n";
  char *r = http(req, sizeof(req) - 1);
  cr_assert_eq(status_of(r), 200, "scrape answered: %.200s", r);
  char *body = strstr(r, "\r\n\r\n");
  cr_assert(body);
  char *copy = strdup(body + 4);
  free(r);
  return copy;
}

/* The value of one series, written exactly as kilnd writes it (name{labels}); -1 if absent. */
#define value_of metrics_value

static double metric(const char *series) {
  char *b = scrape();
  double v = value_of(b, series);
  free(b);
  return v;
}

static const char inc_ll[] =
    "; %s\n"
    "declare i32 @__kiln_local_id(i32)\n"
    "define void @inc(ptr %%a) section \"kiln.kernel\" {\n"
    "  %%i = call i32 @__kiln_local_id(i32 0)\n"
    "  %%e = zext i32 %%i to i64\n"
    "  %%p = getelementptr float, ptr %%a, i64 %%e\n"
    "  %%x = load float, ptr %%p\n"
    "  %%y = fadd float %%x, 1.0\n"
    "  store float %%y, ptr %%p\n"
    "  ret void\n"
    "}\n";

/* Compiles a uniquely salted `inc`; returns whether the answer was cached. */
static bool compile_inc(client_t *c, const char *salt, char module[65]) {
  char ir[sizeof(inc_ll) + 64];
  snprintf(ir, sizeof(ir), inc_ll, salt);
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_kv_str(&b.p.pk, "ir", ir);
  client_send(c, 1, "compile", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(c, 60000), "no compile reply");
  cr_assert_eq(code_of(c), 0, "compile failed");
  const msgpack_object *m = kiln_params_find(c->msg.result, "module");
  memcpy(module, m->via.str.ptr, 64);
  module[64] = 0;
  return kiln_params_find(c->msg.result, "cached")->via.boolean;
}

static uint64_t upload4(client_t *c) {
  float v[4] = {1, 2, 3, 4};
  client_send_upload_f32(c, 2, NULL, v, 4);
  cr_assert(client_recv(c, 10000));
  cr_assert_eq(code_of(c), 0, "upload failed");
  return kiln_params_find(c->msg.result, "id")->via.u64;
}

static void launch_inc(client_t *c, const char *module, uint64_t tensor) {
  pbuild_t b;
  pb_begin(&b, 5);
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
  client_send(c, 3, "launch", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(c, 30000), "no launch reply");
  cr_assert_eq(code_of(c), 0, "launch failed");
}

static pid_t compile_worker_pid(void) { return daemon_child_named(d.pid, "kiln-compile-wo"); }

Test(metrics, page_passes_promtool) {
  /* Some traffic first, so that labelled series (requests by method and code) exist. */
  client_t c;
  client_connect_tcp(&c, &d);
  client_send(&c, 1, "ping", NULL);
  cr_assert(client_recv(&c, 5000));
  client_send(&c, 2, "no_such_method", NULL);
  cr_assert(client_recv(&c, 5000));
  client_close(&c);

  static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
  char *r = http(req, sizeof(req) - 1);
  cr_assert_eq(status_of(r), 200);
  cr_assert(strstr(r, "Content-Type: text/plain; version=0.0.4"), "content type: %.300s", r);
  char *body = strstr(r, "\r\n\r\n") + 4;
  char path[128];
  snprintf(path, sizeof(path), "%s/metrics.txt", d.dir);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs(body, f);
  fclose(f);
  cr_assert_eq(access("/usr/bin/promtool", X_OK), 0,
               "promtool is missing: install the Debian package prometheus (.ci/setup)");
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "/usr/bin/promtool check metrics < %s 2>&1", path);
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  char out[4096];
  size_t n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = 0;
  int status = pclose(p);
  cr_assert_eq(status, 0, "promtool check metrics failed:\n%s", out);
  cr_assert_eq(n, 0, "promtool reported problems:\n%s", out);
  cr_assert_eq(value_of(body, "kiln_requests_total{method=\"ping\",code=\"OK\"}"), 1);
  cr_assert_eq(value_of(body, "kiln_requests_total{method=\"unknown\",code=\"E_NO_METHOD\"}"), 1);
  cr_assert_eq(value_of(body, "kiln_request_duration_seconds_count{method=\"ping\"}"), 1);
  cr_assert_eq(value_of(body, "kiln_compile_workers"), 1);
  cr_assert(value_of(body, "kiln_received_bytes_total") > 0);
  cr_assert(value_of(body, "kiln_sent_bytes_total") > 0);
  /* kilnd's own process, as Prometheus client libraries export it; which compiler it runs. */
  cr_assert(value_of(body, "process_resident_memory_bytes") > 1e6);
  cr_assert(value_of(body, "process_cpu_seconds_total") >= 0); /* present; 0 below one clock tick */
  cr_assert(value_of(body, "process_open_fds") > 3);
  cr_assert(value_of(body, "process_max_fds") >= value_of(body, "process_open_fds"));
  double started = value_of(body, "process_start_time_seconds");
  cr_assert(started > (double)time(NULL) - 600 && started <= (double)time(NULL) + 5, /* btime is whole seconds */
            "%f vs now %ld", started, (long)time(NULL));
  const char *info = strstr(body, "kiln_build_info{version=\"");
  cr_assert(info && strstr(info, "compiler=\"") && !strstr(info, "compiler=\"\""), "%.300s", info);
  free(r);

  /* HEAD: the same head, no body. */
  static const char hreq[] = "HEAD /metrics HTTP/1.0\r\n\r\n";
  r = http(hreq, sizeof(hreq) - 1);
  cr_assert_eq(status_of(r), 200);
  cr_assert(strstr(r, "\r\n\r\n") && strstr(r, "\r\n\r\n")[4] == 0, "HEAD answered a body");
  free(r);
}

Test(metrics, counters_follow_real_requests) {
  client_t c;
  client_connect_tcp(&c, &d);
  const char *ok = "kiln_compiles_total{result=\"ok\"}";
  const char *hits = "kiln_compile_module_hits_total";
  double ok0 = metric(ok), hits0 = metric(hits);
  cr_assert_eq(metric("kiln_connections_open"), 1);
  char mod[65], mod2[65];
  cr_assert_not(compile_inc(&c, "metrics miss then hit", mod));
  char *b = scrape();
  cr_assert_eq(value_of(b, ok), ok0 + 1);
  cr_assert_eq(value_of(b, hits), hits0);
  cr_assert(value_of(b, "kiln_compile_duration_seconds_count") >= 1);
  cr_assert_eq(value_of(b, "kiln_compile_duration_seconds_bucket{le=\"+Inf\"}"),
               value_of(b, "kiln_compile_duration_seconds_count"));
  cr_assert(value_of(b, "kiln_cache_misses_total") >= 1);
  free(b);
  cr_assert(compile_inc(&c, "metrics miss then hit", mod2));
  cr_assert_str_eq(mod, mod2);
  b = scrape();
  cr_assert_eq(value_of(b, ok), ok0 + 1, "a hit must not build");
  cr_assert_eq(value_of(b, hits), hits0 + 1);
  cr_assert(value_of(b, "kiln_requests_total{method=\"compile\",code=\"OK\"}") >= 2);
  free(b);

  /* An upload and a launch on cpu:0. */
  const char *mem = "kiln_device_memory_bytes{device=\"cpu:0\",tenant=\"default\"}";
  const char *launches = "kiln_launches_total{device=\"cpu:0\",tenant=\"default\",method=\"launch\"}";
  double mem0 = metric(mem), l0 = metric(launches);
  uint64_t t = upload4(&c);
  cr_assert_eq(metric(mem), mem0 + 16);
  launch_inc(&c, mod, t);
  b = scrape();
  cr_assert_eq(value_of(b, launches), (l0 < 0 ? 0 : l0) + 1);
  cr_assert(value_of(b, "kiln_device_seconds_total{device=\"cpu:0\",tenant=\"default\"}") > 0);
  cr_assert_eq(value_of(b, "kiln_device_workers{device=\"cpu:0\"}"), 1);
  cr_assert_eq(value_of(b, "kiln_tenant_launches_in_flight{tenant=\"default\"}"), 0);
  free(b);
  client_send_id(&c, 4, "free", t);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(metric(mem), mem0);

  /* A compile worker killed with SIGKILL is a restart with reason SIGKILL. */
  const char *killed =
      "kiln_worker_restarts_total{kind=\"compile\",device=\"\",tenant=\"\",reason=\"SIGKILL\"}";
  cr_assert_eq(metric(killed), -1, "no restart yet");
  pid_t w = compile_worker_pid();
  cr_assert(w > 0);
  cr_assert_eq(kill(w, SIGKILL), 0);
  /* kilnd learns of the death from its loop: wait for the series to appear (bounded). */
  double v = -1;
  for (int i = 0; i < 200 && v < 0; i++) {
    v = metric(killed);
    if (v < 0) usleep(50 * 1000);
  }
  cr_assert_eq(v, 1, "the SIGKILL of compile worker %d did not show up", (int)w);
  /* ...and the replacement compiles. */
  cr_assert_not(compile_inc(&c, "after the kill", mod2));
  client_close(&c);
}

/* A faulting kernel ends the tenant's device worker: one fault, one device restart. */
Test(metrics, device_fault_is_counted) {
  static const char boom[] =
      "define void @inc(ptr %p) section \"kiln.kernel\" {\n"
      "  store volatile i32 1, ptr null\n"
      "  ret void\n"
      "}\n";
  client_t c;
  client_connect_tcp(&c, &d);
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_kv_str(&b.p.pk, "ir", boom);
  client_send(&c, 1, "compile", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(&c, 60000));
  cr_assert_eq(code_of(&c), 0);
  const msgpack_object *m = kiln_params_find(c.msg.result, "module");
  char mod[65];
  memcpy(mod, m->via.str.ptr, 64);
  mod[64] = 0;
  uint64_t t = upload4(&c);
  const char *faults = "kiln_device_faults_total{device=\"cpu:0\",tenant=\"default\"}";
  cr_assert_eq(metric(faults), -1);
  pbuild_t p;
  pb_begin(&p, 5);
  kiln_pack_kv_str(&p.p.pk, "module", mod);
  kiln_pack_kv_str(&p.p.pk, "kernel", "inc");
  kiln_pack_cstr(&p.p.pk, "grid");
  msgpack_pack_array(&p.p.pk, 1);
  msgpack_pack_uint32(&p.p.pk, 1);
  kiln_pack_cstr(&p.p.pk, "block");
  msgpack_pack_array(&p.p.pk, 1);
  msgpack_pack_uint32(&p.p.pk, 1);
  kiln_pack_cstr(&p.p.pk, "args");
  msgpack_pack_array(&p.p.pk, 1);
  msgpack_pack_map(&p.p.pk, 1);
  kiln_pack_kv_u64(&p.p.pk, "tensor", t);
  client_send(&c, 3, "launch", &p.buf);
  pb_end(&p);
  cr_assert(client_recv(&c, 60000));
  cr_assert_eq(code_of(&c), 10, "expected E_DEVICE_FAULT");
  double v = -1;
  for (int i = 0; i < 200 && v < 1; i++) {
    v = metric(faults);
    if (v < 1) usleep(50 * 1000);
  }
  cr_assert_eq(v, 1, "the fault did not show up");
  char *body = scrape();
  cr_assert_eq(value_of(body, "kiln_requests_total{method=\"launch\",code=\"E_DEVICE_FAULT\"}"), 1);
  /* The restart row of the device worker carries the reason of its death. */
  const char *row = strstr(body, "kiln_worker_restarts_total{kind=\"device\",device=\"cpu:0\",tenant=\"default\",reason=\"");
  cr_assert(row, "no device restart row:\n%s", body);
  cr_log_info("%.*s", (int)(strchr(row, '\n') - row), row);
  free(body);
  /* The log line names who failed, for the operator. */
  char cmd[256];
  snprintf(cmd, sizeof(cmd),
           "grep -q 'event=request_failed method=launch code=E_DEVICE_FAULT tenant=default conn=[0-9]' %s/kilnd.log",
           d.dir);
  cr_assert_eq(system(cmd), 0, "no request_failed line with tenant and conn");
  client_close(&c);
}

Test(metrics, bad_http_costs_only_its_connection) {
  static const char post[] = "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc";
  char *r = http(post, sizeof(post) - 1);
  cr_assert_eq(status_of(r), 405, "POST: %.200s", r);
  cr_assert(strstr(r, "Allow: GET, HEAD"));
  free(r);
  static const char nf[] = "GET /other HTTP/1.0\r\n\r\n";
  r = http(nf, sizeof(nf) - 1);
  cr_assert_eq(status_of(r), 404, "404: %.200s", r);
  free(r);
  /* A head over the 8 KiB bound. */
  size_t big = 64 * 1024;
  char *huge = malloc(big + 64);
  int n = snprintf(huge, 64, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: ");
  memset(huge + n, 'a', big);
  memcpy(huge + n + big, "\r\n\r\n", 4);
  r = http(huge, (size_t)n + big + 4);
  cr_assert_eq(status_of(r), 431, "oversized head: %.200s", r);
  free(r);
  free(huge);
  /* Garbage: closed (with or without a 400), never a 200. */
  static const char junk[] = "\x16\x03\x01 not http at all\r\n\r\n";
  r = http(junk, sizeof(junk) - 1);
  cr_assert(status_of(r) == 0 || status_of(r) == 400, "garbage got: %.200s", r);
  free(r);
  /* The endpoint and RPC are still fine. */
  cr_assert_eq(metric("kiln_metrics_scrapes_total{code=\"405\"}"), 1);
  cr_assert_eq(metric("kiln_metrics_scrapes_total{code=\"404\"}"), 1);
  client_t c;
  client_connect_tcp(&c, &d);
  client_send(&c, 1, "ping", NULL);
  cr_assert(client_recv(&c, 5000));
  client_close(&c);
}

Test(metrics, stalled_scrapers_do_not_stall_rpc) {
  /* 40 scrapers that stop mid-head, 20 that ask and never read, all held open. */
  enum { PARTIAL = 40, NOREAD = 20 };
  int fds[PARTIAL + NOREAD];
  for (int i = 0; i < PARTIAL; i++) {
    fds[i] = http_connect();
    send_all(fds[i], "GET /metr", 9);
  }
  for (int i = PARTIAL; i < PARTIAL + NOREAD; i++) {
    fds[i] = http_connect();
    int small = 1024;
    setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    for (int k = 0; k < 4; k++) send_all(fds[i], req, sizeof(req) - 1); /* pipelined */
  }
  /* RPC answers at once, many times over. */
  client_t c;
  client_connect_tcp(&c, &d);
  for (uint32_t i = 0; i < 200; i++) {
    client_send(&c, i, "ping", NULL);
    cr_assert(client_recv(&c, 5000), "ping %u was not answered while scrapers stall", i);
    cr_assert_eq(code_of(&c), 0);
  }
  client_close(&c);
  /* A well-behaved scraper still gets its page (60 of 64 connection slots are taken). */
  char *b = scrape();
  cr_assert(value_of(b, "kiln_requests_total{method=\"ping\",code=\"OK\"}") >= 200);
  free(b);
  for (int i = 0; i < PARTIAL + NOREAD; i++) close(fds[i]);
  b = scrape();
  cr_assert(value_of(b, "kiln_metrics_scrapes_total{code=\"200\"}") >= 2);
  free(b);
}

/* Past the limit of 64 connections, scrapers wait in the listen backlog; once the stalled
 * ones go, a waiting scraper is answered and new ones too (libmicrohttpd stops listening at
 * its limit and resumes only when run again). RPC is unaffected throughout. */
Test(metrics, full_endpoint_recovers) {
  enum { N = 90 };
  int fds[N];
  for (int i = 0; i < N; i++) {
    fds[i] = http_connect();
    send_all(fds[i], "GET /met", 8);
  }
  client_t c;
  client_connect_tcp(&c, &d);
  client_send(&c, 1, "ping", NULL);
  cr_assert(client_recv(&c, 5000), "ping was not answered with the metrics endpoint full");
  client_close(&c);
  usleep(300 * 1000); /* the waiting scraper comes while kilnd sits at its limit */
  int waiting = http_connect();
  static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
  send_all(waiting, req, sizeof(req) - 1);
  for (int i = 0; i < N; i++) close(fds[i]);
  char *answer = read_all(waiting, 15000, NULL);
  close(waiting);
  cr_assert_eq(status_of(answer), 200, "the waiting scraper got: '%.100s'", answer);
  free(answer);
  char *b = scrape();
  cr_assert(value_of(b, "kiln_metrics_scrapes_total{code=\"200\"}") >= 2);
  free(b);
}
