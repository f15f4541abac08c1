/* The compile job (docs/worker_jobs.md "Builds"), sent to a compile worker with the payload
 * in its one fd, and its reply: the time the compiler took, and the artifact
 * (protocol/artifact.h encoding) in the fd the reply carries. */
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
KILN_MUST_USE kiln_status_t kiln_compile_job_decode(const msgpack_object *job, kiln_compile_job_t *out);

/* The reply: [size, compile_ms], with the encoded artifact in the one fd it carries (a
 * memfd sealed against shrinking, as payloads are), `size` bytes at its start. */
#define KILN_COMPILE_REPLY_FDS 1
#define KILN_ARTIFACT_MAX (1ull << 30) /* bytes kilnd takes from a compile worker */
typedef struct kiln_compile_reply {
  uint64_t size;
  double compile_ms;
} kiln_compile_reply_t;

void kiln_compile_reply_encode(msgpack_packer *pk, const kiln_compile_reply_t *r);
KILN_MUST_USE kiln_status_t kiln_compile_reply_decode(const msgpack_object *reply, kiln_compile_reply_t *out);

#endif
