/* The te program model (docs/te.md §2-5): shape vars, tensors with their schedules, kernels,
 * and the expression nodes they hold, all in one arena freed with the program. Every other
 * file of compiler/te/ builds on this one; it includes none of them. */
#ifndef KILN_COMPILER_TE_TE_PROGRAM_H
#define KILN_COMPILER_TE_TE_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler/internal.h"

#define TE_NAME 64
#define TE_MAX_DIMS 8
#define TE_MAX_LEAVES 48
#define TE_MAX_RELS 48
#define TE_MAX_TENSORS 128
#define TE_MAX_VARS 2048
#define TE_MAX_KERNELS 64
#define TE_MAX_SHAPE_VARS 64
#define TE_MAX_GUARDS 32
#define TE_DB_MAX_STAGED 256 /* elements a work-item prefetches for a double-buffered stage */
#define TE_MAX_VT 8           /* vthread vars whose copies one stage's statements make */
#define TE_VT_MAX_COPIES 64   /* copies of one statement (the product of their extents) */
#define TE_MAX_MIN_BLOCKS 32  /* launch_bounds: work-groups per SM / CU asked for */

typedef enum te_dtype {
  TE_BOOL = 1, TE_I8, TE_I16, TE_I32, TE_I64, TE_U8, TE_U16, TE_U32, TE_U64, TE_F16, TE_F32, TE_F64,
  TE_WEAK_INT, /* literal not yet typed */
  TE_WEAK_FLOAT,
} te_dtype_t;

typedef enum te_kind {
  TE_INT = 1, /* i */
  TE_FLOAT,   /* f */
  TE_VAR,     /* ref: var id */
  TE_LOAD,    /* ref: tensor id; args: indices */
  TE_BIN,     /* op; args[0], args[1] */
  TE_UN,      /* op (neg, not); args[0] */
  TE_CAST,    /* args[0] */
  TE_SELECT,  /* args[0..2]; op 1: lazy (if_then_else) */
  TE_CALL,    /* op: index in te_math_names; args */
  TE_REDUCE,  /* op: reduce op; args[0] source, args[1] cond or NULL; axes in the tensor */
} te_kind_t;

typedef enum te_op {
  TE_ADD = 1, TE_SUB, TE_MUL, TE_DIV, TE_MOD, TE_FLOORDIV, TE_FLOORMOD, TE_MIN, TE_MAX,
  TE_EQ, TE_NE, TE_LT, TE_LE, TE_GT, TE_GE, TE_AND, TE_OR, TE_BITAND, TE_BITOR, TE_BITXOR,
  TE_SHL, TE_SHR, TE_NEG, TE_NOT,
  TE_RSUM, TE_RMAX, TE_RMIN, TE_RPROD,
} te_op_t;

typedef struct te_expr te_expr_t;
struct te_expr {
  uint8_t kind, op, dtype, nargs;
  int32_t ref;
  int64_t i;
  double f;
  te_expr_t **args;
};

typedef enum te_var_kind {
  TE_V_SHAPE = 1, TE_V_AXIS, TE_V_REDUCE, TE_V_OUTER, TE_V_INNER, TE_V_FUSED,
} te_var_kind_t;

enum { TE_BIND_NONE = -1 }; /* else 0..2 blockIdx.x..z, 3..5 threadIdx.x..z */
enum { TE_THREAD_VTHREAD = 6 }; /* te_prim_t.thread of bind to "vthread" (te_var_t.vthread, bind stays NONE) */
enum { TE_ANN_NONE = 0, TE_ANN_UNROLL, TE_ANN_VECTORIZE, TE_ANN_PARALLEL };

typedef struct te_var {
  char name[TE_NAME];
  int stage; /* -1 for shape vars */
  uint8_t kind;
  bool leaf, reduce;
  bool vthread; /* bound to "vthread": no loop, the statements under it are copied per value */
  int bind, ann;
  int64_t chunk;           /* parallel: iterations per work-group the schedule set, 0: the pool's share */
  te_expr_t *min, *extent; /* root vars: declared (reduce) or inferred; others: derived */
  int64_t cext;            /* bound inference: constant extent, or -1 */
} te_var_t;

enum { TE_REL_SPLIT = 0, TE_REL_FUSE = 1 };

typedef struct te_rel {
  int kind; /* split: a = parent, b = outer, c = inner; fuse: a = outer, b = inner, c = fused */
  int a, b, c;
  int64_t factor; /* split */
  bool nparts;
} te_rel_t;

enum { TE_SCOPE_GLOBAL = 0, TE_SCOPE_SHARED, TE_SCOPE_LOCAL };

typedef struct te_tensor {
  char name[TE_NAME];
  bool placeholder;
  uint8_t dtype;
  int ndim;
  te_expr_t *shape[TE_MAX_DIMS];
  int axes[TE_MAX_DIMS];
  int nred;
  int red[TE_MAX_DIMS];
  te_expr_t *body; /* compute: the value, or a TE_REDUCE */
  /* schedule */
  int nleaves;
  int leaves[TE_MAX_LEAVES];
  int nrels;
  te_rel_t rels[TE_MAX_RELS];
  bool scheduled; /* a primitive other than cache_write touched it */
  bool inlined;
  int scope;
  int attach_stage, attach_var; /* -1: root */
  int64_t align_factor[TE_MAX_DIMS]; /* storage_align: stride of dim d % factor == offset (0: none) */
  int64_t align_offset[TE_MAX_DIMS];
  int8_t order[TE_MAX_DIMS];         /* storage_order: storage dimension i is axis order[i] (nordered: set) */
  bool ordered;
  bool double_buffer;                /* double_buffer: two halves, the next region prefetched */
  int min_blocks;                    /* launch_bounds: work-groups per SM / CU (0: no hint) */
  /* bound inference (per kernel) */
  int kernel_arg; /* parameter index in the current kernel, or -1 */
  te_expr_t *rmin[TE_MAX_DIMS];
  int64_t rext[TE_MAX_DIMS]; /* attached stages: region extents */
  int64_t stride[TE_MAX_DIMS]; /* attached stages: element strides of the storage (storage_align) */
  int64_t storage;             /* attached stages: elements of storage (of one half when double-buffered) */
  int nguards;               /* conditions around the statement */
  te_expr_t *guards[TE_MAX_GUARDS];
  bool guard_red[TE_MAX_GUARDS];   /* uses reduce vars: not around the initialisation */
  te_expr_t *val[TE_MAX_DIMS * 2]; /* axis then reduce values in terms of leaves (with min) */
  int nvt;                          /* vthread vars its statements are copied over (own leaves, region) */
  int vt[TE_MAX_VT];
  int64_t vt_store;                 /* attached stages: copies of the storage (region per vthread value) */
  te_expr_t *copy_off;              /* element offset of the copy in use (over vthread vars), or NULL */
  int eff_scope;
  bool in_kernel;
} te_tensor_t;

typedef struct te_kernel {
  char name[128];
  int root;
  int nargs;
  int args[KC_MAX_PARAMS]; /* >= 0 tensor id; < 0: -(var id) - 1 */
  te_expr_t *grid[3];
  int64_t block[3];
  uint8_t parallel; /* grid dimensions (bit d) of parallel loops that run in shares of any grid */
  int min_blocks;   /* launch_bounds of the output stage: work-groups per SM / CU, 0: none */
  uint8_t *launch; /* the encoded launch recipe (docs/te.md §7) */
  size_t launch_size;
} te_kernel_t;

typedef struct te_chunk te_chunk_t;

/* kc_te_program_t (te.h) is this struct. */
typedef struct kc_te_program {
  te_chunk_t *arena; /* expressions and decoded MessagePack live here */
  uint8_t index_dtype;
  int nvars;
  te_var_t *vars; /* TE_MAX_VARS */
  int nshape;
  int shape_vars[TE_MAX_SHAPE_VARS];
  int ntensors;
  int nuser_tensors;    /* the payload's tensors; cache stages follow */
  te_tensor_t *tensors; /* TE_MAX_TENSORS */
  int nkernels;
  te_kernel_t kernels[TE_MAX_KERNELS];
} te_program_t;

/* An empty program (index dtype int32), or NULL when memory is exhausted. */
te_program_t *te_program_create(void);
void te_program_destroy(te_program_t *p);

/* Zeroed arena memory that lives as long as the program; NULL when memory is exhausted. */
void *te_alloc(te_program_t *p, size_t n);

const char *te_dtype_name(int dt);
/* TE_BOOL..TE_F64 for a payload dtype name, else 0. */
int te_dtype_from_name(const char *name);
bool te_is_float(int dt); /* weak float literals too */
bool te_is_int(int dt);   /* weak int literals too */
bool te_is_unsigned(int dt);

/* 1..63 bytes of [A-Za-z0-9_.]. */
bool te_name_ok(const char *s);
int te_find_tensor(const te_program_t *p, const char *name);
/* A var of `stage` (its axes, reduce axes and leaves), else a shape var; -1 if none. */
int te_find_var(const te_program_t *p, int stage, const char *name);
/* A new var of `stage` (-1: a shape var); E_COMPILE for a bad or taken name. */
KILN_MUST_USE kiln_status_t te_new_var(te_program_t *p, int stage, const char *name, int kind, int *out);
/* The next tensor slot, zeroed, unattached and named `name` (NULL: the caller names it);
 * E_COMPILE past TE_MAX_TENSORS. The caller fills it and then counts it (p->ntensors++). */
KILN_MUST_USE kiln_status_t te_new_tensor(te_program_t *p, const char *name, te_tensor_t **out);
/* Position of var v among t's leaves, or -1. */
int te_leaf_pos(const te_tensor_t *t, int v);

/* Math functions of ["call", name, args]: NULL-terminated, indexed by TE_CALL's op. */
extern const char *const te_math_names[];
int te_math_arity(const char *name);

/* blockIdx.x..z, threadIdx.x..z (a var's bind). */
extern const char *const te_thread_names[6];

#endif
