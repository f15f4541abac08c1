/* The address space: every allocation the GPU could touch, sorted by address.
 *
 * VRAM is a memfd mapped twice: PROT_NONE at the address handed to the client (the "host view":
 * a host dereference of VRAM crashes, as it would on a discrete GPU without a large BAR), and
 * read-write at another address (the "alias") through which copies, fills, the loader and the
 * interpreter reach the bytes. System-pool memory is ordinary anonymous memory at its own
 * address; the GPU may touch it only after hsa_amd_agents_allow_access (R: pool allocations are
 * AllocateRestrict, hsa_ext_amd.cpp hsa_amd_memory_pool_allocate; amd_kfd_driver.cpp maps a
 * restricted system allocation to no GPU). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rt.h"

static pthread_rwlock_t space_lock = PTHREAD_RWLOCK_INITIALIZER;
static rt_alloc_t *allocs;
static size_t nallocs, capallocs;
static uint64_t vram_used;

/* Index of the last allocation with va <= addr, or -1. Caller holds space_lock. */
static ptrdiff_t find_le(uint64_t addr) {
  size_t lo = 0, hi = nallocs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (allocs[mid].va <= addr) lo = mid + 1;
    else hi = mid;
  }
  return (ptrdiff_t)lo - 1;
}

static ptrdiff_t find_containing(uint64_t addr) {
  ptrdiff_t i = find_le(addr);
  if (i >= 0 && addr - allocs[i].va < allocs[i].size) return i;
  return -1;
}

static bool insert(const rt_alloc_t *a) {
  if (nallocs == capallocs) {
    size_t cap = capallocs ? capallocs * 2 : 64;
    rt_alloc_t *n = realloc(allocs, cap * sizeof *n);
    if (!n) return false;
    allocs = n, capallocs = cap;
  }
  ptrdiff_t at = find_le(a->va) + 1;
  memmove(&allocs[at + 1], &allocs[at], (nallocs - (size_t)at) * sizeof *allocs);
  allocs[at] = *a;
  nallocs++;
  return true;
}

static void unmap_alloc(const rt_alloc_t *a) {
  if (a->init_bits) munmap(a->init_bits, rt_round_up(a->size / 8, RT_PAGE));
  if (a->host_view) {
    munmap(a->host_view, a->size);
    munmap(a->host, a->size);
  } else {
    munmap(a->host, a->size);
  }
}

static void remove_at(size_t i) {
  memmove(&allocs[i], &allocs[i + 1], (nallocs - i - 1) * sizeof *allocs);
  nallocs--;
}

/* Maps `size` bytes of device memory: the PROT_NONE host view and the read-write alias. */
static bool map_device(uint64_t size, uint8_t **out_view, uint8_t **out_alias) {
  int fd = memfd_create("softgpu-vram", MFD_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ftruncate(fd, (off_t)size) == 0;
  void *view = ok ? mmap(NULL, size, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0) : MAP_FAILED;
  void *alias = view != MAP_FAILED ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0)
                                   : MAP_FAILED;
  close(fd); /* the mappings keep the memory */
  if (alias == MAP_FAILED) {
    if (view != MAP_FAILED) munmap(view, size);
    return false;
  }
  *out_view = view, *out_alias = alias;
  return true;
}

hsa_status_t rt_mem_alloc(pool_id_t pool, size_t size, alloc_kind_t kind, void **out_va, uint8_t **out_host) {
  uint64_t rounded = rt_round_up(size, RT_PAGE);
  if (rounded < size) return HSA_STATUS_ERROR_INVALID_ALLOCATION;
  rt_alloc_t a = {.size = rounded, .kind = kind, .pool = pool};
  bool device = kind == ALLOC_VRAM || kind == ALLOC_CODE;
  pthread_rwlock_wrlock(&space_lock);
  if (device && vram_used + rounded > rt.cfg.vram_bytes) {
    pthread_rwlock_unlock(&space_lock);
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  if (device) {
    if (!map_device(rounded, &a.host_view, &a.host)) {
      pthread_rwlock_unlock(&space_lock);
      return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    a.va = (uint64_t)(uintptr_t)a.host_view;
    a.gpu_access = kind == ALLOC_VRAM ? SG_ACC_READ | SG_ACC_WRITE : SG_ACC_READ;
    if (kind == ALLOC_VRAM && rt.cfg.track_init) {
      void *bits = mmap(NULL, rt_round_up(rounded / 8, RT_PAGE), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      a.init_bits = bits == MAP_FAILED ? NULL : bits; /* zero: nothing written yet */
    }
    vram_used += rounded;
  } else {
    void *p = mmap(NULL, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      pthread_rwlock_unlock(&space_lock);
      return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    a.host = p;
    a.va = (uint64_t)(uintptr_t)p;
    /* Queue rings and amd_queue_t are read by the "command processor" and by kernels through
     * DISPATCH_PTR / QUEUE_PTR; client system memory waits for allow_access. */
    a.gpu_access = kind == ALLOC_RUNTIME ? SG_ACC_READ : 0;
  }
  if (!insert(&a)) {
    if (device) vram_used -= rounded;
    unmap_alloc(&a);
    pthread_rwlock_unlock(&space_lock);
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  pthread_rwlock_unlock(&space_lock);
  *out_va = (void *)(uintptr_t)a.va;
  if (out_host) *out_host = a.host;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t rt_mem_free(void *va, const char *who) {
  pthread_rwlock_wrlock(&space_lock);
  ptrdiff_t i = find_containing((uint64_t)(uintptr_t)va);
  if (i < 0 || allocs[i].va != (uint64_t)(uintptr_t)va ||
      (who && allocs[i].kind != ALLOC_VRAM && allocs[i].kind != ALLOC_SYSTEM)) {
    bool interior = i >= 0;
    pthread_rwlock_unlock(&space_lock);
    /* R runtime.cpp FreeMemory: only a base pointer in the allocation map may be freed. */
    rt_log("%s(%p): %s", who ? who : "free", va,
           interior ? "not the base of its allocation (an interior pointer, or runtime-owned memory)"
                    : "not a live allocation (unknown pointer or already freed)");
    return HSA_STATUS_ERROR_INVALID_ALLOCATION;
  }
  if (allocs[i].busy && who) {
    uint64_t d = allocs[i].busy_dispatch;
    pthread_rwlock_unlock(&space_lock);
    /* H (kernel dispatch packet): buffers a dispatch uses must stay valid until it completes.
     * Always refused, even with SOFTGPU_STRICT=0: unmapping memory under a running kernel would
     * crash the process instead of reporting the client's bug. */
    rt_log("%s(%p): the allocation is in use by dispatch %llu, which has not completed; wait for "
           "its completion signal before freeing (the memory stays allocated)", who, va, (unsigned long long)d);
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  rt_alloc_t a = allocs[i];
  remove_at((size_t)i);
  if (a.host_view) vram_used -= a.size;
  pthread_rwlock_unlock(&space_lock);
  unmap_alloc(&a);
  return HSA_STATUS_SUCCESS;
}

/* Loaded code: one contiguous device mapping (relocations need the segments' relative
 * placement), registered as one entry per page range so that each range has its own access. */
hsa_status_t rt_mem_alloc_code(uint64_t size, const rt_code_range_t *ranges, size_t n, void **out_va,
                               uint8_t **out_host) {
  uint64_t rounded = rt_round_up(size, RT_PAGE);
  uint8_t *view, *alias;
  pthread_rwlock_wrlock(&space_lock);
  if (vram_used + rounded > rt.cfg.vram_bytes || !map_device(rounded, &view, &alias)) {
    pthread_rwlock_unlock(&space_lock);
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  vram_used += rounded;
  for (size_t k = 0; k < n; k++) {
    rt_alloc_t a = {.va = (uint64_t)(uintptr_t)view + ranges[k].offset, .size = ranges[k].size,
                    .host = alias + ranges[k].offset, .host_view = view + ranges[k].offset,
                    .kind = ALLOC_CODE, .pool = POOL_GPU_VRAM, .gpu_access = ranges[k].access};
    if (!insert(&a)) {
      for (size_t j = 0; j < k; j++) remove_at((size_t)find_containing((uint64_t)(uintptr_t)view + ranges[j].offset));
      vram_used -= rounded;
      munmap(view, rounded), munmap(alias, rounded);
      pthread_rwlock_unlock(&space_lock);
      return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
  }
  pthread_rwlock_unlock(&space_lock);
  *out_va = view, *out_host = alias;
  return HSA_STATUS_SUCCESS;
}

void rt_mem_free_code(void *va, uint8_t *host, uint64_t size) {
  uint64_t rounded = rt_round_up(size, RT_PAGE), base = (uint64_t)(uintptr_t)va;
  pthread_rwlock_wrlock(&space_lock);
  for (ptrdiff_t i = find_le(base + rounded - 1); i >= 0 && allocs[i].va >= base; i = find_le(base + rounded - 1))
    remove_at((size_t)i);
  vram_used -= rounded;
  pthread_rwlock_unlock(&space_lock);
  munmap(va, rounded);
  munmap(host, rounded);
}

bool rt_mem_find(uint64_t va, uint64_t len, rt_alloc_t *out) {
  pthread_rwlock_rdlock(&space_lock);
  ptrdiff_t i = find_containing(va);
  bool ok = i >= 0 && len <= allocs[i].size - (va - allocs[i].va);
  if (ok) *out = allocs[i];
  pthread_rwlock_unlock(&space_lock);
  return ok;
}

bool rt_mem_lookup_cb(void *ctx, uint64_t va, sg_region_t *out) {
  (void)ctx;
  pthread_rwlock_rdlock(&space_lock);
  ptrdiff_t i = find_containing(va);
  bool ok = i >= 0 && allocs[i].gpu_access != 0;
  if (ok) {
    out->va = allocs[i].va;
    out->size = allocs[i].size;
    out->host = allocs[i].host;
    out->access = allocs[i].gpu_access;
    out->init_bits = allocs[i].init_bits;
  }
  pthread_rwlock_unlock(&space_lock);
  return ok;
}

void rt_mem_mark_busy(const uint64_t *vas, size_t n, uint64_t dispatch_id, int delta) {
  pthread_rwlock_wrlock(&space_lock);
  for (size_t k = 0; k < n; k++) {
    ptrdiff_t i = find_containing(vas[k]);
    if (i < 0) continue;
    if (delta > 0) {
      allocs[i].busy++;
      allocs[i].busy_dispatch = dispatch_id;
    } else if (allocs[i].busy) {
      allocs[i].busy--;
    }
  }
  pthread_rwlock_unlock(&space_lock);
}

hsa_status_t rt_mem_set_gpu_access(uint64_t va, uint32_t access, alloc_kind_t *out_kind) {
  pthread_rwlock_wrlock(&space_lock);
  ptrdiff_t i = find_containing(va);
  if (i < 0 || allocs[i].va != va || (allocs[i].kind != ALLOC_VRAM && allocs[i].kind != ALLOC_SYSTEM)) {
    pthread_rwlock_unlock(&space_lock);
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  if (allocs[i].kind == ALLOC_SYSTEM) allocs[i].gpu_access = access;
  if (out_kind) *out_kind = allocs[i].kind;
  pthread_rwlock_unlock(&space_lock);
  return HSA_STATUS_SUCCESS;
}

uint8_t *rt_mem_host_range(uint64_t va, uint64_t len, bool *out_device, const char **err) {
  if (len == 0) len = 1;
  if (va + len < va) {
    *err = "the range wraps around the address space";
    return NULL;
  }
  pthread_rwlock_rdlock(&space_lock);
  ptrdiff_t i = find_le(va + len - 1);
  uint8_t *host = NULL;
  if (i < 0 || allocs[i].va + allocs[i].size <= va) {
    /* outside every allocation: pageable host memory (R runtime.cpp CopyMemory allows it) */
    host = (uint8_t *)(uintptr_t)va;
    *out_device = false;
  } else if (allocs[i].va <= va) {
    if (allocs[i].kind == ALLOC_CODE || allocs[i].kind == ALLOC_RUNTIME) {
      *err = "the range is runtime-owned memory (loaded code or a queue)";
    } else if (va + len > allocs[i].va + allocs[i].size) {
      *err = "the range runs past the end of its allocation";
    } else {
      host = allocs[i].host + (va - allocs[i].va);
      *out_device = allocs[i].host_view != NULL;
    }
  } else {
    *err = "the range starts outside an allocation and ends inside one";
  }
  pthread_rwlock_unlock(&space_lock);
  return host;
}

void rt_mem_mark_init(uint64_t va, uint64_t len) {
  if (!rt.cfg.track_init || !len) return;
  pthread_rwlock_rdlock(&space_lock);
  ptrdiff_t i = find_containing(va);
  if (i >= 0 && allocs[i].init_bits && len <= allocs[i].size - (va - allocs[i].va)) {
    uint8_t *bits = allocs[i].init_bits;
    uint64_t b = va - allocs[i].va, e = b + len;
    /* the interpreter sets bits with atomic ORs on its threads; so do we */
    for (; b < e && (b & 7); b++) __atomic_fetch_or(&bits[b >> 3], (uint8_t)(1u << (b & 7)), __ATOMIC_RELAXED);
    if (e - b >= 8) {
      memset(&bits[b >> 3], 0xff, (e - b) >> 3);
      b += (e - b) & ~7ull;
    }
    for (; b < e; b++) __atomic_fetch_or(&bits[b >> 3], (uint8_t)(1u << (b & 7)), __ATOMIC_RELAXED);
  }
  pthread_rwlock_unlock(&space_lock);
}

size_t rt_mem_live(uint64_t *out_bytes) {
  pthread_rwlock_rdlock(&space_lock);
  size_t n = 0;
  uint64_t b = 0;
  for (size_t i = 0; i < nallocs; i++)
    if (allocs[i].kind == ALLOC_VRAM || allocs[i].kind == ALLOC_SYSTEM) n++, b += allocs[i].size;
  pthread_rwlock_unlock(&space_lock);
  *out_bytes = b;
  return n;
}

uint64_t rt_mem_vram_used(void) {
  pthread_rwlock_rdlock(&space_lock);
  uint64_t v = vram_used;
  pthread_rwlock_unlock(&space_lock);
  return v;
}

void rt_mem_release_all(void) {
  pthread_rwlock_wrlock(&space_lock);
  for (size_t i = 0; i < nallocs; i++)
    if (allocs[i].kind != ALLOC_CODE) unmap_alloc(&allocs[i]); /* code: freed with its executable */
  free(allocs);
  allocs = NULL;
  nallocs = capallocs = 0;
  vram_used = 0;
  pthread_rwlock_unlock(&space_lock);
}

/* --- the API ----------------------------------------------------------------------------------- */

RT_EXPORT hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t memory_pool, size_t size,
                                                    uint32_t flags, void **ptr) {
  RT_REQUIRE_OPEN();
  if (size == 0 || !ptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT; /* R hsa_ext_amd.cpp */
  pool_id_t id;
  if (!rt_pool_id(memory_pool.handle, &id)) return (hsa_status_t)HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
  /* H (5.2 hsa_ext_amd.h): "flags: reserved parameter, must be 0". */
  if (flags != 0) {
    rt_log("hsa_amd_memory_pool_allocate: flags 0x%x; this ROCr version reserves them (must be 0)", flags);
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  if (!rt_pools[id].alloc_allowed) return HSA_STATUS_ERROR_INVALID_ALLOCATION;
  if (id == POOL_GPU_VRAM && size > rt.cfg.vram_bytes) return HSA_STATUS_ERROR_INVALID_ALLOCATION;
  return rt_mem_alloc(id, size, id == POOL_GPU_VRAM ? ALLOC_VRAM : ALLOC_SYSTEM, ptr, NULL);
}

RT_EXPORT hsa_status_t hsa_amd_memory_pool_free(void *ptr) {
  RT_REQUIRE_OPEN();
  if (!ptr) return HSA_STATUS_SUCCESS; /* R runtime.cpp FreeMemory */
  return rt_mem_free(ptr, "hsa_amd_memory_pool_free");
}

/* H: the core API's allocation; on system memory it is unrestricted (R hsa.cpp passes no
 * AllocateRestrict), so the GPU may access it at once. */
RT_EXPORT hsa_status_t hsa_memory_allocate(hsa_region_t region, size_t size, void **ptr) {
  RT_REQUIRE_OPEN();
  if (size == 0 || !ptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  pool_id_t id;
  if (!rt_pool_id(region.handle, &id)) return HSA_STATUS_ERROR_INVALID_REGION;
  if (!rt_pools[id].alloc_allowed) return HSA_STATUS_ERROR_INVALID_ALLOCATION;
  hsa_status_t s = rt_mem_alloc(id, size, id == POOL_GPU_VRAM ? ALLOC_VRAM : ALLOC_SYSTEM, ptr, NULL);
  if (s == HSA_STATUS_SUCCESS && id != POOL_GPU_VRAM)
    rt_mem_set_gpu_access((uint64_t)(uintptr_t)*ptr, SG_ACC_READ | SG_ACC_WRITE, NULL);
  return s;
}

RT_EXPORT hsa_status_t hsa_memory_free(void *ptr) {
  RT_REQUIRE_OPEN();
  if (!ptr) return HSA_STATUS_SUCCESS;
  return rt_mem_free(ptr, "hsa_memory_free");
}

RT_EXPORT hsa_status_t hsa_amd_agents_allow_access(uint32_t num_agents, const hsa_agent_t *agents,
                                                   const uint32_t *flags, const void *ptr) {
  RT_REQUIRE_OPEN();
  /* R hsa_ext_amd.cpp: flags must be NULL; R runtime.cpp AllowAccess: ptr must be an
   * allocation's base (allocation_map_.find). */
  if (num_agents == 0 || !agents || flags != NULL || !ptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  bool gpu = false;
  for (uint32_t i = 0; i < num_agents; i++) {
    rt_agent_t *a = rt_agent_from(agents[i]);
    if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
    if (a == &rt_gpu_agent) gpu = true;
  }
  alloc_kind_t kind;
  rt_alloc_t cur;
  uint32_t access = gpu ? SG_ACC_READ | SG_ACC_WRITE : 0;
  if (!rt_mem_find((uint64_t)(uintptr_t)ptr, 1, &cur) || cur.va != (uint64_t)(uintptr_t)ptr) {
    rt_log("hsa_amd_agents_allow_access(%p): not the base of a live allocation", ptr);
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  /* A list with only the CPU withdraws the GPU mapping (R amd_memory_region.cpp AllowAccess). */
  hsa_status_t s = rt_mem_set_gpu_access(cur.va, access, &kind);
  if (s != HSA_STATUS_SUCCESS) rt_log("hsa_amd_agents_allow_access(%p): runtime-owned memory", ptr);
  return s;
}

RT_EXPORT hsa_status_t hsa_memory_copy(void *dst, const void *src, size_t size) {
  RT_REQUIRE_OPEN();
  if (!dst || !src) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (size == 0) return HSA_STATUS_SUCCESS;
  const char *err = NULL;
  bool ddev, sdev;
  uint8_t *d = rt_mem_host_range((uint64_t)(uintptr_t)dst, size, &ddev, &err);
  if (!d) {
    rt_log("hsa_memory_copy(dst=%p, %zu bytes): %s", dst, size, err);
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  const uint8_t *s = rt_mem_host_range((uint64_t)(uintptr_t)src, size, &sdev, &err);
  if (!s) {
    rt_log("hsa_memory_copy(src=%p, %zu bytes): %s", src, size, err);
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  memmove(d, s, size);
  if (ddev) rt_mem_mark_init((uint64_t)(uintptr_t)dst, size);
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_amd_memory_fill(void *ptr, uint32_t value, size_t count) {
  RT_REQUIRE_OPEN();
  if (!ptr || (uintptr_t)ptr % 4 != 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT; /* R hsa_ext_amd.cpp */
  if (count == 0) return HSA_STATUS_SUCCESS;
  if (count > SIZE_MAX / 4) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  const char *err = NULL;
  bool dev;
  uint8_t *d = rt_mem_host_range((uint64_t)(uintptr_t)ptr, count * 4, &dev, &err);
  if (!d) {
    rt_log("hsa_amd_memory_fill(%p, %zu dwords): %s", ptr, count, err);
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  uint8_t b = (uint8_t)value;
  if (value == b * 0x01010101u) {
    memset(d, b, count * 4);
  } else {
    uint32_t *w = (uint32_t *)(void *)d;
    for (size_t i = 0; i < count; i++) w[i] = value;
  }
  if (dev) rt_mem_mark_init((uint64_t)(uintptr_t)ptr, count * 4);
  return HSA_STATUS_SUCCESS;
}
