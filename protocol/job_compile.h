/* The compile job (docs/worker_jobs.md "Builds"), sent to a compile worker with the payload
 * in its one fd, and its reply: the artifact (protocol/artifact.h encoding) and the time the
 * compiler took. */
#ifndef KILN_PROTOCOL_JOB_COMPILE_H
#define KILN_PROTOCOL_JOB_COMPILE_H

#include "protocol/job.h"
#include "protocol/payload.h"

typedef struct kiln_compile_job {
  kiln_payload_kind_t kind;
  char target[128]; /* as resolved by kilnd */
  uint32_t opt_level, max_block;
  bool fast_math;
  uint64_t size; /* payload bytes in the fd */
} kiln_compile_job_t;

void kiln_compile_job_encode(msgpack_packer *pk, const kiln_compile_job_t *j);
kiln_status_t kiln_compile_job_decode(const msgpack_object *job, kiln_compile_job_t *out);

typedef struct kiln_compile_reply {
  const uint8_t *artifact; /* borrowed from the reply's bytes */
  size_t len;
  double compile_ms;
} kiln_compile_reply_t;

void kiln_compile_reply_encode(msgpack_packer *pk, const kiln_compile_reply_t *r);
kiln_status_t kiln_compile_reply_decode(const msgpack_object *reply, kiln_compile_reply_t *out);

#endif
