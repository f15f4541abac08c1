/* The metric families of compile, graphs and device workers (docs/operations.md lists every
 * metric): collectors main.c adds to metrics.c, which names none of these parts itself. */
#include "base/util.h"
#include "server/compile.h"
#include "server/metrics.h"

void kiln_compile_collect(FILE *f, kiln_server_t *s) {
  kiln_compile_metrics_t cm;
  kiln_compile_metrics(s, &cm);
  kiln_metrics_gauge(f, "kiln_compile_workers",
                     "Compile worker processes configured (--compile-workers).", cm.workers);
  kiln_metrics_gauge(f, "kiln_compile_workers_busy", "Compile workers running a job now.", cm.busy);
  kiln_metrics_head(
      f, "kiln_compile_queue_depth", "gauge",
      "Compile jobs waiting for a worker, by priority and by the tenant that queued them.");
  for (int p = 0; p < 2; p++)
    for (uint32_t i = 0; i < s->tenants.count; i++) {
      kiln_tenant_t *t = s->tenants.all[i];
      if (t->disabled) continue;
      const char *l[] = {"priority", p ? "batch" : "interactive", "tenant", t->name, NULL};
      kiln_metrics_sample(f, "kiln_compile_queue_depth", l, (double)kiln_compile_queued(s, t, p));
    }
  kiln_metrics_head(f, "kiln_compiles_total", "counter",
                    "Builds run by compile workers, by result (ok, error, crashed, timeout).");
  const char *results[] = {"ok", "error", "crashed", "timeout"};
  uint64_t nres[] = {cm.compiles, cm.errors, cm.crashes, cm.timeouts};
  for (int i = 0; i < 4; i++) {
    const char *l[] = {"result", results[i], NULL};
    kiln_metrics_sample(f, "kiln_compiles_total", l, (double)nres[i]);
  }
  kiln_metrics_counter(
      f, "kiln_compile_module_hits_total",
      "Compile items answered from kilnd's module table or the artifact cache without a build.",
      (double)cm.hits);
  kiln_metrics_counter(f, "kiln_compile_single_flight_joins_total",
                       "Compile items that joined an identical build already queued or running.",
                       (double)cm.joins);
  kiln_metrics_counter(f, "kiln_compile_cancelled_total",
                       "Queued compile items cancelled by clients.", (double)cm.cancelled);
  kiln_metrics_head(f, "kiln_compile_duration_seconds", "histogram",
                    "Duration of successful builds in a compile worker.");
  kiln_metrics_histogram(f, "kiln_compile_duration_seconds", NULL, NULL, cm.bucket_le, cm.nbuckets,
                         cm.buckets, cm.seconds_total);
  kiln_metrics_gauge(f, "kiln_modules", "Decoded modules held in kilnd's module table.",
                     (double)cm.modules);

  const kiln_cache_stats_t *c = &cm.cache;
  kiln_metrics_head(f, "kiln_cache_hits_total", "counter",
                    "Artifact cache hits, by tier (memory, disk).");
  const char *lm[] = {"tier", "memory", NULL}, *ld[] = {"tier", "disk", NULL};
  kiln_metrics_sample(f, "kiln_cache_hits_total", lm, (double)c->hits_mem);
  kiln_metrics_sample(f, "kiln_cache_hits_total", ld, (double)c->hits_disk);
  kiln_metrics_counter(f, "kiln_cache_misses_total",
                       "Artifact cache lookups found in neither tier.", (double)c->misses);
  kiln_metrics_head(f, "kiln_cache_evictions_total", "counter",
                    "Artifact cache entries evicted to stay within a tier's bound.");
  kiln_metrics_sample(f, "kiln_cache_evictions_total", lm, (double)c->evictions_mem);
  kiln_metrics_sample(f, "kiln_cache_evictions_total", ld, (double)c->evictions_disk);
  kiln_metrics_head(f, "kiln_cache_entries", "gauge", "Artifact cache entries, by tier.");
  kiln_metrics_sample(f, "kiln_cache_entries", lm, (double)c->entries_mem);
  kiln_metrics_sample(f, "kiln_cache_entries", ld, (double)c->entries_disk);
  kiln_metrics_head(f, "kiln_cache_bytes", "gauge",
                    "Artifact cache size: payload bytes in memory, whole files on disk.");
  kiln_metrics_sample(f, "kiln_cache_bytes", lm, (double)c->bytes_mem);
  kiln_metrics_sample(f, "kiln_cache_bytes", ld, (double)c->bytes_disk);
  kiln_metrics_counter(f, "kiln_cache_corrupt_total",
                       "Cache entries that failed verification and were deleted.",
                       (double)c->corrupt);
  kiln_metrics_counter(f, "kiln_cache_write_errors_total",
                       "Cache disk writes that failed (the entry stayed in memory).",
                       (double)c->write_errors);
  kiln_metrics_gauge(f, "kiln_cache_writes_pending", "Cache disk writes queued or running.",
                     (double)c->writes_pending);
  if (cm.remote_on) kiln_remote_stats_render(&cm.remote, f); /* --cache-remote (server/fleet/) */
}

void kiln_graphs_collect(FILE *f, kiln_server_t *s) {
  uint64_t graphs, graph_bytes, runs_ok, runs_failed;
  kiln_graphs_counts(s, NULL, &graphs, &graph_bytes, &runs_ok, &runs_failed);
  kiln_metrics_head(f, "kiln_graphs", "gauge", "Live graphs, all tenants (docs/graph.md).");
  kiln_metrics_sample(f, "kiln_graphs", NULL, (double)graphs);
  kiln_metrics_head(f, "kiln_graph_bytes", "gauge",
                    "Device bytes of the live graphs' constants and arenas.");
  kiln_metrics_sample(f, "kiln_graph_bytes", NULL, (double)graph_bytes);
  kiln_metrics_head(f, "kiln_graph_runs_total", "counter",
                    "graph_run and graph_time requests sent to a device worker, by status.");
  const char *ok[] = {"status", "ok", NULL}, *bad[] = {"status", "error", NULL};
  kiln_metrics_sample(f, "kiln_graph_runs_total", ok, (double)runs_ok);
  kiln_metrics_sample(f, "kiln_graph_runs_total", bad, (double)runs_failed);
}

void kiln_devices_collect(FILE *f, kiln_server_t *s) {
  kiln_metrics_head(f, "kiln_device_workers", "gauge",
                    "Device worker processes running (one per device and tenant that used it).");
  for (uint32_t d = 0; d < s->num_devices; d++) {
    uint32_t n = 0;
    size_t it = 0;
    void *v;
    while (kiln_map_next(&s->devices[d].slots, &it, NULL, &v)) {
      kiln_dslot_t *sl = v;
      n += sl->worker && kiln_worker_pid(sl->worker) > 0;
    }
    const char *l[] = {"device", s->devices[d].id, NULL};
    kiln_metrics_sample(f, "kiln_device_workers", l, n);
  }
}
