/* kiln-tls-bench: the same measurements over two URLs of one kilnd, interleaved round by
 * round so that both see the same machine: sequential ping latency, pipelined ping
 * throughput, and upload/download of one float32 tensor. Prints one key=value line per URL
 * and measurement (GB = 1e9 bytes). TLS options come from $KILN_TLS_CA etc. (libkiln).
 * Transfers also report CPU time per GB: the client's own and, with --pid, kilnd's (from
 * /proc): unlike GB/s these do not depend on what else runs on the machine.
 *
 *   kiln-tls-bench --url tcp:127.0.0.1:7070 --url tls:127.0.0.1:7443 --rounds 3 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/util.h"
#include "kiln/client.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void die(const char *what, kiln_status_t s) {
  fprintf(stderr, "kiln-tls-bench: %s: %s: %s\n", what, kiln_code_name(kiln_status_code(s)),
          kiln_status_message(s));
  exit(1);
}

#define CHECK(what, expr)               \
  do {                                  \
    kiln_status_t s_ = (expr);          \
    if (s_) die((what), s_);            \
  } while (0)

typedef struct opts {
  const char *urls[4];
  int nurls, rounds, pings, pipelined, depth, repeat, pid;
  size_t mib;
} opts_t;

/* CPU seconds this process has used. */
static double self_cpu(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* CPU seconds process pid has used (utime + stime of /proc/PID/stat); 0 without a pid. */
static double pid_cpu(int pid) {
  if (pid <= 0) return 0;
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* fields after the command name */
  unsigned long long ut = 0, st = 0;
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
    return 0;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

typedef struct cost {
  double up_gbps, down_gbps;
  double up_client, up_daemon, down_client, down_daemon; /* CPU seconds per GB */
} cost_t;

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return v[n / 2];
}

/* Sequential pings: p50 and p99 in microseconds. */
static void bench_ping(kiln_client_t *c, int n, double *p50, double *p99) {
  double *us = malloc(sizeof(double) * (size_t)n);
  for (int i = 0; i < 1000; i++) CHECK("ping", kiln_client_ping(c)); /* warm-up */
  for (int i = 0; i < n; i++) {
    uint64_t t0 = kiln_now_ns();
    CHECK("ping", kiln_client_ping(c));
    us[i] = (double)(kiln_now_ns() - t0) / 1e3;
  }
  qsort(us, (size_t)n, sizeof(double), cmp_double);
  *p50 = us[n / 2];
  *p99 = us[(size_t)n * 99 / 100];
  free(us);
}

/* `depth` pings always in flight on one connection: requests per second. */
static double bench_pipeline(kiln_client_t *c, int n, int depth) {
  uint64_t t0 = kiln_now_ns();
  int sent = 0, done = 0;
  uint32_t id;
  for (; sent < depth && sent < n; sent++) CHECK("submit", kiln_client_submit_ping(c, &id));
  while (done < n) {
    kiln_reply_t *r;
    CHECK("wait", kiln_client_wait_any(c, &r));
    kiln_reply_free(r);
    done++;
    if (sent < n) {
      CHECK("submit", kiln_client_submit_ping(c, &id));
      sent++;
    }
  }
  return (double)n / ((double)(kiln_now_ns() - t0) / 1e9);
}

/* Over `repeat` uploads and downloads of `bytes`: the median GB/s, and CPU seconds per GB of
 * all of them together (/proc counts in clock ticks: one transfer is too short to measure). */
static void bench_transfer(kiln_client_t *c, const float *data, float *back, size_t bytes,
                           int repeat, int pid, cost_t *out) {
  kiln_tensor_desc_t d = {.dtype = KILN_FLOAT32, .ndim = 1, .shape = {bytes / 4}, .nbytes = bytes};
  double v[6][64] = {{0}}, gb = (double)bytes / 1e9;
  for (int r = 0; r < repeat; r++) {
    uint64_t id, t0 = kiln_now_ns();
    double c0 = self_cpu(), d0 = pid_cpu(pid);
    CHECK("upload", kiln_client_upload(c, NULL, &d, data, &id));
    uint64_t t1 = kiln_now_ns();
    double c1 = self_cpu(), d1 = pid_cpu(pid);
    CHECK("download", kiln_client_download_into(c, id, back, bytes, NULL));
    uint64_t t2 = kiln_now_ns();
    double c2 = self_cpu(), d2 = pid_cpu(pid);
    CHECK("free", kiln_client_free_tensor(c, id));
    if (memcmp(data, back, bytes) != 0) die("download", KILN_STATUS(KILN_E_INTERNAL, "bytes differ"));
    v[0][r] = (double)bytes / (double)(t1 - t0);
    v[1][r] = (double)bytes / (double)(t2 - t1);
    v[2][0] += (c1 - c0) / gb / repeat;
    v[3][0] += (d1 - d0) / gb / repeat;
    v[4][0] += (c2 - c1) / gb / repeat;
    v[5][0] += (d2 - d1) / gb / repeat;
  }
  *out = (cost_t){median(v[0], repeat), median(v[1], repeat), v[2][0], v[3][0], v[4][0], v[5][0]};
}

int main(int argc, char **argv) {
  opts_t o = {.rounds = 3, .pings = 20000, .pipelined = 200000, .depth = 64, .repeat = 5,
              .mib = 64};
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--url") && o.nurls < 4) o.urls[o.nurls++] = v;
    else if (!strcmp(k, "--rounds")) o.rounds = atoi(v);
    else if (!strcmp(k, "--pings")) o.pings = atoi(v);
    else if (!strcmp(k, "--pipelined")) o.pipelined = atoi(v);
    else if (!strcmp(k, "--depth")) o.depth = atoi(v);
    else if (!strcmp(k, "--repeat")) o.repeat = atoi(v);
    else if (!strcmp(k, "--mib")) o.mib = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--pid")) o.pid = atoi(v);
    else {
      fprintf(stderr, "usage: kiln-tls-bench --url URL [--url URL ...] [--rounds N] [--pings N] "
                      "[--pipelined N] [--depth D] [--repeat R] [--mib M] [--pid KILND_PID]\n");
      return 2;
    }
  }
  if (!o.nurls || o.rounds < 1 || o.pings < 100 || o.depth < 1 || o.repeat < 1 ||
      o.repeat > 64 || !o.mib) {
    fprintf(stderr, "kiln-tls-bench: give at least one --url and sensible counts\n");
    return 2;
  }
  size_t bytes = o.mib << 20;
  float *data = malloc(bytes), *back = malloc(bytes);
  for (size_t i = 0; i < bytes / 4; i++) data[i] = (float)i;
  kiln_client_t *c[4];
  for (int u = 0; u < o.nurls; u++) CHECK(o.urls[u], kiln_client_create(o.urls[u], &c[u]));
  for (int round = 1; round <= o.rounds; round++) {
    for (int u = 0; u < o.nurls; u++) {
      double p50, p99;
      bench_ping(c[u], o.pings, &p50, &p99);
      printf("round=%d url=%s what=ping n=%d p50_us=%.1f p99_us=%.1f\n", round, o.urls[u],
             o.pings, p50, p99);
      fflush(stdout);
    }
    for (int u = 0; u < o.nurls; u++) {
      double rps = bench_pipeline(c[u], o.pipelined, o.depth);
      printf("round=%d url=%s what=pipeline n=%d depth=%d req_per_s=%.0f\n", round, o.urls[u],
             o.pipelined, o.depth, rps);
      fflush(stdout);
    }
    for (int u = 0; u < o.nurls; u++) {
      cost_t k;
      bench_transfer(c[u], data, back, bytes, o.repeat, o.pid, &k);
      printf("round=%d url=%s what=transfer mib=%zu repeat=%d upload_gbps=%.2f "
             "download_gbps=%.2f upload_cpu_s_per_gb_client=%.3f upload_cpu_s_per_gb_kilnd=%.3f "
             "download_cpu_s_per_gb_client=%.3f download_cpu_s_per_gb_kilnd=%.3f\n",
             round, o.urls[u], o.mib, o.repeat, k.up_gbps, k.down_gbps, k.up_client,
             k.up_daemon, k.down_client, k.down_daemon);
      fflush(stdout);
    }
  }
  for (int u = 0; u < o.nurls; u++) kiln_client_destroy(c[u]);
  free(data);
  free(back);
  return 0;
}
