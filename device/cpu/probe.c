/* What the host CPU is: model name, cores, memory, cache size. */
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/cpu/cpu.h"

/* The first "model name" (x86), "Model" or "Hardware" (Arm) line of /proc/cpuinfo. */
static void model_name(char *out, size_t cap) {
  snprintf(out, cap, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  static const char *const keys[] = {"model name", "Model", "Hardware", "cpu model"};
  char line[512];
  while (fgets(line, sizeof line, f)) {
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
      size_t kl = strlen(keys[k]);
      if (strncmp(line, keys[k], kl) != 0 || (line[kl] != '\t' && line[kl] != ' ' && line[kl] != ':'))
        continue;
      char *v = strchr(line, ':');
      if (!v) continue;
      v++;
      while (*v == ' ' || *v == '\t') v++;
      v[strcspn(v, "\n")] = '\0';
      snprintf(out, cap, "%s", v);
      fclose(f);
      return;
    }
  }
  fclose(f);
}

size_t kiln_cpu_llc_bytes(void) {
  /* Read once: the device worker asks before its sandbox closes the file system. */
  static size_t cached;
  static bool known;
  if (known) return cached;
  size_t best = 0;
  for (int i = 0; i < 8; i++) {
    char path[96], buf[32];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    FILE *f = fopen(path, "r");
    if (!f) break;
    if (fgets(buf, sizeof buf, f)) {
      char *end;
      size_t v = strtoull(buf, &end, 10);
      if (*end == 'K') v <<= 10;
      else if (*end == 'M') v <<= 20;
      if (v > best) best = v;
    }
    fclose(f);
  }
  cached = best;
  known = true;
  return best;
}

kiln_status_t kiln_cpu_probe_info(kiln_device_info_t *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->id, sizeof out->id, "cpu:0");
  snprintf(out->kind, sizeof out->kind, "cpu");
  snprintf(out->arch, sizeof out->arch, "cpu");
  model_name(out->name, sizeof out->name);
  cpu_set_t set;
  out->compute_units = sched_getaffinity(0, sizeof set, &set) == 0
                           ? (uint32_t)CPU_COUNT(&set)
                           : (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  out->memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  out->wave_size = 1;
  /* The same limits as GPUs keep kernels portable; a work-group is a loop on one thread, so
   * nothing in the hardware requires them. */
  out->max_block = 1024;
  out->max_block_dim[0] = out->max_block_dim[1] = out->max_block_dim[2] = 1024;
  out->max_shared = 256 * 1024;
  out->max_grid[0] = out->max_grid[1] = out->max_grid[2] = UINT32_MAX;
  out->max_grid_items = UINT32_MAX;
  return KILN_OK;
}
