/* Tensor-expression programs (docs/te.md): parse, schedule, bound inference, loop nests,
 * emission of the kernel dialect. Internal to compiler/: compiler.c calls kc_te_build and
 * kc_te_attach_launch; the rest is shared between the files of compiler/te/. */
#ifndef KILN_COMPILER_TE_TE_H
#define KILN_COMPILER_TE_TE_H

#include <llvm-c/Core.h>
#include <stdbool.h>
#include <stdint.h>

#include "compiler/internal.h"

/* ---- entry points (compiler.c) ----------------------------------------------------- */

typedef struct kc_te_program kc_te_program_t;

/* Parses the te payload of job->req, lowers it and leaves the kernel-dialect module in
 * job->mod. *out_prog (freed with kc_te_free) keeps the launch recipes. E_COMPILE for the
 * program. */
kiln_status_t kc_te_build(kc_job_t *job, kc_te_program_t **out_prog);
/* Copies each kernel's launch recipe into the artifact's kernel table. */
kiln_status_t kc_te_attach_launch(const kc_te_program_t *p, kiln_artifact_t *art);
void kc_te_free(kc_te_program_t *p);
/* After CPU lowering: te kernels are loop nests written for the vector unit, so on hosts
 * with 512-bit vectors the vectoriser may use them (LLVM prefers 256 bits by default). */
void kc_te_tune_cpu(kc_job_t *job);

/* ---- the program ------------------------------------------------------------------- */

#define TE_NAME 64
#define TE_MAX_DIMS 8
#define TE_MAX_LEAVES 48
#define TE_MAX_RELS 48
#define TE_MAX_TENSORS 128
#define TE_MAX_VARS 2048
#define TE_MAX_KERNELS 64

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
  TE_SELECT,  /* args[0..2] */
  TE_CALL,    /* op: math function index; args */
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
enum { TE_ANN_NONE = 0, TE_ANN_UNROLL, TE_ANN_VECTORIZE, TE_ANN_PARALLEL };

typedef struct te_var {
  char name[TE_NAME];
  int stage; /* -1 for shape vars */
  uint8_t kind;
  bool leaf, reduce;
  int bind, ann;
  te_expr_t *min, *extent; /* root vars: declared (reduce) or inferred; others: derived */
  /* lowering */
  LLVMValueRef value;
  int64_t cext; /* constant extent, or -1 */
} te_var_t;

typedef struct te_rel {
  int kind; /* 0 split (a = parent, b = outer, c = inner), 1 fuse (a = outer, b = inner, c = fused) */
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
  /* lowering (per kernel) */
  int kernel_arg; /* parameter index in the current kernel, or -1 */
  te_expr_t *rmin[TE_MAX_DIMS];
  int64_t rext[TE_MAX_DIMS]; /* attached stages: region extents */
  int nguards;                        /* conditions around the statement */
  te_expr_t *guards[32];
  bool guard_red[32];                 /* uses reduce vars: not around the initialisation */
  te_expr_t *val[TE_MAX_DIMS * 2];    /* axis then reduce values in terms of leaves (with min) */
  int eff_scope;
  LLVMValueRef buf;
  bool in_kernel;
} te_tensor_t;

typedef struct te_kernel {
  char name[128];
  int root;
  int nargs;
  int args[KC_MAX_PARAMS]; /* >= 0 tensor id; < 0: -(var id) - 1 */
  te_expr_t *grid[3];
  int64_t block[3];
  uint8_t *launch;
  size_t launch_size;
} te_kernel_t;

/* A bump arena for expressions: freed as a whole with the program. */
typedef struct te_chunk te_chunk_t;

struct kc_te_program {
  te_chunk_t *arena;
  uint8_t index_dtype;
  int nvars;
  te_var_t *vars; /* TE_MAX_VARS */
  int nshape;
  int shape_vars[64];
  int ntensors;
  int nuser_tensors;    /* the payload's tensors; cache stages follow */
  te_tensor_t *tensors; /* TE_MAX_TENSORS */
  int nkernels;
  te_kernel_t kernels[TE_MAX_KERNELS];
  const void *parse_tensors; /* the payload's tensor array while parsing (msgpack_object) */
};

/* te_parse.c */
kiln_status_t te_parse(const uint8_t *bytes, size_t len, kc_te_program_t *p);
void *te_alloc(kc_te_program_t *p, size_t n);
int te_find_tensor(const kc_te_program_t *p, const char *name);
int te_find_var(const kc_te_program_t *p, int stage, const char *name);
kiln_status_t te_new_var(kc_te_program_t *p, int stage, const char *name, int kind, int *out);
const char *te_dtype_name(int dt);
bool te_is_float(int dt);
bool te_is_int(int dt);

/* te_expr.c */
te_expr_t *te_int(kc_te_program_t *p, int64_t v, int dtype);
te_expr_t *te_varref(kc_te_program_t *p, int var);
te_expr_t *te_bin(kc_te_program_t *p, int op, te_expr_t *a, te_expr_t *b);
te_expr_t *te_node(kc_te_program_t *p, int kind, int op, int dtype, int nargs);
bool te_const(const te_expr_t *e, int64_t *out);
bool te_equal(const te_expr_t *a, const te_expr_t *b);
/* Replaces every TE_VAR v with subst[v] where subst[v] is non-NULL (array of p->nvars). */
te_expr_t *te_subst(kc_te_program_t *p, te_expr_t *e, te_expr_t **subst);
/* Constant folding and linear normalisation; uses constant var extents for proofs. */
te_expr_t *te_simplify(kc_te_program_t *p, te_expr_t *e);
/* Constant bounds of an integer expression over var ranges [0, cext-1] (shape vars >= 0). */
bool te_const_bounds(const kc_te_program_t *p, const te_expr_t *e, int64_t *lo, int64_t *hi);
/* Symbolic bounds where vars with relax[v] range over [0, extent-1]. false if not affine enough. */
bool te_sym_bounds(kc_te_program_t *p, te_expr_t *e, const bool *relax, te_expr_t **lo, te_expr_t **hi);
bool te_uses_var(const te_expr_t *e, const bool *set);

/* te_sched.c */
kiln_status_t te_apply_schedule(kc_te_program_t *p, const void *schedule_obj);
kiln_status_t te_inline_all(kc_te_program_t *p);
kiln_status_t te_infer_bounds(kc_te_program_t *p, int kernel);
/* subst[axis/reduce var of stage] = its value in terms of the stage's leaves (NULL elsewhere). */
void te_stage_subst(kc_te_program_t *p, int stage, te_expr_t **subst);
void te_arena_free(kc_te_program_t *p);
extern const char *const te_math_names[];

/* te_emit.c */
kiln_status_t te_emit_kernel(kc_job_t *job, kc_te_program_t *p, int kernel);

#endif
