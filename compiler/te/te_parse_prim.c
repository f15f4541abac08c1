/* Schedule primitive maps of the te payload (docs/te.md §5) read into te_prim_t: a table of
 * one reader per primitive with the keys it allows. Names are resolved later, by
 * te_sched_apply, against the program as the primitives before have left it. */
#include <string.h>

#include "compiler/te/te_mp.h"
#include "compiler/te/te_parse.h"

typedef kiln_status_t (*prim_fn)(const msgpack_object *o, te_prim_t *m);

/* A required name field. */
static kiln_status_t req_name(const msgpack_object *o, const char *key, const te_prim_t *m, char *dst) {
  if (te_mp_str(te_mp_get(o, key), dst, TE_NAME)) return KILN_OK;
  if (m->stage[0]) return KC_COMPILE_ERROR("te: a schedule primitive on %s lacks '%s'", m->stage, key);
  return KC_COMPILE_ERROR("te: a schedule primitive lacks '%s'", key);
}

/* An optional name field: empty when absent or not a name. */
static void opt_name(const msgpack_object *o, const char *key, char *dst) {
  if (!te_mp_str(te_mp_get(o, key), dst, TE_NAME)) dst[0] = 0;
}

/* An array of `min`..`max` names into m->vars. */
static kiln_status_t name_list(const msgpack_object *o, const char *key, int min, int max, te_prim_t *m,
                               const char *what) {
  const msgpack_object *a = te_mp_get(o, key);
  if (!a || a->type != MSGPACK_OBJECT_ARRAY || (int)a->via.array.size < min || (int)a->via.array.size > max)
    return KC_COMPILE_ERROR("te: %s on %s needs %d..%d %s", what, m->stage, min, max, key);
  m->nvars = (int)a->via.array.size;
  for (int i = 0; i < m->nvars; i++)
    if (!te_mp_str(&a->via.array.ptr[i], m->vars[i], TE_NAME))
      return KC_COMPILE_ERROR("te: %s on %s: %s[%d] is not a name", what, m->stage, key, i);
  return KILN_OK;
}

static kiln_status_t read_one_var(const msgpack_object *o, te_prim_t *m) {
  m->nvars = 1;
  return req_name(o, "var", m, m->vars[0]);
}

static kiln_status_t read_split(const msgpack_object *o, te_prim_t *m) {
  KILN_RETURN_IF_ERROR(read_one_var(o, m));
  m->nparts = te_mp_get(o, "nparts") != NULL;
  if (m->nparts == (te_mp_get(o, "factor") != NULL) || !te_mp_int(te_mp_get(o, m->nparts ? "nparts" : "factor"), &m->factor[0]))
    return KC_COMPILE_ERROR("te: split of %s.%s needs exactly one integer factor or nparts", m->stage, m->vars[0]);
  opt_name(o, "outer", m->names[0]);
  opt_name(o, "inner", m->names[1]);
  return KILN_OK;
}

static kiln_status_t read_tile(const msgpack_object *o, te_prim_t *m) {
  m->nvars = 2;
  KILN_RETURN_IF_ERROR(req_name(o, "x", m, m->vars[0]));
  KILN_RETURN_IF_ERROR(req_name(o, "y", m, m->vars[1]));
  if (!te_mp_int(te_mp_get(o, "x_factor"), &m->factor[0]) || !te_mp_int(te_mp_get(o, "y_factor"), &m->factor[1]))
    return KC_COMPILE_ERROR("te: tile of %s needs integer x_factor and y_factor", m->stage);
  opt_name(o, "x_outer", m->names[0]);
  opt_name(o, "x_inner", m->names[1]);
  opt_name(o, "y_outer", m->names[2]);
  opt_name(o, "y_inner", m->names[3]);
  return KILN_OK;
}

static kiln_status_t read_fuse(const msgpack_object *o, te_prim_t *m) {
  KILN_RETURN_IF_ERROR(name_list(o, "vars", 2, 16, m, "fuse"));
  opt_name(o, "fused", m->names[0]);
  return KILN_OK;
}

static kiln_status_t read_reorder(const msgpack_object *o, te_prim_t *m) {
  return name_list(o, "vars", 1, TE_PRIM_MAX_VARS, m, "reorder");
}

static kiln_status_t read_storage_order(const msgpack_object *o, te_prim_t *m) {
  return name_list(o, "vars", 1, TE_MAX_DIMS, m, "storage_order");
}

static kiln_status_t read_bind(const msgpack_object *o, te_prim_t *m) {
  char th[16];
  KILN_RETURN_IF_ERROR(read_one_var(o, m));
  m->thread = -1;
  if (te_mp_str(te_mp_get(o, "thread"), th, sizeof(th)))
    for (int i = 0; i < 6; i++)
      if (strcmp(th, te_thread_names[i]) == 0) m->thread = i;
  if (m->thread < 0 && strcmp(th, "vthread") == 0) m->thread = TE_THREAD_VTHREAD;
  if (m->thread < 0)
    return KC_COMPILE_ERROR("te: bind of %s.%s: thread must be blockIdx.x/y/z, threadIdx.x/y/z or vthread", m->stage,
                            m->vars[0]);
  return KILN_OK;
}

static kiln_status_t read_parallel(const msgpack_object *o, te_prim_t *m) {
  const msgpack_object *c = te_mp_get(o, "chunk");
  KILN_RETURN_IF_ERROR(read_one_var(o, m));
  if (c && (!te_mp_int(c, &m->factor[0]) || m->factor[0] < 1 || m->factor[0] > (1 << 30)))
    return KC_COMPILE_ERROR("te: parallel of %s.%s: chunk must be an integer from 1 to 2^30", m->stage, m->vars[0]);
  return KILN_OK;
}

static kiln_status_t read_compute_at(const msgpack_object *o, te_prim_t *m) {
  KILN_RETURN_IF_ERROR(req_name(o, "parent", m, m->parent));
  return read_one_var(o, m);
}

static kiln_status_t read_no_fields(const msgpack_object *o, te_prim_t *m) {
  (void)o;
  (void)m;
  return KILN_OK;
}

/* The new stage's name and scope of cache_read and cache_write. */
static kiln_status_t read_cache_stage(const msgpack_object *o, te_prim_t *m) {
  char sc[16];
  if (!te_mp_str(te_mp_get(o, "name"), m->names[0], TE_NAME))
    return KC_COMPILE_ERROR("te: cache_read/cache_write needs the new stage's 'name'");
  if (!te_mp_str(te_mp_get(o, "scope"), sc, sizeof(sc)) ||
      (strcmp(sc, "shared") && strcmp(sc, "local") && strcmp(sc, "global")))
    return KC_COMPILE_ERROR("te: cache stage %s needs scope \"shared\", \"local\" or \"global\"", m->names[0]);
  m->scope = sc[0] == 's' ? TE_SCOPE_SHARED : sc[0] == 'l' ? TE_SCOPE_LOCAL : TE_SCOPE_GLOBAL;
  return KILN_OK;
}

static kiln_status_t read_cache_read(const msgpack_object *o, te_prim_t *m) {
  const msgpack_object *r = te_mp_get(o, "readers");
  if (!r || r->type != MSGPACK_OBJECT_ARRAY || r->via.array.size == 0)
    return KC_COMPILE_ERROR("te: cache_read of %s needs readers (an array of stages)", m->stage);
  if (r->via.array.size > TE_PRIM_MAX_VARS)
    return KC_COMPILE_ERROR("te: cache_read of %s has more than %d readers", m->stage, TE_PRIM_MAX_VARS);
  m->nvars = (int)r->via.array.size;
  for (int i = 0; i < m->nvars; i++)
    if (!te_mp_str(&r->via.array.ptr[i], m->vars[i], TE_NAME))
      return KC_COMPILE_ERROR("te: cache_read of %s: reader %d is not a compute stage", m->stage, i);
  return read_cache_stage(o, m);
}

static kiln_status_t read_rfactor(const msgpack_object *o, te_prim_t *m) {
  const msgpack_object *fa = te_mp_get(o, "factor_axis");
  KILN_RETURN_IF_ERROR(read_one_var(o, m));
  if (!te_mp_str(te_mp_get(o, "name"), m->names[0], TE_NAME))
    return KC_COMPILE_ERROR("te: rfactor of %s needs the new stage's 'name'", m->stage);
  if (fa && (!te_mp_int(fa, &m->factor[0]) || m->factor[0] < 0 || m->factor[0] > TE_MAX_DIMS))
    return KC_COMPILE_ERROR("te: rfactor of %s: factor_axis must be an integer from 0 to the rank", m->stage);
  return KILN_OK;
}

static kiln_status_t read_storage_align(const msgpack_object *o, te_prim_t *m) {
  KILN_RETURN_IF_ERROR(read_one_var(o, m));
  if (!te_mp_int(te_mp_get(o, "factor"), &m->factor[0]) || !te_mp_int(te_mp_get(o, "offset"), &m->factor[1]) ||
      m->factor[0] < 1 || m->factor[0] > 4096 || m->factor[1] < 0 || m->factor[1] >= m->factor[0])
    return KC_COMPILE_ERROR("te: storage_align of %s.%s needs integers factor (1..4096) and offset (0..factor-1)",
                            m->stage, m->vars[0]);
  return KILN_OK;
}

static kiln_status_t read_launch_bounds(const msgpack_object *o, te_prim_t *m) {
  if (!te_mp_int(te_mp_get(o, "min_blocks"), &m->factor[0]) || m->factor[0] < 1 || m->factor[0] > TE_MAX_MIN_BLOCKS)
    return KC_COMPILE_ERROR("te: launch_bounds of %s needs min_blocks, an integer from 1 to %d", m->stage,
                            TE_MAX_MIN_BLOCKS);
  return KILN_OK;
}

#define KEYS(...) ((const char *const[]){"op", __VA_ARGS__, NULL})

static const struct {
  const char *name;
  int op;
  const char *stage_key; /* "stage", or "tensor" for the cache primitives */
  const char *const *keys;
  prim_fn read;
} prims[] = {
    {"split", TE_P_SPLIT, "stage", KEYS("stage", "var", "factor", "nparts", "outer", "inner"), read_split},
    {"tile", TE_P_TILE, "stage",
     KEYS("stage", "x", "y", "x_factor", "y_factor", "x_outer", "y_outer", "x_inner", "y_inner"), read_tile},
    {"fuse", TE_P_FUSE, "stage", KEYS("stage", "vars", "fused"), read_fuse},
    {"reorder", TE_P_REORDER, "stage", KEYS("stage", "vars"), read_reorder},
    {"bind", TE_P_BIND, "stage", KEYS("stage", "var", "thread"), read_bind},
    {"unroll", TE_P_UNROLL, "stage", KEYS("stage", "var"), read_one_var},
    {"vectorize", TE_P_VECTORIZE, "stage", KEYS("stage", "var"), read_one_var},
    {"parallel", TE_P_PARALLEL, "stage", KEYS("stage", "var", "chunk"), read_parallel},
    {"compute_at", TE_P_COMPUTE_AT, "stage", KEYS("stage", "parent", "var"), read_compute_at},
    {"compute_inline", TE_P_COMPUTE_INLINE, "stage", KEYS("stage"), read_no_fields},
    {"cache_read", TE_P_CACHE_READ, "tensor", KEYS("tensor", "scope", "readers", "name"), read_cache_read},
    {"cache_write", TE_P_CACHE_WRITE, "tensor", KEYS("tensor", "scope", "name"), read_cache_stage},
    {"rfactor", TE_P_RFACTOR, "stage", KEYS("stage", "var", "name", "factor_axis"), read_rfactor},
    {"storage_align", TE_P_STORAGE_ALIGN, "stage", KEYS("stage", "var", "factor", "offset"), read_storage_align},
    {"storage_order", TE_P_STORAGE_ORDER, "stage", KEYS("stage", "vars"), read_storage_order},
    {"double_buffer", TE_P_DOUBLE_BUFFER, "stage", KEYS("stage"), read_no_fields},
    {"launch_bounds", TE_P_LAUNCH_BOUNDS, "stage", KEYS("stage", "min_blocks"), read_launch_bounds},
};

kiln_status_t te_parse_prim(const msgpack_object *o, te_prim_t *m) {
  char op[24];
  memset(m, 0, sizeof(*m));
  if (!te_mp_str(te_mp_get(o, "op"), op, sizeof(op))) return KC_COMPILE_ERROR("te: a schedule primitive has no 'op'");
  for (size_t i = 0; i < KILN_ARRAY_SIZE(prims); i++) {
    if (strcmp(op, prims[i].name) != 0) continue;
    m->op = prims[i].op;
    KILN_RETURN_IF_ERROR(te_mp_check_keys(o, prims[i].name, prims[i].keys));
    KILN_RETURN_IF_ERROR(req_name(o, prims[i].stage_key, m, m->stage));
    return prims[i].read(o, m);
  }
  return KC_COMPILE_ERROR("te: unknown schedule primitive '%s'", op);
}
