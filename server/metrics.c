/* The counters only metrics keep, and the Prometheus exposition text of everything
 * (docs/operations.md lists every metric). The HTTP side is metrics_http.c. */
#include "server/metrics.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

/* Request duration buckets (seconds), the last one +Inf. */
static const double req_bounds[] = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05,
                                    0.1,    0.5,    1,     5,     30};
#define REQ_BUCKETS (KILN_ARRAY_SIZE(req_bounds) + 1)

typedef struct req_hist {
  uint64_t count[KILN_E_COUNT_]; /* by code */
  uint64_t buckets[REQ_BUCKETS];
  double sum_s;
} req_hist_t;

typedef struct death {
  bool device;
  char device_id[32];
  char tenant[KILN_TENANT_NAME_MAX];
  char reason[24];
  uint64_t n;
} death_t;

typedef struct metrics {
  req_hist_t *by_method; /* the server's num_methods + 1 (unknown methods) */
  uint64_t bytes_in, bytes_out, conns_accepted;
  kiln_map_t launches; /* (device index, tenant index, timed) -> count */
  kiln_map_t refusals; /* (device index, tenant index, capacity) -> count */
  kiln_map_t device_ns; /* (device index, tenant index, 0) -> device-side nanoseconds */
  death_t *deaths;
  uint32_t num_deaths, cap_deaths;
  uint64_t http_by_code[3]; /* 200, 404, 405 */
  uint64_t spawn_failures[2]; /* compile, device */
  char compiler[256];         /* kiln_build_info's compiler label */
  kiln_metrics_collect_fn collectors[KILN_METRICS_COLLECTORS_MAX];
  uint32_t num_collectors;
} metrics_t;

static metrics_t M;

static req_hist_t *hist(int method) {
  int nm = kiln_server_get()->num_methods;
  if (!M.by_method) {
    M.by_method = calloc((size_t)nm + 1, sizeof(req_hist_t));
    if (!M.by_method) return NULL;
  }
  return &M.by_method[method >= 0 && method < nm ? method : nm];
}

void kiln_metrics_request_done(int method, kiln_code_t code, uint64_t duration_ns) {
  req_hist_t *h = hist(method);
  if (!h) return;
  h->count[(unsigned)code < KILN_E_COUNT_ ? code : KILN_E_INTERNAL]++;
  double s = (double)duration_ns / 1e9;
  size_t b = 0;
  while (b < KILN_ARRAY_SIZE(req_bounds) && s > req_bounds[b]) b++;
  h->buckets[b]++;
  h->sum_s += s;
}

void kiln_metrics_bytes(uint64_t in, uint64_t out) {
  M.bytes_in += in;
  M.bytes_out += out;
}

void kiln_metrics_conn_accepted(void) { M.conns_accepted++; }

void kiln_metrics_http_answered(unsigned code) {
  M.http_by_code[code == 404 ? 1 : code == 405 ? 2 : 0]++;
}

static uint64_t launch_key(uint32_t device, uint32_t tenant, bool timed) {
  return (uint64_t)(device + 1) << 40 | (uint64_t)tenant << 1 | timed;
}

void kiln_metrics_launch(const kiln_device_entry_t *d, const kiln_tenant_t *t, bool timed) {
  kiln_server_t *s = kiln_server_get();
  uint64_t k = launch_key((uint32_t)(d - s->devices), t->index, timed);
  uintptr_t n = (uintptr_t)kiln_map_get(&M.launches, k);
  kiln_status_free(kiln_map_put(&M.launches, k, (void *)(n + 1)));
}

void kiln_metrics_device_seconds(const kiln_device_entry_t *d, const kiln_tenant_t *t, double seconds) {
  if (!(seconds > 0)) return; /* NaN, negative or nothing: a worker's number is not trusted blindly */
  kiln_server_t *s = kiln_server_get();
  uint64_t k = launch_key((uint32_t)(d - s->devices), t->index, false);
  uintptr_t n = (uintptr_t)kiln_map_get(&M.device_ns, k);
  double ns = seconds * 1e9;
  uintptr_t add = ns < 1e18 ? (uintptr_t)ns : (uintptr_t)1e18;
  kiln_status_free(kiln_map_put(&M.device_ns, k, (void *)(n + add)));
}

void kiln_metrics_memory_refused(const kiln_device_entry_t *d, const kiln_tenant_t *t, bool capacity) {
  kiln_server_t *s = kiln_server_get();
  uint64_t k = launch_key((uint32_t)(d - s->devices), t->index, capacity);
  uintptr_t n = (uintptr_t)kiln_map_get(&M.refusals, k);
  kiln_status_free(kiln_map_put(&M.refusals, k, (void *)(n + 1)));
}

void kiln_metrics_worker_died(bool device, const char *label, int term_signal, int64_t exit_status,
                              kiln_code_t kill_code) {
  death_t d = {.device = device};
  const char *slash = strchr(label, '/');
  size_t dn = slash ? (size_t)(slash - label) : strlen(label);
  snprintf(d.device_id, sizeof(d.device_id), "%.*s", (int)dn, label);
  if (slash) snprintf(d.tenant, sizeof(d.tenant), "%s", slash + 1);
  if (kill_code == KILN_E_TIMEOUT) snprintf(d.reason, sizeof(d.reason), "timeout");
  else if (kill_code) snprintf(d.reason, sizeof(d.reason), "killed");
  else if (term_signal) {
    const char *abbrev = sigabbrev_np(term_signal);
    if (abbrev) snprintf(d.reason, sizeof(d.reason), "SIG%s", abbrev);
    else snprintf(d.reason, sizeof(d.reason), "signal_%d", term_signal);
  } else
    snprintf(d.reason, sizeof(d.reason), "exit_%d", (int)(exit_status & 0xff));
  for (uint32_t i = 0; i < M.num_deaths; i++) {
    death_t *e = &M.deaths[i];
    if (e->device == d.device && !strcmp(e->device_id, d.device_id) && !strcmp(e->tenant, d.tenant) &&
        !strcmp(e->reason, d.reason)) {
      e->n++;
      return;
    }
  }
  if (M.num_deaths == M.cap_deaths) {
    uint32_t cap = M.cap_deaths ? 2 * M.cap_deaths : 16;
    death_t *n = realloc(M.deaths, cap * sizeof(*n));
    if (!n) return;
    M.deaths = n;
    M.cap_deaths = cap;
  }
  d.n = 1;
  M.deaths[M.num_deaths++] = d;
}


void kiln_metrics_worker_spawn_failed(bool device) { M.spawn_failures[device]++; }

void kiln_metrics_set_compiler(const char *identity) {
  snprintf(M.compiler, sizeof(M.compiler), "%s", identity);
}

void kiln_metrics_collector_add(kiln_metrics_collect_fn fn) {
  if (M.num_collectors == KILN_METRICS_COLLECTORS_MAX) {
    /* A build-time mistake (more collectors than the table holds), found at start. */
    fprintf(stderr, "kilnd: more than %d metrics collectors\n", KILN_METRICS_COLLECTORS_MAX);
    abort();
  }
  M.collectors[M.num_collectors++] = fn;
}

/* --- the exposition text ---------------------------------------------------------------- */

/* A label value as the format wants it: backslash, double quote and newline escaped. */
static void put_label(FILE *f, const char *v) {
  for (; *v; v++) {
    if (*v == '\\') fputs("\\\\", f);
    else if (*v == '"') fputs("\\\"", f);
    else if (*v == '\n') fputs("\\n", f);
    else fputc(*v, f);
  }
}

void kiln_metrics_head(FILE *f, const char *name, const char *type, const char *help) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample; `labels` holds name, value pairs and ends with NULL (or is NULL). */
void kiln_metrics_sample(FILE *f, const char *name, const char *const *labels, double v) {
  fputs(name, f);
  if (labels && labels[0]) {
    fputc('{', f);
    for (int i = 0; labels[i]; i += 2) {
      fprintf(f, "%s%s=\"", i ? "," : "", labels[i]);
      put_label(f, labels[i + 1]);
      fputc('"', f);
    }
    fputc('}', f);
  }
  if (v == (double)(uint64_t)v && v < 1e18) fprintf(f, " %llu\n", (unsigned long long)v);
  else fprintf(f, " %.9g\n", v);
}

void kiln_metrics_gauge(FILE *f, const char *name, const char *help, double v) {
  kiln_metrics_head(f, name, "gauge", help);
  kiln_metrics_sample(f, name, NULL, v);
}

void kiln_metrics_counter(FILE *f, const char *name, const char *help, double v) {
  kiln_metrics_head(f, name, "counter", help);
  kiln_metrics_sample(f, name, NULL, v);
}

/* Histogram samples from non-cumulative bucket counts (the last one is +Inf). */
void kiln_metrics_histogram(FILE *f, const char *name, const char *lname, const char *lvalue,
                            const double *bounds, size_t nb, const uint64_t *counts, double sum) {
  char bname[128], le[32];
  snprintf(bname, sizeof(bname), "%s_bucket", name);
  uint64_t cum = 0;
  for (size_t b = 0; b <= nb; b++) {
    cum += counts[b];
    if (b < nb) snprintf(le, sizeof(le), "%g", bounds[b]);
    else snprintf(le, sizeof(le), "+Inf");
    const char *l[] = {lname, lvalue, "le", le, NULL};
    kiln_metrics_sample(f, bname, lname ? l : l + 2, (double)cum);
  }
  const char *l[] = {lname, lvalue, NULL};
  snprintf(bname, sizeof(bname), "%s_sum", name);
  kiln_metrics_sample(f, bname, lname ? l : NULL, sum);
  snprintf(bname, sizeof(bname), "%s_count", name);
  kiln_metrics_sample(f, bname, lname ? l : NULL, (double)cum);
}

static void render_requests(FILE *f, kiln_server_t *s) {
  int nm = s->num_methods;
  kiln_metrics_head(f, "kiln_requests_total", "counter",
                    "RPC requests answered, by method and result code (OK or the error name).");
  for (int m = 0; M.by_method && m <= nm; m++)
    for (int c = 0; c < KILN_E_COUNT_; c++) {
      if (!M.by_method[m].count[c]) continue;
      const char *l[] = {"method", m < nm ? s->methods[m].name : "unknown", "code",
                         c ? kiln_code_name((kiln_code_t)c) : "OK", NULL};
      kiln_metrics_sample(f, "kiln_requests_total", l, (double)M.by_method[m].count[c]);
    }
  kiln_metrics_head(f, "kiln_request_duration_seconds", "histogram",
                    "Time from a request's arrival to its answer, by method.");
  for (int m = 0; M.by_method && m <= nm; m++) {
    uint64_t any = 0;
    for (size_t b = 0; b < REQ_BUCKETS; b++) any += M.by_method[m].buckets[b];
    if (any)
      kiln_metrics_histogram(
          f, "kiln_request_duration_seconds", "method", m < nm ? s->methods[m].name : "unknown",
          req_bounds, KILN_ARRAY_SIZE(req_bounds), M.by_method[m].buckets, M.by_method[m].sum_s);
  }
}

static void render_errors(FILE *f, kiln_server_t *s) {
  kiln_metrics_head(f, "kiln_errors_total", "counter",
                    "Errors sent to clients by code: request errors, compile_batch item errors and "
                    "protocol errors that closed a connection.");
  for (int c = 1; c < KILN_E_COUNT_; c++) {
    const char *l[] = {"code", kiln_code_name((kiln_code_t)c), NULL};
    kiln_metrics_sample(f, "kiln_errors_total", l, (double)s->errors_by_code[c]);
  }
}

static const char *tenant_name(kiln_server_t *s, uint32_t index) {
  for (uint32_t i = 0; i < s->tenants.count; i++)
    if (s->tenants.all[i]->index == index) return s->tenants.all[i]->name;
  return "?";
}

/* The samples of a counter kept in a map keyed by launch_key(device, tenant, flag), with a
 * third label whose value is `if1` or `if0` by the flag. */
static void by_device_tenant(FILE *f, kiln_server_t *s, const kiln_map_t *m, const char *name,
                             const char *label, const char *if1, const char *if0) {
  size_t it = 0;
  uint64_t k;
  void *v;
  while (kiln_map_next(m, &it, &k, &v)) {
    uint32_t d = (uint32_t)(k >> 40) - 1, ti = (uint32_t)(k >> 1) & 0x7fffffffu;
    if (d >= s->num_devices) continue;
    const char *l[] = {"device", s->devices[d].id, "tenant", tenant_name(s, ti),
                       label, (k & 1) ? if1 : if0, NULL};
    kiln_metrics_sample(f, name, l, (double)(uintptr_t)v);
  }
}

static void render_devices(FILE *f, kiln_server_t *s) {
  uint32_t nt = 0;
  for (uint32_t i = 0; i < s->tenants.count; i++)
    if (s->tenants.all[i]->index > nt) nt = s->tenants.all[i]->index;
  nt++;
  size_t cells = (size_t)s->num_devices * nt;
  uint64_t *bytes = calloc(cells ? cells : 1, sizeof(uint64_t));
  uint64_t *count = calloc(cells ? cells : 1, sizeof(uint64_t));
  size_t it = 0;
  void *v;
  while (bytes && count && kiln_map_next(&s->tensors, &it, NULL, &v)) {
    kiln_tensor_t *t = v;
    size_t cell = (size_t)(t->device - s->devices) * nt + (t->tenant->index < nt ? t->tenant->index : 0);
    bytes[cell] += t->desc.nbytes;
    count[cell]++;
  }
  kiln_metrics_head(f, "kiln_device_memory_bytes", "gauge",
                    "Bytes of live tensors, by device and tenant.");
  for (uint32_t d = 0; bytes && d < s->num_devices; d++)
    for (uint32_t i = 0; i < s->tenants.count; i++) {
      kiln_tenant_t *t = s->tenants.all[i];
      if (t->disabled && !count[(size_t)d * nt + t->index]) continue;
      const char *l[] = {"device", s->devices[d].id, "tenant", t->name, NULL};
      kiln_metrics_sample(f, "kiln_device_memory_bytes", l,
                          (double)bytes[(size_t)d * nt + t->index]);
    }
  kiln_metrics_head(f, "kiln_tensors", "gauge", "Live tensors, by device and tenant.");
  for (uint32_t d = 0; count && d < s->num_devices; d++)
    for (uint32_t i = 0; i < s->tenants.count; i++) {
      kiln_tenant_t *t = s->tenants.all[i];
      if (t->disabled && !count[(size_t)d * nt + t->index]) continue;
      const char *l[] = {"device", s->devices[d].id, "tenant", t->name, NULL};
      kiln_metrics_sample(f, "kiln_tensors", l, (double)count[(size_t)d * nt + t->index]);
    }
  free(bytes);
  free(count);

  kiln_metrics_head(f, "kiln_device_memory_capacity_bytes", "gauge",
                    "Tensor bytes kilnd lets the device hold, all tenants (cpu: --cpu-memory).");
  for (uint32_t d = 0; d < s->num_devices; d++) {
    const char *l[] = {"device", s->devices[d].id, NULL};
    kiln_metrics_sample(f, "kiln_device_memory_capacity_bytes", l, (double)s->devices[d].capacity);
  }
  kiln_metrics_head(
      f, "kiln_device_memory_used_bytes", "gauge",
      "Tensor bytes charged to the device's capacity: live tensors and allocations under way.");
  for (uint32_t d = 0; d < s->num_devices; d++) {
    const char *l[] = {"device", s->devices[d].id, NULL};
    kiln_metrics_sample(f, "kiln_device_memory_used_bytes", l, (double)s->devices[d].used);
  }
  kiln_metrics_head(
      f, "kiln_memory_refusals_total", "counter",
      "Allocations answered E_RESOURCE_EXHAUSTED before any worker allocated, by device, tenant "
      "and reason (quota: the tenant's memory quota; capacity: the device's free capacity).");
  by_device_tenant(f, s, &M.refusals, "kiln_memory_refusals_total", "reason", "capacity", "quota");
  kiln_metrics_head(
      f, "kiln_launches_total", "counter",
      "Launches (method launch) and timings (method time) handed to a device worker, by device "
      "and tenant.");
  by_device_tenant(f, s, &M.launches, "kiln_launches_total", "method", "time", "launch");
  kiln_metrics_head(
      f, "kiln_device_seconds_total", "counter",
      "Device-side seconds of the tenant's launches (their elapsed) and timings (their measured "
      "runs), by device and tenant.");
  it = 0;
  uint64_t k;
  while (kiln_map_next(&M.device_ns, &it, &k, &v)) {
    uint32_t d = (uint32_t)(k >> 40) - 1, ti = (uint32_t)(k >> 1) & 0x7fffffffu;
    if (d >= s->num_devices) continue;
    const char *l[] = {"device", s->devices[d].id, "tenant", tenant_name(s, ti), NULL};
    kiln_metrics_sample(f, "kiln_device_seconds_total", l, (double)(uintptr_t)v / 1e9);
  }
  kiln_metrics_head(f, "kiln_launches_in_flight", "gauge",
                    "Launches and timings running on a device, all tenants.");
  for (uint32_t d = 0; d < s->num_devices; d++) {
    const char *l[] = {"device", s->devices[d].id, NULL};
    kiln_metrics_sample(f, "kiln_launches_in_flight", l, s->devices[d].running);
  }
  kiln_metrics_head(f, "kiln_device_leased", "gauge",
                    "1 while a tenant holds a lease on the device.");
  for (uint32_t d = 0; d < s->num_devices; d++) {
    const char *l[] = {"device", s->devices[d].id, NULL};
    kiln_metrics_sample(f, "kiln_device_leased", l, s->devices[d].lease_tenant != NULL);
  }
  kiln_metrics_head(
      f, "kiln_worker_spawn_failures_total", "counter",
      "Worker processes kilnd could not start (the requests that needed them got E_UNAVAILABLE; "
      "kilnd tries again with back-off), by kind.");
  for (int k = 0; k < 2; k++) {
    const char *l[] = {"kind", k ? "device" : "compile", NULL};
    kiln_metrics_sample(f, "kiln_worker_spawn_failures_total", l, (double)M.spawn_failures[k]);
  }
  kiln_metrics_head(
      f, "kiln_worker_restarts_total", "counter",
      "Worker processes that died while in use and are replaced, by kind (compile, device), "
      "device, tenant and reason (timeout, killed, the signal's name, exit_N).");
  kiln_metrics_head(
      f, "kiln_device_faults_total", "counter",
      "Device worker deaths (a fault in a kernel or the device ends the worker; its tensors are "
      "lost), by device and tenant.");
  for (uint32_t i = 0; i < M.num_deaths; i++) {
    const death_t *e = &M.deaths[i];
    const char *l[] = {"kind", e->device ? "device" : "compile", "device", e->device_id,
                       "tenant", e->tenant, "reason", e->reason, NULL};
    kiln_metrics_sample(f, "kiln_worker_restarts_total", l, (double)e->n);
  }
  /* Faults sum the reasons of each (device, tenant). */
  for (uint32_t i = 0; i < M.num_deaths; i++) {
    const death_t *e = &M.deaths[i];
    bool first = e->device;
    for (uint32_t j = 0; first && j < i; j++)
      first = !(M.deaths[j].device && !strcmp(M.deaths[j].device_id, e->device_id) &&
                !strcmp(M.deaths[j].tenant, e->tenant));
    if (!first) continue;
    uint64_t n = 0;
    for (uint32_t j = i; j < M.num_deaths; j++)
      if (M.deaths[j].device && !strcmp(M.deaths[j].device_id, e->device_id) &&
          !strcmp(M.deaths[j].tenant, e->tenant))
        n += M.deaths[j].n;
    const char *l[] = {"device", e->device_id, "tenant", e->tenant, NULL};
    kiln_metrics_sample(f, "kiln_device_faults_total", l, (double)n);
  }
}

static void render_tenants(FILE *f, kiln_server_t *s) {
  static const struct {
    const char *name, *type, *help;
  } fields[] = {
      {"kiln_tenant_connections", "gauge", "Open connections authenticated as the tenant."},
      {"kiln_tenant_launches_in_flight", "gauge", "The tenant's launches and timings in flight."},
      {"kiln_tenant_compiles_in_flight", "gauge", "The tenant's compile items queued or running."},
      {"kiln_tenant_modules", "gauge", "Modules the tenant may use (it compiled them)."},
      {"kiln_tenant_requests_total", "counter", "Requests the tenant sent."},
      {"kiln_tenant_errors_total", "counter", "Requests of the tenant answered with an error."},
  };
  for (size_t k = 0; k < KILN_ARRAY_SIZE(fields); k++) {
    kiln_metrics_head(f, fields[k].name, fields[k].type, fields[k].help);
    for (uint32_t i = 0; i < s->tenants.count; i++) {
      kiln_tenant_t *t = s->tenants.all[i];
      if (t->disabled) continue;
      uint64_t v[] = {t->connections, t->launches, t->compiles, t->modules.count, t->requests,
                      t->errors};
      const char *l[] = {"tenant", t->name, NULL};
      kiln_metrics_sample(f, fields[k].name, l, (double)v[k]);
    }
  }
}

/* The process metrics every Prometheus client library exports (process_*), from /proc. */
static void render_process(FILE *f) {
  long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  unsigned long utime = 0, stime = 0, vsize = 0;
  unsigned long long start = 0;
  long rss = 0;
  FILE *st = fopen("/proc/self/stat", "re");
  char buf[1024];
  size_t n = st ? fread(buf, 1, sizeof(buf) - 1, st) : 0;
  if (st) fclose(st);
  buf[n] = 0;
  /* After the command name in parentheses (which may hold spaces): fields 3 on. */
  const char *p = strrchr(buf, ')');
  bool ok = p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d "
                                "%*d %*d %llu %lu %ld", &utime, &stime, &start, &vsize, &rss) == 5;
  double boot = 0;
  FILE *sf = fopen("/proc/stat", "re");
  char line[256];
  while (sf && fgets(line, sizeof(line), sf))
    if (sscanf(line, "btime %lf", &boot) == 1) break;
  if (sf) fclose(sf);
  int fds = 0;
  DIR *d = opendir("/proc/self/fd");
  for (struct dirent *e; d && (e = readdir(d));) fds += e->d_name[0] != '.';
  if (d) closedir(d);
  fds -= d != NULL; /* the directory's own descriptor */
  struct rlimit rl = {0, 0};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (ok && tick > 0) {
    kiln_metrics_gauge(f, "process_resident_memory_bytes", "kilnd's resident memory.",
                       (double)rss * (double)page);
    kiln_metrics_gauge(f, "process_virtual_memory_bytes", "kilnd's virtual memory.", (double)vsize);
    kiln_metrics_counter(f, "process_cpu_seconds_total", "kilnd's CPU time, user and system.",
                         (double)(utime + stime) / (double)tick);
    if (boot > 0)
      kiln_metrics_gauge(f, "process_start_time_seconds",
                         "When kilnd started, in seconds since the epoch.",
                         boot + (double)start / (double)tick);
  }
  kiln_metrics_gauge(f, "process_open_fds", "kilnd's open file descriptors.", fds);
  kiln_metrics_gauge(f, "process_max_fds", "kilnd's limit of open file descriptors.",
                     (double)rl.rlim_cur);
}

char *kiln_metrics_render(kiln_server_t *s, size_t *out_len) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return NULL;
  kiln_metrics_head(f, "kiln_build_info", "gauge", "Always 1; the labels say which kilnd this is.");
  const char *l[] = {"version", KILN_VERSION, "compiler", M.compiler, NULL};
  kiln_metrics_sample(f, "kiln_build_info", l, 1);
  render_process(f);
  kiln_metrics_gauge(f, "kiln_uptime_seconds", "Seconds since kilnd started.",
                     (double)(kiln_now_ns() - s->start_ns) / 1e9);
  kiln_metrics_gauge(f, "kiln_draining", "1 once SIGTERM or SIGINT started the drain.",
                     s->draining);
  kiln_metrics_gauge(f, "kiln_connections_open", "Client connections open now.", s->num_conns);
  kiln_metrics_counter(f, "kiln_connections_accepted_total", "Client connections accepted.",
                       (double)M.conns_accepted);
  kiln_metrics_counter(f, "kiln_received_bytes_total", "Bytes read from client connections.",
                       (double)M.bytes_in);
  kiln_metrics_counter(f, "kiln_sent_bytes_total", "Bytes written to client connections.",
                       (double)M.bytes_out);
  kiln_metrics_gauge(f, "kiln_requests_in_flight", "Requests received and not yet answered.",
                     (double)s->total_inflight);
  render_requests(f, s);
  render_errors(f, s);
  for (uint32_t i = 0; i < M.num_collectors; i++) M.collectors[i](f, s);
  render_devices(f, s);
  render_tenants(f, s);
  kiln_metrics_head(f, "kiln_metrics_scrapes_total", "counter",
                    "HTTP requests to the metrics endpoint answered by kilnd, by status code.");
  static const char *const codes[] = {"200", "404", "405"};
  for (int i = 0; i < 3; i++) {
    const char *lc[] = {"code", codes[i], NULL};
    kiln_metrics_sample(f, "kiln_metrics_scrapes_total", lc, (double)M.http_by_code[i]);
  }
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  *out_len = len;
  return text;
}
