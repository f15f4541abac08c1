/* kiln-cache-bench: latency of the artifact cache's operations on this machine.
 *
 * For each payload size: N puts (copy + queue), close (every write durable), open with N
 * entries on disk, N first gets after the restart (disk hits: open, read, checksum,
 * promote), N more gets (memory hits). "cold" repeats the disk hits after dropping the
 * files from the page cache (posix_fadvise), so that the read reaches the device.
 *
 *   kiln-cache-bench [DIR]     (default: a fresh directory under /tmp, removed at the end) */
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "base/status.h"
#include "base/util.h"
#include "server/cache.h"
#include "server/cache_file.h"

static uv_loop_t loop;

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static double pct(uint64_t *v, size_t n, double p) {
  qsort(v, n, sizeof(*v), cmp_u64);
  return (double)v[(size_t)(p * (double)(n - 1))] / 1000.0;
}

static void closed(void *arg) { *(int *)arg = 1; }

static void close_wait(kiln_cache_t *c) {
  int done = 0;
  kiln_cache_close(c, closed, &done);
  while (!done) uv_run(&loop, UV_RUN_ONCE);
}

static kiln_cache_t *open_or_die(const char *dir) {
  kiln_cache_config_t cfg = {.dir = dir, .max_disk_bytes = 8ull << 30, .max_mem_bytes = 1ull << 30};
  kiln_cache_t *c = NULL;
  kiln_status_t s = kiln_cache_open(&loop, &cfg, &c);
  if (s) {
    fprintf(stderr, "open: %s\n", kiln_status_message(s));
    exit(1);
  }
  return c;
}

static void key_of(size_t size, size_t i, uint8_t key[32]) {
  char s[64];
  snprintf(s, sizeof(s), "bench-%zu-%zu", size, i);
  kiln_hash(s, strlen(s), key);
}

/* Times n gets of the keys of `size`; every get must hit. */
static void time_gets(kiln_cache_t *c, size_t size, size_t n, uint64_t *out_ns) {
  for (size_t i = 0; i < n; i++) {
    uint8_t key[32];
    key_of(size, i, key);
    uint64_t t0 = kiln_now_ns();
    kiln_cache_entry_t *e = kiln_cache_get(c, key);
    kiln_cache_entry_release(e);
    out_ns[i] = kiln_now_ns() - t0;
    if (!e) {
      fprintf(stderr, "unexpected miss\n");
      exit(1);
    }
  }
}

static void drop_page_cache(const char *dir, size_t size, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint8_t key[32];
    char path[KILN_CACHE_PATH_MAX];
    key_of(size, i, key);
    kiln_cache_file_path(path, dir, key, "");
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  return remove(path);
}

static void run(const char *dir, size_t size, size_t n) {
  uint64_t *ns = calloc(n, sizeof(*ns));
  uint8_t *payload = malloc(size);
  for (size_t j = 0; j < size; j++) payload[j] = (uint8_t)(j * 13);

  kiln_cache_t *c = open_or_die(dir);
  for (size_t i = 0; i < n; i++) {
    uint8_t key[32];
    key_of(size, i, key);
    payload[0] = (uint8_t)i;
    uint64_t t0 = kiln_now_ns();
    kiln_status_t s = kiln_cache_put(c, key, payload, size);
    ns[i] = kiln_now_ns() - t0;
    if (s) {
      fprintf(stderr, "put: %s\n", kiln_status_message(s));
      exit(1);
    }
  }
  double put_p50 = pct(ns, n, 0.5);
  uint64_t t0 = kiln_now_ns();
  close_wait(c);
  double close_ms = (double)(kiln_now_ns() - t0) / 1e6;

  t0 = kiln_now_ns();
  c = open_or_die(dir);
  double open_ms = (double)(kiln_now_ns() - t0) / 1e6;
  time_gets(c, size, n, ns);
  double disk_p50 = pct(ns, n, 0.5), disk_p99 = pct(ns, n, 0.99);
  time_gets(c, size, n, ns);
  double mem_p50 = pct(ns, n, 0.5), mem_p99 = pct(ns, n, 0.99);
  close_wait(c);

  drop_page_cache(dir, size, n);
  c = open_or_die(dir);
  time_gets(c, size, n, ns);
  double cold_p50 = pct(ns, n, 0.5), cold_p99 = pct(ns, n, 0.99);
  close_wait(c);

  printf("| %8zu | %5zu | %8.1f | %10.1f | %8.1f | %9.1f / %-9.1f | %9.1f / %-9.1f | %6.2f / %-6.2f |\n",
         size, n, put_p50, close_ms / (double)n, open_ms, disk_p50, disk_p99, cold_p50, cold_p99,
         mem_p50, mem_p99);
  fflush(stdout);
  free(ns);
  free(payload);
}

int main(int argc, char **argv) {
  char tmp[] = "/tmp/kiln-cache-bench-XXXXXX";
  const char *dir = argc > 1 ? argv[1] : mkdtemp(tmp);
  if (!dir) return 1;
  uv_loop_init(&loop);
  static const struct {
    size_t size, n;
  } runs[] = {{4 << 10, 500}, {64 << 10, 300}, {1 << 20, 60}, {16 << 20, 6}};
  printf("| bytes    | n     | put us   | durable ms | open ms  | disk hit us p50/p99 | cold hit us p50/p99 | mem hit us p50/p99 |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < KILN_ARRAY_SIZE(runs); i++) run(dir, runs[i].size, runs[i].n);
  uv_loop_close(&loop);
  if (argc <= 1) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}
