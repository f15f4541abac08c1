/* hello and devices: results decoded into fixed-size caller structs. */
#include <string.h>

#include "internal.h"

/* Copies a str (or bin) field into out, truncating to fit; "" when absent or not a string. */
static void copy_str(const msgpack_object *map, const char *key, char *out, size_t cap) {
  const msgpack_object *o = kiln_object_get(map, key);
  out[0] = 0;
  if (!o || (o->type != MSGPACK_OBJECT_STR && o->type != MSGPACK_OBJECT_BIN)) return;
  size_t n = o->type == MSGPACK_OBJECT_STR ? o->via.str.size : o->via.bin.size;
  const char *p = o->type == MSGPACK_OBJECT_STR ? o->via.str.ptr : o->via.bin.ptr;
  if (n >= cap) n = cap - 1;
  memcpy(out, p, n);
  out[n] = 0;
}

static uint64_t get_u64(const msgpack_object *map, const char *key) {
  const msgpack_object *o = kiln_object_get(map, key);
  return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

static uint32_t get_u32(const msgpack_object *map, const char *key) {
  uint64_t v = get_u64(map, key);
  return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

typedef struct hello_args {
  const char *token, *client;
} hello_args_t;

static void pack_hello(msgpack_packer *pk, void *ctx) {
  const hello_args_t *a = ctx;
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_u64(&m, "version", 1);
  if (a->token) kiln_fields_str(&m, "token", a->token);
  if (a->client) kiln_fields_str(&m, "client", a->client);
  kiln_fields_end(&m);
}

kiln_status_t kiln_client_hello(kiln_client_t *c, const char *token, const char *client_name,
                                kiln_hello_t *out) {
  hello_args_t a = {token, client_name};
  kiln_reply_t *r;
  KILN_RETURN_IF_ERROR(kiln_client_call(c, "hello", pack_hello, &a, &r));
  const msgpack_object *res = kiln_reply_result(r);
  if (!res || res->type != MSGPACK_OBJECT_MAP) {
    kiln_reply_free(r);
    return KILN_STATUS(KILN_E_INTERNAL, "hello's result is not a map (docs/protocol.md)");
  }
  const msgpack_object *lim = kiln_object_get(res, "limits");
  uint64_t max_message = get_u64(lim, "max_message");
  /* Chunked uploads must fit the daemon's message limit, which --max-message may lower. */
  if (max_message) {
    uint64_t chunk = max_message > (2u << 20) ? max_message - (1u << 20) : max_message / 2;
    if (chunk < c->chunk_bytes) c->chunk_bytes = chunk;
  }
  if (out) {
    memset(out, 0, sizeof(*out));
    copy_str(res, "server", out->server, sizeof(out->server));
    copy_str(res, "tenant", out->tenant, sizeof(out->tenant));
    out->version = get_u32(res, "version");
    out->max_message = max_message;
    out->max_depth = get_u32(lim, "max_depth");
    out->max_items = get_u32(lim, "max_items");
    out->max_str = get_u32(lim, "max_str");
    out->max_inflight = get_u32(lim, "max_inflight");
  }
  kiln_reply_free(r);
  return KILN_OK;
}

static void pack_devices(msgpack_packer *pk, void *ctx) {
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_bool(&m, "absent", true);
  kiln_fields_end(&m);
}

kiln_status_t kiln_client_devices(kiln_client_t *c, bool absent, kiln_device_info_t *out,
                                  size_t cap, size_t *out_n) {
  kiln_reply_t *r;
  KILN_RETURN_IF_ERROR(kiln_client_call(c, "devices", absent ? pack_devices : NULL, NULL, &r));
  const msgpack_object *res = kiln_reply_result(r);
  if (!res || res->type != MSGPACK_OBJECT_ARRAY) {
    kiln_reply_free(r);
    return KILN_STATUS(KILN_E_INTERNAL, "devices' result is not an array (docs/protocol.md)");
  }
  size_t n = res->via.array.size;
  for (size_t i = 0; i < n && i < cap; i++) {
    const msgpack_object *m = &res->via.array.ptr[i];
    kiln_device_info_t *d = &out[i];
    memset(d, 0, sizeof(*d));
    copy_str(m, "id", d->id, sizeof(d->id));
    copy_str(m, "kind", d->kind, sizeof(d->kind));
    copy_str(m, "name", d->name, sizeof(d->name));
    copy_str(m, "arch", d->arch, sizeof(d->arch));
    copy_str(m, "reason", d->reason, sizeof(d->reason));
    d->memory = get_u64(m, "memory");
    d->compute_units = get_u64(m, "compute_units");
    d->max_block = get_u64(m, "max_block");
    d->wave_size = get_u64(m, "wave_size");
    d->max_shared = get_u64(m, "max_shared");
    const msgpack_object *av = kiln_object_get(m, "available");
    d->available = av && av->type == MSGPACK_OBJECT_BOOLEAN && av->via.boolean;
  }
  *out_n = n;
  kiln_reply_free(r);
  return KILN_OK;
}
