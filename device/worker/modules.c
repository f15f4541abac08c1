/* Module jobs in the device worker (protocol/job_module.h): load (artifact bytes in a
 * memfd), unload, cancel_page, launch and time. kilnd converted the arguments to the
 * kernel's types (device/launch.h) before it built the job; the worker puts its buffers'
 * addresses in the tensor slots and checks the geometry against its device's limits
 * (kiln_launch_prepare). Timing statistics are device/timing.h's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "device/launch.h"
#include "device/timing.h"
#include "device/worker/worker.h"
#include "protocol/job_module.h"
#include "protocol/job_serve.h"
#include "protocol/payload.h"

typedef struct module {
  uint8_t key[KILN_HASH_BYTES];
  char *load_error; /* why loading failed: reported by every launch of it until unloaded */
  kiln_artifact_t art;
  kiln_dmodule_t *mod;
} module_t;

static module_t *lookup(kiln_dworker_t *w, const uint8_t key[KILN_HASH_BYTES]) {
  module_t *m = kiln_map_get(&w->modules, kiln_module_key64(key));
  return m && memcmp(m->key, key, KILN_HASH_BYTES) == 0 ? m : NULL;
}

static kiln_status_t find_module(kiln_dworker_t *w, const uint8_t key[KILN_HASH_BYTES],
                                 module_t **out) {
  module_t *m = lookup(w, key);
  char hex[2 * KILN_HASH_BYTES + 1];
  kiln_hex(key, KILN_HASH_BYTES, hex);
  if (!m) return KILN_STATUS(KILN_E_INTERNAL, "module %.16s is not loaded in the device worker", hex);
  if (m->load_error)
    return KILN_STATUS(KILN_E_DEVICE, "module %.16s could not be loaded: %s", hex, m->load_error);
  *out = m;
  return KILN_OK;
}

kiln_status_t kiln_dworker_module_get(kiln_dworker_t *w, const uint8_t key[KILN_HASH_BYTES],
                                      kiln_dmodule_t **out_mod, const kiln_artifact_t **out_art) {
  module_t *m;
  KILN_RETURN_IF_ERROR(find_module(w, key, &m));
  *out_mod = m->mod;
  *out_art = &m->art;
  return KILN_OK;
}

static void module_free(kiln_dworker_t *w, module_t *m) {
  if (m->mod) w->backend->module_unload(w->dev, m->mod);
  free(m->load_error);
  kiln_artifact_deinit(&m->art);
  free(m);
}

void kiln_dworker_modules_deinit(kiln_dworker_t *w) {
  size_t it = 0;
  void *v;
  while (kiln_map_next(&w->modules, &it, NULL, &v)) module_free(w, v);
  kiln_map_deinit(&w->modules);
  if (w->cancel_page) kiln_shm_unmap((void *)w->cancel_page, w->cancel_cells * 8);
  w->cancel_page = NULL;
}

static kiln_status_t do_load(kiln_dworker_t *w, const kiln_module_job_t *j, int fd) {
  if (lookup(w, j->module)) return KILN_OK; /* already loaded */
  void *bytes;
  KILN_RETURN_IF_ERROR(kiln_shm_map(fd, j->size, false, &bytes));
  module_t *m = calloc(1, sizeof(*m));
  kiln_status_t st = m ? kiln_artifact_decode(bytes, j->size, &m->art)
                       : KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  kiln_shm_unmap(bytes, j->size);
  if (st) {
    free(m);
    return st;
  }
  memcpy(m->key, j->module, KILN_HASH_BYTES);
  st = w->backend->module_load(w->dev, &m->art, &m->mod);
  if (st) {
    m->mod = NULL;
    m->load_error = strdup(kiln_status_message(st));
  }
  kiln_status_t put = kiln_map_put(&w->modules, kiln_module_key64(j->module), m);
  if (put) {
    module_free(w, m);
    kiln_status_free(st);
    return put;
  }
  return st;
}

/* The job's argument slots: values as kilnd converted them, buffers' device addresses for
 * tensors. */
static kiln_status_t fill_args(kiln_dworker_t *w, const kiln_launch_job_t *j, const kiln_kernel_t *k,
                               kiln_launch_values_t *v) {
  if (j->nargs != k->num_args)
    return KILN_STATUS(KILN_E_INTERNAL, "launch job has %u arguments; kernel '%s' takes %u",
                       j->nargs, k->name, k->num_args);
  memset(v, 0, sizeof(*v));
  v->slots = calloc(j->nargs ? j->nargs : 1, sizeof(*v->slots));
  v->ptrs = calloc(j->nargs ? j->nargs : 1, sizeof(*v->ptrs));
  if (!v->slots || !v->ptrs) {
    kiln_launch_values_deinit(v);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for %u launch arguments", j->nargs);
  }
  for (uint32_t i = 0; i < j->nargs; i++) {
    v->slots[i] = j->args[i].value;
    if (j->args[i].tensor) {
      kiln_dworker_buffer_t *b = kiln_map_get(&w->buffers, j->args[i].value);
      if (!b) {
        kiln_launch_values_deinit(v);
        return KILN_STATUS(KILN_E_INTERNAL, "argument %u names no buffer of this worker", i);
      }
      v->slots[i] = w->backend->mem_address(w->dev, b->mem);
    }
    v->ptrs[i] = &v->slots[i];
  }
  v->count = j->nargs;
  return KILN_OK;
}

/* The launch or timing's cell in the cancel page, when it has one; for a timing also the
 * channel on which its runs say they make progress. */
typedef struct cancel_cell {
  const volatile uint64_t *cell;
  uint64_t seq;
  int channel;       /* -1: no heartbeat */
  uint64_t alive_at; /* when the last "alive" went */
} cancel_cell_t;

/* Between two runs at most this often: kilnd's watchdog then bounds each run of a `time` by
 * its deadline plus this plus its grace, whatever the number of runs. */
#define ALIVE_EVERY_NS (200ull * 1000000ull)

static bool is_cancelled(void *ctx) {
  cancel_cell_t *c = ctx;
  if (c->channel >= 0) {
    uint64_t now = kiln_now_ns();
    if (now - c->alive_at >= ALIVE_EVERY_NS) {
      c->alive_at = now;
      /* A broken channel ends the serve loop at the reply; nothing to do here. */
      kiln_status_free(kiln_job_send_alive(c->channel));
    }
  }
  return c->cell && __atomic_load_n(c->cell, __ATOMIC_RELAXED) == c->seq;
}

static kiln_status_t map_cancel_page(kiln_dworker_t *w, const kiln_module_job_t *j, int fd) {
  if (j->size < 8 || j->size > (1u << 20))
    return KILN_STATUS(KILN_E_INTERNAL, "cancel_page needs a size of 8 bytes to 1 MiB");
  void *map;
  KILN_RETURN_IF_ERROR(kiln_shm_map(fd, j->size, false, &map));
  if (w->cancel_page) kiln_shm_unmap((void *)w->cancel_page, w->cancel_cells * 8);
  w->cancel_page = map;
  w->cancel_cells = j->size / 8;
  return KILN_OK;
}

static kiln_status_t time_it(kiln_dworker_t *w, const kiln_launch_job_t *j, module_t *m,
                             const kiln_launch_t *launch, cancel_cell_t *cancel,
                             msgpack_packer *reply) {
  kiln_time_config_t cfg;
  kiln_time_config_default(&cfg);
  cfg.number = j->number;
  cfg.repeat = j->repeat;
  cfg.min_repeat_ms = j->min_repeat_ms;
  cfg.warmup = j->warmup;
  cfg.flush = j->flush;
  cfg.deadline_ns = j->deadline_ms * 1000000ull;
  cfg.cancelled = is_cancelled;
  cfg.cancel_ctx = cancel;
  kiln_time_result_t r;
  KILN_RETURN_IF_ERROR(kiln_time_evaluate(w->backend, w->dev, m->mod, launch, &cfg, &r));
  kiln_time_reply_t tr = {.repeat = r.repeat, .results = r.results, .min = r.stats.min,
                          .median = r.stats.median, .mean = r.stats.mean, .std = r.stats.std,
                          .cv = r.stats.cv, .number = r.number};
  kiln_time_reply_encode(reply, &tr);
  kiln_time_result_deinit(&r);
  return KILN_OK;
}

static kiln_status_t run(kiln_dworker_t *w, const kiln_launch_job_t *j, msgpack_packer *reply) {
  cancel_cell_t cancel = {.seq = j->cancel, .channel = -1};
  if (j->kind == KILN_JOB_TIME) cancel.channel = w->channel;
  if (cancel.seq && w->cancel_page) cancel.cell = &w->cancel_page[cancel.seq % w->cancel_cells];
  /* Queued behind other work when its client left: not run at all. */
  if (is_cancelled(&cancel))
    return KILN_STATUS(KILN_E_CANCELLED, "cancelled before it ran (its client has gone)");
  module_t *m = NULL;
  KILN_RETURN_IF_ERROR(find_module(w, j->module, &m));
  if (j->kernel >= m->art.num_kernels)
    return KILN_STATUS(KILN_E_INTERNAL, "launch job names kernel %u of %u", j->kernel,
                       m->art.num_kernels);
  const kiln_kernel_t *k = &m->art.kernels[j->kernel];
  kiln_launch_values_t values;
  KILN_RETURN_IF_ERROR(fill_args(w, j, k, &values));
  kiln_launch_t launch;
  /* The geometry against this device's limits: only the worker knows them. */
  kiln_status_t st = kiln_launch_prepare(k, w->backend->info(w->dev), j->grid, j->block, j->shared,
                                         values.ptrs, &launch);
  if (!st && j->kind == KILN_JOB_LAUNCH) {
    uint64_t elapsed = 0;
    st = w->backend->launch(w->dev, m->mod, &launch, 1, j->deadline_ms * 1000000ull, &elapsed);
    if (!st) kiln_launch_reply_encode(reply, &(kiln_launch_reply_t){.elapsed = (double)elapsed / 1e9});
  } else if (!st) {
    st = time_it(w, j, m, &launch, &cancel, reply);
  }
  kiln_launch_values_deinit(&values);
  return st;
}

kiln_status_t kiln_dworker_module_job(kiln_dworker_t *w, kiln_job_call_t *call, bool *out_found) {
  *out_found = true;
  int fd = call->nfds ? call->fds[0] : -1;
  switch (call->kind) {
    case KILN_JOB_LOAD:
    case KILN_JOB_UNLOAD:
    case KILN_JOB_CANCEL_PAGE: {
      kiln_module_job_t j;
      KILN_RETURN_IF_ERROR(kiln_module_job_decode(call->kind, call->job, &j));
      if (j.kind == KILN_JOB_LOAD) KILN_RETURN_IF_ERROR(do_load(w, &j, fd));
      else if (j.kind == KILN_JOB_CANCEL_PAGE) KILN_RETURN_IF_ERROR(map_cancel_page(w, &j, fd));
      else {
        module_t *m = lookup(w, j.module);
        if (m) module_free(w, kiln_map_remove(&w->modules, kiln_module_key64(j.module)));
      }
      msgpack_pack_nil(call->reply);
      return KILN_OK;
    }
    case KILN_JOB_LAUNCH:
    case KILN_JOB_TIME: {
      kiln_launch_job_t j;
      KILN_RETURN_IF_ERROR(kiln_launch_job_decode(call->kind, call->job, &j));
      kiln_status_t st = run(w, &j, call->reply);
      kiln_launch_job_deinit(&j);
      return st;
    }
    default:
      *out_found = false;
      return KILN_OK;
  }
}
