/* Memory that quotas really protect, and work and rights that outlive their owner (issue 11,
 * sections 3 and 6), against the real kilnd and its real device workers.
 *
 * The daemon runs with a small --cpu-memory (64 MiB), so the reproductions need no big RAM:
 * a tenant whose `memory` quota is larger than the box, a single allocation of 2^44 bytes,
 * allocations whose replies never reach their client, a worker that dies holding tensors. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/server/harness.h"

enum {
  E_INVALID_ARGUMENT = 1,
  E_PERMISSION = 4,
  E_NOT_FOUND = 5,
  E_RESOURCE_EXHAUSTED = 6,
  E_DEVICE_FAULT = 10,
  E_TIMEOUT = 11,
  E_CANCELLED = 12,
  E_UNAVAILABLE = 13,
};

#define MIB (1ull << 20)
#define TOK_A "alpha-token-0123456789"
#define TOK_B "bravo-token-0123456789"
#define TOK_C "charlie-token-0123456789"
#define TOK_D "delta-token-0123456789"

static daemon_t d;
static char tokens_path[128];

static void write_tokens(const char *text) { write_text_file(tokens_path, text); }

static void start(void) {
  snprintf(tokens_path, sizeof(tokens_path), "/tmp/kiln-quota-tokens-%d", (int)getpid());
  write_tokens(TOK_A " alpha memory=24M\n"
               TOK_B " bravo memory=1G\n" /* more than the box has */
               TOK_C " charlie memory=40M\n"
               TOK_D " delta\n"); /* no memory quota */
  const char *extra[] = {"--tokens", tokens_path, "--cpu-memory", "64M", NULL};
  daemon_start(&d, extra);
}

static void stop(void) {
  if (d.pid) daemon_stop(&d);
  unlink(tokens_path);
}

TestSuite(quota, .init = start, .fini = stop, .timeout = 120);

/* --- calls ------------------------------------------------------------------------------- */

static const char *err(const client_t *c) {
  static char buf[512];
  return text_of(c, buf, sizeof(buf));
}

static void connect_as(client_t *c, const char *token) {
  client_connect_tcp(c, &d);
  client_send_hello(c, 1, token);
  cr_assert(client_recv(c, 5000));
  cr_assert_eq(code_of(c), 0, "hello: %s", err(c));
}

/* Waits for the reply to msgid (replies to other msgids are not expected here). */
static void reply_to(client_t *c, uint32_t msgid) {
  cr_assert(client_recv(c, 30000), "no reply to %u", msgid);
  cr_assert_eq(c->msg.msgid, msgid);
}

static void send_alloc(client_t *c, uint32_t msgid, const char *dtype, uint64_t n) {
  pbuild_t b;
  pb_begin(&b, 2);
  kiln_pack_kv_str(&b.p.pk, "dtype", dtype);
  kiln_pack_cstr(&b.p.pk, "shape");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint64(&b.p.pk, n);
  client_send(c, msgid, "alloc", &b.buf);
  pb_end(&b);
}

static uint64_t alloc_ok(client_t *c, uint64_t bytes) {
  send_alloc(c, 2, "uint8", bytes);
  reply_to(c, 2);
  cr_assert_eq(code_of(c), 0, "alloc of %llu bytes: %s", (unsigned long long)bytes, err(c));
  return kiln_params_find(c->msg.result, "id")->via.u64;
}

static uint64_t upload4(client_t *c, const float v[4]) {
  client_send_upload_f32(c, 3, NULL, v, 4);
  reply_to(c, 3);
  cr_assert_eq(code_of(c), 0, "upload: %s", err(c));
  return kiln_params_find(c->msg.result, "id")->via.u64;
}

static void expect_data(client_t *c, uint64_t id, const float v[4]) {
  client_send_id(c, 4, "download", id);
  reply_to(c, 4);
  cr_assert_eq(code_of(c), 0, "download: %s", err(c));
  const msgpack_object *data = kiln_params_find(c->msg.result, "data");
  cr_assert(data->via.bin.size == 16 && memcmp(data->via.bin.ptr, v, 16) == 0, "tensor changed");
}

static void call_id(client_t *c, const char *method, uint64_t id, uint64_t want) {
  client_send_id(c, 5, method, id);
  reply_to(c, 5);
  cr_assert_eq(code_of(c), want, "%s: %s", method, code_of(c) ? err(c) : "ok");
}

static const msgpack_object *stats(client_t *c) {
  client_send(c, 6, "stats", NULL);
  reply_to(c, 6);
  cr_assert_eq(code_of(c), 0);
  return c->msg.result;
}

/* The caller's own line in stats.tenants. */
static uint64_t my_usage(client_t *c, const char *field) {
  const msgpack_object *t = kiln_params_find(stats(c), "tenants");
  cr_assert(t && t->via.array.size == 1);
  return kiln_params_find(&t->via.array.ptr[0], field)->via.u64;
}

static int64_t worker_pid(client_t *c) {
  const msgpack_object *w = kiln_params_find(stats(c), "workers");
  cr_assert(w && w->via.array.size == 1, "expected one device worker of the tenant");
  return (int64_t)kiln_params_find(&w->via.array.ptr[0], "pid")->via.u64;
}

/* --- section 3: memory ------------------------------------------------------------------- */

/* The first finding, scaled down: a tenant whose memory quota is larger than the box
 * allocates past the box in many pipelined calls. What the box lacks is refused before any
 * worker allocates, and the other tenant's worker and tensors are untouched. */
Test(quota, a_quota_larger_than_the_box_stops_at_the_capacity) {
  client_t a, b;
  connect_as(&a, TOK_A);
  connect_as(&b, TOK_B);
  const float v[4] = {1, 2, 3, 4};
  uint64_t keep = upload4(&a, v);
  int64_t pid_a = worker_pid(&a);
  for (uint32_t i = 0; i < 8; i++) send_alloc(&b, 10 + i, "uint8", 16 * MIB);
  int ok = 0, refused = 0;
  uint64_t first = 0;
  for (uint32_t i = 0; i < 8; i++) {
    cr_assert(client_recv(&b, 30000));
    if (code_of(&b) == 0) {
      ok++;
      if (!first) first = kiln_params_find(b.msg.result, "id")->via.u64;
      continue;
    }
    cr_assert_eq(code_of(&b), E_RESOURCE_EXHAUSTED, "%s", err(&b));
    cr_assert(strstr(err(&b), "cpu:0") && strstr(err(&b), "capacity"), "%s", err(&b));
    refused++;
  }
  /* 64 MiB less alpha's 16 bytes holds three. */
  cr_assert_eq(ok, 3, "%d allocations of 16 MiB fit in 64 MiB", ok);
  cr_assert_eq(refused, 5);
  cr_assert_eq(my_usage(&b, "memory"), 48 * MIB);
  expect_data(&a, keep, v);
  cr_assert_eq(worker_pid(&a), pid_a, "alpha's worker was replaced");
  /* The box is full for alpha too, within its own quota, until bravo frees. */
  send_alloc(&a, 7, "uint8", 16 * MIB);
  reply_to(&a, 7);
  cr_assert_eq(code_of(&a), E_RESOURCE_EXHAUSTED);
  call_id(&b, "free", first, 0);
  alloc_ok(&a, 16 * MIB);
  client_close(&a);
  client_close(&b);
}

/* Pipelined allocations see each other: the quota is charged when a request arrives, not
 * when its worker answers. */
Test(quota, pipelined_allocations_stop_at_the_quota) {
  client_t c;
  connect_as(&c, TOK_C);
  for (uint32_t i = 0; i < 4; i++) send_alloc(&c, 10 + i, "float32", 4 * MIB); /* 16 MiB each */
  int ok = 0;
  for (uint32_t i = 0; i < 4; i++) {
    cr_assert(client_recv(&c, 30000));
    if (!code_of(&c)) {
      ok++;
      continue;
    }
    cr_assert_eq(code_of(&c), E_RESOURCE_EXHAUSTED);
    cr_assert(strstr(err(&c), "memory quota") && strstr(err(&c), "charlie"), "%s", err(&c));
  }
  cr_assert_eq(ok, 2, "%d allocations of 16 MiB within a 40 MiB quota", ok);
  cr_assert_eq(my_usage(&c, "memory"), 32 * MIB);
  client_close(&c);
}

/* The second finding: kiln.nd.empty((1 << 42,)) on cpu:0. */
Test(quota, one_huge_allocation_is_refused_and_costs_nothing) {
  client_t b;
  connect_as(&b, TOK_D);
  const float v[4] = {5, 6, 7, 8};
  uint64_t keep = upload4(&b, v);
  int64_t pid = worker_pid(&b);
  send_alloc(&b, 20, "float32", 1ull << 42);
  reply_to(&b, 20);
  cr_assert_eq(code_of(&b), E_RESOURCE_EXHAUSTED, "%s", err(&b));
  cr_assert(strstr(err(&b), "capacity"), "%s", err(&b));
  /* Just over the whole capacity. */
  send_alloc(&b, 21, "uint8", 65 * MIB);
  reply_to(&b, 21);
  cr_assert_eq(code_of(&b), E_RESOURCE_EXHAUSTED, "%s", err(&b));
  expect_data(&b, keep, v);
  cr_assert_eq(worker_pid(&b), pid);
  cr_assert_eq(my_usage(&b, "memory"), 16);
  client_close(&b);
}

Test(quota, devices_report_the_capacity_kilnd_offers) {
  client_t a;
  connect_as(&a, TOK_A);
  client_send(&a, 8, "devices", NULL);
  reply_to(&a, 8);
  const msgpack_object *cpu = &a.msg.result->via.array.ptr[0];
  cr_assert(kiln_obj_str_eq(kiln_params_find(cpu, "id"), "cpu:0"));
  cr_assert_eq(kiln_params_find(cpu, "memory")->via.u64, 64 * MIB);
  const msgpack_object *devs = kiln_params_find(stats(&a), "devices");
  cr_assert_eq(kiln_params_find(&devs->via.array.ptr[0], "capacity")->via.u64, 64 * MIB);
  client_close(&a);
}

/* A worker that dies gives its tenant's bytes back at once, not when each lost id is next
 * used; the lost ids still say that they were lost. */
Test(quota, a_dead_worker_gives_its_memory_back) {
  client_t a;
  connect_as(&a, TOK_A);
  uint64_t big = alloc_ok(&a, 20 * MIB);
  pid_t pid = (pid_t)worker_pid(&a);
  kill(pid, SIGSTOP);
  client_send_id(&a, 30, "download", big);
  client_send(&a, 31, "ping", NULL); /* answered after kilnd dispatched the download */
  reply_to(&a, 31);
  kill(pid, SIGKILL);
  reply_to(&a, 30);
  cr_assert_eq(code_of(&a), E_DEVICE_FAULT);
  alloc_ok(&a, 20 * MIB); /* fits in the 24 MiB quota only if the lost 20 MiB were given back */
  call_id(&a, "download", big, E_NOT_FOUND);
  cr_assert(strstr(err(&a), "lost"), "%s", err(&a));
  call_id(&a, "download", big, E_NOT_FOUND); /* said once; afterwards an unknown id */
  client_close(&a);
}
