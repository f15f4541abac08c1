/* A loopback TCP listener without tokens admits kilnd's user and root only (docs/operations.md
 * "Listening"): the real kilnd, as root, with another user played by forked children that
 * take uid 65534 (nobody); they skip when the test does not run as root. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/server/harness.h"
#include "tests/server/pki.h"

#define NOBODY 65534

static daemon_t d;

static void stop(void) {
  if (d.pid) daemon_stop(&d);
}

TestSuite(owner, .fini = stop, .timeout = 240);

static const char *const with_ipv6[] = {"--listen", "tcp:[::1]:0", NULL};

static void become(int uid) {
  if (setgroups(0, NULL) || setresgid((gid_t)uid, (gid_t)uid, (gid_t)uid) ||
      setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid))
    _exit(90);
}

static void need_root(void) {
  if (geteuid() != 0) cr_skip_test("playing another user (nobody) takes root");
}

typedef struct answer {
  int code;           /* of the first message: its error code, 0 for a result, -1 for none */
  bool closed;        /* kilnd closed the connection after it */
  char message[700];  /* the error's message */
} answer_t;

/* The error of the last message, a response's or an `error` notification's (0: none), with
 * its message in buf. */
static int error_of(const client_t *c, char *buf, size_t cap) {
  if (c->msg.type != KILN_RPC_NOTIFICATION) {
    text_of(c, buf, cap);
    return (int)code_of(c);
  }
  const msgpack_object *code = kiln_params_find(c->msg.params, "code");
  const msgpack_object *m = kiln_params_find(c->msg.params, "message");
  buf[0] = 0;
  if (m && m->type == MSGPACK_OBJECT_STR)
    snprintf(buf, cap, "%.*s", (int)m->via.str.size, m->via.str.ptr);
  return code && code->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (int)code->via.u64 : -1;
}

/* Runs fn(arg, out) in a child that has become uid, and returns once it exited well, with
 * the `len` bytes it left in out. */
static void run_as(int uid, void (*fn)(const void *arg, void *out), const void *arg, void *out,
                   size_t len) {
  int rep[2];
  cr_assert(pipe(rep) == 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    close(rep[0]);
    become(uid);
    fn(arg, out);
    if (write(rep[1], out, len) != (ssize_t)len) _exit(91);
    _exit(0);
  }
  close(rep[1]);
  ssize_t n = read(rep[0], out, len);
  close(rep[0]);
  int ws;
  cr_assert_eq(waitpid(pid, &ws, 0), pid);
  cr_assert(n == (ssize_t)len && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
            "the child as uid %d failed (%d)", uid, ws);
}

typedef struct ask {
  int family, port;
  const kiln_buf_t *req;
} ask_t;

/* Connects to the loopback port of a family, sends the request, and answers kilnd's first
 * reply and, after an error, whether the connection was closed. */
static void ask(const void *arg, void *out) {
  const ask_t *q = arg;
  answer_t *a = out;
  *a = (answer_t){.code = -1};
  client_t c;
  client_connect_loopback(&c, q->family, q->port);
  client_send_raw(&c, q->req->data, q->req->len);
  if (client_recv(&c, 10000)) {
    a->code = error_of(&c, a->message, sizeof(a->message));
    if (a->code) a->closed = client_wait_closed(&c, 10000);
  }
}

static answer_t ask_as(int uid, int family, int port, const kiln_buf_t *req) {
  ask_t q = {family, port, req};
  answer_t a;
  run_as(uid, ask, &q, &a, sizeof(a));
  return a;
}

/* A request into b (initialised here): no params when key is NULL, else the one field key
 * (the str `str` when given, else the number u). */
static void pack_request(kiln_buf_t *b, uint32_t msgid, const char *method, const char *key,
                         const char *str, uint64_t u) {
  kiln_buf_init(b);
  kiln_packer_t p;
  kiln_packer_init(&p, b);
  kiln_rpc_pack_request_head(&p.pk, msgid, method);
  msgpack_pack_array(&p.pk, key ? 1 : 0);
  if (!key) return;
  msgpack_pack_map(&p.pk, 1);
  if (str) kiln_pack_kv_str(&p.pk, key, str);
  else kiln_pack_kv_u64(&p.pk, key, u);
}

static void expect_pong(client_t *c, uint32_t msgid) {
  cr_assert(client_recv(c, 10000), "no reply to ping %u", msgid);
  cr_assert_eq(c->msg.msgid, msgid);
  cr_assert_eq(code_of(c), 0);
}

/* Connects c to the daemon's IPv4 listener as the test's user, who is served. */
static void connect_and_ping(client_t *c) {
  client_connect_tcp(c, &d);
  client_send(c, 1, "ping", NULL);
  expect_pong(c, 1);
}

/* Lines of kilnd's log that hold every one of the strings (at most 2 of them). */
static int log_lines_with(const char *a, const char *b) {
  char path[128], line[2048];
  snprintf(path, sizeof(path), "%s/kilnd.log", d.dir);
  FILE *f = fopen(path, "r");
  int n = 0;
  while (f && fgets(line, sizeof(line), f))
    if (strstr(line, a) && (!b || strstr(line, b))) n++;
  if (f) fclose(f);
  return n;
}

/* Waits (up to 10 s) until the log holds at least n such lines. */
static bool log_reaches(int n, const char *a, const char *b) {
  for (int i = 0; i < 1000; i++) {
    if (log_lines_with(a, b) >= n) return true;
    usleep(10000);
  }
  return false;
}

Test(owner, kilnds_user_is_admitted_on_ipv4_and_ipv6) {
  daemon_start(&d, with_ipv6);
  cr_assert(d.tcp6_port, "no tcp:[::1] listener line");
  int families[] = {AF_INET, AF_INET6}, ports[] = {d.port, d.tcp6_port};
  for (int i = 0; i < 2; i++) {
    client_t c;
    client_connect_loopback(&c, families[i], ports[i]);
    client_send(&c, 1, "ping", NULL);
    expect_pong(&c, 1);
    client_close(&c);
  }
  cr_assert_eq(log_lines_with("peer_refused", NULL), 0);
}

Test(owner, another_user_is_refused_saying_why) {
  need_root();
  daemon_start(&d, with_ipv6);
  kiln_buf_t ping;
  pack_request(&ping, 1, "ping", NULL, NULL, 0);
  int families[] = {AF_INET, AF_INET6}, ports[] = {d.port, d.tcp6_port};
  for (int i = 0; i < 2; i++) {
    answer_t a = ask_as(NOBODY, families[i], ports[i], &ping);
    cr_assert_eq(a.code, 3, "nobody got %d (%s)", a.code, a.message);
    cr_assert(strstr(a.message, "has no tokens and admits only kilnd's user (uid 0) and root; this "
                                "connection comes from uid 65534"),
              "%s", a.message);
    cr_assert(a.closed, "the refused connection stayed open");
  }
  cr_assert(log_reaches(2, "event=peer_refused", "uid=65534"));
  /* root (kilnd's user here) is still served */
  client_t c;
  connect_and_ping(&c);
  client_close(&c);
  kiln_buf_deinit(&ping);
}

typedef struct close_early {
  const kiln_buf_t *req;
  bool flood; /* and more than kilnd's side takes unread: the close leaves an orphan */
} close_early_t;

static void send_and_close(const void *arg, void *out) {
  const close_early_t *q = arg;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d.port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) _exit(92);
  if (write(fd, q->req->data, q->req->len) != (ssize_t)q->req->len) _exit(93);
  if (q->flood) {
    fcntl(fd, F_SETFL, O_NONBLOCK);
    static char junk[1 << 16];
    while (write(fd, junk, sizeof(junk)) > 0) {}
  }
  close(fd);
  *(int *)out = 1;
}

/* The peer writes its requests and closes before kilnd looks (kilnd stopped meanwhile, as a
 * loaded host deschedules it). Its end is then a TIME_WAIT-like socket the kernel reports as
 * root's, or an orphan with its bytes still in flight: neither may pass for kilnd's user,
 * and the `free` they carry must never run. */
Test(owner, a_peer_that_closes_before_the_check_gets_nothing_done) {
  need_root();
  daemon_start(&d, NULL);
  client_t c;
  client_connect_tcp(&c, &d);
  float v[4] = {1, 2, 3, 4};
  client_send_upload_f32(&c, 1, NULL, v, 4);
  cr_assert(client_recv(&c, 10000) && code_of(&c) == 0, "upload failed");
  uint64_t id = kiln_params_find(c.msg.result, "id")->via.u64;
  kiln_buf_t req;
  pack_request(&req, 7, "free", "id", NULL, id);
  cr_assert_eq(kill(d.pid, SIGSTOP), 0);
  for (int flood = 0; flood < 2; flood++) {
    close_early_t q = {&req, flood};
    int done;
    run_as(NOBODY, send_and_close, &q, &done, sizeof(done));
  }
  cr_assert_eq(kill(d.pid, SIGCONT), 0);
  cr_assert(log_reaches(2, "event=peer_refused", NULL), "kilnd did not refuse both");
  cr_assert_eq(log_lines_with("event=peer_refused", "no user can be told"), 2);
  /* the tensor is still there */
  client_send_id(&c, 2, "download", id);
  cr_assert(client_recv(&c, 10000));
  char why[300];
  cr_assert_eq(code_of(&c), 0, "the tensor is gone: %s", text_of(&c, why, sizeof(why)));
  client_close(&c);
  kiln_buf_deinit(&req);
}

enum { N = 200 };

/* N connections at once, a ping on each: how many were refused and closed. */
static void flood_of_pings(const void *arg, void *out) {
  (void)arg;
  kiln_buf_t ping;
  pack_request(&ping, 1, "ping", NULL, NULL, 0);
  static client_t cs[N];
  for (int i = 0; i < N; i++) client_connect_loopback(&cs[i], AF_INET, d.port);
  for (int i = 0; i < N; i++) client_send_raw(&cs[i], ping.data, ping.len);
  int refused = 0;
  char why[700];
  for (int i = 0; i < N; i++)
    if (client_recv(&cs[i], 10000) && error_of(&cs[i], why, sizeof(why)) == 3 &&
        client_wait_closed(&cs[i], 10000))
      refused++;
  *(int *)out = refused;
}

/* Many at once: each costs kilnd one lookup and a refusal; root's connection is still
 * served and kilnd's descriptors come back to what they were. */
Test(owner, many_refused_connections_at_once) {
  need_root();
  daemon_start(&d, NULL);
  client_t c;
  connect_and_ping(&c);
  int base_fds = count_fds(d.pid);
  int refused = -1;
  run_as(NOBODY, flood_of_pings, NULL, &refused, sizeof(refused));
  cr_assert_eq(refused, N);
  client_send(&c, 2, "ping", NULL);
  expect_pong(&c, 2);
  int fds = 0;
  for (int i = 0; i < 1000 && (fds = count_fds(d.pid)) > base_fds; i++) usleep(10000);
  cr_assert_eq(fds, base_fds, "kilnd holds %d descriptors, %d before", fds, base_fds);
  client_close(&c);
}

/* With tokens, tokens govern: another local user with a token is served, as from anywhere. */
Test(owner, with_tokens_another_user_with_a_token_is_served) {
  need_root();
  char tokens[] = "/tmp/kiln-owner-tokens-XXXXXX";
  int tf = mkstemp(tokens);
  cr_assert(tf >= 0);
  close(tf);
  write_text_file(tokens, "tok-owner-0123456789 alice\n");
  const char *const args[] = {"--tokens", tokens, NULL};
  daemon_start(&d, args);
  kiln_buf_t hello;
  pack_request(&hello, 1, "hello", "token", "tok-owner-0123456789", 0);
  answer_t a = ask_as(NOBODY, AF_INET, d.port, &hello);
  cr_assert_eq(a.code, 0, "hello failed: %s", a.message);
  cr_assert_eq(log_lines_with("peer_refused", NULL), 0);
  kiln_buf_deinit(&hello);
  unlink(tokens);
}

typedef struct raw_reply {
  size_t bytes; /* what kilnd sent before it closed */
  bool closed;
} raw_reply_t;

/* Plain TCP to the tls: port: a ClientHello that is not one, then what comes back. */
static void not_a_client_hello(const void *arg, void *out) {
  (void)arg;
  raw_reply_t *r = out;
  *r = (raw_reply_t){0};
  client_t c;
  client_connect_loopback(&c, AF_INET, d.tls_port);
  /* a TLS record holding an empty ClientHello: a decode_error alert's worth */
  client_send_raw(&c, "\x16\x03\x01\x00\x04\x01\x00\x00\x00", 9);
  for (;;) {
    struct pollfd pfd = {.fd = c.fd, .events = POLLIN};
    if (poll(&pfd, 1, 10000) != 1) return;
    char buf[4096];
    ssize_t n = read(c.fd, buf, sizeof(buf));
    if (n <= 0) break;
    r->bytes += (size_t)n;
  }
  r->closed = true;
}

/* On tls: the check comes before the handshake: another user's connection is closed
 * without a byte (nothing can be said before a handshake), while root's gets as far as
 * TLS, whose alert answers a ClientHello that is not one. */
Test(owner, a_tls_listener_refuses_another_user_before_the_handshake) {
  need_root();
  char pki[128];
  pki_make(pki, sizeof(pki));
  const char *const args[] = {"--listen", "tls:127.0.0.1:0", "--tls-cert", pki_path(pki, "server.pem"),
                              "--tls-key", pki_path(pki, "server.key"), NULL};
  daemon_start(&d, args);
  cr_assert_gt(d.tls_port, 0);
  raw_reply_t mine, theirs;
  run_as(0, not_a_client_hello, NULL, &mine, sizeof(mine));
  run_as(NOBODY, not_a_client_hello, NULL, &theirs, sizeof(theirs));
  cr_assert(mine.closed && mine.bytes > 0, "root's connection got %zu bytes", mine.bytes);
  cr_assert(theirs.closed && theirs.bytes == 0, "nobody's connection got %zu bytes", theirs.bytes);
  cr_assert(log_reaches(1, "event=peer_refused", "listener=tls:127.0.0.1"));
  cr_assert_eq(log_lines_with("event=peer_refused", "uid=65534"), 1);
  pki_remove(pki);
}
