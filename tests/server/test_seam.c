/* The worker seam (docs/worker_jobs.md) with the real kilnd and the real device worker:
 *   - kilnd checks a client's launch fields once, itself: a launch whose value does not fit
 *     its kernel's int32 parameter, or whose kernel takes another argument count, is refused
 *     before any device worker exists for the tenant;
 *   - a launch that passes runs, with its converted values (the worker does not check them
 *     again; it only fills in its buffers' addresses);
 *   - the device worker decodes typed jobs only: a job answers, and a request in the old
 *     shape (a map of named fields) ends the worker without a reply;
 *   - an artifact's bytes are held once in kilnd: in the cache's entry, which the module table
 *     refers to. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "protocol/channel.h"
#include "protocol/job_tensor.h"
#include "tests/server/harness.h"

static const char store_ir[] =
    "; seam: one int32 parameter\n"
    "define void @store(ptr %p, i32 %v) section \"kiln.kernel\" {\n"
    "entry:\n"
    "  store i32 %v, ptr %p\n"
    "  ret void\n"
    "}\n"
    "define void @nop(i32 %v) section \"kiln.kernel\" {\n"
    "entry:\n"
    "  ret void\n"
    "}\n";

static void send_launch(client_t *c, uint32_t msgid, const char *module, uint64_t tensor,
                        bool with_tensor, int64_t value, uint32_t nargs) {
  pbuild_t b;
  pb_begin(&b, 5);
  pack_launch_geometry(&b.p.pk, module, nargs == 1 ? "nop" : "store", 1, 1);
  kiln_pack_cstr(&b.p.pk, "args");
  msgpack_pack_array(&b.p.pk, nargs);
  if (with_tensor) {
    msgpack_pack_map(&b.p.pk, 1);
    kiln_pack_kv_u64(&b.p.pk, "tensor", tensor);
  }
  for (uint32_t i = with_tensor; i < nargs; i++) msgpack_pack_int64(&b.p.pk, value);
  client_send(c, msgid, "launch", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(c, 60000), "no launch reply");
}

/* Device workers kilnd has started (stats.workers). */
static uint32_t device_workers(client_t *c) {
  client_send(c, 90, "stats", NULL);
  cr_assert(client_recv(c, 30000));
  cr_assert_eq(code_of(c), 0);
  const msgpack_object *w = obj_path(c->msg.result, "workers");
  cr_assert(w && w->type == MSGPACK_OBJECT_ARRAY);
  return w->via.array.size;
}

/* A kilnd on the cpu device, a client on it, and store_ir compiled. */
static void start_with_module(daemon_t *d, client_t *c, char module[65]) {
  const char *extra[] = {"--devices", "cpu", NULL};
  daemon_start(d, extra);
  client_connect_unix(c, d);
  compile_module(c, 1, store_ir, module);
}

Test(seam, launch_fields_are_checked_in_kilnd_once, .timeout = 300) {
  daemon_t d;
  client_t c;
  char module[65];
  start_with_module(&d, &c, module);
  char t[512];
  /* Before any tensor exists no device worker runs; refused launches start none. */
  cr_assert_eq(device_workers(&c), 0);
  send_launch(&c, 2, module, 0, false, 1, 2);
  cr_expect_eq(code_of(&c), KILN_E_INVALID_ARGUMENT, "%s", text_of(&c, t, sizeof(t)));
  cr_expect(strstr(text_of(&c, t, sizeof(t)), "is a pointer"), "%s", t);
  send_launch(&c, 3, module, 0, false, 1, 3);
  cr_expect_eq(code_of(&c), KILN_E_INVALID_ARGUMENT, "%s", text_of(&c, t, sizeof(t)));
  cr_expect(strstr(text_of(&c, t, sizeof(t)), "takes 2 arguments"), "%s", t);
  /* nop(i32) given 2^40: the value's range is checked in kilnd too (device/launch.h's rule);
   * no device worker is started for it (before issue 12 the worker checked it). */
  send_launch(&c, 8, module, 0, false, 1ll << 40, 1);
  cr_expect_eq(code_of(&c), KILN_E_INVALID_ARGUMENT, "%s", text_of(&c, t, sizeof(t)));
  cr_expect(strstr(text_of(&c, t, sizeof(t)), "does not fit int32"), "%s", t);
  cr_assert_eq(device_workers(&c), 0, "a refused launch reached a device worker");

  /* With a tensor: a value out of int32's range is kilnd's refusal too (device/launch.h's
   * rule, applied once, in kilnd). */
  float zero = 0;
  client_send_upload_f32(&c, 4, NULL, &zero, 1);
  cr_assert(client_recv(&c, 60000));
  cr_assert_eq(code_of(&c), 0, "%s", text_of(&c, t, sizeof(t)));
  uint64_t id = kiln_params_find(c.msg.result, "id")->via.u64;
  send_launch(&c, 5, module, id, true, 1ll << 40, 2);
  cr_expect_eq(code_of(&c), KILN_E_INVALID_ARGUMENT, "%s", text_of(&c, t, sizeof(t)));
  cr_expect(strstr(text_of(&c, t, sizeof(t)), "int32"), "%s", t);
  /* In range (the int32 range includes 2^32-1 read as unsigned): it runs and stores it. */
  send_launch(&c, 6, module, id, true, -7, 2);
  cr_assert_eq(code_of(&c), 0, "%s", text_of(&c, t, sizeof(t)));
  client_send_id(&c, 7, "download", id);
  cr_assert(client_recv(&c, 60000));
  cr_assert_eq(code_of(&c), 0, "%s", text_of(&c, t, sizeof(t)));
  const msgpack_object *data = kiln_params_find(c.msg.result, "data");
  cr_assert(data && data->type == MSGPACK_OBJECT_BIN && data->via.bin.size == 4);
  int32_t got;
  memcpy(&got, data->via.bin.ptr, 4);
  cr_expect_eq(got, -7);
  client_close(&c);
  cr_expect_eq(daemon_stop(&d), 0);
}

/* Starts kiln-device-worker (beside kilnd in the build) on cpu:0 over a socketpair. */
static pid_t start_worker(int *out_channel) {
  char path[600];
  const char *kilnd = getenv("KILND");
  cr_assert(kilnd);
  snprintf(path, sizeof(path), "%s", kilnd);
  char *slash = strrchr(path, '/');
  cr_assert(slash);
  snprintf(slash, sizeof(path) - (size_t)(slash - path), "/../device/worker/kiln-device-worker");
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    close(sv[0]);
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", sv[1]);
    execl(path, path, "--channel-fd", fd, "--device", "cpu:0", (char *)NULL);
    _exit(127);
  }
  close(sv[1]);
  *out_channel = sv[0];
  return pid;
}

/* Sends one request whose params are `params` exactly (not wrapped). */
static void send_request(int ch, uint32_t msgid, const char *kind, const kiln_buf_t *params) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &b);
  kiln_rpc_pack_request_head(&pk.pk, msgid, kind);
  cr_assert_null(kiln_buf_append(&b, params->data, params->len));
  kiln_status_t st = kiln_channel_send_all(ch, b.data, b.len, NULL, 0);
  cr_assert(!st);
  kiln_buf_deinit(&b);
}

/* Reads until one whole message arrived (or EOF: returns false). */
static bool recv_reply(int ch, kiln_rpc_msg_t *m) {
  static uint8_t buf[1 << 16];
  size_t have = 0;
  for (;;) {
    ssize_t n = read(ch, buf + have, sizeof(buf) - have);
    if (n <= 0) return false;
    have += (size_t)n;
    bool has;
    kiln_status_t st = kiln_rpc_parse(buf, have, m, &has);
    if (!st) return true;
    kiln_status_free(st);
    kiln_rpc_msg_deinit(m);
  }
}

Test(seam, device_worker_decodes_typed_jobs_only, .timeout = 120) {
  int ch;
  pid_t pid = start_worker(&ch);
  kiln_buf_t p;
  kiln_buf_init(&p);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &p);
  kiln_tensor_job_encode(&pk.pk, &(kiln_tensor_job_t){.kind = KILN_JOB_ALLOC, .handle = 5, .bytes = 64});
  send_request(ch, 1, "alloc", &p);
  kiln_rpc_msg_t m;
  cr_assert(recv_reply(ch, &m), "no reply to a typed alloc");
  cr_expect_eq(m.type, KILN_RPC_RESPONSE);
  cr_expect_eq(m.msgid, 1);
  cr_expect(m.error && m.error->type == MSGPACK_OBJECT_NIL, "a typed alloc failed");
  kiln_rpc_msg_deinit(&m);
  /* The old shape: [ {"handle": 6, "bytes": 8} ]. */
  kiln_buf_deinit(&p);
  kiln_buf_init(&p);
  kiln_packer_init(&pk, &p);
  msgpack_pack_array(&pk.pk, 1);
  msgpack_pack_map(&pk.pk, 2);
  kiln_pack_kv_u64(&pk.pk, "handle", 6);
  kiln_pack_kv_u64(&pk.pk, "bytes", 8);
  send_request(ch, 2, "alloc", &p);
  kiln_buf_deinit(&p);
  cr_expect(!recv_reply(ch, &m), "the worker answered a request that is not a typed job");
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d", status);
  close(ch);
}

static uint64_t stat_u64(const client_t *c, const char *path) {
  const msgpack_object *o = obj_path(c->msg.result, path);
  cr_assert(o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER, "stats has no %s", path);
  return o->via.u64;
}

/* The module table holds cache entries, not copies: for one module the cache counts its
 * artifact's bytes once and the module table only the kernel table decoded from them (before
 * issue 12 the table held the encoded bytes and a full decode again: twice the artifact). A
 * launch, which loads the module into the device worker, adds no copy in kilnd. */
Test(seam, artifact_bytes_held_once, .timeout = 300) {
  daemon_t d;
  client_t c;
  char module[65];
  start_with_module(&d, &c, module);
  client_send(&c, 2, "stats", NULL);
  cr_assert(client_recv(&c, 30000));
  uint64_t artifact = stat_u64(&c, "cache.bytes_memory");
  uint64_t table = stat_u64(&c, "compile.module_bytes");
  cr_expect_eq(stat_u64(&c, "compile.modules"), 1);
  cr_assert_gt(artifact, 1000, "one artifact of vadd-like size is in the memory cache");
  /* The table (names, argument types) is a fraction of the artifact (code, IR, assembly). */
  cr_expect_lt(table * 2, artifact, "the module table holds %llu bytes beside an artifact of %llu",
               (unsigned long long)table, (unsigned long long)artifact);
  float zero = 0;
  client_send_upload_f32(&c, 3, NULL, &zero, 1);
  cr_assert(client_recv(&c, 60000));
  uint64_t id = kiln_params_find(c.msg.result, "id")->via.u64;
  send_launch(&c, 4, module, id, true, 5, 2);
  char t[512];
  cr_assert_eq(code_of(&c), 0, "%s", text_of(&c, t, sizeof(t)));
  client_send(&c, 5, "stats", NULL);
  cr_assert(client_recv(&c, 30000));
  cr_expect_eq(stat_u64(&c, "cache.bytes_memory"), artifact);
  cr_expect_eq(stat_u64(&c, "compile.module_bytes"), table);
  cr_expect_eq(stat_u64(&c, "compile.modules"), 1);
  client_close(&c);
  cr_expect_eq(daemon_stop(&d), 0);
}
