/* The typed methods of docs/protocol.md §4: a submit that packs the request, and a
 * synchronous form that submits and waits. */
#include <string.h>

#include "base/util.h"
#include "internal.h"

/* --- Submit ----------------------------------------------------------------------------- */

/* [0, msgid, method, [ : the caller packs the params map (a kiln_fields_t), then calls end().
 * A request with an attached body (upload, write) keeps its map under 16 fields:
 * kiln_fields_end then sets the fixmap byte in place, where a map16 would move the bytes that
 * the body's segment boundary (client.c close_packed) already counts. */
static msgpack_packer *begin_params(kiln_client_t *c, const char *method, uint32_t *out_msgid) {
  msgpack_packer *pk = kiln_client_request_begin(c, method, out_msgid);
  msgpack_pack_array(pk, 1);
  return pk;
}

/* Sets *out_msgid only when the request was queued. */
static kiln_status_t end(kiln_client_t *c, uint32_t msgid, uint32_t *out_msgid) {
  KILN_RETURN_IF_ERROR(kiln_client_request_end(c));
  *out_msgid = msgid;
  return KILN_OK;
}

kiln_status_t kiln_client_submit_ping(kiln_client_t *c, uint32_t *out_msgid) {
  uint32_t id;
  msgpack_packer *pk = kiln_client_request_begin(c, "ping", &id);
  msgpack_pack_array(pk, 0);
  return end(c, id, out_msgid);
}

static void pack_shape(kiln_fields_t *m, const uint64_t *shape, uint32_t ndim) {
  kiln_fields_key(m, "shape");
  msgpack_pack_array(m->pk, ndim);
  for (uint32_t i = 0; i < ndim; i++) msgpack_pack_uint64(m->pk, shape[i]);
}

kiln_status_t kiln_client_submit_alloc(kiln_client_t *c, const char *device, kiln_dtype_t dtype,
                                       const uint64_t *shape, uint32_t ndim,
                                       uint32_t *out_msgid) {
  uint32_t id;
  kiln_fields_t m;
  kiln_fields_begin(&m, begin_params(c, "alloc", &id));
  if (device) kiln_fields_str(&m, "device", device);
  kiln_fields_str(&m, "dtype", kiln_dtype_name(dtype));
  pack_shape(&m, shape, ndim);
  kiln_fields_end(&m);
  return end(c, id, out_msgid);
}

kiln_status_t kiln_client_submit_upload(kiln_client_t *c, const char *device,
                                        const kiln_tensor_desc_t *desc, const void *data,
                                        uint32_t *out_msgid) {
  if (desc->nbytes > UINT32_MAX)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "a tensor of %llu bytes does not fit one message; use kiln_client_upload "
                       "(which splits it) or alloc + write",
                       (unsigned long long)desc->nbytes);
  uint32_t id;
  kiln_fields_t m;
  msgpack_packer *pk = begin_params(c, "upload", &id);
  kiln_fields_begin(&m, pk);
  if (device) kiln_fields_str(&m, "device", device);
  kiln_fields_key(&m, "tensor");
  kiln_tensor_pack_head(pk, desc);
  kiln_client_attach(c, data, (size_t)desc->nbytes);
  kiln_fields_end(&m);
  return end(c, id, out_msgid);
}

kiln_status_t kiln_client_submit_write(kiln_client_t *c, uint64_t tensor, uint64_t offset,
                                       const void *data, size_t n, uint32_t *out_msgid) {
  if (n > UINT32_MAX)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "write of %zu bytes exceeds one bin (4 GiB - 1)",
                       n);
  uint32_t id;
  kiln_fields_t m;
  msgpack_packer *pk = begin_params(c, "write", &id);
  kiln_fields_begin(&m, pk);
  kiln_fields_u64(&m, "id", tensor);
  kiln_fields_u64(&m, "offset", offset);
  kiln_fields_key(&m, "data");
  msgpack_pack_bin(pk, n);
  kiln_client_attach(c, data, n);
  kiln_fields_end(&m);
  return end(c, id, out_msgid);
}

kiln_status_t kiln_client_submit_read(kiln_client_t *c, uint64_t tensor, uint64_t offset,
                                      uint64_t size, uint32_t *out_msgid) {
  uint32_t id;
  kiln_fields_t m;
  kiln_fields_begin(&m, begin_params(c, "read", &id));
  kiln_fields_u64(&m, "id", tensor);
  kiln_fields_u64(&m, "offset", offset);
  kiln_fields_u64(&m, "size", size);
  kiln_fields_end(&m);
  return end(c, id, out_msgid);
}

static kiln_status_t submit_by_id(kiln_client_t *c, const char *method, uint64_t tensor,
                                  uint32_t *out_msgid) {
  uint32_t id;
  kiln_fields_t m;
  kiln_fields_begin(&m, begin_params(c, method, &id));
  kiln_fields_u64(&m, "id", tensor);
  kiln_fields_end(&m);
  return end(c, id, out_msgid);
}

kiln_status_t kiln_client_submit_download(kiln_client_t *c, uint64_t tensor, uint32_t *out_msgid) {
  return submit_by_id(c, "download", tensor, out_msgid);
}

kiln_status_t kiln_client_submit_free(kiln_client_t *c, uint64_t tensor, uint32_t *out_msgid) {
  return submit_by_id(c, "free", tensor, out_msgid);
}

kiln_status_t kiln_client_submit_call(kiln_client_t *c, const char *method, kiln_params_cb build,
                                      void *ctx, uint32_t *out_msgid) {
  uint32_t id;
  msgpack_packer *pk = kiln_client_request_begin(c, method, &id);
  if (build) {
    msgpack_pack_array(pk, 1);
    build(pk, ctx);
  } else {
    msgpack_pack_array(pk, 0);
  }
  return end(c, id, out_msgid);
}

/* --- Synchronous ------------------------------------------------------------------------ */

/* Waits for msgid; a server error becomes the returned status and frees the reply. */
static kiln_status_t finish(kiln_client_t *c, uint32_t msgid, kiln_reply_t **out_reply) {
  kiln_reply_t *r;
  KILN_RETURN_IF_ERROR(kiln_client_wait(c, msgid, &r));
  kiln_status_t s = kiln_reply_status(r);
  if (s || !out_reply) kiln_reply_free(r);
  else *out_reply = r;
  return s;
}

kiln_status_t kiln_client_call(kiln_client_t *c, const char *method, kiln_params_cb build,
                               void *ctx, kiln_reply_t **out_reply) {
  uint32_t id;
  KILN_RETURN_IF_ERROR(kiln_client_submit_call(c, method, build, ctx, &id));
  return finish(c, id, out_reply);
}

kiln_status_t kiln_client_ping(kiln_client_t *c) {
  uint32_t id;
  KILN_RETURN_IF_ERROR(kiln_client_submit_ping(c, &id));
  return finish(c, id, NULL);
}

static kiln_status_t finish_id(kiln_client_t *c, uint32_t msgid, uint64_t *out_id) {
  kiln_reply_t *r;
  KILN_RETURN_IF_ERROR(kiln_client_wait(c, msgid, &r));
  kiln_status_t s = kiln_reply_id(r, out_id);
  kiln_reply_free(r);
  return s;
}

kiln_status_t kiln_client_alloc(kiln_client_t *c, const char *device, kiln_dtype_t dtype,
                                const uint64_t *shape, uint32_t ndim, uint64_t *out_id) {
  uint32_t id;
  KILN_RETURN_IF_ERROR(kiln_client_submit_alloc(c, device, dtype, shape, ndim, &id));
  return finish_id(c, id, out_id);
}

kiln_status_t kiln_client_write(kiln_client_t *c, uint64_t tensor, uint64_t offset,
                                const void *data, size_t n) {
  uint32_t id;
  KILN_RETURN_IF_ERROR(kiln_client_submit_write(c, tensor, offset, data, n, &id));
  return finish(c, id, NULL);
}

/* A tensor larger than one message: alloc, then write it in chunks, two in flight so the
 * connection never idles between chunks while the daemon buffers at most two of them. The
 * daemon applies writes to one device in order. */
static kiln_status_t upload_chunked(kiln_client_t *c, const char *device,
                                    const kiln_tensor_desc_t *desc, const void *data,
                                    uint64_t *out_id) {
  enum { WINDOW = 2 };
  uint64_t tensor;
  KILN_RETURN_IF_ERROR(kiln_client_alloc(c, device, desc->dtype, desc->shape, desc->ndim, &tensor));
  kiln_status_t first = KILN_OK;
  uint64_t off = 0;
  uint32_t ids[WINDOW];
  size_t head = 0, count = 0;
  for (;;) {
    if (!first && off < desc->nbytes && count < WINDOW) {
      size_t n = (size_t)KILN_MIN(c->chunk_bytes, desc->nbytes - off);
      uint32_t id;
      first = kiln_client_submit_write(c, tensor, off, (const uint8_t *)data + off, n, &id);
      if (!first) {
        ids[(head + count++) % WINDOW] = id;
        off += n;
      }
      continue;
    }
    if (count == 0) break;
    kiln_status_t s = finish(c, ids[head], NULL);
    head = (head + 1) % WINDOW;
    count--;
    if (s && !first) first = s;
    else kiln_status_free(s);
  }
  if (first) {
    kiln_status_free(kiln_client_free_tensor(c, tensor));
    return first;
  }
  *out_id = tensor;
  return KILN_OK;
}

kiln_status_t kiln_client_upload(kiln_client_t *c, const char *device,
                                 const kiln_tensor_desc_t *desc, const void *data,
                                 uint64_t *out_id) {
  if (desc->nbytes > c->chunk_bytes) return upload_chunked(c, device, desc, data, out_id);
  uint32_t id;
  KILN_RETURN_IF_ERROR(kiln_client_submit_upload(c, device, desc, data, &id));
  return finish_id(c, id, out_id);
}

kiln_status_t kiln_client_read(kiln_client_t *c, uint64_t tensor, uint64_t offset, void *dst,
                               size_t n) {
  uint32_t id;
  KILN_RETURN_IF_ERROR(kiln_client_submit_read(c, tensor, offset, n, &id));
  kiln_reply_t *r;
  KILN_RETURN_IF_ERROR(kiln_client_wait(c, id, &r));
  const void *p;
  size_t got;
  kiln_status_t s = kiln_reply_bytes(r, &p, &got);
  if (!s && got != n)
    s = KILN_STATUS(KILN_E_INTERNAL, "read asked for %zu bytes and kilnd returned %zu", n, got);
  if (!s) memcpy(dst, p, n);
  kiln_reply_free(r);
  return s;
}

kiln_status_t kiln_client_download(kiln_client_t *c, uint64_t tensor, kiln_reply_t **out_reply) {
  uint32_t id;
  KILN_RETURN_IF_ERROR(kiln_client_submit_download(c, tensor, &id));
  return finish(c, id, out_reply);
}

kiln_status_t kiln_client_download_into(kiln_client_t *c, uint64_t tensor, void *dst, size_t cap,
                                        kiln_tensor_desc_t *out_desc) {
  kiln_reply_t *r;
  KILN_RETURN_IF_ERROR(kiln_client_download(c, tensor, &r));
  kiln_tensor_desc_t d;
  const void *p;
  kiln_status_t s = kiln_reply_tensor(r, &d, &p);
  if (!s && d.nbytes > cap)
    s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                    "tensor %llu has %llu bytes; the destination holds %zu",
                    (unsigned long long)tensor, (unsigned long long)d.nbytes, cap);
  if (!s) {
    if (d.nbytes) memcpy(dst, p, (size_t)d.nbytes);
    if (out_desc) *out_desc = d;
  }
  kiln_reply_free(r);
  return s;
}

kiln_status_t kiln_client_free_tensor(kiln_client_t *c, uint64_t tensor) {
  uint32_t id;
  KILN_RETURN_IF_ERROR(kiln_client_submit_free(c, tensor, &id));
  return finish(c, id, NULL);
}

kiln_status_t kiln_client_stats(kiln_client_t *c, kiln_reply_t **out_reply) {
  return kiln_client_call(c, "stats", NULL, NULL, out_reply);
}
