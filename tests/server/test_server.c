/* kilnd end to end, over raw sockets: readiness, pipelining, errors that keep the
 * connection, malformed input that closes it, worker death, timeouts, caps, drain. */
#include <criterion/criterion.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/server/harness.h"

static daemon_t d;

static void start(void) { daemon_start(&d, NULL); }
static void stop(void) {
  if (d.pid) daemon_stop(&d);
}

TestSuite(server, .init = start, .fini = stop, .timeout = 120);

static uint64_t error_code(const client_t *c) {
  const msgpack_object *e = c->msg.error;
  if (!e || e->type != MSGPACK_OBJECT_ARRAY) return 0;
  return e->via.array.ptr[0].via.u64;
}

static const char *error_text(const client_t *c, char *buf, size_t cap) {
  const msgpack_object *m = &c->msg.error->via.array.ptr[1];
  snprintf(buf, cap, "%.*s", (int)m->via.str.size, m->via.str.ptr);
  return buf;
}

Test(server, ping_over_tcp_and_unix) {
  client_t t, u;
  client_connect_tcp(&t, &d);
  client_connect_unix(&u, &d);
  client_send(&t, 7, "ping", NULL);
  client_send(&u, 8, "ping", NULL);
  cr_assert(client_recv(&t, 5000));
  cr_assert_eq(t.msg.type, KILN_RPC_RESPONSE);
  cr_assert_eq(t.msg.msgid, 7);
  cr_assert(kiln_obj_str_eq(t.msg.result, "pong"));
  cr_assert(client_recv(&u, 5000));
  cr_assert_eq(u.msg.msgid, 8);
  cr_assert(kiln_obj_str_eq(u.msg.result, "pong"));
  client_close(&t);
  client_close(&u);
}

Test(server, pipelined_requests_all_answered_once) {
  client_t c;
  client_connect_tcp(&c, &d);
  enum { N = 2000 };
  kiln_buf_t all;
  kiln_buf_init(&all);
  kiln_packer_t p;
  kiln_packer_init(&p, &all);
  for (uint32_t i = 0; i < N; i++) {
    kiln_rpc_pack_request_head(&p.pk, i, "ping");
    msgpack_pack_array(&p.pk, 0);
  }
  client_send_raw(&c, all.data, all.len);
  kiln_buf_deinit(&all);
  static bool seen[N];
  memset(seen, 0, sizeof(seen));
  for (int i = 0; i < N; i++) {
    cr_assert(client_recv(&c, 5000), "reply %d missing", i);
    cr_assert_lt(c.msg.msgid, N);
    cr_assert_not(seen[c.msg.msgid], "msgid %u answered twice", c.msg.msgid);
    seen[c.msg.msgid] = true;
  }
  client_close(&c);
}

Test(server, method_name_as_bin_and_bare_map_params) {
  client_t c;
  client_connect_tcp(&c, &d);
  /* [0, 1, bin "ping", nil] */
  const uint8_t msg[] = {0x94, 0x00, 0x01, 0xc4, 0x04, 'p', 'i', 'n', 'g', 0xc0};
  client_send_raw(&c, msg, sizeof(msg));
  cr_assert(client_recv(&c, 5000));
  cr_assert(kiln_obj_str_eq(c.msg.result, "pong"));
  client_close(&c);
}

Test(server, bad_fields_keep_the_connection) {
  client_t c;
  client_connect_tcp(&c, &d);
  char text[256];
  client_send(&c, 1, "no_such_method", NULL);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(error_code(&c), 2);
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_kv_u64(&b.p.pk, "bogus", 1);
  client_send(&c, 2, "ping", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(error_code(&c), 1);
  cr_assert(strstr(error_text(&c, text, sizeof(text)), "bogus"), "message: %s", text);
  pb_begin(&b, 2);
  kiln_pack_kv_str(&b.p.pk, "dtype", "float33");
  kiln_pack_kv_u64(&b.p.pk, "shape", 3);
  client_send(&c, 3, "alloc", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(error_code(&c), 1);
  client_send(&c, 4, "ping", NULL);
  cr_assert(client_recv(&c, 5000));
  cr_assert(kiln_obj_str_eq(c.msg.result, "pong"));
  client_close(&c);
}

/* Sends `bytes`, expects one error (response or notification) and then the close; a
 * second connection keeps working. */
static void expect_error_and_close(const uint8_t *bytes, size_t len, uint64_t code) {
  client_t c, other;
  client_connect_tcp(&other, &d);
  client_connect_tcp(&c, &d);
  client_send_raw(&c, bytes, len);
  cr_assert(client_recv(&c, 5000), "no error reply");
  if (c.msg.type == KILN_RPC_RESPONSE) {
    cr_assert_eq(error_code(&c), code);
  } else {
    cr_assert_eq(c.msg.type, KILN_RPC_NOTIFICATION);
    cr_assert_eq(c.msg.method_len, 5);
    const msgpack_object *cd = kiln_params_find(c.msg.params, "code");
    cr_assert(cd);
    cr_assert_eq(cd->via.u64, code);
  }
  cr_assert(client_wait_closed(&c, 5000), "connection not closed after the error");
  client_close(&c);
  client_send(&other, 9, "ping", NULL);
  cr_assert(client_recv(&other, 5000));
  cr_assert(kiln_obj_str_eq(other.msg.result, "pong"));
  client_close(&other);
}

Test(server, garbage_gets_error_and_close) {
  const uint8_t g[] = {0xc1, 0x00, 0xff, 0x13};
  expect_error_and_close(g, sizeof(g), 1);
}

Test(server, not_an_rpc_message_gets_error_and_close) {
  const uint8_t g[] = {0x92, 0x05, 0x06}; /* [5, 6] */
  expect_error_and_close(g, sizeof(g), 1);
}

Test(server, huge_array_header_rejected) {
  const uint8_t g[] = {0x94, 0x00, 0x05, 0xa4, 'p', 'i', 'n', 'g', 0xdd, 0xff, 0xff, 0xff, 0xff};
  expect_error_and_close(g, sizeof(g), 6);
}

Test(server, four_gib_bin_header_rejected) {
  const uint8_t g[] = {0x94, 0x00, 0x05, 0xa6, 'u', 'p', 'l', 'o', 'a', 'd', 0x91, 0x81, 0xa1, 'x',
                       0xc6, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  expect_error_and_close(g, sizeof(g), 6);
}

Test(server, deep_nesting_rejected) {
  enum { DEPTH = 10000 };
  uint8_t *g = malloc(DEPTH + 8);
  g[0] = 0x94;
  g[1] = 0x00;
  g[2] = 0x05;
  g[3] = 0xa4;
  memcpy(g + 4, "ping", 4);
  memset(g + 8, 0x91, DEPTH);
  expect_error_and_close(g, DEPTH + 8, 6);
  free(g);
}

static uint64_t upload_f32(client_t *c, uint32_t msgid, const float *v, uint32_t n) {
  client_send_upload_f32(c, msgid, NULL, v, n);
  cr_assert(client_recv(c, 10000));
  cr_assert_eq(c->msg.msgid, msgid);
  cr_assert_null(c->msg.error->type == MSGPACK_OBJECT_NIL ? NULL : c->msg.error, "upload failed");
  const msgpack_object *id = kiln_params_find(c->msg.result, "id");
  cr_assert(id && id->type == MSGPACK_OBJECT_POSITIVE_INTEGER);
  return id->via.u64;
}

Test(server, upload_download_read_write_free) {
  client_t c;
  client_connect_tcp(&c, &d);
  enum { N = 1 << 20 };
  float *v = malloc(N * 4);
  for (int i = 0; i < N; i++) v[i] = (float)i * 0.5f;
  uint64_t id = upload_f32(&c, 1, v, N);
  client_send_id(&c, 2, "download", id);
  cr_assert(client_recv(&c, 10000));
  const msgpack_object *data = kiln_params_find(c.msg.result, "data");
  cr_assert(data && data->type == MSGPACK_OBJECT_BIN && data->via.bin.size == N * 4);
  cr_assert(memcmp(data->via.bin.ptr, v, N * 4) == 0, "downloaded bytes differ");
  cr_assert(kiln_obj_str_eq(kiln_params_find(c.msg.result, "dtype"), "float32"));

  /* write 2 floats at byte offset 8, read 16 bytes at offset 4 */
  float w[2] = {-1.0f, -2.0f};
  pbuild_t b;
  pb_begin(&b, 3);
  kiln_pack_kv_u64(&b.p.pk, "id", id);
  kiln_pack_kv_u64(&b.p.pk, "offset", 8);
  kiln_pack_cstr(&b.p.pk, "data");
  msgpack_pack_bin(&b.p.pk, 8);
  msgpack_pack_bin_body(&b.p.pk, w, 8);
  client_send(&c, 3, "write", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(c.msg.error->type, MSGPACK_OBJECT_NIL);
  pb_begin(&b, 3);
  kiln_pack_kv_u64(&b.p.pk, "id", id);
  kiln_pack_kv_u64(&b.p.pk, "offset", 4);
  kiln_pack_kv_u64(&b.p.pk, "size", 16);
  client_send(&c, 4, "read", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(c.msg.result->type, MSGPACK_OBJECT_BIN);
  float r[4];
  memcpy(r, c.msg.result->via.bin.ptr, 16);
  cr_assert(r[0] == 0.5f && r[1] == -1.0f && r[2] == -2.0f && r[3] == 2.0f);

  /* out of range */
  pb_begin(&b, 3);
  kiln_pack_kv_u64(&b.p.pk, "id", id);
  kiln_pack_kv_u64(&b.p.pk, "offset", N * 4 - 4);
  kiln_pack_kv_u64(&b.p.pk, "size", 8);
  client_send(&c, 5, "read", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(error_code(&c), 1);

  client_send_id(&c, 6, "free", id);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(c.msg.error->type, MSGPACK_OBJECT_NIL);
  client_send_id(&c, 7, "download", id);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(error_code(&c), 5);
  free(v);
  client_close(&c);
}

Test(server, alloc_is_zero_filled_and_zero_size_works) {
  client_t c;
  client_connect_tcp(&c, &d);
  pbuild_t b;
  pb_begin(&b, 2);
  kiln_pack_kv_str(&b.p.pk, "dtype", "int64");
  kiln_pack_cstr(&b.p.pk, "shape");
  msgpack_pack_array(&b.p.pk, 2);
  msgpack_pack_uint32(&b.p.pk, 3);
  msgpack_pack_uint32(&b.p.pk, 5);
  client_send(&c, 1, "alloc", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(&c, 5000));
  uint64_t id = kiln_params_find(c.msg.result, "id")->via.u64;
  client_send_id(&c, 2, "download", id);
  cr_assert(client_recv(&c, 5000));
  const msgpack_object *data = kiln_params_find(c.msg.result, "data");
  cr_assert_eq(data->via.bin.size, 120);
  for (int i = 0; i < 120; i++) cr_assert_eq(data->via.bin.ptr[i], 0);
  pb_begin(&b, 2);
  kiln_pack_kv_str(&b.p.pk, "dtype", "float32");
  kiln_pack_cstr(&b.p.pk, "shape");
  msgpack_pack_array(&b.p.pk, 2);
  msgpack_pack_uint32(&b.p.pk, 0);
  msgpack_pack_uint32(&b.p.pk, 7);
  client_send(&c, 3, "alloc", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(&c, 5000));
  id = kiln_params_find(c.msg.result, "id")->via.u64;
  client_send_id(&c, 4, "download", id);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(kiln_params_find(c.msg.result, "data")->via.bin.size, 0);
  client_close(&c);
}

/* The first child of kilnd whose comm starts with `comm`, or 0. */
static pid_t worker_pid(const char *comm) {
  pid_t kids[16];
  int n = children_of(d.pid, kids, 16);
  for (int i = 0; i < n; i++) {
    char path[64], got[64] = "";
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)kids[i]);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    bool match = fgets(got, sizeof(got), f) && strncmp(got, comm, strlen(comm)) == 0;
    fclose(f);
    if (match) return kids[i];
  }
  return 0;
}

static pid_t device_worker_pid(void) { return worker_pid("kiln-device-wor"); }

Test(server, device_worker_death_is_reported_and_survived) {
  client_t c;
  client_connect_tcp(&c, &d);
  float v[4] = {1, 2, 3, 4};
  uint64_t id = upload_f32(&c, 1, v, 4);
  pid_t w = device_worker_pid();
  cr_assert(w > 0, "no device worker process");
  /* Stop the worker so the next request is certainly held by it when it dies. */
  kill(w, SIGSTOP);
  client_send_id(&c, 2, "download", id);
  usleep(0);
  client_t probe;
  client_connect_tcp(&probe, &d);
  client_send(&probe, 1, "ping", NULL); /* a round trip proves kilnd queued msgid 2 */
  cr_assert(client_recv(&probe, 5000));
  client_close(&probe);
  kill(w, SIGKILL);
  cr_assert(client_recv(&c, 10000));
  cr_assert_eq(c.msg.msgid, 2);
  cr_assert_eq(error_code(&c), 10, "expected E_DEVICE_FAULT, got %lu", (unsigned long)error_code(&c));
  char text[256];
  cr_assert(strstr(error_text(&c, text, sizeof(text)), "signal 9"), "message: %s", text);
  /* The old tensor is gone, with a message that says so; new work succeeds. */
  client_send_id(&c, 3, "download", id);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(error_code(&c), 5);
  cr_assert(strstr(error_text(&c, text, sizeof(text)), "lost"), "message: %s", text);
  uint64_t id2 = upload_f32(&c, 4, v, 4);
  client_send_id(&c, 5, "download", id2);
  cr_assert(client_recv(&c, 5000));
  cr_assert(memcmp(kiln_params_find(c.msg.result, "data")->via.bin.ptr, v, 16) == 0);
  client_send(&c, 6, "stats", NULL);
  cr_assert(client_recv(&c, 5000));
  const msgpack_object *workers = kiln_params_find(c.msg.result, "workers");
  cr_assert(workers && workers->via.array.size >= 1);
  cr_assert_eq(kiln_params_find(&workers->via.array.ptr[0], "restarts")->via.u64, 1);
  client_close(&c);
}

Test(server, disconnect_with_replies_pending_and_many_connections) {
  client_t c;
  client_connect_tcp(&c, &d);
  client_send(&c, 1, "ping", NULL);
  cr_assert(client_recv(&c, 5000));
  int base_fds = count_fds(d.pid);
  float v[256] = {0};
  uint64_t id = upload_f32(&c, 2, v, 256);
  /* 200 downloads in flight, then vanish. */
  for (uint32_t i = 0; i < 200; i++) client_send_id(&c, 100 + i, "download", id);
  client_close(&c);
  client_t other;
  client_connect_tcp(&other, &d);
  for (int i = 0; i < 10000; i++) {
    client_t t;
    if (i % 2) client_connect_tcp(&t, &d);
    else client_connect_unix(&t, &d);
    client_close(&t);
  }
  client_send(&other, 1, "ping", NULL);
  cr_assert(client_recv(&other, 5000));
  cr_assert(kiln_obj_str_eq(other.msg.result, "pong"));
  /* Wait (by round trips, not sleeps) until kilnd has reaped the closed connections. */
  int fds = -1;
  for (int i = 0; i < 500; i++) {
    client_send(&other, 2, "stats", NULL);
    cr_assert(client_recv(&other, 5000));
    if (kiln_params_find(other.msg.result, "connections")->via.u64 == 1) {
      fds = count_fds(d.pid);
      if (fds <= base_fds + 1) break;
    }
    usleep(10000);
  }
  cr_assert_leq(fds, base_fds + 1, "fds went from %d to %d", base_fds, fds);
  client_close(&other);
}

Test(server, sigterm_exits_zero) {
  int status = daemon_stop(&d);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
}

Test(server_limits, partial_message_times_out) {
  const char *extra[] = {"--partial-timeout", "1", NULL};
  daemon_start(&d, extra);
  client_t c;
  client_connect_tcp(&c, &d);
  const uint8_t half[] = {0x94, 0x00, 0x01, 0xa4, 'p', 'i'};
  client_send_raw(&c, half, sizeof(half));
  cr_assert(client_recv(&c, 10000), "no timeout notification");
  cr_assert_eq(c.msg.type, KILN_RPC_NOTIFICATION);
  cr_assert_eq(kiln_params_find(c.msg.params, "code")->via.u64, 11);
  cr_assert(client_wait_closed(&c, 5000));
  client_close(&c);
  daemon_stop(&d);
}

Test(server_limits, connection_cap) {
  const char *extra[] = {"--max-connections", "2", NULL};
  daemon_start(&d, extra);
  client_t a, b, c;
  client_connect_tcp(&a, &d);
  client_connect_tcp(&b, &d);
  client_send(&a, 1, "ping", NULL);
  cr_assert(client_recv(&a, 5000));
  client_send(&b, 1, "ping", NULL);
  cr_assert(client_recv(&b, 5000));
  client_connect_tcp(&c, &d);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(c.msg.type, KILN_RPC_NOTIFICATION);
  cr_assert_eq(kiln_params_find(c.msg.params, "code")->via.u64, 6);
  cr_assert(client_wait_closed(&c, 5000));
  client_close(&c);
  client_close(&a);
  client_close(&b);
  daemon_stop(&d);
}

static void cpus_allowed(pid_t pid, char *out, size_t cap) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  cr_assert(f);
  out[0] = 0;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "Cpus_allowed_list:", 18) == 0) {
      snprintf(out, cap, "%s", line + 18 + strspn(line + 18, " \t"));
      out[strcspn(out, "\n")] = 0;
      break;
    }
  fclose(f);
}

Test(server_limits, pinned_compile_workers_run_on_their_cores) {
  /* The last core kilnd may run on (core 0 alone would pass for a worker left unpinned on a
   * machine of one core only). */
  cpu_set_t all;
  cr_assert_eq(sched_getaffinity(0, sizeof(all), &all), 0);
  int last = 0;
  for (int k = 0; k < CPU_SETSIZE; k++)
    if (CPU_ISSET(k, &all)) last = k;
  char pin[32], want[16], got[64];
  snprintf(pin, sizeof(pin), "compile=%d", last);
  snprintf(want, sizeof(want), "%d", last);
  const char *extra[] = {"--pin", pin, NULL};
  daemon_start(&d, extra); /* compile workers start with kilnd, one per pinned core */
  pid_t w = 0;
  for (int i = 0; i < 200 && !(w = worker_pid("kiln-compile-wo")); i++) usleep(10000);
  cr_assert(w > 0, "no compile worker process");
  cpus_allowed(w, got, sizeof(got));
  cr_assert_str_eq(got, want);
  /* kilnd took its own cores back after the spawn (every incarnation, a replacement too,
   * is spawned the same way: server/worker.c spawn) */
  cpus_allowed(d.pid, got, sizeof(got));
  cpu_set_t mine;
  CPU_ZERO(&mine);
  cr_assert_eq(sched_getaffinity(d.pid, sizeof(mine), &mine), 0);
  cr_assert(CPU_EQUAL(&mine, &all), "kilnd kept the compile workers' affinity: %s", got);
  daemon_stop(&d);
}

Test(server_limits, pinned_device_worker_runs_on_its_cores) {
  const char *extra[] = {"--pin", "cpu:0=0", NULL};
  daemon_start(&d, extra);
  client_t c;
  client_connect_tcp(&c, &d);
  float v[4] = {1, 2, 3, 4};
  upload_f32(&c, 1, v, 4); /* starts the device worker */
  pid_t w = device_worker_pid();
  cr_assert(w > 0);
  char path[64], line[256], allowed[64] = "";
  snprintf(path, sizeof(path), "/proc/%d/status", (int)w);
  FILE *f = fopen(path, "r");
  cr_assert(f);
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "Cpus_allowed_list: %63s", allowed) == 1) break;
  fclose(f);
  cr_assert_str_eq(allowed, "0");
  client_close(&c);
  daemon_stop(&d);
}
