#include "tests/server/harness.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* Forks kilnd with the test's listeners, cache and readiness pipe; returns the pipe's read
 * end, whose lines (or EOF) say whether it started. */
static int spawn(daemon_t *d, const char *const *extra) {
  memset(d, 0, sizeof(*d));
  const char *kilnd = getenv("KILND");
  cr_assert(kilnd, "set KILND to the kilnd binary");
  snprintf(d->dir, sizeof(d->dir), "/tmp/kiln-test-XXXXXX");
  cr_assert(mkdtemp(d->dir));
  snprintf(d->unix_path, sizeof(d->unix_path), "%s/k.sock", d->dir);
  int p[2];
  cr_assert(pipe(p) == 0);
  char fdarg[16], unixarg[300], cachearg[300];
  snprintf(fdarg, sizeof(fdarg), "%d", p[1]);
  snprintf(unixarg, sizeof(unixarg), "unix:%s", d->unix_path);
  snprintf(cachearg, sizeof(cachearg), "%s/cache", d->dir);
  const char *argv[64] = {kilnd,      "--listen", "tcp:127.0.0.1:0", "--listen", unixarg,
                          "--ready-fd", fdarg,    "--cache-dir",     cachearg,  "--log-level",
                          "warn"};
  int n = 11;
  for (; extra && *extra && n < 62; extra++) argv[n++] = *extra;
  argv[n] = NULL;
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    /* kilnd's output goes to a log in its directory, not to the test's stdout: a daemon that
     * outlived a crashed test must not hold the test runner's pipes open. */
    char logpath[128];
    snprintf(logpath, sizeof(logpath), "%s/kilnd.log", d->dir);
    int lf = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (lf >= 0) {
      dup2(lf, 1);
      dup2(lf, 2);
      close(lf);
    }
    execv(kilnd, (char *const *)argv);
    _exit(127);
  }
  close(p[1]);
  d->pid = pid;
  return p[0];
}

/* Readiness: the lines arrive when every listener is up; EOF when kilnd closes the fd. */
static void read_ready(int fd, char *buf, size_t cap) {
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, buf + len, cap - 1 - len);
    if (r <= 0) break;
    len += (size_t)r;
  }
  close(fd);
  buf[len] = 0;
}

int daemon_start_fails(const char *const *extra, char *log, size_t cap) {
  daemon_t d;
  char buf[1024];
  read_ready(spawn(&d, extra), buf, sizeof(buf));
  int ws = 0;
  if (buf[0]) { /* it started */
    daemon_stop(&d);
    return 0;
  }
  cr_assert(waitpid(d.pid, &ws, 0) == d.pid);
  char path[128];
  snprintf(path, sizeof(path), "%s/kilnd.log", d.dir);
  FILE *f = fopen(path, "r");
  size_t k = f ? fread(log, 1, cap - 1, f) : 0;
  log[k] = 0;
  if (f) fclose(f);
  d.pid = 0;
  daemon_stop(&d); /* removes its directory */
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

void daemon_start(daemon_t *d, const char *const *extra) {
  char buf[1024];
  read_ready(spawn(d, extra), buf, sizeof(buf));
  char *tls = strstr(buf, "\ntls:");
  if (tls) d->tls_port = atoi(strchr(tls + 5, ':') + 1);
  char *tcp6 = strstr(buf, "tcp:[::1]:");
  if (tcp6) d->tcp6_port = atoi(tcp6 + 10);
  char *tcp = strstr(buf, "tcp:");
  if (!tcp) {
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "tail -n 20 %s/kilnd.log >&2", d->dir);
    if (system(cmd) != 0) {}
  }
  cr_assert(tcp, "kilnd did not report readiness (got '%s')", buf);
  char *end = strchr(tcp, '\n');
  cr_assert(end);
  *end = 0;
  snprintf(d->tcp, sizeof(d->tcp), "%s", tcp + 4);
  d->port = atoi(strrchr(d->tcp, ':') + 1);
  cr_assert(strstr(end + 1, "unix:"), "no unix listener line");
  char *http = strstr(end + 1, "http://");
  if (http) {
    char *e = strchr(http, '\n');
    if (e) *e = 0;
    snprintf(d->metrics, sizeof(d->metrics), "%s", http);
  }
}

int daemon_stop(daemon_t *d) {
  int status = -1;
  if (d->pid > 0) {
    kill(d->pid, SIGTERM);
    waitpid(d->pid, &status, 0);
    d->pid = 0;
  }
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
  if (d->dir[0] && system(cmd) != 0) {}
  return status;
}

static void client_init(client_t *c, int fd) {
  memset(c, 0, sizeof(*c));
  c->fd = fd;
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  lim.max_message = 1ull << 34;
  kiln_reader_init(&c->reader, &lim, 65536);
}

void client_connect_tcp(client_t *c, const daemon_t *d) { client_connect_tcp_from(c, d, NULL); }

void client_connect_tcp_from(client_t *c, const daemon_t *d, const char *source_ip) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert(fd >= 0);
  if (source_ip) {
    struct sockaddr_in src = {.sin_family = AF_INET};
    cr_assert(inet_pton(AF_INET, source_ip, &src.sin_addr) == 1);
    cr_assert(bind(fd, (struct sockaddr *)&src, sizeof(src)) == 0, "bind %s: %s", source_ip,
              strerror(errno));
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d->port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect: %s", strerror(errno));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  client_init(c, fd);
}

void client_connect_loopback(client_t *c, int family, int port) {
  struct sockaddr_storage a = {.ss_family = (sa_family_t)family};
  socklen_t len = sizeof(struct sockaddr_in6);
  if (family == AF_INET) {
    struct sockaddr_in *v4 = (struct sockaddr_in *)&a;
    v4->sin_port = htons((uint16_t)port);
    v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(*v4);
  } else {
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&a;
    v6->sin6_port = htons((uint16_t)port);
    v6->sin6_addr = in6addr_loopback;
  }
  int fd = socket(family, SOCK_STREAM, 0);
  cr_assert(fd >= 0);
  cr_assert(connect(fd, (struct sockaddr *)&a, len) == 0, "connect: %s", strerror(errno));
  client_init(c, fd);
}

void client_connect_unix(client_t *c, const daemon_t *d) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof(a.sun_path), "%.100s", d->unix_path);
  cr_assert(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect unix: %s", strerror(errno));
  client_init(c, fd);
}

void client_close(client_t *c) {
  if (c->have_msg) kiln_rpc_msg_deinit(&c->msg);
  c->have_msg = false;
  kiln_reader_deinit(&c->reader);
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}

void client_send_raw(client_t *c, const void *bytes, size_t len) {
  const char *p = bytes;
  while (len) {
    ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return; /* the daemon may have closed on us; tests check replies */
    p += n;
    len -= (size_t)n;
  }
}

void client_send(client_t *c, uint32_t msgid, const char *method, const kiln_buf_t *params) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t p;
  kiln_packer_init(&p, &b);
  kiln_rpc_pack_request_head(&p.pk, msgid, method);
  if (params) {
    msgpack_pack_array(&p.pk, 1);
    cr_assert_null(kiln_buf_append(&b, params->data, params->len));
  } else {
    msgpack_pack_array(&p.pk, 0);
  }
  client_send_raw(c, b.data, b.len);
  kiln_buf_deinit(&b);
}

void client_send_compile(client_t *c, uint32_t msgid, const char *ir, const char *target) {
  pbuild_t b;
  pb_begin(&b, 2);
  kiln_pack_cstr(&b.p.pk, "ir");
  msgpack_pack_bin(&b.p.pk, (uint32_t)strlen(ir));
  msgpack_pack_bin_body(&b.p.pk, ir, strlen(ir));
  kiln_pack_kv_str(&b.p.pk, "target", target);
  client_send(c, msgid, "compile", &b.buf);
  pb_end(&b);
}

void client_send_upload_f32(client_t *c, uint32_t msgid, const char *device, const float *v, uint32_t n) {
  pbuild_t b;
  pb_begin(&b, device ? 2 : 1);
  if (device) kiln_pack_kv_str(&b.p.pk, "device", device);
  kiln_pack_cstr(&b.p.pk, "tensor");
  msgpack_pack_map(&b.p.pk, 3);
  kiln_pack_kv_str(&b.p.pk, "dtype", "float32");
  kiln_pack_cstr(&b.p.pk, "shape");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, n);
  kiln_pack_cstr(&b.p.pk, "data");
  msgpack_pack_bin(&b.p.pk, n * 4);
  msgpack_pack_bin_body(&b.p.pk, v, n * 4);
  client_send(c, msgid, "upload", &b.buf);
  pb_end(&b);
}

void client_send_id(client_t *c, uint32_t msgid, const char *method, uint64_t id) {
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_kv_u64(&b.p.pk, "id", id);
  client_send(c, msgid, method, &b.buf);
  pb_end(&b);
}

void client_send_hello(client_t *c, uint32_t msgid, const char *token) {
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_kv_str(&b.p.pk, "token", token);
  client_send(c, msgid, "hello", &b.buf);
  pb_end(&b);
}

uint64_t code_of(const client_t *c) {
  const msgpack_object *e = c->msg.error;
  return e && e->type == MSGPACK_OBJECT_ARRAY ? e->via.array.ptr[0].via.u64 : 0;
}

const char *text_of(const client_t *c, char *buf, size_t cap) {
  const msgpack_object *e = c->msg.error;
  buf[0] = 0;
  if (e && e->type == MSGPACK_OBJECT_ARRAY && e->via.array.size > 1 && e->via.array.ptr[1].type == MSGPACK_OBJECT_STR)
    snprintf(buf, cap, "%.*s", (int)e->via.array.ptr[1].via.str.size, e->via.array.ptr[1].via.str.ptr);
  return buf;
}

/* Reads messages until one that is not a `progress` notification (true), or until
 * progress_seen reaches `until_progress` when that is not 0 (true, no message held). */
static bool recv_until(client_t *c, int timeout_ms, uint32_t until_progress) {
  if (c->have_msg) kiln_rpc_msg_deinit(&c->msg);
  c->have_msg = false;
  for (;;) {
    if (until_progress && c->progress_seen >= until_progress) return true;
    const uint8_t *m;
    size_t len;
    kiln_frame_result_t fr = kiln_reader_next(&c->reader, &m, &len);
    if (fr == KILN_FRAME_MESSAGE) {
      bool has;
      kiln_status_t st = kiln_rpc_parse(m, len, &c->msg, &has);
      c->have_msg = true;
      cr_assert(st == NULL, "reply does not parse: %s", kiln_status_message(st));
      if (c->msg.type == KILN_RPC_NOTIFICATION && kiln_rpc_method_is(&c->msg, "progress")) {
        c->progress_seen++; /* counted, not returned: tests wait for replies */
        kiln_rpc_msg_deinit(&c->msg);
        c->have_msg = false;
        continue;
      }
      return true;
    }
    cr_assert(fr != KILN_FRAME_ERROR, "reply stream broken");
    struct pollfd pfd = {c->fd, POLLIN, 0};
    if (poll(&pfd, 1, timeout_ms) <= 0) return false;
    size_t cap;
    void *space = kiln_reader_space(&c->reader, &cap);
    ssize_t n = recv(c->fd, space, cap, 0);
    if (n <= 0) return false;
    kiln_reader_commit(&c->reader, (size_t)n);
  }
}

bool client_recv(client_t *c, int timeout_ms) { return recv_until(c, timeout_ms, 0); }

bool client_wait_progress(client_t *c, uint32_t n, int timeout_ms) {
  if (!recv_until(c, timeout_ms, n)) return false;
  return c->progress_seen >= n; /* else a reply came first; it is in c->msg */
}

bool client_wait_closed(client_t *c, int timeout_ms) {
  char buf[4096];
  for (;;) {
    struct pollfd pfd = {c->fd, POLLIN, 0};
    if (poll(&pfd, 1, timeout_ms) <= 0) return false;
    ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

void pb_begin(pbuild_t *b, uint32_t nfields) {
  kiln_buf_init(&b->buf);
  kiln_packer_init(&b->p, &b->buf);
  msgpack_pack_map(&b->p.pk, nfields);
}

void pb_end(pbuild_t *b) { kiln_buf_deinit(&b->buf); }

void pack_launch_geometry(msgpack_packer *pk, const char *module, const char *kernel, uint32_t grid,
                          uint32_t block) {
  kiln_pack_kv_str(pk, "module", module);
  kiln_pack_kv_str(pk, "kernel", kernel);
  kiln_pack_cstr(pk, "grid");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint32(pk, grid);
  kiln_pack_cstr(pk, "block");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint32(pk, block);
}

void compile_module(client_t *c, uint32_t msgid, const char *ir, char out[65]) {
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_kv_str(&b.p.pk, "ir", ir);
  client_send(c, msgid, "compile", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(c, 120000), "no compile reply");
  char t[512];
  cr_assert_eq(code_of(c), 0, "compile: %s", code_of(c) ? text_of(c, t, sizeof(t)) : "");
  const msgpack_object *m = kiln_params_find(c->msg.result, "module");
  cr_assert(m && m->type == MSGPACK_OBJECT_STR && m->via.str.size == 64);
  memcpy(out, m->via.str.ptr, 64);
  out[64] = 0;
}

void write_text_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert(f, "cannot write %s", path);
  cr_assert(fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
}

int count_fds(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

long rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long v = -1;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "VmRSS: %ld", &v) == 1) break;
  fclose(f);
  return v;
}

int children_of(pid_t pid, pid_t *out, int cap) {
  char path[96];
  snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int n = 0, v;
  while (n < cap && fscanf(f, "%d", &v) == 1) out[n++] = v;
  fclose(f);
  return n;
}

pid_t daemon_child_named(pid_t pid, const char *prefix) {
  pid_t kids[64];
  int n = children_of(pid, kids, 64);
  for (int i = 0; i < n; i++) {
    char path[64], comm[64] = "";
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)kids[i]);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    bool ok = fgets(comm, sizeof(comm), f) && strncmp(comm, prefix, strlen(prefix)) == 0;
    fclose(f);
    if (ok) return kids[i];
  }
  return 0;
}

void client_call(client_t *c, const char *method, pbuild_t *params) {
  static uint32_t next_id = 1000;
  uint32_t id = next_id++;
  client_send(c, id, method, params ? &params->buf : NULL);
  if (params) pb_end(params);
  cr_assert(client_recv(c, 120000), "no reply to %s", method);
  cr_assert_eq(c->msg.msgid, id);
}

const msgpack_object *obj_path(const msgpack_object *map, const char *path) {
  char key[64];
  const msgpack_object *o = map;
  while (o && *path) {
    size_t n = strcspn(path, ".");
    snprintf(key, sizeof(key), "%.*s", (int)n, path);
    o = kiln_params_find(o, key);
    path += n + (path[n] == '.');
  }
  return o;
}

double metrics_value(const char *page, const char *series) {
  size_t n = strlen(series);
  for (const char *p = page; p && *p;) {
    if (strncmp(p, series, n) == 0 && p[n] == ' ') return strtod(p + n + 1, NULL);
    p = strchr(p, '\n');
    if (p) p++;
  }
  return -1;
}
