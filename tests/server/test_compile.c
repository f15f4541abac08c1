/* compile, compile_batch, source, cancel, launch and time through the real kilnd, its
 * compile workers and its device worker. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/server/harness.h"

static daemon_t d;

static void start(void) { daemon_start(&d, NULL); }
static void stop(void) {
  if (d.pid) daemon_stop(&d);
}

TestSuite(compile, .init = start, .fini = stop, .timeout = 240);

/* The portable kernel dialect, written by hand (docs/kernels.md). `salt` makes each
 * payload unique so that a test can tell a fresh compile from a cache hit. */
static char *vadd_ir(const char *salt) {
  static const char fmt[] =
      "; %s\n"
      "declare i32 @__kiln_group_id(i32)\n"
      "declare i32 @__kiln_local_id(i32)\n"
      "declare i32 @__kiln_group_size(i32)\n"
      "define void @vadd(ptr %%a, ptr %%b, ptr %%c, i32 %%n) section \"kiln.kernel\" {\n"
      "entry:\n"
      "  %%g = call i32 @__kiln_group_id(i32 0)\n"
      "  %%s = call i32 @__kiln_group_size(i32 0)\n"
      "  %%l = call i32 @__kiln_local_id(i32 0)\n"
      "  %%t = mul i32 %%g, %%s\n"
      "  %%i = add i32 %%t, %%l\n"
      "  %%ok = icmp ult i32 %%i, %%n\n"
      "  br i1 %%ok, label %%body, label %%done\n"
      "body:\n"
      "  %%ie = zext i32 %%i to i64\n"
      "  %%pa = getelementptr float, ptr %%a, i64 %%ie\n"
      "  %%pb = getelementptr float, ptr %%b, i64 %%ie\n"
      "  %%pc = getelementptr float, ptr %%c, i64 %%ie\n"
      "  %%x = load float, ptr %%pa\n"
      "  %%y = load float, ptr %%pb\n"
      "  %%z = fadd float %%x, %%y\n"
      "  store float %%z, ptr %%pc\n"
      "  br label %%done\n"
      "done:\n"
      "  ret void\n"
      "}\n";
  char *s = malloc(sizeof(fmt) + 64);
  sprintf(s, fmt, salt);
  return s;
}

static const char fault_ir[] =
    "define void @boom(ptr %p) section \"kiln.kernel\" {\n"
    "  store volatile i32 1, ptr null\n"
    "  ret void\n"
    "}\n";

static void send_compile(client_t *c, uint32_t msgid, const char *ir, const char *target) {
  pbuild_t b;
  pb_begin(&b, 2);
  kiln_pack_cstr(&b.p.pk, "ir");
  msgpack_pack_bin(&b.p.pk, strlen(ir));
  msgpack_pack_bin_body(&b.p.pk, ir, strlen(ir));
  kiln_pack_kv_str(&b.p.pk, "target", target);
  client_send(c, msgid, "compile", &b.buf);
  pb_end(&b);
}

/* Compiles and returns the module id (64 hex digits + NUL in out). */
static bool compile_ok(client_t *c, const char *ir, const char *target, char out[65]) {
  send_compile(c, 1, ir, target);
  cr_assert(client_recv(c, 60000), "no compile reply");
  char t[512];
  cr_assert_eq(code_of(c), 0, "compile failed: %s", text_of(c, t, sizeof(t)));
  const msgpack_object *m = kiln_params_find(c->msg.result, "module");
  cr_assert(m && m->type == MSGPACK_OBJECT_STR && m->via.str.size == 64);
  memcpy(out, m->via.str.ptr, 64);
  out[64] = 0;
  return kiln_params_find(c->msg.result, "cached")->via.boolean;
}

/* Sends `source` of module `mod` (kind "llvm", "asm" or "binary") and reads the reply. */
static void source_of(client_t *c, uint32_t msgid, const char *mod, const char *kind) {
  pbuild_t b;
  pb_begin(&b, 2);
  kiln_pack_kv_str(&b.p.pk, "module", mod);
  kiln_pack_kv_str(&b.p.pk, "kind", kind);
  client_send(c, msgid, "source", &b.buf);
  pb_end(&b);
  cr_assert(client_recv(c, 10000));
}

static const char *upload_device = NULL; /* NULL: the default device */

static uint64_t upload(client_t *c, const float *v, uint32_t n) {
  client_send_upload_f32(c, 2, upload_device, v, n);
  cr_assert(client_recv(c, 10000));
  char why[512];
  cr_assert_eq(code_of(c), 0, "upload to %s: %s", upload_device ? upload_device : "cpu:0", text_of(c, why, sizeof(why)));
  return kiln_params_find(c->msg.result, "id")->via.u64;
}

static void send_launch(client_t *c, uint32_t msgid, const char *method, const char *module,
                        const char *kernel, const char *device, uint32_t grid, uint32_t block,
                        const uint64_t *tensors, int ntensors, const int64_t *scalars,
                        int nscalars, uint32_t extra_fields) {
  pbuild_t b;
  pb_begin(&b, 5 + (device ? 1 : 0) + extra_fields);
  kiln_pack_kv_str(&b.p.pk, "module", module);
  kiln_pack_kv_str(&b.p.pk, "kernel", kernel);
  if (device) kiln_pack_kv_str(&b.p.pk, "device", device);
  kiln_pack_cstr(&b.p.pk, "grid");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, grid);
  kiln_pack_cstr(&b.p.pk, "block");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, block);
  kiln_pack_cstr(&b.p.pk, "args");
  msgpack_pack_array(&b.p.pk, (uint32_t)(ntensors + nscalars));
  for (int i = 0; i < ntensors; i++) {
    msgpack_pack_map(&b.p.pk, 1);
    kiln_pack_kv_u64(&b.p.pk, "tensor", tensors[i]);
  }
  for (int i = 0; i < nscalars; i++) msgpack_pack_int64(&b.p.pk, scalars[i]);
  if (extra_fields) {
    kiln_pack_kv_u64(&b.p.pk, "number", 3);
    kiln_pack_kv_u64(&b.p.pk, "repeat", 4);
  }
  client_send(c, msgid, method, &b.buf);
  pb_end(&b);
}

Test(compile, cpu_vadd_compiles_caches_and_runs) {
  client_t c;
  client_connect_tcp(&c, &d);
  char *ir = vadd_ir("cpu run");
  char mod[65], mod2[65];
  cr_assert_not(compile_ok(&c, ir, "cpu", mod), "first compile claims to be cached");
  const msgpack_object *ks = kiln_params_find(c.msg.result, "kernels");
  cr_assert_eq(ks->via.array.size, 1);
  cr_assert(kiln_obj_str_eq(kiln_params_find(&ks->via.array.ptr[0], "name"), "vadd"));
  const msgpack_object *args = kiln_params_find(&ks->via.array.ptr[0], "args");
  cr_assert_eq(args->via.array.size, 4);
  cr_assert(kiln_obj_str_eq(kiln_params_find(&args->via.array.ptr[0], "type"), "ptr"));
  cr_assert(kiln_obj_str_eq(kiln_params_find(&args->via.array.ptr[3], "type"), "int32"));
  cr_assert(compile_ok(&c, ir, "cpu:0", mod2), "second compile was not a cache hit");
  cr_assert_str_eq(mod, mod2, "a device id and its arch must give the same build");

  enum { N = 1000 };
  float a[N], b[N];
  for (int i = 0; i < N; i++) {
    a[i] = (float)i;
    b[i] = 0.25f * (float)i;
  }
  uint64_t t[3] = {upload(&c, a, N), upload(&c, b, N), upload(&c, b, N)};
  int64_t n = N;
  send_launch(&c, 3, "launch", mod, "vadd", NULL, (N + 63) / 64, 64, t, 3, &n, 1, 0);
  cr_assert(client_recv(&c, 30000));
  char txt[512];
  cr_assert_eq(code_of(&c), 0, "launch failed: %s", text_of(&c, txt, sizeof(txt)));
  cr_assert(kiln_params_find(c.msg.result, "elapsed"));
  client_send_id(&c, 4, "download", t[2]);
  cr_assert(client_recv(&c, 10000));
  /* The bin payload sits at any offset of the message: copy it out to read floats. */
  static float out[N];
  memcpy(out, kiln_params_find(c.msg.result, "data")->via.bin.ptr, sizeof(out));
  for (int i = 0; i < N; i++) cr_assert_eq(out[i], a[i] + b[i], "c[%d] = %f", i, out[i]);

  send_launch(&c, 5, "time", mod, "vadd", "cpu:0", (N + 63) / 64, 64, t, 3, &n, 1, 2);
  cr_assert(client_recv(&c, 30000));
  cr_assert_eq(code_of(&c), 0, "time failed: %s", text_of(&c, txt, sizeof(txt)));
  const msgpack_object *res = kiln_params_find(c.msg.result, "results");
  cr_assert_eq(res->via.array.size, 4);
  for (int i = 0; i < 4; i++) cr_assert_gt(res->via.array.ptr[i].via.f64, 0.0);
  double mn = kiln_params_find(c.msg.result, "min")->via.f64;
  double md = kiln_params_find(c.msg.result, "median")->via.f64;
  cr_assert(mn > 0 && mn <= md);
  free(ir);
  client_close(&c);
}

/* The same path on whatever device KILN_TEST_DEVICE names (default cpu:0): compile for the
 * device id, upload to it, launch, time, download. On a GPU host this is the end-to-end
 * check of kilnd + device worker + that backend. */
Test(compile, device_vadd_runs) {
  const char *dev = getenv("KILN_TEST_DEVICE");
  if (!dev || !dev[0]) dev = "cpu:0";
  client_t c;
  client_connect_tcp(&c, &d);
  char *ir = vadd_ir(dev);
  char mod[65], txt[512];
  compile_ok(&c, ir, dev, mod);
  enum { N = 100003 };
  static float a[N], b[N];
  for (int i = 0; i < N; i++) {
    a[i] = (float)i;
    b[i] = 2.0f - (float)i * 0.5f;
  }
  upload_device = dev;
  uint64_t t[3] = {upload(&c, a, N), upload(&c, b, N), upload(&c, b, N)};
  upload_device = NULL;
  int64_t n = N;
  send_launch(&c, 3, "launch", mod, "vadd", dev, (N + 255) / 256, 256, t, 3, &n, 1, 0);
  cr_assert(client_recv(&c, 60000));
  cr_assert_eq(code_of(&c), 0, "launch on %s failed: %s", dev, text_of(&c, txt, sizeof(txt)));
  client_send_id(&c, 4, "download", t[2]);
  cr_assert(client_recv(&c, 10000));
  static float out[N];
  memcpy(out, kiln_params_find(c.msg.result, "data")->via.bin.ptr, sizeof(out));
  for (int i = 0; i < N; i++) cr_assert_eq(out[i], a[i] + b[i], "c[%d] = %f on %s", i, out[i], dev);
  send_launch(&c, 5, "time", mod, "vadd", dev, (N + 255) / 256, 256, t, 3, &n, 1, 2);
  cr_assert(client_recv(&c, 30000));
  cr_assert_eq(code_of(&c), 0, "time on %s failed: %s", dev, text_of(&c, txt, sizeof(txt)));
  double mn = kiln_params_find(c.msg.result, "min")->via.f64;
  cr_assert_gt(mn, 0.0);
  cr_log_info("%s: vadd of %d floats, min %.2f us", dev, N, mn * 1e6);
  free(ir);
  client_close(&c);
}

Test(compile, source_kinds) {
  client_t c;
  client_connect_tcp(&c, &d);
  char *ir = vadd_ir("source");
  char mod[65];
  compile_ok(&c, ir, "gfx942", mod);
  const char *kinds[] = {"llvm", "asm", "binary"};
  for (int i = 0; i < 3; i++) {
    source_of(&c, 10 + (uint32_t)i, mod, kinds[i]);
    cr_assert_eq(code_of(&c), 0);
  }
  /* the last reply: the HSACO, an ELF */
  cr_assert_eq(c.msg.result->type, MSGPACK_OBJECT_BIN);
  cr_assert(memcmp(c.msg.result->via.bin.ptr, "\x7f" "ELF", 4) == 0);
  free(ir);
  client_close(&c);
}

Test(compile, ptx_for_sm90) {
  client_t c;
  client_connect_tcp(&c, &d);
  char *ir = vadd_ir("ptx");
  char mod[65];
  compile_ok(&c, ir, "sm_90", mod);
  source_of(&c, 2, mod, "asm");
  char ptx[256];
  snprintf(ptx, sizeof(ptx), "%.*s", (int)c.msg.result->via.str.size, c.msg.result->via.str.ptr);
  cr_assert(strstr(ptx, ".target sm_90") || c.msg.result->via.str.size > 200);
  cr_assert(memmem(c.msg.result->via.str.ptr, c.msg.result->via.str.size, ".target sm_90", 13));
  free(ir);
  client_close(&c);
}

/* kilnd keys a build by the kind the compiler will see: one sniffer (protocol/payload.h).
 * A PTX file whose comment says "define " was llvm to kilnd's old sniffer and ptx to the
 * compiler's, so `auto` and "ptx" made two modules of one build. */
Test(compile, auto_and_the_named_format_give_one_module) {
  client_t c;
  client_connect_tcp(&c, &d);
  char *ir = vadd_ir("sniff");
  char mod[65];
  compile_ok(&c, ir, "sm_90", mod);
  source_of(&c, 2, mod, "binary");
  cr_assert_eq(c.msg.result->type, MSGPACK_OBJECT_BIN);
  static const char head[] = "// define nothing here: this is PTX\n";
  size_t n = sizeof(head) - 1 + c.msg.result->via.bin.size;
  char *ptx = malloc(n);
  memcpy(ptx, head, sizeof(head) - 1);
  memcpy(ptx + sizeof(head) - 1, c.msg.result->via.bin.ptr, c.msg.result->via.bin.size);
  char ids[2][65];
  for (int named = 0; named < 2; named++) {
    pbuild_t b;
    pb_begin(&b, named ? 3 : 2);
    kiln_pack_cstr(&b.p.pk, "ir");
    msgpack_pack_bin(&b.p.pk, n);
    msgpack_pack_bin_body(&b.p.pk, ptx, n);
    kiln_pack_kv_str(&b.p.pk, "target", "sm_90");
    if (named) kiln_pack_kv_str(&b.p.pk, "format", "ptx");
    client_send(&c, 3, "compile", &b.buf);
    pb_end(&b);
    cr_assert(client_recv(&c, 60000));
    char t[256];
    cr_assert_eq(code_of(&c), 0, "%s", text_of(&c, t, sizeof t));
    const msgpack_object *m = kiln_params_find(c.msg.result, "module");
    snprintf(ids[named], 65, "%.*s", (int)m->via.str.size, m->via.str.ptr);
    cr_assert_eq(kiln_params_find(c.msg.result, "cached")->via.boolean, named == 1,
                 "the second spelling of the build is a cache hit");
  }
  cr_assert_str_eq(ids[0], ids[1]);
  free(ptx);
  free(ir);
  client_close(&c);
}

Test(compile, errors_are_typed_and_not_cached) {
  client_t c;
  client_connect_tcp(&c, &d);
  char t[1024];
  send_compile(&c, 1, "define void @k( {\n", "cpu");
  cr_assert(client_recv(&c, 30000));
  cr_assert_eq(code_of(&c), 7, "got %lu: %s", (unsigned long)code_of(&c), text_of(&c, t, sizeof(t)));
  cr_assert(strstr(text_of(&c, t, sizeof(t)), "1:"), "no line:column in '%s'", t);
  send_compile(&c, 2, "\x01\x02garbage", "cpu");
  cr_assert(client_recv(&c, 30000));
  cr_assert_eq(code_of(&c), 7);
  send_compile(&c, 3, "define void @k() { ret void }", "gfx9999");
  cr_assert(client_recv(&c, 30000));
  cr_assert_eq(code_of(&c), 1, "unknown target: %s", text_of(&c, t, sizeof(t)));
  client_send(&c, 4, "stats", NULL);
  cr_assert(client_recv(&c, 5000));
  const msgpack_object *comp = kiln_params_find(c.msg.result, "compile");
  cr_assert_eq(kiln_params_find(comp, "cache_hits")->via.u64, 0);
  client_close(&c);
}

Test(compile, launch_argument_errors) {
  client_t c;
  client_connect_tcp(&c, &d);
  char *ir = vadd_ir("launch errors");
  char mod[65], gmod[65], t[512];
  compile_ok(&c, ir, "cpu", mod);
  compile_ok(&c, ir, "gfx90a", gmod);
  float v[4] = {0};
  uint64_t id = upload(&c, v, 4);
  uint64_t ts[3] = {id, id, id};
  int64_t n = 4;
  send_launch(&c, 1, "launch", mod, "vadd", NULL, 1, 4, ts, 2, &n, 1, 0); /* 3 args */
  cr_assert(client_recv(&c, 10000));
  cr_assert_eq(code_of(&c), 1);
  cr_assert(strstr(text_of(&c, t, sizeof(t)), "takes 4"), "%s", t);
  send_launch(&c, 2, "launch", mod, "nope", NULL, 1, 4, ts, 3, &n, 1, 0);
  cr_assert(client_recv(&c, 10000));
  cr_assert_eq(code_of(&c), 5);
  send_launch(&c, 3, "launch", gmod, "vadd", NULL, 1, 4, ts, 3, &n, 1, 0);
  cr_assert(client_recv(&c, 10000));
  cr_assert_eq(code_of(&c), 1);
  cr_assert(strstr(text_of(&c, t, sizeof(t)), "gfx90a"), "%s", t);
  uint64_t bad[3] = {id, id, 12345};
  send_launch(&c, 4, "launch", mod, "vadd", NULL, 1, 4, bad, 3, &n, 1, 0);
  cr_assert(client_recv(&c, 10000));
  cr_assert_eq(code_of(&c), 5);
  send_launch(&c, 5, "launch", "00", "vadd", NULL, 1, 4, ts, 3, &n, 1, 0);
  cr_assert(client_recv(&c, 10000));
  cr_assert_eq(code_of(&c), 1);
  int64_t big = 1ll << 40;
  send_launch(&c, 6, "launch", mod, "vadd", NULL, 1, 4, ts, 3, &big, 1, 0);
  cr_assert(client_recv(&c, 10000));
  cr_assert_eq(code_of(&c), 1, "out-of-range int32: %s", text_of(&c, t, sizeof(t)));
  free(ir);
  client_close(&c);
}

Test(compile, batch_partial_failure_and_single_flight) {
  client_t c;
  client_connect_tcp(&c, &d);
  char *a = vadd_ir("batch a"), *b = vadd_ir("batch b");
  const char *items[4] = {a, "not ir at all", b, a};
  pbuild_t p;
  pb_begin(&p, 1);
  kiln_pack_cstr(&p.p.pk, "items");
  msgpack_pack_array(&p.p.pk, 4);
  for (int i = 0; i < 4; i++) {
    msgpack_pack_map(&p.p.pk, 2);
    kiln_pack_kv_str(&p.p.pk, "ir", items[i]);
    kiln_pack_kv_str(&p.p.pk, "target", "cpu");
  }
  client_send(&c, 1, "compile_batch", &p.buf);
  pb_end(&p);
  cr_assert(client_recv(&c, 60000));
  cr_assert_eq(code_of(&c), 0);
  const msgpack_object *r = c.msg.result;
  cr_assert_eq(r->via.array.size, 4);
  cr_assert(kiln_params_find(&r->via.array.ptr[0], "module"));
  cr_assert(kiln_params_find(&r->via.array.ptr[1], "error"));
  cr_assert(kiln_params_find(&r->via.array.ptr[2], "module"));
  cr_assert(kiln_params_find(&r->via.array.ptr[3], "module"));
  cr_assert(kiln_obj_str_eq(kiln_params_find(&r->via.array.ptr[0], "module"),
                            "") == false);
  cr_assert_eq(c.progress_seen, 4, "one progress notification per item before the reply");
  client_send(&c, 2, "stats", NULL);
  cr_assert(client_recv(&c, 5000));
  const msgpack_object *comp = kiln_params_find(c.msg.result, "compile");
  /* items 0 and 3 are one build: it compiled once and the other joined it */
  cr_assert_eq(kiln_params_find(comp, "compiles")->via.u64, 2);
  cr_assert_eq(kiln_params_find(comp, "single_flight_joins")->via.u64, 1);
  free(a);
  free(b);
  client_close(&c);
}

static pid_t child_named(const char *prefix) { return daemon_child_named(d.pid, prefix); }

/* On KILN_TEST_DEVICE (default cpu:0): a faulting kernel ends that tenant's device worker
 * with E_DEVICE_FAULT, and the next launch on the same device works. */
Test(compile, device_fault_kills_only_the_worker) {
  const char *dev = getenv("KILN_TEST_DEVICE");
  if (!dev || !dev[0]) dev = "cpu:0";
  client_t c;
  client_connect_tcp(&c, &d);
  char mod[65], vmod[65], t[512];
  compile_ok(&c, fault_ir, dev, mod);
  float v[4] = {1, 2, 3, 4};
  upload_device = dev;
  uint64_t id = upload(&c, v, 4);
  send_launch(&c, 3, "launch", mod, "boom", dev, 1, 1, &id, 1, NULL, 0, 0);
  cr_assert(client_recv(&c, 60000));
  cr_assert_eq(code_of(&c), 10, "expected E_DEVICE_FAULT on %s: %s", dev, text_of(&c, t, sizeof(t)));
  cr_log_info("%s fault: %s", dev, text_of(&c, t, sizeof(t)));
  char *ir = vadd_ir("after fault");
  compile_ok(&c, ir, dev, vmod);
  uint64_t ts[3] = {upload(&c, v, 4), upload(&c, v, 4), upload(&c, v, 4)};
  upload_device = NULL;
  int64_t n = 4;
  send_launch(&c, 4, "launch", vmod, "vadd", dev, 1, 4, ts, 3, &n, 1, 0);
  cr_assert(client_recv(&c, 60000));
  cr_assert_eq(code_of(&c), 0, "launch after the fault failed: %s", text_of(&c, t, sizeof(t)));
  free(ir);
  client_close(&c);
}

Test(compile, killed_compile_worker_fails_one_job) {
  client_t c;
  client_connect_tcp(&c, &d);
  char mod[65];
  char *warm = vadd_ir("warm both workers");
  compile_ok(&c, warm, "cpu", mod); /* workers exist now */
  pid_t w = child_named("kiln-compile-wo");
  cr_assert(w > 0);
  client_send(&c, 4, "stats", NULL); /* stats names the compile workers' pids */
  cr_assert(client_recv(&c, 5000));
  const msgpack_object *pids = kiln_params_find(kiln_params_find(c.msg.result, "compile"), "pids");
  bool listed = false;
  for (uint32_t i = 0; pids && i < pids->via.array.size; i++) listed |= pids->via.array.ptr[i].via.u64 == (uint64_t)w;
  cr_assert(listed, "compile worker %d is not in stats.compile.pids", (int)w);
  /* Stop every compile worker, queue one job, kill them: the job fails alone. */
  pid_t kids[32];
  int nk = children_of(d.pid, kids, 32);
  for (int i = 0; i < nk; i++) kill(kids[i], SIGSTOP);
  char *ir = vadd_ir("doomed");
  send_compile(&c, 5, ir, "cpu");
  client_t probe;
  client_connect_tcp(&probe, &d);
  client_send(&probe, 1, "ping", NULL);
  cr_assert(client_recv(&probe, 5000));
  client_close(&probe);
  for (int i = 0; i < nk; i++) {
    char path[64], comm[64] = "";
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)kids[i]);
    FILE *f = fopen(path, "r");
    bool compiler = f && fgets(comm, sizeof(comm), f) && strncmp(comm, "kiln-compile-wo", 15) == 0;
    if (f) fclose(f);
    kill(kids[i], compiler ? SIGKILL : SIGCONT);
  }
  cr_assert(client_recv(&c, 30000));
  cr_assert_eq(code_of(&c), 8, "expected E_COMPILER_CRASHED, got %lu", (unsigned long)code_of(&c));
  /* the same build succeeds on the replacement worker */
  cr_assert_not(compile_ok(&c, ir, "cpu", mod));
  free(ir);
  free(warm);
  client_close(&c);
}

/* Two compile workers, so that two jobs are enough to occupy them on any machine. */
static void start_two_workers(void) {
  /* Criterion runs the suite's init before this one: replace its daemon. */
  if (d.pid) daemon_stop(&d);
  const char *extra[] = {"--compile-workers", "2", NULL};
  daemon_start(&d, extra);
}

Test(compile, cancel_drops_queued_items, .init = start_two_workers) {
  client_t c;
  client_connect_tcp(&c, &d);
  char mod[65];
  char *warm = vadd_ir("warm for cancel");
  compile_ok(&c, warm, "cpu", mod);
  pid_t kids[32];
  int nk = children_of(d.pid, kids, 32);
  for (int i = 0; i < nk; i++) kill(kids[i], SIGSTOP);
  /* Two jobs occupy the (stopped) workers; the batch waits in the queue. */
  char *o1 = vadd_ir("occupy 1"), *o2 = vadd_ir("occupy 2");
  send_compile(&c, 10, o1, "cpu");
  send_compile(&c, 11, o2, "cpu");
  char *items[3] = {vadd_ir("c1"), vadd_ir("c2"), vadd_ir("c3")};
  pbuild_t p;
  pb_begin(&p, 1);
  kiln_pack_cstr(&p.p.pk, "items");
  msgpack_pack_array(&p.p.pk, 3);
  for (int i = 0; i < 3; i++) {
    msgpack_pack_map(&p.p.pk, 1);
    kiln_pack_kv_str(&p.p.pk, "ir", items[i]);
  }
  client_send(&c, 12, "compile_batch", &p.buf);
  pb_end(&p);
  pb_begin(&p, 1);
  kiln_pack_kv_u64(&p.p.pk, "msgid", 12);
  client_send(&c, 13, "cancel", &p.buf);
  pb_end(&p);
  bool got_cancel = false, got_batch = false;
  int replies = 0;
  while (replies < 2 && client_recv(&c, 10000)) {
    replies++;
    if (c.msg.msgid == 13) {
      got_cancel = true;
      cr_assert_eq(kiln_params_find(c.msg.result, "cancelled")->via.u64, 3);
    } else if (c.msg.msgid == 12) {
      got_batch = true;
      for (int i = 0; i < 3; i++) {
        const msgpack_object *e = kiln_params_find(&c.msg.result->via.array.ptr[i], "error");
        cr_assert(e && e->via.array.ptr[0].via.u64 == 12);
      }
    }
  }
  cr_assert(got_cancel && got_batch);
  for (int i = 0; i < nk; i++) kill(kids[i], SIGCONT);
  for (int i = 0; i < 2; i++) cr_assert(client_recv(&c, 30000));
  for (int i = 0; i < 3; i++) free(items[i]);
  free(o1);
  free(o2);
  free(warm);
  client_close(&c);
}

Test(compile_restart, disk_cache_survives_restart) {
  char dir[] = "/tmp/kiln-cache-test-XXXXXX";
  cr_assert(mkdtemp(dir));
  char arg[128];
  snprintf(arg, sizeof(arg), "%s", dir);
  const char *extra[] = {"--cache-dir", arg, NULL};
  daemon_start(&d, extra);
  client_t c;
  client_connect_tcp(&c, &d);
  char *ir = vadd_ir("restart");
  char m1[65], m2[65];
  cr_assert_not(compile_ok(&c, ir, "cpu", m1));
  client_close(&c);
  daemon_stop(&d); /* waits for the cache to flush its writes */
  daemon_start(&d, extra);
  client_connect_tcp(&c, &d);
  cr_assert(compile_ok(&c, ir, "cpu", m2), "not a cache hit after the restart");
  cr_assert_str_eq(m1, m2);
  client_send(&c, 9, "stats", NULL);
  cr_assert(client_recv(&c, 5000));
  cr_assert_eq(kiln_params_find(kiln_params_find(c.msg.result, "cache"), "hits_disk")->via.u64, 1);
  client_close(&c);
  daemon_stop(&d);
  free(ir);
  char cmd[200];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  cr_assert(system(cmd) == 0);
}

Test(compile_timeout, compile_past_its_limit_times_out) {
  const char *extra[] = {"--compile-timeout", "1", "--compile-workers", "1", NULL};
  daemon_start(&d, extra);
  client_t c;
  client_connect_tcp(&c, &d);
  char mod[65];
  char *warm = vadd_ir("warm timeout");
  compile_ok(&c, warm, "cpu", mod);
  pid_t w = child_named("kiln-compile-wo");
  cr_assert(w > 0);
  client_send(&c, 4, "stats", NULL); /* stats names the compile workers' pids */
  cr_assert(client_recv(&c, 5000));
  const msgpack_object *pids = kiln_params_find(kiln_params_find(c.msg.result, "compile"), "pids");
  bool listed = false;
  for (uint32_t i = 0; pids && i < pids->via.array.size; i++) listed |= pids->via.array.ptr[i].via.u64 == (uint64_t)w;
  cr_assert(listed, "compile worker %d is not in stats.compile.pids", (int)w);
  kill(w, SIGSTOP); /* a compile that never ends, as far as kilnd can tell */
  char *ir = vadd_ir("never");
  send_compile(&c, 2, ir, "cpu");
  cr_assert(client_recv(&c, 30000));
  cr_assert_eq(code_of(&c), 11, "expected E_TIMEOUT, got %lu", (unsigned long)code_of(&c));
  cr_assert_not(compile_ok(&c, ir, "cpu", mod), "the timed-out build must not be cached");
  free(ir);
  free(warm);
  client_close(&c);
  daemon_stop(&d);
}

/* A kernel that stores to one address `n` times per work-item. */
static const char spin_ir[] =
    "define void @spin(ptr %out, i64 %n) section \"kiln.kernel\" {\n"
    "entry:\n"
    "  br label %loop\n"
    "loop:\n"
    "  %i = phi i64 [0, %entry], [%j, %loop]\n"
    "  store volatile i64 %i, ptr %out\n"
    "  %j = add i64 %i, 1\n"
    "  %c = icmp ult i64 %j, %n\n"
    "  br i1 %c, label %loop, label %done\n"
    "done:\n"
    "  ret void\n"
    "}\n";

static void send_spin(client_t *c, uint32_t msgid, const char *mod, uint64_t out, uint32_t groups, int64_t n,
                      uint64_t timeout_ms) {
  pbuild_t b;
  pb_begin(&b, 6);
  kiln_pack_kv_str(&b.p.pk, "module", mod);
  kiln_pack_kv_str(&b.p.pk, "kernel", "spin");
  kiln_pack_cstr(&b.p.pk, "grid");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, groups);
  kiln_pack_cstr(&b.p.pk, "block");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, 1);
  kiln_pack_cstr(&b.p.pk, "args");
  msgpack_pack_array(&b.p.pk, 2);
  msgpack_pack_map(&b.p.pk, 1);
  kiln_pack_kv_u64(&b.p.pk, "tensor", out);
  msgpack_pack_int64(&b.p.pk, n);
  kiln_pack_kv_u64(&b.p.pk, "timeout_ms", timeout_ms);
  client_send(c, msgid, "launch", &b.buf);
  pb_end(&b);
}

/* After a launch past its deadline, the tenant's next launch runs on a fresh worker. */
static void next_launch_works(client_t *c) {
  char vmod[65], t[512];
  char *ir = vadd_ir("after a timeout");
  compile_ok(c, ir, "cpu", vmod);
  float v[4] = {1, 2, 3, 4};
  uint64_t ts[3] = {upload(c, v, 4), upload(c, v, 4), upload(c, v, 4)};
  int64_t n = 4;
  send_launch(c, 9, "launch", vmod, "vadd", NULL, 1, 4, ts, 3, &n, 1, 0);
  cr_assert(client_recv(c, 60000));
  cr_assert_eq(code_of(c), 0, "launch after the timeout failed: %s", text_of(c, t, sizeof(t)));
  free(ir);
}

/* Many work-groups past the deadline: the cpu device starts no new group after it, the worker
 * answers E_TIMEOUT and exits, and kilnd sends the next launch to a new worker. */
Test(compile, launch_past_its_deadline_times_out) {
  client_t c;
  client_connect_tcp(&c, &d);
  char mod[65], t[512];
  compile_ok(&c, spin_ir, "cpu", mod);
  float z[2] = {0, 0};
  uint64_t out = upload(&c, z, 2);
  send_spin(&c, 3, mod, out, 100000, 2000000, 100);
  cr_assert(client_recv(&c, 60000));
  cr_assert_eq(code_of(&c), 11, "expected E_TIMEOUT: %s", text_of(&c, t, sizeof(t)));
  cr_assert(strstr(text_of(&c, t, sizeof(t)), "deadline"), "%s", t);
  next_launch_works(&c);
  client_close(&c);
}

/* One work-group that never ends cannot be stopped inside the worker: kilnd's watchdog ends
 * the silent worker (deadline + 5 s) and the launch gets E_TIMEOUT. */
Test(compile, endless_kernel_is_ended_by_the_watchdog) {
  client_t c;
  client_connect_tcp(&c, &d);
  char mod[65], t[512];
  compile_ok(&c, spin_ir, "cpu", mod);
  float z[2] = {0, 0};
  uint64_t out = upload(&c, z, 2);
  send_spin(&c, 3, mod, out, 1, INT64_MAX, 200);
  cr_assert(client_recv(&c, 60000));
  cr_assert_eq(code_of(&c), 11, "expected E_TIMEOUT: %s", text_of(&c, t, sizeof(t)));
  cr_log_info("watchdog: %s", text_of(&c, t, sizeof(t)));
  next_launch_works(&c);
  client_close(&c);
}

/* A different build of the compiler (here: the same compile worker with one byte appended,
 * which changes the hash of its executable in the identity) misses the entries an earlier
 * build wrote; the earlier build still finds them. */
Test(compile_restart, another_compiler_build_misses_old_entries) {
  char dir[] = "/tmp/kiln-cache-test-XXXXXX", wdir[] = "/tmp/kiln-workers-XXXXXX";
  cr_assert(mkdtemp(dir) && mkdtemp(wdir));
  char build[512], cmd[2048];
  snprintf(build, sizeof(build), "%s", getenv("KILND"));
  *strrchr(build, '/') = 0;  /* <build>/server */
  *strrchr(build, '/') = 0;  /* <build> */
  snprintf(cmd, sizeof(cmd),
           "cp '%s/compiler/worker/kiln-compile-worker' '%s/device/worker/kiln-device-worker' '%s/' && "
           "printf '\\0' >> '%s/kiln-compile-worker'",
           build, build, wdir, wdir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  const char *old_build[] = {"--cache-dir", dir, NULL};
  const char *new_build[] = {"--cache-dir", dir, "--worker-dir", wdir, NULL};
  char *ir = vadd_ir("another build");
  char m1[65], m2[65], m3[65];
  client_t c;
  daemon_start(&d, old_build);
  client_connect_tcp(&c, &d);
  cr_assert_not(compile_ok(&c, ir, "cpu", m1));
  client_close(&c);
  daemon_stop(&d);
  daemon_start(&d, new_build);
  client_connect_tcp(&c, &d);
  cr_assert_not(compile_ok(&c, ir, "cpu", m2), "another compiler build was served the old build's artifact");
  cr_assert_str_neq(m1, m2, "the module id (the cache key) must differ between builds");
  client_close(&c);
  daemon_stop(&d);
  daemon_start(&d, old_build);
  client_connect_tcp(&c, &d);
  cr_assert(compile_ok(&c, ir, "cpu", m3), "the first build lost its entry");
  cr_assert_str_eq(m1, m3);
  client_close(&c);
  daemon_stop(&d);
  free(ir);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir, wdir);
  cr_assert(system(cmd) == 0);
}
