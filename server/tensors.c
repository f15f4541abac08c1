/* Tensor methods: alloc, upload, write, read, download, free.
 *
 * kilnd keeps only each tensor's description; the bytes live in the device worker. Bulk
 * bytes cross to and from the worker in memfds: kilnd copies a request's data into one (the
 * only copy kilnd makes), and a download's bytes go from the worker's memfd straight to the
 * socket (kilnd maps it and hands the mapping to the write). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "protocol/channel.h"
#include "server/server.h"

#define KILN_MAX_TRANSFER (1ull << 30) /* largest read/download reply */

typedef struct op {
  kiln_req_t *req;
  kiln_server_t *server;
  kiln_dslot_t *slot;
  uint32_t generation;
  uint64_t id;
  kiln_tensor_desc_t desc;
  void *map;
  uint64_t map_len;
  int kind; /* OP_* */
} op_t;

enum { OP_ALLOC, OP_UPLOAD, OP_WRITE, OP_READ, OP_DOWNLOAD, OP_FREE };

static void unmap_release(void *ctx) {
  op_t *op = ctx;
  kiln_shm_unmap(op->map, op->map_len);
  free(op);
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

static kiln_status_t check_new_tensor(kiln_call_t *call, uint64_t nbytes) {
  kiln_tenant_t *t = call->conn->tenant;
  KILN_RETURN_IF_ERROR(kiln_quota_check(t, "tensors", t->tensors, 1, t->quotas.tensors));
  return kiln_quota_check(t, "memory", t->memory, nbytes, t->quotas.memory);
}

static void forget(kiln_server_t *s, kiln_tensor_t *t) {
  kiln_map_remove(&s->tensors, t->id);
  s->tensor_bytes -= t->desc.nbytes;
  t->tenant->memory -= t->desc.nbytes;
  t->tenant->tensors--;
  free(t);
}

/* The tensor `id` of the calling tenant; a tensor whose worker died since it was made is
 * dropped here and reported as lost. */
kiln_status_t kiln_tensor_lookup(kiln_call_t *call, uint64_t id, kiln_tensor_t **out) {
  kiln_server_t *s = call->server;
  kiln_tensor_t *t = kiln_map_get(&s->tensors, id);
  if (!t || t->tenant != call->conn->tenant)
    return KILN_STATUS(KILN_E_NOT_FOUND, "no tensor %llu (freed, never made, or another tenant's)",
                       (unsigned long long)id);
  if (t->generation != kiln_worker_generation(t->slot->worker)) {
    char dev[32];
    snprintf(dev, sizeof(dev), "%s", t->device->id);
    forget(s, t);
    return KILN_STATUS(KILN_E_NOT_FOUND,
                       "tensor %llu was lost when the device worker for %s died; upload it again",
                       (unsigned long long)id, dev);
  }
  *out = t;
  return KILN_OK;
}

static kiln_status_t id_param(kiln_call_t *call, kiln_tensor_t **out) {
  uint64_t id = 0;
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "id", true, &id));
  return kiln_tensor_lookup(call, id, out);
}

static void on_worker_reply(void *ctx, kiln_status_t st, const msgpack_object *result) {
  op_t *op = ctx;
  kiln_server_t *s = op->server;
  if (st) {
    kiln_req_fail(op->req, st);
    if (op->map) kiln_shm_unmap(op->map, op->map_len);
    free(op);
    return;
  }
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &b);
  kiln_rpc_pack_result_head(&pk.pk, op->req->msgid);
  switch (op->kind) {
    case OP_ALLOC:
    case OP_UPLOAD: {
      kiln_tensor_t *t = calloc(1, sizeof(*t));
      if (!t || kiln_map_put(&s->tensors, op->id, t)) {
        free(t);
        kiln_buf_deinit(&b);
        kiln_req_fail(op->req, KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory"));
        break;
      }
      t->id = op->id;
      t->desc = op->desc;
      t->slot = op->slot;
      t->device = op->slot->device;
      t->generation = op->generation;
      t->tenant = op->slot->tenant;
      s->tensor_bytes += t->desc.nbytes;
      t->tenant->memory += t->desc.nbytes;
      t->tenant->tensors++;
      msgpack_pack_map(&pk.pk, 1);
      kiln_pack_kv_u64(&pk.pk, "id", op->id);
      kiln_req_reply(op->req, &b, NULL, 0, NULL, NULL);
      break;
    }
    case OP_WRITE:
    case OP_FREE:
      msgpack_pack_nil(&pk.pk);
      kiln_req_reply(op->req, &b, NULL, 0, NULL, NULL);
      break;
    case OP_READ:
      msgpack_pack_bin(&pk.pk, (size_t)op->map_len);
      kiln_req_reply(op->req, &b, op->map, (size_t)op->map_len, unmap_release, op);
      return; /* op freed by unmap_release once written */
    case OP_DOWNLOAD:
      kiln_tensor_pack_head(&pk.pk, &op->desc);
      kiln_req_reply(op->req, &b, op->map, (size_t)op->map_len, unmap_release, op);
      return;
  }
  if (op->map) kiln_shm_unmap(op->map, op->map_len);
  free(op);
  (void)result;
}

/* Sends `method` with params {handle, extra u64 fields...} and an optional memfd. */
static kiln_status_t send_op(kiln_call_t *call, op_t *op, const char *method, int fd,
                             uint64_t bytes, uint64_t offset, uint64_t size) {
  kiln_buf_t params;
  kiln_buf_init(&params);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &params);
  msgpack_pack_array(&pk.pk, 1);
  msgpack_pack_map(&pk.pk, fd >= 0 ? 5 : 4);
  kiln_pack_kv_u64(&pk.pk, "handle", op->id);
  kiln_pack_kv_u64(&pk.pk, "bytes", bytes);
  kiln_pack_kv_u64(&pk.pk, "offset", offset);
  kiln_pack_kv_u64(&pk.pk, "size", size);
  if (fd >= 0) kiln_pack_kv_u64(&pk.pk, "fds", 1);
  kiln_status_t st = kiln_packer_status(&pk);
  if (st) {
    if (fd >= 0) close(fd);
    kiln_buf_deinit(&params);
    return st;
  }
  op->req = call->req;
  op->server = call->server;
  op->generation = kiln_worker_generation(op->slot->worker);
  st = kiln_worker_call(op->slot->worker, method, &params, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0,
                        on_worker_reply, op);
  kiln_buf_deinit(&params);
  if (st) return st;
  call->async = true;
  return KILN_OK;
}

static op_t *op_new(int kind) {
  op_t *op = calloc(1, sizeof(*op));
  if (op) op->kind = kind;
  return op;
}

/* Copies bytes into a fresh memfd for the worker; returns the fd. */
static kiln_status_t stage(const uint8_t *data, uint64_t n, int *out_fd) {
  void *map = NULL;
  KILN_RETURN_IF_ERROR(kiln_shm_create("kiln-in", n, out_fd, n ? &map : NULL));
  if (n) {
    memcpy(map, data, n);
    kiln_shm_unmap(map, n);
  }
  return KILN_OK;
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
  KILN_RETURN_IF_ERROR(check_new_tensor(call, desc.nbytes));
  op_t *op = op_new(OP_ALLOC);
  if (!op) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  op->slot = dev;
  op->desc = desc;
  op->id = kiln_random_id();
  kiln_status_t st = send_op(call, op, "alloc", -1, desc.nbytes, 0, 0);
  if (st) free(op);
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
  KILN_RETURN_IF_ERROR(check_new_tensor(call, desc.nbytes));
  int fd = -1;
  if (desc.nbytes) KILN_RETURN_IF_ERROR(stage(data, desc.nbytes, &fd));
  op_t *op = op_new(OP_UPLOAD);
  if (!op) {
    if (fd >= 0) close(fd);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  op->slot = dev;
  op->desc = desc;
  op->id = kiln_random_id();
  kiln_status_t st = send_op(call, op, fd >= 0 ? "upload" : "alloc", fd, desc.nbytes, 0,
                             desc.nbytes);
  if (st) free(op);
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
  int fd;
  KILN_RETURN_IF_ERROR(stage(data, len, &fd));
  op_t *op = op_new(OP_WRITE);
  if (!op) {
    close(fd);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  op->slot = t->slot;
  op->id = t->id;
  kiln_status_t st = send_op(call, op, "write", fd, t->desc.nbytes, offset, len);
  if (st) free(op);
  return st;
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
  op->slot = t->slot;
  op->id = t->id;
  op->desc = t->desc;
  if (size == 0) {
    /* Nothing to move; still ordered behind earlier work on the device. */
    kiln_status_t st = send_op(call, op, "sync", -1, t->desc.nbytes, offset, 0);
    if (st) free(op);
    return st;
  }
  int fd;
  kiln_status_t st = kiln_shm_create("kiln-out", size, &fd, &op->map);
  if (st) {
    free(op);
    return st;
  }
  op->map_len = size;
  st = send_op(call, op, "read", fd, t->desc.nbytes, offset, size);
  if (st) {
    kiln_shm_unmap(op->map, size);
    free(op);
  }
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

kiln_status_t kiln_method_free(kiln_call_t *call) {
  static const char *const fields[] = {"id", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "free", fields));
  kiln_tensor_t *t;
  KILN_RETURN_IF_ERROR(id_param(call, &t));
  op_t *op = op_new(OP_FREE);
  if (!op) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  op->slot = t->slot;
  op->id = t->id;
  /* Gone for the client at once; the worker frees it after the work queued before. */
  forget(call->server, t);
  kiln_status_t st = send_op(call, op, "free", -1, 0, 0, 0);
  if (st) free(op);
  return st;
}
