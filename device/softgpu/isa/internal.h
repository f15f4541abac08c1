/* The interpreter's private types: decoded instructions, waves, work-groups and the dispatch
 * they belong to. Nothing here leaves device/softgpu/isa/. */
#ifndef KILN_SOFTGPU_ISA_INTERNAL_H
#define KILN_SOFTGPU_ISA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "device/softgpu/isa/sgisa.h"

#define SG_LANES 64
#define SG_POISON 0xdeadbeefu   /* uninitialised registers, LDS and scratch */
#define SG_POISON_BYTE 0xbd

/* Encoding families, read from the first dword (the instruction-set guides' "encoding" field). */
typedef enum sg_fmt {
  SG_FMT_SOP2 = 1, SG_FMT_SOPK, SG_FMT_SOP1, SG_FMT_SOPC, SG_FMT_SOPP, SG_FMT_SMEM,
  SG_FMT_VOP2, SG_FMT_VOP1, SG_FMT_VOPC, SG_FMT_VOP3, SG_FMT_VOP3P,
  SG_FMT_DS, SG_FMT_FLAT, SG_FMT_MUBUF, SG_FMT_OTHER,
} sg_fmt_t;

/* Source operand codes (9 bits) as the encodings use them. */
enum {
  SG_SRC_FLAT_SCR_LO = 102, SG_SRC_FLAT_SCR_HI = 103,
  SG_SRC_VCC_LO = 106, SG_SRC_VCC_HI = 107,
  SG_SRC_M0 = 124, SG_SRC_NULL = 125, SG_SRC_EXEC_LO = 126, SG_SRC_EXEC_HI = 127,
  SG_SRC_ZERO = 128, SG_SRC_INT_MAX = 192, SG_SRC_INT_NEG_MAX = 208,
  SG_SRC_SHARED_BASE = 235, SG_SRC_SHARED_LIMIT = 236, SG_SRC_PRIVATE_BASE = 237,
  SG_SRC_PRIVATE_LIMIT = 238, SG_SRC_POPS = 239,
  SG_SRC_F_HALF = 240, SG_SRC_F_INV2PI = 248, SG_SRC_SDWA = 249, SG_SRC_DPP = 250,
  SG_SRC_VCCZ = 251, SG_SRC_EXECZ = 252, SG_SRC_SCC = 253, SG_SRC_LDS_DIRECT = 254,
  SG_SRC_LITERAL = 255, SG_SRC_VGPR = 256,
};

/* Operand types, for inline float constants (their bit pattern depends on the width). */
typedef enum sg_ty { SG_TY_B32 = 0, SG_TY_F32, SG_TY_B64, SG_TY_F64, SG_TY_F16, SG_TY_B16 } sg_ty_t;

struct sg_wave;
struct sg_inst;
/* Executes one instruction: 0 to go on, nonzero when the wave stops (ended, barrier, error). */
typedef int (*sg_exec_fn)(struct sg_wave *w, const struct sg_inst *in);

/* One row of the opcode table: LLVM's base mnemonic (no _e32/_e64/_sdwa), the handler and a
 * handler-specific selector. */
typedef struct sg_opdesc {
  const char *name;
  sg_exec_fn fn;
  uint16_t sub;    /* operation within the handler's family */
  uint8_t ty;      /* sg_ty_t of the sources (inline constants) */
  uint8_t flags;   /* SG_OPF_* */
} sg_opdesc_t;

enum {
  SG_OPF_64DST = 1u,  /* 64-bit destination */
  SG_OPF_64SRC = 2u,  /* 64-bit sources (all of them unless noted by the handler) */
  SG_OPF_F16 = 4u,
};

/* A decoded instruction. Operands come from the raw bits (decode.c); the mnemonic and length
 * from LLVM's disassembler. */
typedef struct sg_inst {
  sg_exec_fn fn;
  const sg_opdesc_t *desc;   /* NULL: mnemonic not in the table */
  uint64_t pc;
  char mnem[40];             /* as LLVM prints it, with the encoding suffix */
  uint8_t fmt, size;
  uint8_t sdwa, has_lit;
  uint32_t w0, w1, lit;
  /* ALU */
  uint16_t src[3];           /* 9-bit operand codes (VGPR = 256 + n) */
  uint16_t dst;              /* vdst as 256 + n, or an SGPR code */
  uint16_t sdst;             /* VOP3b / VOPC e64 carry or mask destination */
  uint8_t abs, neg, neg_hi, opsel, opsel_hi, clamp, omod;
  int32_t simm;              /* SOPK/SOPP simm16 (sign-extended), memory offsets */
  /* SDWA */
  uint8_t dst_sel, dst_unused, src_sel[2], src_sext[2], sdwa_sdst;
  /* memory */
  uint8_t offset0, offset1, gds, seg, saddr, glc, slc, scc, nt, acc, lds;
  uint8_t offen, idxen, srsrc, soffset, smem_imm, smem_soe;
  uint8_t addr, data0, data1, vdst;
} sg_inst_t;

/* ---- code --------------------------------------------------------------------------------- */

struct sg_code {
  sg_target_t target;
  uint64_t va, size;
  const uint8_t *image;
  pthread_mutex_t lock;        /* the disassembler context and the decode slots */
  void *disasm;                /* LLVMDisasmContextRef */
  _Atomic(sg_inst_t *) *slots; /* one per dword, decoded lazily; published with release */
};

/* Decodes the instruction at `pc` (cached). NULL with *err set when pc is outside the image or
 * LLVM cannot decode the bytes. */
const sg_inst_t *sg_code_fetch(sg_code_t *code, uint64_t pc, char *err, size_t errcap);
/* Decodes one instruction from bytes (the cache's worker; used by the decode test). */
bool sg_decode(sg_target_t target, void *disasm, uint64_t pc, const uint8_t *bytes, size_t avail,
               sg_inst_t *out, char *err, size_t errcap);
/* The instruction in LLVM's assembly syntax, from the decoded fields (print.c). */
size_t sg_inst_print(const sg_inst_t *in, sg_target_t target, char *buf, size_t cap);
void *sg_disasm_create(sg_target_t target);
void sg_disasm_destroy(void *disasm);
const sg_opdesc_t *sg_op_lookup(const char *base_name);
/* Number of rows of the opcode table (for coverage reporting). */
size_t sg_op_count(void);
const sg_opdesc_t *sg_op_at(size_t i);

/* ---- dispatch state ------------------------------------------------------------------------ */

typedef struct sg_kd {
  uint32_t group_fixed, private_fixed, kernarg_size;
  int64_t entry_offset;
  uint32_t rsrc1, rsrc2, rsrc3;
  uint16_t props;
  uint16_t preload;
  uint32_t user_sgpr_count;
  uint32_t vgprs, agprs;       /* registers to poison */
  uint8_t denorm32, denorm64, round32, round64, ieee, dx10;
} sg_kd_t;

enum { SG_CHECK_UNINIT = 1u, SG_CHECK_RACE = 2u };

typedef struct sg_job sg_job_t;

/* One worker thread's view: cached regions and its scratch slot. */
typedef struct sg_region_cache {
  sg_region_t r[8];
  unsigned n, next;
} sg_region_cache_t;

typedef struct sg_group sg_group_t;

typedef enum sg_wstate { SG_W_RUN = 0, SG_W_BARRIER, SG_W_DONE, SG_W_ERROR } sg_wstate_t;

typedef struct sg_wave {
  uint32_t s[128];             /* indexed by operand code: s0..s101, flat_scratch, vcc, m0, exec */
  uint32_t (*v)[SG_LANES];     /* VGPRs, [reg][lane] */
  uint32_t (*a)[SG_LANES];     /* AGPRs */
  uint64_t pc;
  uint8_t scc;
  uint8_t gpr_idx_on;          /* s_set_gpr_idx_on: VGPR indexing mode (MODE.gpr_idx_en) */
  sg_wstate_t state;
  uint32_t index;              /* wave number within the group */
  uint32_t lanes;              /* lanes holding work-items */
  uint64_t scratch_base;       /* device address of this wave's scratch (wave offset applied) */
  sg_group_t *g;
  uint64_t icount;
} sg_wave_t;

struct sg_group {
  sg_job_t *job;
  uint32_t id[3];
  uint32_t size[3];            /* work-items in this group per dimension (partial at the edge) */
  uint32_t nwaves;
  sg_wave_t *waves;
  uint8_t *lds;
  uint32_t lds_size;
  uint32_t barrier_epoch;
  /* SOFTGPU_CHECK=race: per LDS dword, the last writer and reader (wave + 1) and epoch. */
  uint32_t *race_w, *race_r;
  sg_region_cache_t *rc;
  uint8_t *scratch_host;       /* backing of this thread's scratch slot */
  uint64_t scratch_va;         /* its device address */
  uint64_t scratch_len;
};

struct sg_job {
  sg_dispatch_t d;
  const sg_memory_t *mem;
  sg_warn_fn warn;
  void *warn_ctx;
  sg_kd_t kd;
  uint64_t entry;
  uint32_t ngroups[3];
  uint64_t total_groups;
  _Atomic uint64_t next_group;
  _Atomic uint64_t done_groups;
  _Atomic int stop;
  _Atomic uint64_t icount;
  uint32_t check;
  uint64_t jitter_seed;
  bool jitter;
  uint32_t waves_per_group;
  uint64_t wave_scratch;       /* bytes of scratch per wave */
  uint8_t *scratch;            /* backing for every slot */
  uint64_t scratch_bytes;
  uint32_t nslots;
  pthread_mutex_t lock;
  pthread_cond_t cv;
  uint32_t active_workers;
  uint64_t slot_used;          /* scratch slots held by the workers in this job */
  sg_report_t report;          /* the first stop */
  bool stopped;
  uint32_t warn_count;
  sg_job_t *next;              /* the pool's queue */
};

/* Records the first stop of a dispatch (later ones are dropped) and tells every worker. */
void sg_job_stop(sg_job_t *job, const sg_report_t *r);
/* Builds a report for wave `w` at its current instruction and stops the dispatch. Returns 1
 * (the value an exec function returns to stop the wave). */
int sg_wave_fail(sg_wave_t *w, const sg_inst_t *in, sg_status_t st, uint64_t addr, uint32_t reason,
                 int lane, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* A non-fatal finding through the warn callback (rate-limited per dispatch). */
void sg_wave_warn(sg_wave_t *w, const sg_inst_t *in, int lane, uint64_t addr, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Runs every wave of a group to completion (cooperatively, switching at barriers). */
int sg_group_run(sg_group_t *g);

/* ---- operands (operand.c) ------------------------------------------------------------------ */

static inline uint64_t sg_exec(const sg_wave_t *w) {
  return (uint64_t)w->s[SG_SRC_EXEC_LO] | (uint64_t)w->s[SG_SRC_EXEC_HI] << 32;
}
static inline void sg_set_exec(sg_wave_t *w, uint64_t m) {
  w->s[SG_SRC_EXEC_LO] = (uint32_t)m;
  w->s[SG_SRC_EXEC_HI] = (uint32_t)(m >> 32);
}
static inline uint64_t sg_vcc(const sg_wave_t *w) {
  return (uint64_t)w->s[SG_SRC_VCC_LO] | (uint64_t)w->s[SG_SRC_VCC_HI] << 32;
}
static inline void sg_set_sgpr64(sg_wave_t *w, unsigned code, uint64_t v) {
  w->s[code & 127] = (uint32_t)v;
  w->s[(code + 1) & 127] = (uint32_t)(v >> 32);
}
static inline uint64_t sg_sgpr64(const sg_wave_t *w, unsigned code) {
  return (uint64_t)w->s[code & 127] | (uint64_t)w->s[(code + 1) & 127] << 32;
}

/* A scalar operand (code < 256): SGPRs, specials, inline constants, the literal. 32 bits. */
uint32_t sg_scalar32(const sg_wave_t *w, const sg_inst_t *in, unsigned code, sg_ty_t ty);
/* The same for a 64-bit operand (pairs; inline constants widened as the ISA says). */
uint64_t sg_scalar64(const sg_wave_t *w, const sg_inst_t *in, unsigned code, sg_ty_t ty);
/* Writes a scalar destination (code < 128); writes to the null register are dropped. */
void sg_sdst_write(sg_wave_t *w, unsigned code, uint32_t v);

/* Vector sources for lane loops: *vals is either a VGPR row or a 64-entry broadcast in buf. */
const uint32_t *sg_vsrc32(sg_wave_t *w, const sg_inst_t *in, int i, sg_ty_t ty, uint32_t buf[SG_LANES]);
/* A 64-bit source, split into low and high words per lane. */
void sg_vsrc64(sg_wave_t *w, const sg_inst_t *in, int i, sg_ty_t ty, uint32_t lo[SG_LANES], uint32_t hi[SG_LANES]);
/* VGPR number of vector operand code (VGPR indexing mode applied when `which` bit is set). */
unsigned sg_vreg(const sg_wave_t *w, unsigned code, unsigned which_bit);

/* ---- floating point (fp.c) ----------------------------------------------------------------- */
static inline float sg_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t sg_u32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline double sg_f64(uint64_t u) {
  double f;
  memcpy(&f, &u, 8);
  return f;
}
static inline uint64_t sg_u64(double f) {
  uint64_t u;
  memcpy(&u, &f, 8);
  return u;
}
/* d[l] = fma(a[l], b[l], c[l]) on f32 bit patterns, for 64 lanes: one rounding, with the
 * host's FMA instructions where it has them (a clone chosen at load time). */
void sg_fma_lanes(uint32_t *d, const uint32_t *a, const uint32_t *b, const uint32_t *c);
uint32_t sg_flush32(uint32_t u);          /* denormal -> zero, sign kept */
uint64_t sg_flush64(uint64_t u);
uint16_t sg_flush16(uint16_t u);
uint16_t sg_f32_to_f16(float f);          /* RNE */
float sg_f16_to_f32(uint16_t h);
/* Transcendental units: correctly rounded from double, denormal inputs and outputs flushed;
 * with the job's jitter on, sometimes the other neighbour of the exact value (still < 1 ulp). */
uint32_t sg_trans32(const sg_job_t *job, unsigned op, uint32_t x);
uint64_t sg_trans64(unsigned op, uint64_t x);
enum { SG_T_RCP = 1, SG_T_RSQ, SG_T_SQRT, SG_T_EXP, SG_T_LOG, SG_T_SIN, SG_T_COS, SG_T_RCP_IFLAG };
uint32_t sg_div_fixup32(uint32_t q, uint32_t d, uint32_t n);
uint32_t sg_div_scale32(uint32_t s0, uint32_t d, uint32_t n, bool *vcc);
uint32_t sg_div_fmas32(uint32_t a, uint32_t b, uint32_t c, bool vcc);
uint64_t sg_div_fixup64(uint64_t q, uint64_t d, uint64_t n);
uint64_t sg_div_scale64(uint64_t s0, uint64_t d, uint64_t n, bool *vcc);
uint64_t sg_div_fmas64(uint64_t a, uint64_t b, uint64_t c, bool vcc);
uint32_t sg_fmax32(uint32_t a, uint32_t b, bool ieee);
uint32_t sg_fmin32(uint32_t a, uint32_t b, bool ieee);
uint64_t sg_fmax64(uint64_t a, uint64_t b, bool ieee);
uint64_t sg_fmin64(uint64_t a, uint64_t b, bool ieee);
uint32_t sg_fmed3_32(uint32_t a, uint32_t b, uint32_t c, bool ieee);
bool sg_class32(uint32_t x, uint32_t mask);
bool sg_class64(uint64_t x, uint32_t mask);
bool sg_class16(uint16_t x, uint32_t mask);
uint32_t sg_ldexp32(uint32_t x, int32_t e);
uint64_t sg_ldexp64(uint64_t x, int32_t e);
uint32_t sg_frexp_mant32(uint32_t x);
int32_t sg_frexp_exp32(uint32_t x);
uint32_t sg_fract32(uint32_t x);
uint64_t sg_fract64(uint64_t x);
int32_t sg_cvt_i32_f32(uint32_t x);
uint32_t sg_cvt_u32_f32(uint32_t x);
int32_t sg_cvt_i32_f64(uint64_t x);
uint32_t sg_cvt_u32_f64(uint64_t x);

/* ---- memory (memory.c) --------------------------------------------------------------------- */

/* Host pointer for [va, va + n) with `acc` (SG_ACC_*), or NULL after stopping the dispatch
 * with the fault (the caller returns 1). Scratch and code are handled here too. */
uint8_t *sg_mem_global(sg_wave_t *w, const sg_inst_t *in, uint64_t va, uint32_t n, uint32_t acc, int lane,
                       sg_region_t **out_region);
/* Marks [va, va+n) initialised / checks it (SOFTGPU_CHECK=uninit). */
void sg_mem_init_mark(sg_region_t *r, uint64_t va, uint32_t n);
void sg_mem_init_check(sg_wave_t *w, const sg_inst_t *in, sg_region_t *r, uint64_t va, uint32_t n, int lane);
/* Private (scratch) address of `lane` at per-lane offset `off` with the swizzled layout of
 * SOFTGPU.md §4: base + (off/4)*4*64 + lane*4 + off%4. */
static inline uint64_t sg_swizzle(uint64_t wave_base, uint64_t off, unsigned lane) {
  return wave_base + (off >> 2) * 4 * SG_LANES + (uint64_t)lane * 4 + (off & 3);
}
/* LDS bytes [off, off+n) of the wave's group, or NULL after stopping with SG_ERR_LDS_RANGE. */
uint8_t *sg_lds(sg_wave_t *w, const sg_inst_t *in, uint64_t off, uint32_t n, bool write, int lane);

/* ---- families (exec_*.c) ------------------------------------------------------------------ */
int sg_unimplemented(sg_wave_t *w, const sg_inst_t *in);
extern const sg_opdesc_t sg_ops_salu[], sg_ops_valu[], sg_ops_mem[];
extern const size_t sg_ops_salu_n, sg_ops_valu_n, sg_ops_mem_n;

#endif
