/* The artifact: what a compile produces and what a device loads.
 *
 * It crosses processes (compile worker -> kilnd cache -> device worker), so it lives in
 * protocol/ and has one msgpack encoding (docs/cache.md). An artifact holds the code object
 * bytes in the format of its target, plus the kernel table the device backends need to
 * check and pack arguments without parsing the code object again. */
#ifndef KILN_PROTOCOL_ARTIFACT_H
#define KILN_PROTOCOL_ARTIFACT_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef enum kiln_artifact_format {
  KILN_FORMAT_CPU_SO = 1, /* host ELF shared object with work-group functions (docs/kernels.md) */
  KILN_FORMAT_HSACO = 2,  /* AMDGPU code object v5 (ET_DYN) */
  KILN_FORMAT_PTX = 3,    /* PTX text, JIT-loaded by the CUDA driver */
} kiln_artifact_format_t;

/* The type of one kernel parameter as the client sees it. */
typedef enum kiln_arg_type {
  KILN_ARG_PTR = 1, /* global memory pointer: the client passes {"tensor": id} */
  KILN_ARG_I8, KILN_ARG_I16, KILN_ARG_I32, KILN_ARG_I64,
  KILN_ARG_U8, KILN_ARG_U16, KILN_ARG_U32, KILN_ARG_U64,
  KILN_ARG_F16, KILN_ARG_BF16, KILN_ARG_F32, KILN_ARG_F64,
} kiln_arg_type_t;

/* Hidden (implicit) kernel arguments of AMDGPU code object v5 that kiln fills. Anything
 * else hidden is zero-filled. Values of .value_kind in the metadata note. */
typedef enum kiln_hidden_kind {
  KILN_HIDDEN_NONE = 0,
  KILN_HIDDEN_BLOCK_COUNT_X, KILN_HIDDEN_BLOCK_COUNT_Y, KILN_HIDDEN_BLOCK_COUNT_Z,
  KILN_HIDDEN_GROUP_SIZE_X, KILN_HIDDEN_GROUP_SIZE_Y, KILN_HIDDEN_GROUP_SIZE_Z,
  KILN_HIDDEN_REMAINDER_X, KILN_HIDDEN_REMAINDER_Y, KILN_HIDDEN_REMAINDER_Z,
  KILN_HIDDEN_GLOBAL_OFFSET_X, KILN_HIDDEN_GLOBAL_OFFSET_Y, KILN_HIDDEN_GLOBAL_OFFSET_Z,
  KILN_HIDDEN_GRID_DIMS,
  KILN_HIDDEN_DYNAMIC_LDS_SIZE,
  KILN_HIDDEN_QUEUE_PTR,
  KILN_HIDDEN_PRIVATE_BASE,
  KILN_HIDDEN_SHARED_BASE,
  KILN_HIDDEN_OTHER, /* known to exist, zero-filled (hostcall, heap, default queue, ...) */
} kiln_hidden_kind_t;

typedef struct kiln_kernel_arg {
  char name[64];        /* may be empty */
  kiln_arg_type_t type; /* 0 for hidden arguments */
  kiln_hidden_kind_t hidden;
  uint32_t offset; /* byte offset in the kernarg segment (HSACO); index order elsewhere */
  uint32_t size;   /* bytes */
} kiln_kernel_arg_t;

typedef struct kiln_kernel {
  char name[128];
  uint32_t num_args;        /* explicit (client-visible) arguments */
  uint32_t num_hidden;      /* hidden arguments, after the explicit ones in `args` */
  kiln_kernel_arg_t *args;  /* num_args + num_hidden entries */
  uint32_t kernarg_size;    /* HSACO: .kernarg_segment_size; else sum of explicit sizes */
  uint32_t kernarg_align;
  uint32_t group_segment_size;   /* static work-group (shared) memory bytes */
  uint32_t private_segment_size; /* per work-item scratch bytes */
  uint32_t max_block;       /* max work-items per work-group; 0 = target default */
  uint32_t sgpr_count, vgpr_count, sgpr_spill_count, vgpr_spill_count;
  uint32_t wavefront_size;
  uint8_t *launch;          /* te kernels: MessagePack of the launch recipe (docs/te.md §7), owned; else NULL */
  uint32_t launch_size;
} kiln_kernel_t;

typedef struct kiln_artifact {
  kiln_artifact_format_t format;
  char target[96];           /* canonical target id: "cpu", "gfx90a:sramecc+:xnack-", "sm_90" */
  uint8_t *code;             /* owned; NULL in a KILN_ARTIFACT_TABLE decode */
  size_t code_size;
  uint32_t num_kernels;
  kiln_kernel_t *kernels;    /* owned */
  char *llvm_ir;             /* lowered, optimised LLVM IR text (owned, may be NULL) */
  char *assembly;            /* target assembly text (owned, may be NULL) */
  char *log;                 /* compiler warnings (owned, may be NULL) */
} kiln_artifact_t;

void kiln_artifact_init(kiln_artifact_t *a);
void kiln_artifact_deinit(kiln_artifact_t *a);
const kiln_kernel_t *kiln_artifact_kernel(const kiln_artifact_t *a, const char *name);

/* Encoding to/from one msgpack map (docs/cache.md). Decoding copies what it keeps and
 * validates every field; the input can come from disk or from a worker and is untrusted. */
KILN_MUST_USE kiln_status_t kiln_artifact_encode(const kiln_artifact_t *a, uint8_t **out_bytes, size_t *out_len);
KILN_MUST_USE kiln_status_t kiln_artifact_decode(const uint8_t *bytes, size_t len, kiln_artifact_t *out);
/* What a decode keeps: everything, or the table kilnd answers and checks launches from
 * (format, target, kernels, log, code_size; code, llvm_ir and assembly checked but left
 * NULL). Both validate the whole encoding alike. */
typedef enum kiln_artifact_part { KILN_ARTIFACT_ALL = 0, KILN_ARTIFACT_TABLE = 1 } kiln_artifact_part_t;
KILN_MUST_USE kiln_status_t kiln_artifact_decode_part(const uint8_t *bytes, size_t len, kiln_artifact_part_t what,
                                        kiln_artifact_t *out);

const char *kiln_arg_type_name(kiln_arg_type_t t); /* "ptr", "int32", "float32", ... */
kiln_arg_type_t kiln_arg_type_from_name(const char *name); /* 0 if unknown */
uint32_t kiln_arg_type_size(kiln_arg_type_t t);

#endif
