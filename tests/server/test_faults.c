/* Fault containment (issue 5, item 4) against the real kilnd and its real workers: a compile
 * worker or device worker SIGKILLed mid-job, clients that vanish mid-upload or with launches
 * in flight, a full disk under the cache, and kilnd itself SIGKILLed during cache writes.
 * Each test checks that the affected requests get typed errors, that the next request works,
 * and that kilnd holds no more fds, shared-memory files or child processes than before (and
 * about the same RSS).
 *
 * The full disk is a tmpfs of 512 KiB mounted under the cache (root in a container may mount
 * here; where it may not, that test says so and is skipped). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/server/harness.h"

enum {
  E_NOT_FOUND = 5,
  E_COMPILER_CRASHED = 8,
  E_DEVICE_FAULT = 10,
};

static daemon_t d;

static void stop(void) {
  if (d.pid) daemon_stop(&d);
}
static void start_one_compile_worker(void) {
  const char *extra[] = {"--compile-workers", "1", NULL};
  daemon_start(&d, extra);
}
static void start_default(void) { daemon_start(&d, NULL); }

TestSuite(faults, .fini = stop, .timeout = 300);

/* --- calls ------------------------------------------------------------------------------- */

static const char *err_text(const client_t *c) {
  static char buf[512];
  return text_of(c, buf, sizeof(buf));
}

/* Sends a request and waits for its reply (the connection has nothing else in flight). */
#define call client_call
#define field obj_path

static uint64_t stat_u64(client_t *c, const char *path) {
  call(c, "stats", NULL);
  const msgpack_object *o = field(c->msg.result, path);
  cr_assert(o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER, "stats has no %s", path);
  return o->via.u64;
}

/* A kernel in the portable dialect; `salt` makes the payload (and the module) unique. With
 * `work` extra lines of arithmetic it takes LLVM a while to compile. */
static char *kernel_ir(const char *salt, int work) {
  size_t cap = 4096 + (size_t)work * 96;
  char *s = malloc(cap), *p = s;
  p += sprintf(p,
               "; %s\n"
               "define void @spin(ptr %%p, i32 %%n) section \"kiln.kernel\" {\n"
               "entry:\n"
               "  %%x0 = load float, ptr %%p\n",
               salt);
  for (int i = 1; i <= work; i++)
    p += sprintf(p, "  %%x%d = fmul float %%x%d, %d.0\n  store volatile float %%x%d, ptr %%p\n", i, i - 1,
                 i % 7 + 1, i);
  sprintf(p,
          "  br label %%loop\n"
          "loop:\n"
          "  %%i = phi i32 [0, %%entry], [%%i1, %%loop]\n"
          "  %%v = load volatile i32, ptr %%p\n"
          "  %%v1 = add i32 %%v, 1\n"
          "  store volatile i32 %%v1, ptr %%p\n"
          "  %%i1 = add i32 %%i, 1\n"
          "  %%more = icmp ult i32 %%i1, %%n\n"
          "  br i1 %%more, label %%loop, label %%done\n"
          "done:\n"
          "  ret void\n"
          "}\n");
  return s;
}

static void send_compile(client_t *c, uint32_t msgid, const char *ir) {
  pbuild_t b;
  pb_begin(&b, 2);
  kiln_pack_cstr(&b.p.pk, "ir");
  msgpack_pack_str(&b.p.pk, strlen(ir));
  msgpack_pack_str_body(&b.p.pk, ir, strlen(ir));
  kiln_pack_kv_str(&b.p.pk, "target", "cpu");
  client_send(c, msgid, "compile", &b.buf);
  pb_end(&b);
}

/* The module id of the reply in c (64 hex + NUL); whether it was a cache hit. */
static bool module_of(const client_t *c, char out[65]) {
  cr_assert_eq(code_of(c), 0, "compile failed: %s", err_text(c));
  const msgpack_object *m = kiln_params_find(c->msg.result, "module");
  cr_assert(m && m->via.str.size == 64);
  memcpy(out, m->via.str.ptr, 64);
  out[64] = 0;
  return kiln_params_find(c->msg.result, "cached")->via.boolean;
}

static bool compile(client_t *c, const char *ir, char out[65]) {
  send_compile(c, 1, ir);
  cr_assert(client_recv(c, 120000), "no compile reply");
  return module_of(c, out);
}

/* The params of an upload of `bytes` zero bytes (int32 elements). */
static void upload_params(pbuild_t *b, size_t bytes) {
  pb_begin(b, 1);
  kiln_pack_cstr(&b->p.pk, "tensor");
  msgpack_pack_map(&b->p.pk, 3);
  kiln_pack_kv_str(&b->p.pk, "dtype", "int32");
  kiln_pack_cstr(&b->p.pk, "shape");
  msgpack_pack_array(&b->p.pk, 1);
  msgpack_pack_uint64(&b->p.pk, bytes / 4);
  kiln_pack_cstr(&b->p.pk, "data");
  msgpack_pack_bin(&b->p.pk, (uint32_t)bytes);
  char *zero = calloc(1, bytes ? bytes : 1);
  msgpack_pack_bin_body(&b->p.pk, zero, bytes);
  free(zero);
}

/* Uploads `bytes` bytes and returns the tensor id. */
static uint64_t upload(client_t *c, size_t bytes) {
  pbuild_t b;
  upload_params(&b, bytes);
  call(c, "upload", &b);
  cr_assert_eq(code_of(c), 0, "upload failed: %s", err_text(c));
  return kiln_params_find(c->msg.result, "id")->via.u64;
}

static void free_tensor(client_t *c, uint64_t id) {
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_kv_u64(&b.p.pk, "id", id);
  call(c, "free", &b);
  cr_assert_eq(code_of(c), 0, "free failed: %s", err_text(c));
}

/* launch spin(tensor, n) on cpu:0 without waiting for the reply. */
static void send_spin(client_t *c, uint32_t msgid, const char *module, uint64_t tensor, uint32_t n) {
  pbuild_t b;
  pb_begin(&b, 6);
  kiln_pack_kv_str(&b.p.pk, "module", module);
  kiln_pack_kv_str(&b.p.pk, "kernel", "spin");
  kiln_pack_kv_str(&b.p.pk, "device", "cpu:0");
  kiln_pack_cstr(&b.p.pk, "grid");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, 1);
  kiln_pack_cstr(&b.p.pk, "block");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, 1);
  kiln_pack_cstr(&b.p.pk, "args");
  msgpack_pack_array(&b.p.pk, 2);
  msgpack_pack_map(&b.p.pk, 1);
  kiln_pack_kv_u64(&b.p.pk, "tensor", tensor);
  msgpack_pack_uint32(&b.p.pk, n);
  client_send(c, msgid, "launch", &b.buf);
  pb_end(&b);
}

static void spin_ok(client_t *c, const char *module, uint64_t tensor) {
  send_spin(c, 7, module, tensor, 1000);
  cr_assert(client_recv(c, 60000), "no launch reply");
  cr_assert_eq(code_of(c), 0, "launch failed: %s", err_text(c));
}

/* --- what kilnd holds ---------------------------------------------------------------------- */

typedef struct usage {
  int fds, shm, children;
  int cache_files; /* open files of the cache's store: a write in progress */
  long rss_kib;
} usage_t;

static usage_t usage_of(pid_t pid) {
  usage_t u = {.fds = count_fds(pid), .rss_kib = rss_kib(pid)};
  char dir[64];
  snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
  DIR *dp = opendir(dir);
  struct dirent *e;
  while (dp && (e = readdir(dp))) {
    char path[400], target[256];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = 0;
    u.shm += strstr(target, "/memfd:") != NULL || strncmp(target, "/dev/shm/", 9) == 0;
    u.cache_files += strstr(target, "/objects") != NULL; /* the store, its folders and temp files */
  }
  if (dp) closedir(dp);
  pid_t kids[64];
  u.children = children_of(pid, kids, 64);
  return u;
}

/* Waits (round trips on `probe`, 10 ms apart) until kilnd has let go of everything else:
 * `conns` connections left (the probe's and those the test keeps), no launch or compile running. */
static void settle(client_t *probe, uint64_t conns) {
  const msgpack_object *r = NULL;
  for (int i = 0; i < 1000; i++) {
    call(probe, "stats", NULL);
    r = probe->msg.result;
    bool idle = field(r, "connections")->via.u64 == conns && field(r, "compile.workers_busy")->via.u64 == 0;
    const msgpack_object *devs = field(r, "devices");
    for (uint32_t k = 0; idle && k < devs->via.array.size; k++)
      idle = kiln_params_find(&devs->via.array.ptr[k], "launches")->via.u64 == 0;
    if (idle) return;
    usleep(10000);
  }
  const msgpack_object *devs = field(r, "devices");
  cr_assert_fail("kilnd did not become idle: %lu connections, %lu compiles, %lu launches on %s",
                 (unsigned long)field(r, "connections")->via.u64,
                 (unsigned long)field(r, "compile.workers_busy")->via.u64,
                 (unsigned long)kiln_params_find(&devs->via.array.ptr[0], "launches")->via.u64,
                 devs->via.array.size ? "the first device" : "no device");
}

/* What kilnd holds once it is idle and its cache has finished writing (a write holds a file
 * open for a moment after the reply; one that never closes fails here). Fds and shared memory
 * are the least of a few samples: kilnd opens some for a moment (starting a worker, say). */
static usage_t quiet_usage(client_t *probe, uint64_t conns) {
  settle(probe, conns);
  usage_t u = usage_of(d.pid);
  for (int i = 0; i < 500 && u.cache_files; i++) {
    usleep(10000);
    u = usage_of(d.pid);
  }
  cr_assert_eq(u.cache_files, 0, "kilnd keeps %d cache files open", u.cache_files);
  for (int i = 0; i < 10; i++) {
    usleep(10000);
    usage_t v = usage_of(d.pid);
    u.fds = v.fds < u.fds ? v.fds : u.fds;
    u.shm = v.shm < u.shm ? v.shm : u.shm;
  }
  return u;
}

/* `closed`: connections open at `before` that the test has closed since (one fd each). What
 * kilnd holds must come back within a few seconds; a leak never does. */
static void expect_no_leaks(const usage_t *before, int closed, client_t *probe, const char *what) {
  usage_t now;
  for (int i = 0; i < 50; i++) {
    now = quiet_usage(probe, 1);
    if (now.fds <= before->fds - closed && now.shm <= before->shm && now.children == before->children) break;
    usleep(100000);
  }
  cr_log_info("%s: fds %d -> %d, shm %d -> %d, children %d -> %d, rss %ld -> %ld KiB", what, before->fds,
              now.fds, before->shm, now.shm, before->children, now.children, before->rss_kib, now.rss_kib);
  cr_assert_leq(now.fds, before->fds - closed, "%s: kilnd's fds went from %d to %d (%d connections closed)",
                what, before->fds, now.fds, closed);
  cr_assert_leq(now.shm, before->shm, "%s: kilnd's shared-memory fds went from %d to %d", what, before->shm,
                now.shm);
  cr_assert_eq(now.children, before->children, "%s: kilnd's child processes went from %d to %d", what,
               before->children, now.children);
  cr_assert_leq(now.rss_kib, before->rss_kib + 32768, "%s: kilnd's RSS grew from %ld to %ld KiB", what,
                before->rss_kib, now.rss_kib);
}

/* --- compile worker ---------------------------------------------------------------------- */

Test(faults, compile_worker_killed_mid_job, .init = start_one_compile_worker) {
  client_t c, probe;
  client_connect_tcp(&c, &d);
  client_connect_tcp(&probe, &d);
  char mod[65];
  char *warm = kernel_ir("warm", 0);
  compile(&c, warm, mod);
  usage_t before = quiet_usage(&probe, 2);
  /* A compile that takes LLVM a while; kill the worker once stats says it is busy. A compile
   * that finishes before the kill is tried again with another payload. */
  bool crashed = false;
  char *ir = NULL;
  for (int attempt = 0; attempt < 5 && !crashed; attempt++) {
    char salt[32];
    snprintf(salt, sizeof(salt), "doomed %d", attempt);
    free(ir);
    ir = kernel_ir(salt, 6000);
    send_compile(&c, 20, ir);
    for (int i = 0; i < 5000 && stat_u64(&probe, "compile.workers_busy") == 0; i++) usleep(1000);
    pid_t w = daemon_child_named(d.pid, "kiln-compile-wo");
    cr_assert(w > 0, "no compile worker process");
    kill(w, SIGKILL);
    cr_assert(client_recv(&c, 60000), "no reply to the compile whose worker died");
    crashed = code_of(&c) == E_COMPILER_CRASHED;
    if (!crashed) cr_assert_eq(code_of(&c), 0, "unexpected error: %s", err_text(&c));
    else cr_log_info("compile worker killed: %s", err_text(&c));
  }
  cr_assert(crashed, "the compile always finished before the kill");
  cr_assert_geq(stat_u64(&probe, "compile.crashes"), 1);
  /* The same build now succeeds on the replacement worker, and was not cached as failed. */
  cr_assert_not(compile(&c, ir, mod), "a crashed build must not come from the cache");
  client_close(&c);
  expect_no_leaks(&before, 1, &probe, "compile worker killed");
  free(ir);
  free(warm);
  client_close(&probe);
}

/* --- device worker ----------------------------------------------------------------------- */

static const msgpack_object *cpu_worker(client_t *probe) {
  call(probe, "stats", NULL);
  const msgpack_object *ws = field(probe->msg.result, "workers");
  for (uint32_t i = 0; ws && i < ws->via.array.size; i++)
    if (kiln_obj_str_eq(kiln_params_find(&ws->via.array.ptr[i], "device"), "cpu:0")) return &ws->via.array.ptr[i];
  return NULL;
}

/* The cpu:0 worker's stats entry once a launch has reached it (borrowed from probe->msg). */
static const msgpack_object *wait_inflight(client_t *probe) {
  const msgpack_object *w = NULL;
  for (int i = 0; i < 5000 && (!(w = cpu_worker(probe)) || kiln_params_find(w, "inflight")->via.u64 < 1); i++)
    usleep(1000);
  cr_assert(w && kiln_params_find(w, "inflight")->via.u64 >= 1, "no launch reached the device worker");
  return w;
}

Test(faults, device_worker_killed_with_launches_in_flight, .init = start_default) {
  client_t c, probe;
  client_connect_tcp(&c, &d);
  client_connect_tcp(&probe, &d);
  char mod[65];
  char *ir = kernel_ir("spin", 0);
  compile(&c, ir, mod);
  uint64_t t = upload(&c, 64);
  spin_ok(&c, mod, t);
  usage_t before = quiet_usage(&probe, 2);
  enum { N = 16 };
  for (uint32_t i = 0; i < N; i++) send_spin(&c, 100 + i, mod, t, 200u * 1000 * 1000);
  const msgpack_object *w = wait_inflight(&probe);
  pid_t pid = (pid_t)kiln_params_find(w, "pid")->via.u64;
  kill(pid, SIGKILL);
  bool seen[N] = {false};
  int faults = 0;
  for (int i = 0; i < N; i++) {
    cr_assert(client_recv(&c, 60000), "launch reply %d of %d missing", i, N);
    uint32_t k = c.msg.msgid - 100;
    cr_assert(k < N && !seen[k], "reply to msgid %u twice or unknown", c.msg.msgid);
    seen[k] = true;
    /* Running or queued in the worker: E_DEVICE_FAULT. Queued in kilnd: the tensor died
     * with the worker, E_NOT_FOUND saying so. Sent after the restart: it runs. */
    if (code_of(&c) == E_NOT_FOUND) cr_assert(strstr(err_text(&c), "lost"), "launch %u: %s", k, err_text(&c));
    else if (code_of(&c)) cr_assert_eq(code_of(&c), E_DEVICE_FAULT, "launch %u: %s", k, err_text(&c));
    faults += code_of(&c) == E_DEVICE_FAULT;
  }
  cr_log_info("%d of %d launches ended with E_DEVICE_FAULT", faults, N);
  cr_assert_geq(faults, 1);
  /* The worker comes back for new work; the restart is counted. */
  uint64_t t2 = upload(&c, 64);
  spin_ok(&c, mod, t2);
  w = cpu_worker(&probe);
  cr_assert_eq(kiln_params_find(w, "restarts")->via.u64, 1);
  client_close(&c);
  expect_no_leaks(&before, 1, &probe, "device worker killed");
  free(ir);
  client_close(&probe);
}

/* --- clients that vanish ----------------------------------------------------------------- */

Test(faults, client_gone_mid_upload, .init = start_default) {
  client_t c, probe;
  client_connect_tcp(&probe, &d);
  enum { BYTES = 8 << 20 };
  /* The same size once, whole, so that kilnd's buffer pool holds what it needs. */
  free_tensor(&probe, upload(&probe, BYTES));
  usage_t before = quiet_usage(&probe, 1);
  pbuild_t b;
  upload_params(&b, BYTES);
  kiln_buf_t msg;
  kiln_buf_init(&msg);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &msg);
  kiln_rpc_pack_request_head(&pk.pk, 1, "upload");
  msgpack_pack_array(&pk.pk, 1);
  cr_assert(kiln_buf_append(&msg, b.buf.data, b.buf.len) == KILN_OK);
  pb_end(&b);
  /* Half a frame, then gone; five times, so that one lost buffer each would show. */
  for (int i = 0; i < 5; i++) {
    client_connect_tcp(&c, &d);
    client_send_raw(&c, msg.data, msg.len / 2);
    client_close(&c);
    settle(&probe, 1); /* one at a time: the pool need not hold two buffers */
  }
  kiln_buf_deinit(&msg);
  expect_no_leaks(&before, 0, &probe, "clients gone mid-upload");
  /* A whole upload of that size still works, in the memory the others gave back. */
  free_tensor(&probe, upload(&probe, BYTES));
  expect_no_leaks(&before, 0, &probe, "upload after clients gone mid-upload");
  client_close(&probe);
}

Test(faults, client_gone_with_launches_in_flight, .init = start_default) {
  client_t c, probe;
  client_connect_tcp(&probe, &d);
  char mod[65];
  char *ir = kernel_ir("spin", 0);
  compile(&probe, ir, mod);
  uint64_t t = upload(&probe, 64);
  spin_ok(&probe, mod, t);
  usage_t before = quiet_usage(&probe, 1);
  client_connect_tcp(&c, &d);
  for (uint32_t i = 0; i < 16; i++) send_spin(&c, 100 + i, mod, t, 20u * 1000 * 1000);
  wait_inflight(&probe);
  client_close(&c);
  expect_no_leaks(&before, 0, &probe, "client gone with launches in flight");
  /* The tenant's launch count came back down, and launches run. */
  call(&probe, "stats", NULL);
  const msgpack_object *ten = field(probe.msg.result, "tenants");
  cr_assert_eq(kiln_params_find(&ten->via.array.ptr[0], "launches")->via.u64, 0);
  spin_ok(&probe, mod, t);
  free(ir);
  client_close(&probe);
}

/* --- the cache's disk -------------------------------------------------------------------- */

/* Names under DIR/objects/XX/: entries (64 hex digits) and anything else (temp files). */
static void scan_cache(const char *cache, int *entries, int *others) {
  *entries = *others = 0;
  char objs[512];
  snprintf(objs, sizeof(objs), "%s/objects", cache);
  DIR *top = opendir(objs);
  struct dirent *e;
  while (top && (e = readdir(top))) {
    if (e->d_name[0] == '.') continue;
    char sub[800];
    snprintf(sub, sizeof(sub), "%s/%s", objs, e->d_name);
    DIR *dp = opendir(sub);
    struct dirent *f;
    while (dp && (f = readdir(dp))) {
      if (f->d_name[0] == '.') continue;
      bool entry = strlen(f->d_name) == 64 && strspn(f->d_name, "0123456789abcdef") == 64;
      *entries += entry;
      *others += !entry;
      if (!entry) cr_log_info("cache holds %s/%s", sub, f->d_name);
    }
    if (dp) closedir(dp);
  }
  if (top) closedir(top);
}

static bool entry_on_disk(const char *cache, const char *hex) {
  char path[600];
  snprintf(path, sizeof(path), "%s/objects/%.2s/%s", cache, hex, hex);
  return access(path, F_OK) == 0;
}

static void wait_stat(client_t *c, const char *path, uint64_t at_least) {
  for (int i = 0; i < 1000 && stat_u64(c, path) < at_least; i++) usleep(10000);
  cr_assert_geq(stat_u64(c, path), at_least, "stats %s stayed below %lu", path, (unsigned long)at_least);
}

static void rm_rf(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  cr_assert(system(cmd) == 0);
}

Test(faults, full_disk_under_the_cache) {
  char root[] = "/tmp/kiln-fulldisk-XXXXXX";
  cr_assert(mkdtemp(root));
  if (mount("kiln-test", root, "tmpfs", 0, "size=512k") != 0) {
    rmdir(root);
    cr_skip_test("cannot mount a small tmpfs here (%s): no way to fill the cache's disk", strerror(errno));
  }
  char cache[128], arg[140];
  snprintf(cache, sizeof(cache), "%s/cache", root);
  snprintf(arg, sizeof(arg), "%s", cache);
  const char *extra[] = {"--cache-dir", arg, NULL};
  daemon_start(&d, extra);
  client_t c;
  client_connect_tcp(&c, &d);
  char a[65], b[65], b2[65], cc[65];
  char *ira = kernel_ir("disk a", 0), *irb = kernel_ir("disk b", 0), *irc = kernel_ir("disk c", 0);
  compile(&c, ira, a);
  wait_stat(&c, "cache.entries_disk", 1);
  /* Fill the disk. */
  char filler[200];
  snprintf(filler, sizeof(filler), "%s/filler", root);
  int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  cr_assert(fd >= 0);
  static char block[4096];
  while (write(fd, block, sizeof(block)) > 0) {}
  cr_assert_eq(errno, ENOSPC);
  close(fd);
  /* The compile still answers; its entry is not written, and nothing partial stays. */
  uint64_t werr = stat_u64(&c, "cache.write_errors");
  cr_assert_not(compile(&c, irb, b));
  wait_stat(&c, "cache.write_errors", werr + 1);
  int entries, others;
  scan_cache(cache, &entries, &others);
  cr_assert_eq(others, 0, "a temp file or partial entry stayed in the full cache");
  cr_assert_eq(entries, 1);
  cr_assert(entry_on_disk(cache, a) && !entry_on_disk(cache, b));
  cr_assert(compile(&c, irb, b2), "the build is still served from memory");
  cr_assert_str_eq(b, b2);
  /* Space again: the next entry is written. */
  cr_assert(unlink(filler) == 0);
  compile(&c, irc, cc);
  wait_stat(&c, "cache.entries_disk", 2);
  client_close(&c);
  cr_assert_eq(daemon_stop(&d), 0);
  /* Restarted on the same disk: what is there is served (verified), the rest rebuilt. */
  daemon_start(&d, extra);
  client_connect_tcp(&c, &d);
  char m[65];
  cr_assert(compile(&c, ira, m) && !strcmp(m, a), "entry a not served from disk");
  cr_assert(compile(&c, irc, m) && !strcmp(m, cc), "entry c not served from disk");
  cr_assert_not(compile(&c, irb, m), "entry b was never written; it cannot be a hit");
  cr_assert_str_eq(m, b);
  cr_assert_eq(stat_u64(&c, "cache.corrupt"), 0);
  cr_assert_eq(stat_u64(&c, "cache.hits_disk"), 2);
  client_close(&c);
  daemon_stop(&d);
  cr_assert(umount(root) == 0);
  rmdir(root);
  free(ira);
  free(irb);
  free(irc);
}

/* The code of module `hex` (source kind binary), malloc'd. */
static uint8_t *binary_of(client_t *c, const char *hex, size_t *len) {
  pbuild_t b;
  pb_begin(&b, 2);
  kiln_pack_kv_str(&b.p.pk, "module", hex);
  kiln_pack_kv_str(&b.p.pk, "kind", "binary");
  call(c, "source", &b);
  cr_assert_eq(code_of(c), 0, "source failed: %s", err_text(c));
  *len = c->msg.result->via.bin.size;
  uint8_t *out = malloc(*len);
  memcpy(out, c->msg.result->via.bin.ptr, *len);
  return out;
}

static bool gone(pid_t pid) {
  char path[64], state = 0, line[256];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return true;
  if (fgets(line, sizeof(line), f)) {
    char *p = strrchr(line, ')');
    if (p && p[1]) state = p[2];
  }
  fclose(f);
  return state == 'Z' || state == 'X';
}

Test(faults, kilnd_killed_during_cache_writes) {
  char cache[] = "/tmp/kiln-killed-cache-XXXXXX";
  cr_assert(mkdtemp(cache));
  const char *extra[] = {"--cache-dir", cache, NULL};
  daemon_start(&d, extra);
  client_t c;
  client_connect_tcp(&c, &d);
  enum { N = 48 };
  char *irs[N];
  for (int i = 0; i < N; i++) {
    char salt[32];
    snprintf(salt, sizeof(salt), "killed %d", i);
    irs[i] = kernel_ir(salt, 40);
    send_compile(&c, 100 + (uint32_t)i, irs[i]);
  }
  /* Half the builds are done (and being written) when kilnd dies. */
  for (int i = 0; i < N / 2; i++) cr_assert(client_recv(&c, 120000));
  pid_t kids[64];
  int nk = children_of(d.pid, kids, 64);
  kill(d.pid, SIGKILL);
  int status;
  cr_assert_eq(waitpid(d.pid, &status, 0), d.pid);
  d.pid = 0;
  client_close(&c);
  /* Its workers notice and exit on their own. */
  for (int i = 0; i < nk; i++) {
    int waited = 0;
    while (!gone(kids[i]) && waited++ < 1000) usleep(10000);
    cr_assert(gone(kids[i]), "worker %d outlived kilnd", (int)kids[i]);
  }
  /* Restarted on the same directory: no temp file is left once it is up. */
  daemon_start(&d, extra);
  int entries, others;
  scan_cache(cache, &entries, &others);
  cr_log_info("after the kill: %d whole entries on disk", entries);
  cr_assert_eq(others, 0, "temp files survived the restart");
  client_connect_tcp(&c, &d);
  char mods[N][65];
  int hits = 0;
  for (int i = 0; i < N; i++) hits += compile(&c, irs[i], mods[i]);
  cr_assert_eq(hits, entries, "%d entries on disk, %d served", entries, hits);
  cr_assert_eq(stat_u64(&c, "cache.corrupt"), 0);
  /* What the restarted daemon serves equals a fresh compile by a daemon with no cache. */
  daemon_t fresh;
  daemon_start(&fresh, NULL);
  client_t f;
  client_connect_tcp(&f, &fresh);
  for (int i = 0; i < N; i++) {
    char m[65];
    cr_assert_not(compile(&f, irs[i], m));
    cr_assert_str_eq(m, mods[i]);
    size_t n1, n2;
    uint8_t *b1 = binary_of(&c, mods[i], &n1), *b2 = binary_of(&f, m, &n2);
    cr_assert(n1 == n2 && memcmp(b1, b2, n1) == 0, "module %d differs from a fresh compile", i);
    free(b1);
    free(b2);
    free(irs[i]);
  }
  client_close(&f);
  daemon_stop(&fresh);
  client_close(&c);
  daemon_stop(&d);
  rm_rf(cache);
}
