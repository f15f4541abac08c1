/* The softgpu interpreter's own test harness (until the stand-in runtime runs kiln's hsa
 * backend): a code object built by kiln's compiler loaded into a device image (PT_LOAD
 * segments, relocations), its kernels found through the metadata note, device memory as a
 * table of regions at addresses no host pointer uses, kernargs laid out with the code object
 * v5 hidden arguments as AMDGPUUsage defines them, and sg_dispatch_run. Written from
 * AMDGPUUsage and the ELF spec, not from kiln's device/hsa code. */
#ifndef KILN_TESTS_SOFTGPU_ISA_HARNESS_H
#define KILN_TESTS_SOFTGPU_ISA_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device/softgpu/isa/sgisa.h"

#define SGT_MAX_ARGS 160
#define SGT_MAX_KERNELS 32

typedef struct sgt_kernel_arg {
  uint32_t offset, size;
  char kind[40]; /* .value_kind: by_value, global_buffer, hidden_block_count_x, ... */
} sgt_kernel_arg_t;

typedef struct sgt_kernel {
  char name[128];
  uint64_t kd_va;
  uint32_t kernarg_size, group_fixed, private_fixed;
  uint32_t nargs;
  sgt_kernel_arg_t args[SGT_MAX_ARGS];
  /* te kernels: the launch recipe of the artifact when its grid and block are constants */
  bool has_launch;
  uint32_t grid[3], block[3];
} sgt_kernel_t;

typedef struct sgt_ctx {
  sg_target_t target;
  /* device memory */
  sg_region_t regions[256];
  int nregions;
  uint64_t next_va;
  /* the loaded code object */
  uint8_t *image;
  uint64_t image_va, image_size;
  sg_code_t *code;
  sgt_kernel_t kernels[SGT_MAX_KERNELS];
  int nkernels;
  /* warnings the interpreter reported */
  char warnings[16][256];
  int nwarnings;
  uint64_t last_instructions;
  uint32_t lds_override; /* nonzero: the packet's group segment size (fault tests) */
  uint64_t max_instructions; /* per wave; 0: no limit */
} sgt_ctx_t;

/* "gfx942" or "gfx90a" */
void sgt_init(sgt_ctx_t *c, sg_target_t target);
void sgt_deinit(sgt_ctx_t *c);
const char *sgt_target_name(sg_target_t t);

/* Loads a code object (an ELF image), or the code of a kiln artifact file (.kart) from the
 * conformance build: <dir>/<stem>.<target>.kart. Asserts on failure. */
void sgt_load_elf(sgt_ctx_t *c, const uint8_t *elf, size_t n);
void sgt_load_kart(sgt_ctx_t *c, const char *stem);
/* A whole file, NUL-terminated (malloc'ed), or NULL when it cannot be opened. */
uint8_t *sgt_read_file(const char *path, size_t *out_len);
const sgt_kernel_t *sgt_kernel(const sgt_ctx_t *c, const char *name);

/* Device memory: a fresh allocation (contents poisoned), its host view, copies. */
uint64_t sgt_alloc(sgt_ctx_t *c, size_t bytes, uint32_t access);
void *sgt_host(sgt_ctx_t *c, uint64_t va);
uint64_t sgt_upload(sgt_ctx_t *c, const void *src, size_t bytes);
void sgt_download(sgt_ctx_t *c, uint64_t va, void *dst, size_t bytes);
/* Turns on uninitialised-byte tracking for the allocation at va (init bits all clear). */
void sgt_track_init(sgt_ctx_t *c, uint64_t va);
/* Marks [va, va + n) written, as a host copy into device memory would. */
void sgt_mark_init(sgt_ctx_t *c, uint64_t va, size_t n);

typedef enum { SGT_PTR = 1, SGT_I32, SGT_I64, SGT_F32, SGT_F64 } sgt_argkind_t;
typedef struct sgt_arg {
  sgt_argkind_t kind;
  uint64_t u;
  double f;
} sgt_arg_t;
#define SGA_PTR(va) ((sgt_arg_t){SGT_PTR, (uint64_t)(va), 0})
#define SGA_I32(v) ((sgt_arg_t){SGT_I32, (uint64_t)(int64_t)(v), 0})
#define SGA_I64(v) ((sgt_arg_t){SGT_I64, (uint64_t)(int64_t)(v), 0})
#define SGA_F32(v) ((sgt_arg_t){SGT_F32, 0, (double)(v)})

/* Runs `kernel` on grid[] work-groups of block[] work-items (dyn_lds extra LDS bytes).
 * Returns the interpreter's status; *rep (may be NULL) says why it stopped. */
sg_status_t sgt_launch(sgt_ctx_t *c, const char *kernel, const uint32_t grid[3], const uint32_t block[3],
                       uint32_t dyn_lds, const sgt_arg_t *args, int nargs, sg_report_t *rep);
/* Runs a te kernel with the grid and block of its launch recipe. */
void sgt_run_te(sgt_ctx_t *c, const char *kernel, const sgt_arg_t *args, int nargs);
/* The same with the grid in work-items, as in the AQL packet (partial work-groups). */
sg_status_t sgt_launch_items(sgt_ctx_t *c, const char *kernel, const uint32_t items[3], const uint32_t block[3],
                             uint32_t dyn_lds, const sgt_arg_t *args, int nargs, sg_report_t *rep);
/* sgt_launch that must succeed (asserts with the report's message). */
void sgt_run(sgt_ctx_t *c, const char *kernel, const uint32_t grid[3], const uint32_t block[3], uint32_t dyn_lds,
             const sgt_arg_t *args, int nargs);

/* Flat apertures used by the harness (ROCr's gfx9 values). */
#define SGT_SHARED_APERTURE 0x1000000000000ull
#define SGT_PRIVATE_APERTURE 0x2000000000000ull

uint32_t sgt_ulp_diff(float a, float b);

#endif
