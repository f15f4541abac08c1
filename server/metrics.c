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
#include "server/compile.h"

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
  req_hist_t *by_method; /* kiln_method_count() + 1 (unknown methods) */
  uint64_t bytes_in, bytes_out, conns_accepted;
  kiln_map_t launches; /* (device index, tenant index, timed) -> count */
  kiln_map_t refusals; /* (device index, tenant index, capacity) -> count */
  kiln_map_t device_ns; /* (device index, tenant index, 0) -> device-side nanoseconds */
  death_t *deaths;
  uint32_t num_deaths, cap_deaths;
  uint64_t http_by_code[3]; /* 200, 404, 405 */
  uint64_t spawn_failures[2]; /* compile, device */
} metrics_t;

static metrics_t M;

static req_hist_t *hist(int method) {
  if (!M.by_method) {
    M.by_method = calloc((size_t)kiln_method_count() + 1, sizeof(req_hist_t));
    if (!M.by_method) return NULL;
  }
  return &M.by_method[method >= 0 && method < kiln_method_count() ? method : kiln_method_count()];
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

static void head(FILE *f, const char *name, const char *type, const char *help) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample; `labels` holds name, value pairs and ends with NULL (or is NULL). */
static void sample(FILE *f, const char *name, const char *const *labels, double v) {
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

static void gauge1(FILE *f, const char *name, const char *help, double v) {
  head(f, name, "gauge", help);
  sample(f, name, NULL, v);
}

static void counter1(FILE *f, const char *name, const char *help, double v) {
  head(f, name, "counter", help);
  sample(f, name, NULL, v);
}

/* Histogram samples from non-cumulative bucket counts (the last one is +Inf). */
static void histogram(FILE *f, const char *name, const char *lname, const char *lvalue,
                      const double *bounds, size_t nb, const uint64_t *counts, double sum) {
  char bname[128], le[32];
  snprintf(bname, sizeof(bname), "%s_bucket", name);
  uint64_t cum = 0;
  for (size_t b = 0; b <= nb; b++) {
    cum += counts[b];
    if (b < nb) snprintf(le, sizeof(le), "%g", bounds[b]);
    else snprintf(le, sizeof(le), "+Inf");
    const char *l[] = {lname, lvalue, "le", le, NULL};
    sample(f, bname, lname ? l : l + 2, (double)cum);
  }
  const char *l[] = {lname, lvalue, NULL};
  snprintf(bname, sizeof(bname), "%s_sum", name);
  sample(f, bname, lname ? l : NULL, sum);
  snprintf(bname, sizeof(bname), "%s_count", name);
  sample(f, bname, lname ? l : NULL, (double)cum);
}

static void render_requests(FILE *f) {
  int nm = kiln_method_count();
  head(f, "kiln_requests_total", "counter",
       "RPC requests answered, by method and result code (OK or the error name).");
  for (int m = 0; M.by_method && m <= nm; m++)
    for (int c = 0; c < KILN_E_COUNT_; c++) {
      if (!M.by_method[m].count[c]) continue;
      const char *l[] = {"method", m < nm ? kiln_method_name(m) : "unknown", "code",
                         c ? kiln_code_name((kiln_code_t)c) : "OK", NULL};
      sample(f, "kiln_requests_total", l, (double)M.by_method[m].count[c]);
    }
  head(f, "kiln_request_duration_seconds", "histogram",
       "Time from a request's arrival to its answer, by method.");
  for (int m = 0; M.by_method && m <= nm; m++) {
    uint64_t any = 0;
    for (size_t b = 0; b < REQ_BUCKETS; b++) any += M.by_method[m].buckets[b];
    if (any)
      histogram(f, "kiln_request_duration_seconds", "method",
                m < nm ? kiln_method_name(m) : "unknown", req_bounds, KILN_ARRAY_SIZE(req_bounds),
                M.by_method[m].buckets, M.by_method[m].sum_s);
  }
}

static void render_errors(FILE *f, kiln_server_t *s) {
  head(f, "kiln_errors_total", "counter",
       "Errors sent to clients by code: request errors, compile_batch item errors and "
       "protocol errors that closed a connection.");
  for (int c = 1; c < KILN_E_COUNT_; c++) {
    const char *l[] = {"code", kiln_code_name((kiln_code_t)c), NULL};
    sample(f, "kiln_errors_total", l, (double)s->errors_by_code[c]);
  }
}

static void render_compile(FILE *f, kiln_server_t *s) {
  kiln_compile_metrics_t cm;
  kiln_compile_metrics(s, &cm);
  gauge1(f, "kiln_compile_workers", "Compile worker processes configured (--compile-workers).",
         cm.workers);
  gauge1(f, "kiln_compile_workers_busy", "Compile workers running a job now.", cm.busy);
  head(f, "kiln_compile_queue_depth", "gauge",
       "Compile jobs waiting for a worker, by priority and by the tenant that queued them.");
  for (int p = 0; p < 2; p++)
    for (uint32_t i = 0; i < s->tenants.count; i++) {
      kiln_tenant_t *t = s->tenants.all[i];
      if (t->disabled) continue;
      const char *l[] = {"priority", p ? "batch" : "interactive", "tenant", t->name, NULL};
      sample(f, "kiln_compile_queue_depth", l, (double)kiln_compile_queued(s, t, p));
    }
  head(f, "kiln_compiles_total", "counter",
       "Builds run by compile workers, by result (ok, error, crashed, timeout).");
  const char *results[] = {"ok", "error", "crashed", "timeout"};
  uint64_t nres[] = {cm.compiles, cm.errors, cm.crashes, cm.timeouts};
  for (int i = 0; i < 4; i++) {
    const char *l[] = {"result", results[i], NULL};
    sample(f, "kiln_compiles_total", l, (double)nres[i]);
  }
  counter1(f, "kiln_compile_module_hits_total",
           "Compile items answered from kilnd's module table or the artifact cache without a build.",
           (double)cm.hits);
  counter1(f, "kiln_compile_single_flight_joins_total",
           "Compile items that joined an identical build already queued or running.",
           (double)cm.joins);
  counter1(f, "kiln_compile_cancelled_total", "Queued compile items cancelled by clients.",
           (double)cm.cancelled);
  head(f, "kiln_compile_duration_seconds", "histogram",
       "Duration of successful builds in a compile worker.");
  histogram(f, "kiln_compile_duration_seconds", NULL, NULL, cm.bucket_le, cm.nbuckets, cm.buckets,
            cm.seconds_total);
  gauge1(f, "kiln_modules", "Decoded modules held in kilnd's module table.", (double)cm.modules);

  const kiln_cache_stats_t *c = &cm.cache;
  head(f, "kiln_cache_hits_total", "counter", "Artifact cache hits, by tier (memory, disk).");
  const char *lm[] = {"tier", "memory", NULL}, *ld[] = {"tier", "disk", NULL};
  sample(f, "kiln_cache_hits_total", lm, (double)c->hits_mem);
  sample(f, "kiln_cache_hits_total", ld, (double)c->hits_disk);
  counter1(f, "kiln_cache_misses_total", "Artifact cache lookups found in neither tier.",
           (double)c->misses);
  head(f, "kiln_cache_evictions_total", "counter",
       "Artifact cache entries evicted to stay within a tier's bound.");
  sample(f, "kiln_cache_evictions_total", lm, (double)c->evictions_mem);
  sample(f, "kiln_cache_evictions_total", ld, (double)c->evictions_disk);
  head(f, "kiln_cache_entries", "gauge", "Artifact cache entries, by tier.");
  sample(f, "kiln_cache_entries", lm, (double)c->entries_mem);
  sample(f, "kiln_cache_entries", ld, (double)c->entries_disk);
  head(f, "kiln_cache_bytes", "gauge",
       "Artifact cache size: payload bytes in memory, whole files on disk.");
  sample(f, "kiln_cache_bytes", lm, (double)c->bytes_mem);
  sample(f, "kiln_cache_bytes", ld, (double)c->bytes_disk);
  counter1(f, "kiln_cache_corrupt_total", "Cache entries that failed verification and were deleted.",
           (double)c->corrupt);
  counter1(f, "kiln_cache_write_errors_total", "Cache disk writes that failed (the entry stayed in memory).",
           (double)c->write_errors);
  gauge1(f, "kiln_cache_writes_pending", "Cache disk writes queued or running.",
         (double)c->writes_pending);
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
    sample(f, name, l, (double)(uintptr_t)v);
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
  head(f, "kiln_device_memory_bytes", "gauge", "Bytes of live tensors, by device and tenant.");
  for (uint32_t d = 0; bytes && d < s->num_devices; d++)
    for (uint32_t i = 0; i < s->tenants.count; i++) {
      kiln_tenant_t *t = s->tenants.all[i];
      if (t->disabled && !count[(size_t)d * nt + t->index]) continue;
      const char *l[] = {"device", s->devices[d].id, "tenant", t->name, NULL};
      sample(f, "kiln_device_memory_bytes", l, (double)bytes[(size_t)d * nt + t->index]);
    }
  head(f, "kiln_tensors", "gauge", "Live tensors, by device and tenant.");
  for (uint32_t d = 0; count && d < s->num_devices; d++)
    for (uint32_t i = 0; i < s->tenants.count; i++) {
      kiln_tenant_t *t = s->tenants.all[i];
      if (t->disabled && !count[(size_t)d * nt + t->index]) continue;
      const char *l[] = {"device", s->devices[d].id, "tenant", t->name, NULL};
      sample(f, "kiln_tensors", l, (double)count[(size_t)d * nt + t->index]);
    }
  free(bytes);
  free(count);
  uint64_t graphs, graph_bytes, runs_ok, runs_failed;
  kiln_graphs_counts(s, NULL, &graphs, &graph_bytes, &runs_ok, &runs_failed);
  head(f, "kiln_graphs", "gauge", "Live graphs, all tenants (docs/graph.md).");
  sample(f, "kiln_graphs", NULL, (double)graphs);
  head(f, "kiln_graph_bytes", "gauge", "Device bytes of the live graphs' constants and arenas.");
  sample(f, "kiln_graph_bytes", NULL, (double)graph_bytes);
  head(f, "kiln_graph_runs_total", "counter", "graph_run and graph_time requests sent to a device worker, by status.");
  const char *ok[] = {"status", "ok", NULL}, *bad[] = {"status", "error", NULL};
  sample(f, "kiln_graph_runs_total", ok, (double)runs_ok);
  sample(f, "kiln_graph_runs_total", bad, (double)runs_failed);

  head(f, "kiln_device_memory_capacity_bytes", "gauge",
       "Tensor bytes kilnd lets the device hold, all tenants (cpu: --cpu-memory).");
  for (uint32_t d = 0; d < s->num_devices; d++) {
    const char *l[] = {"device", s->devices[d].id, NULL};
    sample(f, "kiln_device_memory_capacity_bytes", l, (double)s->devices[d].capacity);
  }
  head(f, "kiln_device_memory_used_bytes", "gauge",
       "Tensor bytes charged to the device's capacity: live tensors and allocations under way.");
  for (uint32_t d = 0; d < s->num_devices; d++) {
    const char *l[] = {"device", s->devices[d].id, NULL};
    sample(f, "kiln_device_memory_used_bytes", l, (double)s->devices[d].used);
  }
  head(f, "kiln_memory_refusals_total", "counter",
       "Allocations answered E_RESOURCE_EXHAUSTED before any worker allocated, by device, tenant "
       "and reason (quota: the tenant's memory quota; capacity: the device's free capacity).");
  by_device_tenant(f, s, &M.refusals, "kiln_memory_refusals_total", "reason", "capacity", "quota");
  head(f, "kiln_launches_total", "counter",
       "Launches (method launch) and timings (method time) handed to a device worker, by device "
       "and tenant.");
  by_device_tenant(f, s, &M.launches, "kiln_launches_total", "method", "time", "launch");
  head(f, "kiln_device_seconds_total", "counter",
       "Device-side seconds of the tenant's launches (their elapsed) and timings (their measured "
       "runs), by device and tenant.");
  it = 0;
  uint64_t k;
  while (kiln_map_next(&M.device_ns, &it, &k, &v)) {
    uint32_t d = (uint32_t)(k >> 40) - 1, ti = (uint32_t)(k >> 1) & 0x7fffffffu;
    if (d >= s->num_devices) continue;
    const char *l[] = {"device", s->devices[d].id, "tenant", tenant_name(s, ti), NULL};
    sample(f, "kiln_device_seconds_total", l, (double)(uintptr_t)v / 1e9);
  }
  head(f, "kiln_launches_in_flight", "gauge", "Launches and timings running on a device, all tenants.");
  for (uint32_t d = 0; d < s->num_devices; d++) {
    const char *l[] = {"device", s->devices[d].id, NULL};
    sample(f, "kiln_launches_in_flight", l, s->devices[d].running);
  }
  head(f, "kiln_device_leased", "gauge", "1 while a tenant holds a lease on the device.");
  for (uint32_t d = 0; d < s->num_devices; d++) {
    const char *l[] = {"device", s->devices[d].id, NULL};
    sample(f, "kiln_device_leased", l, s->devices[d].lease_tenant != NULL);
  }
  head(f, "kiln_device_workers", "gauge",
       "Device worker processes running (one per device and tenant that used it).");
  for (uint32_t d = 0; d < s->num_devices; d++) {
    uint32_t n = 0;
    it = 0;
    while (kiln_map_next(&s->devices[d].slots, &it, NULL, &v)) {
      kiln_dslot_t *sl = v;
      n += sl->worker && kiln_worker_pid(sl->worker) > 0;
    }
    const char *l[] = {"device", s->devices[d].id, NULL};
    sample(f, "kiln_device_workers", l, n);
  }
  head(f, "kiln_worker_spawn_failures_total", "counter",
       "Worker processes kilnd could not start (the requests that needed them got E_UNAVAILABLE; "
       "kilnd tries again with back-off), by kind.");
  for (int k = 0; k < 2; k++) {
    const char *l[] = {"kind", k ? "device" : "compile", NULL};
    sample(f, "kiln_worker_spawn_failures_total", l, (double)M.spawn_failures[k]);
  }
  head(f, "kiln_worker_restarts_total", "counter",
       "Worker processes that died while in use and are replaced, by kind (compile, device), "
       "device, tenant and reason (timeout, killed, the signal's name, exit_N).");
  head(f, "kiln_device_faults_total", "counter",
       "Device worker deaths (a fault in a kernel or the device ends the worker; its tensors are "
       "lost), by device and tenant.");
  for (uint32_t i = 0; i < M.num_deaths; i++) {
    const death_t *e = &M.deaths[i];
    const char *l[] = {"kind", e->device ? "device" : "compile", "device", e->device_id,
                       "tenant", e->tenant, "reason", e->reason, NULL};
    sample(f, "kiln_worker_restarts_total", l, (double)e->n);
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
    sample(f, "kiln_device_faults_total", l, (double)n);
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
    head(f, fields[k].name, fields[k].type, fields[k].help);
    for (uint32_t i = 0; i < s->tenants.count; i++) {
      kiln_tenant_t *t = s->tenants.all[i];
      if (t->disabled) continue;
      uint64_t v[] = {t->connections, t->launches, t->compiles, t->modules.count, t->requests,
                      t->errors};
      const char *l[] = {"tenant", t->name, NULL};
      sample(f, fields[k].name, l, (double)v[k]);
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
    gauge1(f, "process_resident_memory_bytes", "kilnd's resident memory.", (double)rss * (double)page);
    gauge1(f, "process_virtual_memory_bytes", "kilnd's virtual memory.", (double)vsize);
    counter1(f, "process_cpu_seconds_total", "kilnd's CPU time, user and system.",
             (double)(utime + stime) / (double)tick);
    if (boot > 0)
      gauge1(f, "process_start_time_seconds", "When kilnd started, in seconds since the epoch.",
             boot + (double)start / (double)tick);
  }
  gauge1(f, "process_open_fds", "kilnd's open file descriptors.", fds);
  gauge1(f, "process_max_fds", "kilnd's limit of open file descriptors.", (double)rl.rlim_cur);
}

char *kiln_metrics_render(kiln_server_t *s, size_t *out_len) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return NULL;
  head(f, "kiln_build_info", "gauge", "Always 1; the labels say which kilnd this is.");
  const char *l[] = {"version", KILN_VERSION, "compiler", kiln_compile_identity(s), NULL};
  sample(f, "kiln_build_info", l, 1);
  render_process(f);
  gauge1(f, "kiln_uptime_seconds", "Seconds since kilnd started.",
         (double)(kiln_now_ns() - s->start_ns) / 1e9);
  gauge1(f, "kiln_draining", "1 once SIGTERM or SIGINT started the drain.", s->draining);
  gauge1(f, "kiln_connections_open", "Client connections open now.", s->num_conns);
  counter1(f, "kiln_connections_accepted_total", "Client connections accepted.",
           (double)M.conns_accepted);
  counter1(f, "kiln_received_bytes_total", "Bytes read from client connections.",
           (double)M.bytes_in);
  counter1(f, "kiln_sent_bytes_total", "Bytes written to client connections.", (double)M.bytes_out);
  gauge1(f, "kiln_requests_in_flight", "Requests received and not yet answered.",
         (double)s->total_inflight);
  render_requests(f);
  render_errors(f, s);
  render_compile(f, s);
  render_devices(f, s);
  render_tenants(f, s);
  head(f, "kiln_metrics_scrapes_total", "counter",
       "HTTP requests to the metrics endpoint answered by kilnd, by status code.");
  static const char *const codes[] = {"200", "404", "405"};
  for (int i = 0; i < 3; i++) {
    const char *lc[] = {"code", codes[i], NULL};
    sample(f, "kiln_metrics_scrapes_total", lc, (double)M.http_by_code[i]);
  }
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  *out_len = len;
  return text;
}
