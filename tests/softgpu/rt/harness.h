/* A small, correct HSA client for the stand-in runtime's tests: find the agents and pools, load
 * the test kernels (kernels.cl, built by clang for the target), build and submit AQL packets the
 * way hsa.h says. The broken clients in client.c start from it and break one rule each. */
#ifndef KILN_TESTS_SOFTGPU_RT_HARNESS_H
#define KILN_TESTS_SOFTGPU_RT_HARNESS_H

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct h_env {
  hsa_agent_t cpu, gpu;
  hsa_amd_memory_pool_t kernarg, fine, vram;
  bool have_kernarg, have_fine, have_vram;
} h_env_t;

typedef struct h_kernel {
  uint64_t object;
  uint32_t kernarg_size, group_size, private_size;
} h_kernel_t;

typedef struct h_program {
  hsa_code_object_reader_t reader;
  hsa_executable_t exec;
  void *buf; /* the code object bytes (mmap'd, so a test can unmap them) */
  size_t size;
} h_program_t;

/* hsa_init and discovery; exits with a message when something is missing. */
void h_open(h_env_t *e);
/* The code object for $SOFTGPU_TARGET (default gfx942) from $SGRT_KERNELS_DIR. */
void h_read_kernels(h_program_t *p);
/* Reader, executable, load; freezes when `freeze`. Returns the load status. */
hsa_status_t h_load(h_env_t *e, h_program_t *p, bool freeze);
h_kernel_t h_kernel(h_env_t *e, h_program_t *p, const char *name);

/* Allocates from a pool and, for system pools, grants the GPU access. */
void *h_alloc(hsa_amd_memory_pool_t pool, size_t bytes, hsa_agent_t *grant);

/* Fills the dispatch packet body (header left INVALID). */
void h_dispatch_body(hsa_kernel_dispatch_packet_t *p, const h_kernel_t *k, uint32_t groups, void *kernarg,
                     hsa_signal_t done, uint32_t dynamic_lds);
/* The packet slot for the next write index; returns the index. */
uint64_t h_reserve(hsa_queue_t *q, void **slot);
/* Publishes header (and setup) with one release store, as H requires. */
void h_publish(void *slot, uint16_t type, uint16_t setup);
void h_ring(hsa_queue_t *q, uint64_t index);
/* Submits a barrier packet (AND or OR) with two dependencies (0: none) and a completion signal. */
void h_barrier(hsa_queue_t *q, uint16_t type, hsa_signal_t d0, hsa_signal_t d1, hsa_signal_t done);
/* Waits for the signal to reach 0; false after `ms` milliseconds. */
bool h_wait_zero(hsa_signal_t s, uint32_t ms);
/* Submits a dispatch the correct way and waits up to `ms`; returns whether it completed. */
bool h_run(hsa_queue_t *q, const h_kernel_t *k, uint32_t groups, void *kernarg, uint32_t dynamic_lds, uint32_t ms);

const char *h_status_name(hsa_status_t s);

#define H_CHECK(expr)                                                                             \
  do {                                                                                            \
    hsa_status_t h_s_ = (expr);                                                                   \
    if (h_s_ != HSA_STATUS_SUCCESS) h_die("%s:%d: %s: %s", __FILE__, __LINE__, #expr, h_status_name(h_s_)); \
  } while (0)

void h_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

#endif
