/* The compile job and its reply: fields in order (protocol/job_compile.h). */
#include "protocol/job_compile.h"

#include <string.h>

void kiln_compile_job_encode(msgpack_packer *pk, const kiln_compile_job_t *j) {
  kiln_job_pack_head(pk, 6, 1);
  msgpack_pack_uint32(pk, (uint32_t)j->kind);
  size_t n = strnlen(j->target, sizeof(j->target) - 1);
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, j->target, n);
  msgpack_pack_uint32(pk, j->opt_level);
  msgpack_pack_uint32(pk, j->max_block);
  if (j->fast_math) msgpack_pack_true(pk);
  else msgpack_pack_false(pk);
  msgpack_pack_uint64(pk, j->size);
}

kiln_status_t kiln_compile_job_decode(const msgpack_object *job, kiln_compile_job_t *out) {
  const msgpack_object *f;
  KILN_RETURN_IF_ERROR(kiln_job_open(job, KILN_JOB_COMPILE, 6, 1, &f));
  kiln_compile_job_t j = {0};
  uint64_t kind;
  KILN_RETURN_IF_ERROR(kiln_job_u64(&f[0], "kind", KILN_PAYLOAD_KINDS_ - 1, &kind));
  j.kind = (kiln_payload_kind_t)kind;
  KILN_RETURN_IF_ERROR(kiln_mp_cstr(&kiln_job_err, &f[1], "target", j.target, sizeof(j.target)));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[2], "opt_level", &j.opt_level));
  KILN_RETURN_IF_ERROR(kiln_job_u32(&f[3], "max_block", &j.max_block));
  KILN_RETURN_IF_ERROR(kiln_job_bool(&f[4], "fast_math", &j.fast_math));
  KILN_RETURN_IF_ERROR(kiln_job_u64(&f[5], "size", UINT64_MAX, &j.size));
  *out = j;
  return KILN_OK;
}

void kiln_compile_reply_encode(msgpack_packer *pk, const kiln_compile_reply_t *r) {
  msgpack_pack_array(pk, 2);
  msgpack_pack_uint64(pk, r->size);
  msgpack_pack_double(pk, r->compile_ms);
}

kiln_status_t kiln_compile_reply_decode(const msgpack_object *reply, kiln_compile_reply_t *out) {
  const msgpack_object *f;
  KILN_RETURN_IF_ERROR(kiln_job_reply_open(reply, KILN_JOB_COMPILE, 2, &f));
  kiln_compile_reply_t r;
  KILN_RETURN_IF_ERROR(kiln_job_u64(&f[0], "size", UINT64_MAX, &r.size));
  KILN_RETURN_IF_ERROR(kiln_job_f64(&f[1], "compile_ms", &r.compile_ms));
  *out = r;
  return KILN_OK;
}
