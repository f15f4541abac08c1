/* The one serve loop of kiln's workers: reads jobs from the channel in order, takes each
 * job's file descriptors from the queue, hands the job to the worker's handler and sends
 * its reply. Blocking; for the worker processes. */
#ifndef KILN_PROTOCOL_JOB_SERVE_H
#define KILN_PROTOCOL_JOB_SERVE_H

#include <msgpack.h>

#include "protocol/channel.h"
#include "protocol/job.h"

typedef struct kiln_job_call {
  kiln_job_kind_t kind;
  const msgpack_object *job; /* the job array: the handler decodes it with the kind's decoder */
  int fds[KILN_CHANNEL_MAX_FDS]; /* the job's fds, closed by the loop after the handler */
  uint32_t nfds;
  msgpack_packer *reply; /* the handler packs exactly one reply value on success */
  /* fds the reply carries (its kind says how many): sent with a successful reply and closed
   * here either way. */
  int reply_fds[KILN_CHANNEL_MAX_FDS];
  uint32_t reply_nfds;
} kiln_job_call_t;

typedef struct kiln_job_server {
  int channel;
  /* Runs one job; an error is sent as the reply's error. */
  kiln_status_t (*handle)(void *ctx, kiln_job_call_t *call);
  /* Whether a job that failed with `code` leaves the worker unusable: the loop answers, then
   * the process exits with status 3 (NULL: never). */
  bool (*fatal)(kiln_code_t code);
  void *ctx;
} kiln_job_server_t;

/* A worker that is busy with a long job (the runs of a `time`) says it still makes progress
 * with the notification [2, "alive", []] between runs, so that kilnd's watchdog bounds each
 * run instead of the whole job (server/worker.c). */
#define KILN_WORKER_ALIVE "alive"
/* Sends it on the channel; blocking, like a reply. */
KILN_MUST_USE kiln_status_t kiln_job_send_alive(int channel);

/* Serves until kilnd closes the channel (returns 0) or the channel breaks, or a message is
 * not a job (returns 1). */
int kiln_job_serve(const kiln_job_server_t *s);

#endif
