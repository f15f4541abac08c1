#include "spawn.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void append(char **buf, size_t *len, const char *data, size_t n) {
  *buf = realloc(*buf, *len + n + 1);
  memcpy(*buf + *len, data, n);
  *len += n;
  (*buf)[*len] = '\0';
}

void sp_run(char *const argv[], const char *const env_extra[], int timeout_s, sp_result_t *r) {
  memset(r, 0, sizeof *r);
  r->out = calloc(1, 1), r->err = calloc(1, 1);
  int po[2], pe[2];
  if (pipe(po) || pipe(pe)) abort();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(po[1], 1), dup2(pe[1], 2);
    close(po[0]), close(pe[0]), close(po[1]), close(pe[1]);
    for (size_t i = 0; env_extra && env_extra[i]; i++) putenv((char *)env_extra[i]);
    execv(argv[0], argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(po[1]), close(pe[1]);
  size_t lo = 0, le = 0;
  struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
  time_t deadline = time(NULL) + timeout_s;
  int open = 2;
  while (open > 0) {
    int left = (int)(deadline - time(NULL));
    if (left <= 0) {
      kill(pid, SIGKILL);
      r->timed_out = true;
      break;
    }
    if (poll(fds, 2, left * 1000) <= 0) continue;
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        open--;
      } else if (i == 0) {
        append(&r->out, &lo, buf, (size_t)n);
      } else {
        append(&r->err, &le, buf, (size_t)n);
      }
    }
  }
  for (int i = 0; i < 2; i++)
    if (fds[i].fd >= 0) close(fds[i].fd);
  int st;
  waitpid(pid, &st, 0);
  r->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r->signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

void sp_free(sp_result_t *r) {
  free(r->out);
  free(r->err);
}

void sp_client(const char *scenario, const char *const env_extra[], sp_result_t *out) {
  const char *client = getenv("SGRT_CLIENT");
  char *argv[] = {(char *)(client ? client : "sgrt-client"), (char *)scenario, NULL};
  sp_run(argv, env_extra, 60, out);
}
