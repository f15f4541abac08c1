#include "daemon.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"

#define START_TIMEOUT_MS 20000

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  remove(path);
  return 0;
}

static void remove_dir(const char *dir) {
  if (dir[0]) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void kiln_test_daemon_dump_log(const kiln_test_daemon_t *d, long bytes) {
  FILE *f = fopen(d->log_path, "r");
  if (!f) return;
  if (fseek(f, -bytes, SEEK_END) != 0) rewind(f);
  char buf[4096];
  size_t n;
  fprintf(stderr, "---- end of %s ----\n", d->log_path);
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) fwrite(buf, 1, n, stderr);
  fprintf(stderr, "----\n");
  fclose(f);
}

/* The child: stdout/stderr to the log, the pipe's write end on a descriptor that survives
 * exec, then kilnd. */
static void exec_kilnd(const kiln_test_daemon_t *d, const char *kilnd, int ready_w,
                       const char *const *extra) {
  int log = open(d->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  if (log >= 0) {
    dup2(log, 1);
    dup2(log, 2);
  }
  /* kilnd gets stdin from /dev/null, the log, the ready pipe as fd 3 and nothing else of
   * the test process (Criterion's arenas and pipes would count as kilnd's fds). */
  int null = open("/dev/null", O_RDONLY);
  if (null >= 0) dup2(null, 0);
  dup2(ready_w, 3); /* dup2 clears close-on-exec */
  syscall(SYS_close_range, 4u, ~0u, 0u);
  char fdstr[16] = "3", unix_listen[300], cache[160];
  snprintf(unix_listen, sizeof(unix_listen), "%s", d->unix_url);
  snprintf(cache, sizeof(cache), "%s/cache", d->dir);
  const char *argv[64] = {kilnd, "--listen", "tcp:127.0.0.1:0", "--listen", unix_listen,
                          "--ready-fd", fdstr, "--cache-dir", cache};
  int n = 9;
  for (int i = 0; extra && extra[i] && n < 62; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  execv(kilnd, (char *const *)argv);
  fprintf(stderr, "exec %s: %s\n", kilnd, strerror(errno));
  _exit(127);
}

/* Reads the ready lines until kilnd closes the pipe. */
static kiln_status_t read_ready(kiln_test_daemon_t *d, int fd) {
  char buf[1024];
  size_t len = 0;
  uint64_t deadline = kiln_now_ns() + START_TIMEOUT_MS * 1000000ull;
  for (;;) {
    uint64_t now = kiln_now_ns();
    if (now >= deadline)
      return KILN_STATUS(KILN_E_TIMEOUT, "kilnd did not report ready within %d ms",
                         START_TIMEOUT_MS);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int rc = poll(&p, 1, (int)((deadline - now) / 1000000 + 1));
    if (rc < 0 && errno != EINTR)
      return KILN_STATUS(KILN_E_INTERNAL, "poll: %s", strerror(errno));
    if (rc <= 0) continue;
    ssize_t r = read(fd, buf + len, sizeof(buf) - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return KILN_STATUS(KILN_E_INTERNAL, "read: %s", strerror(errno));
    if (r == 0) break;
    len += (size_t)r;
    if (len == sizeof(buf) - 1) break;
  }
  buf[len] = 0;
  d->tcp_url[0] = d->tls_url[0] = d->metrics_url[0] = 0;
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
    char *path = strncmp(line, "http://", 7) == 0 ? strchr(line + 7, '/') : NULL;
    if (path) snprintf(d->metrics_url, sizeof(d->metrics_url), "tcp:%.*s", (int)(path - line - 7), line + 7);
    if (strncmp(line, "tcp:", 4) == 0) snprintf(d->tcp_url, sizeof(d->tcp_url), "%s", line);
    if (strncmp(line, "tls:", 4) == 0 && !d->tls_url[0])
      snprintf(d->tls_url, sizeof(d->tls_url), "%s", line);
  }
  if (!d->tcp_url[0])
    return KILN_STATUS(KILN_E_UNAVAILABLE, "kilnd closed its ready fd without a tcp address");
  return KILN_OK;
}

kiln_status_t kiln_test_daemon_start(kiln_test_daemon_t *d, const char *const *extra) {
  memset(d, 0, sizeof(*d));
  d->pid = -1;
  d->pidfd = -1;
  const char *kilnd = getenv("KILND");
  if (!kilnd || !*kilnd)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "set KILND to the kilnd binary (meson test does: build/server/kilnd)");
  snprintf(d->dir, sizeof(d->dir), "/tmp/kiln-test-XXXXXX");
  if (!mkdtemp(d->dir))
    return KILN_STATUS(KILN_E_INTERNAL, "mkdtemp: %s", strerror(errno));
  snprintf(d->unix_url, sizeof(d->unix_url), "unix:%s/kiln.sock", d->dir);
  snprintf(d->log_path, sizeof(d->log_path), "%s/kilnd.log", d->dir);
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) return KILN_STATUS(KILN_E_INTERNAL, "pipe: %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return KILN_STATUS(KILN_E_INTERNAL, "fork: %s", strerror(errno));
  if (pid == 0) exec_kilnd(d, kilnd, p[1], extra);
  close(p[1]);
  d->pid = pid;
  d->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  kiln_status_t s = read_ready(d, p[0]);
  close(p[0]);
  if (s) {
    int st = 0;
    kiln_status_free(kiln_test_daemon_stop(d, SIGKILL, 5000, &st));
    kiln_test_daemon_dump_log(d, 4000);
    return kiln_status_annotate(s, "starting %s (wait status %d)", kilnd, st);
  }
  return KILN_OK;
}

bool kiln_test_daemon_alive(const kiln_test_daemon_t *d) {
  if (d->pid <= 0) return false;
  if (d->pidfd >= 0) {
    struct pollfd p = {.fd = d->pidfd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
  }
  return kill(d->pid, 0) == 0;
}

/* Waits for the exit through the pidfd; without pidfd (kernel < 5.3) polls waitpid. */
static bool wait_exit(kiln_test_daemon_t *d, int timeout_ms, int *out_wstatus) {
  uint64_t deadline = kiln_now_ns() + (uint64_t)timeout_ms * 1000000u;
  for (;;) {
    pid_t r = waitpid(d->pid, out_wstatus, WNOHANG);
    if (r == d->pid) return true;
    uint64_t now = kiln_now_ns();
    if (now >= deadline) return false;
    int ms = (int)((deadline - now) / 1000000 + 1);
    if (d->pidfd >= 0) {
      struct pollfd p = {.fd = d->pidfd, .events = POLLIN};
      poll(&p, 1, ms);
    } else {
      poll(NULL, 0, ms < 10 ? ms : 10);
    }
  }
}

kiln_status_t kiln_test_daemon_stop(kiln_test_daemon_t *d, int sig, int timeout_ms,
                                    int *out_wstatus) {
  kiln_status_t s = KILN_OK;
  int st = 0;
  if (d->pid > 0) {
    if (sig) kill(d->pid, sig);
    if (!wait_exit(d, timeout_ms, &st)) {
      kill(d->pid, SIGKILL);
      wait_exit(d, 10000, &st);
      s = KILN_STATUS(KILN_E_TIMEOUT, "kilnd did not exit within %d ms of signal %d", timeout_ms,
                      sig);
    }
    d->pid = -1;
  }
  if (d->pidfd >= 0) close(d->pidfd);
  d->pidfd = -1;
  if (s || !WIFEXITED(st) || WEXITSTATUS(st) != 0) kiln_test_daemon_dump_log(d, 4000);
  remove_dir(d->dir);
  *out_wstatus = st;
  return s;
}

long kiln_test_rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long kib = -1;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  fclose(f);
  return kib;
}

int kiln_test_fd_count(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
  DIR *dir = opendir(path);
  if (!dir) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(dir));)
    if (e->d_name[0] != '.') n++;
  closedir(dir);
  return n;
}
