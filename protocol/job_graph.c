/* Graph jobs: fields in order (protocol/job_graph.h, docs/worker_jobs.md "Graphs"). */
#include "protocol/job_graph.h"

#include <stdlib.h>
#include <string.h>

static void pack_copies(msgpack_packer *pk, const kiln_graph_copy_t *c, uint32_t n) {
  msgpack_pack_array(pk, n);
  for (uint32_t i = 0; i < n; i++) {
    msgpack_pack_array(pk, 3);
    msgpack_pack_uint64(pk, c[i].handle);
    msgpack_pack_uint64(pk, c[i].offset);
    msgpack_pack_uint64(pk, c[i].bytes);
  }
}

static kiln_status_t decode_copies(const msgpack_object *o, kiln_graph_copy_t **out, uint32_t *n) {
  const msgpack_object_array *a;
  KILN_RETURN_IF_ERROR(kiln_job_array(o, "copies", UINT32_MAX, &a));
  *out = calloc(a->size ? a->size : 1, sizeof(**out));
  if (!*out) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for a graph job");
  *n = a->size;
  for (uint32_t i = 0; i < a->size; i++) {
    const msgpack_object_array *c;
    KILN_RETURN_IF_ERROR(kiln_job_array(&a->ptr[i], "copy", 3, &c));
    KILN_RETURN_IF_ERROR(kiln_job_u64(&c->ptr[0], "copy handle", UINT64_MAX, &(*out)[i].handle));
    KILN_RETURN_IF_ERROR(kiln_job_u64(&c->ptr[1], "copy offset", UINT64_MAX, &(*out)[i].offset));
    KILN_RETURN_IF_ERROR(kiln_job_u64(&c->ptr[2], "copy bytes", UINT64_MAX, &(*out)[i].bytes));
  }
  return KILN_OK;
}

void kiln_graph_load_job_encode(msgpack_packer *pk, const kiln_graph_load_job_t *j) {
  kiln_job_pack_head(pk, 5, 1);
  msgpack_pack_uint64(pk, j->handle);
  msgpack_pack_array(pk, KILN_GRAPH_BLOCKS);
  for (int b = 0; b < KILN_GRAPH_BLOCKS; b++) msgpack_pack_uint64(pk, j->bytes[b]);
  msgpack_pack_array(pk, j->num_nodes);
  for (uint32_t i = 0; i < j->num_nodes; i++) {
    msgpack_pack_str(pk, j->node_lens[i]);
    msgpack_pack_str_body(pk, j->nodes[i], j->node_lens[i]);
  }
  msgpack_pack_array(pk, j->num_launches);
  for (uint32_t i = 0; i < j->num_launches; i++) {
    const kiln_graph_job_launch_t *l = &j->launches[i];
    msgpack_pack_array(pk, 7);
    kiln_job_pack_key(pk, l->module);
    msgpack_pack_uint32(pk, l->kernel);
    msgpack_pack_uint32(pk, l->node);
    kiln_job_pack_dims(pk, l->grid);
    kiln_job_pack_dims(pk, l->block);
    msgpack_pack_uint32(pk, l->shared);
    msgpack_pack_array(pk, l->nargs);
    for (uint32_t a = 0; a < l->nargs; a++) kiln_job_pack_arg(pk, l->args[a].tag, l->args[a].value);
  }
  pack_copies(pk, j->copies, j->num_copies);
}

void kiln_graph_load_job_deinit(kiln_graph_load_job_t *j) {
  for (uint32_t i = 0; j->nodes && i < j->num_nodes; i++) free((char *)j->nodes[i]);
  free(j->nodes);
  free(j->node_lens);
  for (uint32_t i = 0; j->launches && i < j->num_launches; i++) free(j->launches[i].args);
  free(j->launches);
  free(j->copies);
  memset(j, 0, sizeof(*j));
}

static kiln_status_t decode_launch(const msgpack_object *o, uint32_t num_nodes, kiln_graph_job_launch_t *l) {
  const msgpack_object_array *f, *args;
  KILN_RETURN_IF_ERROR(kiln_job_array(o, "launch", 7, &f));
  KILN_RETURN_IF_ERROR(kiln_job_key(&f->ptr[0], l->module));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f->ptr[1], "kernel", &l->kernel));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f->ptr[2], "node", &l->node));
  if (l->node >= num_nodes) return KILN_STATUS(KILN_E_INTERNAL, "worker job: launch of node %u of %u", l->node, num_nodes);
  KILN_RETURN_IF_ERROR(kiln_job_dims(&f->ptr[3], "grid", l->grid));
  KILN_RETURN_IF_ERROR(kiln_job_dims(&f->ptr[4], "block", l->block));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f->ptr[5], "shared", &l->shared));
  KILN_RETURN_IF_ERROR(kiln_job_array(&f->ptr[6], "args", UINT32_MAX, &args));
  l->args = calloc(args->size ? args->size : 1, sizeof(*l->args));
  if (!l->args) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for %u arguments", args->size);
  l->nargs = args->size;
  for (uint32_t i = 0; i < args->size; i++)
    KILN_RETURN_IF_ERROR(kiln_job_arg(&args->ptr[i], KILN_GRAPH_BLOCKS, &l->args[i].tag, &l->args[i].value));
  return KILN_OK;
}

static kiln_status_t decode_load(const msgpack_object *job, kiln_graph_load_job_t *j) {
  const msgpack_object *f;
  const msgpack_object_array *bytes, *nodes, *launches;
  KILN_RETURN_IF_ERROR(kiln_job_open(job, KILN_JOB_GRAPH_LOAD, 5, 1, &f));
  KILN_RETURN_IF_ERROR(kiln_job_u64(&f[0], "handle", UINT64_MAX, &j->handle));
  KILN_RETURN_IF_ERROR(kiln_job_array(&f[1], "bytes", KILN_GRAPH_BLOCKS, &bytes));
  for (int b = 0; b < KILN_GRAPH_BLOCKS; b++)
    KILN_RETURN_IF_ERROR(kiln_job_u64(&bytes->ptr[b], "bytes", UINT64_MAX, &j->bytes[b]));
  KILN_RETURN_IF_ERROR(kiln_job_array(&f[2], "nodes", UINT32_MAX, &nodes));
  KILN_RETURN_IF_ERROR(kiln_job_array(&f[3], "launches", UINT32_MAX, &launches));
  j->nodes = calloc(nodes->size ? nodes->size : 1, sizeof(*j->nodes));
  j->node_lens = calloc(nodes->size ? nodes->size : 1, sizeof(*j->node_lens));
  j->launches = calloc(launches->size ? launches->size : 1, sizeof(*j->launches));
  if (!j->nodes || !j->node_lens || !j->launches)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for a graph job");
  for (uint32_t i = 0; i < nodes->size; i++) {
    const msgpack_object *o = &nodes->ptr[i];
    if (o->type != MSGPACK_OBJECT_STR) return KILN_STATUS(KILN_E_INTERNAL, "worker job: node %u is not a string", i);
    char *s = malloc(o->via.str.size + 1);
    if (!s) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for a graph job");
    memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = 0;
    j->nodes[i] = s;
    j->node_lens[i] = o->via.str.size;
    j->num_nodes = i + 1;
  }
  for (uint32_t i = 0; i < launches->size; i++) {
    j->num_launches = i + 1;
    KILN_RETURN_IF_ERROR(decode_launch(&launches->ptr[i], j->num_nodes, &j->launches[i]));
  }
  return decode_copies(&f[4], &j->copies, &j->num_copies);
}

kiln_status_t kiln_graph_load_job_decode(const msgpack_object *job, kiln_graph_load_job_t *out) {
  memset(out, 0, sizeof(*out));
  kiln_status_t st = decode_load(job, out);
  if (st) kiln_graph_load_job_deinit(out);
  return st;
}

enum { RUN_FIELDS = 6, TIME_FIELDS = 10, FREE_FIELDS = 1 };

void kiln_graph_job_encode(msgpack_packer *pk, const kiln_graph_job_t *j) {
  if (j->kind == KILN_JOB_GRAPH_FREE) {
    kiln_job_pack_head(pk, FREE_FIELDS, 0);
    msgpack_pack_uint64(pk, j->handle);
    return;
  }
  bool timed = j->kind == KILN_JOB_GRAPH_TIME;
  kiln_job_pack_head(pk, timed ? TIME_FIELDS : RUN_FIELDS, 1);
  msgpack_pack_uint64(pk, j->handle);
  msgpack_pack_uint64(pk, j->size);
  msgpack_pack_uint64(pk, j->deadline_ms);
  msgpack_pack_uint64(pk, j->cancel);
  pack_copies(pk, j->inputs, j->num_inputs);
  if (!timed) {
    msgpack_pack_array(pk, j->num_outputs);
    for (uint32_t i = 0; i < j->num_outputs; i++) {
      const kiln_graph_output_t *o = &j->outputs[i];
      msgpack_pack_array(pk, 5);
      msgpack_pack_uint32(pk, o->block);
      msgpack_pack_uint64(pk, o->offset);
      msgpack_pack_uint64(pk, o->bytes);
      msgpack_pack_uint64(pk, o->at);
      msgpack_pack_uint64(pk, o->keep);
    }
    return;
  }
  msgpack_pack_uint32(pk, j->number);
  msgpack_pack_uint32(pk, j->repeat);
  msgpack_pack_uint32(pk, j->min_repeat_ms);
  msgpack_pack_uint32(pk, j->warmup);
  if (j->flush) msgpack_pack_true(pk);
  else msgpack_pack_false(pk);
}

void kiln_graph_job_deinit(kiln_graph_job_t *j) {
  free(j->inputs);
  j->inputs = NULL;
  j->num_inputs = 0;
  free(j->outputs);
  j->outputs = NULL;
  j->num_outputs = 0;
}

static kiln_status_t decode_job(kiln_job_kind_t kind, const msgpack_object *job, kiln_graph_job_t *j) {
  const msgpack_object *f;
  if (kind == KILN_JOB_GRAPH_FREE) {
    KILN_RETURN_IF_ERROR(kiln_job_open(job, kind, FREE_FIELDS, 0, &f));
    return kiln_job_u64(&f[0], "handle", UINT64_MAX, &j->handle);
  }
  bool timed = kind == KILN_JOB_GRAPH_TIME;
  if (kind != KILN_JOB_GRAPH_RUN && !timed)
    return KILN_STATUS(KILN_E_INTERNAL, "worker job: kind %d is not a graph job", (int)kind);
  KILN_RETURN_IF_ERROR(kiln_job_open(job, kind, timed ? TIME_FIELDS : RUN_FIELDS, 1, &f));
  KILN_RETURN_IF_ERROR(kiln_job_u64(&f[0], "handle", UINT64_MAX, &j->handle));
  KILN_RETURN_IF_ERROR(kiln_job_u64(&f[1], "size", UINT64_MAX, &j->size));
  KILN_RETURN_IF_ERROR(kiln_job_u64(&f[2], "deadline_ms", UINT64_MAX, &j->deadline_ms));
  KILN_RETURN_IF_ERROR(kiln_job_u64(&f[3], "cancel", UINT64_MAX, &j->cancel));
  KILN_RETURN_IF_ERROR(decode_copies(&f[4], &j->inputs, &j->num_inputs));
  if (!timed) {
    const msgpack_object_array *outs;
    KILN_RETURN_IF_ERROR(kiln_job_array(&f[5], "outputs", UINT32_MAX, &outs));
    j->outputs = calloc(outs->size ? outs->size : 1, sizeof(*j->outputs));
    if (!j->outputs) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for a graph job");
    j->num_outputs = outs->size;
    for (uint32_t i = 0; i < outs->size; i++) {
      const msgpack_object_array *o;
      uint64_t block;
      KILN_RETURN_IF_ERROR(kiln_job_array(&outs->ptr[i], "output", 5, &o));
      KILN_RETURN_IF_ERROR(kiln_job_u64(&o->ptr[0], "output block", KILN_GRAPH_BLOCKS - 1, &block));
      j->outputs[i].block = (uint32_t)block;
      KILN_RETURN_IF_ERROR(kiln_job_u64(&o->ptr[1], "output offset", UINT64_MAX, &j->outputs[i].offset));
      KILN_RETURN_IF_ERROR(kiln_job_u64(&o->ptr[2], "output bytes", UINT64_MAX, &j->outputs[i].bytes));
      KILN_RETURN_IF_ERROR(kiln_job_u64(&o->ptr[3], "output at", UINT64_MAX, &j->outputs[i].at));
      KILN_RETURN_IF_ERROR(kiln_job_u64(&o->ptr[4], "output keep", UINT64_MAX, &j->outputs[i].keep));
    }
    return KILN_OK;
  }
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[5], "number", &j->number));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[6], "repeat", &j->repeat));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[7], "min_repeat_ms", &j->min_repeat_ms));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[8], "warmup", &j->warmup));
  return kiln_job_bool(&f[9], "flush", &j->flush);
}

kiln_status_t kiln_graph_job_decode(kiln_job_kind_t kind, const msgpack_object *job, kiln_graph_job_t *out) {
  memset(out, 0, sizeof(*out));
  out->kind = kind;
  kiln_status_t st = decode_job(kind, job, out);
  if (st) kiln_graph_job_deinit(out);
  return st;
}
