/* A tenant's native code attacking the box (issue 11 §1), through the real kilnd and its
 * real, confined device workers. The attacks are prebuilt cpu shared objects
 * (tests/security/attacks.c.in, built here with the system cc) sent under
 * --allow-prebuilt-cpu: code the compiler never vetted, so only the worker's sandbox stands
 * between it and the box.
 *
 * Two tenants: alice attacks, bob minds his business. Every attack must end alice's worker
 * with E_DEVICE_FAULT naming the sandbox violation and its system call, with nothing read
 * (a kernel that got past its system call would return normally, the bytes in its output),
 * nothing killed (kilnd answers, bob's worker is the same process with the same tensor),
 * and alice's next launch working. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/security/common.h"

#define TOK_ALICE "alice-token-0123456789abcdef"
#define TOK_BOB "bob-token-0123456789abcdef"

static daemon_t d;
static char dir[64], tokens[128];

static void start(void) {
  snprintf(dir, sizeof(dir), "/tmp/kiln-attacks-XXXXXX");
  cr_assert(mkdtemp(dir));
  /* Readable by anyone, the worker's uid included: only the sandbox keeps it out. */
  chmod(dir, 0755);
  snprintf(tokens, sizeof(tokens), "%s/tokens", dir);
  write_text_file(tokens, TOK_ALICE " alice\n" TOK_BOB " bob\n");
  chmod(tokens, 0644);
  const char *extra[] = {"--tokens", tokens, "--allow-prebuilt-cpu", "--metrics", "tcp:127.0.0.1:0",
                         "--compile-workers", "1", NULL};
  daemon_start(&d, extra);
}

static void stop(void) {
  if (d.pid) daemon_stop(&d);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0) {}
}

TestSuite(attacks, .init = start, .fini = stop, .timeout = 240);

typedef struct tenant {
  client_t c;
  char module[65];
  uint64_t out; /* output tensor of alice's kernels */
} tenant_t;

static void hello(client_t *c, const char *token) {
  client_send_hello(c, 1, token);
  cr_assert(client_recv(c, 10000));
  cr_assert_eq(code_of(c), 0, "hello: %s", err_text(c));
}

static void alice_upload(tenant_t *a) {
  float zero[16] = {0};
  a->out = upload_f32(&a->c, zero, 16);
}

static void alice_start(tenant_t *a, bool ctor) {
  client_connect_tcp(&a->c, &d);
  hello(&a->c, TOK_ALICE);
  size_t len;
  uint8_t *so = build_attacks(dir, tokens, ctor, &len);
  cr_assert_eq(compile(&a->c, so, len, "cpu-so", a->module), 0, "compile: %s", err_text(&a->c));
  free(so);
  alice_upload(a);
}

/* launch `kernel`(out[, i32]) on cpu:0; returns the reply's code. */
static uint64_t launch(tenant_t *a, const char *module, const char *kernel, bool with_int, int32_t v) {
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
  msgpack_pack_uint32(&b.p.pk, 1);
  kiln_pack_cstr(&b.p.pk, "args");
  msgpack_pack_array(&b.p.pk, with_int ? 2 : 1);
  msgpack_pack_map(&b.p.pk, 1);
  kiln_pack_kv_u64(&b.p.pk, "tensor", a->out);
  if (with_int) msgpack_pack_int32(&b.p.pk, v);
  call(&a->c, "launch", &b);
  return code_of(&a->c);
}

/* Bob: a secret on cpu:0 in his own worker. */
typedef struct victim {
  client_t c;
  uint64_t secret;
  int pid;
} victim_t;

static const float secret_values[8] = {3.25f, -1, 7, 11, 13, 17, 19, 23};

static void bob_start(victim_t *b) {
  client_connect_tcp(&b->c, &d);
  hello(&b->c, TOK_BOB);
  b->secret = upload_f32(&b->c, secret_values, 8);
  b->pid = device_worker_pid(&b->c);
  cr_assert(b->pid > 0);
}

/* Bob noticed nothing: same worker process, same bytes. */
static void bob_unharmed(victim_t *b) {
  float got[8];
  download_f32(&b->c, b->secret, got, 8);
  cr_assert_eq(memcmp(got, secret_values, sizeof(got)), 0, "bob's tensor changed");
  cr_assert_eq(device_worker_pid(&b->c), b->pid, "bob's device worker was replaced");
  cr_assert_eq(kill(b->pid, 0), 0);
}

/* The attack's launch must end alice's worker with the violation named; then her next
 * launch of the harmless kernel works (on new tensors: the old ones died with the worker). */
static void expect_violation(tenant_t *a, const char *what, const char *const *names) {
  cr_assert_eq(code_of(&a->c), E_DEVICE_FAULT, "%s was answered %llu: %s (a success means it got "
               "past its system call)", what, (unsigned long long)code_of(&a->c), err_text(&a->c));
  const char *msg = err_text(&a->c);
  cr_assert(strstr(msg, "sandbox violation"), "%s: %s", what, msg);
  bool named = false;
  for (; *names; names++) {
    char want[96];
    snprintf(want, sizeof(want), "(%s", *names);
    named |= strstr(msg, want) != NULL;
  }
  cr_assert(named, "%s: the message does not name the expected system call: %s", what, msg);
  cr_log_info("%s -> %s", what, msg);
  call(&a->c, "ping", NULL);
  cr_assert_eq(code_of(&a->c), 0, "kilnd did not answer after %s", what);
  alice_upload(a);
  cr_assert_eq(launch(a, a->module, "ok", false, 0), 0, "the launch after %s failed: %s", what,
               err_text(&a->c));
  float got[16];
  download_f32(&a->c, a->out, got, 16);
  cr_assert_eq(got[0], 42.0f);
}

static void run_attack(const char *kernel, bool with_int, int32_t v, const char *const *names) {
  tenant_t a;
  victim_t b;
  bob_start(&b);
  alice_start(&a, false);
  cr_assert_eq(launch(&a, a.module, "ok", false, 0), 0, "%s", err_text(&a.c));
  int kilnd = d.pid;
  launch(&a, a.module, kernel, with_int, v);
  expect_violation(&a, kernel, names);
  cr_assert_eq(kill(kilnd, 0), 0, "kilnd is gone");
  bob_unharmed(&b);
  client_close(&a.c);
  client_close(&b.c);
}

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(attacks, open_of_etc_shadow) { run_attack("open_shadow", false, 0, NAMES("openat", "open")); }

Test(attacks, open_of_the_tokens_file) { run_attack("open_tokens", false, 0, NAMES("openat", "open")); }

Test(attacks, popen) { run_attack("popen_shadow", false, 0, NAMES("pipe2", "clone", "clone3", "vfork")); }

Test(attacks, raw_syscall_instruction) { run_attack("raw_syscall", false, 0, NAMES("openat")); }

Test(attacks, int80_of_the_i386_table) {
#if !defined(__x86_64__)
  cr_skip_test("int 0x80 is an x86-64 attack");
#endif
  run_attack("int80", false, 0, NAMES("open of the i386 table"));
}

Test(attacks, another_workers_proc_mem) {
  victim_t b;
  bob_start(&b);
  run_attack("proc_mem", true, b.pid, NAMES("openat", "open"));
  bob_unharmed(&b);
}

Test(attacks, process_vm_readv_of_another_worker) {
  victim_t b;
  bob_start(&b);
  run_attack("vm_readv", true, b.pid, NAMES("process_vm_readv"));
  bob_unharmed(&b);
}

Test(attacks, kill_of_the_parent) { run_attack("kill_parent", false, 0, NAMES("kill")); }

Test(attacks, ptrace_of_the_parent) { run_attack("ptrace_parent", false, 0, NAMES("ptrace")); }

Test(attacks, exec_of_a_shell) { run_attack("exec_shell", false, 0, NAMES("execve")); }

Test(attacks, connect_out) { run_attack("connect_out", true, d.port, NAMES("socket")); }

Test(attacks, sigsys_handler_stays_kilns) { run_attack("steal_sigsys", false, 0, NAMES("openat", "open")); }

Test(attacks, dumpable_cannot_be_turned_back_on) { run_attack("make_dumpable", false, 0, NAMES("prctl")); }

Test(attacks, sigio_pointed_at_the_parent) { run_attack("sigio_parent", false, 0, NAMES("fcntl")); }

/* Processes of this test's process group (kilnd and its workers are in it, and so would
 * anything a worker forked), by command name prefix. */
static int count_in_group(const char *prefix) {
  int n = 0;
  DIR *proc = opendir("/proc");
  for (struct dirent *e; (e = readdir(proc));) {
    int pid = atoi(e->d_name);
    if (pid <= 0) continue;
    char path[64], comm[64] = "";
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    int pgrp = 0;
    /* pid (comm) state ppid pgrp: comm has no spaces for kiln's processes */
    if (fscanf(f, "%*d (%63[^)]) %*c %*d %d", comm, &pgrp) != 2) pgrp = 0;
    fclose(f);
    if (pgrp == getpgrp() && strncmp(comm, prefix, strlen(prefix)) == 0) n++;
  }
  closedir(proc);
  return n;
}

Test(attacks, fork_bomb) {
  tenant_t a;
  alice_start(&a, false);
  cr_assert_eq(launch(&a, a.module, "ok", false, 0), 0, "%s", err_text(&a.c));
  /* The compile worker and alice's device worker. */
  int before = count_in_group("kiln-");
  launch(&a, a.module, "fork_bomb", false, 0);
  expect_violation(&a, "fork_bomb", NAMES("clone", "clone3", "fork", "vfork"));
  int after = count_in_group("kiln-");
  cr_log_info("kiln processes in the group: %d before the bomb, %d after", before, after);
  cr_assert_eq(after, before, "the bomb left %d processes where there were %d", after, before);
  client_close(&a.c);
}

/* The constructor runs at dlopen, in the confined worker, before any kernel is looked up. */
Test(attacks, constructor_at_dlopen) {
  victim_t b;
  bob_start(&b);
  tenant_t a;
  alice_start(&a, false);
  char ctor_module[65];
  size_t len;
  uint8_t *so = build_attacks(dir, tokens, true, &len);
  cr_assert_eq(compile(&a.c, so, len, "cpu-so", ctor_module), 0, "compile: %s", err_text(&a.c));
  free(so);
  launch(&a, ctor_module, "ok", false, 0);
  expect_violation(&a, "a constructor's open at dlopen", NAMES("openat", "open"));
  bob_unharmed(&b);
  cr_assert_geq(metric(&d, "kiln_worker_restarts_total{kind=\"device\",device=\"cpu:0\",tenant=\"alice\","
                           "reason=\"SIGSYS\"}"),
                1);
  client_close(&a.c);
  client_close(&b.c);
}
