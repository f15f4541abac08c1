/* Graph jobs (docs/worker_jobs.md "Graphs"), sent to a device worker: graph_load (the constant
 * block in the one fd), graph_run and graph_time (the run's shared memory in the one fd:
 * a header, then the input block; graph_run's outputs are copied into it), graph_free.
 *
 * kilnd has checked the graph (server/graph_plan.c), compiled and loaded its modules in the
 * worker, planned its memory and converted every scalar argument to its kernel's type: a
 * launch argument is a converted slot (tag 0) or an offset into one of the graph's three
 * blocks (tag 1 + block). graph_run replies as launch does ([elapsed]), graph_time as time. */
#ifndef KILN_PROTOCOL_JOB_GRAPH_H
#define KILN_PROTOCOL_JOB_GRAPH_H

#include "protocol/job.h"

/* The graph's blocks in the worker; a launch argument's tag is 1 + block. */
enum { KILN_GRAPH_ARENA = 0, KILN_GRAPH_CONSTANTS = 1, KILN_GRAPH_INPUTS = 2, KILN_GRAPH_BLOCKS = 3 };

/* A run's shared memory starts with this many header bytes: the worker stores there (u32) the
 * index + 1 of the launch it starts, so kilnd can name the node of a fault that ends the
 * worker before it answers. The input block follows. */
#define KILN_GRAPH_RUN_HEADER 256u

typedef struct kiln_graph_job_arg {
  uint32_t tag;   /* 0: value is the converted slot; 1 + block: value is an offset in it */
  uint64_t value;
} kiln_graph_job_arg_t;

typedef struct kiln_graph_job_launch {
  uint8_t module[KILN_HASH_BYTES];
  uint32_t kernel; /* index in the module's kernel table */
  uint32_t node;   /* index in nodes */
  uint32_t grid[3], block[3];
  uint32_t shared;
  uint32_t nargs;
  kiln_graph_job_arg_t *args; /* decoded ones point into the job's arg array (owned) */
} kiln_graph_job_launch_t;

/* A tensor of this worker copied into a graph block: `bytes` of buffer `handle` (from its
 * start) to `offset` of the block. Constants given by id (graph_load) and inputs given by id
 * (graph_run, graph_time). */
typedef struct kiln_graph_copy {
  uint64_t handle, offset, bytes;
} kiln_graph_copy_t;

/* graph_load: handle u64, bytes [arena, constants, inputs] u64 ×3, nodes [str], launches
 * [[module key, kernel u32, node u32, grid, block, shared u32, args [[tag, value]]]], copies
 * [[handle, offset, bytes]] (into the constant block); the constant block (bytes[1]) in the
 * fd, the copies' ranges left zero in it. */
typedef struct kiln_graph_load_job {
  uint64_t handle;
  uint64_t bytes[KILN_GRAPH_BLOCKS];
  uint32_t num_nodes;
  const char **nodes; /* "name (label)"; encode: the caller's; decode: owned copies */
  uint32_t *node_lens;
  uint32_t num_launches;
  kiln_graph_job_launch_t *launches;
  uint32_t num_copies;
  kiln_graph_copy_t *copies; /* encode: the caller's; decode: owned */
} kiln_graph_load_job_t;

void kiln_graph_load_job_encode(msgpack_packer *pk, const kiln_graph_load_job_t *j);
KILN_MUST_USE kiln_status_t kiln_graph_load_job_decode(const msgpack_object *job, kiln_graph_load_job_t *out);
void kiln_graph_load_job_deinit(kiln_graph_load_job_t *j); /* decoded jobs */

typedef struct kiln_graph_output {
  uint32_t block;
  uint64_t offset, bytes, at; /* `bytes` at `offset` of the block go to `at` in the fd */
  uint64_t keep; /* not 0: into a new buffer of this handle instead (`at` unused) */
} kiln_graph_output_t;

/* graph_run: handle, size u64 (of the fd), deadline_ms u64, cancel u64, inputs [[handle,
 * offset, bytes]], outputs [[block, offset, bytes, at, keep]]; graph_time: handle, size,
 * deadline_ms, cancel, inputs, number u32, repeat u32, min_repeat_ms u32, warmup u32, flush
 * bool. graph_free: handle. `cancel` is the run's cell in the cancel page (0: none), as for
 * launch; `inputs` are copied into the input block after the fd's inline ones. */
typedef struct kiln_graph_job {
  kiln_job_kind_t kind; /* KILN_JOB_GRAPH_RUN, _TIME or _FREE */
  uint64_t handle;
  uint64_t size, deadline_ms, cancel;
  uint32_t num_inputs;
  kiln_graph_copy_t *inputs; /* decoded: owned */
  uint32_t num_outputs;
  kiln_graph_output_t *outputs; /* decoded: owned */
  uint32_t number, repeat, min_repeat_ms, warmup;
  bool flush;
} kiln_graph_job_t;

void kiln_graph_job_encode(msgpack_packer *pk, const kiln_graph_job_t *j);
KILN_MUST_USE kiln_status_t kiln_graph_job_decode(kiln_job_kind_t kind, const msgpack_object *job, kiln_graph_job_t *out);
void kiln_graph_job_deinit(kiln_graph_job_t *j);

#endif
