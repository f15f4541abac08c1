/* graph_create, graph_run, graph_time, graph_free (docs/graph.md). kilnd checks the payload
 * (graph_plan.c), compiles its programs through the compile queue (cached like any module),
 * resolves every launch against the kernel tables and launch recipes, plans the memory, and
 * hands the device worker of (device, tenant) one `graph_load`; each run is one `graph_run`
 * to that worker (device/worker/graph.c), which runs every launch and answers once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "protocol/channel.h"
#include "device/launch.h"
#include "protocol/frame.h"
#include "protocol/job_graph.h"
#include "protocol/job_module.h"
#include "protocol/job_tensor.h"
#include "server/compile.h"
#include "server/modules.h"
#include "server/graph.h"
#include "server/metrics.h"

/* --- graphs kept ---------------------------------------------------------------------------- */

typedef struct gout {
  char name[256];
  kiln_tensor_desc_t desc;
  kiln_gregion_t region;
  uint64_t offset;
} gout_t;

typedef struct graph {
  uint8_t id[KILN_HASH_BYTES];
  char hex[2 * KILN_HASH_BYTES + 1];
  char name[256];
  kiln_tenant_t *tenant;
  kiln_device_entry_t *device;
  kiln_dslot_t *slot;
  uint32_t generation; /* of the worker process holding it */
  uint64_t handle;     /* its handle in that worker */
  gout_t *inputs;      /* name, desc, offset in the input block */
  uint32_t num_inputs;
  gout_t *outputs;
  uint32_t num_outputs;
  uint64_t input_bytes, constant_bytes, arena_bytes, charged;
  uint32_t nodes, launches, programs, compiled;
  double compile_ms;
  char **labels;         /* per node: "name (label)" */
  uint32_t *launch_node; /* per launch: its node */
  uint32_t refs; /* the table's and each run's */
  bool gone;     /* freed or lost: out of the table */
} graph_t;

struct run_op;

typedef struct kiln_graph_state {
  kiln_map_t table; /* key64(tenant, id) -> graph_t* */
  struct run_op *runs; /* runs and timings at a worker (for a connection that closes) */
  uint64_t next_handle;
  uint64_t live, bytes;
  uint64_t runs_ok, runs_failed;
} gstate_t;

static gstate_t *gstate(kiln_server_t *s) {
  if (!s->graphs) {
    s->graphs = calloc(1, sizeof(gstate_t));
    if (s->graphs) kiln_map_init(&s->graphs->table);
  }
  return s->graphs;
}

static uint64_t table_key(const kiln_tenant_t *t, const uint8_t id[KILN_HASH_BYTES]) {
  uint64_t k;
  memcpy(&k, id, sizeof(k));
  return (k ^ ((uint64_t)t->index * 0x9e3779b97f4a7c15ull)) | 1;
}

static void graph_unref(graph_t *g) {
  if (--g->refs) return;
  for (uint32_t i = 0; g->labels && i < g->nodes; i++) free(g->labels[i]);
  free(g->labels);
  free(g->launch_node);
  free(g->inputs);
  free(g->outputs);
  free(g);
}

static void ignore_reply(void *ctx, kiln_status_t st, const msgpack_object *result) {
  (void)ctx;
  (void)result;
  kiln_status_free(st);
}

static bool lost(const graph_t *g) { return kiln_worker_generation(g->slot->worker) != g->generation; }

static void send_free(graph_t *g);

/* Out of the table: its bytes go back; a live worker is told to free it (after the runs
 * queued before, in order). */
static void graph_drop(gstate_t *gs, graph_t *g) {
  if (g->gone) return;
  g->gone = true;
  kiln_map_remove(&gs->table, table_key(g->tenant, g->id));
  kiln_memory_release(g->device, g->tenant, g->charged);
  gs->live--;
  gs->bytes -= g->constant_bytes + g->arena_bytes;
  if (!lost(g)) send_free(g);
  graph_unref(g);
}

static void send_free(graph_t *g) {
  kiln_buf_t params;
  kiln_buf_init(&params);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &params);
  kiln_graph_job_t j = {.kind = KILN_JOB_GRAPH_FREE, .handle = g->handle};
  kiln_graph_job_encode(&pk.pk, &j);
  kiln_status_t st = kiln_packer_status(&pk);
  if (!st) st = kiln_worker_call(g->slot->worker, kiln_job_name(KILN_JOB_GRAPH_FREE), &params, NULL, 0, ignore_reply, NULL);
  kiln_status_free(st);
  kiln_buf_deinit(&params);
}

/* A graph that never made it into the table (its load failed). */
static void graph_discard(graph_t *g) {
  kiln_memory_release(g->device, g->tenant, g->charged);
  if (!lost(g)) send_free(g);
  graph_unref(g);
}

/* Graphs whose device worker died: gone, their bytes given back. */
static void graphs_reap(gstate_t *gs) {
  size_t it = 0;
  void *v;
  graph_t *dead[64];
  for (;;) {
    size_t n = 0;
    it = 0;
    while (n < 64 && kiln_map_next(&gs->table, &it, NULL, &v))
      if (lost(v)) dead[n++] = v;
    for (size_t i = 0; i < n; i++) graph_drop(gs, dead[i]);
    if (n < 64) break;
  }
}

static kiln_status_t parse_id(const msgpack_object *params, uint8_t out[KILN_HASH_BYTES]) {
  const msgpack_object *o = kiln_params_find(params, "graph");
  if (!o || o->type != MSGPACK_OBJECT_STR || o->via.str.size != 2 * KILN_HASH_BYTES)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "'graph' must be a graph id (64 hex digits)");
  for (uint32_t i = 0; i < KILN_HASH_BYTES; i++) {
    int v = 0;
    for (int k = 0; k < 2; k++) {
      char c = o->via.str.ptr[2 * i + k];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "'graph' must be lowercase hex");
      v = v * 16 + d;
    }
    out[i] = (uint8_t)v;
  }
  return KILN_OK;
}

/* The calling tenant's graph; E_NOT_FOUND for unknown ids, other tenants' and lost ones. */
static kiln_status_t find_graph(kiln_call_t *call, graph_t **out) {
  uint8_t id[KILN_HASH_BYTES];
  KILN_RETURN_IF_ERROR(parse_id(call->params, id));
  gstate_t *gs = gstate(call->server);
  if (!gs) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  kiln_tenant_t *t = call->conn->tenant;
  graph_t *g = kiln_map_get(&gs->table, table_key(t, id));
  if (!g || g->tenant != t || memcmp(g->id, id, KILN_HASH_BYTES) != 0)
    return KILN_STATUS(KILN_E_NOT_FOUND, "no graph %.16s of this tenant", kiln_params_find(call->params, "graph")->via.str.ptr);
  if (lost(g)) {
    kiln_status_t st = KILN_STATUS(KILN_E_NOT_FOUND,
                                   "graph %.16s was lost: its device worker ended (a device fault); create it again",
                                   g->hex);
    graph_drop(gs, g);
    return st;
  }
  *out = g;
  return KILN_OK;
}

static bool same_desc(const kiln_tensor_desc_t *a, const kiln_tensor_desc_t *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (uint32_t k = 0; k < a->ndim; k++)
    if (a->shape[k] != b->shape[k]) return false;
  return true;
}

/* A tensor given by id for a graph (a constant, an input): the caller's (another tenant's id
 * is E_NOT_FOUND, as everywhere), on the graph's device, with the declared dtype and shape. */
static kiln_status_t tensor_for(kiln_call_t *call, uint64_t id, const kiln_device_entry_t *d,
                                const kiln_tensor_desc_t *want, const char *what, const char *name) {
  kiln_tensor_t *t;
  kiln_status_t st = kiln_tensor_lookup(call, id, &t);
  if (!st && t->device != d)
    st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "tensor %llu lives on %s; the graph runs on %s", (unsigned long long)id,
                     t->device->id, d->id);
  if (!st && !same_desc(&t->desc, want))
    st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "tensor %llu is %s with %u dimensions; the graph declares %s with %u",
                     (unsigned long long)id, kiln_dtype_name(t->desc.dtype), t->desc.ndim, kiln_dtype_name(want->dtype),
                     want->ndim);
  if (!st) return KILN_OK;
  kiln_status_t e = KILN_STATUS(kiln_status_code(st), "%s '%s': %s", what, name, kiln_status_message(st));
  kiln_status_free(st);
  return e;
}

/* --- graph_create ---------------------------------------------------------------------------- */

typedef struct prog_state {
  char module[2 * KILN_HASH_BYTES + 1];
  bool cached;
  double ms;
  char *error;
  kiln_code_t code;
} prog_state_t;

typedef struct create_op {
  kiln_server_t *server;
  kiln_req_t *req;
  kiln_tenant_t *tenant;
  kiln_device_entry_t *device;
  uint8_t id[KILN_HASH_BYTES];
  uint8_t *payload; /* owned copy: the plan borrows it */
  size_t payload_len;
  msgpack_zone zone;
  msgpack_object root;
  kiln_buf_t options; /* the packed options map, or empty */
  kiln_gplan_t plan;
  prog_state_t *progs;
  uint32_t remaining;
  graph_t *graph; /* while the worker loads it */
  int compiled;
  double compile_ms;
} create_op_t;

static void create_free(create_op_t *op) {
  if (op->progs)
    for (uint32_t i = 0; i < op->plan.num_programs; i++) free(op->progs[i].error);
  free(op->progs);
  kiln_gplan_deinit(&op->plan);
  msgpack_zone_destroy(&op->zone);
  free(op->payload);
  kiln_buf_deinit(&op->options);
  free(op);
}

static void pack_create_reply(msgpack_packer *pk, const graph_t *g, bool cached) {
  kiln_fields_t r;
  kiln_fields_begin(&r, pk);
  kiln_fields_str(&r, "graph", g->hex);
  kiln_fields_bool(&r, "cached", cached);
  kiln_fields_u64(&r, "nodes", g->nodes);
  kiln_fields_u64(&r, "launches", g->launches);
  kiln_fields_u64(&r, "programs", g->programs);
  kiln_fields_u64(&r, "compiled", cached ? 0 : g->compiled);
  kiln_fields_f64(&r, "compile_ms", cached ? 0 : g->compile_ms);
  kiln_fields_u64(&r, "constant_bytes", g->constant_bytes);
  kiln_fields_u64(&r, "arena_bytes", g->arena_bytes);
  kiln_fields_end(&r);
}

static void create_fail(create_op_t *op, kiln_status_t st) {
  kiln_req_fail(op->req, st);
  create_free(op);
}

static void on_loaded(void *ctx, kiln_status_t st, const msgpack_object *result) {
  create_op_t *op = ctx;
  graph_t *g = op->graph;
  gstate_t *gs = gstate(op->server);
  (void)result;
  if (!st && lost(g))
    st = KILN_STATUS(KILN_E_DEVICE_FAULT, "the device worker ended while it loaded the graph");
  graph_t *other = st ? NULL : kiln_map_get(&gs->table, table_key(g->tenant, g->id));
  if (other && !lost(other)) {
    /* The same graph was made meanwhile by another request of the tenant: this copy goes,
     * the answer is the first one's. */
    graph_discard(g);
    op->graph = NULL;
    kiln_buf_t b;
    kiln_buf_init(&b);
    kiln_packer_t pk;
    kiln_packer_init(&pk, &b);
    kiln_rpc_pack_result_head(&pk.pk, op->req->msgid);
    pack_create_reply(&pk.pk, other, true);
    kiln_req_reply(op->req, &b, NULL, 0, NULL, NULL);
    create_free(op);
    return;
  }
  if (other) graph_drop(gs, other);
  if (!st) st = kiln_map_put(&gs->table, table_key(g->tenant, g->id), g);
  if (st) {
    /* nothing partial stays: the worker drops what it allocated, the bytes come back */
    graph_discard(g);
    op->graph = NULL;
    create_fail(op, st);
    return;
  }
  gs->live++;
  gs->bytes += g->constant_bytes + g->arena_bytes;
  op->graph = NULL;
  KILN_LOG_INFO("graph_created", "graph=%.16s name=\"%s\" tenant=%s device=%s nodes=%u launches=%u "
                "programs=%u compiled=%u constant_bytes=%llu arena_bytes=%llu",
                g->hex, g->name, g->tenant->name, g->device->id, g->nodes, g->launches, g->programs,
                g->compiled, (unsigned long long)g->constant_bytes, (unsigned long long)g->arena_bytes);
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &b);
  kiln_rpc_pack_result_head(&pk.pk, op->req->msgid);
  pack_create_reply(&pk.pk, g, false);
  kiln_req_reply(op->req, &b, NULL, 0, NULL, NULL);
  create_free(op);
}

/* Evaluates a launch-recipe expression (docs/te.md §7). */
static kiln_status_t eval_expr(const msgpack_object *e, const msgpack_object_array *vars,
                               const int64_t *values, int depth, int64_t *out) {
  if (depth > 64) return KILN_STATUS(KILN_E_INTERNAL, "launch recipe nests too deeply");
  if (e->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
    *out = (int64_t)e->via.u64;
    return KILN_OK;
  }
  if (e->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    *out = e->via.i64;
    return KILN_OK;
  }
  if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size < 2 || e->via.array.ptr[0].type != MSGPACK_OBJECT_STR)
    return KILN_STATUS(KILN_E_INTERNAL, "launch recipe has an expression kilnd does not know");
  const msgpack_object *a = e->via.array.ptr;
  if (kiln_obj_str_eq(&a[0], "var")) {
    for (uint32_t i = 0; vars && i < vars->size; i++) {
      const msgpack_object *n = kiln_params_find(&vars->ptr[i], "name");
      if (n && n->type == MSGPACK_OBJECT_STR && a[1].type == MSGPACK_OBJECT_STR &&
          n->via.str.size == a[1].via.str.size && memcmp(n->via.str.ptr, a[1].via.str.ptr, n->via.str.size) == 0) {
        *out = values[i];
        return KILN_OK;
      }
    }
    return KILN_STATUS(KILN_E_INTERNAL, "launch recipe names an unknown shape variable");
  }
  if (kiln_obj_str_eq(&a[0], "const")) {
    if (e->via.array.size < 3) return KILN_STATUS(KILN_E_INTERNAL, "bad const in a launch recipe");
    return eval_expr(&a[2], vars, values, depth + 1, out);
  }
  if (e->via.array.size != 3) return KILN_STATUS(KILN_E_INTERNAL, "bad expression in a launch recipe");
  int64_t x, y;
  KILN_RETURN_IF_ERROR(eval_expr(&a[1], vars, values, depth + 1, &x));
  KILN_RETURN_IF_ERROR(eval_expr(&a[2], vars, values, depth + 1, &y));
  if (kiln_obj_str_eq(&a[0], "add")) *out = x + y;
  else if (kiln_obj_str_eq(&a[0], "sub")) *out = x - y;
  else if (kiln_obj_str_eq(&a[0], "mul")) *out = x * y;
  else if (kiln_obj_str_eq(&a[0], "min")) *out = x < y ? x : y;
  else if (kiln_obj_str_eq(&a[0], "max")) *out = x > y ? x : y;
  else if (kiln_obj_str_eq(&a[0], "floordiv") || kiln_obj_str_eq(&a[0], "floormod")) {
    if (y == 0) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "the launch recipe divides by zero");
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      q--;
      r += y;
    }
    *out = kiln_obj_str_eq(&a[0], "floordiv") ? q : r;
  } else return KILN_STATUS(KILN_E_INTERNAL, "launch recipe has an operator kilnd does not know");
  return KILN_OK;
}

/* A te launch: shape vars read from the declared shapes (appended as trailing scalars),
 * grid and block evaluated. `extra` receives the appended args (at most 16). */
static kiln_status_t apply_recipe(const kiln_gplan_t *p, const kiln_gnode_t *nd, kiln_glaunch_t *l,
                                  const kiln_kernel_t *k, kiln_garg_t *extra, uint32_t *nextra) {
  msgpack_zone z;
  msgpack_zone_init(&z, 1024);
  msgpack_object r;
  size_t off = 0;
  kiln_status_t st = KILN_OK;
  if (!k->launch || msgpack_unpack((const char *)k->launch, k->launch_size, &off, &z, &r) != MSGPACK_UNPACK_SUCCESS ||
      r.type != MSGPACK_OBJECT_MAP)
    st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "node %.*s: kernel %s has no launch recipe", (int)nd->name_len,
                     nd->name, l->kernel);
  const msgpack_object *grid = st ? NULL : kiln_params_find(&r, "grid");
  const msgpack_object *block = st ? NULL : kiln_params_find(&r, "block");
  const msgpack_object *vo = st ? NULL : kiln_params_find(&r, "vars");
  const msgpack_object_array *vars = vo && vo->type == MSGPACK_OBJECT_ARRAY ? &vo->via.array : NULL;
  int64_t values[16];
  *nextra = 0;
  if (!st && (!grid || !block || grid->type != MSGPACK_OBJECT_ARRAY || block->type != MSGPACK_OBJECT_ARRAY ||
              grid->via.array.size > 3 || block->via.array.size > 3 || (vars && vars->size > 16)))
    st = KILN_STATUS(KILN_E_INTERNAL, "kernel %s: malformed launch recipe", l->kernel);
  for (uint32_t i = 0; !st && vars && i < vars->size; i++) {
    const msgpack_object *from = kiln_params_find(&vars->ptr[i], "from");
    uint64_t arg = 0;
    st = kiln_params_u64(&vars->ptr[i], "arg", true, &arg);
    if (st) break;
    if (!from || from->type != MSGPACK_OBJECT_ARRAY || from->via.array.size != 2 ||
        from->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        from->via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "node %.*s: kernel %s has a shape variable no argument's shape gives",
                       (int)nd->name_len, nd->name, l->kernel);
      break;
    }
    uint64_t ai = from->via.array.ptr[0].via.u64, di = from->via.array.ptr[1].via.u64;
    if (ai >= l->num_args || l->args[ai].kind != KILN_GARG_NAME ||
        di >= p->names[l->args[ai].name].desc.ndim) {
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "node %.*s: kernel %s reads a shape variable from argument %llu, "
                       "which has no dimension %llu", (int)nd->name_len, nd->name, l->kernel,
                       (unsigned long long)ai, (unsigned long long)di);
      break;
    }
    values[i] = (int64_t)p->names[l->args[ai].name].desc.shape[di];
    if (arg >= l->num_args) {
      extra[*nextra] = (kiln_garg_t){.kind = KILN_GARG_INT, .i = values[i]};
      (*nextra)++;
    }
  }
  for (int d = 0; !st && d < 2; d++) {
    const msgpack_object_array *a = d ? &block->via.array : &grid->via.array;
    uint32_t *out = d ? l->block : l->grid;
    out[0] = out[1] = out[2] = 1;
    for (uint32_t i = 0; !st && i < a->size; i++) {
      int64_t v;
      st = eval_expr(&a->ptr[i], vars, values, 0, &v);
      if (!st && (v < 0 || v > UINT32_MAX))
        st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "node %.*s: kernel %s's launch recipe gives %s %lld",
                         (int)nd->name_len, nd->name, l->kernel, d ? "block" : "grid", (long long)v);
      if (!st) out[i] = (uint32_t)v;
    }
  }
  (void)k;
  msgpack_zone_destroy(&z);
  return st;
}

static const char *format_kind(kiln_artifact_format_t f) {
  return f == KILN_FORMAT_CPU_SO ? "cpu" : f == KILN_FORMAT_HSACO ? "hsa" : f == KILN_FORMAT_PTX ? "cuda" : "?";
}

/* One launch's arguments as the job carries them: a name is its block and offset, a number
 * is converted to the kernel's parameter type here (device/launch.h), as `launch` does. */
static kiln_status_t job_args(const kiln_gplan_t *p, const kiln_gnode_t *nd, const kiln_kernel_t *k,
                              const kiln_garg_t *const *args, uint32_t n, kiln_graph_job_arg_t *out) {
  kiln_launch_arg_t *in = calloc(n ? n : 1, sizeof(*in));
  if (!in) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < n; i++) {
    const kiln_garg_t *a = args[i];
    switch (a->kind) {
      case KILN_GARG_NAME:
        in[i] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_TENSOR};
        out[i] = (kiln_graph_job_arg_t){.tag = 1 + (uint32_t)kiln_gname_region(p, a->name),
                                        .value = p->names[a->name].offset};
        break;
      case KILN_GARG_UINT: in[i] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_UINT, .u = a->u}; break;
      case KILN_GARG_INT: in[i] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_INT, .i = a->i}; break;
      case KILN_GARG_FLOAT: in[i] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_FLOAT, .f = a->f}; break;
    }
  }
  kiln_launch_values_t v;
  kiln_status_t st = kiln_launch_values_init(&v, k, in, n);
  free(in);
  if (st) {
    kiln_status_t e = KILN_STATUS(kiln_status_code(st), "node %.*s: kernel %s: %s", (int)nd->name_len, nd->name,
                                  k->name, kiln_status_message(st));
    kiln_status_free(st);
    return e;
  }
  for (uint32_t i = 0; i < n; i++)
    if (args[i]->kind != KILN_GARG_NAME) out[i] = (kiln_graph_job_arg_t){.tag = 0, .value = v.slots[i]};
  kiln_launch_values_deinit(&v);
  return KILN_OK;
}

static void load_job_free(kiln_graph_load_job_t *j) {
  for (uint32_t i = 0; j->launches && i < j->num_launches; i++) free(j->launches[i].args);
  free(j->launches);
  free(j->node_lens);
  free(j->nodes); /* the strings are the graph's labels */
}

/* Every program compiled: resolve the launches, plan, charge, and load into the worker. */
static void create_finish(create_op_t *op) {
  kiln_server_t *s = op->server;
  kiln_gplan_t *p = &op->plan;
  kiln_status_t st = KILN_OK;
  /* compile errors name the nodes that use the program */
  for (uint32_t i = 0; i < p->num_programs && !st; i++) {
    if (!op->progs[i].error) continue;
    char who[512] = "";
    size_t at = 0;
    for (uint32_t n = 0; n < p->num_nodes && at < sizeof(who) - 80; n++)
      if (p->nodes[n].program == i)
        at += (size_t)snprintf(who + at, sizeof(who) - at, "%s%.*s", at ? ", " : "",
                               (int)(p->nodes[n].name_len < 60 ? p->nodes[n].name_len : 60), p->nodes[n].name);
    st = KILN_STATUS(op->progs[i].code, "program %u (nodes %s) did not compile: %s", i, who[0] ? who : "none",
                     op->progs[i].error);
  }
  kiln_module_t *m = NULL;
  kiln_dslot_t *slot = NULL;
  if (!st) st = kiln_device_slot(s, op->device, op->tenant, &slot);
  for (uint32_t i = 0; !st && i < p->num_programs; i++) {
    /* a reference for as long as it is used here: the worker keeps what it loads */
    st = kiln_module_find(s, NULL, op->progs[i].module, 2 * KILN_HASH_BYTES, &m);
    if (!st && strcmp(format_kind(m->art.format), op->device->kind) != 0)
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "program %u: module %.16s was compiled for %s; device %s runs %s code",
                       i, m->hex, m->art.target, op->device->id, op->device->kind);
    if (!st) st = kiln_slot_ensure_loaded(slot, m);
    kiln_module_release(m);
    m = NULL;
  }
  if (!st) st = kiln_gplan_memory(p);
  /* Constants given by id: still there (the compiles took time) and copied by the worker
   * after the jobs queued before (a write to the tensor before graph_create is seen). */
  kiln_graph_copy_t *copies = calloc(p->num_id_constants ? p->num_id_constants : 1, sizeof(*copies));
  uint32_t ncopies = 0;
  if (!st && !copies) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; !st && i < p->num_names; i++) {
    const kiln_gname_t *n = &p->names[i];
    if (n->kind != KILN_GCONST || !n->tensor) continue;
    const kiln_tensor_t *t = kiln_map_get(&s->tensors, n->tensor);
    if (!t || t->tenant != op->tenant || t->freed || t->device != op->device ||
        t->generation != kiln_worker_generation(slot->worker))
      st = KILN_STATUS(KILN_E_NOT_FOUND, "constant '%.*s': tensor %llu was freed or lost while the graph was made",
                       (int)n->len, n->s, (unsigned long long)n->tensor);
    else copies[ncopies++] = (kiln_graph_copy_t){.handle = n->tensor, .offset = n->offset, .bytes = n->desc.nbytes};
  }
  uint64_t charged = p->input_bytes + p->constant_bytes + p->arena_bytes;
  uint32_t total = 0;
  for (uint32_t n = 0; n < p->num_nodes; n++) total += p->nodes[n].num_launches;
  kiln_graph_load_job_t job = {.handle = ++gstate(s)->next_handle, .num_nodes = p->num_nodes, .copies = copies,
                               .num_copies = ncopies};
  job.bytes[KILN_GRAPH_ARENA] = p->arena_bytes;
  job.bytes[KILN_GRAPH_CONSTANTS] = p->constant_bytes;
  job.bytes[KILN_GRAPH_INPUTS] = p->input_bytes;
  job.nodes = calloc(p->num_nodes ? p->num_nodes : 1, sizeof(*job.nodes));
  job.node_lens = calloc(p->num_nodes ? p->num_nodes : 1, sizeof(*job.node_lens));
  job.launches = calloc(total ? total : 1, sizeof(*job.launches));
  uint32_t *launch_node = calloc(total ? total : 1, sizeof(*launch_node));
  char **labels = calloc(p->num_nodes ? p->num_nodes : 1, sizeof(*labels));
  const kiln_garg_t **argv = calloc(16u + 1024u, sizeof(*argv));
  if (!st && (!job.nodes || !job.node_lens || !job.launches || !launch_node || !labels || !argv))
    st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t n = 0; !st && n < p->num_nodes; n++) {
    const kiln_gnode_t *nd = &p->nodes[n];
    char lab[600];
    if (nd->label)
      snprintf(lab, sizeof(lab), "%.*s (%.*s)", (int)nd->name_len, nd->name,
               (int)(nd->label_len < 300 ? nd->label_len : 300), nd->label);
    else
      snprintf(lab, sizeof(lab), "%.*s", (int)nd->name_len, nd->name);
    if (!(labels[n] = strdup(lab))) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    else {
      job.nodes[n] = labels[n];
      job.node_lens[n] = (uint32_t)strlen(labels[n]);
    }
  }
  /* launches: kernels, argument kinds, recipes, converted values */
  uint32_t launches = 0;
  for (uint32_t n = 0; !st && n < p->num_nodes; n++) {
    kiln_gnode_t *nd = &p->nodes[n];
    st = kiln_module_find(s, NULL, op->progs[nd->program].module, 2 * KILN_HASH_BYTES, &m);
    for (uint32_t j = 0; !st && j < nd->num_launches; j++) {
      kiln_glaunch_t *l = &nd->launches[j];
      uint32_t ki = 0;
      while (ki < m->art.num_kernels && strcmp(m->art.kernels[ki].name, l->kernel) != 0) ki++;
      if (ki == m->art.num_kernels) {
        st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "node %.*s: program %u has no kernel '%s'", (int)nd->name_len,
                         nd->name, nd->program, l->kernel);
        break;
      }
      const kiln_kernel_t *k = &m->art.kernels[ki];
      kiln_garg_t extra[16];
      uint32_t nextra = 0;
      if (p->programs[nd->program].kind == KILN_GPROG_TE) st = apply_recipe(p, nd, l, k, extra, &nextra);
      if (st) break;
      uint32_t na = l->num_args + nextra;
      if (na != k->num_args) {
        st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "node %.*s: kernel %s takes %u arguments; the launch passes %u",
                         (int)nd->name_len, nd->name, l->kernel, k->num_args, na);
        break;
      }
      if (na > 16u + 1024u) {
        st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "node %.*s: a launch passes at most 1040 arguments",
                         (int)nd->name_len, nd->name);
        break;
      }
      for (uint32_t a = 0; !st && a < l->num_args; a++) {
        bool ptr = k->args[a].type == KILN_ARG_PTR, name = l->args[a].kind == KILN_GARG_NAME;
        if (ptr != name)
          st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "node %.*s: kernel %s argument %u (\"%s\") is %s: pass %s",
                           (int)nd->name_len, nd->name, l->kernel, a, k->args[a].name,
                           ptr ? "a pointer" : kiln_arg_type_name(k->args[a].type),
                           ptr ? "{\"value\": name}" : "a number");
        argv[a] = &l->args[a];
      }
      for (uint32_t a = 0; a < nextra; a++) argv[l->num_args + a] = &extra[a];
      if (st) break;
      bool empty = false;
      for (int d = 0; d < 3; d++) empty |= l->grid[d] == 0 || l->block[d] == 0;
      if (empty) continue;
      kiln_graph_job_launch_t *jl = &job.launches[launches];
      jl->args = calloc(na ? na : 1, sizeof(*jl->args));
      if (!jl->args) {
        st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
        break;
      }
      job.num_launches = ++launches;
      launch_node[launches - 1] = n;
      memcpy(jl->module, m->key, KILN_HASH_BYTES);
      jl->kernel = ki;
      jl->node = n;
      memcpy(jl->grid, l->grid, sizeof(jl->grid));
      memcpy(jl->block, l->block, sizeof(jl->block));
      jl->shared = l->shared;
      jl->nargs = na;
      st = job_args(p, nd, k, argv, na, jl->args);
    }
    kiln_module_release(m);
    m = NULL;
  }
  free(argv);
  kiln_buf_t params;
  kiln_buf_init(&params);
  if (!st) {
    kiln_packer_t pk;
    kiln_packer_init(&pk, &params);
    kiln_graph_load_job_encode(&pk.pk, &job);
    st = kiln_packer_status(&pk);
  }
  load_job_free(&job);
  free(copies);
  if (!st) st = kiln_memory_reserve(s, op->device, op->tenant, charged);
  graph_t *g = st ? NULL : calloc(1, sizeof(*g));
  if (!st && !g) {
    kiln_memory_release(op->device, op->tenant, charged);
    st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (st) {
    for (uint32_t n = 0; labels && n < p->num_nodes; n++) free(labels[n]);
    free(labels);
    free(launch_node);
    kiln_buf_deinit(&params);
    create_fail(op, st);
    return;
  }
  /* from here the graph owns labels, launch_node and the charge: graph_unref frees them */
  g->labels = labels;
  g->launch_node = launch_node;
  g->nodes = p->num_nodes;
  g->charged = charged;
  g->device = op->device;
  g->tenant = op->tenant;
  g->refs = 1;
  /* the constants, in one block of shared memory */
  int fd = -1;
  void *map = NULL;
  uint64_t csize = p->constant_bytes ? p->constant_bytes : 1;
  st = kiln_shm_create("kiln-graph", csize, &fd, &map);
  if (!st) {
    g->inputs = calloc(p->num_inputs ? p->num_inputs : 1, sizeof(*g->inputs));
    g->outputs = calloc(p->num_outputs, sizeof(*g->outputs));
    if (!g->inputs || !g->outputs) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (st) {
    if (map) kiln_shm_unmap(map, csize);
    if (fd >= 0) close(fd);
    kiln_memory_release(op->device, op->tenant, charged);
    graph_unref(g);
    kiln_buf_deinit(&params);
    create_fail(op, st);
    return;
  }
  for (uint32_t i = 0; i < p->num_names; i++)
    if (p->names[i].kind == KILN_GCONST && p->names[i].data && p->names[i].desc.nbytes)
      memcpy((uint8_t *)map + p->names[i].offset, p->names[i].data, p->names[i].desc.nbytes);
  kiln_shm_unmap(map, csize);
  memcpy(g->id, op->id, KILN_HASH_BYTES);
  kiln_hex(g->id, KILN_HASH_BYTES, g->hex);
  snprintf(g->name, sizeof(g->name), "%s", p->name);
  g->slot = slot;
  g->handle = job.handle;
  g->num_inputs = p->num_inputs;
  for (uint32_t i = 0; i < p->num_inputs; i++) {
    snprintf(g->inputs[i].name, sizeof(g->inputs[i].name), "%.*s", (int)p->names[i].len, p->names[i].s);
    g->inputs[i].desc = p->names[i].desc;
    g->inputs[i].offset = p->names[i].offset;
  }
  g->num_outputs = p->num_outputs;
  for (uint32_t i = 0; i < p->num_outputs; i++) {
    const kiln_gname_t *n = &p->names[p->outputs[i]];
    snprintf(g->outputs[i].name, sizeof(g->outputs[i].name), "%.*s", (int)n->len, n->s);
    g->outputs[i].desc = n->desc;
    g->outputs[i].region = kiln_gname_region(p, p->outputs[i]);
    g->outputs[i].offset = n->offset;
  }
  g->input_bytes = p->input_bytes;
  g->constant_bytes = p->constant_bytes;
  g->arena_bytes = p->arena_bytes;
  g->launches = launches;
  g->programs = p->num_programs;
  g->compiled = (uint32_t)op->compiled;
  g->compile_ms = op->compile_ms;
  g->generation = kiln_worker_generation(slot->worker);
  op->graph = g;
  st = kiln_worker_call_budget(slot->worker, kiln_job_name(KILN_JOB_GRAPH_LOAD), &params, &fd, 1, 0, on_loaded, op);
  kiln_buf_deinit(&params);
  if (st) {
    op->graph = NULL;
    kiln_memory_release(op->device, op->tenant, charged);
    graph_unref(g);
    create_fail(op, st);
  }
}

static void on_program(void *ctx, const kiln_module_t *m, bool cached, double ms, kiln_status_t st);

typedef struct prog_ctx {
  create_op_t *op;
  uint32_t index;
} prog_ctx_t;

static void on_program(void *ctx, const kiln_module_t *m, bool cached, double ms, kiln_status_t st) {
  prog_ctx_t *pc = ctx;
  create_op_t *op = pc->op;
  prog_state_t *ps = &op->progs[pc->index];
  free(pc);
  if (st) {
    ps->code = kiln_status_code(st);
    ps->error = strdup(kiln_status_message(st));
    if (!ps->error) ps->error = NULL;
    if (!ps->error) ps->code = KILN_E_RESOURCE_EXHAUSTED;
    if (!ps->error) ps->error = strdup("out of memory");
    kiln_status_free(st);
  } else {
    memcpy(ps->module, m->hex, sizeof(ps->module));
    ps->cached = cached;
    ps->ms = ms;
    if (!cached) {
      op->compiled++;
      op->compile_ms += ms;
    }
  }
  if (--op->remaining == 0) create_finish(op);
}

/* The graph id (docs/graph.md §3). */
static void graph_id(kiln_server_t *s, const kiln_device_entry_t *d, const kiln_buf_t *options,
                     const uint8_t *payload, size_t len, bool nonce, uint8_t out[KILN_HASH_BYTES]) {
  kiln_hasher_t h;
  kiln_hasher_init(&h);
  static const char tag[] = "kiln-graph-1";
  kiln_hasher_update(&h, tag, sizeof(tag)); /* with its NUL */
  kiln_hasher_update(&h, d->arch, strlen(d->arch));
  kiln_hasher_update(&h, "", 1);
  static const uint8_t empty_map = 0x80;
  if (options->len) kiln_hasher_update(&h, options->data, options->len);
  else kiln_hasher_update(&h, &empty_map, 1);
  const char *ident = kiln_compile_identity(s);
  kiln_hasher_update(&h, ident, strlen(ident));
  kiln_hasher_update(&h, payload, len);
  if (nonce) {
    /* constants given by id: kilnd does not know their bytes, so no two such graphs are
     * taken for one (each graph_create copies the tensors afresh) */
    uint64_t r[2] = {kiln_random_id(), kiln_random_id()};
    kiln_hasher_update(&h, r, sizeof(r));
  }
  kiln_hasher_final(&h, out);
}

/* Walks the payload's headers with the frame reader: truncated bytes, trailing bytes, nesting
 * deeper than 16, strings over 1 MiB and containers over 2^20 entries are refused before
 * anything is unpacked. */
static kiln_status_t check_framing(const uint8_t *payload, size_t len) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  lim.max_message = 2 * (uint64_t)len + 64; /* past the end is "truncated", not "too large" */
  lim.max_depth = 16;
  lim.max_items = 1u << 20;
  lim.max_str = 1u << 20;
  kiln_reader_t r;
  kiln_reader_init(&r, &lim, len ? len : 1);
  size_t cap;
  void *space = kiln_reader_space(&r, &cap);
  kiln_status_t st = KILN_OK;
  if (!space || cap < len) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  if (!st) {
    memcpy(space, payload, len);
    kiln_reader_commit(&r, len);
    const uint8_t *msg;
    size_t mlen;
    kiln_frame_result_t fr = kiln_reader_next(&r, &msg, &mlen);
    if (fr == KILN_FRAME_ERROR)
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "graph: not a valid MessagePack payload (%s)",
                       kiln_status_message(r.error));
    else if (fr != KILN_FRAME_MESSAGE)
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "graph: the payload is truncated");
    else if (mlen != len)
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "graph: %zu bytes follow the payload's map", len - mlen);
  }
  kiln_reader_deinit(&r);
  return st;
}

kiln_status_t kiln_method_graph_create(kiln_call_t *call) {
  static const char *const fields[] = {"device", "graph", "options", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "graph_create", fields));
  kiln_server_t *s = call->server;
  gstate_t *gs = gstate(s);
  if (!gs) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  const char *dev = NULL;
  uint32_t dlen = 0;
  const msgpack_object *dobj = kiln_params_find(call->params, "device");
  if (dobj) {
    if (dobj->type != MSGPACK_OBJECT_STR) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "'device' must be a string");
    dev = dobj->via.str.ptr;
    dlen = dobj->via.str.size;
  }
  kiln_device_entry_t *d = kiln_device_find(s, dev, dlen);
  if (!d)
    return KILN_STATUS(KILN_E_NOT_FOUND, "no device '%.*s' on this server; `devices` lists them",
                       (int)(dlen < 32 ? dlen : 32), dev);
  kiln_tenant_t *t = call->conn->tenant;
  KILN_RETURN_IF_ERROR(kiln_device_permit(d, t));
  const msgpack_object *go = kiln_params_find(call->params, "graph");
  if (!go || go->type != MSGPACK_OBJECT_BIN)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "'graph' must be a bin holding the MessagePack graph map");
  const msgpack_object *opts = NULL;
  KILN_RETURN_IF_ERROR(kiln_params_map(call->params, "options", false, &opts));
  KILN_RETURN_IF_ERROR(check_framing((const uint8_t *)go->via.bin.ptr, go->via.bin.size));
  graphs_reap(gs);

  create_op_t *op = calloc(1, sizeof(*op));
  if (!op) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  msgpack_zone_init(&op->zone, 64 * 1024);
  kiln_buf_init(&op->options);
  op->server = s;
  op->tenant = t;
  op->device = d;
  op->payload_len = go->via.bin.size;
  op->payload = malloc(op->payload_len ? op->payload_len : 1);
  kiln_status_t st = op->payload ? KILN_OK : KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  if (!st) {
    memcpy(op->payload, go->via.bin.ptr, op->payload_len);
    if (opts) {
      kiln_packer_t pk;
      kiln_packer_init(&pk, &op->options);
      msgpack_pack_object(&pk.pk, *opts);
      st = kiln_packer_status(&pk);
    }
  }
  size_t off = 0;
  if (!st && msgpack_unpack((const char *)op->payload, op->payload_len, &off, &op->zone, &op->root) !=
                 MSGPACK_UNPACK_SUCCESS)
    st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "graph: not a valid MessagePack payload");
  if (!st) st = kiln_gplan_decode(&op->root, &op->plan);
  for (uint32_t i = 0; !st && i < op->plan.num_names; i++) {
    const kiln_gname_t *n = &op->plan.names[i];
    if (n->kind != KILN_GCONST || !n->tensor) continue;
    char nm[256];
    snprintf(nm, sizeof(nm), "%.*s", (int)n->len, n->s);
    st = tensor_for(call, n->tensor, d, &n->desc, "constant", nm);
  }
  if (st) {
    create_free(op);
    return st;
  }
  graph_id(s, d, &op->options, op->payload, op->payload_len, op->plan.num_id_constants > 0, op->id);
  graph_t *g = kiln_map_get(&gs->table, table_key(t, op->id));
  if (g && g->tenant == t && memcmp(g->id, op->id, KILN_HASH_BYTES) == 0 && !lost(g)) {
    create_free(op);
    pack_create_reply(call->pk, g, true);
    return KILN_OK;
  }
  if (g && lost(g)) graph_drop(gs, g);
  uint32_t np = op->plan.num_programs;
  op->progs = calloc(np ? np : 1, sizeof(*op->progs));
  if (!op->progs) {
    create_free(op);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  op->req = call->req;
  call->async = true;
  op->remaining = np + 1; /* one extra, dropped below: nothing finishes inside this loop */
  kiln_buf_t item;
  kiln_buf_init(&item);
  for (uint32_t i = 0; i < np; i++) {
    const kiln_gprogram_t *pr = &op->plan.programs[i];
    kiln_status_t pst = KILN_OK;
    if (pr->kind == KILN_GPROG_MODULE) {
      const msgpack_object *mo = kiln_params_find(pr->item, "module");
      kiln_module_t *m;
      pst = kiln_module_find(s, t, mo->via.str.ptr, mo->via.str.size, &m);
      if (!pst) memcpy(op->progs[i].module, m->hex, sizeof(op->progs[i].module));
      if (!pst) kiln_module_release(m);
    } else {
      /* a compile_batch item: {"ir", "format", "target": the device, "options"?} */
      item.len = 0;
      kiln_packer_t pk;
      kiln_packer_init(&pk, &item);
      kiln_fields_t it;
      kiln_fields_begin(&it, &pk.pk);
      kiln_fields_key(&it, "ir");
      msgpack_pack_object(&pk.pk, *kiln_params_find(pr->item, "ir"));
      kiln_fields_str(&it, "format", pr->kind == KILN_GPROG_TE ? "te" : "llvm");
      char target[40];
      snprintf(target, sizeof(target), "%s", d->id);
      kiln_fields_str(&it, "target", target);
      if (opts) {
        kiln_fields_key(&it, "options");
        msgpack_pack_object(&pk.pk, *opts);
      }
      kiln_fields_end(&it);
      pst = kiln_packer_status(&pk);
      msgpack_zone z;
      msgpack_zone_init(&z, 1024);
      msgpack_object io;
      size_t ioff = 0;
      if (!pst && msgpack_unpack((const char *)item.data, item.len, &ioff, &z, &io) != MSGPACK_UNPACK_SUCCESS)
        pst = KILN_STATUS(KILN_E_INTERNAL, "graph: could not repack program %u", i);
      prog_ctx_t *pc = pst ? NULL : malloc(sizeof(*pc));
      if (!pst && !pc) pst = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
      if (!pst) {
        *pc = (prog_ctx_t){op, i};
        char what[32];
        snprintf(what, sizeof(what), "programs[%u]", i);
        pst = kiln_compile_submit(s, t, &io, what, on_program, pc);
        if (pst) free(pc);
        else {
          msgpack_zone_destroy(&z);
          continue; /* on_program counts it */
        }
      }
      msgpack_zone_destroy(&z);
    }
    if (pst) {
      op->progs[i].code = kiln_status_code(pst);
      op->progs[i].error = strdup(kiln_status_message(pst));
      kiln_status_free(pst);
      if (!op->progs[i].error) op->progs[i].error = strdup("?");
    }
    op->remaining--;
  }
  kiln_buf_deinit(&item);
  if (--op->remaining == 0) create_finish(op);
  return KILN_OK;
}

/* --- graph_run, graph_time ------------------------------------------------------------------ */

/* A run's shared memory: KILN_GRAPH_RUN_HEADER bytes where the worker notes the launch it
 * runs (a fault that kills it is reported with that launch's node), the input block, then
 * the outputs. */
#define RUN_HEADER KILN_GRAPH_RUN_HEADER

typedef struct run_op {
  kiln_server_t *server;
  kiln_req_t *req;
  graph_t *graph;
  struct run_op *prev, *next; /* in gstate's runs while the worker has it */
  bool timed, queued;
  int fd;
  uint8_t *map;
  uint64_t size;
  uint64_t outs_at;       /* inline outputs' bytes start here in the shared memory */
  uint32_t *picked;       /* output indexes to return, in order */
  uint32_t npicked;
  uint64_t *kept;         /* keep: the new tensors' ids, one per picked output */
  uint64_t kept_bytes;    /* charged to the tenant until the tensors hold it */
  bool kept_charged;
  uint64_t budget_ms;     /* the watchdog's: one run's deadline */
  uint64_t seq;           /* its cell in the slot's cancel page */
  uint32_t generation;    /* of the worker it was sent to */
  kiln_buf_t params;      /* for the worker */
} run_op_t;

static void runs_remove(gstate_t *gs, run_op_t *op) {
  if (!op->queued) return;
  if (op->prev) op->prev->next = op->next;
  else gs->runs = op->next;
  if (op->next) op->next->prev = op->prev;
  op->prev = op->next = NULL;
  op->queued = false;
}

static void run_free(run_op_t *op) {
  runs_remove(gstate(op->server), op);
  if (op->map) kiln_shm_unmap(op->map, op->size);
  if (op->fd >= 0) close(op->fd);
  kiln_buf_deinit(&op->params);
  if (op->kept_charged) { /* charged, never made into tensors */
    kiln_memory_release(op->graph->device, op->graph->tenant, op->kept_bytes);
    op->graph->tenant->tensors -= op->npicked;
  }
  free(op->kept);
  free(op->picked);
  if (op->graph) graph_unref(op->graph);
  free(op);
}

void kiln_graphs_conn_closed(kiln_server_t *s, void *conn) {
  gstate_t *gs = s->graphs;
  for (run_op_t *op = gs ? gs->runs : NULL; op; op = op->next) {
    kiln_dslot_t *sl = op->graph->slot;
    if (op->req->conn == conn && sl->cancel_page)
      /* relaxed is enough: the worker looks before each launch */
      __atomic_store_n(&sl->cancel_page[op->seq % KILN_CANCEL_CELLS], op->seq, __ATOMIC_RELAXED);
  }
}

/* Kept outputs whose reply did not reach the client: nobody else knows their ids. */
typedef struct kept_watch {
  kiln_server_t *server;
  kiln_conn_t *conn;
  uint32_t n;
  uint64_t ids[];
} kept_watch_t;

static void kept_sent(void *ctx) {
  kept_watch_t *w = ctx;
  for (uint32_t i = 0; w->conn->closing && i < w->n; i++) kiln_tensor_drop(w->server, w->ids[i]);
  free(w);
}

/* The kept outputs become tensors of the tenant (they hold their charge from here). One that
 * cannot (out of memory) is freed in the worker and the charge goes back. */
static kiln_status_t adopt_kept(run_op_t *op) {
  graph_t *g = op->graph;
  kiln_status_t first = KILN_OK;
  for (uint32_t i = 0; i < op->npicked; i++) {
    const kiln_tensor_desc_t *d = &g->outputs[op->picked[i]].desc;
    kiln_status_t st = kiln_tensor_adopt(op->server, g->slot, op->generation, op->kept[i], d);
    if (!st) { /* as alloc's: bound to the connection when it asked for session tensors */
      kiln_tensor_t *t = kiln_map_get(&op->server->tensors, op->kept[i]);
      kiln_conn_t *c = op->req->conn;
      t->session = c->session_tensors ? c->id : 0;
      memcpy(t->client, c->client, sizeof(t->client));
    }
    if (st) {
      kiln_buf_t params;
      kiln_buf_init(&params);
      kiln_packer_t pk;
      kiln_packer_init(&pk, &params);
      kiln_tensor_job_encode(&pk.pk, &(kiln_tensor_job_t){.kind = KILN_JOB_FREE, .handle = op->kept[i]});
      kiln_status_t fs = kiln_packer_status(&pk);
      if (!fs) fs = kiln_worker_call(g->slot->worker, kiln_job_name(KILN_JOB_FREE), &params, NULL, 0, ignore_reply, NULL);
      kiln_status_free(fs);
      kiln_buf_deinit(&params);
      kiln_memory_release(g->device, g->tenant, d->nbytes);
      g->tenant->tensors--;
      if (!first) first = st;
      else kiln_status_free(st);
    }
  }
  op->kept_charged = false; /* op->kept stays until run_free: a failed reply drops them */
  return first;
}

static void on_run_reply(void *ctx, kiln_status_t st, const msgpack_object *result) {
  run_op_t *op = ctx;
  kiln_server_t *s = op->server;
  gstate_t *gs = gstate(s);
  graph_t *g = op->graph;
  runs_remove(gs, op);
  kiln_device_run_done(s, g->device);
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &b);
  kept_watch_t *watch = NULL;
  bool adopted = false; /* the kept outputs are the tenant's tensors now */
  if (!st) {
    kiln_rpc_pack_result_head(&pk.pk, op->req->msgid);
    kiln_launch_reply_t lr = {0};
    if (op->timed) {
      st = kiln_pack_time_result(&pk.pk, result);
      kiln_time_reply_t tr; /* the device's busy time, as launch.c counts a `time` */
      kiln_status_t d = st ? NULL : kiln_time_reply_decode(result, &tr);
      if (!st && !d) kiln_metrics_device_seconds(g->device, g->tenant, tr.mean * tr.number * tr.repeat);
      if (!st && !d) kiln_time_reply_deinit(&tr);
      kiln_status_free(d);
    } else if (!(st = kiln_launch_reply_decode(result, &lr))) {
      double elapsed = lr.elapsed;
      kiln_metrics_device_seconds(g->device, g->tenant, elapsed);
      kiln_fields_t r, out;
      kiln_fields_begin(&r, &pk.pk);
      kiln_fields_key(&r, "outputs");
      msgpack_pack_array(&pk.pk, op->npicked);
      uint64_t at = op->outs_at;
      for (uint32_t i = 0; i < op->npicked; i++) {
        const gout_t *o = &g->outputs[op->picked[i]];
        if (op->kept) {
          kiln_fields_begin(&out, &pk.pk);
          kiln_fields_u64(&out, "id", op->kept[i]);
          kiln_fields_str(&out, "dtype", kiln_dtype_name(o->desc.dtype));
          kiln_fields_key(&out, "shape");
          msgpack_pack_array(&pk.pk, o->desc.ndim);
          for (uint32_t k = 0; k < o->desc.ndim; k++) msgpack_pack_uint64(&pk.pk, o->desc.shape[k]);
          kiln_fields_end(&out);
          continue;
        }
        kiln_tensor_pack_head(&pk.pk, &o->desc);
        if (!st) st = kiln_buf_append(&b, op->map + at, o->desc.nbytes);
        at = (at + o->desc.nbytes + 255) & ~255ull;
      }
      kiln_fields_f64(&r, "elapsed", elapsed);
      kiln_fields_end(&r);
      if (op->kept) {
        kiln_status_t ast = adopt_kept(op);
        if (!st) st = ast;
        else kiln_status_free(ast);
        adopted = true;
      }
    }
    if (!st) st = kiln_packer_status(&pk);
    if (adopted && !st) { /* watched until the reply is written (kept_sent) */
      watch = malloc(sizeof(*watch) + op->npicked * sizeof(uint64_t));
      if (!watch) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory keeping the outputs");
      else {
        *watch = (kept_watch_t){.server = s, .conn = op->req->conn, .n = op->npicked};
        memcpy(watch->ids, op->kept, op->npicked * sizeof(uint64_t));
      }
    }
    if (adopted && st) /* made, but the client hears an error: they go */
      for (uint32_t i = 0; i < op->npicked; i++) kiln_tensor_drop(s, op->kept[i]);
  }
  if (st) {
    gs->runs_failed++;
    kiln_buf_deinit(&b);
    kiln_code_t code = kiln_status_code(st);
    uint32_t at = __atomic_load_n((uint32_t *)op->map, __ATOMIC_RELAXED);
    if ((code == KILN_E_DEVICE_FAULT || code == KILN_E_TIMEOUT) && at >= 1 && at <= g->launches &&
        strncmp(kiln_status_message(st), "node ", 5) != 0) {
      kiln_status_t e = KILN_STATUS(code, "node %s: %s", g->labels[g->launch_node[at - 1]], kiln_status_message(st));
      kiln_status_free(st);
      st = e;
    }
    kiln_req_fail(op->req, st);
  } else {
    gs->runs_ok++;
    kiln_req_reply(op->req, &b, NULL, 0, watch ? kept_sent : NULL, watch);
  }
  run_free(op);
}

static void run_go(void *ctx, kiln_status_t st) {
  run_op_t *op = ctx;
  graph_t *g = op->graph;
  kiln_server_t *s = op->server;
  if (!st && g->gone) st = KILN_STATUS(KILN_E_NOT_FOUND, "graph %.16s was freed before it ran", g->hex);
  if (!st && lost(g))
    st = KILN_STATUS(KILN_E_NOT_FOUND, "graph %.16s was lost: its device worker ended", g->hex);
  if (!st) st = kiln_slot_ensure_cancel_page(g->slot);
  int fd = op->fd;
  if (!st) {
    op->fd = -1; /* kiln_worker_call closes it */
    op->generation = kiln_worker_generation(g->slot->worker);
    /* The watchdog's budget bounds one run, as for launch and time: a kernel that never
     * returns ends the worker. graph_time's worker says "alive" between its runs. */
    st = kiln_worker_call_budget(g->slot->worker, kiln_job_name(op->timed ? KILN_JOB_GRAPH_TIME : KILN_JOB_GRAPH_RUN),
                                 &op->params, &fd, 1, op->budget_ms, on_run_reply, op);
  }
  if (!st) {
    gstate_t *gs = gstate(s);
    op->next = gs->runs;
    if (gs->runs) gs->runs->prev = op;
    gs->runs = op;
    op->queued = true;
    return;
  }
  gstate(s)->runs_failed++;
  kiln_device_run_done(s, g->device);
  kiln_req_fail(op->req, st);
  run_free(op);
}

/* The inputs into the run's shared memory (inline) or the job's copies (by id). */
static kiln_status_t run_inputs(kiln_call_t *call, const graph_t *g, const msgpack_object *inputs, uint8_t *map,
                                kiln_graph_copy_t *copies, uint32_t *ncopies) {
  uint32_t given = inputs ? inputs->via.map.size : 0;
  if (given != g->num_inputs)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "graph %.16s takes %u inputs; %u were given", g->hex, g->num_inputs,
                       given);
  *ncopies = 0;
  for (uint32_t i = 0; i < g->num_inputs; i++) {
    const gout_t *in = &g->inputs[i];
    const msgpack_object *v = kiln_params_find(inputs, in->name);
    if (!v) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "input '%s' is missing", in->name);
    if (v->type == MSGPACK_OBJECT_MAP && kiln_params_find(v, "tensor")) {
      static const char *const f_id[] = {"tensor", NULL};
      uint64_t id = 0;
      kiln_status_t st = kiln_params_check(v, "input", f_id);
      if (!st) st = kiln_params_u64(v, "tensor", true, &id);
      if (st) {
        kiln_status_t e = KILN_STATUS(kiln_status_code(st), "input '%s': %s", in->name, kiln_status_message(st));
        kiln_status_free(st);
        return e;
      }
      KILN_RETURN_IF_ERROR(tensor_for(call, id, g->device, &in->desc, "input", in->name));
      copies[(*ncopies)++] = (kiln_graph_copy_t){.handle = id, .offset = in->offset, .bytes = in->desc.nbytes};
      continue;
    }
    kiln_tensor_desc_t dsc;
    const uint8_t *data;
    kiln_status_t st = v->type == MSGPACK_OBJECT_MAP ? kiln_tensor_parse(v, &dsc, &data)
                                                     : KILN_STATUS(KILN_E_INVALID_ARGUMENT, "must be a tensor map");
    if (st) {
      kiln_status_t e = KILN_STATUS(kiln_status_code(st), "input '%s': %s", in->name, kiln_status_message(st));
      kiln_status_free(st);
      return e;
    }
    if (!same_desc(&dsc, &in->desc))
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "input '%s' must be %s with the graph's declared shape (%u dimensions)", in->name,
                         kiln_dtype_name(in->desc.dtype), in->desc.ndim);
    if (dsc.nbytes) memcpy(map + RUN_HEADER + in->offset, data, dsc.nbytes); /* data may be NULL at 0 */
  }
  return KILN_OK;
}

static kiln_status_t run_start(kiln_call_t *call, bool timed) {
  static const char *const run_fields[] = {"graph", "inputs", "outputs", "keep", "timeout_ms", NULL};
  static const char *const time_fields[] = {"graph", "inputs", "timeout_ms", "number", "repeat",
                                            "min_repeat_ms", "warmup", "flush", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, timed ? "graph_time" : "graph_run",
                                         timed ? time_fields : run_fields));
  graph_t *g;
  KILN_RETURN_IF_ERROR(find_graph(call, &g));
  bool keep = false;
  KILN_RETURN_IF_ERROR(kiln_params_bool(call->params, "keep", false, &keep));
  uint64_t timeout_ms = 0;
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "timeout_ms", false, &timeout_ms));
  if (!timeout_ms) timeout_ms = (uint64_t)(call->server->cfg.launch_timeout_s * 1000.0);
  const msgpack_object *inputs = NULL;
  KILN_RETURN_IF_ERROR(kiln_params_map(call->params, "inputs", g->num_inputs > 0, &inputs));
  /* which outputs, in which order */
  uint32_t *picked = NULL, npicked = g->num_outputs;
  const msgpack_object_array *outs = NULL;
  KILN_RETURN_IF_ERROR(kiln_params_array(call->params, "outputs", false, &outs));
  if (outs) {
    if (outs->size == 0 || outs->size > 4096)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "'outputs' names 1 to 4096 graph outputs");
    npicked = outs->size;
  }
  picked = calloc(npicked, sizeof(*picked));
  if (!picked) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < npicked; i++) {
    if (!outs) {
      picked[i] = i;
      continue;
    }
    const msgpack_object *o = &outs->ptr[i];
    uint32_t k = 0;
    for (; o->type == MSGPACK_OBJECT_STR && k < g->num_outputs; k++)
      if (strlen(g->outputs[k].name) == o->via.str.size && memcmp(g->outputs[k].name, o->via.str.ptr, o->via.str.size) == 0)
        break;
    if (o->type != MSGPACK_OBJECT_STR || k == g->num_outputs) {
      free(picked);
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "outputs[%u] is not an output of graph %.16s", i, g->hex);
    }
    picked[i] = k;
  }
  /* shared memory: the input block, then each inline output at a 256-byte boundary */
  uint64_t outs_at = (RUN_HEADER + g->input_bytes + 255) & ~255ull, size = outs_at;
  for (uint32_t i = 0; !timed && !keep && i < npicked; i++)
    size = (size + g->outputs[picked[i]].desc.nbytes + 255) & ~255ull;
  if (size == 0) size = 1;
  run_op_t *op = calloc(1, sizeof(*op));
  if (!op) {
    free(picked);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  op->fd = -1;
  op->picked = picked;
  op->npicked = npicked;
  op->outs_at = outs_at;
  op->timed = timed;
  op->budget_ms = timeout_ms;
  op->server = call->server;
  op->graph = g;
  g->refs++;
  kiln_buf_init(&op->params);
  kiln_graph_copy_t *copies = calloc(g->num_inputs ? g->num_inputs : 1, sizeof(*copies));
  uint32_t ncopies = 0;
  kiln_status_t st = copies ? KILN_OK : KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  if (!st) st = kiln_shm_create("kiln-graph-run", size, &op->fd, (void **)&op->map);
  if (!st) op->size = size;
  if (!st) st = run_inputs(call, g, inputs, op->map, copies, &ncopies);
  if (!st && keep) {
    /* each output into a new tensor of the tenant: charged now, as alloc does */
    kiln_tenant_t *t = g->tenant;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < npicked; i++) bytes += g->outputs[picked[i]].desc.nbytes;
    op->kept = calloc(npicked, sizeof(*op->kept));
    if (!op->kept) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    if (!st) st = kiln_quota_check(t, "tensors", t->tensors, npicked, t->quotas.tensors);
    if (!st) st = kiln_memory_reserve(call->server, g->device, t, bytes);
    if (!st) {
      t->tensors += npicked;
      op->kept_bytes = bytes;
      op->kept_charged = true;
      for (uint32_t i = 0; i < npicked; i++) op->kept[i] = kiln_random_id();
    } else {
      free(op->kept);
      op->kept = NULL;
    }
  }
  kiln_graph_job_t job = {.kind = timed ? KILN_JOB_GRAPH_TIME : KILN_JOB_GRAPH_RUN, .handle = g->handle,
                          .size = size, .deadline_ms = timeout_ms, .number = 1, .repeat = 1, .warmup = 1,
                          .inputs = copies, .num_inputs = ncopies};
  if (!st && timed) {
    static const char *const tf[] = {"number", "repeat", "min_repeat_ms", "warmup"};
    uint32_t *dst[] = {&job.number, &job.repeat, &job.min_repeat_ms, &job.warmup};
    for (size_t i = 0; !st && i < 4; i++) {
      uint64_t v = *dst[i];
      st = kiln_params_u64(call->params, tf[i], false, &v);
      if (!st && (v > UINT32_MAX || (i < 2 && v == 0)))
        st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s must be %s 2^32", tf[i], i < 2 ? "1 to below" : "below");
      *dst[i] = (uint32_t)v;
    }
    if (!st) st = kiln_params_bool(call->params, "flush", false, &job.flush);
  }
  kiln_graph_output_t *outputs = NULL;
  if (!st && !timed) {
    outputs = calloc(npicked, sizeof(*outputs));
    if (!outputs) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    uint64_t at = outs_at;
    for (uint32_t i = 0; !st && i < npicked; i++) {
      const gout_t *o = &g->outputs[picked[i]];
      outputs[i] = (kiln_graph_output_t){.block = o->region, .offset = o->offset, .bytes = o->desc.nbytes,
                                         .at = op->kept ? 0 : at, .keep = op->kept ? op->kept[i] : 0};
      if (!op->kept) at = (at + o->desc.nbytes + 255) & ~255ull;
    }
    job.outputs = outputs;
    job.num_outputs = npicked;
  }
  kiln_dslot_t *slot = g->slot;
  if (!st) {
    op->seq = ++slot->cancel_seq;
    job.cancel = op->seq;
    kiln_packer_t pk;
    kiln_packer_init(&pk, &op->params);
    kiln_graph_job_encode(&pk.pk, &job);
    st = kiln_packer_status(&pk);
  }
  free(outputs);
  free(copies);
  if (st) {
    run_free(op);
    return st;
  }
  op->req = call->req;
  call->async = true;
  bool now = false;
  st = kiln_device_gate(call->server, g->device, g->tenant, call->conn, true, timeout_ms, run_go, op, &now);
  if (st) {
    kiln_req_fail(op->req, st);
    run_free(op);
    return KILN_OK;
  }
  if (now) run_go(op, KILN_OK);
  return KILN_OK;
}

kiln_status_t kiln_method_graph_run(kiln_call_t *call) { return run_start(call, false); }
kiln_status_t kiln_method_graph_time(kiln_call_t *call) { return run_start(call, true); }

kiln_status_t kiln_method_graph_free(kiln_call_t *call) {
  static const char *const fields[] = {"graph", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "graph_free", fields));
  graph_t *g;
  KILN_RETURN_IF_ERROR(find_graph(call, &g));
  graph_drop(gstate(call->server), g);
  msgpack_pack_nil(call->pk);
  return KILN_OK;
}

/* --- stats and metrics ------------------------------------------------------------------------ */

void kiln_graphs_counts(kiln_server_t *s, const kiln_tenant_t *t, uint64_t *out_live, uint64_t *out_bytes,
                        uint64_t *out_runs_ok, uint64_t *out_runs_failed) {
  gstate_t *gs = gstate(s);
  *out_live = *out_bytes = *out_runs_ok = *out_runs_failed = 0;
  if (!gs) return;
  graphs_reap(gs);
  if (!t) {
    *out_live = gs->live;
    *out_bytes = gs->bytes;
    *out_runs_ok = gs->runs_ok;
    *out_runs_failed = gs->runs_failed;
    return;
  }
  size_t it = 0;
  void *v;
  while (kiln_map_next(&gs->table, &it, NULL, &v)) {
    const graph_t *g = v;
    if (g->tenant != t) continue;
    (*out_live)++;
    *out_bytes += g->constant_bytes + g->arena_bytes;
  }
}

void kiln_graphs_shutdown(kiln_server_t *s) {
  gstate_t *gs = s->graphs;
  if (!gs) return;
  size_t it = 0;
  void *v;
  while (kiln_map_next(&gs->table, &it, NULL, &v)) graph_unref(v);
  kiln_map_deinit(&gs->table);
  free(gs);
  s->graphs = NULL;
}
