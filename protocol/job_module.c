/* Module jobs and the replies of launch and time: fields in order (protocol/job_module.h,
 * docs/worker_jobs.md). */
#include "protocol/job_module.h"

#include <stdlib.h>
#include <string.h>

void kiln_module_job_encode(msgpack_packer *pk, const kiln_module_job_t *j) {
  switch (j->kind) {
    case KILN_JOB_LOAD:
      kiln_job_pack_head(pk, 2, 1);
      kiln_job_pack_key(pk, j->module);
      msgpack_pack_uint64(pk, j->size);
      return;
    case KILN_JOB_UNLOAD:
      kiln_job_pack_head(pk, 1, 0);
      kiln_job_pack_key(pk, j->module);
      return;
    default: /* cancel_page */
      kiln_job_pack_head(pk, 1, 1);
      msgpack_pack_uint64(pk, j->size);
      return;
  }
}

kiln_status_t kiln_module_job_decode(kiln_job_kind_t kind, const msgpack_object *job,
                                     kiln_module_job_t *out) {
  const msgpack_object *f;
  kiln_module_job_t j = {.kind = kind};
  switch (kind) {
    case KILN_JOB_LOAD:
      KILN_RETURN_IF_ERROR(kiln_job_open(job, kind, 2, 1, &f));
      KILN_RETURN_IF_ERROR(kiln_job_key(&f[0], j.module));
      KILN_RETURN_IF_ERROR(kiln_job_u64(&f[1], "size", UINT64_MAX, &j.size));
      break;
    case KILN_JOB_UNLOAD:
      KILN_RETURN_IF_ERROR(kiln_job_open(job, kind, 1, 0, &f));
      KILN_RETURN_IF_ERROR(kiln_job_key(&f[0], j.module));
      break;
    case KILN_JOB_CANCEL_PAGE:
      KILN_RETURN_IF_ERROR(kiln_job_open(job, kind, 1, 1, &f));
      KILN_RETURN_IF_ERROR(kiln_job_u64(&f[0], "size", UINT64_MAX, &j.size));
      break;
    default:
      return KILN_STATUS(KILN_E_INTERNAL, "worker job: kind %d is not a module job", (int)kind);
  }
  *out = j;
  return KILN_OK;
}

/* --- launch and time --------------------------------------------------------------------- */

enum { LAUNCH_FIELDS = 8, TIME_FIELDS = 13 };

void kiln_launch_job_encode(msgpack_packer *pk, const kiln_launch_job_t *j) {
  bool timed = j->kind == KILN_JOB_TIME;
  kiln_job_pack_head(pk, timed ? TIME_FIELDS : LAUNCH_FIELDS, 0);
  kiln_job_pack_key(pk, j->module);
  msgpack_pack_uint32(pk, j->kernel);
  kiln_job_pack_dims(pk, j->grid);
  kiln_job_pack_dims(pk, j->block);
  msgpack_pack_uint32(pk, j->shared);
  msgpack_pack_uint64(pk, j->deadline_ms);
  msgpack_pack_uint64(pk, j->cancel);
  msgpack_pack_array(pk, j->nargs);
  for (uint32_t i = 0; i < j->nargs; i++) kiln_job_pack_arg(pk, j->args[i].tensor ? 1 : 0, j->args[i].value);
  if (!timed) return;
  msgpack_pack_uint32(pk, j->number);
  msgpack_pack_uint32(pk, j->repeat);
  msgpack_pack_uint32(pk, j->min_repeat_ms);
  msgpack_pack_uint32(pk, j->warmup);
  if (j->flush) msgpack_pack_true(pk);
  else msgpack_pack_false(pk);
}

static kiln_status_t decode_args(const msgpack_object *o, kiln_launch_job_t *j) {
  const msgpack_object_array *a;
  KILN_RETURN_IF_ERROR(kiln_job_array(o, "args", UINT32_MAX, &a));
  j->args = calloc(a->size ? a->size : 1, sizeof(*j->args));
  if (!j->args) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for %u arguments", a->size);
  j->nargs = a->size;
  for (uint32_t i = 0; i < a->size; i++) {
    uint32_t tag;
    KILN_RETURN_IF_ERROR(kiln_job_arg(&a->ptr[i], 1, &tag, &j->args[i].value));
    j->args[i].tensor = tag == 1;
  }
  return KILN_OK;
}

static kiln_status_t decode_launch(kiln_job_kind_t kind, const msgpack_object *job,
                                   kiln_launch_job_t *j) {
  bool timed = kind == KILN_JOB_TIME;
  if (kind != KILN_JOB_LAUNCH && !timed)
    return KILN_STATUS(KILN_E_INTERNAL, "worker job: kind %d is not launch or time", (int)kind);
  const msgpack_object *f;
  KILN_RETURN_IF_ERROR(kiln_job_open(job, kind, timed ? TIME_FIELDS : LAUNCH_FIELDS, 0, &f));
  KILN_RETURN_IF_ERROR(kiln_job_key(&f[0], j->module));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[1], "kernel", &j->kernel));
  KILN_RETURN_IF_ERROR(kiln_job_dims(&f[2], "grid", j->grid));
  KILN_RETURN_IF_ERROR(kiln_job_dims(&f[3], "block", j->block));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[4], "shared", &j->shared));
  KILN_RETURN_IF_ERROR(kiln_job_u64(&f[5], "deadline_ms", UINT64_MAX, &j->deadline_ms));
  KILN_RETURN_IF_ERROR(kiln_job_u64(&f[6], "cancel", UINT64_MAX, &j->cancel));
  KILN_RETURN_IF_ERROR(decode_args(&f[7], j));
  if (!timed) return KILN_OK;
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[8], "number", &j->number));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[9], "repeat", &j->repeat));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[10], "min_repeat_ms", &j->min_repeat_ms));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[11], "warmup", &j->warmup));
  return kiln_job_bool(&f[12], "flush", &j->flush);
}

kiln_status_t kiln_launch_job_decode(kiln_job_kind_t kind, const msgpack_object *job,
                                     kiln_launch_job_t *out) {
  memset(out, 0, sizeof(*out));
  out->kind = kind;
  kiln_status_t st = decode_launch(kind, job, out);
  if (st) kiln_launch_job_deinit(out);
  return st;
}

void kiln_launch_job_deinit(kiln_launch_job_t *j) {
  free(j->args);
  j->args = NULL;
  j->nargs = 0;
}

/* --- replies ----------------------------------------------------------------------------- */

void kiln_launch_reply_encode(msgpack_packer *pk, const kiln_launch_reply_t *r) {
  msgpack_pack_array(pk, 1);
  msgpack_pack_double(pk, r->elapsed);
}

kiln_status_t kiln_launch_reply_decode(const msgpack_object *reply, kiln_launch_reply_t *out) {
  const msgpack_object *f;
  KILN_RETURN_IF_ERROR(kiln_job_reply_open(reply, KILN_JOB_LAUNCH, 1, &f));
  return kiln_job_f64(&f[0], "elapsed", &out->elapsed);
}

void kiln_time_reply_encode(msgpack_packer *pk, const kiln_time_reply_t *r) {
  msgpack_pack_array(pk, 8);
  msgpack_pack_array(pk, r->repeat);
  for (uint32_t i = 0; i < r->repeat; i++) msgpack_pack_double(pk, r->results[i]);
  msgpack_pack_double(pk, r->min);
  msgpack_pack_double(pk, r->median);
  msgpack_pack_double(pk, r->mean);
  msgpack_pack_double(pk, r->std);
  msgpack_pack_double(pk, r->cv);
  msgpack_pack_uint32(pk, r->number);
  msgpack_pack_uint32(pk, r->repeat);
}

static kiln_status_t decode_time(const msgpack_object *reply, kiln_time_reply_t *r) {
  const msgpack_object *f;
  KILN_RETURN_IF_ERROR(kiln_job_reply_open(reply, KILN_JOB_TIME, 8, &f));
  const msgpack_object_array *res;
  KILN_RETURN_IF_ERROR(kiln_job_array(&f[0], "results", UINT32_MAX, &res));
  r->results = calloc(res->size ? res->size : 1, sizeof(double));
  if (!r->results) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for results");
  for (uint32_t i = 0; i < res->size; i++)
    KILN_RETURN_IF_ERROR(kiln_job_f64(&res->ptr[i], "results", &r->results[i]));
  KILN_RETURN_IF_ERROR(kiln_job_f64(&f[1], "min", &r->min));
  KILN_RETURN_IF_ERROR(kiln_job_f64(&f[2], "median", &r->median));
  KILN_RETURN_IF_ERROR(kiln_job_f64(&f[3], "mean", &r->mean));
  KILN_RETURN_IF_ERROR(kiln_job_f64(&f[4], "std", &r->std));
  KILN_RETURN_IF_ERROR(kiln_job_f64(&f[5], "cv", &r->cv));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[6], "number", &r->number));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[7], "repeat", &r->repeat));
  if (r->repeat != res->size)
    return KILN_STATUS(KILN_E_INTERNAL, "worker job: time reply has %u results for repeat %u",
                       res->size, r->repeat);
  return KILN_OK;
}

kiln_status_t kiln_time_reply_decode(const msgpack_object *reply, kiln_time_reply_t *out) {
  memset(out, 0, sizeof(*out));
  kiln_status_t st = decode_time(reply, out);
  if (st) kiln_time_reply_deinit(out);
  return st;
}

void kiln_time_reply_deinit(kiln_time_reply_t *r) {
  free(r->results);
  r->results = NULL;
  r->repeat = 0;
}
