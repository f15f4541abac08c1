/* Device memory accounting: every device has a capacity, every tenant a `memory` quota, and
 * kilnd charges a tensor to both before any worker allocates it (docs/operations.md,
 * "Memory").
 *
 * Why in kilnd and not in the workers: a worker that runs out of memory is killed by the
 * kernel with everything it held, and the OOM killer may pick another tenant's worker. So
 * the bytes are refused up front, where refusing costs only the request that asked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "server/metrics.h"
#include "server/server.h"

/* cgroup v2: the smallest memory.max on the path from kilnd's cgroup to the root (a parent's
 * limit binds its children too); UINT64_MAX when none is set or cgroup v2 is not mounted. */
static uint64_t cgroup_limit(void) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return UINT64_MAX;
  char line[1024], path[1024] = "";
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "0::", 3) == 0) {
      snprintf(path, sizeof(path), "%s", line + 3);
      path[strcspn(path, "\n")] = 0;
    }
  fclose(f);
  uint64_t limit = UINT64_MAX;
  while (path[0] == '/') {
    char file[1100];
    snprintf(file, sizeof(file), "/sys/fs/cgroup%s/memory.max", path);
    FILE *m = fopen(file, "r");
    if (m) {
      unsigned long long v;
      if (fscanf(m, "%llu", &v) == 1 && v < limit) limit = v; /* "max" reads as no number */
      fclose(m);
    }
    char *slash = strrchr(path, '/');
    if (!slash || slash == path) break;
    *slash = 0;
  }
  return limit;
}

uint64_t kiln_memory_host_default(uint64_t *out_usable) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  uint64_t usable = KILN_MIN(ram, cgroup_limit());
  if (out_usable) *out_usable = usable;
  /* Half: the other half is for kilnd, its compile workers (LLVM), the transfer buffers and
   * the workers' own code and heaps, which no quota counts. */
  return usable / 2;
}

uint64_t kiln_device_memory_bound(const kiln_device_entry_t *d, const kiln_tenant_t *t) {
  return KILN_MIN(d->capacity, t->quotas.memory);
}

static void mib(char *out, size_t cap, uint64_t bytes) {
  if (bytes >= (1ull << 20)) snprintf(out, cap, "%.1f MiB", (double)bytes / (1 << 20));
  else snprintf(out, cap, "%llu bytes", (unsigned long long)bytes);
}

kiln_status_t kiln_memory_reserve(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                                  uint64_t bytes) {
  /* Tensors of a worker that died free their bytes here, before anything is refused
   * (main.c hooks tensors.c's reaper to the event). */
  kiln_hooks_fire(s, KILN_EVENT_RECLAIM, NULL);
  kiln_status_t st = kiln_quota_check(t, "memory", t->memory, bytes, t->quotas.memory);
  if (st) {
    kiln_metrics_memory_refused(d, t, false);
    return st;
  }
  uint64_t free_bytes = d->used < d->capacity ? d->capacity - d->used : 0;
  if (bytes > free_bytes) {
    kiln_metrics_memory_refused(d, t, true);
    char want[32], have[32], cap[32];
    mib(want, sizeof(want), bytes);
    mib(have, sizeof(have), free_bytes);
    mib(cap, sizeof(cap), d->capacity);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                       "device %s has %s free of its %s capacity%s; %s were asked: free tensors "
                       "or ask for less",
                       d->id, have, cap, strcmp(d->kind, "cpu") == 0 ? " (kilnd --cpu-memory)" : "",
                       want);
  }
  t->memory += bytes;
  d->used += bytes;
  return KILN_OK;
}

void kiln_memory_release(kiln_device_entry_t *d, kiln_tenant_t *t, uint64_t bytes) {
  t->memory -= bytes;
  d->used -= bytes;
}
