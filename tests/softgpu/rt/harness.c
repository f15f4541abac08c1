#include "harness.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void h_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "client: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(3);
}

const char *h_status_name(hsa_status_t s) {
  const char *text = NULL;
  if (hsa_status_string(s, &text) != HSA_STATUS_SUCCESS || !text) return "(unknown status)";
  static __thread char name[96];
  snprintf(name, sizeof name, "%.*s", (int)strcspn(text, ":"), text);
  return name;
}

static hsa_status_t pick_agent(hsa_agent_t a, void *data) {
  h_env_t *e = data;
  hsa_device_type_t t;
  H_CHECK(hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &t));
  if (t == HSA_DEVICE_TYPE_CPU) e->cpu = a;
  if (t == HSA_DEVICE_TYPE_GPU) e->gpu = a;
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t pick_pool(hsa_amd_memory_pool_t p, void *data) {
  h_env_t *e = data;
  hsa_amd_segment_t seg;
  uint32_t flags = 0;
  H_CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg));
  if (seg != HSA_AMD_SEGMENT_GLOBAL) return HSA_STATUS_SUCCESS;
  H_CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags));
  if (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) e->kernarg = p, e->have_kernarg = true;
  else if (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED) e->fine = p, e->have_fine = true;
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t pick_vram(hsa_amd_memory_pool_t p, void *data) {
  h_env_t *e = data;
  hsa_amd_segment_t seg;
  H_CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg));
  if (seg == HSA_AMD_SEGMENT_GLOBAL) e->vram = p, e->have_vram = true;
  return HSA_STATUS_SUCCESS;
}

void h_open(h_env_t *e) {
  memset(e, 0, sizeof *e);
  H_CHECK(hsa_init());
  H_CHECK(hsa_iterate_agents(pick_agent, e));
  if (!e->gpu.handle || !e->cpu.handle) h_die("no CPU or no GPU agent");
  char product[64];
  H_CHECK(hsa_agent_get_info(e->gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_PRODUCT_NAME, product));
  /* These tests are about the stand-in: never run them against a real ROCr by accident. */
  if (!strstr(product, "softgpu")) h_die("the GPU agent is '%s', not the softgpu stand-in", product);
  H_CHECK(hsa_amd_agent_iterate_memory_pools(e->cpu, pick_pool, e));
  H_CHECK(hsa_amd_agent_iterate_memory_pools(e->gpu, pick_vram, e));
  if (!e->have_kernarg || !e->have_fine || !e->have_vram) h_die("missing a memory pool");
}

void h_read_kernels(h_program_t *p) {
  const char *dir = getenv("SGRT_KERNELS_DIR"), *target = getenv("SOFTGPU_TARGET");
  char path[4096];
  snprintf(path, sizeof path, "%s/sgrt_kernels.%s.hsaco", dir ? dir : ".", target && *target ? target : "gfx942");
  int fd = open(path, O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) h_die("cannot open %s", path);
  p->size = (size_t)st.st_size;
  p->buf = mmap(NULL, p->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p->buf == MAP_FAILED) h_die("cannot map %s", path);
}

hsa_status_t h_load(h_env_t *e, h_program_t *p, bool freeze) {
  H_CHECK(hsa_code_object_reader_create_from_memory(p->buf, p->size, &p->reader));
  H_CHECK(hsa_executable_create_alt(HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, NULL, &p->exec));
  hsa_status_t s = hsa_executable_load_agent_code_object(p->exec, e->gpu, p->reader, NULL, NULL);
  if (s == HSA_STATUS_SUCCESS && freeze) s = hsa_executable_freeze(p->exec, NULL);
  return s;
}

h_kernel_t h_kernel(h_env_t *e, h_program_t *p, const char *name) {
  char full[256];
  snprintf(full, sizeof full, "%s.kd", name);
  hsa_executable_symbol_t sym;
  H_CHECK(hsa_executable_get_symbol_by_name(p->exec, full, &e->gpu, &sym));
  h_kernel_t k;
  H_CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, &k.object));
  H_CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE, &k.kernarg_size));
  H_CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE, &k.group_size));
  H_CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE, &k.private_size));
  return k;
}

void *h_alloc(hsa_amd_memory_pool_t pool, size_t bytes, hsa_agent_t *grant) {
  void *p = NULL;
  H_CHECK(hsa_amd_memory_pool_allocate(pool, bytes, 0, &p));
  if (grant) H_CHECK(hsa_amd_agents_allow_access(1, grant, NULL, p));
  return p;
}

void h_dispatch_body(hsa_kernel_dispatch_packet_t *p, const h_kernel_t *k, uint32_t groups, void *kernarg,
                     hsa_signal_t done, uint32_t dynamic_lds) {
  memset((uint8_t *)p + 4, 0, sizeof *p - 4);
  p->workgroup_size_x = 64;
  p->workgroup_size_y = 1;
  p->workgroup_size_z = 1;
  p->grid_size_x = groups * 64;
  p->grid_size_y = 1;
  p->grid_size_z = 1;
  p->private_segment_size = k->private_size;
  p->group_segment_size = k->group_size + dynamic_lds;
  p->kernel_object = k->object;
  p->kernarg_address = kernarg;
  p->completion_signal = done;
}

uint64_t h_reserve(hsa_queue_t *q, void **slot) {
  uint64_t index = hsa_queue_add_write_index_scacq_screl(q, 1);
  while (index - hsa_queue_load_read_index_scacquire(q) >= q->size) {
  }
  *slot = (uint8_t *)q->base_address + (index & (q->size - 1)) * 64;
  return index;
}

void h_publish(void *slot, uint16_t type, uint16_t setup) {
  uint16_t header = (uint16_t)(type << HSA_PACKET_HEADER_TYPE | HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE |
                               HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
  __atomic_store_n((uint32_t *)slot, (uint32_t)header | (uint32_t)setup << 16, __ATOMIC_RELEASE);
}

void h_ring(hsa_queue_t *q, uint64_t index) { hsa_signal_store_screlease(q->doorbell_signal, (hsa_signal_value_t)index); }

void h_barrier(hsa_queue_t *q, uint16_t type, hsa_signal_t d0, hsa_signal_t d1, hsa_signal_t done) {
  void *slot;
  uint64_t i = h_reserve(q, &slot);
  hsa_barrier_and_packet_t *b = slot;
  memset((uint8_t *)b + 4, 0, sizeof *b - 4);
  b->dep_signal[0] = d0;
  b->dep_signal[1] = d1;
  b->completion_signal = done;
  h_publish(slot, type, 0);
  h_ring(q, i);
}

bool h_wait_zero(hsa_signal_t s, uint32_t ms) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint64_t freq = 0;
  H_CHECK(hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &freq));
  for (;;) {
    if (hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 0, freq / 100, HSA_WAIT_STATE_BLOCKED) == 0) return true;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > (long)ms) return false;
  }
}

bool h_run(hsa_queue_t *q, const h_kernel_t *k, uint32_t groups, void *kernarg, uint32_t dynamic_lds, uint32_t ms) {
  hsa_signal_t done;
  H_CHECK(hsa_signal_create(1, 0, NULL, &done));
  void *slot;
  uint64_t index = h_reserve(q, &slot);
  h_dispatch_body(slot, k, groups, kernarg, done, dynamic_lds);
  h_publish(slot, HSA_PACKET_TYPE_KERNEL_DISPATCH, 1);
  h_ring(q, index);
  bool ok = h_wait_zero(done, ms);
  if (ok) H_CHECK(hsa_signal_destroy(done));
  return ok;
}
