/* Modules and launches in the device worker: load (artifact bytes in a memfd), unload,
 * launch and time. Argument conversion and geometry checks are device/launch.h's; timing
 * statistics are device/timing.h's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "device/launch.h"
#include "device/timing.h"
#include "device/worker/worker.h"
#include "protocol/rpc.h"

typedef struct module {
  char key[2 * KILN_HASH_BYTES + 1];
  char *load_error; /* why loading failed: reported by every launch of it until unloaded */
  kiln_artifact_t art;
  kiln_dmodule_t *mod;
} module_t;

static kiln_status_t module_key(const msgpack_object *params, char *out, uint64_t *out_hash) {
  const msgpack_object *o = kiln_params_find(params, "module");
  if (!o) return KILN_STATUS(KILN_E_INTERNAL, "missing module");
  KILN_RETURN_IF_ERROR(kiln_obj_cstr(o, "module", out, 2 * KILN_HASH_BYTES + 1));
  *out_hash = kiln_hash_bytes64(out, strlen(out)) | 1;
  return KILN_OK;
}

static kiln_status_t find_module(kiln_dworker_t *w, const msgpack_object *params, module_t **out) {
  char key[2 * KILN_HASH_BYTES + 1];
  uint64_t h;
  KILN_RETURN_IF_ERROR(module_key(params, key, &h));
  module_t *m = kiln_map_get(&w->modules, h);
  if (!m || strcmp(m->key, key) != 0)
    return KILN_STATUS(KILN_E_INTERNAL, "module %.16s is not loaded in the device worker", key);
  if (m->load_error)
    return KILN_STATUS(KILN_E_DEVICE, "module %.16s could not be loaded: %s", key, m->load_error);
  *out = m;
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

static kiln_status_t do_load(kiln_dworker_call_t *call) {
  kiln_dworker_t *w = call->w;
  char key[2 * KILN_HASH_BYTES + 1];
  uint64_t h, size = 0;
  KILN_RETURN_IF_ERROR(module_key(call->params, key, &h));
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "size", true, &size));
  if (kiln_map_get(&w->modules, h)) return KILN_OK; /* already loaded */
  if (call->nfds < 1) return KILN_STATUS(KILN_E_INTERNAL, "load without artifact bytes");
  void *bytes;
  KILN_RETURN_IF_ERROR(kiln_shm_map(call->fds[0], size, false, &bytes));
  module_t *m = calloc(1, sizeof(*m));
  kiln_status_t st = m ? kiln_artifact_decode(bytes, size, &m->art)
                       : KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  kiln_shm_unmap(bytes, size);
  if (st) {
    free(m);
    return st;
  }
  snprintf(m->key, sizeof(m->key), "%s", key);
  st = w->backend->module_load(w->dev, &m->art, &m->mod);
  if (st) {
    m->mod = NULL;
    m->load_error = strdup(kiln_status_message(st));
  }
  kiln_status_t put = kiln_map_put(&w->modules, h, m);
  if (put) {
    module_free(w, m);
    kiln_status_free(st);
    return put;
  }
  return st;
}

static kiln_status_t dims(const msgpack_object *params, const char *name, uint32_t out[3]) {
  out[0] = out[1] = out[2] = 1;
  const msgpack_object_array *a = NULL;
  KILN_RETURN_IF_ERROR(kiln_params_array(params, name, true, &a));
  if (a->size < 1 || a->size > 3)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s must have 1 to 3 dimensions", name);
  for (uint32_t i = 0; i < a->size; i++) {
    if (a->ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a->ptr[i].via.u64 == 0 ||
        a->ptr[i].via.u64 > UINT32_MAX)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s[%u] must be an integer from 1 to 2^32-1",
                         name, i);
    out[i] = (uint32_t)a->ptr[i].via.u64;
  }
  return KILN_OK;
}

/* Decodes args: {"tensor": handle} or a number. */
static kiln_status_t decode_args(kiln_dworker_t *w, const msgpack_object *params,
                                 kiln_launch_arg_t **out, size_t *out_n) {
  const msgpack_object_array *a = NULL;
  KILN_RETURN_IF_ERROR(kiln_params_array(params, "args", true, &a));
  kiln_launch_arg_t *args = calloc(a->size ? a->size : 1, sizeof(*args));
  if (!args) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < a->size; i++) {
    const msgpack_object *o = &a->ptr[i];
    switch (o->type) {
      case MSGPACK_OBJECT_POSITIVE_INTEGER: args[i].kind = KILN_LAUNCH_ARG_UINT; args[i].u = o->via.u64; break;
      case MSGPACK_OBJECT_NEGATIVE_INTEGER: args[i].kind = KILN_LAUNCH_ARG_INT; args[i].i = o->via.i64; break;
      case MSGPACK_OBJECT_FLOAT32:
      case MSGPACK_OBJECT_FLOAT64: args[i].kind = KILN_LAUNCH_ARG_FLOAT; args[i].f = o->via.f64; break;
      case MSGPACK_OBJECT_MAP: {
        uint64_t handle = 0;
        kiln_status_t st = kiln_params_u64(o, "tensor", true, &handle);
        kiln_dworker_buffer_t *b = st ? NULL : kiln_map_get(&w->buffers, handle);
        if (!b) {
          free(args);
          kiln_status_free(st);
          return KILN_STATUS(KILN_E_INTERNAL, "argument %u names no buffer of this worker", i);
        }
        args[i].kind = KILN_LAUNCH_ARG_TENSOR;
        args[i].tensor_addr = w->backend->mem_address(w->dev, b->mem);
        break;
      }
      default:
        free(args);
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                           "argument %u must be a number or {\"tensor\": id}", i);
    }
  }
  *out = args;
  *out_n = a->size;
  return KILN_OK;
}

/* The launch or timing's cell in the cancel page, when it has one. */
typedef struct cancel_cell {
  const volatile uint64_t *cell;
  uint64_t seq;
} cancel_cell_t;

static bool is_cancelled(void *ctx) {
  const cancel_cell_t *c = ctx;
  return c->cell && __atomic_load_n(c->cell, __ATOMIC_RELAXED) == c->seq;
}

static kiln_status_t map_cancel_page(kiln_dworker_call_t *call) {
  kiln_dworker_t *w = call->w;
  uint64_t size = 0;
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "size", true, &size));
  if (call->nfds < 1 || size < 8 || size > (1u << 20))
    return KILN_STATUS(KILN_E_INTERNAL, "cancel_page needs one fd and a size of 8 bytes to 1 MiB");
  void *map;
  KILN_RETURN_IF_ERROR(kiln_shm_map(call->fds[0], size, false, &map));
  if (w->cancel_page) kiln_shm_unmap((void *)w->cancel_page, w->cancel_cells * 8);
  w->cancel_page = map;
  w->cancel_cells = size / 8;
  return KILN_OK;
}

static kiln_status_t run(kiln_dworker_call_t *call, bool timed) {
  kiln_dworker_t *w = call->w;
  cancel_cell_t cancel = {0};
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "cancel", false, &cancel.seq));
  if (cancel.seq && w->cancel_page) cancel.cell = &w->cancel_page[cancel.seq % w->cancel_cells];
  /* Queued behind other work when its client left: not run at all. */
  if (is_cancelled(&cancel))
    return KILN_STATUS(KILN_E_CANCELLED, "cancelled before it ran (its client has gone)");
  module_t *m = NULL;
  KILN_RETURN_IF_ERROR(find_module(w, call->params, &m));
  char kname[128];
  const msgpack_object *ko = kiln_params_find(call->params, "kernel");
  if (!ko) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "missing required field 'kernel'");
  KILN_RETURN_IF_ERROR(kiln_obj_cstr(ko, "kernel", kname, sizeof(kname)));
  const kiln_kernel_t *k = kiln_artifact_kernel(&m->art, kname);
  if (!k) return KILN_STATUS(KILN_E_NOT_FOUND, "module has no kernel '%s'", kname);
  uint32_t grid[3], block[3];
  KILN_RETURN_IF_ERROR(dims(call->params, "grid", grid));
  KILN_RETURN_IF_ERROR(dims(call->params, "block", block));
  uint64_t shared = 0, deadline_ms = 0;
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "shared", false, &shared));
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "deadline_ms", false, &deadline_ms));
  if (shared > UINT32_MAX) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "shared is too large");
  kiln_launch_arg_t *args = NULL;
  size_t nargs = 0;
  KILN_RETURN_IF_ERROR(decode_args(w, call->params, &args, &nargs));
  kiln_launch_values_t values;
  kiln_status_t st = kiln_launch_values_init(&values, k, args, nargs);
  free(args);
  if (st) return st;
  kiln_launch_t launch;
  st = kiln_launch_prepare(k, w->backend->info(w->dev), grid, block, (uint32_t)shared, values.ptrs,
                           &launch);
  uint64_t deadline_ns = deadline_ms * 1000000ull;
  if (!st && !timed) {
    uint64_t elapsed = 0;
    st = w->backend->launch(w->dev, m->mod, &launch, 1, deadline_ns, &elapsed);
    if (!st) {
      msgpack_pack_map(call->pk, 1);
      kiln_pack_kv_f64(call->pk, "elapsed", (double)elapsed / 1e9);
    }
  } else if (!st) {
    kiln_time_config_t cfg;
    kiln_time_config_default(&cfg);
    uint64_t v;
    v = cfg.number; st = kiln_params_u64(call->params, "number", false, &v); cfg.number = (uint32_t)v;
    v = cfg.repeat; if (!st) st = kiln_params_u64(call->params, "repeat", false, &v); cfg.repeat = (uint32_t)v;
    v = cfg.min_repeat_ms; if (!st) st = kiln_params_u64(call->params, "min_repeat_ms", false, &v);
    cfg.min_repeat_ms = (uint32_t)v;
    v = cfg.warmup; if (!st) st = kiln_params_u64(call->params, "warmup", false, &v); cfg.warmup = (uint32_t)v;
    if (!st) st = kiln_params_bool(call->params, "flush", false, &cfg.flush);
    cfg.deadline_ns = deadline_ns;
    cfg.cancelled = is_cancelled;
    cfg.cancel_ctx = &cancel;
    kiln_time_result_t r;
    if (!st) st = kiln_time_evaluate(w->backend, w->dev, m->mod, &launch, &cfg, &r);
    if (!st) {
      msgpack_pack_map(call->pk, 8);
      kiln_pack_cstr(call->pk, "results");
      msgpack_pack_array(call->pk, r.repeat);
      for (uint32_t i = 0; i < r.repeat; i++) msgpack_pack_double(call->pk, r.results[i]);
      kiln_pack_kv_f64(call->pk, "min", r.stats.min);
      kiln_pack_kv_f64(call->pk, "median", r.stats.median);
      kiln_pack_kv_f64(call->pk, "mean", r.stats.mean);
      kiln_pack_kv_f64(call->pk, "std", r.stats.std);
      kiln_pack_kv_f64(call->pk, "cv", r.stats.cv);
      kiln_pack_kv_u64(call->pk, "number", r.number);
      kiln_pack_kv_u64(call->pk, "repeat", r.repeat);
      kiln_time_result_deinit(&r);
    }
  }
  kiln_launch_values_deinit(&values);
  return st;
}

kiln_status_t kiln_dworker_module_method(kiln_dworker_call_t *call, const char *method,
                                         bool *out_found) {
  *out_found = true;
  if (strcmp(method, "load") == 0) {
    KILN_RETURN_IF_ERROR(do_load(call));
    msgpack_pack_nil(call->pk);
    return KILN_OK;
  }
  if (strcmp(method, "unload") == 0) {
    char key[2 * KILN_HASH_BYTES + 1];
    uint64_t h;
    KILN_RETURN_IF_ERROR(module_key(call->params, key, &h));
    module_t *m = kiln_map_remove(&call->w->modules, h);
    if (m) module_free(call->w, m);
    msgpack_pack_nil(call->pk);
    return KILN_OK;
  }
  if (strcmp(method, "cancel_page") == 0) {
    KILN_RETURN_IF_ERROR(map_cancel_page(call));
    msgpack_pack_nil(call->pk);
    return KILN_OK;
  }
  if (strcmp(method, "launch") == 0) return run(call, false);
  if (strcmp(method, "time") == 0) return run(call, true);
  *out_found = false;
  return KILN_OK;
}
