/* Tensor methods: alloc, upload, write, read, download, free.
 *
 * kilnd keeps only each tensor's description; the bytes live in the device worker. Bulk
 * bytes cross to and from the worker in shared-memory buffers from kilnd's pool
 * (docs/transfers.md): a large upload or write is received from the socket straight into
 * one (the reader's allocator hook) and that buffer is handed to the worker with the
 * payload's offset, so kilnd copies nothing; a small one is copied into a buffer. A read or
 * download goes from the worker into a buffer and from there straight to the socket. A
 * buffer returns to the pool when the worker has replied, or when the reply is written. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "protocol/channel.h"
#include "protocol/job_tensor.h"
#include "protocol/shm_pool.h"
#include "server/server.h"

#define KILN_MAX_TRANSFER (1ull << 30) /* largest read/download reply */
/* Pooled shared memory kept between transfers: a 256 MiB transfer each way in flight at
 * once fits, and a 1 GiB one is made fresh. */
#define KILN_SHM_POOL_BYTES (1ull << 30)
#define KILN_SHM_POOL_BUFFERS 32
#define KILN_SHM_POOL_IDLE_S 30 /* pooled memory unused this long goes back to the system */

typedef struct op {
  kiln_req_t *req;
  kiln_server_t *server;
  kiln_dslot_t *slot;
  uint32_t generation;
  uint64_t id;
  kiln_tensor_desc_t desc;
  kiln_shm_buf_t *buf; /* the bulk bytes, owned by this op until it ends */
  uint64_t len;        /* bytes of a read/download reply in buf */
  int kind;            /* OP_* */
  bool reserved;       /* alloc/upload: desc.nbytes and one tensor are charged to the tenant */
  /* While it waits behind the tenant's held launches (kiln_device_follow): */
  kiln_job_kind_t job;
  kiln_buf_t params;
  int fd;
  uint64_t offset;  /* read/download: where the reply's bytes start in the tensor */
  uint64_t charged; /* read/download: bytes charged to the tenant's transfer budget */
} op_t;

/* An alloc/upload reply on its way to the client: the tensor is given up when the reply
 * could not be sent (kiln_conn_send calls `delivered` either way). */
typedef struct reply_watch {
  kiln_server_t *server;
  kiln_conn_t *conn;
  uint64_t id;
} reply_watch_t;

/* Lost-tensor markers kept per tenant, so that a tenant that keeps crashing its worker
 * cannot grow kilnd's memory; beyond this an id answers as unknown. */
#define KILN_LOST_MARKERS_MAX 65536
_Static_assert(KILN_MAX_DEVICES <= 64, "a lost marker keeps the device index in 6 bits");

enum { OP_ALLOC, OP_UPLOAD, OP_WRITE, OP_READ, OP_DOWNLOAD, OP_FREE };

static kiln_shm_pool_t *shm_pool(kiln_server_t *s) {
  if (!s->shm_pool_ready) {
    kiln_shm_pool_init(&s->shm_pool, KILN_SHM_POOL_BYTES, KILN_SHM_POOL_BUFFERS);
    s->shm_pool_ready = true;
  }
  return &s->shm_pool;
}

static void unreserve(op_t *op) {
  if (!op->reserved) return;
  op->reserved = false;
  op->slot->tenant->tensors--;
  kiln_memory_release(op->slot->device, op->slot->tenant, op->desc.nbytes);
}

static void op_free(op_t *op) {
  unreserve(op);
  if (op->fd >= 0) close(op->fd);
  kiln_buf_deinit(&op->params);
  if (op->buf) kiln_shm_pool_put(shm_pool(op->server), op->buf);
  if (op->charged) kiln_tenant_transfer_done(op->server, op->slot->tenant, op->charged);
  free(op);
}

static void op_release(void *ctx) { op_free(ctx); }

/* The connection reader's allocator: a message of more than KILN_SHM_POOL_MIN bytes is
 * received into a pool buffer, which upload and write take over (take_payload). */
static void *reader_alloc(void *user, size_t size, size_t *out_cap, void **out_handle) {
  kiln_conn_t *c = user;
  kiln_shm_buf_t *b;
  kiln_status_t st = kiln_shm_pool_get(shm_pool(c->server), size,
                                       c->tenant ? c->tenant->index : 0, &b);
  if (st) {
    kiln_status_free(st); /* the reader falls back to its own buffer */
    return NULL;
  }
  *out_cap = (size_t)b->cap;
  *out_handle = b;
  return b->map;
}

static void reader_free(void *user, void *handle) {
  kiln_conn_t *c = user;
  kiln_shm_pool_put(shm_pool(c->server), handle);
}

void kiln_tensors_sweep(kiln_server_t *s) {
  if (s->shm_pool_ready) kiln_shm_pool_trim(&s->shm_pool, KILN_SHM_POOL_IDLE_S);
  kiln_tensors_reap(s);
}

void kiln_tensor_reader_alloc(kiln_conn_t *c, kiln_reader_alloc_t *out) {
  *out = (kiln_reader_alloc_t){.threshold = KILN_SHM_POOL_MIN,
                               .alloc_cb = reader_alloc,
                               .free_cb = reader_free,
                               .user = c};
}

static kiln_status_t device_param(kiln_call_t *call, kiln_dslot_t **out) {
  const char *id = NULL;
  uint32_t len = 0;
  KILN_RETURN_IF_ERROR(kiln_params_str(call->params, "device", false, &id, &len));
  kiln_device_entry_t *d = kiln_device_find(call->server, id, len);
  if (!d)
    return KILN_STATUS(KILN_E_NOT_FOUND, "no device '%.*s' on this server; `devices` lists them",
                       (int)(len < 32 ? len : 32), id);
  KILN_RETURN_IF_ERROR(kiln_device_permit(d, call->conn->tenant));
  return kiln_device_slot(call->server, d, call->conn->tenant, out);
}

/* Charges a new tensor of nbytes on the op's device to the calling tenant, before anything
 * is sent to a worker: pipelined allocations see each other's bytes. */
static kiln_status_t reserve(kiln_call_t *call, op_t *op) {
  kiln_tenant_t *t = call->conn->tenant;
  KILN_RETURN_IF_ERROR(kiln_quota_check(t, "tensors", t->tensors, 1, t->quotas.tensors));
  KILN_RETURN_IF_ERROR(kiln_memory_reserve(call->server, op->slot->device, t, op->desc.nbytes));
  t->tensors++;
  op->reserved = true;
  return KILN_OK;
}

static void forget(kiln_server_t *s, kiln_tensor_t *t) {
  kiln_map_remove(&s->tensors, t->id);
  s->tensor_bytes -= t->desc.nbytes;
  kiln_memory_release(t->device, t->tenant, t->desc.nbytes);
  t->tenant->tensors--;
  free(t);
}

static void worker_ignore(void *ctx, kiln_status_t st, const msgpack_object *result) {
  (void)ctx;
  (void)result;
  kiln_status_free(st);
}

/* The worker's job (protocol/job_tensor.h) as the request's params. */
static kiln_status_t pack_job(kiln_buf_t *out, const kiln_tensor_job_t *j) {
  kiln_packer_t pk;
  kiln_packer_init(&pk, out);
  kiln_tensor_job_encode(&pk.pk, j);
  return kiln_packer_status(&pk);
}

/* Forgets the tensor and has its worker free the bytes (after the work queued before). */
static kiln_status_t send_free(kiln_server_t *s, kiln_tensor_t *t, kiln_worker_cb cb, void *ctx) {
  kiln_worker_t *w = t->slot->worker;
  if (t->generation != kiln_worker_generation(w)) { /* its worker is gone, and the bytes with it */
    forget(s, t);
    return KILN_OK;
  }
  kiln_buf_t params;
  kiln_buf_init(&params);
  kiln_status_t st = pack_job(&params, &(kiln_tensor_job_t){.kind = KILN_JOB_FREE, .handle = t->id});
  forget(s, t);
  if (!st) st = kiln_worker_call(w, kiln_job_name(KILN_JOB_FREE), &params, NULL, 0, cb, ctx);
  kiln_buf_deinit(&params);
  return st;
}

kiln_status_t kiln_tensor_adopt(kiln_server_t *s, kiln_dslot_t *slot, uint32_t generation, uint64_t id,
                                const kiln_tensor_desc_t *desc) {
  kiln_tensor_t *t = calloc(1, sizeof(*t));
  if (!t || kiln_map_put(&s->tensors, id, t)) {
    free(t);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  *t = (kiln_tensor_t){.id = id, .desc = *desc, .slot = slot, .device = slot->device, .generation = generation,
                       .tenant = slot->tenant, .created_ns = kiln_now_ns()};
  s->tensor_bytes += desc->nbytes;
  return KILN_OK;
}

void kiln_tensor_drop(kiln_server_t *s, uint64_t id) {
  kiln_tensor_t *t = kiln_map_get(&s->tensors, id);
  if (t) kiln_status_free(send_free(s, t, worker_ignore, NULL));
}

void kiln_tensors_reap(kiln_server_t *s) {
  for (uint32_t i = 0; i < s->num_devices; i++) {
    size_t it = 0;
    void *v;
    while (kiln_map_next(&s->devices[i].slots, &it, NULL, &v)) {
      kiln_dslot_t *sl = v;
      uint32_t gen = kiln_worker_generation(sl->worker);
      if (sl->reaped_generation == gen) continue;
      sl->reaped_generation = gen;
      size_t jt = 0;
      uint64_t id;
      void *tv;
      while (kiln_map_next(&s->tensors, &jt, &id, &tv)) {
        kiln_tensor_t *t = tv;
        if (t->slot != sl || t->generation == gen) continue;
        kiln_tenant_t *owner = t->tenant;
        uintptr_t marker = (uintptr_t)owner->index << 6 | i; /* KILN_MAX_DEVICES fits in 6 bits */
        forget(s, t); /* removing the entry just returned is allowed */
        if (owner->lost_markers < KILN_LOST_MARKERS_MAX &&
            !kiln_map_put(&s->lost_tensors, id, (void *)marker))
          owner->lost_markers++;
      }
    }
  }
}

/* The tensor `id` of the calling tenant, on a device it may still use; a tensor whose
 * worker died since it was made is reported as lost (once). */
kiln_status_t kiln_tensor_lookup(kiln_call_t *call, uint64_t id, kiln_tensor_t **out) {
  kiln_server_t *s = call->server;
  kiln_tenant_t *me = call->conn->tenant;
  kiln_tensors_reap(s);
  kiln_tensor_t *t = kiln_map_get(&s->tensors, id);
  uintptr_t lost = t ? 0 : (uintptr_t)kiln_map_get(&s->lost_tensors, id);
  if (lost && lost >> 6 == me->index) {
    KILN_RETURN_IF_ERROR(kiln_device_permit(&s->devices[lost & 63], me));
    kiln_map_remove(&s->lost_tensors, id);
    me->lost_markers--;
    return KILN_STATUS(KILN_E_NOT_FOUND,
                       "tensor %llu was lost when its device worker died; upload it again",
                       (unsigned long long)id);
  }
  if (!t || t->tenant != me)
    return KILN_STATUS(KILN_E_NOT_FOUND, "no tensor %llu (freed, never made, or another tenant's)",
                       (unsigned long long)id);
  /* A device taken out of the tenant's tokens line is out of reach with its tensors. */
  KILN_RETURN_IF_ERROR(kiln_device_permit(t->device, me));
  *out = t;
  return KILN_OK;
}

static kiln_status_t id_param(kiln_call_t *call, kiln_tensor_t **out) {
  uint64_t id = 0;
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "id", true, &id));
  return kiln_tensor_lookup(call, id, out);
}

/* Called when an alloc/upload reply has been written, or dropped because its connection
 * closed first (kilnd cannot tell a client that left from one that is slow to read until
 * the connection ends, so a reply written to the socket counts as delivered). */
static void reply_sent(void *ctx) {
  reply_watch_t *w = ctx;
  if (w->conn->closing) {
    kiln_tensor_t *t = kiln_map_get(&w->server->tensors, w->id);
    if (t) {
      KILN_LOG_DEBUG("tensor_undelivered", "id=%llu tenant=%s bytes=%llu", (unsigned long long)w->id,
                     t->tenant->name, (unsigned long long)t->desc.nbytes);
      kiln_status_free(send_free(w->server, t, worker_ignore, NULL));
    }
  }
  free(w);
}

static void on_worker_reply(void *ctx, kiln_status_t st, const msgpack_object *result) {
  op_t *op = ctx;
  kiln_server_t *s = op->server;
  if (st) {
    kiln_req_fail(op->req, st);
    op_free(op);
    return;
  }
  reply_watch_t *watch = NULL;
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &b);
  kiln_rpc_pack_result_head(&pk.pk, op->req->msgid);
  switch (op->kind) {
    case OP_ALLOC:
    case OP_UPLOAD: {
      st = kiln_tensor_adopt(s, op->slot, op->generation, op->id, &op->desc);
      if (st) {
        kiln_buf_deinit(&b);
        kiln_req_fail(op->req, st);
        break;
      }
      kiln_tensor_t *t = kiln_map_get(&s->tensors, op->id);
      kiln_conn_t *c = op->req->conn;
      t->session = c->session_tensors ? c->id : 0;
      memcpy(t->client, c->client, sizeof(t->client));
      op->reserved = false; /* the tensor holds the charge now */
      kiln_fields_t r;
      kiln_fields_begin(&r, &pk.pk);
      kiln_fields_u64(&r, "id", op->id);
      kiln_fields_end(&r);
      /* Nobody but this client knows the id: if the reply cannot be sent, the tensor goes. */
      watch = malloc(sizeof(*watch));
      if (watch) *watch = (reply_watch_t){.server = s, .conn = op->req->conn, .id = op->id};
      kiln_req_reply(op->req, &b, NULL, 0, watch ? reply_sent : NULL, watch);
      break;
    }
    case OP_WRITE:
    case OP_FREE:
      msgpack_pack_nil(&pk.pk);
      kiln_req_reply(op->req, &b, NULL, 0, NULL, NULL);
      break;
    case OP_READ:
      msgpack_pack_bin(&pk.pk, (size_t)op->len);
      kiln_req_reply(op->req, &b, op->buf ? op->buf->map : NULL, (size_t)op->len, op_release, op);
      return; /* op and its buffer go back once written */
    case OP_DOWNLOAD:
      kiln_tensor_pack_head(&pk.pk, &op->desc);
      kiln_req_reply(op->req, &b, op->buf ? op->buf->map : NULL, (size_t)op->len, op_release, op);
      return;
  }
  op_free(op);
  (void)result;
}

/* Hands the op to its worker (the fd goes with it). */
static kiln_status_t send_now(op_t *op) {
  int fd = op->fd;
  op->fd = -1;
  op->generation = kiln_worker_generation(op->slot->worker);
  kiln_status_t st = kiln_worker_call(op->slot->worker, kiln_job_name(op->job), &op->params, fd >= 0 ? &fd : NULL,
                                      fd >= 0 ? 1 : 0, on_worker_reply, op);
  kiln_buf_deinit(&op->params);
  return st;
}

/* The launches it followed have gone to the worker (or it was dropped with `st`). */
static void follow_go(void *ctx, kiln_status_t st) {
  op_t *op = ctx;
  if (!st) st = send_now(op);
  if (st) {
    kiln_req_fail(op->req, st);
    op_free(op);
  }
}

/* Makes the job `kind` for op's tensor: `bytes` (alloc, upload) or `offset` and `size`
 * (write, read) and, when op has a buffer, its fd with the offset `at` of the bytes in it.
 * The buffer stays op's; the worker is told which one by its fd (and keeps large ones
 * mapped, keyed by inode). */
static kiln_status_t prepare(op_t *op, kiln_job_kind_t kind, uint64_t bytes, uint64_t offset,
                             uint64_t size, uint64_t at) {
  int fd = -1;
  if (op->buf) {
    fd = fcntl(op->buf->fd, F_DUPFD_CLOEXEC, 0); /* kiln_worker_call closes what it is given */
    if (fd < 0) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "no file descriptor for a transfer");
  }
  op->fd = fd;
  op->job = kind;
  kiln_tensor_job_t j = {.kind = kind, .handle = op->id, .bytes = bytes, .offset = offset,
                         .size = size, .at = at};
  return pack_job(&op->params, &j);
}

static kiln_status_t send_op(kiln_call_t *call, op_t *op, kiln_job_kind_t kind, uint64_t bytes,
                             uint64_t offset, uint64_t size, uint64_t at) {
  KILN_RETURN_IF_ERROR(prepare(op, kind, bytes, offset, size, at));
  op->req = call->req;
  op->server = call->server;
  /* Behind what of the tenant waits in the device gate, so that its requests on the device
   * stay in order. */
  bool queued;
  kiln_status_t st = kiln_device_follow(call->server, op->slot->device, op->slot->tenant, call->conn,
                                        follow_go, op, &queued);
  if (!st && !queued) st = send_now(op);
  if (st) return st;
  call->async = true;
  return KILN_OK;
}

static op_t *op_new(int kind) {
  op_t *op = calloc(1, sizeof(*op));
  if (op) {
    op->kind = kind;
    op->fd = -1;
  }
  return op;
}

/* The shared memory holding a request's payload of n bytes at `data`, for the worker, with
 * the payload's offset in it: the pool buffer the message was received into, taken from
 * the reader (no copy), or else (a small message, or a buffer another tenant's workers
 * have seen) a pool buffer the payload is copied into. */
static kiln_status_t take_payload(kiln_call_t *call, const uint8_t *data, uint64_t n,
                                  kiln_shm_buf_t **out, uint64_t *out_at) {
  kiln_shm_pool_t *pool = shm_pool(call->server);
  uint32_t owner = call->conn->tenant->index;
  kiln_shm_buf_t *got = kiln_reader_steal(&call->conn->reader);
  if (got && data >= got->map && n <= got->cap && (uint64_t)(data - got->map) <= got->cap - n &&
      (!got->owner || got->owner == owner)) {
    got->owner = owner;
    *out = got;
    *out_at = (uint64_t)(data - got->map);
    return KILN_OK;
  }
  kiln_shm_buf_t *b;
  kiln_status_t st = kiln_shm_pool_get(pool, n, owner, &b);
  if (!st) {
    memcpy(b->map, data, n);
    b->owner = owner;
    *out = b;
    *out_at = 0;
  }
  kiln_shm_pool_put(pool, got); /* after the copy: data may lie in it */
  return st;
}

kiln_status_t kiln_method_alloc(kiln_call_t *call) {
  static const char *const fields[] = {"device", "dtype", "shape", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "alloc", fields));
  kiln_dslot_t *dev;
  KILN_RETURN_IF_ERROR(device_param(call, &dev));
  kiln_tensor_desc_t desc;
  const msgpack_object *dtype = kiln_params_find(call->params, "dtype");
  const msgpack_object *shape = kiln_params_find(call->params, "shape");
  if (!dtype) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "missing required field 'dtype'");
  if (!shape) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "missing required field 'shape'");
  KILN_RETURN_IF_ERROR(kiln_tensor_desc_parse(dtype, shape, &desc));
  op_t *op = op_new(OP_ALLOC);
  if (!op) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  op->server = call->server;
  op->slot = dev;
  op->desc = desc;
  op->id = kiln_random_id();
  kiln_status_t st = reserve(call, op);
  if (!st) st = send_op(call, op, KILN_JOB_ALLOC, desc.nbytes, 0, 0, 0);
  if (st) op_free(op);
  return st;
}

kiln_status_t kiln_method_upload(kiln_call_t *call) {
  static const char *const fields[] = {"device", "tensor", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "upload", fields));
  kiln_dslot_t *dev;
  KILN_RETURN_IF_ERROR(device_param(call, &dev));
  const msgpack_object *tensor = kiln_params_find(call->params, "tensor");
  if (!tensor) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "missing required field 'tensor'");
  kiln_tensor_desc_t desc;
  const uint8_t *data;
  KILN_RETURN_IF_ERROR(kiln_tensor_parse(tensor, &desc, &data));
  op_t *op = op_new(OP_UPLOAD);
  if (!op) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  op->server = call->server;
  op->slot = dev;
  op->desc = desc;
  op->id = kiln_random_id();
  uint64_t at = 0;
  kiln_status_t st = reserve(call, op);
  if (!st && desc.nbytes) st = take_payload(call, data, desc.nbytes, &op->buf, &at);
  if (!st)
    st = send_op(call, op, op->buf ? KILN_JOB_UPLOAD : KILN_JOB_ALLOC, desc.nbytes, 0, 0, at);
  if (st) op_free(op);
  return st;
}

static kiln_status_t range(const kiln_tensor_t *t, uint64_t offset, uint64_t size) {
  if (offset > t->desc.nbytes || size > t->desc.nbytes - offset)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "bytes [%llu, %llu) are outside tensor %llu of %llu bytes",
                       (unsigned long long)offset, (unsigned long long)(offset + size),
                       (unsigned long long)t->id, (unsigned long long)t->desc.nbytes);
  return KILN_OK;
}

kiln_status_t kiln_method_write(kiln_call_t *call) {
  static const char *const fields[] = {"id", "offset", "data", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "write", fields));
  kiln_tensor_t *t;
  KILN_RETURN_IF_ERROR(id_param(call, &t));
  uint64_t offset = 0;
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "offset", false, &offset));
  const uint8_t *data;
  size_t len;
  KILN_RETURN_IF_ERROR(kiln_params_bytes(call->params, "data", true, &data, &len));
  KILN_RETURN_IF_ERROR(range(t, offset, len));
  if (len == 0) {
    msgpack_pack_nil(call->pk);
    return KILN_OK;
  }
  op_t *op = op_new(OP_WRITE);
  if (!op) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  op->server = call->server;
  op->slot = t->slot;
  op->id = t->id;
  uint64_t at = 0;
  kiln_status_t st = take_payload(call, data, len, &op->buf, &at);
  if (!st) st = send_op(call, op, KILN_JOB_WRITE, 0, offset, len, at);
  if (st) op_free(op);
  return st;
}

/* Charges the reply's bytes to the tenant's transfer budget, makes its buffer and sends. */
static kiln_status_t read_start(op_t *op) {
  kiln_tenant_t *t = op->slot->tenant;
  t->transfer_bytes += op->len;
  op->charged = op->len;
  KILN_RETURN_IF_ERROR(kiln_shm_pool_get(shm_pool(op->server), op->len, t->index, &op->buf));
  op->buf->owner = t->index;
  KILN_RETURN_IF_ERROR(prepare(op, KILN_JOB_READ, 0, op->offset, op->len, 0));
  return send_now(op);
}

static void read_go(void *ctx, kiln_status_t st) {
  op_t *op = ctx;
  if (!st) st = read_start(op);
  if (st) {
    kiln_req_fail(op->req, st);
    op_free(op);
  }
}

static kiln_status_t start_read(kiln_call_t *call, kiln_tensor_t *t, int kind, uint64_t offset,
                                uint64_t size) {
  if (size > KILN_MAX_TRANSFER)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                       "%llu bytes is more than one reply carries (1 GiB); read the tensor in "
                       "chunks with `read` and an offset",
                       (unsigned long long)size);
  op_t *op = op_new(kind);
  if (!op) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  op->server = call->server;
  op->slot = t->slot;
  op->id = t->id;
  op->desc = t->desc;
  if (size == 0) {
    /* Nothing to move; still ordered behind earlier work on the device. */
    kiln_status_t st = send_op(call, op, KILN_JOB_SYNC, 0, 0, 0, 0);
    if (st) op_free(op);
    return st;
  }
  op->req = call->req;
  op->len = size;
  op->offset = offset;
  /* The reply's buffer is made when the read goes, within the tenant's transfer budget. */
  bool queued;
  kiln_status_t st = kiln_device_transfer(call->server, t->device, t->tenant, call->conn, size,
                                          read_go, op, &queued);
  if (!st && !queued) st = read_start(op);
  if (st) op_free(op);
  else call->async = true;
  return st;
}

kiln_status_t kiln_method_read(kiln_call_t *call) {
  static const char *const fields[] = {"id", "offset", "size", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "read", fields));
  kiln_tensor_t *t;
  KILN_RETURN_IF_ERROR(id_param(call, &t));
  uint64_t offset = 0, size;
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "offset", false, &offset));
  if (offset > t->desc.nbytes) return range(t, offset, 0);
  size = t->desc.nbytes - offset;
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "size", false, &size));
  KILN_RETURN_IF_ERROR(range(t, offset, size));
  return start_read(call, t, OP_READ, offset, size);
}

kiln_status_t kiln_method_download(kiln_call_t *call) {
  static const char *const fields[] = {"id", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "download", fields));
  kiln_tensor_t *t;
  KILN_RETURN_IF_ERROR(id_param(call, &t));
  return start_read(call, t, OP_DOWNLOAD, 0, t->desc.nbytes);
}

/* A free that does not wait for its answer (free of many, a session's end): the id goes at
 * once; the worker frees the bytes after what the tenant queued before on the device. */
typedef struct quiet_free {
  kiln_dslot_t *slot;
  uint32_t generation;
  uint64_t id;
} quiet_free_t;

static void quiet_free_go(void *ctx, kiln_status_t st) {
  quiet_free_t *f = ctx;
  /* Sent even when what it followed was dropped (st): the bytes must go all the same. */
  kiln_status_free(st);
  kiln_worker_t *w = f->slot->worker;
  if (w && f->generation == kiln_worker_generation(w)) {
    kiln_buf_t params;
    kiln_buf_init(&params);
    st = pack_job(&params, &(kiln_tensor_job_t){.kind = KILN_JOB_FREE, .handle = f->id});
    if (!st) st = kiln_worker_call(w, kiln_job_name(KILN_JOB_FREE), &params, NULL, 0, worker_ignore, NULL);
    kiln_buf_deinit(&params);
    kiln_status_free(st); /* the worker died meanwhile: the bytes went with it */
  }
  free(f);
}

static void free_quietly(kiln_server_t *s, kiln_tensor_t *t) {
  quiet_free_t *f = malloc(sizeof(*f));
  if (f) *f = (quiet_free_t){.slot = t->slot, .generation = t->generation, .id = t->id};
  kiln_dslot_t *slot = t->slot;
  kiln_tenant_t *owner = t->tenant;
  forget(s, t);
  bool queued = false;
  if (f && kiln_device_follow(s, slot->device, owner, NULL, quiet_free_go, f, &queued) == KILN_OK &&
      !queued)
    quiet_free_go(f, KILN_OK);
  /* Without memory for the note the worker keeps the bytes until it ends; kilnd has given
   * back the charge already (it cannot fail the caller for it). */
}

void kiln_tensors_conn_closed(kiln_server_t *s, kiln_conn_t *c) {
  /* Past the drain the workers are gone, and every tensor with them. */
  if (!c->session_tensors || s->drain_finished) return;
  kiln_tensors_reap(s);
  size_t it = 0;
  void *v;
  uint32_t n = 0;
  while (kiln_map_next(&s->tensors, &it, NULL, &v)) {
    kiln_tensor_t *t = v;
    if (t->session != c->id) continue;
    free_quietly(s, t); /* removing the entry just returned is allowed */
    n++;
  }
  if (n) KILN_LOG_DEBUG("session_tensors_freed", "conn=%llu tensors=%u", (unsigned long long)c->id, n);
}

/* free {"ids": [...]} or {"all": true}: every id is checked before any is freed, so a wrong
 * one frees nothing. */
static kiln_status_t free_many(kiln_call_t *call, const msgpack_object_array *ids, bool all) {
  kiln_server_t *s = call->server;
  kiln_tenant_t *me = call->conn->tenant;
  uint64_t freed = 0;
  if (all) {
    kiln_tensors_reap(s);
    size_t it = 0;
    void *v;
    while (kiln_map_next(&s->tensors, &it, NULL, &v)) {
      kiln_tensor_t *t = v;
      if (t->tenant != me || kiln_device_permit(t->device, me) != KILN_OK) continue;
      free_quietly(s, t);
      freed++;
    }
  } else {
    for (uint32_t i = 0; i < ids->size; i++)
      if (ids->ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "'ids' holds unsigned integers (item %u is not one)", i);
    for (uint32_t i = 0; i < ids->size; i++) {
      kiln_tensor_t *t;
      KILN_RETURN_IF_ERROR(kiln_tensor_lookup(call, ids->ptr[i].via.u64, &t));
    }
    for (uint32_t i = 0; i < ids->size; i++) {
      kiln_tensor_t *t = kiln_map_get(&s->tensors, ids->ptr[i].via.u64);
      if (!t) continue; /* listed twice */
      free_quietly(s, t);
      freed++;
    }
  }
  kiln_fields_t r;
  kiln_fields_begin(&r, call->pk);
  kiln_fields_u64(&r, "freed", freed);
  kiln_fields_end(&r);
  return KILN_OK;
}

kiln_status_t kiln_method_free(kiln_call_t *call) {
  static const char *const fields[] = {"id", "ids", "all", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "free", fields));
  const msgpack_object_array *ids = NULL;
  bool all = false;
  KILN_RETURN_IF_ERROR(kiln_params_array(call->params, "ids", false, &ids));
  KILN_RETURN_IF_ERROR(kiln_params_bool(call->params, "all", false, &all));
  bool one = kiln_params_find(call->params, "id") != NULL;
  if (one + (ids != NULL) + (kiln_params_find(call->params, "all") != NULL) != 1)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "free takes one of 'id', 'ids' or 'all'");
  if (!one) {
    if (kiln_params_find(call->params, "all") && !all)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "'all' must be true when given");
    return free_many(call, ids, all);
  }
  kiln_tensor_t *t;
  KILN_RETURN_IF_ERROR(id_param(call, &t));
  op_t *op = op_new(OP_FREE);
  if (!op) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  op->slot = t->slot;
  op->id = t->id;
  /* Gone for the client at once; the worker frees it after the work queued before. */
  forget(call->server, t);
  kiln_status_t st = send_op(call, op, KILN_JOB_FREE, 0, 0, 0, 0);
  if (st) op_free(op);
  return st;
}

/* tensors {"device"?}: the calling tenant's live tensors (on devices it may still use). */
kiln_status_t kiln_method_tensors(kiln_call_t *call) {
  static const char *const fields[] = {"device", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "tensors", fields));
  kiln_server_t *s = call->server;
  kiln_tenant_t *me = call->conn->tenant;
  const kiln_device_entry_t *only = NULL;
  const char *dev = NULL;
  uint32_t dev_len = 0;
  KILN_RETURN_IF_ERROR(kiln_params_str(call->params, "device", false, &dev, &dev_len));
  if (dev) {
    only = kiln_device_find(s, dev, dev_len);
    if (!only)
      return KILN_STATUS(KILN_E_NOT_FOUND, "no device '%.*s' on this server; `devices` lists them",
                         (int)(dev_len < 32 ? dev_len : 32), dev);
    KILN_RETURN_IF_ERROR(kiln_device_permit(only, me));
  }
  kiln_tensors_reap(s);
  uint32_t n = 0;
  size_t it = 0;
  void *v;
  while (kiln_map_next(&s->tensors, &it, NULL, &v)) {
    const kiln_tensor_t *t = v;
    n += t->tenant == me && (!only || t->device == only) && kiln_tenant_may_use(me, t->device->id, t->device->kind);
  }
  uint64_t now = kiln_now_ns();
  msgpack_packer *pk = call->pk;
  msgpack_pack_array(pk, n);
  it = 0;
  while (kiln_map_next(&s->tensors, &it, NULL, &v)) {
    const kiln_tensor_t *t = v;
    if (t->tenant != me || (only && t->device != only) ||
        !kiln_tenant_may_use(me, t->device->id, t->device->kind))
      continue;
    kiln_fields_t m;
    kiln_fields_begin(&m, pk);
    kiln_fields_u64(&m, "id", t->id);
    kiln_fields_str(&m, "device", t->device->id);
    kiln_fields_str(&m, "dtype", kiln_dtype_name(t->desc.dtype));
    kiln_fields_key(&m, "shape");
    msgpack_pack_array(pk, t->desc.ndim);
    for (uint32_t d = 0; d < t->desc.ndim; d++) msgpack_pack_uint64(pk, t->desc.shape[d]);
    kiln_fields_u64(&m, "bytes", t->desc.nbytes);
    kiln_fields_f64(&m, "age_s", (double)(now - t->created_ns) / 1e9);
    kiln_fields_str(&m, "client", t->client);
    kiln_fields_bool(&m, "session", t->session != 0);
    kiln_fields_end(&m);
  }
  return KILN_OK;
}
