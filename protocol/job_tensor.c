/* Tensor jobs: their fields in order (protocol/job_tensor.h, docs/worker_jobs.md). */
#include "protocol/job_tensor.h"

#include <stddef.h>

enum { F_HANDLE, F_BYTES, F_OFFSET, F_SIZE, F_AT, F_END };

/* Each kind's fields, in wire order, ended by F_END. */
static const uint8_t fields[KILN_JOB_SYNC + 1][5] = {
    [KILN_JOB_ALLOC] = {F_HANDLE, F_BYTES, F_END},
    [KILN_JOB_UPLOAD] = {F_HANDLE, F_BYTES, F_AT, F_END},
    [KILN_JOB_WRITE] = {F_HANDLE, F_OFFSET, F_SIZE, F_AT, F_END},
    [KILN_JOB_READ] = {F_HANDLE, F_OFFSET, F_SIZE, F_AT, F_END},
    [KILN_JOB_FREE] = {F_HANDLE, F_END},
    [KILN_JOB_SYNC] = {F_END},
};
static const char *const field_names[F_END] = {"handle", "bytes", "offset", "size", "at"};

bool kiln_job_is_tensor(kiln_job_kind_t kind) {
  return kind >= KILN_JOB_ALLOC && kind <= KILN_JOB_SYNC;
}

uint32_t kiln_tensor_job_nfds(kiln_job_kind_t kind) {
  return kind == KILN_JOB_UPLOAD || kind == KILN_JOB_WRITE || kind == KILN_JOB_READ;
}

static uint32_t count(kiln_job_kind_t kind) {
  uint32_t n = 0;
  while (fields[kind][n] != F_END) n++;
  return n;
}

static uint64_t *slot(kiln_tensor_job_t *j, int f) {
  switch (f) {
    case F_HANDLE: return &j->handle;
    case F_BYTES: return &j->bytes;
    case F_OFFSET: return &j->offset;
    case F_SIZE: return &j->size;
    default: return &j->at;
  }
}

void kiln_tensor_job_encode(msgpack_packer *pk, const kiln_tensor_job_t *j) {
  kiln_tensor_job_t c = *j;
  uint32_t n = count(j->kind);
  kiln_job_pack_head(pk, n, kiln_tensor_job_nfds(j->kind));
  for (uint32_t i = 0; i < n; i++) msgpack_pack_uint64(pk, *slot(&c, fields[j->kind][i]));
}

kiln_status_t kiln_tensor_job_decode(kiln_job_kind_t kind, const msgpack_object *job,
                                     kiln_tensor_job_t *out) {
  if (!kiln_job_is_tensor(kind))
    return KILN_STATUS(KILN_E_INTERNAL, "worker job: kind %d is not a tensor job", (int)kind);
  uint32_t n = count(kind);
  const msgpack_object *f;
  KILN_RETURN_IF_ERROR(kiln_job_open(job, kind, n, kiln_tensor_job_nfds(kind), &f));
  kiln_tensor_job_t j = {.kind = kind};
  for (uint32_t i = 0; i < n; i++) {
    int which = fields[kind][i];
    KILN_RETURN_IF_ERROR(kiln_job_u64(&f[i], field_names[which], UINT64_MAX, slot(&j, which)));
  }
  *out = j;
  return KILN_OK;
}
