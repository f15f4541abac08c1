/* Tensor jobs (docs/worker_jobs.md "Tensors"): alloc, upload, write, read, free and sync,
 * sent to a device worker. The handle is kilnd's tensor id; bulk bytes travel in the one
 * shared-memory fd a job carries (upload, write, read), `at` bytes into it. Every reply is
 * nil. */
#ifndef KILN_PROTOCOL_JOB_TENSOR_H
#define KILN_PROTOCOL_JOB_TENSOR_H

#include "protocol/job.h"

typedef struct kiln_tensor_job {
  kiln_job_kind_t kind; /* KILN_JOB_ALLOC .. KILN_JOB_SYNC */
  uint64_t handle;      /* all but sync */
  uint64_t bytes;       /* alloc, upload: the buffer's size */
  uint64_t offset;      /* write, read: where in the buffer */
  uint64_t size;        /* write, read: how many bytes */
  uint64_t at;          /* upload, write, read: where the bytes are in the fd */
} kiln_tensor_job_t;

bool kiln_job_is_tensor(kiln_job_kind_t kind);
/* File descriptors a tensor job of `kind` carries (0 or 1). */
uint32_t kiln_tensor_job_nfds(kiln_job_kind_t kind);

/* Packs the job array (the request's params) of j->kind. */
void kiln_tensor_job_encode(msgpack_packer *pk, const kiln_tensor_job_t *j);
/* Decodes the job array of kind `kind` into *out. */
KILN_MUST_USE kiln_status_t kiln_tensor_job_decode(kiln_job_kind_t kind, const msgpack_object *job,
                                     kiln_tensor_job_t *out);

#endif
