/* The workers as the kernel sees them (issue 11 §1): both kinds confined once started
 * (seccomp filter, no_new_privs, not dumpable, rlimits, oom_score_adj, an empty removed
 * working directory, no descriptors beyond the channel), the compile worker still able to
 * build for every target inside its sandbox, whom workers run as when kilnd is root
 * (--worker-uids), RLIMIT_AS from a tenant's memory quota, and prebuilt cpu objects refused
 * without --allow-prebuilt-cpu. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/security/common.h"

static daemon_t d;
static char dir[64], tokens[128];

#define TOK_ALICE "alice-token-0123456789abcdef"
#define TOK_BOB "bob-token-0123456789abcdef"

static void stop(void) {
  if (d.pid) daemon_stop(&d);
  if (dir[0]) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) {}
  }
}

TestSuite(confined, .fini = stop, .timeout = 240);

static void make_dir(void) {
  snprintf(dir, sizeof(dir), "/tmp/kiln-confined-XXXXXX");
  cr_assert(mkdtemp(dir));
  chmod(dir, 0755);
  snprintf(tokens, sizeof(tokens), "%s/tokens", dir);
}

/* The value of "Key:" in /proc/PID/status (first field), or -1. */
static long status_field(int pid, const char *key) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", pid);
  FILE *f = fopen(path, "r");
  cr_assert(f, "no process %d", pid);
  long v = -1;
  size_t n = strlen(key);
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, key, n) == 0 && line[n] == ':') {
      v = strtol(line + n + 1, NULL, 0);
      break;
    }
  fclose(f);
  return v;
}

/* The soft limit of one /proc/PID/limits row ("Max open files"); -1 for unlimited. */
static long long limit_of(int pid, const char *row) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/limits", pid);
  FILE *f = fopen(path, "r");
  cr_assert(f);
  long long v = -2;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, row, strlen(row)) == 0) {
      const char *p = line + 26;
      v = strncmp(p, "unlimited", 9) == 0 ? -1 : strtoll(p, NULL, 10);
      break;
    }
  fclose(f);
  cr_assert_neq(v, -2, "no row '%s' in %s", row, path);
  return v;
}

static void check_confined(int pid, const char *what, long long nofile) {
  cr_assert_eq(status_field(pid, "Seccomp"), 2, "%s (pid %d) has no seccomp filter", what, pid);
  cr_assert_eq(status_field(pid, "NoNewPrivs"), 1, "%s can gain privileges", what);
  cr_assert_eq(limit_of(pid, "Max core file size"), 0, "%s may dump core", what);
  cr_assert_eq(limit_of(pid, "Max open files"), nofile, "%s", what);
  char path[64], buf[64] = "";
  snprintf(path, sizeof(path), "/proc/%d/oom_score_adj", pid);
  FILE *f = fopen(path, "r");
  cr_assert(f && fgets(buf, sizeof(buf), f));
  fclose(f);
  cr_assert_eq(atoi(buf), 1000, "%s: the OOM killer would not pick it before kilnd", what);
  if (geteuid() != 0) {
    /* Reading a non-dumpable process's cwd and fds needs CAP_SYS_PTRACE. */
    cr_log_info("%s: uid, cwd and descriptors are checked only as root", what);
    return;
  }
  cr_assert_neq(status_field(pid, "Uid"), 0, "%s runs as root", what);
  char cwd[512];
  snprintf(path, sizeof(path), "/proc/%d/cwd", pid);
  ssize_t n = readlink(path, cwd, sizeof(cwd) - 1);
  cr_assert(n > 0);
  cwd[n] = 0;
  cr_assert(strstr(cwd, "(deleted)"), "%s works in %s, not in an empty removed directory", what, cwd);
  snprintf(path, sizeof(path), "/proc/%d/fd", pid);
  DIR *dd = opendir(path);
  cr_assert(dd);
  /* 0-2 and the channel; besides them only a job's memfds, which a worker may still hold for
   * a moment after its reply (the compile worker closes an artifact's memfd once sent). */
  int fds = 0, high = -1;
  for (struct dirent *e; (e = readdir(dd));) {
    if (e->d_name[0] == '.') continue;
    char link[600], target[256];
    snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
    ssize_t tn = readlink(link, target, sizeof(target) - 1);
    target[tn > 0 ? tn : 0] = 0;
    if (atoi(e->d_name) > 3 && strncmp(target, "/memfd:", 7) == 0) continue;
    fds++;
    if (atoi(e->d_name) > high) high = atoi(e->d_name);
  }
  closedir(dd);
  cr_assert(fds == 4 && high == 3,
            "%s holds %d descriptors besides job memfds (highest %d): only 0-2 and the channel",
            what, fds, high);
}

Test(confined, both_workers_are_confined) {
  make_dir();
  const char *extra[] = {"--compile-workers", "1", NULL};
  daemon_start(&d, extra);
  client_t c;
  client_connect_tcp(&c, &d);
  float v[4] = {1, 2, 3, 4};
  upload_f32(&c, v, 4); /* the device worker confines itself before it answers */
  char mod[65], *ir = inc_ir("confined"); /* and the compile worker before it takes a job */
  cr_assert_eq(compile(&c, ir, strlen(ir), NULL, mod), 0, "%s", err_text(&c));
  free(ir);
  int dev = device_worker_pid(&c);
  call(&c, "stats", NULL);
  const msgpack_object *p = field(c.msg.result, "compile.pids");
  cr_assert(p && p->via.array.size == 1);
  int comp = (int)p->via.array.ptr[0].via.u64;
  cr_assert(dev > 0 && comp > 0);
  check_confined(dev, "the device worker", 4096);
  check_confined(comp, "the compile worker", 1024);
  cr_assert_eq(limit_of(dev, "Max processes"), 0, "the cpu device worker may make processes");
  client_close(&c);
}

/* The compile worker's sandbox still leaves it what builds need: device libraries (ocml for
 * AMD GPUs), libc and libm as link inputs of cpu modules, its private directory for lld. */
Test(confined, compile_worker_builds_every_target_inside_its_sandbox) {
  make_dir();
  const char *extra[] = {"--compile-workers", "1", NULL};
  daemon_start(&d, extra);
  client_t c;
  client_connect_tcp(&c, &d);
  call(&c, "stats", NULL);
  int comp = (int)field(c.msg.result, "compile.pids")->via.array.ptr[0].via.u64;
  static const char ir[] =
      "declare i32 @__kiln_local_id(i32)\n"
      "declare float @expf(float)\n"
      "define void @ex(ptr %a) section \"kiln.kernel\" {\n"
      "  %i = call i32 @__kiln_local_id(i32 0)\n"
      "  %p = getelementptr inbounds float, ptr %a, i32 %i\n"
      "  %v = load float, ptr %p\n"
      "  %e = call float @expf(float %v)\n"
      "  store float %e, ptr %p\n"
      "  ret void\n"
      "}\n";
  const char *targets[] = {"cpu", "gfx90a", "gfx1100", "sm_80"};
  for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
    send_compile(&c, 9, ir, strlen(ir), targets[i], NULL);
    cr_assert(client_recv(&c, 120000));
    cr_assert_eq(code_of(&c), 0, "%s: %s", targets[i], err_text(&c));
  }
  call(&c, "stats", NULL);
  cr_assert_eq((int)field(c.msg.result, "compile.pids")->via.array.ptr[0].via.u64, comp,
               "the compile worker was replaced while building");
  cr_assert_eq(stat_u64(&c, "compile.crashes"), 0);
  client_close(&c);
}

static const char so_refused[] = "--allow-prebuilt-cpu";

Test(confined, prebuilt_cpu_objects_need_the_operators_flag) {
  make_dir();
  write_text_file(tokens, "unused\n");
  daemon_start(&d, NULL);
  client_t c;
  client_connect_tcp(&c, &d);
  size_t len;
  uint8_t *so = build_attacks(dir, tokens, false, &len);
  char mod[65];
  const char *formats[] = {"cpu-so", NULL}; /* named, and sniffed from the ELF header */
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(compile(&c, so, len, formats[i], mod), E_PERMISSION, "format %s: %llu %s",
                 formats[i] ? formats[i] : "auto", (unsigned long long)code_of(&c), err_text(&c));
    cr_assert(strstr(err_text(&c), so_refused), "%s", err_text(&c));
  }
  cr_log_info("without the flag: %s", err_text(&c));
  free(so);
  client_close(&c);
}

/* Starts kilnd expecting it to refuse; returns its exit status and stderr in out. */
static int refused(const char *const *extra, char *out, size_t cap) {
  char cmd[2048];
  size_t n = (size_t)snprintf(cmd, sizeof(cmd), "'%s' --listen tcp:127.0.0.1:0 --cache-dir '%s/cache'",
                              getenv("KILND"), dir);
  for (; *extra; extra++) n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, " '%s'", *extra);
  snprintf(cmd + n, sizeof(cmd) - n, " 2>&1 </dev/null");
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  size_t got = fread(out, 1, cap - 1, p);
  out[got] = 0;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* A free range of n uids no user has (from first up). */
static unsigned free_uids(unsigned first, unsigned n) {
  for (unsigned u = first;; u += n) {
    bool clear = true;
    for (unsigned i = 0; i < n && clear; i++) clear = getpwuid(u + i) == NULL;
    if (clear) return u;
  }
}

Test(confined, worker_uids_give_each_tenant_its_own_uid) {
  make_dir();
  if (geteuid() != 0) {
    char out[2048];
    const char *extra[] = {"--worker-uids", "61000-61009", NULL};
    cr_assert_neq(refused(extra, out, sizeof(out)), 0);
    cr_assert(strstr(out, "needs kilnd to run as root"), "%s", out);
    cr_log_info("not root: --worker-uids refused: %s", out);
    return;
  }
  write_text_file(tokens, TOK_ALICE " alice\n" TOK_BOB " bob\n");
  unsigned first = free_uids(61000, 8);
  char range[32];
  snprintf(range, sizeof(range), "%u-%u", first, first + 7);
  const char *extra[] = {"--tokens", tokens, "--worker-uids", range, "--compile-workers", "1", NULL};
  daemon_start(&d, extra);
  client_t a, b;
  int uid[2];
  client_t *cs[2] = {&a, &b};
  const char *toks[2] = {TOK_ALICE, TOK_BOB};
  for (int i = 0; i < 2; i++) {
    client_connect_tcp(cs[i], &d);
    client_send_hello(cs[i], 1, toks[i]);
    cr_assert(client_recv(cs[i], 10000) && code_of(cs[i]) == 0);
    float v[2] = {1, 2};
    upload_f32(cs[i], v, 2);
    int pid = device_worker_pid(cs[i]);
    uid[i] = (int)status_field(pid, "Uid");
    cr_assert_eq(status_field(pid, "Gid"), uid[i]);
  }
  /* The compile worker drops to its uid when it confines itself, before its first job:
   * one compile makes sure it has (stats may otherwise catch it still starting, as root). */
  char mod[65], *ir = inc_ir("uids");
  cr_assert_eq(compile(&a, ir, strlen(ir), NULL, mod), 0, "%s", err_text(&a));
  free(ir);
  call(&a, "stats", NULL);
  int comp = (int)field(a.msg.result, "compile.pids")->via.array.ptr[0].via.u64;
  cr_assert_eq(status_field(comp, "Uid"), (long)first, "compile workers run as FIRST");
  cr_assert_neq(uid[0], uid[1], "two tenants share uid %d", uid[0]);
  for (int i = 0; i < 2; i++)
    cr_assert(uid[i] > (int)first && uid[i] <= (int)first + 7, "uid %d outside %s", uid[i], range);
  cr_log_info("--worker-uids %s: compile worker %u, alice %d, bob %d", range, first, uid[0], uid[1]);
  client_close(&a);
  client_close(&b);
}

Test(confined, worker_uids_that_cannot_work_are_refused_at_start) {
  make_dir();
  char out[2048];
  if (geteuid() != 0) {
    const char *extra[] = {"--worker-uids", "61000-61009", NULL};
    cr_assert_neq(refused(extra, out, sizeof(out)), 0);
    cr_assert(strstr(out, "root"), "%s", out);
    return;
  }
  struct passwd *pw = getpwnam("daemon");
  if (!pw) pw = getpwuid(1);
  cr_assert(pw, "no user with uid 1 to collide with");
  char range[32];
  snprintf(range, sizeof(range), "%u-%u", (unsigned)pw->pw_uid, (unsigned)pw->pw_uid + 3);
  const char *users[] = {"--worker-uids", range, NULL};
  cr_assert_neq(refused(users, out, sizeof(out)), 0, "a range with user '%s' was accepted", pw->pw_name);
  cr_assert(strstr(out, pw->pw_name), "%s", out);
  cr_log_info("range with a user: %s", out);
  write_text_file(tokens, TOK_ALICE " alice\n" TOK_BOB " bob\n");
  unsigned first = free_uids(62000, 2);
  snprintf(range, sizeof(range), "%u-%u", first, first + 1); /* compile + 2 tenants need 3 */
  const char *small[] = {"--tokens", tokens, "--worker-uids", range, NULL};
  cr_assert_neq(refused(small, out, sizeof(out)), 0);
  cr_assert(strstr(out, "need 3"), "%s", out);
  const char *zero[] = {"--worker-uids", "0-9", NULL};
  cr_assert_neq(refused(zero, out, sizeof(out)), 0);
}

/* RLIMIT_AS of a cpu device worker follows its tenant's memory bound (its quota, or cpu:0's
 * capacity without one): 64 GiB of address space maps for a tenant without quota on a
 * 64 GiB capacity, not for one with memory=64M. */
Test(confined, address_space_follows_the_memory_quota) {
  if (getenv("KILN_SANITIZED"))
    cr_skip_test("sanitizer build: AddressSanitizer's shadow memory needs an unlimited RLIMIT_AS");
  make_dir();
  write_text_file(tokens, TOK_ALICE " alice memory=64M\n" TOK_BOB " bob\n");
  const char *extra[] = {"--tokens", tokens, "--allow-prebuilt-cpu", "--compile-workers", "1",
                         "--cpu-memory", "64G", NULL};
  daemon_start(&d, extra);
  size_t len;
  uint8_t *so = build_attacks(dir, tokens, false, &len);
  const char *toks[2] = {TOK_ALICE, TOK_BOB};
  float want[2] = {-1.0f, 1.0f};
  for (int i = 0; i < 2; i++) {
    client_t c;
    client_connect_tcp(&c, &d);
    client_send_hello(&c, 1, toks[i]);
    cr_assert(client_recv(&c, 10000) && code_of(&c) == 0);
    char mod[65];
    cr_assert_eq(compile(&c, so, len, "cpu-so", mod), 0, "%s", err_text(&c));
    float zero[16] = {0};
    uint64_t out = upload_f32(&c, zero, 16);
    cr_assert_eq(launch1(&c, mod, "map_huge", out, 1), 0, "%s", err_text(&c));
    float got[16];
    download_f32(&c, out, got, 16);
    long long as = limit_of(device_worker_pid(&c), "Max address space");
    cr_log_info("%s: RLIMIT_AS %lld, 64 GiB mapping %s", i ? "no quota" : "memory=64M", as,
                got[0] > 0 ? "made" : "refused");
    cr_assert_eq(got[0], want[i], "tenant %d: 64 GiB of address space was %s (RLIMIT_AS %lld)", i,
                 got[0] > 0 ? "mapped" : "refused", as);
    client_close(&c);
  }
  free(so);
}
