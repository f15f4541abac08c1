/* softgpu's stand-in ROCm runtime: state shared by its files (not a public header).
 *
 * Written from hsa.h / hsa_ext_amd.h (H), the HSA Runtime Programmer's Reference (PRM), ROCr's
 * source (R: ROCR-Runtime, runtime/hsa-runtime/) and LLVM's AMDGPUUsage (AU). Each strictness
 * rule cites its source where it is enforced.
 *
 * Threads: the API may be called from any thread; `rt.lock` guards the object lists; the
 * address space has its own rwlock because the interpreter's workers look addresses up
 * concurrently. The runtime creates no thread before the first queue (kiln forks probe
 * children after hsa_init); a queue owns one packet-processor thread; memory faults are
 * reported on one "async events" thread made at the first fault. */
#ifndef KILN_SOFTGPU_RT_RT_H
#define KILN_SOFTGPU_RT_RT_H

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <hsa/amd_hsa_queue.h>
#include <hsa/amd_hsa_signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "device/softgpu/isa/sgisa.h"

#define RT_EXPORT __attribute__((visibility("default")))

/* --- configuration (environment, read at the first hsa_init) ---------------------------------- */

typedef struct rt_config {
  sg_target_t target;        /* SOFTGPU_TARGET=gfx942|gfx90a */
  const char *proc;          /* "gfx942" */
  const char *isa_name;      /* "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-" */
  uint32_t elf_mach;         /* EF_AMDGPU_MACH_* of the target */
  uint64_t vram_bytes;       /* SOFTGPU_VRAM (bytes; K/M/G suffixes), default 16 GiB */
  uint64_t timestamp_hz;     /* SOFTGPU_TIMESTAMP_HZ, default 1 GHz as ROCr reports */
  bool strict;               /* SOFTGPU_STRICT=0 turns the stand-in's own rules into warnings */
  uint32_t max_code_object;  /* SOFTGPU_MAX_CODE_OBJECT=5 rejects v6 as ROCr 5.2 does */
  uint32_t doorbell_grace_ms;/* a rung doorbell with a still-INVALID header warns after this */
  uint32_t compute_units;
  bool track_init;           /* SOFTGPU_CHECK contains "uninit": VRAM allocations get init bits */
} rt_config_t;

/* --- agents, pools, ISA --------------------------------------------------------------------- */

typedef enum { POOL_CPU_KERNARG, POOL_CPU_FINE, POOL_CPU_COARSE, POOL_GPU_VRAM, POOL_GPU_LDS,
               POOL_COUNT } pool_id_t;

typedef struct rt_pool {
  pool_id_t id;
  bool gpu_owned;         /* owner is the GPU agent (VRAM, LDS) */
  hsa_amd_segment_t segment;
  uint32_t global_flags;  /* HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_* */
  bool alloc_allowed;
} rt_pool_t;

typedef struct rt_agent {
  hsa_device_type_t type;
  uint32_t node;
} rt_agent_t;

extern rt_agent_t rt_cpu_agent, rt_gpu_agent;
extern rt_pool_t rt_pools[POOL_COUNT];

static inline hsa_agent_t rt_agent_handle(rt_agent_t *a) { return (hsa_agent_t){(uint64_t)(uintptr_t)a}; }
/* NULL unless `h` is one of the two agents. */
rt_agent_t *rt_agent_from(hsa_agent_t h);
bool rt_pool_id(uint64_t handle, pool_id_t *out);

/* --- the address space (memory.c) ------------------------------------------------------------ */

typedef enum { ALLOC_VRAM, ALLOC_SYSTEM, ALLOC_CODE, ALLOC_RUNTIME } alloc_kind_t;

typedef struct rt_alloc {
  uint64_t va;            /* the address clients and kernels use */
  uint64_t size;          /* granule-rounded */
  uint8_t *host;          /* where the bytes are for the runtime (VRAM/code: the alias view) */
  uint8_t *host_view;     /* VRAM/code: the PROT_NONE mapping at va (unmapped on free) */
  alloc_kind_t kind;
  pool_id_t pool;
  uint32_t gpu_access;    /* SG_ACC_* */
  uint8_t *init_bits;     /* SOFTGPU_CHECK=uninit, VRAM only: one bit per byte written */
  uint32_t busy;          /* in-flight dispatches that name this allocation */
  uint64_t busy_dispatch; /* the last such dispatch id (for messages) */
} rt_alloc_t;

/* Allocates from a pool (size already checked nonzero). */
hsa_status_t rt_mem_alloc(pool_id_t pool, size_t size, alloc_kind_t kind, void **out_va,
                          uint8_t **out_host);
/* Frees the allocation based at va. `who` names the client call (its checks apply: only VRAM and
 * system allocations, none in use by a dispatch); NULL is the runtime freeing its own memory. */
hsa_status_t rt_mem_free(void *va, const char *who);
typedef struct rt_code_range {
  uint64_t offset, size; /* page-aligned, within the image */
  uint32_t access;       /* SG_ACC_* */
} rt_code_range_t;
hsa_status_t rt_mem_alloc_code(uint64_t size, const rt_code_range_t *ranges, size_t n, void **out_va,
                               uint8_t **out_host);
void rt_mem_free_code(void *va, uint8_t *host, uint64_t size);
/* Copies a snapshot of the allocation holding [va, va+len) into *out; false if none holds it
 * whole. */
bool rt_mem_find(uint64_t va, uint64_t len, rt_alloc_t *out);
/* The sg_memory_t lookup the interpreter uses. */
bool rt_mem_lookup_cb(void *ctx, uint64_t va, sg_region_t *out);
/* Marks the allocations a dispatch names (kernarg buffer, pointers in it) busy / not busy. */
void rt_mem_mark_busy(const uint64_t *vas, size_t n, uint64_t dispatch_id, int delta);
/* Sets gpu_access on the allocation based at va (exact). */
hsa_status_t rt_mem_set_gpu_access(uint64_t va, uint32_t access, alloc_kind_t *out_kind);
/* Host pointer for [va, va+len): inside one allocation, or plain host memory outside all of
 * them. NULL with *err set when the range straddles an allocation's end or lies in VRAM's
 * reserved view without being allocated. */
uint8_t *rt_mem_host_range(uint64_t va, uint64_t len, bool *out_device, const char **err);
/* Marks [va, va+len) written by the host (SOFTGPU_CHECK=uninit tracks VRAM only: the host
 * reaches it through copies and fills alone, so every write is seen). */
void rt_mem_mark_init(uint64_t va, uint64_t len);
size_t rt_mem_live(uint64_t *out_bytes);
void rt_mem_release_all(void);
uint64_t rt_mem_vram_used(void);

/* --- signals (signal.c) ----------------------------------------------------------------------- */

typedef struct rt_signal {
  amd_signal_t amd;        /* first: the handle is its address, as in ROCr */
  uint64_t magic;
  _Atomic uint32_t seq;    /* bumped on every change: the futex word */
  _Atomic uint32_t waiters;
  _Atomic uint32_t inflight; /* packets that name it as completion or dependency signal */
  bool dispatch_done;      /* was the completion signal of a finished dispatch */
  void *doorbell_of;       /* the queue whose doorbell this is (stores keep the maximum) */
  struct rt_signal *next;
} rt_signal_t;

rt_signal_t *rt_signal_from(hsa_signal_t h);
hsa_status_t rt_signal_new(int64_t initial, rt_signal_t **out);
void rt_signal_delete(rt_signal_t *s);
/* Atomically adds `delta` (release) and wakes waiters. */
void rt_signal_add(rt_signal_t *s, int64_t delta);
/* Waits for a change of s->seq from `seen` for at most timeout_ns (UINT64_MAX: forever). */
void rt_signal_wait_change(rt_signal_t *s, uint32_t seen, uint64_t timeout_ns);
size_t rt_signal_live(void);
void rt_signal_release_all(void);

/* --- executables (loader.c) ------------------------------------------------------------------ */

typedef struct rt_kernel_info {
  sg_code_t *code;
  uint32_t kernarg_size, group_size, private_size;
  uint64_t kd_va;
} rt_kernel_info_t;

/* Finds the frozen executable whose image holds the kernel descriptor `kd` and pins it (in-flight
 * count) so that it cannot be destroyed; false with a message when `kd` is not the .kd address of
 * a kernel in a frozen executable loaded for the GPU agent. */
bool rt_exec_pin_kernel(uint64_t kd, rt_kernel_info_t *out, char *why, size_t whycap);
void rt_exec_unpin_kernel(uint64_t kd);
size_t rt_exec_live(void);
void rt_exec_release_all(void);

/* --- queues (queue.c) and events (events.c) ---------------------------------------------------- */

size_t rt_queue_live(void);
void rt_queue_release_all(void);
/* Raises HSA_AMD_GPU_MEMORY_FAULT_EVENT on the async-events thread and waits for the handlers;
 * aborts with ROCr's text if none returned SUCCESS (R runtime.cpp VMFaultHandler). */
void rt_event_memory_fault(uint64_t address, uint32_t reason_mask);
void rt_event_release_all(void);
bool rt_event_in_async_thread(void);

/* --- runtime state and helpers (core.c) ------------------------------------------------------ */

typedef struct rt_state {
  pthread_mutex_t lock;
  int refcount;            /* hsa_init count */
  rt_config_t cfg;
} rt_state_t;

extern rt_state_t rt;

/* True while the runtime is initialised (reference count > 0). */
bool rt_open(void);
#define RT_REQUIRE_OPEN()                                    \
  do {                                                       \
    if (!rt_open()) return HSA_STATUS_ERROR_NOT_INITIALIZED; \
  } while (0)

/* "softgpu: " + message on stderr, one line. */
void rt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A broken-client finding under the stand-in's own rules: logged as "softgpu: strict: ...";
 * returns true when it must fail (strict mode), false when SOFTGPU_STRICT=0 made it a warning. */
bool rt_strict(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Monotonic time in ns, and the same in timestamp ticks (SOFTGPU_TIMESTAMP_HZ). */
uint64_t rt_now_ns(void);
uint64_t rt_ticks(void);
uint64_t rt_ticks_to_ns(uint64_t ticks);
/* FNV-1a over a byte range, for the "changed while in use" checks. */
uint64_t rt_hash(const void *p, size_t n);
/* Reads [p, p+n) without faulting; false when any of it is unmapped (process_vm_readv). */
bool rt_read_safely(const void *p, size_t n, void *dst);

/* Writes an attribute value: clients pass pointers into their own structs, not always aligned
 * for the type (rocminfo does), so the store goes through memcpy. */
#define RT_PUT(dst, T, v)            \
  do {                               \
    T rt_put_ = (v);                 \
    memcpy((dst), &rt_put_, sizeof rt_put_); \
  } while (0)

#define RT_PAGE 4096u
static inline uint64_t rt_round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* Flat apertures, as KFD sets them for gfx9 in 64-bit processes (LDS at 1 << 48, scratch at
 * 2 << 48): above every user-space address, so no allocation can alias them. */
#define RT_SHARED_APERTURE_HI 0x10000u
#define RT_PRIVATE_APERTURE_HI 0x20000u

#endif
