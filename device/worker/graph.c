/* Graphs in the device worker (docs/graph.md): graph_load, graph_run, graph_time, graph_free.
 * kilnd has checked the payload, compiled and loaded its modules into this worker, and planned
 * its memory; a graph here is three blocks (constants, inputs, the value arena) and its
 * launches, prepared once (arguments converted, geometry checked) and run back to back for
 * each request: where the backend has launch sequences (device.h seq_*: CUDA, HSA) the whole
 * run is one submission and one wait, else one backend launch (and wait) per kernel (cpu). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/util.h"
#include "device/launch.h"
#include "device/timing.h"
#include "device/worker/worker.h"
#include "protocol/channel.h"
#include "protocol/job_graph.h"
#include "protocol/job_serve.h"
#include "protocol/job_module.h"

enum { REGION_ARENA = KILN_GRAPH_ARENA, REGION_CONSTANTS = KILN_GRAPH_CONSTANTS, REGION_INPUTS = KILN_GRAPH_INPUTS,
       REGIONS = KILN_GRAPH_BLOCKS };

typedef struct glaunch {
  kiln_dmodule_t *mod;
  kiln_launch_t launch;
  kiln_launch_values_t values;
  uint32_t node;
} glaunch_t;

typedef struct graph {
  kiln_dmem_t *mem[REGIONS];
  uint64_t bytes[REGIONS];
  glaunch_t *launches;
  uint32_t num_launches;
  char **nodes; /* "name (label)" for errors */
  uint32_t num_nodes;
  kiln_dseq_t *seq; /* every launch as one sequence; NULL: launched one by one */
} graph_t;

static void graph_free(kiln_dworker_t *w, graph_t *g) {
  if (g->seq) w->backend->seq_destroy(w->dev, g->seq);
  for (int r = 0; r < REGIONS; r++)
    if (g->mem[r]) w->backend->mem_free(w->dev, g->mem[r]);
  for (uint32_t i = 0; i < g->num_launches; i++) kiln_launch_values_deinit(&g->launches[i].values);
  free(g->launches);
  for (uint32_t i = 0; i < g->num_nodes; i++) free(g->nodes[i]);
  free(g->nodes);
  free(g);
}

void kiln_dworker_graphs_deinit(kiln_dworker_t *w) {
  size_t it = 0;
  void *v;
  while (kiln_map_next(&w->graphs, &it, NULL, &v)) graph_free(w, v);
  kiln_map_deinit(&w->graphs);
}

/* One launch: slots as kilnd converted them, block offsets made addresses, geometry checked
 * against this device. */
static kiln_status_t prepare(kiln_dworker_t *w, graph_t *g, const kiln_graph_job_launch_t *l, glaunch_t *gl) {
  gl->node = l->node;
  const kiln_artifact_t *art;
  KILN_RETURN_IF_ERROR(kiln_dworker_module_get(w, l->module, &gl->mod, &art));
  if (l->kernel >= art->num_kernels)
    return KILN_STATUS(KILN_E_INTERNAL, "graph job names kernel %u of %u", l->kernel, art->num_kernels);
  const kiln_kernel_t *k = &art->kernels[l->kernel];
  if (l->nargs != k->num_args)
    return KILN_STATUS(KILN_E_INTERNAL, "graph job passes %u arguments; kernel '%s' takes %u", l->nargs, k->name,
                       k->num_args);
  kiln_launch_values_t *v = &gl->values;
  v->slots = calloc(l->nargs ? l->nargs : 1, sizeof(*v->slots));
  v->ptrs = calloc(l->nargs ? l->nargs : 1, sizeof(*v->ptrs));
  if (!v->slots || !v->ptrs) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  v->count = l->nargs;
  for (uint32_t i = 0; i < l->nargs; i++) {
    v->slots[i] = l->args[i].value;
    if (l->args[i].tag) {
      uint32_t r = l->args[i].tag - 1;
      if (l->args[i].value && l->args[i].value >= g->bytes[r])
        return KILN_STATUS(KILN_E_INTERNAL, "graph job: argument %u lies outside the graph's memory", i);
      v->slots[i] = w->backend->mem_address(w->dev, g->mem[r]) + l->args[i].value;
    }
    v->ptrs[i] = &v->slots[i];
  }
  kiln_status_t st = kiln_launch_prepare(k, w->backend->info(w->dev), l->grid, l->block, l->shared, v->ptrs,
                                         &gl->launch);
  if (st) {
    kiln_status_t e = KILN_STATUS(kiln_status_code(st), "node %s: %s", g->nodes[gl->node], kiln_status_message(st));
    kiln_status_free(st);
    return e;
  }
  return KILN_OK;
}

/* `bytes` from `src` at `soff` to `dst` at `doff` on this device: a memcpy where the host
 * addresses both (cpu), the backend's device-to-device copy where it has one (CUDA, HSA),
 * else through a host bounce buffer in chunks. */
static kiln_status_t dcopy(kiln_dworker_t *w, kiln_dmem_t *dst, uint64_t doff, kiln_dmem_t *src, uint64_t soff,
                           uint64_t bytes) {
  if (!bytes) return KILN_OK;
  uint8_t *hd = w->backend->mem_host_ptr(w->dev, dst), *hs = w->backend->mem_host_ptr(w->dev, src);
  if (hd && hs) {
    memmove(hd + doff, hs + soff, bytes);
    return KILN_OK;
  }
  if (w->backend->copy_device) return w->backend->copy_device(w->dev, dst, doff, src, soff, bytes);
  uint64_t chunk = bytes < (8u << 20) ? bytes : (8u << 20);
  uint8_t *bounce = malloc(chunk);
  if (!bounce) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for a copy");
  kiln_status_t st = KILN_OK;
  for (uint64_t at = 0; !st && at < bytes; at += chunk) {
    uint64_t n = bytes - at < chunk ? bytes - at : chunk;
    st = w->backend->copy_out(w->dev, src, soff + at, bounce, n);
    if (!st) st = w->backend->copy_in(w->dev, dst, doff + at, bounce, n);
  }
  free(bounce);
  return st;
}

/* Tensors of this worker copied into block `r` of the graph (constants or inputs by id).
 * A tensor freed meanwhile (its free queued before this job) is E_NOT_FOUND. */
static kiln_status_t copy_tensors(kiln_dworker_t *w, graph_t *g, int r, const kiln_graph_copy_t *c, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    kiln_dworker_buffer_t *b = kiln_map_get(&w->buffers, c[i].handle);
    if (!b)
      return KILN_STATUS(KILN_E_NOT_FOUND, "tensor %llu was freed before the graph could copy it",
                         (unsigned long long)c[i].handle);
    if (c[i].bytes > b->bytes || c[i].offset > g->bytes[r] || c[i].bytes > g->bytes[r] - c[i].offset)
      return KILN_STATUS(KILN_E_INTERNAL, "graph job: copy %u of tensor %llu out of bounds", i,
                         (unsigned long long)c[i].handle);
    KILN_RETURN_IF_ERROR(dcopy(w, g->mem[r], c[i].offset, b->mem, 0, c[i].bytes));
  }
  return KILN_OK;
}

/* The launches as one sequence, the last launch of each node marked (so a failure is
 * placed at a node). A backend that cannot make it leaves the graph to run launch by
 * launch, which gives the same results; so does KILN_GRAPH_SEQUENCE=0 in kilnd's
 * environment (to measure what sequences save, or to rule them out). */
static void make_seq(kiln_dworker_t *w, graph_t *g) {
  const char *env = getenv("KILN_GRAPH_SEQUENCE"), *marks = getenv("KILN_GRAPH_MARKS");
  if (!w->backend->seq_create || !g->num_launches || (env && strcmp(env, "0") == 0)) return;
  /* KILN_GRAPH_MARKS=0: only the last launch marked (what the marks cost; a failure is then
   * placed at the first node) */
  bool per_node = !(marks && strcmp(marks, "0") == 0);
  kiln_seq_item_t *items = calloc(g->num_launches, sizeof *items);
  if (!items) return;
  for (uint32_t i = 0; i < g->num_launches; i++)
    items[i] = (kiln_seq_item_t){.mod = g->launches[i].mod, .launch = &g->launches[i].launch,
                                 .mark = i + 1 == g->num_launches ||
                                         (per_node && g->launches[i + 1].node != g->launches[i].node)};
  kiln_status_t st = w->backend->seq_create(w->dev, items, g->num_launches, &g->seq);
  free(items);
  if (st) {
    KILN_LOG_WARN("graph_sequence_failed", "launches=%u message=\"%s\": launching one by one", g->num_launches,
                  kiln_status_message(st));
    kiln_status_free(st);
    g->seq = NULL;
  }
}

static kiln_status_t load(kiln_dworker_t *w, const kiln_graph_load_job_t *j, int fd) {
  if (j->handle == 0 || kiln_map_get(&w->graphs, j->handle))
    return KILN_STATUS(KILN_E_INTERNAL, "graph %llu exists", (unsigned long long)j->handle);
  graph_t *g = calloc(1, sizeof(*g));
  if (!g) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  kiln_status_t st = KILN_OK;
  for (int r = 0; !st && r < REGIONS; r++) {
    g->bytes[r] = j->bytes[r];
    st = w->backend->mem_alloc(w->dev, g->bytes[r] ? g->bytes[r] : 1, &g->mem[r]);
  }
  uint64_t size = g->bytes[REGION_CONSTANTS];
  if (!st && size) {
    void *map;
    st = kiln_shm_map(fd, size, false, &map);
    if (!st) {
      st = w->backend->copy_in(w->dev, g->mem[REGION_CONSTANTS], 0, map, size);
      kiln_shm_unmap(map, size);
    }
  }
  if (!st) st = copy_tensors(w, g, REGION_CONSTANTS, j->copies, j->num_copies);
  if (!st) {
    g->nodes = calloc(j->num_nodes ? j->num_nodes : 1, sizeof(*g->nodes));
    g->launches = calloc(j->num_launches ? j->num_launches : 1, sizeof(*g->launches));
    if (!g->nodes || !g->launches) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t i = 0; !st && i < j->num_nodes; i++) {
    if (!(g->nodes[i] = strdup(j->nodes[i]))) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    else g->num_nodes = i + 1;
  }
  for (uint32_t i = 0; !st && i < j->num_launches; i++) {
    g->num_launches = i + 1;
    st = prepare(w, g, &j->launches[i], &g->launches[i]);
  }
  if (!st) make_seq(w, g);
  if (!st) st = kiln_map_put(&w->graphs, j->handle, g);
  if (st) graph_free(w, g);
  return st;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The run's cell in kilnd's cancel page (docs/worker_jobs.md, launch's `cancel`): it holds
 * the run's seq once kilnd cancels it (its client has gone). */
typedef struct cancel_cell {
  const volatile uint64_t *cell;
  uint64_t seq;
  int channel;       /* graph_time: where "alive" goes between runs; -1: none */
  uint64_t alive_at; /* when the last one went */
} cancel_cell_t;

static bool cancelled(const cancel_cell_t *c) {
  return c->cell && __atomic_load_n(c->cell, __ATOMIC_RELAXED) == c->seq;
}

/* Between two runs of a graph_time, at most every 200 ms: kilnd's watchdog then bounds each
 * run by the request's deadline, whatever the number of runs (protocol/job_serve.h). */
static void between_runs(cancel_cell_t *c) {
  uint64_t now = now_ns();
  if (c->channel < 0 || now - c->alive_at < 200ull * 1000000ull) return;
  c->alive_at = now;
  kiln_status_free(kiln_job_send_alive(c->channel)); /* a broken channel ends the serve loop */
}

static kiln_status_t at_node(const graph_t *g, uint32_t launch, kiln_status_t st) {
  uint32_t i = launch < g->num_launches ? launch : g->num_launches - 1;
  kiln_status_t e = KILN_STATUS(kiln_status_code(st), "node %s: %s", g->nodes[g->launches[i].node],
                                kiln_status_message(st));
  kiln_status_free(st);
  return e;
}

typedef struct seq_progress {
  volatile uint32_t *cell;
  uint32_t launches;
} seq_progress_t;

/* The launch now running as far as the device tells, + 1, into the run's shared memory. */
static void on_progress(void *ctx, uint32_t done) {
  seq_progress_t *p = ctx;
  *p->cell = done < p->launches ? done + 1 : p->launches;
}

/* Every launch once, in order. A failure names its node; the index + 1 of the launch running
 * goes to `progress` (the run's shared memory), so that kilnd names the node of a fault that
 * ends this process before it can answer: before each launch when they go one by one (a
 * cancelled run then stops before its next launch), else as the sequence's wait sees the
 * launches finish (a submitted sequence runs to its end or its deadline). */
static kiln_status_t run_once(kiln_dworker_t *w, graph_t *g, uint64_t deadline_at, volatile uint32_t *progress,
                              const cancel_cell_t *cancel) {
  if (g->seq) {
    if (cancelled(cancel)) return KILN_STATUS(KILN_E_CANCELLED, "graph run cancelled: its client has gone");
    uint64_t left = 0;
    if (deadline_at) {
      uint64_t t = now_ns();
      if (t >= deadline_at)
        return KILN_STATUS(KILN_E_TIMEOUT, "node %s: the graph run passed its deadline",
                           g->nodes[g->launches[0].node]);
      left = deadline_at - t;
    }
    *progress = 1;
    seq_progress_t p = {.cell = progress, .launches = g->num_launches};
    uint32_t at = 0;
    kiln_status_t st = w->backend->seq_run(w->dev, g->seq, left, on_progress, &p, &at);
    return st ? at_node(g, at, st) : KILN_OK;
  }
  for (uint32_t i = 0; i < g->num_launches; i++) {
    glaunch_t *gl = &g->launches[i];
    if (cancelled(cancel)) return KILN_STATUS(KILN_E_CANCELLED, "graph run cancelled: its client has gone");
    *progress = i + 1;
    uint64_t left = 0;
    if (deadline_at) {
      uint64_t t = now_ns();
      if (t >= deadline_at)
        return KILN_STATUS(KILN_E_TIMEOUT, "node %s: the graph run passed its deadline", g->nodes[gl->node]);
      left = deadline_at - t;
    }
    kiln_status_t st = w->backend->launch(w->dev, gl->mod, &gl->launch, 1, left, NULL);
    if (st) return at_node(g, i, st);
  }
  return KILN_OK;
}

/* graph_run and graph_time: the input block after the header of the fd, outputs copied
 * into it. */
static kiln_status_t run(kiln_dworker_t *w, const kiln_graph_job_t *j, int fd, msgpack_packer *reply) {
  bool timed = j->kind == KILN_JOB_GRAPH_TIME;
  graph_t *g = kiln_map_get(&w->graphs, j->handle);
  if (!g) return KILN_STATUS(KILN_E_NOT_FOUND, "the device worker has no graph %llu", (unsigned long long)j->handle);
  uint64_t size = j->size, deadline_ms = j->deadline_ms;
  if (size < KILN_GRAPH_RUN_HEADER) return KILN_STATUS(KILN_E_INTERNAL, "graph run: shared memory too small");
  cancel_cell_t cancel = {.seq = j->cancel, .channel = timed ? w->channel : -1, .alive_at = now_ns()};
  if (cancel.seq && w->cancel_page) cancel.cell = &w->cancel_page[cancel.seq % w->cancel_cells];
  /* Queued behind other work when its client left: not run at all. */
  if (cancelled(&cancel)) return KILN_STATUS(KILN_E_CANCELLED, "cancelled before it ran (its client has gone)");
  uint8_t *map;
  KILN_RETURN_IF_ERROR(kiln_shm_map(fd, size, true, (void **)&map));
  kiln_status_t st = KILN_OK;
  uint64_t in = g->bytes[REGION_INPUTS];
  volatile uint32_t *progress = (volatile uint32_t *)map;
  if (in > size - KILN_GRAPH_RUN_HEADER) st = KILN_STATUS(KILN_E_INTERNAL, "graph run: shared memory too small");
  if (!st && in) st = w->backend->copy_in(w->dev, g->mem[REGION_INPUTS], 0, map + KILN_GRAPH_RUN_HEADER, in);
  if (!st) st = copy_tensors(w, g, REGION_INPUTS, j->inputs, j->num_inputs);
  uint64_t deadline_ns = deadline_ms * 1000000ull;
  if (!st && !timed) {
    uint64_t t0 = now_ns();
    st = run_once(w, g, deadline_ns ? t0 + deadline_ns : 0, progress, &cancel);
    double elapsed = (double)(now_ns() - t0) / 1e9;
    uint32_t kept = 0;
    for (uint32_t i = 0; !st && i < j->num_outputs; i++) {
      const kiln_graph_output_t *o = &j->outputs[i];
      if (o->offset > g->bytes[o->block] || o->bytes > g->bytes[o->block] - o->offset ||
          (!o->keep && (o->at > size || o->bytes > size - o->at)))
        st = KILN_STATUS(KILN_E_INTERNAL, "graph run: output %u out of bounds", i);
      if (!st && o->keep) {
        /* a new tensor of kilnd's id: nothing partial stays if a later one fails */
        kiln_dworker_buffer_t *b;
        st = kiln_dworker_buffer_alloc(w, o->keep, o->bytes ? o->bytes : 1, &b);
        if (!st) kept = i + 1;
        if (!st) st = dcopy(w, b->mem, 0, g->mem[o->block], o->offset, o->bytes);
      } else if (!st && o->bytes) {
        st = w->backend->copy_out(w->dev, g->mem[o->block], o->offset, map + o->at, o->bytes);
      }
    }
    for (uint32_t i = 0; st && i < kept; i++)
      if (j->outputs[i].keep) kiln_dworker_buffer_free(w, j->outputs[i].keep);
    if (!st) kiln_launch_reply_encode(reply, &(kiln_launch_reply_t){.elapsed = elapsed});
  } else if (!st) {
    /* time_evaluator (device/timing.h's rules) over whole runs, timed on this worker's clock
     * from the first launch's start to the last one's end. */
    kiln_time_config_t cfg;
    kiln_time_config_default(&cfg);
    cfg.number = j->number;
    cfg.repeat = j->repeat;
    cfg.min_repeat_ms = j->min_repeat_ms;
    cfg.warmup = j->warmup;
    cfg.flush = j->flush;
    if (cfg.number == 0 || cfg.repeat == 0)
      st = KILN_STATUS(KILN_E_INTERNAL, "graph job: number and repeat must be at least 1");
    double *results = st ? NULL : calloc(cfg.repeat, sizeof(double));
    if (!st && !results) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    for (uint32_t i = 0; !st && i < cfg.warmup; i++) {
      st = run_once(w, g, deadline_ns ? now_ns() + deadline_ns : 0, progress, &cancel);
      between_runs(&cancel);
    }
    uint32_t number = cfg.number;
    for (uint32_t r = 0; !st && r < cfg.repeat; r++) {
      /* A short measurement is timed again from its first run (flushed again if asked) or,
       * past KILN_TIME_CONTINUE_FROM of min_repeat_ms, continued with the runs it lacks. */
      uint32_t runs = 0, call = number;
      double ms = 0;
      bool again = true;
      for (;;) {
        if (again && cfg.flush) st = w->backend->flush_caches(w->dev);
        uint64_t t0 = now_ns();
        for (uint32_t i = 0; !st && i < call; i++) {
          st = run_once(w, g, deadline_ns ? now_ns() + deadline_ns : 0, progress, &cancel);
          between_runs(&cancel);
        }
        if (st) break;
        ms += (double)(now_ns() - t0) / 1e6;
        runs += call;
        if (!cfg.min_repeat_ms || ms >= cfg.min_repeat_ms) break;
        uint32_t next = kiln_time_grow_number(runs, ms > 0 ? ms : 1e-6, cfg.min_repeat_ms);
        if (next <= runs) break;
        again = !kiln_time_continues(ms, cfg.min_repeat_ms);
        call = again ? next : next - runs;
        if (again) runs = 0, ms = 0;
      }
      if (st) break;
      number = runs;
      results[r] = ms / 1e3 / runs;
    }
    if (!st) {
      kiln_time_stats_t stats;
      kiln_time_stats_compute(results, cfg.repeat, &stats);
      kiln_time_reply_t tr = {.repeat = cfg.repeat, .results = results, .min = stats.min, .median = stats.median,
                              .mean = stats.mean, .std = stats.std, .cv = stats.cv, .number = number};
      kiln_time_reply_encode(reply, &tr);
    }
    free(results);
  }
  kiln_shm_unmap(map, size);
  return st;
}

kiln_status_t kiln_dworker_graph_job(kiln_dworker_t *w, kiln_job_call_t *call, bool *out_found) {
  *out_found = true;
  int fd = call->nfds ? call->fds[0] : -1;
  switch (call->kind) {
    case KILN_JOB_GRAPH_LOAD: {
      kiln_graph_load_job_t j;
      KILN_RETURN_IF_ERROR(kiln_graph_load_job_decode(call->job, &j));
      kiln_status_t st = load(w, &j, fd);
      kiln_graph_load_job_deinit(&j);
      if (!st) msgpack_pack_nil(call->reply);
      return st;
    }
    case KILN_JOB_GRAPH_RUN:
    case KILN_JOB_GRAPH_TIME:
    case KILN_JOB_GRAPH_FREE: {
      kiln_graph_job_t j;
      KILN_RETURN_IF_ERROR(kiln_graph_job_decode(call->kind, call->job, &j));
      kiln_status_t st = KILN_OK;
      if (j.kind == KILN_JOB_GRAPH_FREE) {
        graph_t *g = kiln_map_remove(&w->graphs, j.handle);
        if (g) graph_free(w, g);
        msgpack_pack_nil(call->reply);
      } else {
        st = run(w, &j, fd, call->reply);
      }
      kiln_graph_job_deinit(&j);
      return st;
    }
    default:
      *out_found = false;
      return KILN_OK;
  }
}
