/* Worker supervision: spawns a worker process, talks to it over the channel (MessagePack-RPC
 * with fds alongside), and turns its death into typed errors for the requests it held.
 *
 * Each process lifetime is an "incarnation" with its own handles and pending calls, so a
 * dead process's handles can finish closing while a new one already runs. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "base/sandbox.h"
#include "base/util.h"
#include "protocol/channel.h"
#include "protocol/job_serve.h"
#include "server/metrics.h"
#include "server/server.h"

typedef struct pending {
  kiln_worker_cb cb;
  kiln_worker_fd_cb fd_cb; /* instead of cb: the reply carries reply_nfds fds */
  uint32_t reply_nfds;
  void *ctx;
  uint64_t budget_ms; /* 0: unbounded */
} pending_t;

/* Runs the call's callback once; fds (nfds of them) go to an fd_cb, else they are closed. */
static void pending_done(pending_t *p, kiln_status_t st, const msgpack_object *result, int *fds,
                         int nfds) {
  if (p->fd_cb) {
    p->fd_cb(p->ctx, st, result, fds, nfds);
    return;
  }
  for (int i = 0; i < nfds; i++) close(fds[i]);
  p->cb(p->ctx, st, result);
}

typedef struct outmsg {
  struct outmsg *next;
  uint8_t *bytes;
  size_t len, off;
  int fds[KILN_CHANNEL_MAX_FDS];
  int nfds;
} outmsg_t;

typedef struct incarnation {
  kiln_worker_t *worker; /* NULL once the worker moved on */
  uv_process_t proc;
  uv_poll_t poll;
  int fd;
  int pid;
  bool exited, poll_closed, proc_closed, dead;
  bool retired; /* answered with a fault and is exiting: no longer the worker's current one */
  struct incarnation *next_retired; /* in worker->retired while retired and not yet dead */
  kiln_code_t kill_code; /* set when kilnd killed it on purpose (timeout): reported instead */
  char kill_reason[160];
  int64_t exit_status;
  int term_signal;
  char tmp_dir[512]; /* a compile worker's private directory, removed when it has exited */
  /* The worker's sandbox stopped it on a system call (its SIGSYS handler said which). */
  bool violation;
  uint32_t violation_nr, violation_arch;
  kiln_reader_t reader;
  kiln_fdq_t fdq;     /* fds the worker sent, for the replies that carry them, in order */
  kiln_map_t pending; /* msgid -> pending_t* */
  uint64_t last_progress_ns; /* the last answer, or the first call made to an idle worker */
  outmsg_t *head, *tail;
} incarnation_t;

struct kiln_worker {
  kiln_server_t *server;
  kiln_worker_kind_t kind;
  const kiln_tenant_t *tenant; /* device workers */
  const kiln_device_entry_t *device; /* device workers: their device, for the memory bound */
  char device_id[128];
  char path[600];
  char *argv[16];
  int argc;
  incarnation_t *cur;
  incarnation_t *retired; /* retired incarnations still exiting (they point back here) */
  uint32_t next_msgid;
  uint32_t generation;
  uint32_t restarts;
  uint64_t last_death_ns;
  bool destroying;
  bool warm; /* started ahead of use (compile workers): a failed start is retried by a timer */
  bool pinned; /* the process runs on `cpus` (kiln_worker_set_cpus) */
  cpu_set_t cpus;
  /* Starting the process failed: calls fail fast with E_UNAVAILABLE until retry_at_ns, and
   * each failure in a row doubles the wait (SPAWN_BACKOFF_*). */
  uint32_t spawn_failures;
  uint64_t retry_at_ns;
  char spawn_error[700];
  uv_timer_t *retry; /* heap: it may still be closing after the worker is freed */
};

#define SPAWN_BACKOFF_FIRST_MS 100
#define SPAWN_BACKOFF_MAX_MS 30000

/* Ends the process of a misbehaving incarnation. Never once it has been reaped: its pid may
 * already belong to another process (a dead worker's last bytes are read after its exit). */
static void kill_incarnation(incarnation_t *inc) {
  if (!inc->exited) kill(inc->pid, SIGKILL);
}

uint32_t kiln_worker_generation(const kiln_worker_t *w) { return w->generation; }
int kiln_worker_pid(const kiln_worker_t *w) { return w->cur && !w->cur->dead ? w->cur->pid : 0; }
uint32_t kiln_worker_restarts(const kiln_worker_t *w) { return w->restarts; }
uint32_t kiln_worker_inflight(const kiln_worker_t *w) {
  return w->cur ? (uint32_t)w->cur->pending.count : 0;
}

static const char *worker_binary(kiln_worker_kind_t k) {
  return k == KILN_WORKER_DEVICE ? "kiln-device-worker" : "kiln-compile-worker";
}

/* --- whom workers run as -------------------------------------------------------------------- */

/* kilnd as root never runs a worker as root: with --worker-uids each tenant's device workers
 * get their own uid (FIRST + the tenant's index; compile workers FIRST), like systemd's
 * DynamicUser; without it every worker runs as nobody. As another user, workers share its
 * uid (they cannot be given another one). */
static struct {
  bool root;
  bool shared; /* every worker as one uid (nobody) */
  uid_t shared_uid;
  gid_t shared_gid;
} ident;

kiln_status_t kiln_workers_identity_init(kiln_server_t *s) {
  const kiln_config_t *cfg = &s->cfg;
  ident.root = geteuid() == 0;
  bool given = cfg->worker_uid_first != 0;
  if (!ident.root) {
    if (given)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "--worker-uids needs kilnd to run as root (it switches worker processes "
                         "to those uids); as uid %u every worker runs as uid %u",
                         (unsigned)geteuid(), (unsigned)geteuid());
    return KILN_OK;
  }
  if (!given) {
    struct passwd *pw = getpwnam("nobody");
    ident.shared = true;
    ident.shared_uid = pw ? pw->pw_uid : 65534;
    ident.shared_gid = pw ? pw->pw_gid : 65534;
    KILN_LOG_WARN("worker_uids", "mode=shared uid=%u gid=%u message=\"kilnd runs as root: every "
                  "worker runs as nobody; give --worker-uids FIRST-LAST for one uid per tenant\"",
                  (unsigned)ident.shared_uid, (unsigned)ident.shared_gid);
    return KILN_OK;
  }
  uint64_t need = 1 + (uint64_t)s->tenants.count;
  uint64_t have = (uint64_t)cfg->worker_uid_last - cfg->worker_uid_first + 1;
  if (have < need)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "--worker-uids %u-%u holds %llu uids; the compile workers and %u tenants "
                       "need %llu",
                       cfg->worker_uid_first, cfg->worker_uid_last, (unsigned long long)have,
                       s->tenants.count, (unsigned long long)need);
  /* The range must be nobody's: a worker under a user's uid could reach that user's files
   * and processes. */
  for (uint64_t u = cfg->worker_uid_first; u <= cfg->worker_uid_last && u - cfg->worker_uid_first < 65536; u++) {
    struct passwd *pw = getpwuid((uid_t)u);
    if (pw)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "--worker-uids %u-%u includes uid %llu, which is the user '%s': give a "
                         "range of unused uids",
                         cfg->worker_uid_first, cfg->worker_uid_last, (unsigned long long)u,
                         pw->pw_name);
  }
  KILN_LOG_INFO("worker_uids", "mode=per_tenant first=%u last=%u", cfg->worker_uid_first,
                cfg->worker_uid_last);
  return KILN_OK;
}

/* The uid and gid worker w runs as; false when kilnd is not root (it keeps kilnd's). */
static kiln_status_t worker_identity(const kiln_worker_t *w, uid_t *uid, gid_t *gid, bool *out_switch) {
  *out_switch = ident.root;
  if (!ident.root) return KILN_OK;
  if (ident.shared) {
    *uid = ident.shared_uid;
    *gid = ident.shared_gid;
    return KILN_OK;
  }
  const kiln_config_t *cfg = &w->server->cfg;
  uint64_t u = cfg->worker_uid_first;
  if (w->kind == KILN_WORKER_DEVICE) u += w->tenant ? w->tenant->index : 0;
  if (u > cfg->worker_uid_last)
    return KILN_STATUS(KILN_E_UNAVAILABLE,
                       "--worker-uids %u-%u has no uid left for tenant '%s' (index %u): widen the "
                       "range and restart kilnd",
                       cfg->worker_uid_first, cfg->worker_uid_last, w->tenant ? w->tenant->name : "",
                       w->tenant ? w->tenant->index : 0);
  *uid = (uid_t)u;
  *gid = (gid_t)u;
  return KILN_OK;
}

void kiln_worker_set_tenant(kiln_worker_t *w, const kiln_device_entry_t *d,
                            const kiln_tenant_t *t) {
  w->device = d;
  w->tenant = t;
}

/* Removes a worker's private directory without following a link anywhere in it: every
 * level is opened O_NOFOLLOW relative to its parent, so a symlink put there by the worker
 * is removed, never walked. */
static void remove_tree_at(int parent, const char *name, int depth) {
  if (unlinkat(parent, name, 0) == 0 || errno != EISDIR || depth > 16) return;
  /* A worker's directory is its uid's, mode 0700. kilnd as root may lack CAP_DAC_OVERRIDE
   * (the systemd unit bounds it to CAP_CHOWN and three others): it takes the directory
   * back first, never following a link, and can then read and empty it as its owner. */
  if (fchownat(parent, name, geteuid(), getegid(), AT_SYMLINK_NOFOLLOW) != 0 && errno != EPERM) return;
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) remove_tree_at(dirfd(d), e->d_name, depth + 1);
  closedir(d);
  unlinkat(parent, name, AT_REMOVEDIR);
}

static void remove_private_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash || slash == path) return;
  char parent[512];
  snprintf(parent, sizeof(parent), "%.*s", (int)(slash - path), path);
  int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (pfd < 0) return;
  remove_tree_at(pfd, slash + 1, 0);
  close(pfd);
}

/* Finds a worker binary: --worker-dir, else next to kilnd, else the build tree layout. */
kiln_status_t kiln_worker_run_print(const char *path, const char *flag, uint64_t max,
                                    kiln_buf_t *out) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return KILN_STATUS(KILN_E_UNAVAILABLE, "pipe: %s", strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  char *argv[] = {(char *)path, (char *)flag, NULL};
  extern char **environ;
  pid_t pid;
  int rc = posix_spawn(&pid, path, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  if (rc) {
    close(p[0]);
    return KILN_STATUS(KILN_E_UNAVAILABLE, "cannot run %s: %s", path, strerror(rc));
  }
  kiln_status_t st = KILN_OK;
  for (;;) {
    st = kiln_buf_reserve(out, 65536);
    if (st) break;
    ssize_t n = read(p[0], out->data + out->len, 65536);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out->len += (size_t)n;
    if (out->len > max) {
      st = KILN_STATUS(KILN_E_INTERNAL, "%s %s printed more than %llu bytes", path, flag,
                       (unsigned long long)max);
      kill(pid, SIGKILL);
      break;
    }
  }
  close(p[0]);
  int ws;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
  if (!st && !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0))
    st = KILN_STATUS(KILN_E_UNAVAILABLE, "%s %s failed with status %d", path, flag, ws);
  return st;
}

kiln_status_t kiln_worker_find_binary(const kiln_server_t *s, const char *name, char *out,
                                      size_t cap) {
  char self[512];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n < 0) n = 0;
  self[n] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  const char *subdirs[] = {"", "/../device/worker", "/../compiler/worker", "/../libexec/kiln"};
  if (s->cfg.worker_dir[0]) {
    snprintf(out, cap, "%s/%s", s->cfg.worker_dir, name);
    if (access(out, X_OK) == 0) return KILN_OK;
    return KILN_STATUS(KILN_E_UNAVAILABLE, "worker binary %s not found in --worker-dir %s", name,
                       s->cfg.worker_dir);
  }
  for (size_t i = 0; i < KILN_ARRAY_SIZE(subdirs); i++) {
    snprintf(out, cap, "%s%s/%s", self, subdirs[i], name);
    if (access(out, X_OK) == 0) return KILN_OK;
  }
  return KILN_STATUS(KILN_E_UNAVAILABLE,
                     "worker binary %s not found next to kilnd (%s); use --worker-dir", name, self);
}

kiln_status_t kiln_worker_create(kiln_server_t *s, kiln_worker_kind_t kind, const char *device_id,
                                 const char *const *argv_tail, kiln_worker_t **out) {
  kiln_worker_t *w = calloc(1, sizeof(*w));
  if (!w) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  w->server = s;
  w->kind = kind;
  snprintf(w->device_id, sizeof(w->device_id), "%s", device_id ? device_id : "");
  kiln_status_t st = kiln_worker_find_binary(s, worker_binary(kind), w->path, sizeof(w->path));
  if (st) {
    free(w);
    return st;
  }
  w->argv[w->argc++] = w->path;
  w->argv[w->argc++] = strdup("--channel-fd");
  w->argv[w->argc++] = strdup("3");
  for (; argv_tail && *argv_tail && w->argc < 14; argv_tail++) w->argv[w->argc++] = strdup(*argv_tail);
  w->argv[w->argc] = NULL;
  *out = w;
  return KILN_OK;
}

void kiln_worker_set_cpus(kiln_worker_t *w, const cpu_set_t *cpus) {
  w->cpus = *cpus;
  w->pinned = true;
}

static void free_outmsgs(incarnation_t *inc) {
  for (outmsg_t *m = inc->head; m;) {
    outmsg_t *n = m->next;
    for (int i = 0; i < m->nfds; i++) close(m->fds[i]);
    free(m->bytes);
    free(m);
    m = n;
  }
  inc->head = inc->tail = NULL;
}

static void maybe_free_incarnation(incarnation_t *inc) {
  if (!inc->poll_closed || !inc->proc_closed) return;
  if (inc->tmp_dir[0]) remove_private_dir(inc->tmp_dir);
  kiln_reader_deinit(&inc->reader);
  kiln_fdq_deinit(&inc->fdq);
  kiln_map_deinit(&inc->pending);
  free_outmsgs(inc);
  free(inc);
}

static void on_poll_closed(uv_handle_t *h) {
  incarnation_t *inc = h->data;
  close(inc->fd);
  inc->poll_closed = true;
  maybe_free_incarnation(inc);
}

static void on_proc_closed(uv_handle_t *h) {
  incarnation_t *inc = h->data;
  inc->proc_closed = true;
  maybe_free_incarnation(inc);
}

/* The process is gone (or must go): every call it held fails with a typed error. */
static void incarnation_fail_all(incarnation_t *inc, kiln_status_t why) {
  kiln_map_t pending = inc->pending;
  kiln_map_init(&inc->pending);
  size_t it = 0;
  void *v;
  while (kiln_map_next(&pending, &it, NULL, &v)) {
    pending_t *p = v;
    pending_done(p, KILN_STATUS(kiln_status_code(why), "%s", kiln_status_message(why)), NULL, NULL, 0);
    free(p);
  }
  kiln_map_deinit(&pending);
  kiln_status_free(why);
}

/* Why a worker died, for the requests it held: a sandbox violation names the system call. */
static void death_reason(const incarnation_t *inc, char *out, size_t cap) {
  if (inc->violation) {
    char name[96];
    kiln_sandbox_syscall_name(inc->violation_arch, (int)inc->violation_nr, name, sizeof(name));
    snprintf(out, cap, "sandbox violation: system call %u (%s), which this worker may not make",
             inc->violation_nr, name);
  } else if (inc->term_signal == SIGSYS) {
    snprintf(out, cap, "sandbox violation: killed by SIGSYS on a system call it may not make "
                       "(which one was not reported)");
  } else if (inc->term_signal) {
    snprintf(out, cap, "signal %d (%s)", inc->term_signal, strsignal(inc->term_signal));
  } else {
    snprintf(out, cap, "exit status %lld", (long long)inc->exit_status);
  }
}

static void incarnation_end(incarnation_t *inc) {
  if (inc->dead) return;
  inc->dead = true;
  kiln_worker_t *w = inc->worker;
  char why[300];
  death_reason(inc, why, sizeof(why));
  if (w && inc->retired) {
    for (incarnation_t **pp = &w->retired; *pp; pp = &(*pp)->next_retired)
      if (*pp == inc) {
        *pp = inc->next_retired;
        break;
      }
  }
  if (w) {
    if (!inc->retired) w->generation++;
    if (!w->destroying) {
      w->restarts++;
      /* A violation ends the worker with an exit status; it is counted as the signal that
       * a SECCOMP kill would have been. */
      kiln_metrics_worker_died(w->kind == KILN_WORKER_DEVICE, w->device_id,
                               inc->violation ? SIGSYS : inc->term_signal, inc->exit_status,
                               inc->kill_code);
    }
    w->last_death_ns = kiln_now_ns();
    if (w->cur == inc) w->cur = NULL;
    KILN_LOG_WARN(inc->violation ? "worker_sandbox_violation" : "worker_died",
                  "kind=%s device=%s pid=%d why=\"%s\" pending=%zu",
                  w->kind == KILN_WORKER_DEVICE ? "device" : "compiler", w->device_id, inc->pid, why,
                  inc->pending.count);
  }
  kiln_code_t code = w && w->kind == KILN_WORKER_COMPILER ? KILN_E_COMPILER_CRASHED
                                                          : KILN_E_DEVICE_FAULT;
  if (inc->kill_code) {
    incarnation_fail_all(inc, KILN_STATUS(inc->kill_code, "%s", inc->kill_reason));
    code = 0;
  }
  if (code)
  incarnation_fail_all(inc, KILN_STATUS(code,
                                        "the %s worker%s%s (pid %d) died: %s; it has been "
                                        "replaced%s",
                                        code == KILN_E_DEVICE_FAULT ? "device" : "compile",
                                        w && w->device_id[0] ? " for " : "",
                                        w ? w->device_id : "", inc->pid, why,
                                        code == KILN_E_DEVICE_FAULT
                                            ? " and the tensors it held are lost"
                                            : ""));
  free_outmsgs(inc);
  if (!uv_is_closing((uv_handle_t *)&inc->poll)) {
    uv_poll_stop(&inc->poll);
    uv_close((uv_handle_t *)&inc->poll, on_poll_closed);
  }
  if (w) kiln_hooks_fire(w->server, KILN_EVENT_SETTLED, NULL);
}

static void read_channel(incarnation_t *inc, bool to_eof);

static void on_process_exit(uv_process_t *p, int64_t status, int sig) {
  incarnation_t *inc = p->data;
  /* What the worker wrote before it died is still in the socket (a last reply, a sandbox
   * violation report): read it before its calls are failed. */
  inc->exited = true;
  if (!inc->dead) read_channel(inc, true);
  inc->exit_status = status;
  inc->term_signal = sig;
  incarnation_end(inc);
  uv_close((uv_handle_t *)p, on_proc_closed);
}

/* [2, "sandbox_violation", [{"syscall": NR, "arch": ARCH}]] from the worker's SIGSYS
 * handler (base/sandbox.c); the process ends right after it. */
static bool handle_violation(incarnation_t *inc, const kiln_rpc_msg_t *m) {
  if (m->type != KILN_RPC_NOTIFICATION || !kiln_rpc_method_is(m, KILN_SANDBOX_VIOLATION) || !m->params)
    return false;
  uint64_t nr = 0, arch = 0;
  kiln_status_t st = kiln_params_u64(m->params, "syscall", true, &nr);
  if (!st) st = kiln_params_u64(m->params, "arch", true, &arch);
  if (st || nr > UINT32_MAX || arch > UINT32_MAX) {
    kiln_status_free(st);
    return false;
  }
  inc->violation = true;
  inc->violation_nr = (uint32_t)nr;
  inc->violation_arch = (uint32_t)arch;
  return true;
}

static void handle_message(incarnation_t *inc, const uint8_t *bytes, size_t len) {
  kiln_rpc_msg_t m;
  bool has;
  kiln_status_t st = kiln_rpc_parse(bytes, len, &m, &has);
  if (!st && handle_violation(inc, &m)) {
    kiln_rpc_msg_deinit(&m);
    return;
  }
  if (!st && m.type == KILN_RPC_NOTIFICATION && kiln_rpc_method_is(&m, KILN_WORKER_ALIVE)) {
    /* A run of a long job ended and the next begins: the watchdog's clock starts again. */
    inc->last_progress_ns = kiln_now_ns();
    kiln_rpc_msg_deinit(&m);
    return;
  }
  if (st || m.type != KILN_RPC_RESPONSE) {
    /* A worker that speaks garbage is broken: end it. */
    KILN_LOG_ERROR("worker_protocol", "pid=%d message=\"%s\"", inc->pid,
                   st ? kiln_status_message(st) : "unexpected message kind");
    kiln_status_free(st);
    kiln_rpc_msg_deinit(&m);
    kill_incarnation(inc);
    return;
  }
  inc->last_progress_ns = kiln_now_ns();
  kiln_status_t err = kiln_rpc_error_to_status(m.error);
  kiln_code_t code = err ? kiln_status_code(err) : (kiln_code_t)0;
  pending_t *p = kiln_map_remove(&inc->pending, (uint64_t)m.msgid + 1);
  if (p) {
    /* A reply that carries fds has them at the front of the queue (they ride on its first
     * byte, and replies come in order); an error reply carries none. */
    int fds[KILN_CHANNEL_MAX_FDS], nfds = 0;
    for (uint32_t i = 0; !err && i < p->reply_nfds && i < KILN_CHANNEL_MAX_FDS; i++) {
      int fd = kiln_fdq_pop(&inc->fdq);
      if (fd < 0) {
        err = KILN_STATUS(KILN_E_INTERNAL, "the worker's reply lacks the fds it carries");
        break;
      }
      fds[nfds++] = fd;
    }
    if (err) {
      for (int i = 0; i < nfds; i++) close(fds[i]);
      nfds = 0;
    }
    pending_done(p, err, err ? NULL : m.result, fds, nfds);
    free(p);
  } else {
    kiln_status_free(err);
  }
  kiln_rpc_msg_deinit(&m);
  /* A device worker answers E_DEVICE_FAULT or E_TIMEOUT and then exits, its context lost
   * (device/worker/main.c). From this reply on, new requests start a fresh worker instead
   * of racing the old one's exit; what was already sent to it fails when it ends. */
  kiln_worker_t *w = inc->worker;
  if (w && w->kind == KILN_WORKER_DEVICE && w->cur == inc &&
      (code == KILN_E_DEVICE_FAULT || code == KILN_E_TIMEOUT)) {
    inc->retired = true;
    inc->next_retired = w->retired;
    w->retired = inc;
    w->cur = NULL;
    w->generation++; /* its modules and tensors are gone with it */
  }
}

static void update_poll(incarnation_t *inc);

static void flush_out(incarnation_t *inc) {
  while (inc->head) {
    outmsg_t *m = inc->head;
    struct iovec iov = {m->bytes + m->off, m->len - m->off};
    ssize_t n = kiln_channel_sendv(inc->fd, &iov, 1, m->off == 0 ? m->fds : NULL,
                                   m->off == 0 ? m->nfds : 0);
    if (n == 0) break;
    if (n < 0) {
      kill_incarnation(inc); /* broken channel: the exit callback reports it */
      free_outmsgs(inc);
      break;
    }
    if (m->off == 0)
      for (int i = 0; i < m->nfds; i++) close(m->fds[i]);
    m->nfds = 0;
    m->off += (size_t)n;
    if (m->off == m->len) {
      inc->head = m->next;
      if (!inc->head) inc->tail = NULL;
      free(m->bytes);
      free(m);
    }
  }
  update_poll(inc);
}

/* Reads and handles what the worker sent: up to 16 buffers, or (to_eof, once the process
 * has exited) everything left in the socket. */
static void read_channel(incarnation_t *inc, bool to_eof) {
  for (int rounds = 0; to_eof || rounds < 16; rounds++) {
    size_t cap;
    void *space = kiln_reader_space(&inc->reader, &cap);
    if (!space) {
      kill_incarnation(inc);
      return;
    }
    int fds[8], nfds;
    bool trunc;
    ssize_t n = kiln_channel_recv(inc->fd, space, cap, fds, 8, &nfds, &trunc);
    for (int i = 0; i < nfds; i++) /* a reply's fds (the compile worker's artifact) */
      if (!kiln_fdq_push(&inc->fdq, fds[i])) close(fds[i]);
    if (n == -EAGAIN) break;
    if (n <= 0) {
      /* EOF: the process is exiting; on_process_exit reports why. Stop polling a dead socket. */
      uv_poll_stop(&inc->poll);
      if (!to_eof) kill_incarnation(inc);
      return;
    }
    kiln_reader_commit(&inc->reader, (size_t)n);
    const uint8_t *msg;
    size_t len;
    kiln_frame_result_t fr;
    while ((fr = kiln_reader_next(&inc->reader, &msg, &len)) == KILN_FRAME_MESSAGE) {
      handle_message(inc, msg, len);
      if (inc->dead) return;
    }
    if (fr == KILN_FRAME_ERROR) {
      kill_incarnation(inc);
      return;
    }
    if (!to_eof && (size_t)n < cap) break;
  }
}

static void on_poll(uv_poll_t *h, int status, int events) {
  incarnation_t *inc = h->data;
  if (status < 0) {
    kill_incarnation(inc);
    return;
  }
  if (events & UV_WRITABLE) flush_out(inc);
  if (!(events & UV_READABLE) || inc->dead) return;
  read_channel(inc, false);
}

static void update_poll(incarnation_t *inc) {
  if (inc->dead || uv_is_closing((uv_handle_t *)&inc->poll)) return;
  uv_poll_start(&inc->poll, UV_READABLE | (inc->head ? UV_WRITABLE : 0), on_poll);
}

static void on_retry(uv_timer_t *t);

static void on_retry_closed(uv_handle_t *h) { free(h); }

/* Records a failed start: logs it, counts it, and sets when the next attempt may be made.
 * Returns the error the calls that needed the process get. */
static kiln_status_t spawn_failed(kiln_worker_t *w, const char *why) {
  w->spawn_failures++;
  uint64_t wait_ms = SPAWN_BACKOFF_FIRST_MS;
  for (uint32_t i = 1; i < w->spawn_failures && wait_ms < SPAWN_BACKOFF_MAX_MS; i++) wait_ms *= 2;
  if (wait_ms > SPAWN_BACKOFF_MAX_MS) wait_ms = SPAWN_BACKOFF_MAX_MS;
  w->retry_at_ns = kiln_now_ns() + wait_ms * 1000000ull;
  snprintf(w->spawn_error, sizeof(w->spawn_error), "%s", why);
  const char *kind = w->kind == KILN_WORKER_DEVICE ? "device" : "compile";
  KILN_LOG_ERROR("worker_spawn_failed",
                 "kind=%s device=%s path=%s error=\"%s\" failures=%u retry_in_ms=%llu", kind,
                 w->device_id, w->path, w->spawn_error, w->spawn_failures,
                 (unsigned long long)wait_ms);
  kiln_metrics_worker_spawn_failed(w->kind == KILN_WORKER_DEVICE);
  if (w->warm && !w->destroying) {
    if (!w->retry && (w->retry = malloc(sizeof(*w->retry)))) {
      uv_timer_init(w->server->loop, w->retry);
      w->retry->data = w;
    }
    if (w->retry) uv_timer_start(w->retry, on_retry, wait_ms, 0);
  }
  return KILN_STATUS(KILN_E_UNAVAILABLE,
                     "the %s worker could not be started (%s); kilnd tries again in %.1f s",
                     kind, w->spawn_error, (double)wait_ms / 1e3);
}

static kiln_status_t spawn(kiln_worker_t *w) {
  kiln_server_t *s = w->server;
  uid_t uid = 0;
  gid_t gid = 0;
  bool switch_uid;
  KILN_RETURN_IF_ERROR(worker_identity(w, &uid, &gid, &switch_uid));
  int pair[2];
  kiln_status_t st = kiln_channel_pair(pair);
  if (st) {
    kiln_status_t failed = spawn_failed(w, kiln_status_message(st));
    kiln_status_free(st);
    return failed;
  }
  incarnation_t *inc = calloc(1, sizeof(*inc));
  if (!inc) {
    close(pair[0]);
    close(pair[1]);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  inc->worker = w;
  inc->fd = pair[0];
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  lim.max_str = 1u << 30; /* compile logs and IR text come back as strings */
  kiln_reader_init(&inc->reader, &lim, 64 * 1024);
  kiln_fdq_init(&inc->fdq);
  kiln_map_init(&inc->pending);

  /* This incarnation's arguments: the worker's own, then whom it runs as, its private
   * directory (compile workers) and its address-space budget (device workers). */
  char *args[24], uid_s[16], gid_s[16], mem_s[24];
  int n = 0;
  for (int i = 0; i < w->argc && n < 14; i++) args[n++] = w->argv[i];
  if (switch_uid) {
    snprintf(uid_s, sizeof(uid_s), "%u", (unsigned)uid);
    snprintf(gid_s, sizeof(gid_s), "%u", (unsigned)gid);
    args[n++] = "--uid";
    args[n++] = uid_s;
    args[n++] = "--gid";
    args[n++] = gid_s;
  }
  if (w->kind == KILN_WORKER_COMPILER) {
    const char *base = getenv("TMPDIR");
    snprintf(inc->tmp_dir, sizeof(inc->tmp_dir), "%s/kiln-compile-XXXXXX",
             base && base[0] == '/' ? base : "/tmp");
    char why[600];
    why[0] = 0;
    if (!mkdtemp(inc->tmp_dir)) {
      snprintf(why, sizeof(why), "cannot make a directory %s: %s", inc->tmp_dir, strerror(errno));
      inc->tmp_dir[0] = 0;
    } else if (switch_uid && chown(inc->tmp_dir, uid, gid) != 0) {
      snprintf(why, sizeof(why), "chown %s: %s", inc->tmp_dir, strerror(errno));
    }
    if (why[0]) {
      close(pair[0]);
      close(pair[1]);
      if (inc->tmp_dir[0]) rmdir(inc->tmp_dir);
      kiln_reader_deinit(&inc->reader);
      kiln_fdq_deinit(&inc->fdq);
      kiln_map_deinit(&inc->pending);
      free(inc);
      return spawn_failed(w, why);
    }
    args[n++] = "--tmp-dir";
    args[n++] = inc->tmp_dir;
  }
  /* The tenant's bound on this device (memory.c): its quota or the device's capacity. */
  uint64_t bound =
      w->device && w->tenant ? kiln_device_memory_bound(w->device, w->tenant) : UINT64_MAX;
  if (bound && bound != UINT64_MAX) {
    snprintf(mem_s, sizeof(mem_s), "%llu", (unsigned long long)bound);
    args[n++] = "--max-memory";
    args[n++] = mem_s;
  }
  args[n] = NULL;

  uv_stdio_container_t stdio[4];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_INHERIT_FD;
  stdio[1].data.fd = 2; /* a worker's stdout is not ours to share: send it to the log */
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = 2;
  stdio[3].flags = UV_INHERIT_FD;
  stdio[3].data.fd = pair[1];
  uv_process_options_t opt = {0};
  opt.file = w->path;
  opt.args = args;
  opt.exit_cb = on_process_exit;
  opt.stdio = stdio;
  opt.stdio_count = 4;
  inc->proc.data = inc;
  /* A pinned worker (--pin compile=CPUS): a child inherits the affinity of the thread that
   * spawns it, so kilnd's thread takes the worker's cores for the spawn and its own back
   * after. The worker and every thread it starts are on their cores from the first
   * instruction; setting the child's affinity after the spawn would race with them. */
  cpu_set_t own;
  bool pinned = w->pinned && sched_getaffinity(0, sizeof(own), &own) == 0;
  if (pinned && sched_setaffinity(0, sizeof(w->cpus), &w->cpus) != 0) {
    KILN_LOG_WARN("pin_failed", "kind=%s cores=%d errno=%d", w->kind == KILN_WORKER_DEVICE ? "device" : "compiler",
                  CPU_COUNT(&w->cpus), errno);
    pinned = false;
  }
  int rc = uv_spawn(s->loop, &inc->proc, &opt);
  if (pinned) (void)sched_setaffinity(0, sizeof(own), &own);
  close(pair[1]);
  if (rc) {
    /* uv_spawn initialised the handle even though it failed: it must be closed, and the
     * incarnation may be freed only in the close callback (freeing it here made libuv read
     * freed memory when it finished the close: kilnd aborted in uv__finish_close). */
    close(pair[0]);
    inc->fd = -1;
    inc->worker = NULL;
    inc->dead = true;
    inc->poll_closed = true; /* the poll handle was never started */
    uv_close((uv_handle_t *)&inc->proc, on_proc_closed);
    char why[700];
    snprintf(why, sizeof(why), "%s: %s", w->path, uv_strerror(rc));
    return spawn_failed(w, why);
  }
  if (w->spawn_failures)
    KILN_LOG_INFO("worker_spawn_recovered", "kind=%s device=%s failures=%u",
                  w->kind == KILN_WORKER_DEVICE ? "device" : "compiler", w->device_id,
                  w->spawn_failures);
  w->spawn_failures = 0;
  w->retry_at_ns = 0;
  inc->pid = inc->proc.pid;
  fcntl(inc->fd, F_SETFL, fcntl(inc->fd, F_GETFL) | O_NONBLOCK);
  uv_poll_init(s->loop, &inc->poll, inc->fd);
  inc->poll.data = inc;
  update_poll(inc);
  w->cur = inc;
  KILN_LOG_INFO("worker_start", "kind=%s device=%s pid=%d generation=%u",
                w->kind == KILN_WORKER_DEVICE ? "device" : "compiler", w->device_id, inc->pid,
                w->generation);
  return KILN_OK;
}

/* Starts the process, unless the last start failed and its back-off has not passed: then
 * the caller gets E_UNAVAILABLE at once. */
static kiln_status_t ensure_running(kiln_worker_t *w) {
  if (w->cur) return KILN_OK;
  if (w->spawn_failures && kiln_now_ns() < w->retry_at_ns) {
    double in_s = (double)(w->retry_at_ns - kiln_now_ns()) / 1e9;
    return KILN_STATUS(KILN_E_UNAVAILABLE,
                       "the %s worker could not be started (%s); kilnd tries again in %.1f s",
                       w->kind == KILN_WORKER_DEVICE ? "device" : "compile", w->spawn_error, in_s);
  }
  return spawn(w);
}

static void on_retry(uv_timer_t *t) {
  kiln_worker_t *w = t->data;
  if (w->cur || w->destroying) return;
  kiln_status_free(spawn(w)); /* a failure rearms the timer */
}

kiln_status_t kiln_worker_call(kiln_worker_t *w, const char *method, const kiln_buf_t *params,
                               const int *fds, int nfds, kiln_worker_cb cb, void *ctx) {
  return kiln_worker_call_budget(w, method, params, fds, nfds, 0, cb, ctx);
}

void kiln_worker_watchdog(kiln_worker_t *w, uint64_t now_ns) {
  incarnation_t *inc = w->cur;
  if (!inc || inc->dead || inc->kill_code || inc->pending.count == 0) return;
  uint64_t budget = 0;
  size_t it = 0;
  void *v;
  while (kiln_map_next(&inc->pending, &it, NULL, &v)) {
    const pending_t *p = v;
    if (!p->budget_ms) return;
    if (p->budget_ms > budget) budget = p->budget_ms;
  }
  uint64_t silent_ms = (now_ns - inc->last_progress_ns) / 1000000u;
  if (silent_ms <= budget + KILN_WORKER_WATCHDOG_GRACE_MS) return;
  char why[160];
  snprintf(why, sizeof(why), "kernel past its deadline of %llu ms (device worker silent %.1f s): worker ended, its tensors lost",
           (unsigned long long)budget, (double)silent_ms / 1e3);
  KILN_LOG_WARN("worker_watchdog", "device=%s pid=%d budget_ms=%llu silent_ms=%llu", w->device_id, inc->pid,
                (unsigned long long)budget, (unsigned long long)silent_ms);
  kiln_worker_kill(w, KILN_E_TIMEOUT, why);
}

static kiln_status_t call(kiln_worker_t *w, const char *method, const kiln_buf_t *params,
                          const int *fds, int nfds, uint64_t budget_ms, pending_t how) {
  kiln_status_t st = KILN_OK;
  if (w->destroying) st = KILN_STATUS(KILN_E_UNAVAILABLE, "the server is shutting down");
  if (!st) st = ensure_running(w);
  outmsg_t *m = NULL;
  pending_t *p = NULL;
  if (!st) {
    m = calloc(1, sizeof(*m));
    p = malloc(sizeof(*p));
    if (!m || !p) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (st) {
    for (int i = 0; i < nfds; i++) close(fds[i]);
    free(m);
    free(p);
    return st;
  }
  incarnation_t *inc = w->cur;
  uint32_t msgid = w->next_msgid++;
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &b);
  kiln_rpc_pack_request_head(&pk.pk, msgid, method);
  st = kiln_packer_status(&pk);
  if (!st) st = kiln_buf_append(&b, params->data, params->len);
  if (!st) st = kiln_map_put(&inc->pending, (uint64_t)msgid + 1, p);
  if (st) {
    kiln_buf_deinit(&b);
    for (int i = 0; i < nfds; i++) close(fds[i]);
    free(m);
    free(p);
    return st;
  }
  m->bytes = kiln_buf_release(&b, &m->len);
  m->nfds = nfds;
  if (nfds) memcpy(m->fds, fds, sizeof(int) * (size_t)nfds);
  *p = how;
  p->budget_ms = budget_ms;
  if (inc->pending.count == 1) inc->last_progress_ns = kiln_now_ns(); /* p is the only one */
  if (inc->tail) inc->tail->next = m;
  else inc->head = m;
  inc->tail = m;
  flush_out(inc);
  return KILN_OK;
}

kiln_status_t kiln_worker_call_budget(kiln_worker_t *w, const char *method, const kiln_buf_t *params,
                                      const int *fds, int nfds, uint64_t budget_ms, kiln_worker_cb cb,
                                      void *ctx) {
  return call(w, method, params, fds, nfds, budget_ms, (pending_t){.cb = cb, .ctx = ctx});
}

kiln_status_t kiln_worker_call_fds(kiln_worker_t *w, const char *method, const kiln_buf_t *params,
                                   const int *fds, int nfds, uint32_t reply_nfds,
                                   kiln_worker_fd_cb cb, void *ctx) {
  return call(w, method, params, fds, nfds, 0,
              (pending_t){.fd_cb = cb, .reply_nfds = reply_nfds, .ctx = ctx});
}

bool kiln_worker_idle(const kiln_worker_t *w) { return !w->cur; }

/* SIGKILL to every child of every thread of kilnd (/proc/self/task/T/children). */
static void kill_children(void) {
  DIR *tasks = opendir("/proc/self/task");
  for (struct dirent *t; tasks && (t = readdir(tasks));) {
    if (t->d_name[0] == '.') continue;
    char path[300];
    snprintf(path, sizeof(path), "/proc/self/task/%s/children", t->d_name);
    FILE *f = fopen(path, "re");
    int pid;
    while (f && fscanf(f, "%d", &pid) == 1)
      if (pid > 0) kill(pid, SIGKILL);
    if (f) fclose(f);
  }
  if (tasks) closedir(tasks);
}

void kiln_workers_reap_all(void) {
  uint64_t deadline = kiln_now_ns() + 2000000000ull;
  for (;;) {
    pid_t p = waitpid(-1, NULL, WNOHANG);
    if (p < 0 && errno != EINTR) return; /* ECHILD: none left */
    if (p > 0) continue;
    if (kiln_now_ns() > deadline) break;
    usleep(10000);
  }
  KILN_LOG_WARN("workers_kill", "message=\"workers still running 2 s after the shutdown: killed\"");
  kill_children();
  while (waitpid(-1, NULL, 0) > 0 || errno == EINTR) {}
}

kiln_status_t kiln_worker_start(kiln_worker_t *w) {
  w->warm = true;
  return ensure_running(w);
}

void kiln_worker_kill(kiln_worker_t *w, kiln_code_t code, const char *reason) {
  incarnation_t *inc = w->cur;
  if (!inc || inc->dead) return;
  inc->kill_code = code;
  snprintf(inc->kill_reason, sizeof(inc->kill_reason), "%s", reason);
  kill(inc->pid, SIGKILL);
}

/* Cuts an incarnation loose from its worker at shutdown: its calls fail now, and its exit
 * callbacks (which free it) never reach back into the worker. */
static void abandon(incarnation_t *inc) {
  /* Closing the channel asks the worker to exit; SIGTERM makes sure. Its private directory
   * goes now: the loop ends before the process handle's close callback would run. */
  kill(inc->pid, SIGTERM);
  if (inc->tmp_dir[0]) remove_private_dir(inc->tmp_dir);
  inc->tmp_dir[0] = 0;
  inc->worker = NULL;
  inc->next_retired = NULL;
  inc->dead = true;
  incarnation_fail_all(inc, KILN_STATUS(KILN_E_CANCELLED, "the server is shutting down"));
  if (!uv_is_closing((uv_handle_t *)&inc->poll)) {
    uv_poll_stop(&inc->poll);
    uv_close((uv_handle_t *)&inc->poll, on_poll_closed);
  }
}

void kiln_worker_destroy(kiln_worker_t *w) {
  w->destroying = true;
  for (incarnation_t *r = w->retired, *next; r; r = next) {
    next = r->next_retired;
    if (!r->dead) abandon(r);
  }
  w->retired = NULL;
  if (w->cur) abandon(w->cur);
  w->cur = NULL;
  if (w->retry) uv_close((uv_handle_t *)w->retry, on_retry_closed);
  for (int i = 1; i < w->argc; i++) free(w->argv[i]);
  free(w);
}
