/* Starting the real kilnd for a test, and stopping it.
 *
 * kiln_test_daemon_start() runs $KILND with a TCP listener on a free port, a unix socket in a
 * private temp directory and --ready-fd on a pipe, and returns once kilnd has written its
 * bound addresses and closed the pipe: readiness is an event, never a sleep. If kilnd exits
 * first, the error carries its exit status and the end of its log.
 * kiln_test_daemon_stop() sends a signal and waits for the exit (through a pidfd, so again
 * without sleeping), SIGKILLing after the timeout.
 * One daemon per test process; not thread-safe. */
#ifndef KILN_TESTS_CLIENT_DAEMON_H
#define KILN_TESTS_CLIENT_DAEMON_H

#include <stdbool.h>
#include <sys/types.h>

#include "base/status.h"

typedef struct kiln_test_daemon {
  pid_t pid;
  int pidfd;           /* readable once kilnd has exited */
  char dir[128];       /* private: socket, cache, log */
  char tcp_url[128];   /* "tcp:127.0.0.1:PORT" as kilnd reported it */
  char tls_url[128];   /* the first "tls:HOST:PORT" when started with one, else "" */
  char unix_url[256];  /* "unix:DIR/kiln.sock" */
  char metrics_url[128]; /* "tcp:HOST:PORT" of the metrics endpoint when started with --metrics */
  char log_path[256];  /* kilnd's stdout and stderr */
} kiln_test_daemon_t;

/* extra: more kilnd arguments, NULL-terminated (or NULL). */
KILN_MUST_USE kiln_status_t kiln_test_daemon_start(kiln_test_daemon_t *d, const char *const *extra);
/* Sends sig (0: none, only wait) and waits up to timeout_ms; *out_wstatus is waitpid's status. E_TIMEOUT (after
 * a SIGKILL) if kilnd did not exit in time. Removes the private directory. */
KILN_MUST_USE kiln_status_t kiln_test_daemon_stop(kiln_test_daemon_t *d, int sig, int timeout_ms,
                                    int *out_wstatus);
/* Whether kilnd is still running (does not reap it). */
bool kiln_test_daemon_alive(const kiln_test_daemon_t *d);

/* Resident memory (VmRSS, KiB) and open file descriptors of a process; -1 if unreadable. */
long kiln_test_rss_kib(pid_t pid);
int kiln_test_fd_count(pid_t pid);
/* Writes the last `bytes` of the daemon's log to stderr (for failing tests). */
void kiln_test_daemon_dump_log(const kiln_test_daemon_t *d, long bytes);

#endif
