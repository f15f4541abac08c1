#include "device/probe_child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"

/* What the child writes, followed by `count` kiln_device_info_t. Same binary, same layout. */
typedef struct report {
  int32_t code;
  uint32_t count;
  char message[512];
  char reason[256];
} report_t;

static void write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    c += w;
    n -= (size_t)w;
  }
}

static void run_child(int fd, kiln_device_probe_cb probe, size_t cap) {
  report_t rep;
  memset(&rep, 0, sizeof rep);
  kiln_device_info_t *infos = calloc(cap ? cap : 1, sizeof *infos);
  size_t count = 0;
  kiln_status_t s = infos ? probe(infos, cap, &count, rep.reason, sizeof rep.reason)
                          : KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  if (s) {
    rep.code = (int32_t)kiln_status_code(s);
    snprintf(rep.message, sizeof rep.message, "%s", kiln_status_message(s));
    count = 0;
  }
  rep.count = (uint32_t)count;
  write_all(fd, &rep, sizeof rep);
  if (count) write_all(fd, infos, count * sizeof *infos);
  /* _exit: no atexit handlers or stdio flushes of the parent's state run twice. */
  _exit(0);
}

/* Reads exactly n bytes before the deadline; false on EOF, error or timeout. */
static bool read_all(int fd, void *p, size_t n, uint64_t deadline) {
  char *c = p;
  while (n) {
    uint64_t now = kiln_now_ns();
    if (now >= deadline) return false;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int rc = poll(&pfd, 1, (int)((deadline - now) / 1000000 + 1));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return false;
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= (size_t)r;
  }
  return true;
}

kiln_status_t kiln_device_probe_in_child(kiln_device_probe_cb probe, const char *kind,
                                         uint32_t timeout_ms, kiln_device_info_t *out_infos,
                                         size_t cap, size_t *out_count, char *out_reason,
                                         size_t reason_cap) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return KILN_STATUS(KILN_E_INTERNAL, "%s probe: pipe: %s", kind, strerror(errno));
  fflush(NULL); /* else buffered output would be written twice */
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "%s probe: fork: %s", kind, strerror(errno));
  }
  if (pid == 0) {
    close(fds[0]);
    run_child(fds[1], probe, cap);
  }
  close(fds[1]);
  uint64_t deadline = kiln_now_ns() + (uint64_t)timeout_ms * 1000000u;
  report_t rep;
  bool ok = read_all(fds[0], &rep, sizeof rep, deadline) && rep.count <= cap &&
            read_all(fds[0], out_infos, rep.count * sizeof *out_infos, deadline);
  close(fds[0]);
  if (!ok) kill(pid, SIGKILL);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!ok) {
    *out_count = 0;
    if (WIFSIGNALED(wstatus) && WTERMSIG(wstatus) != SIGKILL)
      snprintf(out_reason, reason_cap, "%s runtime crashed while probing (signal %d)", kind,
               WTERMSIG(wstatus));
    else
      snprintf(out_reason, reason_cap, "%s runtime did not answer the probe within %u ms", kind,
               timeout_ms);
    return KILN_OK;
  }
  rep.message[sizeof rep.message - 1] = '\0';
  rep.reason[sizeof rep.reason - 1] = '\0';
  if (rep.code) return KILN_STATUS((kiln_code_t)rep.code, "%s", rep.message);
  snprintf(out_reason, reason_cap, "%s", rep.reason);
  *out_count = rep.count;
  return KILN_OK;
}
