/* kiln_reply_t: one response message, owned by the caller once collected. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "protocol/tensor.h"

void kiln_reply_unlink(kiln_client_t *c, kiln_reply_t *r) {
  if (r->prev) r->prev->next = r->next;
  else c->done_head = r->next;
  if (r->next) r->next->prev = r->prev;
  else c->done_tail = r->prev;
  r->prev = r->next = NULL;
}

void kiln_reply_free(kiln_reply_t *r) {
  if (!r) return;
  kiln_rpc_msg_deinit(&r->msg);
  free(r->bytes);
  free(r);
}

uint32_t kiln_reply_msgid(const kiln_reply_t *r) { return r->msgid; }

kiln_status_t kiln_reply_status(const kiln_reply_t *r) {
  return kiln_rpc_error_to_status(r->msg.error);
}

const msgpack_object *kiln_reply_result(const kiln_reply_t *r) {
  if (r->msg.error && r->msg.error->type != MSGPACK_OBJECT_NIL) return NULL;
  return r->msg.result;
}

static kiln_status_t unexpected(const char *what) {
  return KILN_STATUS(KILN_E_INTERNAL, "kilnd's result is not %s (docs/protocol.md)", what);
}

kiln_status_t kiln_reply_void(const kiln_reply_t *r) { return kiln_reply_status(r); }

kiln_status_t kiln_reply_id(const kiln_reply_t *r, uint64_t *out_id) {
  KILN_RETURN_IF_ERROR(kiln_reply_status(r));
  const msgpack_object *id = kiln_object_get(r->msg.result, "id");
  if (!id || id->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return unexpected("{\"id\": uint}");
  *out_id = id->via.u64;
  return KILN_OK;
}

kiln_status_t kiln_reply_bytes(const kiln_reply_t *r, const void **out_data, size_t *out_n) {
  KILN_RETURN_IF_ERROR(kiln_reply_status(r));
  const msgpack_object *o = r->msg.result;
  if (o->type == MSGPACK_OBJECT_BIN) {
    *out_data = o->via.bin.ptr;
    *out_n = o->via.bin.size;
  } else if (o->type == MSGPACK_OBJECT_STR) {
    *out_data = o->via.str.ptr;
    *out_n = o->via.str.size;
  } else {
    return unexpected("bytes (bin)");
  }
  return KILN_OK;
}

kiln_status_t kiln_reply_tensor(const kiln_reply_t *r, kiln_tensor_desc_t *out_desc,
                                const void **out_data) {
  KILN_RETURN_IF_ERROR(kiln_reply_status(r));
  kiln_tensor_desc_t d;
  const uint8_t *data = NULL;
  kiln_status_t s = kiln_tensor_parse(r->msg.result, &d, &data);
  if (s) return kiln_status_annotate(s, "kilnd returned a malformed tensor");
  *out_desc = d;
  *out_data = data;
  return KILN_OK;
}

const msgpack_object *kiln_object_get(const msgpack_object *map, const char *key) {
  if (!map || map->type != MSGPACK_OBJECT_MAP) return NULL;
  return kiln_params_find(map, key);
}
