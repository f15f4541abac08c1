/* The cpu backend table: host memory, modules from memfd, work-groups on a pinned pool. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/util.h"
#include "device/common.h"
#include "device/cpu/cpu.h"

/* Buffers from this size up come straight from mmap: page-aligned, returned to the OS on
 * free, and never fragment the heap of a long-lived worker. */
#define MMAP_THRESHOLD (1u << 20)
#define ALIGN 64
#define HUGE_PAGE (2u << 20)
/* Freed large buffers kept for reuse (see kiln_device's spare): at most this many bytes. */
#define CPU_SPARE_BYTES (1ull << 30)

static kiln_status_t cpu_probe(kiln_device_info_t *infos, size_t cap, size_t *out_count,
                               char *reason, size_t reason_cap) {
  if (reason_cap) reason[0] = '\0';
  if (cap == 0) {
    *out_count = 0;
    return KILN_OK;
  }
  KILN_RETURN_IF_ERROR(kiln_cpu_probe_info(&infos[0]));
  *out_count = 1;
  return KILN_OK;
}

static void cpu_close(kiln_device_t *dev) {
  if (!dev) return;
  if (dev->pool) {
    unsigned n = kiln_cpu_pool_size(dev->pool);
    for (unsigned i = 0; dev->mem && i < n; i++) {
      free(dev->mem[i].shared);
      free(dev->mem[i].scratch);
    }
    kiln_cpu_pool_destroy(dev->pool);
  }
  free(dev->mem);
  if (dev->flush_buf) munmap(dev->flush_buf, dev->flush_bytes);
  for (size_t i = 0; i < KILN_ARRAY_SIZE(dev->spare); i++)
    if (dev->spare[i].ptr) munmap(dev->spare[i].ptr, dev->spare[i].len);
  free(dev);
}

static kiln_status_t cpu_open(uint32_t index, const int *cpus, size_t ncpus,
                              kiln_device_t **out_dev) {
  if (index != 0)
    return KILN_STATUS(KILN_E_NOT_FOUND, "cpu:%u does not exist (the host is cpu:0)", index);
  kiln_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  kiln_status_t s = kiln_cpu_probe_info(&dev->info);
  /* Read from sysfs now, while the worker may still open files (its sandbox comes after
   * open); cache flushes size their buffer with it later. */
  kiln_cpu_llc_bytes();
  if (!s) s = kiln_cpu_pool_create(cpus, ncpus, &dev->pool);
  if (s) {
    cpu_close(dev);
    return s;
  }
  dev->info.compute_units = kiln_cpu_pool_size(dev->pool);
  size_t n = kiln_cpu_pool_size(dev->pool);
  dev->mem = aligned_alloc(_Alignof(cpu_thread_mem_t), n * sizeof *dev->mem);
  if (dev->mem) memset(dev->mem, 0, n * sizeof *dev->mem);
  if (!dev->mem) {
    cpu_close(dev);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  *out_dev = dev;
  return KILN_OK;
}

static const kiln_device_info_t *cpu_info(kiln_device_t *dev) { return &dev->info; }

/* The spares are a queue: occupied slots first, the oldest at index 0. */
static void spare_take(kiln_device_t *dev, size_t i) {
  size_t n = KILN_ARRAY_SIZE(dev->spare);
  dev->spare_bytes -= dev->spare[i].len;
  memmove(&dev->spare[i], &dev->spare[i + 1], (n - 1 - i) * sizeof(dev->spare[0]));
  dev->spare[n - 1].ptr = NULL;
}

/* Large host memory: a spare mapping of the same size when there is one (its pages are
 * already there; callers overwrite or zero it), else a fresh mapping with transparent huge
 * pages asked for (one fault and one 2 MiB clear per huge page instead of 512 of each). */
static void *map_large(kiln_device_t *dev, size_t len) {
  for (size_t i = 0; i < KILN_ARRAY_SIZE(dev->spare) && dev->spare[i].ptr; i++) {
    if (dev->spare[i].len == len) {
      void *p = dev->spare[i].ptr;
      spare_take(dev, i);
      return p;
    }
  }
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  madvise(p, len, MADV_HUGEPAGE);
  return p;
}

/* Keeps a freed large mapping as a spare, unmapping the oldest ones while over the bound. */
static void unmap_large(kiln_device_t *dev, void *p, size_t len) {
  size_t n = KILN_ARRAY_SIZE(dev->spare);
  if (len > CPU_SPARE_BYTES) {
    munmap(p, len);
    return;
  }
  while (dev->spare[0].ptr && (dev->spare[n - 1].ptr || dev->spare_bytes + len > CPU_SPARE_BYTES)) {
    munmap(dev->spare[0].ptr, dev->spare[0].len);
    spare_take(dev, 0);
  }
  size_t k = 0;
  while (dev->spare[k].ptr) k++;
  dev->spare[k].ptr = p;
  dev->spare[k].len = len;
  dev->spare_bytes += len;
}

static kiln_status_t cpu_mem_alloc(kiln_device_t *dev, uint64_t bytes, kiln_dmem_t **out_mem) {
  kiln_dmem_t *m = calloc(1, sizeof *m);
  if (!m) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  size_t n = bytes ? (size_t)bytes : 1;
  if (n >= MMAP_THRESHOLD) {
    m->map_len = (n + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
    m->ptr = map_large(dev, m->map_len);
    m->mapped = true;
  } else if (posix_memalign(&m->ptr, ALIGN, n) != 0) {
    m->ptr = NULL;
  }
  if (!m->ptr) {
    free(m);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cannot allocate %llu bytes of host memory",
                       (unsigned long long)bytes);
  }
  m->bytes = bytes;
  *out_mem = m;
  return KILN_OK;
}

static void cpu_mem_free(kiln_device_t *dev, kiln_dmem_t *m) {
  if (!m) return;
  if (m->mapped)
    unmap_large(dev, m->ptr, m->map_len);
  else
    free(m->ptr);
  free(m);
}

static uint64_t cpu_mem_address(kiln_device_t *dev, kiln_dmem_t *m) { return (uint64_t)(uintptr_t)m->ptr; }

static void *cpu_mem_host_ptr(kiln_device_t *dev, kiln_dmem_t *m) { return m->ptr; }

/* Launches are synchronous, so plain copies are ordered after them. */
static kiln_status_t cpu_copy_in(kiln_device_t *dev, kiln_dmem_t *dst, uint64_t offset,
                                 const void *src, uint64_t bytes) {
  KILN_RETURN_IF_ERROR(kiln_device_check_range(dst->bytes, offset, bytes));
  memcpy((char *)dst->ptr + offset, src, bytes);
  return KILN_OK;
}

static kiln_status_t cpu_copy_out(kiln_device_t *dev, kiln_dmem_t *src, uint64_t offset,
                                  void *dst, uint64_t bytes) {
  KILN_RETURN_IF_ERROR(kiln_device_check_range(src->bytes, offset, bytes));
  memcpy(dst, (const char *)src->ptr + offset, bytes);
  return KILN_OK;
}

static kiln_status_t cpu_module_load(kiln_device_t *dev, const kiln_artifact_t *art,
                                     kiln_dmodule_t **out_mod) {
  return kiln_cpu_module_load(art, out_mod);
}

static void cpu_module_unload(kiln_device_t *dev, kiln_dmodule_t *mod) { kiln_cpu_module_unload(mod); }

/* Writes a buffer twice the last-level cache, which evicts what earlier runs left there
 * (TVM flushes the CPU cache the same way in spirit: by touching other memory). */
static kiln_status_t cpu_flush_caches(kiln_device_t *dev) {
  if (!dev->flush_buf) {
    size_t llc = kiln_cpu_llc_bytes();
    size_t n = KILN_MAX(llc * 2, (size_t)64 << 20);
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cannot map %zu bytes to flush caches", n);
    dev->flush_buf = p;
    dev->flush_bytes = n;
  }
  memset(dev->flush_buf, (int)(kiln_now_ns() & 0xFF), dev->flush_bytes);
  __asm__ __volatile__("" ::"r"(dev->flush_buf) : "memory");
  return KILN_OK;
}

const kiln_backend_t kiln_backend_cpu = {
    .kind = "cpu",
    .probe = cpu_probe,
    .open = cpu_open,
    .close = cpu_close,
    .info = cpu_info,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .mem_address = cpu_mem_address,
    .mem_host_ptr = cpu_mem_host_ptr,
    .copy_in = cpu_copy_in,
    .copy_out = cpu_copy_out,
    .module_load = cpu_module_load,
    .module_unload = cpu_module_unload,
    .launch = kiln_cpu_launch,
    .flush_caches = cpu_flush_caches,
};
