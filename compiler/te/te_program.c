/* The te program model: arena, dtypes, names, vars and tensors (te_program.h). */
#include "compiler/te/te_program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct te_chunk {
  te_chunk_t *next;
  size_t used, cap;
  _Alignas(16) uint8_t data[];
};

te_program_t *te_program_create(void) {
  te_program_t *p = calloc(1, sizeof(*p));
  if (!p) return NULL;
  p->index_dtype = TE_I32;
  p->vars = calloc(TE_MAX_VARS, sizeof(*p->vars));
  p->tensors = calloc(TE_MAX_TENSORS, sizeof(*p->tensors));
  if (!p->vars || !p->tensors) {
    te_program_destroy(p);
    return NULL;
  }
  return p;
}

void te_program_destroy(te_program_t *p) {
  if (!p) return;
  for (int i = 0; i < p->nkernels; i++) free(p->kernels[i].launch);
  for (te_chunk_t *c = p->arena, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(p->vars);
  free(p->tensors);
  free(p);
}

void *te_alloc(te_program_t *p, size_t n) {
  n = (n + 15) & ~(size_t)15;
  te_chunk_t *c = p->arena;
  if (!c || c->used + n > c->cap) {
    size_t cap = n > 65536 ? n : 65536;
    te_chunk_t *nc = malloc(sizeof(*nc) + cap);
    if (!nc) return NULL;
    nc->next = c;
    nc->used = 0;
    nc->cap = cap;
    p->arena = c = nc;
  }
  void *r = c->data + c->used;
  c->used += n;
  memset(r, 0, n);
  return r;
}

static const char *const dtype_names[] = {
    [TE_BOOL] = "bool",     [TE_I8] = "int8",         [TE_I16] = "int16",     [TE_I32] = "int32",
    [TE_I64] = "int64",     [TE_U8] = "uint8",        [TE_U16] = "uint16",    [TE_U32] = "uint32",
    [TE_U64] = "uint64",    [TE_F16] = "float16",     [TE_F32] = "float32",   [TE_F64] = "float64",
    [TE_WEAK_INT] = "int literal", [TE_WEAK_FLOAT] = "float literal",
};

const char *te_dtype_name(int dt) {
  return dt > 0 && dt < (int)KILN_ARRAY_SIZE(dtype_names) ? dtype_names[dt] : "?";
}

int te_dtype_from_name(const char *name) {
  for (int i = TE_BOOL; i <= TE_F64; i++)
    if (strcmp(name, dtype_names[i]) == 0) return i;
  return 0;
}

bool te_is_float(int dt) { return dt == TE_F16 || dt == TE_F32 || dt == TE_F64 || dt == TE_WEAK_FLOAT; }
bool te_is_int(int dt) { return (dt >= TE_I8 && dt <= TE_U64) || dt == TE_WEAK_INT; }
bool te_is_unsigned(int dt) { return dt >= TE_U8 && dt <= TE_U64; }

bool te_name_ok(const char *s) {
  if (!s[0] || strlen(s) >= TE_NAME) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
          *s == '.'))
      return false;
  return true;
}

int te_find_tensor(const te_program_t *p, const char *name) {
  for (int i = 0; i < p->ntensors; i++)
    if (strcmp(p->tensors[i].name, name) == 0) return i;
  return -1;
}

int te_find_var(const te_program_t *p, int stage, const char *name) {
  for (int i = 0; i < p->nvars; i++)
    if (p->vars[i].stage == stage && strcmp(p->vars[i].name, name) == 0) return i;
  for (int i = 0; i < p->nshape; i++)
    if (strcmp(p->vars[p->shape_vars[i]].name, name) == 0) return p->shape_vars[i];
  return -1;
}

kiln_status_t te_new_var(te_program_t *p, int stage, const char *name, int kind, int *out) {
  if (!te_name_ok(name)) return KC_COMPILE_ERROR("te: bad name '%s': use 1..63 of [A-Za-z0-9_.]", name);
  if (te_find_var(p, stage, name) >= 0 || (kind == TE_V_SHAPE && te_find_tensor(p, name) >= 0))
    return KC_COMPILE_ERROR("te: the name '%s' is already used%s%s", name, stage >= 0 ? " in stage " : "",
                            stage >= 0 ? p->tensors[stage].name : "");
  if (p->nvars >= TE_MAX_VARS) return KC_COMPILE_ERROR("te: more than %d variables", TE_MAX_VARS);
  te_var_t *v = &p->vars[p->nvars];
  memset(v, 0, sizeof(*v));
  snprintf(v->name, sizeof(v->name), "%s", name);
  v->stage = stage;
  v->kind = (uint8_t)kind;
  v->bind = TE_BIND_NONE;
  v->cext = -1;
  *out = p->nvars++;
  return KILN_OK;
}

kiln_status_t te_new_tensor(te_program_t *p, const char *name, te_tensor_t **out) {
  if (p->ntensors >= TE_MAX_TENSORS) return KC_COMPILE_ERROR("te: more than %d tensors", TE_MAX_TENSORS);
  te_tensor_t *t = &p->tensors[p->ntensors];
  memset(t, 0, sizeof(*t));
  if (name) snprintf(t->name, sizeof(t->name), "%s", name);
  t->attach_stage = t->attach_var = -1;
  t->kernel_arg = -1;
  *out = t;
  return KILN_OK;
}

int te_leaf_pos(const te_tensor_t *t, int v) {
  for (int i = 0; i < t->nleaves; i++)
    if (t->leaves[i] == v) return i;
  return -1;
}

const char *const te_math_names[] = {
    "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "pow", "sin", "cos",
    "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "erf", "erfc", "cbrt", "hypot", "fmod", "sqrt", "fabs", "floor", "ceil", "trunc", "round",
    "rint", "fmin", "fmax", "fma", "copysign", "abs", "sigmoid", NULL};

int te_math_arity(const char *name) {
  static const char *const two[] = {"pow", "atan2", "hypot", "fmod", "fmin", "fmax", "copysign"};
  if (strcmp(name, "fma") == 0) return 3;
  for (size_t i = 0; i < KILN_ARRAY_SIZE(two); i++)
    if (strcmp(name, two[i]) == 0) return 2;
  return 1;
}

const char *const te_thread_names[6] = {"blockIdx.x", "blockIdx.y", "blockIdx.z",
                                        "threadIdx.x", "threadIdx.y", "threadIdx.z"};
