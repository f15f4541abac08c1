/* Prometheus metrics of kilnd: the counters that no other module keeps, and `GET /metrics`
 * on --metrics tcp:HOST:PORT (text exposition format 0.0.4, docs/operations.md lists every
 * metric).
 *
 * The HTTP side is libmicrohttpd without threads of its own: its epoll descriptor is polled
 * by the loop and MHD_run is called from there, so the page is rendered on the loop thread
 * that owns every number it reads (STYLE rule 8). Loop thread only, like the rest of
 * server/. */
#ifndef KILN_SERVER_METRICS_H
#define KILN_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "server/server.h"

/* Starts the HTTP endpoint (metrics_http.c) on `spec` ("tcp:HOST:PORT", port 0 picks one) and writes its
 * URL ("http://127.0.0.1:40123/metrics") to out_url. */
KILN_MUST_USE kiln_status_t kiln_metrics_start(kiln_server_t *s, const char *spec, char *out_url, size_t cap);
/* Stops the endpoint (at the end of a drain); open scrapes are cut. */
void kiln_metrics_stop(kiln_server_t *s);

/* Counters kept here. `method` is the dispatch index (-1: unknown method); `code` 0 is
 * success. */
void kiln_metrics_request_done(int method, kiln_code_t code, uint64_t duration_ns);
void kiln_metrics_bytes(uint64_t in, uint64_t out);
void kiln_metrics_conn_accepted(void);
void kiln_metrics_http_answered(unsigned code); /* 200, 404 or 405 (metrics_http.c) */
/* A launch or timing handed to the device worker of (device, tenant). */
void kiln_metrics_launch(const kiln_device_entry_t *d, const kiln_tenant_t *t, bool timed);
/* Device-side seconds a launch (its `elapsed`) or a timing (its measured runs) took on the
 * device for the tenant. */
void kiln_metrics_device_seconds(const kiln_device_entry_t *d, const kiln_tenant_t *t, double seconds);
/* An allocation refused for the tenant's memory quota (capacity false) or for the device's
 * free capacity (capacity true). */
void kiln_metrics_memory_refused(const kiln_device_entry_t *d, const kiln_tenant_t *t, bool capacity);
/* A worker process died while kilnd still needed it (it is replaced). `label` is the
 * worker's label ("" for compile workers, "DEVICE/TENANT" for device workers); the reason
 * is "timeout" when kilnd killed it for its time limit, "killed" for another kill by
 * kilnd, the signal's name when a signal ended it, else "exit_N". */
void kiln_metrics_worker_died(bool device, const char *label, int term_signal, int64_t exit_status,
                              kiln_code_t kill_code);
/* Starting a worker process failed (kilnd retries with back-off; worker.c). */
void kiln_metrics_worker_spawn_failed(bool device);

/* --- what other parts count ------------------------------------------------------------
 * metrics.c keeps its own counters and reads the server's fields; what other parts of kilnd
 * count, they render themselves: a collector writes its metric families (each whole, head then
 * samples) with the writers below, and main.c adds the collectors at start. They run in the
 * order added, after the request and error families. So metrics.c names no part above it. */
#include <stdio.h>
typedef void (*kiln_metrics_collect_fn)(FILE *f, kiln_server_t *s);
#define KILN_METRICS_COLLECTORS_MAX 8
void kiln_metrics_collector_add(kiln_metrics_collect_fn fn); /* aborts past the maximum */
/* kiln_build_info's `compiler` label (the compile workers' identity), set once at start. */
void kiln_metrics_set_compiler(const char *identity);
/* The writers: a family's `# HELP`/`# TYPE` head; one sample, `labels` name, value pairs ended
 * by NULL (or NULL); a histogram's samples from non-cumulative bucket counts, the last one +Inf,
 * with one optional label (lname NULL: none). */
void kiln_metrics_head(FILE *f, const char *name, const char *type, const char *help);
void kiln_metrics_sample(FILE *f, const char *name, const char *const *labels, double v);
/* A gauge or counter family of one sample without labels. */
void kiln_metrics_gauge(FILE *f, const char *name, const char *help, double v);
void kiln_metrics_counter(FILE *f, const char *name, const char *help, double v);
void kiln_metrics_histogram(FILE *f, const char *name, const char *lname, const char *lvalue,
                            const double *bounds, size_t nb, const uint64_t *counts, double sum);

/* The collectors of collectors.c: compile and the artifact cache, graphs, device workers. */
void kiln_compile_collect(FILE *f, kiln_server_t *s);
void kiln_graphs_collect(FILE *f, kiln_server_t *s);
void kiln_devices_collect(FILE *f, kiln_server_t *s);

/* The whole exposition text, malloc'ed (the caller frees it); NULL when out of memory. */
char *kiln_metrics_render(kiln_server_t *s, size_t *out_len);

#endif
