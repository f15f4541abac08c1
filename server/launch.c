/* launch and time: check the request against the module's kernel table and the tenant's
 * tensors, convert the argument values to the kernel's types (device/launch.h), make sure
 * the device worker has the module loaded, and send it the typed job
 * (protocol/job_module.h). The worker checks the geometry against its device and runs it. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/launch.h"
#include "protocol/channel.h"
#include "protocol/job_module.h"
#include "protocol/payload.h"
#include "server/modules.h"
#include "server/metrics.h"
#include "server/request.h"

typedef struct launch_op {
  kiln_req_t *req;
  kiln_dslot_t *slot;
  struct launch_op *prev, *next; /* in slot->ops while the worker has it */
  kiln_module_t *module; /* a reference, held until the op ends */
  kiln_job_kind_t kind; /* KILN_JOB_LAUNCH or KILN_JOB_TIME */
  uint64_t budget_ms; /* the watchdog's budget: one run's deadline */
  uint64_t seq;       /* its cell in the slot's cancel page */
  kiln_buf_t params;  /* the job (protocol/job_module.h) */
} launch_op_t;

static void op_free(launch_op_t *op) {
  kiln_module_release(op->module);
  kiln_buf_deinit(&op->params);
  free(op);
}

static void ops_add(kiln_dslot_t *sl, launch_op_t *op) {
  op->prev = NULL;
  op->next = sl->ops;
  if (sl->ops) sl->ops->prev = op;
  sl->ops = op;
}

static void ops_remove(kiln_dslot_t *sl, launch_op_t *op) {
  if (op->prev) op->prev->next = op->next;
  else sl->ops = op->next;
  if (op->next) op->next->prev = op->prev;
  op->prev = op->next = NULL;
}

kiln_status_t kiln_pack_time_result(msgpack_packer *pk, const msgpack_object *result) {
  kiln_time_reply_t r;
  KILN_RETURN_IF_ERROR(kiln_time_reply_decode(result, &r));
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_key(&m, "results");
  msgpack_pack_array(pk, r.repeat);
  for (uint32_t i = 0; i < r.repeat; i++) msgpack_pack_double(pk, r.results[i]);
  kiln_fields_f64(&m, "min", r.min);
  kiln_fields_f64(&m, "median", r.median);
  kiln_fields_f64(&m, "mean", r.mean);
  kiln_fields_f64(&m, "std", r.std);
  kiln_fields_f64(&m, "cv", r.cv);
  kiln_fields_u64(&m, "number", r.number);
  kiln_fields_u64(&m, "repeat", r.repeat);
  kiln_fields_end(&m);
  kiln_time_reply_deinit(&r);
  return KILN_OK;
}

static void on_reply(void *ctx, kiln_status_t st, const msgpack_object *result) {
  launch_op_t *op = ctx;
  kiln_server_t *s = op->req->conn->server;
  ops_remove(op->slot, op);
  op->slot->tenant->launches--;
  kiln_device_run_done(s, op->slot->device);
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &b);
  kiln_rpc_pack_result_head(&pk.pk, op->req->msgid);
  if (!st && op->kind == KILN_JOB_LAUNCH) {
    kiln_launch_reply_t r;
    st = kiln_launch_reply_decode(result, &r);
    if (!st) {
      kiln_fields_t m;
      kiln_fields_begin(&m, &pk.pk);
      kiln_fields_f64(&m, "elapsed", r.elapsed);
      kiln_fields_end(&m);
      kiln_metrics_device_seconds(op->slot->device, op->slot->tenant, r.elapsed);
    }
  } else if (!st) {
    st = kiln_pack_time_result(&pk.pk, result);
    kiln_time_reply_t r;
    kiln_status_t d = st ? NULL : kiln_time_reply_decode(result, &r); /* it decoded just above */
    if (!st && !d) {
      kiln_metrics_device_seconds(op->slot->device, op->slot->tenant, r.mean * r.number * r.repeat);
      kiln_time_reply_deinit(&r);
    }
    kiln_status_free(d);
  }
  if (!st) st = kiln_packer_status(&pk);
  if (st) {
    kiln_buf_deinit(&b);
    kiln_req_fail(op->req, st);
  } else {
    kiln_req_reply(op->req, &b, NULL, 0, NULL, NULL);
  }
  op_free(op);
}

typedef struct load_op {
  kiln_dslot_t *device;
  uint64_t key64;
} load_op_t;

static void on_load_reply(void *ctx, kiln_status_t st, const msgpack_object *result) {
  /* A failed load fails the launches queued behind it with the worker's message (the
   * worker remembers it); the mark is dropped so that a later launch tries again. */
  load_op_t *op = ctx;
  if (st) kiln_map_remove(&op->device->loaded, op->key64);
  (void)result;
  kiln_status_free(st);
  free(op);
}

static const char *format_kind(kiln_artifact_format_t f) {
  switch (f) {
    case KILN_FORMAT_CPU_SO: return "cpu";
    case KILN_FORMAT_HSACO: return "hsa";
    case KILN_FORMAT_PTX: return "cuda";
  }
  return "?";
}

/* Sends module job j with the shared memory `fd` (closed by this call either way). */
static kiln_status_t call_with_shm(kiln_worker_t *w, const kiln_module_job_t *j, int fd,
                                   kiln_worker_cb cb, void *ctx) {
  kiln_buf_t params;
  kiln_buf_init(&params);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &params);
  kiln_module_job_encode(&pk.pk, j);
  kiln_status_t st = kiln_packer_status(&pk);
  if (st) close(fd);
  else st = kiln_worker_call(w, kiln_job_name(j->kind), &params, &fd, 1, cb, ctx);
  kiln_buf_deinit(&params);
  return st;
}

kiln_status_t kiln_slot_ensure_loaded(kiln_dslot_t *d, const kiln_module_t *m) {
  uint64_t k = kiln_module_key64(m->key);
  uint32_t gen = kiln_worker_generation(d->worker);
  uintptr_t have = (uintptr_t)kiln_map_get(&d->loaded, k);
  if (have == (uintptr_t)gen + 1) return KILN_OK;
  int fd;
  void *map;
  KILN_RETURN_IF_ERROR(kiln_shm_create("kiln-artifact", m->len, &fd, &map));
  memcpy(map, m->bytes, m->len);
  kiln_shm_unmap(map, m->len);
  load_op_t *op = malloc(sizeof(*op));
  if (!op) {
    close(fd);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  op->device = d;
  op->key64 = k;
  kiln_module_job_t j = {.kind = KILN_JOB_LOAD, .size = m->len};
  memcpy(j.module, m->key, KILN_HASH_BYTES);
  kiln_status_t st = call_with_shm(d->worker, &j, fd, on_load_reply, op);
  if (st) {
    free(op);
    return st;
  }
  /* Marked loaded for this generation at once: launches queue behind the load in order. */
  return kiln_map_put(&d->loaded, k, (void *)((uintptr_t)kiln_worker_generation(d->worker) + 1));
}

static void ignore_reply(void *ctx, kiln_status_t st, const msgpack_object *result) {
  (void)ctx;
  (void)result;
  kiln_status_free(st);
}

/* Makes sure the slot's worker maps a cancel page: a fresh one for each worker process,
 * sent before the launches that refer to it (launches of a worker without one cannot be
 * cancelled). kilnd keeps only the mapping, no fd. */
kiln_status_t kiln_slot_ensure_cancel_page(kiln_dslot_t *d) {
  uint32_t gen = kiln_worker_generation(d->worker);
  if (d->cancel_page && d->cancel_sent == gen + 1) return KILN_OK;
  int fd;
  void *map;
  KILN_RETURN_IF_ERROR(kiln_shm_create("kiln-cancel", KILN_CANCEL_PAGE_BYTES, &fd, &map));
  if (d->cancel_page) kiln_shm_unmap(d->cancel_page, KILN_CANCEL_PAGE_BYTES);
  d->cancel_page = map;
  d->cancel_sent = 0;
  kiln_module_job_t j = {.kind = KILN_JOB_CANCEL_PAGE, .size = KILN_CANCEL_PAGE_BYTES};
  KILN_RETURN_IF_ERROR(call_with_shm(d->worker, &j, fd, ignore_reply, NULL));
  d->cancel_sent = kiln_worker_generation(d->worker) + 1;
  return KILN_OK;
}

void kiln_launches_conn_closed(kiln_server_t *s, kiln_conn_t *c) {
  for (uint32_t i = 0; i < s->num_devices; i++) {
    size_t it = 0;
    void *v;
    while (kiln_map_next(&s->devices[i].slots, &it, NULL, &v)) {
      kiln_dslot_t *sl = v;
      for (launch_op_t *op = sl->ops; op; op = op->next)
        if (op->req->conn == c && sl->cancel_page)
          /* Relaxed is enough: the worker polls the cell, and a late look costs one more run. */
          __atomic_store_n(&sl->cancel_page[op->seq % KILN_CANCEL_CELLS], op->seq, __ATOMIC_RELAXED);
    }
  }
}

/* Runs a launch that the device gate let through (now, or after a lease ended), or fails it
 * with the gate's error (its wait timed out, its connection closed, the device was revoked). */
static void launch_go(void *ctx, kiln_status_t st) {
  launch_op_t *op = ctx;
  kiln_server_t *s = op->req->conn->server;
  if (!st) st = kiln_slot_ensure_loaded(op->slot, op->module);
  if (!st) st = kiln_slot_ensure_cancel_page(op->slot);
  if (!st)
    st = kiln_worker_call_budget(op->slot->worker, kiln_job_name(op->kind), &op->params, NULL, 0,
                                 op->budget_ms, on_reply, op);
  if (!st) {
    ops_add(op->slot, op);
    kiln_metrics_launch(op->slot->device, op->slot->tenant, op->kind == KILN_JOB_TIME);
  }
  if (st) {
    op->slot->tenant->launches--;
    kiln_device_run_done(s, op->slot->device);
    kiln_req_fail(op->req, st);
    op_free(op);
  }
}

/* The launch's arguments, checked once, here: their count, each tensor the caller's and on
 * the launch's device, and every value converted to the kernel's parameter type
 * (device/launch.h). The job carries the converted slots and the tensors' handles; the
 * worker only puts its buffers' addresses in. */
static kiln_status_t job_args(kiln_call_t *call, kiln_device_entry_t *d, const kiln_kernel_t *k,
                              const msgpack_object_array *args, kiln_launch_job_t *job) {
  if (args->size != k->num_args)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "kernel '%s' takes %u arguments; %u were given",
                       k->name, k->num_args, args->size);
  kiln_launch_arg_t *in = calloc(args->size ? args->size : 1, sizeof(*in));
  job->args = calloc(args->size ? args->size : 1, sizeof(*job->args));
  kiln_status_t st = in && job->args ? KILN_OK : KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; !st && i < args->size; i++) {
    const msgpack_object *a = &args->ptr[i];
    bool is_ptr = k->args[i].type == KILN_ARG_PTR;
    if (a->type == MSGPACK_OBJECT_MAP && !is_ptr) {
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "argument %u (\"%s\") is a %s, not a pointer: pass a number", i,
                       k->args[i].name, kiln_arg_type_name(k->args[i].type));
      break;
    }
    if (a->type != MSGPACK_OBJECT_MAP && is_ptr) {
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "argument %u (\"%s\") is a pointer: pass {\"tensor\": id}", i, k->args[i].name);
      break;
    }
    switch (a->type) {
      case MSGPACK_OBJECT_POSITIVE_INTEGER: in[i] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_UINT, .u = a->via.u64}; break;
      case MSGPACK_OBJECT_NEGATIVE_INTEGER: in[i] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_INT, .i = a->via.i64}; break;
      case MSGPACK_OBJECT_FLOAT32:
      case MSGPACK_OBJECT_FLOAT64: in[i] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_FLOAT, .f = a->via.f64}; break;
      case MSGPACK_OBJECT_MAP: {
        static const char *const afields[] = {"tensor", NULL};
        uint64_t id = 0;
        kiln_tensor_t *t = NULL;
        st = kiln_params_check(a, "argument", afields);
        if (!st) st = kiln_params_u64(a, "tensor", true, &id);
        if (!st) st = kiln_tensor_lookup(call, id, &t);
        if (!st && t->device != d)
          st = KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                           "argument %u: tensor %llu lives on %s, the launch runs on %s", i,
                           (unsigned long long)id, t->device->id, d->id);
        in[i] = (kiln_launch_arg_t){.kind = KILN_LAUNCH_ARG_TENSOR};
        job->args[i] = (kiln_launch_job_arg_t){.tensor = true, .value = id};
        break;
      }
      default:
        st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "argument %u must be a number or {\"tensor\": id}", i);
    }
  }
  kiln_launch_values_t v;
  if (!st) st = kiln_launch_values_init(&v, k, in, args->size);
  if (!st) {
    for (uint32_t i = 0; i < args->size; i++)
      if (!job->args[i].tensor) job->args[i].value = v.slots[i];
    job->nargs = args->size;
    kiln_launch_values_deinit(&v);
  }
  free(in);
  if (st) {
    free(job->args);
    job->args = NULL;
  }
  return st;
}

static kiln_status_t start_module(kiln_call_t *call, bool timed, const kiln_launch_params_t *lp,
                                  kiln_device_entry_t *d, kiln_module_t *m);

static kiln_status_t start(kiln_call_t *call, bool timed) {
  kiln_launch_params_t lp;
  KILN_RETURN_IF_ERROR(kiln_launch_params_parse(call->params, timed, &lp));
  const char *hex = lp.module, *dev = lp.device;
  uint32_t hlen = lp.module_len, dlen = lp.device_len;
  kiln_device_entry_t *d = kiln_device_find(call->server, dev, dlen);
  if (!d)
    return KILN_STATUS(KILN_E_NOT_FOUND, "no device '%.*s' on this server; `devices` lists them",
                       (int)(dlen < 32 ? dlen : 32), dev);
  kiln_tenant_t *tenant = call->conn->tenant;
  KILN_RETURN_IF_ERROR(kiln_device_permit(d, tenant));
  kiln_module_t *m;
  KILN_RETURN_IF_ERROR(kiln_module_find(call->server, tenant, hex, hlen, &m));
  kiln_status_t st = start_module(call, timed, &lp, d, m);
  kiln_module_release(m); /* the op took its own reference */
  return st;
}

/* The rest of start() with the module found. */
static kiln_status_t start_module(kiln_call_t *call, bool timed, const kiln_launch_params_t *lpp,
                                  kiln_device_entry_t *d, kiln_module_t *m) {
  kiln_launch_params_t lp = *lpp;
  kiln_tenant_t *tenant = call->conn->tenant;
  if (strcmp(format_kind(m->art.format), d->kind) != 0)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "module %.16s was compiled for %s; device %s runs %s code: compile for "
                       "target \"%s\"",
                       m->hex, m->art.target, d->id, d->kind, d->id);
  char name[128];
  if (lp.kernel_len >= sizeof(name)) return KILN_STATUS(KILN_E_NOT_FOUND, "kernel name too long");
  memcpy(name, lp.kernel, lp.kernel_len);
  name[lp.kernel_len] = 0;
  const kiln_kernel_t *k = kiln_artifact_kernel(&m->art, name);
  if (!k) return KILN_STATUS(KILN_E_NOT_FOUND, "module %.16s has no kernel '%s'", m->hex, name);
  kiln_launch_job_t job = {.kind = timed ? KILN_JOB_TIME : KILN_JOB_LAUNCH,
                           .kernel = (uint32_t)(k - m->art.kernels), .shared = lp.shared,
                           .number = lp.number, .repeat = lp.repeat,
                           .min_repeat_ms = lp.min_repeat_ms, .warmup = lp.warmup,
                           .flush = lp.flush};
  memcpy(job.module, m->key, KILN_HASH_BYTES);
  memcpy(job.grid, lp.grid, sizeof(job.grid));
  memcpy(job.block, lp.block, sizeof(job.block));
  KILN_RETURN_IF_ERROR(job_args(call, d, k, lp.args, &job));
  kiln_status_t st = kiln_quota_check(tenant, "launches", tenant->launches, 1, tenant->quotas.launches);
  kiln_dslot_t *slot = NULL;
  if (!st) st = kiln_device_slot(call->server, d, tenant, &slot);
  launch_op_t *op = st ? NULL : calloc(1, sizeof(*op));
  if (!st && !op) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  if (st) {
    free(job.args);
    return st;
  }
  /* The deadline: the worker stops the kernel's run at it where the device can (work-groups
   * not yet started on the cpu, the completion wait on GPUs) and answers E_TIMEOUT; kilnd's
   * watchdog ends a worker that stays silent past it (a kernel that never returns). */
  uint64_t timeout_ms = lp.timeout_ms ? lp.timeout_ms : (uint64_t)(call->server->cfg.launch_timeout_s * 1000.0);
  op->seq = ++slot->cancel_seq;
  job.cancel = op->seq;
  job.deadline_ms = timeout_ms;
  kiln_buf_init(&op->params);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &op->params);
  kiln_launch_job_encode(&pk.pk, &job);
  free(job.args);
  st = kiln_packer_status(&pk);
  if (st) {
    op_free(op);
    return st;
  }
  op->req = call->req;
  op->slot = slot;
  op->kind = job.kind;
  /* A `time` runs many launches: its worker says "alive" between them (protocol/job_serve.h),
   * so the same budget bounds each run. */
  op->budget_ms = timeout_ms;
  op->module = kiln_module_retain(m);
  bool now;
  /* Waiting behind another tenant's lease counts against the same timeout (the kernel gets
   * its whole deadline once it starts). */
  st = kiln_device_gate(call->server, d, tenant, call->conn, lp.wait, timeout_ms, launch_go, op, &now);
  if (st) {
    op_free(op);
    return st;
  }
  tenant->launches++;
  call->async = true;
  if (now) launch_go(op, KILN_OK);
  return KILN_OK;
}

kiln_status_t kiln_method_launch(kiln_call_t *call) { return start(call, false); }
kiln_status_t kiln_method_time(kiln_call_t *call) { return start(call, true); }
