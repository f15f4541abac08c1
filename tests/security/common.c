#include "tests/security/common.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

const char *err_text(const client_t *c) {
  static char buf[1024];
  return text_of(c, buf, sizeof(buf));
}

void send_compile(client_t *c, uint32_t msgid, const void *payload, size_t size, const char *target,
                  const char *format) {
  pbuild_t b;
  pb_begin(&b, format ? 3 : 2);
  kiln_pack_cstr(&b.p.pk, "ir");
  msgpack_pack_bin(&b.p.pk, (uint32_t)size);
  msgpack_pack_bin_body(&b.p.pk, payload, size);
  kiln_pack_kv_str(&b.p.pk, "target", target);
  if (format) kiln_pack_kv_str(&b.p.pk, "format", format);
  client_send(c, msgid, "compile", &b.buf);
  pb_end(&b);
}

uint64_t compile(client_t *c, const void *payload, size_t size, const char *format, char out[65]) {
  send_compile(c, 1, payload, size, "cpu", format);
  cr_assert(client_recv(c, 120000), "no compile reply");
  uint64_t code = code_of(c);
  if (code == 0) {
    const msgpack_object *m = kiln_params_find(c->msg.result, "module");
    cr_assert(m && m->type == MSGPACK_OBJECT_STR && m->via.str.size == 64);
    memcpy(out, m->via.str.ptr, 64);
    out[64] = 0;
  }
  return code;
}

char *inc_ir(const char *salt) {
  /* a[i] = 2 a[i] + 1 for i = the work-item */
  char *s = NULL;
  int n = asprintf(&s,
                   "; %s\n"
                   "declare i32 @__kiln_local_id(i32)\n"
                   "define void @inc(ptr %%a) section \"kiln.kernel\" {\n"
                   "  %%e = call i32 @__kiln_local_id(i32 0)\n"
                   "  %%p = getelementptr inbounds float, ptr %%a, i32 %%e\n"
                   "  %%v = load float, ptr %%p\n"
                   "  %%w = fmul float %%v, 2.0\n"
                   "  %%r = fadd float %%w, 1.0\n"
                   "  store float %%r, ptr %%p\n"
                   "  ret void\n"
                   "}\n",
                   salt);
  cr_assert(n > 0);
  return s;
}

uint64_t upload_f32(client_t *c, const float *v, uint32_t n) {
  client_send_upload_f32(c, 77, "cpu:0", v, n);
  cr_assert(client_recv(c, 60000), "no upload reply");
  cr_assert_eq(code_of(c), 0, "upload failed: %s", err_text(c));
  return kiln_params_find(c->msg.result, "id")->via.u64;
}

void download_f32(client_t *c, uint64_t id, float *out, uint32_t n) {
  client_send_id(c, 78, "download", id);
  cr_assert(client_recv(c, 60000), "no download reply");
  cr_assert_eq(code_of(c), 0, "download failed: %s", err_text(c));
  const msgpack_object *data = kiln_params_find(c->msg.result, "data");
  cr_assert(data && data->type == MSGPACK_OBJECT_BIN && data->via.bin.size == n * 4);
  memcpy(out, data->via.bin.ptr, n * 4);
}

uint64_t launch1(client_t *c, const char *module, const char *kernel, uint64_t tensor, uint32_t block) {
  pbuild_t b;
  pb_begin(&b, 6);
  kiln_pack_kv_str(&b.p.pk, "module", module);
  kiln_pack_kv_str(&b.p.pk, "kernel", kernel);
  kiln_pack_kv_str(&b.p.pk, "device", "cpu:0");
  kiln_pack_cstr(&b.p.pk, "grid");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, 1);
  kiln_pack_cstr(&b.p.pk, "block");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, block);
  kiln_pack_cstr(&b.p.pk, "args");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_map(&b.p.pk, 1);
  kiln_pack_kv_u64(&b.p.pk, "tensor", tensor);
  call(c, "launch", &b);
  return code_of(c);
}

uint64_t stat_u64(client_t *c, const char *path) {
  call(c, "stats", NULL);
  const msgpack_object *o = field(c->msg.result, path);
  cr_assert(o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER, "stats has no %s", path);
  return o->via.u64;
}

static char *scrape(const daemon_t *d) {
  const char *colon = strrchr(d->metrics, ':');
  cr_assert(colon, "kilnd was not started with --metrics");
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect: %s", strerror(errno));
  static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
  cr_assert(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof(req) - 1));
  size_t cap = 1 << 20, len = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 15000) <= 0) break;
    ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
    if (n <= 0) break;
    len += (size_t)n;
  }
  buf[len] = 0;
  close(fd);
  return buf;
}

double metric(const daemon_t *d, const char *series) {
  char *page = scrape(d);
  double v = metrics_value(page, series);
  free(page);
  return v;
}

const char *build_dir(void) {
  static char dir[512];
  const char *kilnd = getenv("KILND");
  cr_assert(kilnd, "set KILND to the kilnd binary");
  snprintf(dir, sizeof(dir), "%s", kilnd);
  *strrchr(dir, '/') = 0; /* BUILD/server */
  *strrchr(dir, '/') = 0; /* BUILD */
  return dir;
}

char *copy_workers(void) {
  char *wdir = strdup("/tmp/kiln-workers-XXXXXX");
  cr_assert(mkdtemp(wdir));
  char cmd[2048];
  snprintf(cmd, sizeof(cmd),
           "cp '%s/compiler/worker/kiln-compile-worker' '%s/device/worker/kiln-device-worker' '%s/' && "
           "chmod 755 '%s'",
           build_dir(), build_dir(), wdir, wdir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  return wdir;
}

int device_worker_pid(client_t *c) {
  call(c, "stats", NULL);
  const msgpack_object *w = field(c->msg.result, "workers");
  if (!w || w->type != MSGPACK_OBJECT_ARRAY) return 0;
  for (uint32_t i = 0; i < w->via.array.size; i++) {
    const msgpack_object *pid = kiln_params_find(&w->via.array.ptr[i], "pid");
    if (pid && pid->type == MSGPACK_OBJECT_POSITIVE_INTEGER && pid->via.u64) return (int)pid->via.u64;
  }
  return 0;
}

uint8_t *build_attacks(const char *dir, const char *tokens, bool ctor, size_t *out_len) {
  const char *src = getenv("KILN_ATTACKS_SRC");
  cr_assert(src, "set KILN_ATTACKS_SRC to tests/security/attacks.c.in");
  char so[256], cmd[1400];
  snprintf(so, sizeof(so), "%s/attacks%s.so", dir, ctor ? "-ctor" : "");
  snprintf(cmd, sizeof(cmd),
           "cc -x c -std=gnu11 -O1 -shared -fPIC -DTOKENS='\"%s\"' %s -o '%s' '%s' 2>&1", tokens,
           ctor ? "-DCTOR" : "", so, src);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  FILE *f = fopen(so, "rb");
  cr_assert(f);
  static uint8_t buf[1 << 20];
  size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  uint8_t *copy = malloc(n);
  memcpy(copy, buf, n);
  *out_len = n;
  return copy;
}
