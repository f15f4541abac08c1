/* Each layer of base/sandbox.h on its own, in a forked child that confines itself the way a
 * cpu device worker does with the other layers left out (KILN_SANDBOX_OMIT_*): Landlock
 * alone keeps files, other processes' signals and TCP out; seccomp alone stops the first
 * forbidden call and reports it on the channel; the rlimits alone stop a fork. And the
 * seccomp handler's answer to glibc's dlopen of /proc/self/fd/N: a duplicate, read-only. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/sandbox.h"

TestSuite(layers, .timeout = 60);

/* Runs body in a child confined with cfg (channel: one end of a socketpair, the other end in
 * *out_channel), as nobody when the test runs as root and drop is set (else as the test's
 * uid: as root, only the layer under test can refuse). Returns the child's wait status.
 * body returns the exit code: 0 = as expected, anything else names the failed expectation. */
static int in_child(kiln_sandbox_config_t cfg, bool drop, int (*body)(void *), void *arg,
                    int *out_channel) {
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    close(sv[0]);
    cfg.channel_fd = sv[1];
    if (geteuid() == 0 && drop) {
      struct passwd *pw = getpwnam("nobody");
      cfg.uid = pw ? pw->pw_uid : 65534;
      cfg.gid = pw ? pw->pw_gid : 65534;
    }
    kiln_sandbox_report_t rep;
    kiln_status_t st = kiln_sandbox_enter(&cfg, &rep);
    if (st) {
      fprintf(stderr, "kiln_sandbox_enter: %s\n", kiln_status_message(st));
      _exit(100);
    }
    _exit(body(arg));
  }
  close(sv[1]);
  int ws;
  cr_assert_eq(waitpid(pid, &ws, 0), pid);
  if (out_channel) *out_channel = sv[0];
  else close(sv[0]);
  return ws;
}

static void expect_exit(int ws, int code, const char *what) {
  cr_assert(WIFEXITED(ws), "%s: the child ended by signal %d", what, WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
  cr_assert_eq(WEXITSTATUS(ws), code, "%s: the child exited %d", what, WEXITSTATUS(ws));
}

/* --- Landlock ------------------------------------------------------------------------------ */

typedef struct landlock_probe {
  int abi;
  int port;
  pid_t parent;
} landlock_probe_t;

static int landlock_body(void *arg) {
  const landlock_probe_t *p = arg;
  int fd = open("/etc/hostname", O_RDONLY);
  if (fd >= 0 || errno != EACCES) return 1; /* a world-readable file */
  if (mkdir("/tmp/kiln-landlock-probe", 0700) == 0 || errno != EACCES) return 2;
  if (p->abi >= 6 && (kill(p->parent, 0) == 0 || errno != EPERM)) return 3;
  if (p->abi >= 4) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) == 0 || errno != EACCES) return 4;
  }
  return 0;
}

Test(layers, landlock_alone_keeps_files_signals_and_tcp_out) {
  int abi = kiln_sandbox_landlock_abi();
  if (abi == 0) cr_skip_test("this kernel has no Landlock (the layer is absent, docs/operations.md)");
  /* A listener the child must not reach. */
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  cr_assert(bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 1) == 0);
  getsockname(l, (struct sockaddr *)&a, &len);
  landlock_probe_t p = {.abi = abi, .port = ntohs(a.sin_port), .parent = getpid()};
  kiln_sandbox_config_t cfg = {.profile = KILN_SANDBOX_CPU_DEVICE, .omit = KILN_SANDBOX_OMIT_SECCOMP};
  expect_exit(in_child(cfg, false, landlock_body, &p, NULL), 0, "landlock alone");
  cr_log_info("Landlock ABI %d: open, mkdir%s%s refused", abi, abi >= 6 ? ", kill of the parent" : "",
              abi >= 4 ? ", TCP connect" : "");
  close(l);
}

/* --- seccomp ------------------------------------------------------------------------------- */

static int open_body(void *arg) {
  (void)arg;
  int fd = open("/etc/hostname", O_RDONLY);
  return fd >= 0 ? 1 : 2; /* never reached: the call stops the process */
}

/* The child's report: [2, "sandbox_violation", [{"syscall": N, "arch": A}]]. */
static void read_report(int channel, uint64_t *nr, uint64_t *arch) {
  char buf[256];
  ssize_t n = read(channel, buf, sizeof(buf));
  cr_assert(n > 0, "the child reported nothing");
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  cr_assert_eq(msgpack_unpack_next(&u, buf, (size_t)n, &off), MSGPACK_UNPACK_SUCCESS);
  const msgpack_object *o = &u.data;
  cr_assert(o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 3);
  cr_assert_eq(o->via.array.ptr[0].via.u64, 2);
  const msgpack_object *m = &o->via.array.ptr[1];
  cr_assert(m->type == MSGPACK_OBJECT_STR && m->via.str.size == strlen(KILN_SANDBOX_VIOLATION) &&
            memcmp(m->via.str.ptr, KILN_SANDBOX_VIOLATION, m->via.str.size) == 0);
  const msgpack_object *map = &o->via.array.ptr[2].via.array.ptr[0];
  cr_assert(map->type == MSGPACK_OBJECT_MAP && map->via.map.size == 2);
  *nr = map->via.map.ptr[0].val.via.u64;
  *arch = map->via.map.ptr[1].val.via.u64;
  msgpack_unpacked_destroy(&u);
}

Test(layers, seccomp_alone_stops_the_call_and_reports_it) {
  kiln_sandbox_config_t cfg = {.profile = KILN_SANDBOX_CPU_DEVICE, .omit = KILN_SANDBOX_OMIT_LANDLOCK};
  int channel;
  int ws = in_child(cfg, false, open_body, NULL, &channel);
  expect_exit(ws, KILN_SANDBOX_EXIT_STATUS, "seccomp alone");
  uint64_t nr, arch;
  read_report(channel, &nr, &arch);
  close(channel);
  char name[96];
  kiln_sandbox_syscall_name((uint32_t)arch, (int)nr, name, sizeof(name));
  cr_assert(strcmp(name, "openat") == 0 || strcmp(name, "open") == 0, "reported %s", name);
  cr_log_info("open of a world-readable file: stopped, reported as %llu (%s)", (unsigned long long)nr, name);
}

/* --- rlimits ------------------------------------------------------------------------------- */

static int fork_body(void *arg) {
  (void)arg;
  pid_t p = fork();
  if (p == 0) _exit(0);
  return p < 0 && errno == EAGAIN ? 0 : 1;
}

Test(layers, rlimits_alone_stop_a_fork) {
  kiln_sandbox_config_t cfg = {.profile = KILN_SANDBOX_CPU_DEVICE,
                               .omit = KILN_SANDBOX_OMIT_SECCOMP | KILN_SANDBOX_OMIT_LANDLOCK};
  expect_exit(in_child(cfg, true, fork_body, NULL, NULL), 0, "RLIMIT_NPROC 0");
}

/* --- the handler's answers for dlopen ---------------------------------------------------- */

static int memfd_body(void *arg) {
  (void)arg;
  /* What device/cpu/module.c does: a memfd, written, then opened by path for dlopen. */
  int fd = memfd_create("probe", MFD_CLOEXEC);
  if (fd < 0 || write(fd, "kiln", 4) != 4) return 1;
  char path[64], buf[8] = "";
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  int dup = open(path, O_RDONLY | O_CLOEXEC);
  if (dup < 0 || dup == fd) return 2;
  if (read(dup, buf, sizeof(buf)) != 4 || memcmp(buf, "kiln", 4) != 0) return 3; /* from the start */
  struct stat st;
  if (fstat(dup, &st) != 0 || st.st_size != 4) return 4;
  close(dup);
  /* Writing through the path would be more than the descriptor grants: a violation. */
  open(path, O_RDWR);
  return 5;
}

Test(layers, dlopen_path_of_a_held_descriptor_is_a_duplicate_and_read_only) {
  kiln_sandbox_config_t cfg = {.profile = KILN_SANDBOX_CPU_DEVICE};
  int channel;
  int ws = in_child(cfg, true, memfd_body, NULL, &channel);
  expect_exit(ws, KILN_SANDBOX_EXIT_STATUS, "read-only reopen answered, read-write reopen stopped");
  uint64_t nr, arch;
  read_report(channel, &nr, &arch);
  close(channel);
  char name[96];
  kiln_sandbox_syscall_name((uint32_t)arch, (int)nr, name, sizeof(name));
  cr_assert(strcmp(name, "openat") == 0 || strcmp(name, "open") == 0, "reported %s", name);
}
