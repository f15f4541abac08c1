/* Job kinds, the job array's head and the field getters of the typed seam (protocol/job.h). */
#include "protocol/job.h"

#include <string.h>

const kiln_mp_err_t kiln_job_err = {KILN_E_INTERNAL, "worker job: ", "field"};

static const char *const names[KILN_JOB_KINDS_] = {
    [KILN_JOB_ALLOC] = "alloc",   [KILN_JOB_UPLOAD] = "upload",
    [KILN_JOB_WRITE] = "write",   [KILN_JOB_READ] = "read",
    [KILN_JOB_FREE] = "free",     [KILN_JOB_SYNC] = "sync",
    [KILN_JOB_LOAD] = "load",     [KILN_JOB_UNLOAD] = "unload",
    [KILN_JOB_CANCEL_PAGE] = "cancel_page",
    [KILN_JOB_LAUNCH] = "launch", [KILN_JOB_TIME] = "time",
    [KILN_JOB_COMPILE] = "compile",
    [KILN_JOB_GRAPH_LOAD] = "graph_load",
    [KILN_JOB_GRAPH_RUN] = "graph_run",
    [KILN_JOB_GRAPH_TIME] = "graph_time",
    [KILN_JOB_GRAPH_FREE] = "graph_free",
};

const char *kiln_job_name(kiln_job_kind_t kind) {
  return (unsigned)kind < KILN_JOB_KINDS_ ? names[kind] : NULL;
}

kiln_job_kind_t kiln_job_kind_of(const char *name, size_t len) {
  for (int k = 1; k < KILN_JOB_KINDS_; k++)
    if (names[k] && strlen(names[k]) == len && memcmp(names[k], name, len) == 0)
      return (kiln_job_kind_t)k;
  return KILN_JOB_NONE;
}

void kiln_job_pack_head(msgpack_packer *pk, uint32_t nfields, uint32_t nfds) {
  msgpack_pack_array(pk, 2 + nfields);
  msgpack_pack_uint32(pk, KILN_JOB_VERSION);
  msgpack_pack_uint32(pk, nfds);
}

void kiln_job_pack_key(msgpack_packer *pk, const uint8_t key[KILN_HASH_BYTES]) {
  msgpack_pack_bin(pk, KILN_HASH_BYTES);
  msgpack_pack_bin_body(pk, key, KILN_HASH_BYTES);
}

#define BAD(...) KILN_STATUS(KILN_E_INTERNAL, "worker job: " __VA_ARGS__)

kiln_status_t kiln_job_nfds(const msgpack_object *job, uint32_t max, uint32_t *out) {
  if (job->type != MSGPACK_OBJECT_ARRAY || job->via.array.size < 2)
    return BAD("a job is an array [version, nfds, fields...]");
  const msgpack_object *v = &job->via.array.ptr[0];
  if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 != KILN_JOB_VERSION)
    return BAD("version is not %d (kilnd and its workers come from different builds)",
               KILN_JOB_VERSION);
  uint64_t n;
  KILN_RETURN_IF_ERROR(kiln_mp_uint(&kiln_job_err, &job->via.array.ptr[1], "nfds", max, &n));
  *out = (uint32_t)n;
  return KILN_OK;
}

kiln_status_t kiln_job_open(const msgpack_object *job, kiln_job_kind_t kind, uint32_t nfields,
                            uint32_t nfds, const msgpack_object **out_fields) {
  uint32_t have;
  KILN_RETURN_IF_ERROR(kiln_job_nfds(job, UINT32_MAX, &have));
  if (have != nfds)
    return BAD("%s carries %u file descriptors, not %u", kiln_job_name(kind), have, nfds);
  if (job->via.array.size != 2 + nfields)
    return BAD("%s has %u fields, not %u", kiln_job_name(kind), job->via.array.size - 2, nfields);
  *out_fields = job->via.array.ptr + 2;
  return KILN_OK;
}

kiln_status_t kiln_job_reply_open(const msgpack_object *reply, kiln_job_kind_t kind, uint32_t n,
                                  const msgpack_object **out_fields) {
  if (!reply || reply->type != MSGPACK_OBJECT_ARRAY || reply->via.array.size != n)
    return BAD("the reply to %s is not an array of %u values", kiln_job_name(kind), n);
  *out_fields = reply->via.array.ptr;
  return KILN_OK;
}

kiln_status_t kiln_job_u64(const msgpack_object *o, const char *what, uint64_t max,
                           uint64_t *out) {
  return kiln_mp_uint(&kiln_job_err, o, what, max, out);
}

kiln_status_t kiln_job_u32(const msgpack_object *o, const char *what, uint32_t *out) {
  uint64_t v;
  KILN_RETURN_IF_ERROR(kiln_mp_uint(&kiln_job_err, o, what, UINT32_MAX, &v));
  *out = (uint32_t)v;
  return KILN_OK;
}

kiln_status_t kiln_job_f64(const msgpack_object *o, const char *what, double *out) {
  if (o->type != MSGPACK_OBJECT_FLOAT64 && o->type != MSGPACK_OBJECT_FLOAT32)
    return BAD("%s must be a float", what);
  *out = o->via.f64;
  return KILN_OK;
}

kiln_status_t kiln_job_bool(const msgpack_object *o, const char *what, bool *out) {
  if (o->type != MSGPACK_OBJECT_BOOLEAN) return BAD("%s must be a boolean", what);
  *out = o->via.boolean;
  return KILN_OK;
}

kiln_status_t kiln_job_key(const msgpack_object *o, uint8_t out[KILN_HASH_BYTES]) {
  if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != KILN_HASH_BYTES)
    return BAD("module must be %d bytes (bin)", KILN_HASH_BYTES);
  memcpy(out, o->via.bin.ptr, KILN_HASH_BYTES);
  return KILN_OK;
}

kiln_status_t kiln_job_array(const msgpack_object *o, const char *what, uint32_t n,
                             const msgpack_object_array **out) {
  if (o->type != MSGPACK_OBJECT_ARRAY || (n != UINT32_MAX && o->via.array.size != n))
    return n == UINT32_MAX ? BAD("%s must be an array", what)
                           : BAD("%s must be an array of %u values", what, n);
  *out = &o->via.array;
  return KILN_OK;
}

void kiln_job_pack_dims(msgpack_packer *pk, const uint32_t d[3]) {
  msgpack_pack_array(pk, 3);
  for (int i = 0; i < 3; i++) msgpack_pack_uint32(pk, d[i]);
}

kiln_status_t kiln_job_dims(const msgpack_object *o, const char *what, uint32_t out[3]) {
  const msgpack_object_array *a;
  KILN_RETURN_IF_ERROR(kiln_job_array(o, what, 3, &a));
  for (int i = 0; i < 3; i++) {
    KILN_RETURN_IF_ERROR(kiln_job_u32(&a->ptr[i], what, &out[i]));
    if (out[i] == 0) return BAD("%s[%d] is 0", what, i);
  }
  return KILN_OK;
}

void kiln_job_pack_arg(msgpack_packer *pk, uint32_t tag, uint64_t value) {
  msgpack_pack_array(pk, 2);
  msgpack_pack_uint32(pk, tag);
  msgpack_pack_uint64(pk, value);
}

kiln_status_t kiln_job_arg(const msgpack_object *o, uint32_t max_tag, uint32_t *out_tag, uint64_t *out_value) {
  const msgpack_object_array *pair;
  uint64_t tag;
  KILN_RETURN_IF_ERROR(kiln_job_array(o, "argument", 2, &pair));
  KILN_RETURN_IF_ERROR(kiln_job_u64(&pair->ptr[0], "argument tag", max_tag, &tag));
  KILN_RETURN_IF_ERROR(kiln_job_u64(&pair->ptr[1], "argument", UINT64_MAX, out_value));
  *out_tag = (uint32_t)tag;
  return KILN_OK;
}
