/* The stand-in runtime's API, in-process (Criterion runs each test in its own process): what a
 * correct client relies on, and the refusals a careless one must get. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static int threads(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
}

#define OK(expr) cr_assert_eq((expr), HSA_STATUS_SUCCESS, "%s: %s", #expr, h_status_name(expr))
#define IS(expr, want) cr_assert_eq((int)(expr), (int)(want), "%s", #expr)

Test(api, status_strings_work_before_init_and_calls_need_init) {
  const char *s = NULL;
  OK(hsa_status_string(HSA_STATUS_ERROR_INVALID_PACKET_FORMAT, &s));
  cr_assert(strstr(s, "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT"));
  OK(hsa_status_string((hsa_status_t)HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION, &s));
  IS(hsa_status_string((hsa_status_t)0x7777, &s), HSA_STATUS_ERROR_INVALID_ARGUMENT);
  uint64_t f;
  IS(hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &f), HSA_STATUS_ERROR_NOT_INITIALIZED);
  IS(hsa_shut_down(), HSA_STATUS_ERROR_NOT_INITIALIZED);
}

Test(api, init_is_reference_counted_and_can_start_again) {
  OK(hsa_init());
  OK(hsa_init());
  OK(hsa_shut_down());
  uint64_t f = 0;
  OK(hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &f));
  cr_assert_eq(f, 1000000000ull); /* ROCr reports 1 GHz */
  OK(hsa_shut_down());
  IS(hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &f), HSA_STATUS_ERROR_NOT_INITIALIZED);
  OK(hsa_init());
  OK(hsa_shut_down());
}

/* SOFTGPU_TIMESTAMP_HZ: a frequency other than ROCr's 1 GHz, so that a client mixing up
 * nanoseconds and ticks waits or measures 10x wrong and shows it. */
Test(api, the_timestamp_frequency_can_differ_from_1_ghz) {
  setenv("SOFTGPU_TIMESTAMP_HZ", "100M", 1);
  OK(hsa_init());
  uint64_t f = 0, t0 = 0, t1 = 0;
  OK(hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &f));
  cr_assert_eq(f, 100000000ull);
  hsa_signal_t s;
  OK(hsa_signal_create(1, 0, NULL, &s));
  OK(hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP, &t0));
  hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 0, f / 50, HSA_WAIT_STATE_BLOCKED); /* 20 ms in ticks */
  OK(hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP, &t1));
  cr_assert(t1 - t0 >= f / 50 && t1 - t0 < f / 2, "waited %llu ticks at %llu Hz for 20 ms",
            (unsigned long long)(t1 - t0), (unsigned long long)f);
  OK(hsa_signal_destroy(s));
  OK(hsa_shut_down());
}

Test(api, a_malformed_environment_fails_init) {
  setenv("SOFTGPU_TARGET", "gfx1100", 1);
  cr_assert_neq(hsa_init(), HSA_STATUS_SUCCESS);
  setenv("SOFTGPU_TARGET", "gfx90a", 1);
  setenv("SOFTGPU_VRAM", "lots", 1);
  cr_assert_neq(hsa_init(), HSA_STATUS_SUCCESS);
  unsetenv("SOFTGPU_VRAM");
  OK(hsa_init());
  OK(hsa_shut_down());
}

static hsa_status_t count_agents(hsa_agent_t a, void *data) {
  hsa_agent_t *seen = data;
  for (int i = 0; i < 4; i++)
    if (!seen[i].handle) {
      seen[i] = a;
      break;
    }
  return HSA_STATUS_SUCCESS;
}
static hsa_status_t stop_at_first(hsa_agent_t a, void *data) { return HSA_STATUS_INFO_BREAK; }

Test(api, one_cpu_agent_then_one_gpu_agent) {
  setenv("SOFTGPU_TARGET", "gfx90a", 1);
  OK(hsa_init());
  hsa_agent_t seen[4] = {{0}};
  OK(hsa_iterate_agents(count_agents, seen));
  cr_assert(seen[0].handle && seen[1].handle && !seen[2].handle);
  hsa_device_type_t t0, t1;
  OK(hsa_agent_get_info(seen[0], HSA_AGENT_INFO_DEVICE, &t0));
  OK(hsa_agent_get_info(seen[1], HSA_AGENT_INFO_DEVICE, &t1));
  IS(t0, HSA_DEVICE_TYPE_CPU);
  IS(t1, HSA_DEVICE_TYPE_GPU);
  IS(hsa_iterate_agents(stop_at_first, NULL), HSA_STATUS_INFO_BREAK); /* H: returned as is */
  char name[64], product[64];
  OK(hsa_agent_get_info(seen[1], HSA_AGENT_INFO_NAME, name));
  OK(hsa_agent_get_info(seen[1], (hsa_agent_info_t)HSA_AMD_AGENT_INFO_PRODUCT_NAME, product));
  cr_assert_str_eq(name, "gfx90a");
  cr_assert(strstr(product, "softgpu"), "%s", product);
  uint32_t wave, wgmax;
  OK(hsa_agent_get_info(seen[1], HSA_AGENT_INFO_WAVEFRONT_SIZE, &wave));
  OK(hsa_agent_get_info(seen[1], HSA_AGENT_INFO_WORKGROUP_MAX_SIZE, &wgmax));
  cr_assert_eq(wave, 64);
  cr_assert_eq(wgmax, 1024);
  hsa_agent_feature_t feat;
  OK(hsa_agent_get_info(seen[1], HSA_AGENT_INFO_FEATURE, &feat));
  cr_assert(feat & HSA_AGENT_FEATURE_KERNEL_DISPATCH);
  uint8_t big[256];
  IS(hsa_agent_get_info(seen[1], (hsa_agent_info_t)0x7fff, big), HSA_STATUS_ERROR_INVALID_ARGUMENT);
  IS(hsa_agent_get_info((hsa_agent_t){12345}, HSA_AGENT_INFO_NAME, big), HSA_STATUS_ERROR_INVALID_AGENT);
  OK(hsa_shut_down());
}

static hsa_status_t first_isa(hsa_isa_t isa, void *data) {
  *(hsa_isa_t *)data = isa;
  return HSA_STATUS_SUCCESS;
}

Test(api, the_gpu_has_one_isa_named_with_its_features) {
  OK(hsa_init());
  h_env_t e;
  h_open(&e);
  hsa_isa_t isa = {0}, none = {0};
  OK(hsa_agent_iterate_isas(e.gpu, first_isa, &isa));
  OK(hsa_agent_iterate_isas(e.cpu, first_isa, &none));
  cr_assert(isa.handle && !none.handle);
  uint32_t len = 0;
  OK(hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME_LENGTH, &len));
  char name[128];
  OK(hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME, name));
  cr_assert_str_eq(name, "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-");
  cr_assert_eq(len, strlen(name) + 1); /* H: the length includes the NUL */
  OK(hsa_shut_down());
  OK(hsa_shut_down());
}

typedef struct pools {
  int n;
  hsa_amd_segment_t seg[8];
  uint32_t flags[8];
  bool alloc[8];
  size_t size[8];
} pools_t;

static hsa_status_t list_pools(hsa_amd_memory_pool_t p, void *data) {
  pools_t *ps = data;
  int i = ps->n++;
  OK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &ps->seg[i]));
  OK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &ps->flags[i]));
  OK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &ps->alloc[i]));
  OK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SIZE, &ps->size[i]));
  uint8_t junk[64];
  IS(hsa_amd_memory_pool_get_info(p, (hsa_amd_memory_pool_info_t)99, junk), HSA_STATUS_ERROR_INVALID_ARGUMENT);
  return HSA_STATUS_SUCCESS;
}

Test(api, pools_as_rocr_lists_them_for_a_discrete_gpu) {
  setenv("SOFTGPU_VRAM", "12G", 1);
  h_env_t e;
  h_open(&e);
  pools_t cpu = {0}, gpu = {0};
  OK(hsa_amd_agent_iterate_memory_pools(e.cpu, list_pools, &cpu));
  OK(hsa_amd_agent_iterate_memory_pools(e.gpu, list_pools, &gpu));
  cr_assert_eq(cpu.n, 3);
  cr_assert_eq(cpu.flags[0], HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT | HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED);
  cr_assert_eq(cpu.flags[1], HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED);
  cr_assert_eq(cpu.flags[2], HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED);
  cr_assert_eq(gpu.n, 2);
  IS(gpu.seg[0], HSA_AMD_SEGMENT_GLOBAL);
  cr_assert_eq(gpu.flags[0], HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED);
  cr_assert_eq(gpu.size[0], 12ull << 30);
  IS(gpu.seg[1], HSA_AMD_SEGMENT_GROUP);
  cr_assert(!gpu.alloc[1]);
  cr_assert_eq(gpu.size[1], 65536);
  hsa_amd_memory_pool_access_t acc;
  OK(hsa_amd_agent_memory_pool_get_info(e.gpu, e.kernarg, HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS, &acc));
  IS(acc, HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT);
  OK(hsa_amd_agent_memory_pool_get_info(e.cpu, e.vram, HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS, &acc));
  IS(acc, HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED);
  OK(hsa_shut_down());
}

/* Whether the process can read a byte at p (process_vm_readv: no crash when it cannot). */
static bool host_readable(const void *p) {
  char c;
  struct iovec l = {&c, 1}, r = {(void *)p, 1};
  return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == 1;
}

Test(api, vram_is_not_mapped_for_the_host_but_copies_reach_it) {
  h_env_t e;
  h_open(&e);
  uint32_t *v = h_alloc(e.vram, 1, NULL); /* rounds up to the 4 KiB granule */
  cr_assert(!host_readable(v), "VRAM must not be readable through its pointer on the host");
  uint32_t in[1024], out[1024];
  for (int i = 0; i < 1024; i++) in[i] = (uint32_t)i * 2654435761u;
  OK(hsa_memory_copy(v, in, sizeof in));
  OK(hsa_memory_copy(out, v, sizeof out));
  cr_assert_arr_eq(in, out, sizeof in);
  OK(hsa_amd_memory_fill(v + 1, 0xdeadbeef, 10));
  OK(hsa_memory_copy(out, v, 48));
  cr_assert_eq(out[0], in[0]);
  cr_assert_eq(out[1], 0xdeadbeef);
  cr_assert_eq(out[10], 0xdeadbeef);
  cr_assert_eq(out[11], in[11]);
  uint8_t *sys = h_alloc(e.fine, 100, NULL);
  cr_assert(host_readable(sys));
  OK(hsa_memory_copy(v, sys, 100)); /* device to device, host memory both ends */
  OK(hsa_amd_memory_pool_free(v));
  OK(hsa_amd_memory_pool_free(sys));
  OK(hsa_shut_down());
}

Test(api, careless_memory_calls_are_refused) {
  h_env_t e;
  h_open(&e);
  void *p = NULL;
  IS(hsa_amd_memory_pool_allocate(e.vram, 4096, 1, &p), HSA_STATUS_ERROR_INVALID_ARGUMENT); /* flags: 0 */
  IS(hsa_amd_memory_pool_allocate(e.vram, 0, 0, &p), HSA_STATUS_ERROR_INVALID_ARGUMENT);
  uint8_t *v = h_alloc(e.vram, 8192, NULL);
  uint8_t *s = h_alloc(e.kernarg, 4096, NULL);
  uint8_t host[16384];
  IS(hsa_amd_memory_pool_free(v + 4), HSA_STATUS_ERROR_INVALID_ALLOCATION);   /* interior */
  IS(hsa_amd_memory_pool_free(host), HSA_STATUS_ERROR_INVALID_ALLOCATION);    /* unknown */
  IS(hsa_amd_agents_allow_access(1, &e.gpu, NULL, s + 64), HSA_STATUS_ERROR_INVALID_ARGUMENT);
  uint32_t flags = 0;
  IS(hsa_amd_agents_allow_access(1, &e.gpu, &flags, s), HSA_STATUS_ERROR_INVALID_ARGUMENT);
  IS(hsa_amd_memory_fill(v + 2, 0, 4), HSA_STATUS_ERROR_INVALID_ARGUMENT);    /* not 4-byte aligned */
  IS(hsa_amd_memory_fill(v, 0, 8192 / 4 + 1), HSA_STATUS_ERROR_INVALID_ARGUMENT); /* past the end */
  IS(hsa_memory_copy(v + 4096, host, 8192), HSA_STATUS_ERROR_INVALID_ARGUMENT);  /* straddles the end */
  IS(hsa_memory_copy(host, v - 4096, 8192), HSA_STATUS_ERROR_INVALID_ARGUMENT);  /* ends inside */
  OK(hsa_amd_memory_pool_free(v));
  IS(hsa_amd_memory_pool_free(v), HSA_STATUS_ERROR_INVALID_ALLOCATION); /* double free */
  OK(hsa_amd_memory_pool_free(s));
  OK(hsa_shut_down());
}

Test(api, vram_is_accounted) {
  setenv("SOFTGPU_VRAM", "64M", 1);
  h_env_t e;
  h_open(&e);
  void *a, *b;
  OK(hsa_amd_memory_pool_allocate(e.vram, 48u << 20, 0, &a));
  IS(hsa_amd_memory_pool_allocate(e.vram, 32u << 20, 0, &b), HSA_STATUS_ERROR_OUT_OF_RESOURCES);
  OK(hsa_amd_memory_pool_free(a));
  OK(hsa_amd_memory_pool_allocate(e.vram, 32u << 20, 0, &b));
  OK(hsa_shut_down());
}

static void *store_later(void *arg) {
  struct timespec ts = {0, 50 * 1000000};
  nanosleep(&ts, NULL);
  hsa_signal_store_screlease(*(hsa_signal_t *)arg, 7);
  return NULL;
}

Test(api, signals_hold_values_and_wake_waiters) {
  h_env_t e;
  h_open(&e);
  hsa_signal_t s;
  OK(hsa_signal_create(5, 0, NULL, &s));
  cr_assert_eq(hsa_signal_load_scacquire(s), 5);
  hsa_signal_add_relaxed(s, 3);
  hsa_signal_subtract_screlease(s, 1);
  cr_assert_eq(hsa_signal_load_relaxed(s), 7);
  cr_assert_eq(hsa_signal_cas_scacq_screl(s, 7, 1), 7);
  cr_assert_eq(hsa_signal_exchange_relaxed(s, 2), 1);
  hsa_signal_or_relaxed(s, 8);
  cr_assert_eq(hsa_signal_load_relaxed(s), 10);
  /* a wait that times out returns the value it saw (H); 10 ms in timestamp ticks */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  cr_assert_eq(hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 0, 10000000, HSA_WAIT_STATE_BLOCKED), 10);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
  cr_assert(ms >= 9 && ms < 1000, "waited %ld ms for a 10 ms timeout", ms);
  pthread_t th;
  pthread_create(&th, NULL, store_later, &s);
  cr_assert_eq(hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 7, UINT64_MAX, HSA_WAIT_STATE_BLOCKED), 7);
  pthread_join(th, NULL);
  OK(hsa_signal_destroy(s));
  IS(hsa_signal_destroy(s), HSA_STATUS_ERROR_INVALID_SIGNAL);
  IS(hsa_signal_destroy((hsa_signal_t){0x1234}), HSA_STATUS_ERROR_INVALID_SIGNAL);
  OK(hsa_shut_down());
}

Test(api, no_thread_before_the_first_queue) {
  int before = threads();
  h_env_t e;
  h_open(&e);
  h_program_t p;
  h_read_kernels(&p);
  OK(h_load(&e, &p, true));
  void *m = h_alloc(e.vram, 1 << 20, NULL);
  hsa_signal_t s;
  OK(hsa_signal_create(1, 0, NULL, &s));
  cr_assert_eq(threads(), before, "kiln forks probe children after hsa_init: no thread may exist yet");
  hsa_queue_t *q;
  OK(hsa_queue_create(e.gpu, 64, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX, &q));
  cr_assert_eq(threads(), before + 1);
  OK(hsa_queue_destroy(q));
  OK(hsa_amd_memory_pool_free(m));
  OK(hsa_signal_destroy(s));
  OK(hsa_executable_destroy(p.exec));
  OK(hsa_code_object_reader_destroy(p.reader));
  OK(hsa_shut_down());
  cr_assert_eq(threads(), before);
}

/* Submits a barrier packet with the given dependencies; returns its completion signal. */
static hsa_signal_t barrier(hsa_queue_t *q, uint16_t type, hsa_signal_t d0, hsa_signal_t d1) {
  hsa_signal_t done;
  OK(hsa_signal_create(1, 0, NULL, &done));
  h_barrier(q, type, d0, d1, done);
  return done;
}

Test(api, barrier_packets_wait_for_their_dependencies) {
  h_env_t e;
  h_open(&e);
  hsa_queue_t *q;
  OK(hsa_queue_create(e.gpu, 64, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX, &q));
  OK(hsa_amd_profiling_set_profiler_enabled(q, 1));
  hsa_signal_t a, b;
  OK(hsa_signal_create(1, 0, NULL, &a));
  OK(hsa_signal_create(1, 0, NULL, &b));
  hsa_signal_t and_done = barrier(q, HSA_PACKET_TYPE_BARRIER_AND, a, b);
  cr_assert(!h_wait_zero(and_done, 50));
  hsa_signal_store_screlease(a, 0);
  cr_assert(!h_wait_zero(and_done, 50), "AND waits for every dependency");
  hsa_signal_store_screlease(b, 0);
  cr_assert(h_wait_zero(and_done, 2000));
  cr_assert_eq(hsa_queue_load_read_index_scacquire(q), 1);
  hsa_amd_profiling_dispatch_time_t t;
  OK(hsa_amd_profiling_get_dispatch_time(e.gpu, and_done, &t));
  cr_assert(t.start > 0 && t.end >= t.start + 50000000ull, "start %llu end %llu: the barrier waited ~100 ms",
            (unsigned long long)t.start, (unsigned long long)t.end);
  hsa_signal_store_screlease(a, 1);
  hsa_signal_t or_done = barrier(q, HSA_PACKET_TYPE_BARRIER_OR, a, b); /* b is 0 already */
  cr_assert(h_wait_zero(or_done, 2000));
  hsa_signal_t fresh;
  OK(hsa_signal_create(0, 0, NULL, &fresh));
  IS(hsa_amd_profiling_get_dispatch_time(e.gpu, fresh, &t), HSA_STATUS_ERROR_INVALID_SIGNAL);
  OK(hsa_amd_profiling_set_profiler_enabled(q, 0));
  hsa_signal_t plain = barrier(q, HSA_PACKET_TYPE_BARRIER_AND, (hsa_signal_t){0}, (hsa_signal_t){0});
  cr_assert(h_wait_zero(plain, 2000));
  OK(hsa_amd_profiling_get_dispatch_time(e.gpu, plain, &t));
  cr_assert(t.start == 0 && t.end == 0, "no timestamps without profiling, as in ROCr");
  OK(hsa_queue_destroy(q));
  OK(hsa_shut_down());
}

Test(api, kernel_symbols_carry_the_descriptor_sizes) {
  h_env_t e;
  h_open(&e);
  h_program_t p;
  h_read_kernels(&p);
  hsa_executable_symbol_t sym;
  OK(hsa_code_object_reader_create_from_memory(p.buf, p.size, &p.reader));
  OK(hsa_executable_create_alt(HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, NULL, &p.exec));
  OK(hsa_executable_load_agent_code_object(p.exec, e.gpu, p.reader, NULL, NULL));
  OK(hsa_executable_freeze(p.exec, NULL));
  IS(hsa_executable_freeze(p.exec, NULL), HSA_STATUS_ERROR_FROZEN_EXECUTABLE);
  IS(hsa_executable_load_agent_code_object(p.exec, e.gpu, p.reader, NULL, NULL), HSA_STATUS_ERROR_FROZEN_EXECUTABLE);
  IS(hsa_executable_get_symbol_by_name(p.exec, "vadd", &e.gpu, &sym), HSA_STATUS_ERROR_INVALID_SYMBOL_NAME);
  IS(hsa_executable_get_symbol_by_name(p.exec, "vadd.kd", &e.cpu, &sym), HSA_STATUS_ERROR_INVALID_SYMBOL_NAME);
  IS(hsa_executable_get_symbol_by_name(p.exec, "vadd.kd", NULL, &sym), HSA_STATUS_ERROR_INVALID_SYMBOL_NAME);
  h_kernel_t k = h_kernel(&e, &p, "uses_lds");
  cr_assert_eq(k.group_size, 4096);
  cr_assert_eq(k.kernarg_size, 8);
  OK(hsa_executable_get_symbol_by_name(p.exec, "vadd.kd", &e.gpu, &sym));
  uint32_t align = 0, len = 0;
  OK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT, &align));
  OK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH, &len));
  cr_assert_eq(align, 16);
  cr_assert_eq(len, 7);
  uint64_t kd;
  OK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, &kd));
  cr_assert(!host_readable((void *)(uintptr_t)kd), "loaded code lives in device memory");
  OK(hsa_executable_destroy(p.exec));
  IS(hsa_executable_destroy(p.exec), HSA_STATUS_ERROR_INVALID_EXECUTABLE);
  OK(hsa_code_object_reader_destroy(p.reader));
  OK(hsa_shut_down());
}

Test(api, malformed_code_objects_are_refused) {
  h_env_t e;
  h_open(&e);
  h_program_t p;
  h_read_kernels(&p);
  uint8_t *copy = malloc(p.size);
  struct {
    size_t off;
    uint8_t val;
    hsa_status_t want;
  } cases[] = {
      {4, 1, HSA_STATUS_ERROR_INVALID_CODE_OBJECT},      /* ELFCLASS32 */
      {7, 0, HSA_STATUS_ERROR_INVALID_CODE_OBJECT},      /* OS ABI */
      {8, 1, HSA_STATUS_ERROR_INVALID_CODE_OBJECT},      /* code object v3 */
      {16, 2, HSA_STATUS_ERROR_INVALID_CODE_OBJECT},     /* ET_EXEC */
      {18, 62, HSA_STATUS_ERROR_INVALID_CODE_OBJECT},    /* x86-64 */
      {48, 0x3c, HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS}, /* e_flags mach gfx940 */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    memcpy(copy, p.buf, p.size);
    copy[cases[c].off] = cases[c].val;
    hsa_code_object_reader_t r;
    hsa_executable_t x;
    OK(hsa_code_object_reader_create_from_memory(copy, p.size, &r));
    OK(hsa_executable_create_alt(HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, NULL, &x));
    hsa_status_t s = hsa_executable_load_agent_code_object(x, e.gpu, r, NULL, NULL);
    cr_expect_eq(s, cases[c].want, "byte %zu = %u: %s", cases[c].off, cases[c].val, h_status_name(s));
    OK(hsa_executable_destroy(x));
    OK(hsa_code_object_reader_destroy(r));
  }
  /* every prefix of the file: truncated code objects fail cleanly */
  for (size_t n = 1; n < p.size; n += 61) {
    hsa_code_object_reader_t r;
    hsa_executable_t x;
    OK(hsa_code_object_reader_create_from_memory(p.buf, n, &r));
    OK(hsa_executable_create_alt(HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, NULL, &x));
    cr_expect_neq(hsa_executable_load_agent_code_object(x, e.gpu, r, NULL, NULL), HSA_STATUS_SUCCESS, "prefix %zu", n);
    OK(hsa_executable_destroy(x));
    OK(hsa_code_object_reader_destroy(r));
  }
  free(copy);
  OK(hsa_shut_down());
}

Test(api, functions_outside_the_subset_fail_closed, .init = cr_redirect_stderr) {
  h_env_t e;
  h_open(&e);
  void *p = NULL;
  IS(hsa_amd_memory_lock(&e, 64, NULL, 0, &p), HSA_STATUS_ERROR);
  IS(hsa_amd_ipc_memory_create(&e, 64, NULL), HSA_STATUS_ERROR);
  fflush(stderr);
  char buf[4096] = "";
  FILE *f = cr_get_redirected_stderr();
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  cr_assert(strstr(buf, "hsa_amd_memory_lock is not implemented by the stand-in runtime"), "%s", buf);
  cr_assert(strstr(buf, "hsa_amd_ipc_memory_create is not implemented"), "%s", buf);
  OK(hsa_shut_down());
}

Test(api, the_last_shut_down_names_what_the_client_leaked, .init = cr_redirect_stderr) {
  h_env_t e;
  h_open(&e);
  h_alloc(e.vram, 4096, NULL);
  hsa_signal_t s;
  OK(hsa_signal_create(0, 0, NULL, &s));
  hsa_queue_t *q;
  OK(hsa_queue_create(e.gpu, 64, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX, &q));
  OK(hsa_shut_down());
  fflush(stderr);
  char buf[4096] = "";
  size_t n = fread(buf, 1, sizeof buf - 1, cr_get_redirected_stderr());
  buf[n] = '\0';
  cr_assert(strstr(buf, "leaked 1 queue(s), 0 executable(s), 1 signal(s) and 1 allocation(s) (4096 bytes)"), "%s", buf);
  /* everything was released: the next init starts clean */
  OK(hsa_init());
  OK(hsa_shut_down());
}

/* Every function hsa.h and hsa_ext_amd.h declare is exported, at ROCr's version node. */
Test(api, every_header_function_is_exported_at_rocr_1) {
  const char *lib = getenv("SGRT_LIBRARY"), *list = getenv("SGRT_FUNCTIONS");
  cr_assert(lib && list, "SGRT_LIBRARY and SGRT_FUNCTIONS come from meson");
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  cr_assert(h, "%s", dlerror());
  FILE *f = fopen(list, "r");
  cr_assert(f, "%s", list);
  char name[128];
  int n = 0;
  while (fscanf(f, "%127s", name) == 1) {
    cr_expect(dlvsym(h, name, "ROCR_1"), "%s is not exported at ROCR_1", name);
    n++;
  }
  fclose(f);
  cr_assert_geq(n, 200, "the list has only %d functions", n);
  cr_assert_null(dlsym(h, "rt_log"), "internal functions stay hidden");
}
