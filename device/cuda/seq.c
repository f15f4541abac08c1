/* Launch sequences (device.h seq_*): a graph's launches submitted back to back on the
 * device's stream with one wait at the end, captured once into a CUDA graph where the
 * driver allows (one cuGraphLaunch per run instead of a cuLaunchKernel per kernel), else
 * launched one after another on the stream. An event recorded after each marked item tells
 * the wait how far the sequence got: a fault or a hang is reported at the first item whose
 * event was not seen complete (CUDA does not say which kernel faulted). */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/util.h"
#include "device/common.h"
#include "device/cuda/backend.h"
#include "device/seq.h"

#define DEFAULT_DYNAMIC_SHARED (48u * 1024u)
/* As launch.c: poll without sleeping this long, then sleep between polls. */
#define SPIN_NS 200000u
#define SLEEP_NS 20000

typedef struct item {
  CUfunction fn;
  const kiln_launch_t *launch;
} item_t;

struct kiln_dseq {
  item_t *items;
  uint32_t count;
  kiln_seq_marks_t where; /* which items the events follow */
  CUevent *marks;         /* one per mark, recorded after its item */
  CUgraph graph;
  CUgraphExec exec; /* NULL: stream launches */
};

void kiln_cuda_seq_destroy(kiln_device_t *dev, kiln_dseq_t *s) {
  if (!s) return;
  if (s->exec) kiln_cuda.cuGraphExecDestroy(s->exec);
  if (s->graph) kiln_cuda.cuGraphDestroy(s->graph);
  for (uint32_t i = 0; s->marks && i < s->where.count; i++)
    if (s->marks[i]) kiln_cuda.cuEventDestroy(s->marks[i]);
  free(s->marks);
  kiln_seq_marks_deinit(&s->where);
  free(s->items);
  free(s);
}

/* Every item on `stream`, an event after each marked one. `flags` is cuEventRecordWithFlags'
 * (CU_EVENT_RECORD_EXTERNAL while capturing: the event becomes a node of the graph). */
static CUresult submit(kiln_dseq_t *s, CUstream stream, bool capturing, uint32_t *out_failed) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < s->count; i++) {
    const kiln_launch_t *l = s->items[i].launch;
    CUresult r = kiln_cuda.cuLaunchKernel(s->items[i].fn, l->grid[0], l->grid[1], l->grid[2], l->block[0],
                                          l->block[1], l->block[2], l->shared, stream, (void **)l->args, NULL);
    if (r == CUDA_SUCCESS && m < s->where.count && s->where.ends[m] == i + 1) {
      r = capturing ? kiln_cuda.cuEventRecordWithFlags(s->marks[m], stream, CU_EVENT_RECORD_EXTERNAL)
                    : kiln_cuda.cuEventRecord(s->marks[m], stream);
      m++;
    }
    if (r != CUDA_SUCCESS) {
      *out_failed = i;
      return r;
    }
  }
  return CUDA_SUCCESS;
}

/* Whether KILN_CUDA_GRAPHS=0 asks for stream launches (to measure what capture saves). */
static bool capture_wanted(void) {
  const char *v = getenv("KILN_CUDA_GRAPHS");
  return !(v && strcmp(v, "0") == 0);
}

/* Captures the sequence on a stream of its own (capture needs a stream that is not the
 * legacy-synchronising one launches use) into s->exec. Any failure leaves s->exec NULL: the
 * runs launch on the stream instead. */
static void capture_failed(kiln_device_t *dev, const char *step, CUresult r) {
  const char *name = NULL;
  if (kiln_cuda.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = "?";
  KILN_LOG_WARN("cuda_graph_capture_failed", "device=%s step=%s result=%s: launching on the stream", dev->info.id,
                step, name);
}

static void capture(kiln_device_t *dev, kiln_dseq_t *s) {
  if (!kiln_cuda.have_graphs || !capture_wanted()) return;
  CUresult r;
  if (!dev->capture && (r = kiln_cuda.cuStreamCreate(&dev->capture, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
    dev->capture = NULL;
    capture_failed(dev, "cuStreamCreate", r);
    return;
  }
  if ((r = kiln_cuda.cuStreamBeginCapture(dev->capture, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)) != CUDA_SUCCESS) {
    capture_failed(dev, "cuStreamBeginCapture", r);
    return;
  }
  uint32_t failed;
  r = submit(s, dev->capture, true, &failed);
  CUgraph g = NULL;
  /* Ends the capture whatever happened, so the stream is usable again. */
  CUresult e = kiln_cuda.cuStreamEndCapture(dev->capture, &g);
  if (r != CUDA_SUCCESS || e != CUDA_SUCCESS || !g) {
    if (g) kiln_cuda.cuGraphDestroy(g);
    capture_failed(dev, r != CUDA_SUCCESS ? "capturing a launch" : "cuStreamEndCapture", r != CUDA_SUCCESS ? r : e);
    return;
  }
  CUgraphExec x = NULL;
  if ((r = kiln_cuda.cuGraphInstantiate(&x, g, 0)) != CUDA_SUCCESS || !x) {
    kiln_cuda.cuGraphDestroy(g);
    capture_failed(dev, "cuGraphInstantiate", r);
    return;
  }
  s->graph = g;
  s->exec = x;
  KILN_LOG_DEBUG("cuda_graph_captured", "device=%s launches=%u marks=%u", dev->info.id, s->count, s->where.count);
}

static kiln_status_t create_steps(kiln_device_t *dev, kiln_dseq_t *s, const kiln_seq_item_t *items) {
  KILN_RETURN_IF_ERROR(kiln_seq_marks_init(&s->where, items, s->count));
  s->items = calloc(s->count, sizeof *s->items);
  s->marks = calloc(s->where.count, sizeof *s->marks);
  if (!s->items || !s->marks) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < s->count; i++) {
    const kiln_launch_t *l = items[i].launch;
    int64_t k = kiln_device_kernel_index(items[i].mod->art, l->kernel);
    if (k < 0) return KILN_STATUS(KILN_E_NOT_FOUND, "kernel \"%s\" is not in its module", l->kernel->name);
    s->items[i] = (item_t){.fn = items[i].mod->fns[k], .launch = l};
    if (l->shared > DEFAULT_DYNAMIC_SHARED)
      KILN_CU_TRY(kiln_cuda.cuFuncSetAttribute(s->items[i].fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               (int)l->shared));
  }
  for (uint32_t m = 0; m < s->where.count; m++)
    KILN_CU_TRY(kiln_cuda.cuEventCreate(&s->marks[m], CU_EVENT_DISABLE_TIMING));
  capture(dev, s);
  return KILN_OK;
}

kiln_status_t kiln_cuda_seq_create(kiln_device_t *dev, const kiln_seq_item_t *items, uint32_t count,
                                   kiln_dseq_t **out_seq) {
  kiln_dseq_t *s = calloc(1, sizeof *s);
  if (!s) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  s->count = count;
  kiln_status_t st = create_steps(dev, s, items);
  if (st) {
    kiln_cuda_seq_destroy(dev, s);
    return st;
  }
  *out_seq = s;
  return KILN_OK;
}

/* CUDA reports a fault at whichever later call sees it, never the kernel or the address: the
 * error names the kernel where the sequence was (`kernel`) and says so. */
static kiln_status_t item_error(kiln_device_t *dev, const char *kernel, CUresult r, const char *what) {
  return kiln_status_annotate(kiln_cuda_error(r, __FILE__, __LINE__, what),
                              "kernel \"%s\" or one after it on %s (the first not seen to finish; CUDA does not "
                              "report the faulting kernel or address)",
                              kernel, dev->info.id);
}

/* Drops a captured graph the driver will not launch: stream launches from now on. */
static void uncapture(kiln_device_t *dev, kiln_dseq_t *s, CUresult r) {
  capture_failed(dev, "cuGraphLaunch", r);
  kiln_cuda.cuGraphExecDestroy(s->exec);
  kiln_cuda.cuGraphDestroy(s->graph);
  s->exec = NULL;
  s->graph = NULL;
}

/* The graph, or every launch on the stream. A failure is placed at the launch that failed
 * (an earlier kernel's fault may surface at any later call). */
static kiln_status_t launch(kiln_device_t *dev, kiln_dseq_t *s, uint32_t *out_at) {
  if (s->exec) {
    CUresult r = kiln_cuda.cuGraphLaunch(s->exec, dev->stream);
    if (r != CUDA_SUCCESS && kiln_cuda_result_is_sticky(r)) {
      *out_at = 0;
      return item_error(dev, kiln_seq_marks_kernel(&s->where, 0), r, "cuGraphLaunch");
    }
    if (r != CUDA_SUCCESS) uncapture(dev, s, r);
  }
  if (!s->exec) {
    uint32_t failed = 0;
    CUresult r = submit(s, dev->stream, false, &failed);
    if (r != CUDA_SUCCESS) {
      *out_at = failed;
      return item_error(dev, kiln_seq_marks_kernel(&s->where, failed), r, "cuLaunchKernel");
    }
  }
  return KILN_OK;
}

/* A failure the stream reports while the sequence runs, placed where the marks say it was. */
static kiln_status_t run_error(kiln_device_t *dev, const kiln_seq_watch_t *w, CUresult r, uint32_t *out_at) {
  return kiln_seq_watch_place(w, item_error(dev, kiln_seq_watch_kernel(w), r, "kernel execution"), out_at);
}

kiln_status_t kiln_cuda_seq_run(kiln_device_t *dev, kiln_dseq_t *s, uint64_t deadline_ns,
                                kiln_seq_progress_cb progress, void *ctx, uint32_t *out_at) {
  kiln_seq_watch_t w;
  kiln_seq_watch_init(&w, &s->where, deadline_ns, progress, ctx);
  KILN_RETURN_IF_ERROR(launch(dev, s, out_at));
  for (;;) {
    /* every mark that has completed, in order; the stream says when all is done */
    while (w.done < s->where.count) {
      CUresult r = kiln_cuda.cuEventQuery(s->marks[w.done]);
      if (r == CUDA_ERROR_NOT_READY) break;
      if (r != CUDA_SUCCESS) return run_error(dev, &w, r, out_at);
      kiln_seq_watch_seen(&w, w.done + 1);
    }
    CUresult r = kiln_cuda.cuStreamQuery(dev->stream);
    if (r == CUDA_SUCCESS) {
      kiln_seq_watch_seen(&w, s->where.count);
      return KILN_OK;
    }
    if (r != CUDA_ERROR_NOT_READY) return run_error(dev, &w, r, out_at);
    KILN_RETURN_IF_ERROR(kiln_seq_watch_deadline(&w, out_at));
    if (kiln_now_ns() - w.start_ns < SPIN_NS) {
      sched_yield();
    } else {
      struct timespec ts = {0, SLEEP_NS};
      nanosleep(&ts, NULL);
    }
  }
}
