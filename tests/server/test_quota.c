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
#include <sys/wait.h>
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
#define TOK_D2 "delta-second-token-0123456789"
#define TOK_E "echo-token-0123456789"
#define TOK_F "foxtrot-token-0123456789"

#define TOKENS                                                                         \
  TOK_A " alpha memory=24M\n"                                                          \
  TOK_B " bravo memory=1G\n" /* more than the box has */                               \
  TOK_C " charlie memory=40M\n"                                                        \
  TOK_D "," TOK_D2 " delta\n" /* no memory quota */                                    \
  TOK_E " echo lease=5\n"                                                              \
  TOK_F " foxtrot lease=0\n"

static daemon_t d;
static char tokens_path[128];

static void write_tokens(const char *text) { write_text_file(tokens_path, text); }

static void start(void) {
  snprintf(tokens_path, sizeof(tokens_path), "/tmp/kiln-quota-tokens-%d", (int)getpid());
  write_tokens(TOKENS);
  const char *extra[] = {"--tokens", tokens_path, "--cpu-memory", "64M", NULL};
  daemon_start(&d, extra);
}

static void stop(void) {
  if (d.pid) daemon_stop(&d);
  unlink(tokens_path);
}

TestSuite(quota, .init = start, .fini = stop, .timeout = 120);
TestSuite(outlive, .init = start, .fini = stop, .timeout = 120);

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

/* Polls the caller's usage until it reads `want`: for what follows another connection's
 * close, which kilnd sees in its own time. */
static void wait_usage(client_t *c, const char *field, uint64_t want) {
  uint64_t v = my_usage(c, field);
  for (int i = 0; i < 500 && v != want; i++) {
    usleep(10000);
    v = my_usage(c, field);
  }
  cr_assert_eq(v, want, "%s stays %llu", field, (unsigned long long)v);
}

static int64_t worker_pid(client_t *c) {
  const msgpack_object *w = kiln_params_find(stats(c), "workers");
  cr_assert(w && w->via.array.size == 1, "expected one device worker of the tenant");
  return (int64_t)kiln_params_find(&w->via.array.ptr[0], "pid")->via.u64;
}

static const float zero4[4] = {0, 0, 0, 0};

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

/* The worker's address space is sized from the tenant's bound on the device (its memory
 * quota, or the device's capacity without one), so a worker of a tenant without a quota is
 * limited too (docs/operations.md, "Security model"). */
static long long address_space_limit(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
  FILE *f = fopen(path, "r");
  cr_assert(f);
  long long v = -2;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "Max address space", 17) == 0)
      v = strncmp(line + 26, "unlimited", 9) == 0 ? -1 : strtoll(line + 26, NULL, 10);
  fclose(f);
  cr_assert_neq(v, -2, "no address space row in %s", path);
  return v;
}

Test(quota, a_worker_without_a_quota_is_bounded_by_the_capacity) {
  if (getenv("KILN_SANITIZED")) {
    stop(); /* cr_skip_test ends the test without the suite's .fini: the daemon would outlive it */
    cr_skip_test("sanitizer build: AddressSanitizer's shadow memory needs an unlimited RLIMIT_AS");
  }
  client_t a, dl;
  connect_as(&a, TOK_A);
  connect_as(&dl, TOK_D);
  upload4(&a, zero4);
  upload4(&dl, zero4);
  long long as_a = address_space_limit((pid_t)worker_pid(&a));
  long long as_d = address_space_limit((pid_t)worker_pid(&dl));
  cr_assert(as_d > 0, "delta (no quota) has no address-space limit");
  cr_assert(as_a > 0 && as_a < as_d, "alpha's 24 MiB bound gave %lld, delta's 64 MiB %lld", as_a,
            as_d);
  client_close(&a);
  client_close(&dl);
}

/* --- section 6: work and rights that outlive their owner --------------------------------- */

static const char spin_ll[] =
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
    "}\n"
    "define void @mark(ptr %p) section \"kiln.kernel\" {\n"
    "  store i32 7, ptr %p\n"
    "  ret void\n"
    "}\n";

static void send_lease(client_t *c, uint32_t msgid, uint64_t seconds, bool wait);

/* A lease on cpu:0 that must be granted at once. */
static void lease_ok(client_t *c, uint32_t msgid, uint64_t seconds) {
  send_lease(c, msgid, seconds, true);
  reply_to(c, msgid);
  cr_assert_eq(code_of(c), 0, "lease: %s", err(c));
}

/* Compiles the kernels above for the client's tenant; returns a zeroed tensor of 4 floats. */
static uint64_t spin_ready(client_t *c, char mod[65]) {
  compile_module(c, 40, spin_ll, mod);
  return upload4(c, zero4);
}

/* launch (or time, with `repeat` repeats of one run each) of spin(tensor, n) or, with n 0,
 * mark(tensor). timeout_ms 0 leaves the field out. */
static void send_kernel(client_t *c, uint32_t msgid, const char *module, uint64_t tensor, uint32_t n,
                        bool wait, uint64_t timeout_ms, uint32_t repeat) {
  pbuild_t b;
  pb_begin(&b, 6 + (timeout_ms ? 1 : 0) + (repeat ? 3 : 0));
  pack_launch_geometry(&b.p.pk, module, n ? "spin" : "mark", 1, 1);
  kiln_pack_cstr(&b.p.pk, "args");
  msgpack_pack_array(&b.p.pk, n ? 2 : 1);
  msgpack_pack_map(&b.p.pk, 1);
  kiln_pack_kv_u64(&b.p.pk, "tensor", tensor);
  if (n) msgpack_pack_uint32(&b.p.pk, n);
  kiln_pack_kv_bool(&b.p.pk, "wait", wait);
  if (timeout_ms) kiln_pack_kv_u64(&b.p.pk, "timeout_ms", timeout_ms);
  if (repeat) {
    kiln_pack_kv_u64(&b.p.pk, "repeat", repeat);
    kiln_pack_kv_u64(&b.p.pk, "number", 1);
    kiln_pack_kv_u64(&b.p.pk, "warmup", 0);
  }
  client_send(c, msgid, repeat ? "time" : "launch", &b.buf);
  pb_end(&b);
}

static void send_lease(client_t *c, uint32_t msgid, uint64_t seconds, bool wait) {
  pbuild_t b;
  pb_begin(&b, 1 + (seconds ? 1 : 0));
  kiln_pack_kv_bool(&b.p.pk, "wait", wait);
  if (seconds) kiln_pack_kv_u64(&b.p.pk, "seconds", seconds);
  client_send(c, msgid, "lease", &b.buf);
  pb_end(&b);
}

/* Waits until the process has used `ticks` more clock ticks of CPU than `since`: evidence that
 * it runs the work it was given (not a measure of time). */
static long cpu_ticks(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  cr_assert(f, "no process %d", (int)pid);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')');
  cr_assert(p);
  unsigned long ut = 0, st = 0;
  /* after "pid (comm)": state ppid pgrp session tty tpgid flags minflt cminflt majflt
   * cmajflt utime stime */
  cr_assert(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2);
  return (long)(ut + st);
}

static void wait_busy(pid_t pid, long since, long ticks) {
  for (int i = 0; i < 3000 && cpu_ticks(pid) < since + ticks; i++) usleep(10000);
  cr_assert(cpu_ticks(pid) >= since + ticks, "the worker never got busy");
}

/* A client that leaves has its running `time` stopped and its queued launches and
 * allocations dropped: the worker is free for the tenant's next request at once, the queued
 * kernel never ran, and the tensors whose ids were never delivered hold no memory. */
Test(outlive, a_departed_client_leaves_no_work_and_no_memory_behind) {
  client_t a, b;
  connect_as(&a, TOK_A);
  connect_as(&b, TOK_A);
  char mod[65];
  uint64_t spun = spin_ready(&a, mod), marked = spin_ready(&b, mod);
  pid_t pid = (pid_t)worker_pid(&a);
  long before = cpu_ticks(pid);
  /* About a minute of runs at the least; only cancelling ends it sooner. */
  send_kernel(&a, 50, mod, spun, 2000000, true, 0, 1000000);
  send_kernel(&a, 51, mod, marked, 0, true, 0, 0);
  for (uint32_t i = 0; i < 3; i++) send_alloc(&a, 52 + i, "uint8", 4 * MIB);
  client_send(&a, 59, "ping", NULL);
  reply_to(&a, 59); /* kilnd has handed all of it to the worker */
  wait_busy(pid, before, 20);
  client_close(&a);
  /* Queued behind all of that in the same worker. */
  expect_data(&b, marked, zero4);
  cr_assert_eq(worker_pid(&b), pid, "the worker was replaced instead of told");
  cr_assert_eq(my_usage(&b, "launches"), 0);
  cr_assert_eq(my_usage(&b, "tensors"), 2, "undelivered tensors are still held");
  cr_assert_eq(my_usage(&b, "memory"), 32);
  client_close(&b);
}

/* Leases have a per-tenant maximum (the `lease` quota, 60 s unless the tokens line says). */
Test(outlive, leases_are_bounded_by_the_lease_quota) {
  client_t e, f, a;
  connect_as(&e, TOK_E);
  connect_as(&f, TOK_F);
  connect_as(&a, TOK_A);
  send_lease(&e, 60, 6, true);
  reply_to(&e, 60);
  cr_assert_eq(code_of(&e), E_RESOURCE_EXHAUSTED, "%s", err(&e));
  cr_assert(strstr(err(&e), "lease quota"), "%s", err(&e));
  send_lease(&e, 61, 0, true); /* no seconds: the quota when below 60 */
  reply_to(&e, 61);
  cr_assert_eq(code_of(&e), 0, "%s", err(&e));
  cr_assert_eq(kiln_params_find(e.msg.result, "seconds")->via.u64, 5);
  send_lease(&e, 62, 0, true);
  reply_to(&e, 62);
  cr_assert_eq(code_of(&e), E_INVALID_ARGUMENT, "%s", err(&e)); /* no renewal while it stands */
  send_lease(&f, 63, 1, true);
  reply_to(&f, 63);
  cr_assert_eq(code_of(&f), E_RESOURCE_EXHAUSTED, "%s", err(&f));
  send_lease(&a, 64, 61, true); /* the default quota */
  reply_to(&a, 64);
  cr_assert_eq(code_of(&a), E_RESOURCE_EXHAUSTED, "%s", err(&a));
  client_close(&e);
  client_close(&f);
  client_close(&a);
}

/* A launch held behind another tenant's lease waits at most its timeout_ms; a connection
 * that closes takes its held launches and pending lease requests with it. */
Test(outlive, held_launches_honour_their_timeout) {
  client_t a, b, c;
  connect_as(&a, TOK_A);
  connect_as(&b, TOK_B);
  connect_as(&c, TOK_C);
  char mod[65];
  uint64_t tb = spin_ready(&b, mod), tc = spin_ready(&c, mod);
  lease_ok(&a, 70, 60);
  send_kernel(&b, 71, mod, tb, 0, true, 200, 0);
  reply_to(&b, 71);
  cr_assert_eq(code_of(&b), E_TIMEOUT, "%s", err(&b));
  cr_assert(strstr(err(&b), "lease"), "%s", err(&b));
  expect_data(&b, tb, zero4); /* it never ran */
  /* charlie's held launch and lease request go with its connection; alpha's release then
   * reaches nobody but bravo's next launch. */
  send_kernel(&c, 72, mod, tc, 0, true, 0, 0);
  send_lease(&c, 73, 10, true);
  client_send(&c, 74, "ping", NULL);
  reply_to(&c, 74);
  client_close(&c);
  connect_as(&c, TOK_C);
  wait_usage(&c, "launches", 0); /* kilnd saw the close: the held launch is gone */
  client_close(&c);
  client_close(&a); /* ends the lease when kilnd sees it */
  /* Runs once alpha's lease is gone, unless charlie's lease request were left behind: then
   * charlie would hold the device for 10 s and this launch would time out. */
  send_kernel(&b, 76, mod, tb, 0, true, 5000, 0);
  reply_to(&b, 76);
  cr_assert_eq(code_of(&b), 0, "%s", err(&b));
  client_close(&b);
}

/* Reloads the tokens file with `text` and returns once kilnd has applied it: the connection
 * `canary` (whose token the new text leaves out) is closed by the reload. */
static void reload(const char *text, client_t *canary) {
  write_tokens(text);
  kill(d.pid, SIGHUP);
  cr_assert(client_wait_closed(canary, 10000), "the reload did not close the canary");
  client_close(canary);
}

/* Revocation: after SIGHUP, a connection whose token left the file is closed even though its
 * tenant stays; the tenant's other token keeps working. */
Test(outlive, a_removed_token_closes_its_connections) {
  client_t one, two;
  connect_as(&one, TOK_D);
  connect_as(&two, TOK_D2);
  write_tokens(TOK_D2 " delta\n" TOK_A " alpha\n");
  kill(d.pid, SIGHUP);
  cr_assert(client_wait_closed(&one, 10000), "a connection outlived its token");
  client_close(&one);
  client_send(&two, 80, "devices", NULL);
  reply_to(&two, 80);
  cr_assert_eq(code_of(&two), 0, "%s", err(&two));
  client_connect_tcp(&one, &d);
  client_send_hello(&one, 81, TOK_D);
  reply_to(&one, 81);
  cr_assert_eq(code_of(&one), 3 /* E_UNAUTHENTICATED */);
  client_close(&one);
  client_close(&two);
}

/* A tenant whose line loses a device loses what it had there: its lease (others waiting run),
 * its tensors (their memory goes back), access to both. */
Test(outlive, a_revoked_device_takes_lease_tensors_and_access) {
  client_t a, b, canary;
  connect_as(&a, TOK_A);
  connect_as(&b, TOK_B);
  connect_as(&canary, TOK_F);
  char mod[65];
  uint64_t ta = alloc_ok(&a, 8 * MIB), tb = spin_ready(&b, mod);
  lease_ok(&a, 90, 60);
  send_kernel(&b, 91, mod, tb, 0, true, 0, 0); /* held behind alpha's lease */
  cr_assert_not(client_recv(&b, 200), "a launch ran through another tenant's lease");
  reload(TOK_A " alpha memory=24M devices=cuda\n" TOK_B " bravo\n", &canary);
  reply_to(&b, 91);
  cr_assert_eq(code_of(&b), 0, "%s", err(&b));
  call_id(&a, "download", ta, E_PERMISSION);
  send_alloc(&a, 92, "uint8", 16);
  reply_to(&a, 92);
  cr_assert_eq(code_of(&a), E_PERMISSION, "%s", err(&a));
  wait_usage(&a, "memory", 0); /* its worker is gone, and with it the 8 MiB */
  /* Given the device back, alpha starts afresh. */
  connect_as(&canary, TOK_B);
  reload(TOK_A " alpha memory=24M\n", &canary);
  call_id(&a, "download", ta, E_NOT_FOUND);
  alloc_ok(&a, 20 * MIB);
  client_close(&a);
  client_close(&b);
}

/* Renewal abuse: a tenant that leases again as soon as its lease ends, while another tenant
 * waited, gets its next lease only after the others had the device as long; its pending
 * request holds nobody back meanwhile. */
Test(outlive, a_lease_taken_again_at_once_waits_its_turn) {
  client_t a, b;
  connect_as(&a, TOK_A);
  connect_as(&b, TOK_B);
  char mod[65];
  uint64_t tb = spin_ready(&b, mod);
  lease_ok(&a, 100, 3);
  send_kernel(&b, 101, mod, tb, 0, true, 0, 0); /* waits for the lease to expire */
  reply_to(&b, 101);
  cr_assert_eq(code_of(&b), 0, "%s", err(&b));
  send_lease(&a, 102, 3, false);
  reply_to(&a, 102);
  cr_assert_eq(code_of(&a), E_UNAVAILABLE, "%s", err(&a));
  cr_assert(strstr(err(&a), "next lease"), "%s", err(&a));
  send_lease(&a, 103, 3, true); /* pending through its cool-down */
  send_kernel(&b, 104, mod, tb, 0, false, 0, 0);
  reply_to(&b, 104);
  cr_assert_eq(code_of(&b), 0, "a pending lease in its cool-down held bravo back: %s", err(&b));
  cr_assert_not(client_recv(&a, 0), "alpha's lease came before bravo's turn");
  reply_to(&a, 103); /* and then it comes */
  cr_assert_eq(code_of(&a), 0, "%s", err(&a));
  client_close(&a);
  client_close(&b);
}

/* A tenant's requests on one device complete in the order sent, also when its launch waits
 * behind another tenant's lease: the download sent after it waits too and sees its result. */
Test(outlive, requests_behind_a_held_launch_keep_their_order) {
  client_t a, b;
  connect_as(&a, TOK_A);
  connect_as(&b, TOK_B);
  char mod[65];
  uint64_t tb = spin_ready(&b, mod);
  lease_ok(&a, 110, 60);
  send_kernel(&b, 111, mod, tb, 0, true, 0, 0); /* held */
  client_send_id(&b, 112, "download", tb);
  cr_assert_not(client_recv(&b, 200), "the download overtook the held launch");
  client_close(&a); /* the lease ends when kilnd sees it */
  reply_to(&b, 111);
  cr_assert_eq(code_of(&b), 0, "%s", err(&b));
  reply_to(&b, 112);
  const msgpack_object *data = kiln_params_find(b.msg.result, "data");
  int32_t first;
  memcpy(&first, data->via.bin.ptr, 4);
  cr_assert_eq(first, 7, "the download ran before the launch");
  client_close(&b);
}

/* Replies of reads wait in kilnd's buffers until written: a client that pipelines reads and
 * never reads the replies makes kilnd hold at most the tenant's transfer budget (512 MiB),
 * and still gets every reply, in order and correct, once it reads. */
Test(outlive, unread_replies_hold_at_most_the_transfer_budget) {
  client_t a, b;
  connect_as(&a, TOK_B);
  connect_as(&b, TOK_B);
  uint64_t id = alloc_ok(&a, 48 * MIB);
  enum { N = 16 };
  for (uint32_t i = 0; i < N; i++) client_send_id(&a, 120 + i, "read", id);
  client_send(&a, 119, "ping", NULL); /* kilnd has dispatched the reads before answering */
  wait_usage(&b, "transfers_queued", N - 10); /* 10 x 48 MiB fit in 512 MiB */
  cr_assert_eq(my_usage(&b, "transfer_bytes"), 10 * 48 * MIB);
  uint32_t next = 120;
  for (uint32_t i = 0; i < N + 1; i++) {
    cr_assert(client_recv(&a, 60000), "reply %u of %u missing", i, N + 1);
    if (a.msg.msgid == 119) continue;
    cr_assert_eq(a.msg.msgid, next++, "replies out of order");
    cr_assert_eq(code_of(&a), 0, "%s", err(&a));
    cr_assert_eq(a.msg.result->via.bin.size, 48 * MIB);
  }
  wait_usage(&b, "transfer_bytes", 0);
  client_close(&a);
  client_close(&b);
}

/* --- bad input: options and tokens lines ------------------------------------------------- */

/* Runs kilnd with the arguments; returns its exit status and the start of its stderr. */
static int run_kilnd(const char *const *args, char *err_out, size_t cap) {
  const char *kilnd = getenv("KILND");
  int p[2];
  cr_assert(pipe(p) == 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    const char *argv[16] = {kilnd, "--listen", "tcp:127.0.0.1:0", "--cache-dir", "/tmp/kiln-quota-bad-cache"};
    int n = 5;
    for (; *args && n < 15; args++) argv[n++] = *args;
    argv[n] = NULL;
    dup2(p[1], 2);
    close(p[0]);
    execv(kilnd, (char *const *)argv);
    _exit(127);
  }
  close(p[1]);
  size_t len = 0;
  ssize_t r;
  while (len + 1 < cap && (r = read(p[0], err_out + len, cap - 1 - len)) > 0) len += (size_t)r;
  err_out[len] = 0;
  close(p[0]);
  int ws;
  cr_assert(waitpid(pid, &ws, 0) == pid);
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

Test(quota_start, bad_cpu_memory_and_lease_values_are_refused) {
  char out[2048];
  static const char *const bad_sizes[] = {"0", "12X", "unlimited", "512K", "-1", ""};
  for (size_t i = 0; i < sizeof(bad_sizes) / sizeof(*bad_sizes); i++) {
    const char *args[] = {"--cpu-memory", bad_sizes[i], NULL};
    cr_assert_eq(run_kilnd(args, out, sizeof(out)), 2, "--cpu-memory '%s' was accepted", bad_sizes[i]);
    cr_assert(strstr(out, "cpu-memory"), "%s", out);
  }
  char path[64];
  snprintf(path, sizeof(path), "/tmp/kiln-quota-bad-tokens-%d", (int)getpid());
  static const char *const bad_leases[] = {"3601", "-1", "5s", "", "1e3"};
  for (size_t i = 0; i < sizeof(bad_leases) / sizeof(*bad_leases); i++) {
    char line[128];
    snprintf(line, sizeof(line), TOK_A " alpha lease=%s\n", bad_leases[i]);
    write_text_file(path, line);
    const char *args[] = {"--tokens", path, NULL};
    cr_assert_eq(run_kilnd(args, out, sizeof(out)), 1, "lease=%s was accepted", bad_leases[i]);
    cr_assert(strstr(out, "lease") && strstr(out, "line 1"), "%s", out);
    cr_assert_null(strstr(out, TOK_A), "the error quoted a token: %s", out);
  }
  unlink(path);
}

/* A reload whose file does not parse changes nothing: the old table stays in force. */
Test(outlive, a_reload_that_does_not_parse_keeps_the_old_table) {
  client_t dl;
  connect_as(&dl, TOK_D);
  write_tokens(TOK_A " alpha lease=forever\n"); /* would remove delta if it applied */
  kill(d.pid, SIGHUP);
  char log[128], cmd[256];
  snprintf(log, sizeof(log), "%s/kilnd.log", d.dir);
  snprintf(cmd, sizeof(cmd), "grep -q tokens_reload_failed %s", log);
  int tries = 0;
  while (system(cmd) != 0 && tries++ < 500) usleep(10000);
  cr_assert(tries <= 500, "kilnd did not report the failed reload");
  client_send(&dl, 130, "devices", NULL);
  reply_to(&dl, 130);
  cr_assert_eq(code_of(&dl), 0, "%s", err(&dl));
  client_close(&dl);
}
