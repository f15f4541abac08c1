/* Worker confinement (sandbox.h): uid, working directory, rlimits, prctl, Landlock, seccomp.
 *
 * The seccomp filter comes from libseccomp (Debian's libseccomp-dev). What the filter does
 * not allow traps (SECCOMP_RET_TRAP) rather than kills: the kernel then delivers SIGSYS to
 * the offending thread with the system call's number and architecture, which the handler
 * below sends to kilnd before it ends the process. A killed process would tell kilnd only
 * "SIGSYS". The handler also emulates the two calls the cpu device's module loading makes
 * that a descriptor-only sandbox cannot allow as such: glibc's dlopen of
 * /proc/self/fd/N (answered with a duplicate of N, which grants nothing the process does
 * not hold) and fstat spelled as newfstatat(fd, "", AT_EMPTY_PATH).
 *
 * Landlock restricts one thread at a time (landlock_restrict_self has no TSYNC on the
 * kernels of 2026's distributions), and the cpu device's pool threads exist before the
 * sandbox: every thread is sent a signal whose handler restricts it, the way glibc's
 * setxid broadcast works. */
#include "base/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/landlock.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

/* Landlock ABI additions newer than Debian 12's kernel headers (values are kernel ABI). */
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14) /* ABI 3 */
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#endif
#define LL_NET_BIND_TCP (1ULL << 0)           /* ABI 4 */
#define LL_NET_CONNECT_TCP (1ULL << 1)
#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#define LL_SCOPE_SIGNAL (1ULL << 1)

typedef struct ll_ruleset_attr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
} ll_ruleset_attr_t;

#define LL_READ_FILE LANDLOCK_ACCESS_FS_READ_FILE
#define LL_READ (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define LL_EXEC (LL_READ | LANDLOCK_ACCESS_FS_EXECUTE)
#define LL_FILE_RIGHTS                                                                       \
  (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE | \
   LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_IOCTL_DEV)

/* --- descriptors, uid, working directory, limits ------------------------------------------ */

void kiln_sandbox_close_inherited(int keep) {
  /* close_range(2) where the kernel has it (5.9+), else one close per descriptor. */
  if (keep > 3 && syscall(SYS_close_range, 3u, (unsigned)keep - 1, 0u) != 0)
    for (int fd = 3; fd < keep; fd++) close(fd);
  unsigned from = (unsigned)(keep >= 3 ? keep + 1 : 3);
  if (syscall(SYS_close_range, from, ~0u, 0u) != 0) {
    long max = sysconf(_SC_OPEN_MAX);
    for (long fd = from; fd < (max > 0 ? max : 1024); fd++) close((int)fd);
  }
}

static kiln_status_t drop_uid(const kiln_sandbox_config_t *cfg) {
  if (geteuid() != 0 || cfg->uid == 0) return KILN_OK;
  if (setgroups(0, NULL) != 0 || setresgid(cfg->gid, cfg->gid, cfg->gid) != 0 ||
      setresuid(cfg->uid, cfg->uid, cfg->uid) != 0)
    return KILN_STATUS(KILN_E_INTERNAL, "cannot switch to uid %u gid %u: %s", (unsigned)cfg->uid,
                       (unsigned)cfg->gid, strerror(errno));
  uid_t r, e, s;
  /* The switch must be complete and final: no way back to root. */
  if (getresuid(&r, &e, &s) != 0 || r != cfg->uid || e != cfg->uid || s != cfg->uid ||
      setuid(0) == 0)
    return KILN_STATUS(KILN_E_INTERNAL, "the switch to uid %u did not hold", (unsigned)cfg->uid);
  return KILN_OK;
}

/* An empty directory that no longer exists: nothing can be created in it and no path
 * leads back to it, so relative paths reach nothing. */
static bool enter_removed_dir(void) {
  const char *base = getenv("TMPDIR");
  char dir[512];
  snprintf(dir, sizeof(dir), "%s/kiln-cwd-XXXXXX", base && base[0] == '/' ? base : "/tmp");
  if (!mkdtemp(dir)) {
    if (chdir("/") != 0) {}
    return false;
  }
  bool ok = chdir(dir) == 0;
  if (rmdir(dir) != 0) ok = false;
  if (!ok && chdir("/") != 0) {}
  return ok;
}

static kiln_status_t set_limit(int which, const char *name, uint64_t v) {
  struct rlimit rl = {v, v};
  struct rlimit cur;
  if (getrlimit(which, &cur) == 0 && cur.rlim_max != RLIM_INFINITY && v > cur.rlim_max)
    rl.rlim_cur = rl.rlim_max = cur.rlim_max;
  if (setrlimit(which, &rl) != 0)
    return KILN_STATUS(KILN_E_INTERNAL, "setrlimit(%s, %llu): %s", name, (unsigned long long)v,
                       strerror(errno));
  return KILN_OK;
}

static kiln_status_t set_limits(const kiln_sandbox_config_t *cfg, bool own_uid) {
  KILN_RETURN_IF_ERROR(set_limit(RLIMIT_CORE, "CORE", 0));
  if (cfg->max_files) KILN_RETURN_IF_ERROR(set_limit(RLIMIT_NOFILE, "NOFILE", cfg->max_files));
  /* RLIMIT_NPROC counts every task of the real uid. The cpu device needs no new task once
   * confined; the others need threads (lld's pool, driver threads), and when they share
   * kilnd's uid a bound here would be a bound on kilnd too, so it is left alone there. */
  if (cfg->profile == KILN_SANDBOX_CPU_DEVICE)
    KILN_RETURN_IF_ERROR(set_limit(RLIMIT_NPROC, "NPROC", 0));
  else if (own_uid)
    KILN_RETURN_IF_ERROR(set_limit(RLIMIT_NPROC, "NPROC", 4096));
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  /* ASan and TSan reserve terabytes of shadow address space: no RLIMIT_AS there. */
  if (cfg->max_address_space)
    KILN_RETURN_IF_ERROR(set_limit(RLIMIT_AS, "AS", cfg->max_address_space));
#endif
  return KILN_OK;
}

/* The kernel's OOM killer picks the task with the highest badness; at the maximum
 * adjustment every worker outranks kilnd (adjustment 0) whatever their sizes, and among
 * workers the biggest goes. Raising one's own value needs no privilege. */
static void raise_oom_score(void) {
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  if (write(fd, "1000", 4) != 4) {}
  close(fd);
}

/* --- Landlock ----------------------------------------------------------------------------- */

int kiln_sandbox_landlock_abi(void) {
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi > 0 ? (int)abi : 0;
}

static uint64_t fs_rights(int abi) {
  uint64_t all = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1; /* ABI 1: bits 0-12 */
  if (abi >= 2) all |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) all |= LANDLOCK_ACCESS_FS_TRUNCATE;
  if (abi >= 5) all |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
  return all;
}

static kiln_status_t add_rule(int ruleset, const char *path, uint64_t rights, uint64_t handled) {
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return KILN_OK; /* absent here: nothing to allow */
  struct stat st;
  if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) rights &= LL_FILE_RIGHTS;
  struct landlock_path_beneath_attr pb = {.allowed_access = rights & handled, .parent_fd = fd};
  long rc = syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
  int err = errno;
  close(fd);
  if (rc != 0)
    return KILN_STATUS(KILN_E_INTERNAL, "landlock_add_rule(%s): %s", path, strerror(err));
  return KILN_OK;
}

static int ll_ruleset = -1;
static atomic_uint ll_done, ll_failed;

/* Runs in each thread: no_new_privs is per thread, and so is a Landlock domain. */
static void ll_restrict_thread(int sig) {
  (void)sig;
  int saved = errno;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      syscall(SYS_landlock_restrict_self, ll_ruleset, 0) != 0)
    atomic_fetch_add(&ll_failed, 1);
  atomic_fetch_add(&ll_done, 1);
  errno = saved;
}

/* Restricts every thread of the process with the ruleset; returns how many it covers. */
static unsigned restrict_all_threads(unsigned *out_threads) {
  int sig = SIGRTMAX - 1;
  struct sigaction sa = {0}, old;
  sa.sa_handler = ll_restrict_thread;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(sig, &sa, &old);
  atomic_store(&ll_done, 0);
  atomic_store(&ll_failed, 0);
  pid_t self = (pid_t)syscall(SYS_gettid), pid = getpid();
  unsigned sent = 0, threads = 1;
  DIR *d = opendir("/proc/self/task");
  for (struct dirent *e; d && (e = readdir(d));) {
    pid_t tid = (pid_t)atoi(e->d_name);
    if (tid <= 0 || tid == self) continue;
    threads++;
    if (syscall(SYS_tgkill, pid, tid, sig) == 0) sent++;
  }
  if (d) closedir(d);
  /* Threads that block the signal (a driver's) never answer: wait a bounded time. */
  for (int i = 0; i < 2000 && atomic_load(&ll_done) < sent; i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  unsigned others = atomic_load(&ll_done) - atomic_load(&ll_failed);
  atomic_store(&ll_failed, 0);
  ll_restrict_thread(0);
  unsigned covered = others + (atomic_load(&ll_failed) == 0);
  sigaction(sig, &old, NULL);
  *out_threads = threads;
  return covered;
}

static kiln_status_t apply_landlock(const kiln_sandbox_config_t *cfg, kiln_sandbox_report_t *r) {
  int abi = kiln_sandbox_landlock_abi();
  r->landlock_abi = abi;
  if (abi == 0) {
    unsigned n = 0;
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    r->threads = n;
    return KILN_OK;
  }
  ll_ruleset_attr_t attr = {.handled_access_fs = fs_rights(abi)};
  size_t size = sizeof(uint64_t);
  if (abi >= 4) {
    attr.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;
    size = 2 * sizeof(uint64_t);
  }
  if (abi >= 6) {
    attr.scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL;
    size = sizeof(attr);
  }
  int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
  if (rs < 0) return KILN_STATUS(KILN_E_INTERNAL, "landlock_create_ruleset: %s", strerror(errno));
  uint64_t h = attr.handled_access_fs;
  kiln_status_t st = KILN_OK;
  uint64_t dev_rights = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE |
                        LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_IOCTL_DEV;
  for (int i = 0; !st && i < KILN_SANDBOX_MAX_PATHS && cfg->read[i]; i++)
    st = add_rule(rs, cfg->read[i], LL_READ, h);
  for (int i = 0; !st && i < KILN_SANDBOX_MAX_PATHS && cfg->exec[i]; i++)
    st = add_rule(rs, cfg->exec[i], LL_EXEC, h);
  for (int i = 0; !st && i < KILN_SANDBOX_MAX_PATHS && cfg->write[i]; i++)
    st = add_rule(rs, cfg->write[i], h, h);
  for (int i = 0; !st && i < KILN_SANDBOX_MAX_PATHS && cfg->devices[i]; i++)
    st = add_rule(rs, cfg->devices[i], dev_rights, h);
  if (st) {
    close(rs);
    return st;
  }
  ll_ruleset = rs;
  r->landlock_threads = restrict_all_threads(&r->threads);
  ll_ruleset = -1;
  close(rs);
  if (r->landlock_threads == 0)
    return KILN_STATUS(KILN_E_INTERNAL, "landlock_restrict_self failed");
  return KILN_OK;
}

/* --- the SIGSYS handler ------------------------------------------------------------------- */

static int report_fd = -1;
static kiln_sandbox_profile_t active_profile;
static atomic_int reporting;

#if defined(__x86_64__)
static long sys_arg(const ucontext_t *uc, int i) {
  static const int regs[] = {REG_RDI, REG_RSI, REG_RDX, REG_R10, REG_R8, REG_R9};
  return (long)uc->uc_mcontext.gregs[regs[i]];
}
static void sys_return(ucontext_t *uc, long v) { uc->uc_mcontext.gregs[REG_RAX] = v; }
#define HAVE_EMULATION 1
#elif defined(__aarch64__)
static long sys_arg(const ucontext_t *uc, int i) { return (long)uc->uc_mcontext.regs[i]; }
static void sys_return(ucontext_t *uc, long v) { uc->uc_mcontext.regs[0] = (unsigned long)v; }
#define HAVE_EMULATION 1
#else
#define HAVE_EMULATION 0
#endif

static size_t put_u32(uint8_t *p, uint32_t v) {
  p[0] = 0xce;
  p[1] = (uint8_t)(v >> 24);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 8);
  p[4] = (uint8_t)v;
  return 5;
}

/* Async-signal-safe: a fixed MessagePack notification written with raw system calls. */
static void report_and_exit(int nr, uint32_t arch) {
  if (atomic_exchange(&reporting, 1) == 0 && report_fd >= 0) {
    uint8_t msg[64];
    size_t n = 0;
    static const char method[] = KILN_SANDBOX_VIOLATION;
    msg[n++] = 0x93; /* [2, method, [{syscall, arch}]] */
    msg[n++] = 0x02;
    msg[n++] = (uint8_t)(0xa0 | (sizeof(method) - 1));
    memcpy(msg + n, method, sizeof(method) - 1);
    n += sizeof(method) - 1;
    msg[n++] = 0x91;
    msg[n++] = 0x82;
    msg[n++] = 0xa7;
    memcpy(msg + n, "syscall", 7);
    n += 7;
    n += put_u32(msg + n, (uint32_t)nr);
    msg[n++] = 0xa4;
    memcpy(msg + n, "arch", 4);
    n += 4;
    n += put_u32(msg + n, arch);
    for (size_t off = 0; off < n;) {
      long w = syscall(SYS_write, report_fd, msg + off, n - off);
      if (w <= 0) break;
      off += (size_t)w;
    }
  }
  for (;;) syscall(SYS_exit_group, KILN_SANDBOX_EXIT_STATUS);
}

#if HAVE_EMULATION
/* "/proc/self/fd/N" -> N; -1 for any other path. */
static int proc_self_fd(const char *p) {
  static const char prefix[] = "/proc/self/fd/";
  for (size_t i = 0; i < sizeof(prefix) - 1; i++)
    if (p[i] != prefix[i]) return -1;
  p += sizeof(prefix) - 1;
  long fd = 0;
  if (!*p) return -1;
  for (; *p; p++) {
    if (*p < '0' || *p > '9' || fd > 1000000) return -1;
    fd = fd * 10 + (*p - '0');
  }
  return (int)fd;
}

/* Answers the calls the cpu device's module loading makes; false when the call is a
 * violation. Only ever hands out what the process already holds. */
static bool emulate(int nr, ucontext_t *uc) {
  const char *path;
  long flags;
  if (nr == SYS_openat) {
    path = (const char *)sys_arg(uc, 1);
    flags = sys_arg(uc, 2);
#ifdef SYS_open
  } else if (nr == SYS_open) {
    path = (const char *)sys_arg(uc, 0);
    flags = sys_arg(uc, 1);
#endif
  } else if (nr == SYS_newfstatat) {
    path = (const char *)sys_arg(uc, 1);
    if (!path || path[0] != 0 || !(sys_arg(uc, 3) & AT_EMPTY_PATH)) return false;
    long r = syscall(SYS_fstat, (int)sys_arg(uc, 0), (struct stat *)sys_arg(uc, 2));
    sys_return(uc, r < 0 ? -errno : r);
    return true;
  } else {
    return false;
  }
  if (!path || (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC))) return false;
  int fd = proc_self_fd(path);
  if (fd < 0) return false;
  /* Reopening /proc/self/fd/N could widen N's access mode; a duplicate cannot. Its file
   * position is N's, which dlopen expects at the start. */
  long r = syscall(SYS_fcntl, fd, (flags & O_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, 0);
  if (r < 0) {
    sys_return(uc, -errno);
    return true;
  }
  syscall(SYS_lseek, (int)r, 0L, SEEK_SET);
  sys_return(uc, r);
  return true;
}
#endif

static void on_sigsys(int sig, siginfo_t *info, void *ctx) {
  (void)sig;
  int saved = errno;
  int nr = info->si_syscall;
  uint32_t arch = info->si_arch;
#if HAVE_EMULATION
  if (active_profile == KILN_SANDBOX_CPU_DEVICE && arch == seccomp_arch_native() &&
      emulate(nr, ctx)) {
    errno = saved;
    return;
  }
#else
  (void)ctx;
#endif
  report_and_exit(nr, arch);
}

/* --- seccomp ------------------------------------------------------------------------------ */

static const char *const common_calls[] = {
    "read", "write", "readv", "writev", "pread64", "pwrite64", "lseek", "close", "fstat",
    "recvmsg", "sendmsg", "recvfrom", "sendto", "poll", "ppoll", "mmap", "munmap", "mprotect",
    "mremap", "madvise", "brk", "msync", "futex", "set_robust_list", "get_robust_list", "rseq",
    "sched_yield", "sched_getaffinity", "getcpu", "nanosleep", "clock_nanosleep",
    "clock_gettime", "clock_getres", "gettimeofday", "time", "getpid", "gettid", "getppid",
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "rt_sigreturn",
    "rt_sigprocmask", "sigaltstack", "exit", "exit_group", "restart_syscall", "getrandom",
    "dup", "dup2", "dup3", "memfd_create", "ftruncate", "membarrier", "getrusage",
    "times", "uname", "getrlimit", "sysinfo", NULL};

/* Files: lld reads its inputs and writes its output through the file system. */
static const char *const file_calls[] = {
    "open", "openat", "stat", "lstat", "newfstatat", "statx", "access", "faccessat",
    "faccessat2", "readlink", "readlinkat", "getdents64", "unlink", "unlinkat", "rename",
    "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "fallocate", "fsync", "fdatasync",
    "getcwd", "fchmod", "umask", NULL};

/* What GPU drivers use besides files (devices, events, NUMA placement, thread priorities). */
static const char *const driver_calls[] = {
    "eventfd2", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "pipe2",
    "mbind", "get_mempolicy", "set_mempolicy", "sched_setaffinity", "sched_getparam",
    "sched_setscheduler", "sched_getscheduler", "setpriority", "getpriority", "timerfd_create",
    "timerfd_settime", "mlock", "munlock", "sched_get_priority_max", "sched_get_priority_min",
    NULL};

static kiln_status_t allow_list(scmp_filter_ctx f, const char *const *names) {
  for (; *names; names++) {
    int nr = seccomp_syscall_resolve_name(*names);
    if (nr == __NR_SCMP_ERROR) continue; /* not a system call of this architecture */
    int rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, nr, 0);
    if (rc < 0) return KILN_STATUS(KILN_E_INTERNAL, "seccomp_rule_add(%s): %s", *names, strerror(-rc));
  }
  return KILN_OK;
}

#define RULE(f, action, name, n, ...)                                                      \
  do {                                                                                       \
    int rc_ = seccomp_rule_add(f, action, SCMP_SYS(name), n __VA_OPT__(, ) __VA_ARGS__);     \
    if (rc_ < 0)                                                                             \
      return KILN_STATUS(KILN_E_INTERNAL, "seccomp_rule_add(%s): %s", #name, strerror(-rc_)); \
  } while (0)

#if defined(__SANITIZE_THREAD__)
/* ThreadSanitizer's runtime symbolizes reports and reads its own maps from /proc/self while
 * the program runs. Only the thread-sanitizer build (a CI stage that checks kiln's threads,
 * never its confinement, which the release and ASan suites test) allows these. */
static const char *const tsan_calls[] = {"readlink", "readlinkat", "open", "openat", "newfstatat",
                                         "fstat", "getdents64", "sched_getaffinity", NULL};
#endif

static kiln_status_t build_filter(scmp_filter_ctx f, kiln_sandbox_profile_t p) {
  KILN_RETURN_IF_ERROR(allow_list(f, common_calls));
#if defined(__SANITIZE_THREAD__)
  KILN_RETURN_IF_ERROR(allow_list(f, tsan_calls));
#endif
  pid_t pid = getpid();
  /* Signals to itself only (abort, raise, glibc's thread signals); tkill names no process. */
  RULE(f, SCMP_ACT_ALLOW, kill, 1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)pid));
  RULE(f, SCMP_ACT_ALLOW, tgkill, 1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)pid));
  /* SIGSYS stays kiln's: installing another handler is refused (LLVM installs handlers for
   * every fatal signal and ignores the error), asking is allowed. */
  /* Each signal by its exact number: the kernel reads the argument as an int, so a "not
   * SIGSYS" test on the 64-bit register would pass SIGSYS with a high bit set. */
  for (int sig = 1; sig <= SIGRTMAX; sig++)
    if (sig != SIGSYS) RULE(f, SCMP_ACT_ALLOW, rt_sigaction, 1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)sig));
  RULE(f, SCMP_ACT_ALLOW, rt_sigaction, 2, SCMP_A0(SCMP_CMP_EQ, SIGSYS), SCMP_A1(SCMP_CMP_EQ, 0));
  RULE(f, SCMP_ACT_ERRNO(EPERM), rt_sigaction, 2, SCMP_A0(SCMP_CMP_EQ, SIGSYS),
       SCMP_A1(SCMP_CMP_NE, 0));
  /* prctl: names and questions; never PR_SET_DUMPABLE or anything that changes privileges. */
  RULE(f, SCMP_ACT_ALLOW, prctl, 1, SCMP_A0(SCMP_CMP_EQ, PR_SET_NAME));
  RULE(f, SCMP_ACT_ALLOW, prctl, 1, SCMP_A0(SCMP_CMP_EQ, PR_GET_NAME));
  RULE(f, SCMP_ACT_ALLOW, prctl, 1, SCMP_A0(SCMP_CMP_EQ, PR_GET_DUMPABLE));
  /* Reading its own limits only. */
  RULE(f, SCMP_ACT_ALLOW, prlimit64, 2, SCMP_A0(SCMP_CMP_EQ, 0), SCMP_A2(SCMP_CMP_EQ, 0));
  RULE(f, SCMP_ACT_ALLOW, prlimit64, 2, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)pid), SCMP_A2(SCMP_CMP_EQ, 0));
  /* fcntl without F_SETOWN, F_SETSIG, F_SETLEASE or F_NOTIFY: each would have the kernel
   * signal a process of the worker's choosing (SIGIO to kilnd, whose default ends it). */
  static const int fcntl_cmds[] = {F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_GETLK,
                                   F_SETLK, F_SETLKW, F_DUPFD_CLOEXEC, F_ADD_SEALS, F_GET_SEALS,
                                   F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW};
  for (size_t i = 0; i < sizeof(fcntl_cmds) / sizeof(fcntl_cmds[0]); i++)
    RULE(f, SCMP_ACT_ALLOW, fcntl, 1, SCMP_A1(SCMP_CMP_EQ, (scmp_datum_t)fcntl_cmds[i]));
  if (p != KILN_SANDBOX_GPU_DEVICE)
    RULE(f, SCMP_ACT_ALLOW, ioctl, 1, SCMP_A1(SCMP_CMP_EQ, TCGETS)); /* isatty */
  if (p != KILN_SANDBOX_CPU_DEVICE) {
    /* Threads, never processes. clone3 passes its flags in memory a filter cannot read:
     * ENOSYS makes glibc fall back to clone. */
    RULE(f, SCMP_ACT_ALLOW, clone, 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
    RULE(f, SCMP_ACT_ERRNO(ENOSYS), clone3, 0);
    KILN_RETURN_IF_ERROR(allow_list(f, file_calls));
  }
  if (p == KILN_SANDBOX_GPU_DEVICE) {
    KILN_RETURN_IF_ERROR(allow_list(f, driver_calls));
    /* The drivers' device ioctls: no tenant code runs on a GPU worker's CPU. */
    RULE(f, SCMP_ACT_ALLOW, ioctl, 0);
    /* Reading its own memory without faulting (the software GPU's check of a kernel's
     * addresses); another process's memory stays out of reach. */
    RULE(f, SCMP_ACT_ALLOW, process_vm_readv, 1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)pid));
  }
  return KILN_OK;
}

static kiln_status_t apply_seccomp(kiln_sandbox_profile_t p) {
  scmp_filter_ctx f = seccomp_init(SCMP_ACT_TRAP);
  if (!f) return KILN_STATUS(KILN_E_INTERNAL, "seccomp_init failed");
  kiln_status_t st = KILN_OK;
  int rc;
  /* Another architecture's system call table (int 0x80 on x86-64, x32) traps too, and the
   * handler reports it with that architecture. Every thread gets the filter. */
  if ((rc = seccomp_attr_set(f, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_TRAP)) < 0 ||
      (rc = seccomp_attr_set(f, SCMP_FLTATR_CTL_TSYNC, 1)) < 0)
    st = KILN_STATUS(KILN_E_INTERNAL, "seccomp_attr_set: %s", strerror(-rc));
  if (!st) st = build_filter(f, p);
  if (!st && (rc = seccomp_load(f)) < 0)
    st = KILN_STATUS(KILN_E_INTERNAL, "seccomp_load: %s", strerror(-rc));
  seccomp_release(f);
  return st;
}

/* --- entry -------------------------------------------------------------------------------- */

kiln_status_t kiln_sandbox_enter(const kiln_sandbox_config_t *cfg, kiln_sandbox_report_t *out_report) {
  kiln_sandbox_report_t r = {0};
  /* glibc reads /etc/localtime on the first time conversion of the process, gmtime_r's
   * included (kiln's log lines): now, while files may still be opened. */
  tzset();
  bool own_uid = geteuid() == 0 && cfg->uid != 0;
  raise_oom_score(); /* before the uid switch, which makes /proc/self root's */
  KILN_RETURN_IF_ERROR(drop_uid(cfg));
  r.uid = geteuid();
  r.cwd_removed = enter_removed_dir();
  KILN_RETURN_IF_ERROR(set_limits(cfg, own_uid));
  /* Dumpable 0: the kernel refuses ptrace and /proc/PID/mem to everyone without
   * CAP_SYS_PTRACE, the same uid included; and no core files. */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return KILN_STATUS(KILN_E_INTERNAL, "prctl: %s", strerror(errno));
  if (!(cfg->omit & KILN_SANDBOX_OMIT_LANDLOCK)) KILN_RETURN_IF_ERROR(apply_landlock(cfg, &r));
  report_fd = cfg->channel_fd;
  active_profile = cfg->profile;
  struct sigaction sa = {0};
  sa.sa_sigaction = on_sigsys;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO;
  if (sigaction(SIGSYS, &sa, NULL) != 0)
    return KILN_STATUS(KILN_E_INTERNAL, "sigaction(SIGSYS): %s", strerror(errno));
  sigset_t sys;
  sigemptyset(&sys);
  sigaddset(&sys, SIGSYS);
  pthread_sigmask(SIG_UNBLOCK, &sys, NULL);
  if (!(cfg->omit & KILN_SANDBOX_OMIT_SECCOMP)) KILN_RETURN_IF_ERROR(apply_seccomp(cfg->profile));
  if (out_report) *out_report = r;
  return KILN_OK;
}

void kiln_sandbox_syscall_name(uint32_t arch, int nr, char *out, size_t cap) {
  char *name = seccomp_syscall_resolve_num_arch(arch, nr);
  if (!name) snprintf(out, cap, "syscall %d", nr);
  else if (arch == seccomp_arch_native()) snprintf(out, cap, "%s", name);
  else if (arch == SCMP_ARCH_X86) snprintf(out, cap, "%s of the i386 table", name);
  else snprintf(out, cap, "%s of architecture 0x%x", name, arch);
  free(name);
}
