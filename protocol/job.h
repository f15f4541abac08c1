/* The typed seam between kilnd and its workers (docs/worker_jobs.md): every request kilnd
 * sends a worker is a job of one kind, a C struct with one encode/decode pair; so is every
 * reply that carries values. kilnd validates a client's params once and builds the job; a
 * worker decodes the fixed schema and trusts its values (it checks only what it alone can
 * know: its buffers, its loaded modules, its device's limits).
 *
 * On the channel (protocol/channel.h) a job travels as a MessagePack-RPC request whose params
 * are the job array itself:
 *     [0, msgid, kind name, [KILN_JOB_VERSION, nfds, field, ...]]
 * with nfds file descriptors riding on its first byte; the reply is [1, msgid, error, value]
 * with the kind's reply value (nil where it has none). Fields are positional, in the order
 * docs/worker_jobs.md gives for each kind; a decoder refuses a wrong version, a wrong field
 * count or a value of the wrong type with E_INTERNAL (kilnd and its workers are built
 * together: a mismatch is a bug, not a client's mistake).
 *
 * The kinds live in their own files by family: job_tensor.h, job_module.h, job_compile.h,
 * job_graph.h. A new family adds its file, its kinds at the end of kiln_job_kind_t and its
 * names in job.c (docs/worker_jobs.md "Adding a job kind"). job_serve.c is the one serve loop of both
 * workers. */
#ifndef KILN_PROTOCOL_JOB_H
#define KILN_PROTOCOL_JOB_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "base/util.h"
#include "protocol/mp.h"

#define KILN_JOB_VERSION 1

typedef enum kiln_job_kind {
  KILN_JOB_NONE = 0,
  /* tensors (job_tensor.h) */
  KILN_JOB_ALLOC,
  KILN_JOB_UPLOAD,
  KILN_JOB_WRITE,
  KILN_JOB_READ,
  KILN_JOB_FREE,
  KILN_JOB_SYNC,
  /* modules and launches (job_module.h) */
  KILN_JOB_LOAD,
  KILN_JOB_UNLOAD,
  KILN_JOB_CANCEL_PAGE,
  KILN_JOB_LAUNCH,
  KILN_JOB_TIME,
  /* builds (job_compile.h) */
  KILN_JOB_COMPILE,
  /* graphs (job_graph.h) */
  KILN_JOB_GRAPH_LOAD,
  KILN_JOB_GRAPH_RUN,
  KILN_JOB_GRAPH_TIME,
  KILN_JOB_GRAPH_FREE,
  /* a new family's kinds go here */
  KILN_JOB_KINDS_
} kiln_job_kind_t;

/* The name a kind travels under ("alloc", "launch", ...); NULL for none. */
const char *kiln_job_name(kiln_job_kind_t kind);
/* KILN_JOB_NONE when `name` is no kind's. */
kiln_job_kind_t kiln_job_kind_of(const char *name, size_t len);

/* What a malformed job or reply reports: E_INTERNAL, "worker job: ". */
extern const kiln_mp_err_t kiln_job_err;

/* --- the pieces the families' codecs are made of --------------------------------------- */

/* [KILN_JOB_VERSION, nfds, then the caller packs nfields fields. */
void kiln_job_pack_head(msgpack_packer *pk, uint32_t nfields, uint32_t nfds);
/* A module id: bin of KILN_HASH_BYTES. */
void kiln_job_pack_key(msgpack_packer *pk, const uint8_t key[KILN_HASH_BYTES]);

/* The fields of job array `job` of kind `kind`: checks the version, that nfds is `nfds` and
 * that exactly nfields fields follow; *out_fields points at the first. */
KILN_MUST_USE kiln_status_t kiln_job_open(const msgpack_object *job, kiln_job_kind_t kind, uint32_t nfields,
                            uint32_t nfds, const msgpack_object **out_fields);
/* The nfds a job array announces (its second element), at most `max`. */
KILN_MUST_USE kiln_status_t kiln_job_nfds(const msgpack_object *job, uint32_t max, uint32_t *out);

/* A reply value: an array of exactly n elements. */
KILN_MUST_USE kiln_status_t kiln_job_reply_open(const msgpack_object *reply, kiln_job_kind_t kind, uint32_t n,
                                  const msgpack_object **out_fields);

/* Field getters: `what` names the field in the error. */
KILN_MUST_USE kiln_status_t kiln_job_u64(const msgpack_object *o, const char *what, uint64_t max,
                           uint64_t *out);
KILN_MUST_USE kiln_status_t kiln_job_u32(const msgpack_object *o, const char *what, uint32_t *out);
KILN_MUST_USE kiln_status_t kiln_job_f64(const msgpack_object *o, const char *what, double *out);
KILN_MUST_USE kiln_status_t kiln_job_bool(const msgpack_object *o, const char *what, bool *out);
KILN_MUST_USE kiln_status_t kiln_job_key(const msgpack_object *o, uint8_t out[KILN_HASH_BYTES]);
/* An array of exactly n elements (n == UINT32_MAX: any count). */
KILN_MUST_USE kiln_status_t kiln_job_array(const msgpack_object *o, const char *what, uint32_t n,
                             const msgpack_object_array **out);

/* A launch's geometry, as launch and graph_load jobs carry it: [d0, d1, d2], each 1 .. 2^32-1
 * (a 0 is refused: kilnd checked the launch). `what` is "grid" or "block". */
void kiln_job_pack_dims(msgpack_packer *pk, const uint32_t d[3]);
KILN_MUST_USE kiln_status_t kiln_job_dims(const msgpack_object *o, const char *what, uint32_t out[3]);
/* One launch argument, [tag, value]: what the tag means is the family's (launch: 1 for a
 * tensor handle; graph_load: 1 + a block), at most max_tag when decoded. */
void kiln_job_pack_arg(msgpack_packer *pk, uint32_t tag, uint64_t value);
KILN_MUST_USE kiln_status_t kiln_job_arg(const msgpack_object *o, uint32_t max_tag, uint32_t *out_tag,
                                         uint64_t *out_value);

#endif
