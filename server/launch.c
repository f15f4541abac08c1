/* launch and time: check the request against the module's kernel table and the tenant's
 * tensors, make sure the device worker has the module loaded, and pass the launch on. The
 * worker converts argument values to the kernel's types (device/launch.h) and runs it. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "protocol/channel.h"
#include "server/compile.h"
#include "server/metrics.h"
#include "server/request.h"

typedef struct launch_op {
  kiln_req_t *req;
  kiln_dslot_t *slot;
  struct launch_op *prev, *next; /* in slot->ops while the worker has it */
  uint8_t key[KILN_HASH_BYTES];
  const char *method;
  uint64_t budget_ms; /* the watchdog's budget (launch only; 0 = none) */
  uint64_t seq;       /* its cell in the slot's cancel page */
  kiln_buf_t params;
} launch_op_t;

static void op_free(launch_op_t *op) {
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

static void on_reply(void *ctx, kiln_status_t st, const msgpack_object *result) {
  launch_op_t *op = ctx;
  kiln_server_t *s = op->req->conn->server;
  ops_remove(op->slot, op);
  op->slot->tenant->launches--;
  kiln_device_run_done(s, op->slot->device);
  if (st) {
    kiln_req_fail(op->req, st);
  } else {
    kiln_buf_t b;
    kiln_buf_init(&b);
    kiln_packer_t pk;
    kiln_packer_init(&pk, &b);
    kiln_rpc_pack_result_head(&pk.pk, op->req->msgid);
    msgpack_pack_object(&pk.pk, *result);
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

/* Sends `method` with params [{module?, size, fds: 1}] and the shared memory `fd` (closed by
 * this call either way). */
static kiln_status_t call_with_shm(kiln_worker_t *w, const char *method, const char *module,
                                   uint64_t size, int fd, kiln_worker_cb cb, void *ctx) {
  kiln_buf_t params;
  kiln_buf_init(&params);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &params);
  msgpack_pack_array(&pk.pk, 1);
  msgpack_pack_map(&pk.pk, module ? 3 : 2);
  if (module) kiln_pack_kv_str(&pk.pk, "module", module);
  kiln_pack_kv_u64(&pk.pk, "size", size);
  kiln_pack_kv_u64(&pk.pk, "fds", 1);
  kiln_status_t st = kiln_packer_status(&pk);
  if (st) close(fd);
  else st = kiln_worker_call(w, method, &params, &fd, 1, cb, ctx);
  kiln_buf_deinit(&params);
  return st;
}

static kiln_status_t ensure_loaded(kiln_dslot_t *d, kiln_module_t *m) {
  uint64_t k;
  memcpy(&k, m->key, sizeof(k));
  k = (k & 0x7fffffffffffffffULL) | 1;
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
  kiln_status_t st = call_with_shm(d->worker, "load", m->hex, m->len, fd, on_load_reply, op);
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
static kiln_status_t ensure_cancel_page(kiln_dslot_t *d) {
  uint32_t gen = kiln_worker_generation(d->worker);
  if (d->cancel_page && d->cancel_sent == gen + 1) return KILN_OK;
  int fd;
  void *map;
  KILN_RETURN_IF_ERROR(kiln_shm_create("kiln-cancel", KILN_CANCEL_PAGE_BYTES, &fd, &map));
  if (d->cancel_page) kiln_shm_unmap(d->cancel_page, KILN_CANCEL_PAGE_BYTES);
  d->cancel_page = map;
  d->cancel_sent = 0;
  KILN_RETURN_IF_ERROR(
      call_with_shm(d->worker, "cancel_page", NULL, KILN_CANCEL_PAGE_BYTES, fd, ignore_reply, NULL));
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
  kiln_module_t *m = NULL;
  if (!st) {
    char hex[2 * KILN_HASH_BYTES + 1];
    kiln_hex(op->key, KILN_HASH_BYTES, hex);
    st = kiln_module_find(s, NULL, hex, 2 * KILN_HASH_BYTES, &m);
  }
  if (!st) st = ensure_loaded(op->slot, m);
  if (!st) st = ensure_cancel_page(op->slot);
  if (!st)
    st = kiln_worker_call_budget(op->slot->worker, op->method, &op->params, NULL, 0, op->budget_ms, on_reply, op);
  if (!st) {
    ops_add(op->slot, op);
    kiln_metrics_launch(op->slot->device, op->slot->tenant, op->method[0] == 't');
  }
  if (st) {
    op->slot->tenant->launches--;
    kiln_device_run_done(s, op->slot->device);
    kiln_req_fail(op->req, st);
    op_free(op);
  }
}

static kiln_status_t start(kiln_call_t *call, bool timed) {
  const char *method = timed ? "time" : "launch";
  kiln_launch_params_t lp;
  KILN_RETURN_IF_ERROR(kiln_launch_params_parse(call->params, timed, &lp));
  const char *hex = lp.module, *kname = lp.kernel, *dev = lp.device;
  uint32_t hlen = lp.module_len, klen = lp.kernel_len, dlen = lp.device_len;
  kiln_device_entry_t *d = kiln_device_find(call->server, dev, dlen);
  if (!d)
    return KILN_STATUS(KILN_E_NOT_FOUND, "no device '%.*s' on this server; `devices` lists them",
                       (int)(dlen < 32 ? dlen : 32), dev);
  kiln_tenant_t *tenant = call->conn->tenant;
  KILN_RETURN_IF_ERROR(kiln_device_permit(d, tenant));
  bool wait = lp.wait;
  kiln_module_t *m;
  KILN_RETURN_IF_ERROR(kiln_module_find(call->server, tenant, hex, hlen, &m));
  if (strcmp(format_kind(m->art.format), d->kind) != 0)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "module %.16s was compiled for %s; device %s runs %s code: compile for "
                       "target \"%s\"",
                       m->hex, m->art.target, d->id, d->kind, d->id);
  char name[128];
  if (klen >= sizeof(name)) return KILN_STATUS(KILN_E_NOT_FOUND, "kernel name too long");
  memcpy(name, kname, klen);
  name[klen] = 0;
  const kiln_kernel_t *k = kiln_artifact_kernel(&m->art, name);
  if (!k) return KILN_STATUS(KILN_E_NOT_FOUND, "module %.16s has no kernel '%s'", m->hex, name);
  const msgpack_object_array *args = lp.args;
  if (args->size != k->num_args)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "kernel '%s' takes %u arguments; %u were given",
                       name, k->num_args, args->size);
  for (uint32_t i = 0; i < args->size; i++) {
    const msgpack_object *a = &args->ptr[i];
    bool is_ptr = k->args[i].type == KILN_ARG_PTR;
    if (a->type == MSGPACK_OBJECT_MAP) {
      static const char *const afields[] = {"tensor", NULL};
      KILN_RETURN_IF_ERROR(kiln_params_check(a, "argument", afields));
      uint64_t id;
      KILN_RETURN_IF_ERROR(kiln_params_u64(a, "tensor", true, &id));
      kiln_tensor_t *t;
      KILN_RETURN_IF_ERROR(kiln_tensor_lookup(call, id, &t));
      if (t->device != d)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                           "argument %u: tensor %llu lives on %s, the launch runs on %s", i,
                           (unsigned long long)id, t->device->id, d->id);
      if (!is_ptr)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                           "argument %u (\"%s\") is a %s, not a pointer: pass a number", i,
                           k->args[i].name, kiln_arg_type_name(k->args[i].type));
    } else if (is_ptr) {
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "argument %u (\"%s\") is a pointer: pass {\"tensor\": id}", i,
                         k->args[i].name);
    }
  }
  KILN_RETURN_IF_ERROR(kiln_quota_check(tenant, "launches", tenant->launches, 1,
                                        tenant->quotas.launches));
  kiln_dslot_t *slot;
  KILN_RETURN_IF_ERROR(kiln_device_slot(call->server, d, tenant, &slot));
  /* The worker gets the params as sent (tensor ids are its buffer handles) with the module
   * id normalised and the fields only kilnd reads left out. */
  launch_op_t *op = calloc(1, sizeof(*op));
  if (!op) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  kiln_buf_init(&op->params);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &op->params);
  msgpack_pack_array(&pk.pk, 1);
  const msgpack_object *p = call->params;
  static const char *const local[] = {"device", "module", "wait", "timeout_ms"};
  uint32_t n = 0;
  for (uint32_t i = 0; i < p->via.map.size; i++) {
    bool skip = false;
    for (size_t j = 0; j < KILN_ARRAY_SIZE(local); j++) skip |= kiln_obj_str_eq(&p->via.map.ptr[i].key, local[j]);
    n += !skip;
  }
  /* The deadline: the worker stops the kernel's run at it where the device can (work-groups
   * not yet started on the cpu, the completion wait on GPUs) and answers E_TIMEOUT; kilnd's
   * watchdog ends a worker that stays silent past it (a kernel that never returns). */
  uint64_t timeout_ms = lp.timeout_ms ? lp.timeout_ms : (uint64_t)(call->server->cfg.launch_timeout_s * 1000.0);
  op->seq = ++slot->cancel_seq;
  msgpack_pack_map(&pk.pk, n + 2 + (timeout_ms ? 1 : 0));
  kiln_pack_kv_str(&pk.pk, "module", m->hex);
  kiln_pack_kv_u64(&pk.pk, "cancel", op->seq);
  if (timeout_ms) kiln_pack_kv_u64(&pk.pk, "deadline_ms", timeout_ms);
  for (uint32_t i = 0; i < p->via.map.size; i++) {
    const msgpack_object_kv *kv = &p->via.map.ptr[i];
    bool skip = false;
    for (size_t j = 0; j < KILN_ARRAY_SIZE(local); j++) skip |= kiln_obj_str_eq(&kv->key, local[j]);
    if (skip) continue;
    msgpack_pack_object(&pk.pk, kv->key);
    msgpack_pack_object(&pk.pk, kv->val);
  }
  kiln_status_t st = kiln_packer_status(&pk);
  if (st) {
    op_free(op);
    return st;
  }
  op->req = call->req;
  op->slot = slot;
  op->method = method;
  op->budget_ms = timed ? 0 : timeout_ms; /* a `time` call runs many launches: no watchdog */
  memcpy(op->key, m->key, KILN_HASH_BYTES);
  bool now;
  /* Waiting behind another tenant's lease counts against the same timeout (the kernel gets
   * its whole deadline once it starts). */
  st = kiln_device_gate(call->server, d, tenant, call->conn, wait, timeout_ms, launch_go, op, &now);
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
