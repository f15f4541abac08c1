/* Connection timers against the real kilnd (issue 11 §4): the partial-message timeout
 * measures a stalled peer, never kilnd's own back-pressure. Every daemon here runs with
 * --partial-timeout 1 and every scenario lasts several times that long, so a timer that
 * counted anything but the peer's silence would close the connection. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "tests/server/harness.h"

static daemon_t d;

static void stop(void) {
  if (d.pid) daemon_stop(&d);
}

TestSuite(conn_timers, .fini = stop, .timeout = 240);

static const char *const short_partial[] = {"--partial-timeout", "1", NULL};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) { usleep((useconds_t)ms * 1000); }

static void expect_pong(client_t *c, uint32_t msgid) {
  cr_assert(client_recv(c, 10000), "no reply to ping %u", msgid);
  cr_assert_eq(c->msg.msgid, msgid);
  cr_assert_eq(code_of(c), 0);
  cr_assert(kiln_obj_str_eq(c->msg.result, "pong"));
}

/* The connection is alive and answers in order: a ping now is answered next. */
static void ping_pong(client_t *c, uint32_t msgid) {
  client_send(c, msgid, "ping", NULL);
  expect_pong(c, msgid);
}

/* Starts kilnd with `extra`, connects c over TCP, and readies b (packed through p) for the
 * bytes the test sends. */
static void start_connected(const char *const *extra, client_t *c, kiln_buf_t *b, kiln_packer_t *p) {
  daemon_start(&d, extra);
  client_connect_tcp(c, &d);
  kiln_buf_init(b);
  kiln_packer_init(p, b);
}

static void pack_ping(msgpack_packer *pk, uint32_t msgid) {
  kiln_rpc_pack_request_head(pk, msgid, "ping");
  msgpack_pack_array(pk, 0);
}

/* The first reproduction: a stream of pings in which every message completes within 50 ms,
 * but every send (so every read of kilnd's) ends in the middle of the next message. */
Test(conn_timers, ping_stream_never_ending_on_a_boundary_survives) {
  client_t c;
  enum { N = 60 };
  kiln_buf_t all;
  kiln_packer_t p;
  start_connected(short_partial, &c, &all, &p);
  size_t at[N + 1];
  for (uint32_t i = 0; i < N; i++) {
    at[i] = all.len;
    pack_ping(&p.pk, 100 + i);
  }
  at[N] = all.len;
  /* Piece k runs from the middle of message k-1 to the middle of message k. */
  size_t from = 0;
  double t0 = now_s();
  for (int k = 0; k < N; k++) {
    size_t to = k + 1 < N ? at[k] + (at[k + 1] - at[k]) / 2 : at[N];
    client_send_raw(&c, all.data + from, to - from);
    from = to;
    sleep_ms(50);
  }
  kiln_buf_deinit(&all);
  cr_assert_gt(now_s() - t0, 2.0, "the stream must outlast the 1 s timeout");
  for (uint32_t i = 0; i < N; i++) expect_pong(&c, 100 + i);
  ping_pong(&c, 999);
  client_close(&c);
}

/* The second: a long upload in `write` chunks at a steady rate. Each 4 MiB write message
 * takes about 2 s to arrive (twice the timeout); bytes never stop for long. */
Test(conn_timers, slow_steady_write_chunks_survive) {
  daemon_start(&d, short_partial);
  client_t c;
  client_connect_tcp(&c, &d);
  enum { CHUNK = 4 << 20, CHUNKS = 2, PIECE = 64 << 10 };
  pbuild_t b;
  pb_begin(&b, 2);
  kiln_pack_kv_str(&b.p.pk, "dtype", "uint8");
  kiln_pack_cstr(&b.p.pk, "shape");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint64(&b.p.pk, (uint64_t)CHUNK * CHUNKS);
  client_send(&c, 1, "alloc", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(&c, 10000));
  cr_assert_eq(code_of(&c), 0);
  uint64_t id = kiln_params_find(c.msg.result, "id")->via.u64;

  uint8_t *data = malloc(CHUNK);
  double t0 = now_s();
  for (int k = 0; k < CHUNKS; k++) {
    for (size_t i = 0; i < CHUNK; i++) data[i] = (uint8_t)(i * 7 + (size_t)k * 13 + i / 4096);
    pb_begin(&b, 3);
    kiln_pack_kv_u64(&b.p.pk, "id", id);
    kiln_pack_kv_u64(&b.p.pk, "offset", (uint64_t)k * CHUNK);
    kiln_pack_cstr(&b.p.pk, "data");
    msgpack_pack_bin(&b.p.pk, CHUNK);
    msgpack_pack_bin_body(&b.p.pk, data, CHUNK);
    kiln_buf_t msg;
    kiln_buf_init(&msg);
    kiln_packer_t mp;
    kiln_packer_init(&mp, &msg);
    kiln_rpc_pack_request_head(&mp.pk, 10 + (uint32_t)k, "write");
    msgpack_pack_array(&mp.pk, 1);
    cr_assert_null(kiln_buf_append(&msg, b.buf.data, b.buf.len));
    pb_end(&b);
    for (size_t off = 0; off < msg.len; off += PIECE) {
      client_send_raw(&c, msg.data + off, KILN_MIN((size_t)PIECE, msg.len - off));
      sleep_ms(30);
    }
    kiln_buf_deinit(&msg);
    cr_assert(client_recv(&c, 10000), "no reply to write %d: the connection was closed", k);
    cr_assert_eq(c.msg.msgid, 10 + (uint32_t)k);
    cr_assert_eq(code_of(&c), 0);
  }
  cr_assert_gt(now_s() - t0, 3.0, "the upload must outlast the 1 s timeout several times");
  /* What arrived is what was sent. */
  for (int k = 0; k < CHUNKS; k++) {
    for (size_t i = 0; i < CHUNK; i++) data[i] = (uint8_t)(i * 7 + (size_t)k * 13 + i / 4096);
    pb_begin(&b, 3);
    kiln_pack_kv_u64(&b.p.pk, "id", id);
    kiln_pack_kv_u64(&b.p.pk, "offset", (uint64_t)k * CHUNK);
    kiln_pack_kv_u64(&b.p.pk, "size", CHUNK);
    client_send(&c, 20 + (uint32_t)k, "read", &b.buf);
    pb_end(&b);
    cr_assert(client_recv(&c, 10000));
    cr_assert_eq(code_of(&c), 0);
    cr_assert_eq(c.msg.result->type, MSGPACK_OBJECT_BIN);
    cr_assert_eq(c.msg.result->via.bin.size, CHUNK);
    cr_assert(memcmp(c.msg.result->via.bin.ptr, data, CHUNK) == 0, "chunk %d differs", k);
  }
  free(data);
  client_close(&c);
}

/* A peer that stops in the middle of a message is still dropped, also after a message that
 * had been arriving for longer than the timeout. */
Test(conn_timers, peer_that_stalls_mid_message_is_dropped) {
  daemon_start(&d, short_partial);
  client_t c, other;
  client_connect_tcp(&c, &d);
  client_connect_tcp(&other, &d);
  /* [0, 5, "write", [{"data": bin 1 MiB ...: 2 s of steady bytes, then silence. */
  kiln_buf_t msg;
  kiln_buf_init(&msg);
  kiln_packer_t mp;
  kiln_packer_init(&mp, &msg);
  kiln_rpc_pack_request_head(&mp.pk, 5, "write");
  msgpack_pack_array(&mp.pk, 1);
  msgpack_pack_map(&mp.pk, 2);
  kiln_pack_kv_u64(&mp.pk, "id", 1);
  kiln_pack_cstr(&mp.pk, "data");
  msgpack_pack_bin(&mp.pk, 1 << 20);
  uint8_t piece[8192] = {0};
  for (int i = 0; i < 40; i++) {
    client_send_raw(&c, msg.data, msg.len);
    msg.len = 0;
    client_send_raw(&c, piece, sizeof(piece));
    sleep_ms(50);
  }
  kiln_buf_deinit(&msg);
  double t0 = now_s();
  cr_assert(client_recv(&c, 20000), "the stalled connection got no timeout notification");
  cr_assert_eq(c.msg.type, KILN_RPC_NOTIFICATION);
  cr_assert_eq(kiln_params_find(c.msg.params, "code")->via.u64, 11);
  cr_assert(client_wait_closed(&c, 10000));
  cr_assert_lt(now_s() - t0, 15.0);
  client_close(&c);
  /* The other connection, idle between messages all along, is untouched. */
  ping_pong(&other, 1);
  client_close(&other);
}

/* kilnd's own lateness is not the peer's silence: kilnd stopped (as a loaded host
 * deschedules it) for twice the timeout while the peer sends a byte of its unfinished message
 * every 50 ms. When kilnd runs again its sweep timer is due before it has read those bytes;
 * the bytes waiting in the socket say the peer was not silent. */
Test(conn_timers, bytes_kilnd_has_not_read_yet_are_not_a_stall) {
  client_t c;
  kiln_buf_t two;
  kiln_packer_t p;
  start_connected(short_partial, &c, &two, &p);
  pack_ping(&p.pk, 1);
  size_t first = two.len;
  /* The second: ping with 200 bytes of padding, more than the bytes sent while kilnd is
   * stopped (ping refuses the field: its reply is an error, and the connection stays). */
  kiln_rpc_pack_request_head(&p.pk, 2, "ping");
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_map(&p.pk, 1);
  kiln_pack_cstr(&p.pk, "pad");
  uint8_t pad[200] = {0};
  msgpack_pack_bin(&p.pk, sizeof(pad));
  msgpack_pack_bin_body(&p.pk, pad, sizeof(pad));
  /* Ping 1 and the first byte of the second in one send: once ping 1 is answered, kilnd
   * holds the start of an unfinished message. */
  client_send_raw(&c, two.data, first + 1);
  expect_pong(&c, 1);
  cr_assert_eq(kill(d.pid, SIGSTOP), 0);
  size_t at = first + 1;
  double t0 = now_s();
  while (now_s() - t0 < 2.0) {
    cr_assert_lt(at + 1, two.len);
    client_send_raw(&c, two.data + at++, 1);
    sleep_ms(50);
  }
  cr_assert_eq(kill(d.pid, SIGCONT), 0);
  client_send_raw(&c, two.data + at, two.len - at);
  kiln_buf_deinit(&two);
  cr_assert(client_recv(&c, 10000), "the connection was closed");
  cr_assert_eq(c.msg.type, KILN_RPC_RESPONSE, "kilnd took its own lateness for a stall");
  cr_assert_eq(c.msg.msgid, 2);
  cr_assert_eq(code_of(&c), 1);
  ping_pong(&c, 3);
  client_close(&c);
}

/* --- the third reproduction needs a kernel: 1000 pipelined launches --------------------- */

static const char spin_ir[] =
    "; conn timers\n"
    "define void @spin(ptr %p, i32 %n) section \"kiln.kernel\" {\n"
    "entry:\n"
    "  br label %loop\n"
    "loop:\n"
    "  %i = phi i32 [0, %entry], [%i1, %loop]\n"
    "  %v = load volatile i32, ptr %p\n"
    "  %v1 = add i32 %v, 1\n"
    "  store volatile i32 %v1, ptr %p\n"
    "  %i1 = add i32 %i, 1\n"
    "  %more = icmp ult i32 %i1, %n\n"
    "  br i1 %more, label %loop, label %done\n"
    "done:\n"
    "  ret void\n"
    "}\n";

static void pack_spin(msgpack_packer *pk, uint32_t msgid, const char *module, uint64_t tensor,
                      uint32_t n) {
  kiln_rpc_pack_request_head(pk, msgid, "launch");
  msgpack_pack_array(pk, 1);
  msgpack_pack_map(pk, 5);
  kiln_pack_kv_str(pk, "module", module);
  kiln_pack_kv_str(pk, "kernel", "spin");
  kiln_pack_cstr(pk, "grid");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint32(pk, 1);
  kiln_pack_cstr(pk, "block");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint32(pk, 1);
  kiln_pack_cstr(pk, "args");
  msgpack_pack_array(pk, 2);
  msgpack_pack_map(pk, 1);
  kiln_pack_kv_u64(pk, "tensor", tensor);
  msgpack_pack_uint32(pk, n);
}

/* Seconds one spin(n) launch runs on the device, from the reply's `elapsed`. */
static double spin_seconds(client_t *c, const char *module, uint64_t tensor, uint32_t n) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t p;
  kiln_packer_init(&p, &b);
  pack_spin(&p.pk, 3, module, tensor, n);
  client_send_raw(c, b.data, b.len);
  kiln_buf_deinit(&b);
  cr_assert(client_recv(c, 60000));
  cr_assert_eq(code_of(c), 0);
  return kiln_params_find(c->msg.result, "elapsed")->via.f64;
}

/* Compiles spin for cpu and allocates the int32 it counts in. */
static void spin_setup(client_t *c, char module[65], uint64_t *out_tensor) {
  pbuild_t b;
  pb_begin(&b, 2);
  kiln_pack_cstr(&b.p.pk, "ir");
  msgpack_pack_str(&b.p.pk, sizeof(spin_ir) - 1);
  msgpack_pack_str_body(&b.p.pk, spin_ir, sizeof(spin_ir) - 1);
  kiln_pack_kv_str(&b.p.pk, "target", "cpu");
  client_send(c, 1, "compile", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(c, 120000));
  char text[512];
  cr_assert_eq(code_of(c), 0, "compile: %s", text_of(c, text, sizeof(text)));
  const msgpack_object *m = kiln_params_find(c->msg.result, "module");
  snprintf(module, 65, "%.*s", (int)m->via.str.size, m->via.str.ptr);
  pb_begin(&b, 2);
  kiln_pack_kv_str(&b.p.pk, "dtype", "int32");
  kiln_pack_cstr(&b.p.pk, "shape");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, 1);
  client_send(c, 2, "alloc", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(c, 10000));
  cr_assert_eq(code_of(c), 0);
  *out_tensor = kiln_params_find(c->msg.result, "id")->via.u64;
}

Test(conn_timers, pipelined_launches_held_back_by_the_inflight_limit_survive) {
  daemon_start(&d, short_partial);
  client_t c;
  client_connect_tcp(&c, &d);
  char module[65], text[512];
  uint64_t tensor;
  spin_setup(&c, module, &tensor);

  /* Size each launch so that 1000 of them run for about 4 s: four times the timeout, with
   * kilnd reading only while fewer than 256 are in flight. The estimate is the fastest of a
   * few runs; a batch that still ends too soon is sent again with longer launches. */
  uint32_t n = 100000;
  double t = 1;
  for (int i = 0; i < 3; i++) t = KILN_MIN(t, spin_seconds(&c, module, tensor, n));
  if (t < 1e-6) t = 1e-6;
  n = (uint32_t)KILN_MIN((double)n * (4.0 / 1000) / t, (double)(1u << 30));

  enum { N = 1000 };
  static bool seen[N];
  double took = 0;
  for (int attempt = 0; attempt < 4 && took < 2.0; attempt++) {
    if (attempt) n = (uint32_t)KILN_MIN((double)n * 4.0 / KILN_MAX(took, 0.01), (double)(1u << 30));
    kiln_buf_t all;
    kiln_buf_init(&all);
    kiln_packer_t p;
    kiln_packer_init(&p, &all);
    for (uint32_t i = 0; i < N; i++) pack_spin(&p.pk, 1000 + i, module, tensor, n);
    double t0 = now_s();
    client_send_raw(&c, all.data, all.len);
    kiln_buf_deinit(&all);
    memset(seen, 0, sizeof(seen));
    for (int i = 0; i < N; i++) {
      cr_assert(client_recv(&c, 60000), "reply %d of %d missing: the connection was closed", i, N);
      cr_assert_eq(c.msg.type, KILN_RPC_RESPONSE, "a notification came: kilnd gave up on us");
      cr_assert_eq(code_of(&c), 0, "launch: %s", text_of(&c, text, sizeof(text)));
      uint32_t k = c.msg.msgid - 1000;
      cr_assert_lt(k, N);
      cr_assert_not(seen[k]);
      seen[k] = true;
    }
    took = now_s() - t0;
  }
  cr_assert_gt(took, 2.0, "the launches must outlast the 1 s timeout");
  ping_pong(&c, 5);
  client_close(&c);
}

/* --- §5: the protocol's promises -------------------------------------------------------- */

TestSuite(conn_protocol, .fini = stop, .timeout = 240);

static void expect_code(client_t *c, uint32_t msgid, uint64_t code) {
  char text[512];
  cr_assert(client_recv(c, 10000), "no reply to %u", msgid);
  cr_assert_eq(c->msg.type, KILN_RPC_RESPONSE, "a notification instead of the reply to %u", msgid);
  cr_assert_eq(c->msg.msgid, msgid);
  cr_assert_eq(code_of(c), code, "reply to %u: code %llu (%s)", msgid,
               (unsigned long long)code_of(c), text_of(c, text, sizeof(text)));
}

/* Whole messages in one send, so they arrive (and are handled) together. */
static void send_all(client_t *c, const uint8_t *const *msgs, const size_t *lens, int n) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  for (int i = 0; i < n; i++) cr_assert_null(kiln_buf_append(&b, msgs[i], lens[i]));
  client_send_raw(c, b.data, b.len);
  kiln_buf_deinit(&b);
}

#define MSG(...) (const uint8_t[]){__VA_ARGS__}
#define LEN(...) sizeof((const uint8_t[]){__VA_ARGS__})

Test(conn_protocol, well_framed_requests_with_bad_params_get_errors_and_the_connection_stays) {
  daemon_start(&d, NULL);
  client_t c;
  client_connect_tcp(&c, &d);
  const uint8_t *m[] = {
      MSG(0x94, 0x00, 0x01, 0xa4, 'p', 'i', 'n', 'g', 0x90),             /* ping */
      MSG(0x94, 0x00, 0x02, 0xa4, 'p', 'i', 'n', 'g', 0x92, 0x01, 0x02), /* params [1, 2] */
      MSG(0x94, 0x00, 0x03, 0x05, 0x90),                                 /* method 5 */
      MSG(0x94, 0x00, 0x04, 0xa4, 'p', 'i', 'n', 'g', 0xa1, 'x'),        /* params "x" */
      MSG(0x94, 0x00, 0x05, 0xa4, 'p', 'i', 'n', 'g', 0x92, 0x80, 0x80), /* params [{}, {}] */
      MSG(0x94, 0x00, 0x06, 0xa4, 'p', 'i', 'n', 'g', 0x90),             /* ping */
  };
  const size_t n[] = {
      LEN(0x94, 0x00, 0x01, 0xa4, 'p', 'i', 'n', 'g', 0x90),
      LEN(0x94, 0x00, 0x02, 0xa4, 'p', 'i', 'n', 'g', 0x92, 0x01, 0x02),
      LEN(0x94, 0x00, 0x03, 0x05, 0x90),
      LEN(0x94, 0x00, 0x04, 0xa4, 'p', 'i', 'n', 'g', 0xa1, 'x'),
      LEN(0x94, 0x00, 0x05, 0xa4, 'p', 'i', 'n', 'g', 0x92, 0x80, 0x80),
      LEN(0x94, 0x00, 0x06, 0xa4, 'p', 'i', 'n', 'g', 0x90),
  };
  send_all(&c, m, n, 6);
  expect_pong(&c, 1);
  for (uint32_t id = 2; id <= 5; id++) expect_code(&c, id, 1);
  expect_pong(&c, 6);
  ping_pong(&c, 7);
  client_close(&c);
}

/* Notifications of any method and params are ignored, also between a request and its
 * asynchronous reply; the first is what a neovim-style MessagePack-RPC client sends when it
 * connects. */
Test(conn_protocol, notifications_of_any_shape_are_ignored) {
  daemon_start(&d, NULL);
  client_t c;
  client_connect_tcp(&c, &d);
  float v[4] = {1, 2, 3, 4};
  client_send_upload_f32(&c, 1, NULL, v, 4); /* answered by the device worker, later */
  const uint8_t *m[] = {
      /* [2, "nvim_set_client_info", ["client", {}, "remote", {}, {}]] */
      MSG(0x93, 0x02, 0xb4, 'n', 'v', 'i', 'm', '_', 's', 'e', 't', '_', 'c', 'l', 'i', 'e', 'n',
          't', '_', 'i', 'n', 'f', 'o', 0x95, 0xa6, 'c', 'l', 'i', 'e', 'n', 't', 0x80, 0xa6, 'r',
          'e', 'm', 'o', 't', 'e', 0x80, 0x80),
      MSG(0x93, 0x02, 0x05, 0xc0),                            /* [2, 5, nil] */
      MSG(0x93, 0x02, 0xa1, 'x', 0x07),                       /* [2, "x", 7] */
      MSG(0x93, 0x02, 0xc4, 0x01, 'y', 0x91, 0x80),           /* [2, bin "y", [{}]] */
      MSG(0x93, 0x02, 0xa4, 'p', 'i', 'n', 'g', 0x90),        /* a method's name */
      MSG(0x94, 0x01, 0x09, 0xc0, 0xc0),                      /* a response: answers nothing */
      MSG(0x94, 0x00, 0x02, 0xa4, 'p', 'i', 'n', 'g', 0x90),  /* ping */
  };
  const size_t n[] = {
      LEN(0x93, 0x02, 0xb4, 'n', 'v', 'i', 'm', '_', 's', 'e', 't', '_', 'c', 'l', 'i', 'e', 'n',
          't', '_', 'i', 'n', 'f', 'o', 0x95, 0xa6, 'c', 'l', 'i', 'e', 'n', 't', 0x80, 0xa6, 'r',
          'e', 'm', 'o', 't', 'e', 0x80, 0x80),
      LEN(0x93, 0x02, 0x05, 0xc0),
      LEN(0x93, 0x02, 0xa1, 'x', 0x07),
      LEN(0x93, 0x02, 0xc4, 0x01, 'y', 0x91, 0x80),
      LEN(0x93, 0x02, 0xa4, 'p', 'i', 'n', 'g', 0x90),
      LEN(0x94, 0x01, 0x09, 0xc0, 0xc0),
      LEN(0x94, 0x00, 0x02, 0xa4, 'p', 'i', 'n', 'g', 0x90),
  };
  send_all(&c, m, n, 7);
  bool upload = false, ping = false;
  for (int i = 0; i < 2; i++) {
    cr_assert(client_recv(&c, 10000), "a reply is missing");
    cr_assert_eq(c.msg.type, KILN_RPC_RESPONSE, "kilnd sent a notification (an error?)");
    cr_assert_eq(code_of(&c), 0);
    if (c.msg.msgid == 1) upload = true;
    if (c.msg.msgid == 2) ping = true;
  }
  cr_assert(upload && ping);
  /* Nothing else was sent: the next message is the answer to the next request. */
  ping_pong(&c, 3);
  client_close(&c);
}

/* Only a framing error closes the connection, after the replies made before it. */
Test(conn_protocol, framing_error_closes_after_the_replies_already_made) {
  client_t c;
  kiln_buf_t all;
  kiln_packer_t p;
  start_connected(NULL, &c, &all, &p);
  enum { N = 500 };
  for (uint32_t i = 0; i < N; i++) pack_ping(&p.pk, i);
  const uint8_t garbage[] = {0xc1, 0x94, 0x00, 0x01};
  cr_assert_null(kiln_buf_append(&all, garbage, sizeof(garbage)));
  client_send_raw(&c, all.data, all.len);
  kiln_buf_deinit(&all);
  for (uint32_t i = 0; i < N; i++) expect_pong(&c, i);
  cr_assert(client_recv(&c, 10000), "no error after the replies");
  cr_assert_eq(c.msg.type, KILN_RPC_NOTIFICATION);
  cr_assert_eq(kiln_params_find(c.msg.params, "code")->via.u64, 1);
  cr_assert(client_wait_closed(&c, 10000));
  client_close(&c);
}

/* `ir` has one limit, 256 MiB, whether sent as str or as bin; past it, the request alone
 * fails. */
static void send_compile_of(client_t *c, uint32_t msgid, const char *ir, size_t len, bool as_str) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t p;
  kiln_packer_init(&p, &b);
  kiln_rpc_pack_request_head(&p.pk, msgid, "compile");
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_map(&p.pk, 2);
  kiln_pack_kv_str(&p.pk, "target", "cpu");
  kiln_pack_cstr(&p.pk, "ir");
  if (as_str) msgpack_pack_str(&p.pk, len);
  else msgpack_pack_bin(&p.pk, len);
  client_send_raw(c, b.data, b.len);
  client_send_raw(c, ir, len);
  kiln_buf_deinit(&b);
}

Test(conn_protocol, ir_as_str_or_bin_has_one_limit) {
  daemon_start(&d, NULL);
  client_t c;
  client_connect_tcp(&c, &d);
  /* 2 MiB of IR text (a long comment, then the kernel): over the old 1 MiB str cap. */
  size_t big = (2u << 20) + sizeof(spin_ir);
  char *ir = malloc(big);
  memset(ir, ' ', big);
  ir[0] = ';';
  ir[(2u << 20) - 1] = '\n';
  memcpy(ir + (2u << 20), spin_ir, sizeof(spin_ir) - 1);
  size_t len = (2u << 20) + sizeof(spin_ir) - 1;
  send_compile_of(&c, 1, ir, len, true);
  expect_code(&c, 1, 0);
  send_compile_of(&c, 2, ir, len, false);
  expect_code(&c, 2, 0);
  free(ir);
  /* 256 MiB + 1 in either form: E_RESOURCE_EXHAUSTED for that request, nothing more. */
  size_t over = (256u << 20) + 1;
  char *huge = malloc(over);
  memset(huge, ';', over);
  send_compile_of(&c, 3, huge, over, true);
  expect_code(&c, 3, 6);
  char text[512];
  cr_assert(strstr(text_of(&c, text, sizeof(text)), "268435456"), "message: %s", text);
  send_compile_of(&c, 4, huge, over, false);
  expect_code(&c, 4, 6);
  free(huge);
  ping_pong(&c, 5);
  client_close(&c);
}

/* --- §5: connections before hello on a tokens server ------------------------------------ */

#define TOKEN_ALPHA "alpha-token-0123456789abcdef"
#define TOKEN_BETA "beta-token-0123456789abcdef0"
static char tokens_path[128];

static void start_with_tokens(const char *const *extra) {
  snprintf(tokens_path, sizeof(tokens_path), "/tmp/kiln-conn-tokens-%d", (int)getpid());
  FILE *f = fopen(tokens_path, "w");
  cr_assert(f);
  fprintf(f, "%s alpha\n%s beta\n", TOKEN_ALPHA, TOKEN_BETA);
  fclose(f);
  const char *argv[32] = {"--tokens", tokens_path};
  int n = 2;
  for (; extra && *extra && n < 31; extra++) argv[n++] = *extra;
  argv[n] = NULL;
  daemon_start(&d, argv);
}

static void stop_tokens(void) {
  stop();
  if (tokens_path[0]) unlink(tokens_path);
}

TestSuite(conn_anonymous, .fini = stop_tokens, .timeout = 120);

static void hello_ok(client_t *c, uint32_t msgid, const char *token) {
  client_send_hello(c, msgid, token);
  expect_code(c, msgid, 0);
}

/* A notification [2, "error", [{"code": code, ...}]] and then the close. */
static void expect_closed_with(client_t *c, uint64_t code) {
  cr_assert(client_recv(c, 10000), "no notification before the close");
  cr_assert_eq(c->msg.type, KILN_RPC_NOTIFICATION);
  const msgpack_object *cd = kiln_params_find(c->msg.params, "code");
  cr_assert(cd);
  cr_assert_eq(cd->via.u64, code);
  cr_assert(client_wait_closed(c, 10000), "not closed after the notification");
}

static void send_ping_with_bin(client_t *c, uint32_t msgid, size_t n) {
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_cstr(&b.p.pk, "pad");
  msgpack_pack_bin(&b.p.pk, (uint32_t)n);
  char *z = calloc(1, n);
  msgpack_pack_bin_body(&b.p.pk, z, n);
  free(z);
  client_send(c, msgid, "ping", &b.buf);
  pb_end(&b);
}

Test(conn_anonymous, small_message_limit_before_hello) {
  start_with_tokens(NULL);
  client_t a, t;
  client_connect_tcp(&a, &d);
  client_connect_tcp(&t, &d);
  /* Before hello: a 100 KiB message breaks the 64 KiB limit and closes the connection. */
  send_ping_with_bin(&a, 1, 100 << 10);
  cr_assert(client_recv(&a, 10000));
  cr_assert_eq(code_of(&a), 6, "expected E_RESOURCE_EXHAUSTED");
  cr_assert(client_wait_closed(&a, 10000));
  client_close(&a);
  /* After it, the same message is an ordinary request (ping refuses the unknown field). */
  hello_ok(&t, 1, TOKEN_ALPHA);
  const msgpack_object *lim = kiln_params_find(t.msg.result, "limits");
  cr_assert_gt(kiln_params_find(lim, "max_message")->via.u64, 1u << 20);
  send_ping_with_bin(&t, 2, 100 << 10);
  expect_code(&t, 2, 1);
  ping_pong(&t, 3);
  client_close(&t);
}

Test(conn_anonymous, hello_timeout_closes_anonymous_connections_even_while_they_ping) {
  const char *extra[] = {"--hello-timeout", "1", NULL};
  start_with_tokens(extra);
  client_t a, t;
  client_connect_tcp(&a, &d);
  client_connect_tcp(&t, &d);
  hello_ok(&t, 1, TOKEN_ALPHA);
  bool closed = false;
  for (uint32_t i = 0; i < 100 && !closed; i++) {
    client_send(&a, 10 + i, "ping", NULL);
    cr_assert(client_recv(&a, 10000));
    if (a.msg.type == KILN_RPC_NOTIFICATION) {
      cr_assert_eq(kiln_params_find(a.msg.params, "code")->via.u64, 3, "not E_UNAUTHENTICATED");
      closed = true;
    } else {
      cr_assert_eq(code_of(&a), 0);
      sleep_ms(100);
    }
  }
  cr_assert(closed, "an anonymous connection pinged for 10 s past a 1 s hello timeout");
  cr_assert(client_wait_closed(&a, 10000));
  client_close(&a);
  /* The authenticated connection, as old and idle, stays. */
  ping_pong(&t, 2);
  client_close(&t);
}

/* Anonymous connections never lock a tenant out: at most --max-anonymous-per-peer from one
 * address (newcomers refused), at most --max-anonymous in all and never past the connection
 * cap (the oldest anonymous one makes room). */
Test(conn_anonymous, anonymous_connections_cannot_lock_out_a_tenant) {
  const char *extra[] = {"--max-anonymous", "4", "--max-anonymous-per-peer", "2",
                         "--max-connections", "4", NULL};
  start_with_tokens(extra);
  client_t a[3], b[2], t1, t2;
  for (int i = 0; i < 2; i++) {
    client_connect_tcp_from(&a[i], &d, "127.0.0.2");
    client_send(&a[i], 1, "ping", NULL); /* kilnd has accepted it: the order is known */
    expect_pong(&a[i], 1);
  }
  for (int i = 0; i < 2; i++) {
    client_connect_tcp_from(&b[i], &d, "127.0.0.3");
    client_send(&b[i], 1, "ping", NULL);
    expect_pong(&b[i], 1);
  }
  /* A third from 127.0.0.2 is refused. */
  client_connect_tcp_from(&a[2], &d, "127.0.0.2");
  expect_closed_with(&a[2], 6);
  client_close(&a[2]);
  /* A tenant from elsewhere gets in: the oldest anonymous connection makes room. */
  client_connect_tcp_from(&t1, &d, "127.0.0.4");
  hello_ok(&t1, 1, TOKEN_ALPHA);
  expect_closed_with(&a[0], 6);
  client_close(&a[0]);
  /* Past the connection cap (a[1], b[0], b[1], t1 and this one), another tenant still gets
   * in. */
  client_connect_tcp_from(&t2, &d, "127.0.0.5");
  hello_ok(&t2, 1, TOKEN_BETA);
  expect_closed_with(&a[1], 6);
  client_close(&a[1]);
  ping_pong(&t1, 2);
  client_send(&b[1], 2, "ping", NULL);
  expect_pong(&b[1], 2);
  client_close(&b[0]);
  client_close(&b[1]);
  client_close(&t1);
  client_close(&t2);
}

Test(conn_anonymous, failed_hellos_are_rate_limited_per_address) {
  start_with_tokens(NULL);
  client_t a, other;
  client_connect_tcp_from(&a, &d, "127.0.0.6");
  for (uint32_t i = 0; i < 10; i++) {
    client_send_hello(&a, 1 + i, "wrong-token-0123456789abcdef");
    expect_code(&a, 1 + i, 3);
  }
  /* The burst is spent: the next hello from this address is refused before its token is
   * looked at, right or wrong, and the connection stays. */
  client_send_hello(&a, 20, TOKEN_ALPHA);
  expect_code(&a, 20, 6);
  char text[512];
  cr_assert(strstr(text_of(&a, text, sizeof(text)), "too many failed hello"), "%s", text);
  ping_pong(&a, 21);
  /* Another address is not affected. */
  client_connect_tcp_from(&other, &d, "127.0.0.7");
  hello_ok(&other, 1, TOKEN_ALPHA);
  client_close(&a);
  client_close(&other);
}

/* --- §5: shutdown answers what is in flight --------------------------------------------- */

TestSuite(conn_shutdown, .fini = stop, .timeout = 120);

Test(conn_shutdown, sigterm_answers_requests_in_flight_with_cancelled) {
  const char *extra[] = {"--grace", "1", NULL};
  daemon_start(&d, extra);
  client_t c;
  client_connect_tcp(&c, &d);
  char module[65];
  uint64_t tensor;
  spin_setup(&c, module, &tensor);
  /* Three launches that run far past the grace period: one running, two queued behind it. */
  kiln_buf_t all;
  kiln_buf_init(&all);
  kiln_packer_t p;
  kiln_packer_init(&p, &all);
  for (uint32_t i = 0; i < 3; i++) pack_spin(&p.pk, 10 + i, module, tensor, 4000000000u);
  client_send_raw(&c, all.data, all.len);
  kiln_buf_deinit(&all);
  /* The first is running once the device reports it. */
  client_t probe;
  client_connect_tcp(&probe, &d);
  for (int i = 0;; i++) {
    cr_assert_lt(i, 1000, "the launch never started");
    client_send(&probe, 1, "stats", NULL);
    cr_assert(client_recv(&probe, 10000));
    const msgpack_object *devs = kiln_params_find(probe.msg.result, "devices");
    if (kiln_params_find(&devs->via.array.ptr[0], "launches")->via.u64 > 0) break;
    sleep_ms(10);
  }
  client_close(&probe);
  kill(d.pid, SIGTERM);
  bool seen[3] = {false};
  for (int i = 0; i < 3; i++) {
    cr_assert(client_recv(&c, 20000), "launch reply %d missing at shutdown", i);
    cr_assert_eq(c.msg.type, KILN_RPC_RESPONSE);
    cr_assert(c.msg.msgid >= 10 && c.msg.msgid < 13);
    char text[256];
    cr_assert_eq(code_of(&c), 12, "not E_CANCELLED: %s", text_of(&c, text, sizeof(text)));
    seen[c.msg.msgid - 10] = true;
  }
  cr_assert(seen[0] && seen[1] && seen[2]);
  cr_assert(client_wait_closed(&c, 10000));
  client_close(&c);
  int status = daemon_stop(&d);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
}
