/* Connection timers against the real kilnd (issue 11 §4): the partial-message timeout
 * measures a stalled peer, never kilnd's own back-pressure. Every daemon here runs with
 * --partial-timeout 1 and every scenario lasts several times that long, so a timer that
 * counted anything but the peer's silence would close the connection. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

/* The first reproduction: a stream of pings in which every message completes within 50 ms,
 * but every send (so every read of kilnd's) ends in the middle of the next message. */
Test(conn_timers, ping_stream_never_ending_on_a_boundary_survives) {
  daemon_start(&d, short_partial);
  client_t c;
  client_connect_tcp(&c, &d);
  enum { N = 60 };
  kiln_buf_t all;
  kiln_buf_init(&all);
  kiln_packer_t p;
  kiln_packer_init(&p, &all);
  size_t at[N + 1];
  for (uint32_t i = 0; i < N; i++) {
    at[i] = all.len;
    kiln_rpc_pack_request_head(&p.pk, 100 + i, "ping");
    msgpack_pack_array(&p.pk, 0);
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
  client_send(&c, 999, "ping", NULL);
  expect_pong(&c, 999);
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
    kiln_buf_append(&msg, b.buf.data, b.buf.len);
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
  client_send(&other, 1, "ping", NULL);
  expect_pong(&other, 1);
  client_close(&other);
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

Test(conn_timers, pipelined_launches_held_back_by_the_inflight_limit_survive) {
  daemon_start(&d, short_partial);
  client_t c;
  client_connect_tcp(&c, &d);
  pbuild_t b;
  pb_begin(&b, 2);
  kiln_pack_cstr(&b.p.pk, "ir");
  msgpack_pack_str(&b.p.pk, sizeof(spin_ir) - 1);
  msgpack_pack_str_body(&b.p.pk, spin_ir, sizeof(spin_ir) - 1);
  kiln_pack_kv_str(&b.p.pk, "target", "cpu");
  client_send(&c, 1, "compile", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(&c, 120000));
  char text[512];
  cr_assert_eq(code_of(&c), 0, "compile: %s", text_of(&c, text, sizeof(text)));
  const msgpack_object *m = kiln_params_find(c.msg.result, "module");
  char module[65];
  snprintf(module, sizeof(module), "%.*s", (int)m->via.str.size, m->via.str.ptr);
  pb_begin(&b, 2);
  kiln_pack_kv_str(&b.p.pk, "dtype", "int32");
  kiln_pack_cstr(&b.p.pk, "shape");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, 1);
  client_send(&c, 2, "alloc", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(&c, 10000));
  cr_assert_eq(code_of(&c), 0);
  uint64_t tensor = kiln_params_find(c.msg.result, "id")->via.u64;

  /* Size each launch so that 1000 of them run for about 4 s: four times the timeout, with
   * kilnd reading only while fewer than 256 are in flight. */
  uint32_t n = 100000;
  double t = spin_seconds(&c, module, tensor, n);
  while (t < 1e-3 && n < (1u << 30)) {
    n *= 4;
    t = spin_seconds(&c, module, tensor, n);
  }
  double want = 4.0 / 1000;
  n = (uint32_t)KILN_MIN((double)n * want / t, (double)(1u << 30));

  enum { N = 1000 };
  kiln_buf_t all;
  kiln_buf_init(&all);
  kiln_packer_t p;
  kiln_packer_init(&p, &all);
  for (uint32_t i = 0; i < N; i++) pack_spin(&p.pk, 1000 + i, module, tensor, n);
  double t0 = now_s();
  client_send_raw(&c, all.data, all.len);
  kiln_buf_deinit(&all);
  static bool seen[N];
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
  cr_assert_gt(now_s() - t0, 2.0, "the launches must outlast the 1 s timeout");
  client_send(&c, 5, "ping", NULL);
  expect_pong(&c, 5);
  client_close(&c);
}
