/* Module jobs (docs/worker_jobs.md "Modules and launches"), sent to a device worker: load
 * (the artifact's bytes in the one fd), unload, cancel_page (kilnd's page of cancel cells in
 * the one fd), launch and time, and the replies of launch and time.
 *
 * A launch job is checked and converted by kilnd before it is built: the kernel is named by
 * its index in the module's kernel table, every argument value is already in the kernel's
 * parameter type (device/launch.h's 8-byte slot) and a tensor argument is the handle of a
 * buffer of the same worker, whose device address the worker puts in its slot. */
#ifndef KILN_PROTOCOL_JOB_MODULE_H
#define KILN_PROTOCOL_JOB_MODULE_H

#include "protocol/job.h"

/* load, unload and cancel_page. */
typedef struct kiln_module_job {
  kiln_job_kind_t kind;              /* KILN_JOB_LOAD, _UNLOAD or _CANCEL_PAGE */
  uint8_t module[KILN_HASH_BYTES];   /* load, unload: the module id */
  uint64_t size;                     /* load, cancel_page: bytes in the fd */
} kiln_module_job_t;

void kiln_module_job_encode(msgpack_packer *pk, const kiln_module_job_t *j);
KILN_MUST_USE kiln_status_t kiln_module_job_decode(kiln_job_kind_t kind, const msgpack_object *job,
                                     kiln_module_job_t *out);

typedef struct kiln_launch_job_arg {
  bool tensor;    /* value is a buffer handle, else the argument's slot */
  uint64_t value;
} kiln_launch_job_arg_t;

/* launch and time. */
typedef struct kiln_launch_job {
  kiln_job_kind_t kind; /* KILN_JOB_LAUNCH or KILN_JOB_TIME */
  uint8_t module[KILN_HASH_BYTES];
  uint32_t kernel; /* index in the module's kernel table */
  uint32_t grid[3], block[3];
  uint32_t shared;
  uint64_t deadline_ms; /* 0: none */
  uint64_t cancel;      /* its cell in the cancel page (0: none) */
  uint32_t nargs;
  kiln_launch_job_arg_t *args; /* nargs; decoded ones are owned (kiln_launch_job_deinit) */
  /* time only: */
  uint32_t number, repeat, min_repeat_ms, warmup;
  bool flush;
} kiln_launch_job_t;

void kiln_launch_job_encode(msgpack_packer *pk, const kiln_launch_job_t *j);
KILN_MUST_USE kiln_status_t kiln_launch_job_decode(kiln_job_kind_t kind, const msgpack_object *job,
                                     kiln_launch_job_t *out);
void kiln_launch_job_deinit(kiln_launch_job_t *j);

/* The reply to launch: [elapsed]. */
typedef struct kiln_launch_reply {
  double elapsed; /* seconds */
} kiln_launch_reply_t;

void kiln_launch_reply_encode(msgpack_packer *pk, const kiln_launch_reply_t *r);
KILN_MUST_USE kiln_status_t kiln_launch_reply_decode(const msgpack_object *reply, kiln_launch_reply_t *out);

/* The reply to time: [results, min, median, mean, std, cv, number, repeat]. */
typedef struct kiln_time_reply {
  uint32_t repeat;
  double *results; /* repeat entries (seconds per call); decoded ones are owned */
  double min, median, mean, std, cv;
  uint32_t number;
} kiln_time_reply_t;

void kiln_time_reply_encode(msgpack_packer *pk, const kiln_time_reply_t *r);
KILN_MUST_USE kiln_status_t kiln_time_reply_decode(const msgpack_object *reply, kiln_time_reply_t *out);
void kiln_time_reply_deinit(kiln_time_reply_t *r);

#endif
