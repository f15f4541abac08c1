/* Worker supervision: spawns a worker process, talks to it over the channel (MessagePack-RPC
 * with fds alongside), and turns its death into typed errors for the requests it held.
 *
 * Each process lifetime is an "incarnation" with its own handles and pending calls, so a
 * dead process's handles can finish closing while a new one already runs. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "protocol/channel.h"
#include "server/metrics.h"
#include "server/server.h"

typedef struct pending {
  kiln_worker_cb cb;
  void *ctx;
  uint64_t budget_ms; /* 0: unbounded */
} pending_t;

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
  kiln_reader_t reader;
  kiln_map_t pending; /* msgid -> pending_t* */
  uint64_t last_progress_ns; /* the last answer, or the first call made to an idle worker */
  outmsg_t *head, *tail;
} incarnation_t;

struct kiln_worker {
  kiln_server_t *server;
  kiln_worker_kind_t kind;
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
  /* Starting the process failed: calls fail fast with E_UNAVAILABLE until retry_at_ns, and
   * each failure in a row doubles the wait (SPAWN_BACKOFF_*). */
  uint32_t spawn_failures;
  uint64_t retry_at_ns;
  char spawn_error[700];
  uv_timer_t *retry; /* heap: it may still be closing after the worker is freed */
};

#define SPAWN_BACKOFF_FIRST_MS 100
#define SPAWN_BACKOFF_MAX_MS 30000

uint32_t kiln_worker_generation(const kiln_worker_t *w) { return w->generation; }
int kiln_worker_pid(const kiln_worker_t *w) { return w->cur && !w->cur->dead ? w->cur->pid : 0; }
uint32_t kiln_worker_restarts(const kiln_worker_t *w) { return w->restarts; }
uint32_t kiln_worker_inflight(const kiln_worker_t *w) {
  return w->cur ? (uint32_t)w->cur->pending.count : 0;
}

static const char *worker_binary(kiln_worker_kind_t k) {
  return k == KILN_WORKER_DEVICE ? "kiln-device-worker" : "kiln-compile-worker";
}

/* Finds a worker binary: --worker-dir, else next to kilnd, else the build tree layout. */
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
  kiln_reader_deinit(&inc->reader);
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
    p->cb(p->ctx, KILN_STATUS(kiln_status_code(why), "%s", kiln_status_message(why)), NULL);
    free(p);
  }
  kiln_map_deinit(&pending);
  kiln_status_free(why);
}

static void incarnation_end(incarnation_t *inc) {
  if (inc->dead) return;
  inc->dead = true;
  kiln_worker_t *w = inc->worker;
  char why[200];
  if (inc->term_signal)
    snprintf(why, sizeof(why), "signal %d (%s)", inc->term_signal, strsignal(inc->term_signal));
  else snprintf(why, sizeof(why), "exit status %lld", (long long)inc->exit_status);
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
      kiln_metrics_worker_died(w->kind == KILN_WORKER_DEVICE, w->device_id, inc->term_signal,
                               inc->exit_status, inc->kill_code);
    }
    w->last_death_ns = kiln_now_ns();
    if (w->cur == inc) w->cur = NULL;
    KILN_LOG_WARN("worker_died", "kind=%s device=%s pid=%d why=\"%s\" pending=%zu",
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
  if (w) kiln_server_maybe_finish_drain(w->server);
}

static void on_process_exit(uv_process_t *p, int64_t status, int sig) {
  incarnation_t *inc = p->data;
  inc->exited = true;
  inc->exit_status = status;
  inc->term_signal = sig;
  incarnation_end(inc);
  uv_close((uv_handle_t *)p, on_proc_closed);
}

static void handle_message(incarnation_t *inc, const uint8_t *bytes, size_t len) {
  kiln_rpc_msg_t m;
  bool has;
  kiln_status_t st = kiln_rpc_parse(bytes, len, &m, &has);
  if (st || m.type != KILN_RPC_RESPONSE) {
    /* A worker that speaks garbage is broken: end it. */
    KILN_LOG_ERROR("worker_protocol", "pid=%d message=\"%s\"", inc->pid,
                   st ? kiln_status_message(st) : "unexpected message kind");
    kiln_status_free(st);
    kiln_rpc_msg_deinit(&m);
    kill(inc->pid, SIGKILL);
    return;
  }
  inc->last_progress_ns = kiln_now_ns();
  kiln_status_t err = kiln_rpc_error_to_status(m.error);
  kiln_code_t code = err ? kiln_status_code(err) : (kiln_code_t)0;
  pending_t *p = kiln_map_remove(&inc->pending, (uint64_t)m.msgid + 1);
  if (p) {
    p->cb(p->ctx, err, err ? NULL : m.result);
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
      kill(inc->pid, SIGKILL); /* broken channel: the exit callback reports it */
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

static void on_poll(uv_poll_t *h, int status, int events) {
  incarnation_t *inc = h->data;
  if (status < 0) {
    kill(inc->pid, SIGKILL);
    return;
  }
  if (events & UV_WRITABLE) flush_out(inc);
  if (!(events & UV_READABLE) || inc->dead) return;
  for (int rounds = 0; rounds < 16; rounds++) {
    size_t cap;
    void *space = kiln_reader_space(&inc->reader, &cap);
    if (!space) {
      kill(inc->pid, SIGKILL);
      return;
    }
    int fds[8], nfds;
    bool trunc;
    ssize_t n = kiln_channel_recv(inc->fd, space, cap, fds, 8, &nfds, &trunc);
    for (int i = 0; i < nfds; i++) close(fds[i]); /* workers send no fds */
    if (n == -EAGAIN) break;
    if (n <= 0) {
      /* EOF: the process is exiting; on_process_exit reports why. Stop polling a dead socket. */
      uv_poll_stop(&inc->poll);
      if (!inc->exited) kill(inc->pid, SIGKILL);
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
      kill(inc->pid, SIGKILL);
      return;
    }
    if ((size_t)n < cap) break;
  }
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
  kiln_map_init(&inc->pending);

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
  opt.args = w->argv;
  opt.exit_cb = on_process_exit;
  opt.stdio = stdio;
  opt.stdio_count = 4;
  inc->proc.data = inc;
  int rc = uv_spawn(s->loop, &inc->proc, &opt);
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

kiln_status_t kiln_worker_call_budget(kiln_worker_t *w, const char *method, const kiln_buf_t *params,
                                      const int *fds, int nfds, uint64_t budget_ms, kiln_worker_cb cb,
                                      void *ctx) {
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
  kiln_buf_append(&b, params->data, params->len);
  m->bytes = kiln_buf_release(&b, &m->len);
  m->nfds = nfds;
  if (nfds) memcpy(m->fds, fds, sizeof(int) * (size_t)nfds);
  p->cb = cb;
  p->ctx = ctx;
  p->budget_ms = budget_ms;
  if (inc->pending.count == 0) inc->last_progress_ns = kiln_now_ns();
  kiln_map_put(&inc->pending, (uint64_t)msgid + 1, p);
  if (inc->tail) inc->tail->next = m;
  else inc->head = m;
  inc->tail = m;
  flush_out(inc);
  return KILN_OK;
}

bool kiln_worker_idle(const kiln_worker_t *w) { return !w->cur; }

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
  /* Closing the channel asks the worker to exit; SIGTERM makes sure. */
  kill(inc->pid, SIGTERM);
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
