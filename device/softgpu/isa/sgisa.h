/* softgpu's wave64 interpreter: the contract between the stand-in HSA runtime (device/softgpu/rt/)
 * and the interpreter (device/softgpu/isa/).
 *
 * The runtime owns the address space, queues, signals and the loader; the interpreter owns
 * decoding, the register files, LDS, scratch backing and the worker threads that run
 * work-groups. A dispatch is one blocking call made from the runtime's packet-processor thread.
 *
 * Ownership and threads: sg_code_create/destroy and sg_dispatch_run may be called from any
 * thread; sg_dispatch_run blocks until every work-group has finished or one has stopped the
 * dispatch (a fault, an unimplemented instruction, a checker report that is fatal). The
 * interpreter creates its worker threads lazily, at the first dispatch (never in sg_code_create),
 * because kiln forks probe children before it makes queues. sg_memory_t.lookup is called from
 * the interpreter's worker threads concurrently.
 *
 * Owner of this header: the interpreter. Fields may be added; the meaning of those here stays. */
#ifndef KILN_SOFTGPU_ISA_SGISA_H
#define KILN_SOFTGPU_ISA_SGISA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sg_target {
  SG_GFX90A = 1, /* CDNA2: absolute flat scratch (private segment buffer V# + wave offset SGPR) */
  SG_GFX942 = 2, /* CDNA3: architected flat scratch (FLAT_SCRATCH initialised by the "CP") */
} sg_target_t;

/* --- memory: what the GPU may touch --------------------------------------------------------- */

enum { SG_ACC_READ = 1u, SG_ACC_WRITE = 2u };

/* One live allocation as the GPU sees it. */
typedef struct sg_region {
  uint64_t va;     /* first device address of the allocation */
  uint64_t size;   /* bytes */
  uint8_t *host;   /* where those bytes are in this process (VRAM: the runtime's alias view) */
  uint32_t access; /* SG_ACC_* granted to the GPU agent (loaded code: READ only) */
  /* Optional, for SOFTGPU_CHECK=uninit: one bit per byte, 1 = written. NULL = not tracked.
   * The runtime sets bits on host copies and fills; the interpreter sets them on GPU stores and
   * reports loads of clear bits. */
  uint8_t *init_bits;
} sg_region_t;

typedef struct sg_memory {
  /* The live allocation containing `va` that the GPU agent may access; false when there is
   * none (the access then faults with PAGE_NOT_PRESENT). Must be thread-safe. The interpreter
   * may cache a region for the duration of one dispatch: the runtime refuses to free memory
   * while a dispatch is in flight. */
  bool (*lookup)(void *ctx, uint64_t va, sg_region_t *out);
  void *ctx;
} sg_memory_t;

/* --- code ----------------------------------------------------------------------------------- */

/* A loaded code object image: the bytes of its PT_LOAD segments placed at their device
 * addresses [va, va + size) (relocations applied). The interpreter decodes from it lazily and
 * caches decoded instructions per PC. The image bytes must stay unchanged while the sg_code_t
 * lives. Returns NULL with a message in err on failure. */
typedef struct sg_code sg_code_t;
sg_code_t *sg_code_create(sg_target_t target, uint64_t va, const uint8_t *image, uint64_t size,
                          char *err, size_t errcap);
void sg_code_destroy(sg_code_t *code);

/* --- dispatch ------------------------------------------------------------------------------- */

typedef enum sg_status {
  SG_OK = 0,
  SG_FAULT_MEMORY,      /* a GPU access to memory it may not touch: report.address, report.fault_reason */
  SG_FAULT_APERTURE,    /* a flat address outside every aperture (ROCr: MEMORY_APERTURE_VIOLATION) */
  SG_ERR_LDS_RANGE,     /* an LDS access beyond the packet's group_segment_size (a stand-in check) */
  SG_ERR_UNIMPLEMENTED, /* an instruction the interpreter does not implement: message names it */
  SG_ERR_ILLEGAL,       /* an undecodable instruction, s_trap, a kernel descriptor that cannot run */
  SG_ERR_CHECK,         /* a SOFTGPU_CHECK finding made fatal */
  SG_ERR_BUDGET,        /* a wave ran more than sg_dispatch_t.max_instructions instructions */
} sg_status_t;

/* hsa_amd_memory_fault_reason_t bits, repeated here so this header needs no HSA header. */
enum {
  SG_FAULT_PAGE_NOT_PRESENT = 1u << 0,
  SG_FAULT_READ_ONLY = 1u << 1,
  SG_FAULT_NX = 1u << 2,
};

typedef struct sg_report {
  sg_status_t status;
  uint64_t address;      /* the faulting device address (SG_FAULT_*) */
  uint32_t fault_reason; /* SG_FAULT_PAGE_NOT_PRESENT / READ_ONLY / NX mask */
  uint64_t pc;           /* address of the instruction */
  uint32_t group[3];     /* work-group id */
  uint32_t item[3];      /* work-item id within the group (first active lane involved) */
  char message[256];     /* one line: what, which instruction (mnemonic and address), why */
  uint64_t instructions; /* wave instructions the dispatch executed (set by sg_dispatch_run on
                          * every outcome; the interpreter's speed is instructions / time) */
} sg_report_t;

typedef struct sg_dispatch {
  sg_target_t target;
  sg_code_t *code;          /* the executable image that holds the kernel descriptor and code */
  uint64_t kernel_object;   /* device address of the 64-byte kernel descriptor (.kd) */
  uint64_t packet_va;       /* the AQL packet (DISPATCH_PTR user SGPRs) */
  uint64_t queue_va;        /* the amd_queue_t (QUEUE_PTR user SGPRs) */
  uint64_t dispatch_id;     /* DISPATCH_ID user SGPRs */
  uint16_t workgroup_size[3];
  uint32_t grid_size[3];    /* in work-items, as in the AQL packet */
  uint32_t group_segment_size;   /* bytes of LDS for one work-group, from the packet */
  uint32_t private_segment_size; /* bytes of scratch per work-item, from the packet */
  uint64_t kernarg_address;
  /* Flat-address apertures, as in amd_queue_t (base = hi << 32; each 4 GiB). */
  uint64_t shared_aperture_base;
  uint64_t private_aperture_base;
  /* Scratch: [scratch_va, scratch_va + scratch_va_size) is device address space reserved by the
   * runtime for this queue's scratch (no allocation lives there). The interpreter backs it with
   * memory of its own per dispatch and assigns each wave in flight its wave offset inside it.
   * gfx90a: scratch_srd is the queue's scratch_resource_descriptor (base = scratch_va). */
  uint64_t scratch_va;
  uint64_t scratch_va_size;
  uint32_t scratch_srd[4];
  /* Stops the dispatch with SG_ERR_BUDGET when one wave executes more instructions than this
   * (a kernel that never ends); 0: no limit. */
  uint64_t max_instructions;
} sg_dispatch_t;

/* Non-fatal findings (SOFTGPU_CHECK=uninit,race; floating-point notes) go here; may be NULL.
 * Called from worker threads. */
typedef void (*sg_warn_fn)(void *ctx, const sg_report_t *report);

/* Runs the whole grid and returns when it has finished (SG_OK) or stopped; on a stop, *out says
 * why and where. Reads SOFTGPU_THREADS (worker threads, default the CPUs this process may use),
 * SOFTGPU_JITTER (seed: transcendental results perturbed by +-1 ulp) and SOFTGPU_CHECK from the
 * environment at the first dispatch. */
sg_status_t sg_dispatch_run(const sg_dispatch_t *d, const sg_memory_t *mem, sg_warn_fn warn,
                            void *warn_ctx, sg_report_t *out);

/* Frees the worker threads (the runtime's last hsa_shut_down). */
void sg_shutdown(void);

#endif
