#include "protocol/rpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kiln_rpc_msg_deinit(kiln_rpc_msg_t *m) { kiln_mp_doc_deinit(&m->doc); }

static bool is_uint(const msgpack_object *o) { return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER; }

static bool str_or_bin(const msgpack_object *o, const char **p, uint32_t *n) {
  return kiln_mp_text(o, p, n);
}

/* params must be [] or [map]; a map given directly is accepted too (some clients do). */
static kiln_status_t parse_params(const msgpack_object *o, const msgpack_object **out) {
  *out = NULL;
  if (o->type == MSGPACK_OBJECT_NIL) return KILN_OK;
  if (o->type == MSGPACK_OBJECT_MAP) {
    *out = o;
    return KILN_OK;
  }
  if (o->type != MSGPACK_OBJECT_ARRAY)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "params must be an array holding one map of named fields");
  if (o->via.array.size == 0) return KILN_OK;
  if (o->via.array.size != 1 || o->via.array.ptr[0].type != MSGPACK_OBJECT_MAP)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "params must be [] or [ {named fields} ], got an array of %u elements "
                       "that is not one map",
                       o->via.array.size);
  *out = &o->via.array.ptr[0];
  return KILN_OK;
}

kiln_status_t kiln_rpc_parse(const uint8_t *bytes, size_t len, kiln_rpc_msg_t *out,
                             bool *out_has_msgid) {
  out->type = KILN_RPC_REQUEST;
  out->msgid = 0;
  out->method = NULL;
  out->method_len = 0;
  out->params = out->error = out->result = NULL;
  out->odd = false;
  *out_has_msgid = false;
  /* The framer (frame.h) has bounded the nesting already; the reader's own bound is its cap. */
  kiln_status_t st = kiln_mp_doc_read(&out->doc, bytes, len, KILN_FRAME_MAX_DEPTH_CAP, true,
                                      &kiln_mp_err_params);
  if (st) {
    kiln_code_t code = kiln_status_code(st);
    kiln_status_free(st);
    return code == KILN_E_RESOURCE_EXHAUSTED
               ? KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory decoding a message")
               : KILN_STATUS(KILN_E_INVALID_ARGUMENT, "malformed MessagePack message");
  }
  const msgpack_object *root = &out->doc.root;
  if (root->type != MSGPACK_OBJECT_ARRAY || root->via.array.size < 3 || root->via.array.size > 4)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "a message must be an array: [0, msgid, method, params], "
                       "[1, msgid, error, result] or [2, method, params]");
  const msgpack_object *a = root->via.array.ptr;
  uint32_t n = root->via.array.size;
  if (!is_uint(&a[0]) || a[0].via.u64 > 2)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "message type must be 0, 1 or 2");
  out->type = (kiln_rpc_type_t)a[0].via.u64;
  if (out->type == KILN_RPC_NOTIFICATION) {
    if (n != 3) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "a notification has 3 elements");
    /* A notification gets no answer, so nothing in it can be refused: whatever its method
     * and params, it is well framed. What cannot be read is left NULL and flagged. */
    if (!str_or_bin(&a[1], &out->method, &out->method_len)) {
      out->method = NULL;
      out->method_len = 0;
      out->odd = true;
    }
    kiln_status_t ps = parse_params(&a[2], &out->params);
    if (ps) {
      kiln_status_free(ps);
      out->params = NULL;
      out->odd = true;
    }
    return KILN_OK;
  }
  if (n != 4) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "requests and responses have 4 elements");
  if (!is_uint(&a[1]) || a[1].via.u64 > UINT32_MAX)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "msgid must be an unsigned 32-bit integer");
  out->msgid = (uint32_t)a[1].via.u64;
  *out_has_msgid = true;
  if (out->type == KILN_RPC_RESPONSE) {
    out->error = &a[2];
    out->result = &a[3];
    return KILN_OK;
  }
  if (!str_or_bin(&a[2], &out->method, &out->method_len))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "method must be a string");
  return parse_params(&a[3], &out->params);
}

bool kiln_rpc_peek_msgid(const uint8_t *p, size_t len, uint32_t *out_msgid) {
  if (len < 3 || p[0] != 0x94 || p[1] != 0x00) return false;
  uint8_t b = p[2];
  if (b <= 0x7f) {
    *out_msgid = b;
    return true;
  }
  int n = b == 0xcc ? 1 : b == 0xcd ? 2 : b == 0xce ? 4 : 0;
  if (!n || len < 3 + (size_t)n) return false;
  uint32_t v = 0;
  for (int i = 0; i < n; i++) v = (v << 8) | p[3 + i];
  *out_msgid = v;
  return true;
}

bool kiln_rpc_method_is(const kiln_rpc_msg_t *m, const char *name) {
  size_t n = strlen(name);
  return m->method_len == n && memcmp(m->method, name, n) == 0;
}

bool kiln_obj_str_eq(const msgpack_object *o, const char *s) { return kiln_mp_eq(o, s); }

kiln_status_t kiln_obj_cstr(const msgpack_object *o, const char *what, char *out, size_t cap) {
  return kiln_mp_cstr(&kiln_mp_err_params, o, what, out, cap);
}

/* The named-field getters are protocol/mp.h's with the RPC's error (E_INVALID_ARGUMENT). */
const msgpack_object *kiln_params_find(const msgpack_object *params, const char *name) {
  return kiln_mp_find(params, name);
}

kiln_status_t kiln_params_check(const msgpack_object *params, const char *method,
                                const char *const *allowed) {
  return kiln_mp_check_keys(&kiln_mp_err_params, params, method, allowed);
}

kiln_status_t kiln_params_str(const msgpack_object *params, const char *name, bool required,
                              const char **out_ptr, uint32_t *out_len) {
  return kiln_mp_field_text(&kiln_mp_err_params, params, name, required, out_ptr, out_len);
}

kiln_status_t kiln_params_bytes(const msgpack_object *params, const char *name, bool required,
                                const uint8_t **out_ptr, size_t *out_len) {
  return kiln_mp_field_bytes(&kiln_mp_err_params, params, name, required, out_ptr, out_len);
}

kiln_status_t kiln_params_u64(const msgpack_object *params, const char *name, bool required,
                              uint64_t *out) {
  return kiln_mp_field_u64(&kiln_mp_err_params, params, name, required, out);
}

kiln_status_t kiln_params_i64(const msgpack_object *params, const char *name, bool required,
                              int64_t *out) {
  return kiln_mp_field_i64(&kiln_mp_err_params, params, name, required, out);
}

kiln_status_t kiln_params_f64(const msgpack_object *params, const char *name, bool required,
                              double *out) {
  return kiln_mp_field_f64(&kiln_mp_err_params, params, name, required, out);
}

kiln_status_t kiln_params_bool(const msgpack_object *params, const char *name, bool required,
                               bool *out) {
  return kiln_mp_field_bool(&kiln_mp_err_params, params, name, required, out);
}

kiln_status_t kiln_params_array(const msgpack_object *params, const char *name, bool required,
                                const msgpack_object_array **out) {
  return kiln_mp_field_array(&kiln_mp_err_params, params, name, required, out);
}

kiln_status_t kiln_params_map(const msgpack_object *params, const char *name, bool required,
                              const msgpack_object **out) {
  return kiln_mp_field_map(&kiln_mp_err_params, params, name, required, out);
}

/* --- Encoding --------------------------------------------------------------------------- */

static int write_cb(void *data, const char *buf, size_t len) {
  kiln_packer_t *p = data;
  kiln_status_t s = kiln_buf_append(p->buf, buf, len);
  if (s) {
    kiln_status_free(s);
    p->failed = true;
    return -1;
  }
  return 0;
}

void kiln_packer_init(kiln_packer_t *p, kiln_buf_t *buf) {
  p->buf = buf;
  p->failed = false;
  msgpack_packer_init(&p->pk, p, write_cb);
}

kiln_status_t kiln_packer_status(const kiln_packer_t *p) {
  return p->failed ? KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory encoding a message")
                   : KILN_OK;
}

bool kiln_packer_write(const kiln_packer_t *p, FILE *f) {
  if (p->failed) return false;
  return fwrite(p->buf->data, 1, p->buf->len, f) == p->buf->len && fflush(f) == 0;
}

void kiln_pack_cstr(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s, n);
}

void kiln_pack_kv_str(msgpack_packer *pk, const char *key, const char *value) {
  kiln_pack_cstr(pk, key);
  kiln_pack_cstr(pk, value);
}

void kiln_pack_kv_u64(msgpack_packer *pk, const char *key, uint64_t value) {
  kiln_pack_cstr(pk, key);
  msgpack_pack_uint64(pk, value);
}

void kiln_pack_kv_i64(msgpack_packer *pk, const char *key, int64_t value) {
  kiln_pack_cstr(pk, key);
  msgpack_pack_int64(pk, value);
}

void kiln_pack_kv_f64(msgpack_packer *pk, const char *key, double value) {
  kiln_pack_cstr(pk, key);
  msgpack_pack_double(pk, value);
}

void kiln_pack_kv_bool(msgpack_packer *pk, const char *key, bool value) {
  kiln_pack_cstr(pk, key);
  if (value) msgpack_pack_true(pk);
  else msgpack_pack_false(pk);
}

/* --- maps that count their fields ------------------------------------------------------- */

static kiln_packer_t *packer_of(msgpack_packer *pk) {
  if (pk->callback != write_cb) {
    /* A build-time mistake: the builder patches a kiln_buf, and no other sink has one. */
    fprintf(stderr, "kiln_fields: the packer is not a kiln_packer_t's\n");
    abort();
  }
  return pk->data;
}

void kiln_fields_begin(kiln_fields_t *m, msgpack_packer *pk) {
  kiln_packer_t *p = packer_of(pk);
  m->pk = pk;
  m->n = 0;
  m->at = p->buf->len;
  msgpack_pack_map(pk, 0); /* one byte, the fixmap form; kiln_fields_end sets the count */
}

void kiln_fields_key(kiln_fields_t *m, const char *key) {
  m->n++;
  kiln_pack_cstr(m->pk, key);
}

void kiln_fields_key_object(kiln_fields_t *m, const msgpack_object *key) {
  m->n++;
  msgpack_pack_object(m->pk, *key);
}

/* A whole field: counted, then packed as kiln_pack_kv_* packs it. */
#define FIELD(name, type)                                           \
  void kiln_fields_##name(kiln_fields_t *m, const char *k, type v) { \
    m->n++;                                                         \
    kiln_pack_kv_##name(m->pk, k, v);                               \
  }
FIELD(str, const char *)
FIELD(u64, uint64_t)
FIELD(i64, int64_t)
FIELD(f64, double)
FIELD(bool, bool)
#undef FIELD

void kiln_fields_end(kiln_fields_t *m) {
  kiln_packer_t *p = packer_of(m->pk);
  if (p->failed) return; /* the header's byte may not even be there */
  if (m->n < 16) {
    p->buf->data[m->at] = (uint8_t)(0x80 | m->n);
    return;
  }
  /* map16 or map32: 2 or 4 more bytes than reserved. Offsets, not pointers: the append may
   * move the buffer, and an enclosing map's header, before this one, stays where it is. */
  size_t more = m->n <= 0xffff ? 2 : 4;
  static const char pad[4];
  if (write_cb(p, pad, more)) return;
  uint8_t *h = p->buf->data + m->at;
  memmove(h + 1 + more, h + 1, p->buf->len - m->at - 1 - more);
  if (more == 2) {
    h[0] = 0xde;
    h[1] = (uint8_t)(m->n >> 8);
    h[2] = (uint8_t)m->n;
  } else {
    h[0] = 0xdf;
    h[1] = (uint8_t)(m->n >> 24);
    h[2] = (uint8_t)(m->n >> 16);
    h[3] = (uint8_t)(m->n >> 8);
    h[4] = (uint8_t)m->n;
  }
}

void kiln_rpc_pack_request_head(msgpack_packer *pk, uint32_t msgid, const char *method) {
  msgpack_pack_array(pk, 4);
  msgpack_pack_uint8(pk, 0);
  msgpack_pack_uint32(pk, msgid);
  kiln_pack_cstr(pk, method);
}

void kiln_rpc_pack_result_head(msgpack_packer *pk, uint32_t msgid) {
  msgpack_pack_array(pk, 4);
  msgpack_pack_uint8(pk, 1);
  msgpack_pack_uint32(pk, msgid);
  msgpack_pack_nil(pk);
}

void kiln_rpc_pack_error(msgpack_packer *pk, uint32_t msgid, kiln_code_t code, const char *message) {
  msgpack_pack_array(pk, 4);
  msgpack_pack_uint8(pk, 1);
  msgpack_pack_uint32(pk, msgid);
  msgpack_pack_array(pk, 2);
  msgpack_pack_uint32(pk, (uint32_t)code);
  kiln_pack_cstr(pk, message);
  msgpack_pack_nil(pk);
}

void kiln_rpc_pack_notification_head(msgpack_packer *pk, const char *method) {
  msgpack_pack_array(pk, 3);
  msgpack_pack_uint8(pk, 2);
  kiln_pack_cstr(pk, method);
}

kiln_status_t kiln_rpc_error_to_status(const msgpack_object *error) {
  if (!error || error->type == MSGPACK_OBJECT_NIL) return KILN_OK;
  if (error->type == MSGPACK_OBJECT_ARRAY && error->via.array.size == 2 &&
      error->via.array.ptr[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
    uint64_t code = error->via.array.ptr[0].via.u64;
    const msgpack_object *m = &error->via.array.ptr[1];
    const char *p = "";
    uint32_t n = 0;
    str_or_bin(m, &p, &n);
    kiln_code_t c = code > 0 && code < KILN_E_COUNT_ ? (kiln_code_t)code : KILN_E_INTERNAL;
    return kiln_status_make(c, "remote", 0, "%.*s", (int)n, p);
  }
  return KILN_STATUS(KILN_E_INTERNAL, "the peer sent an error that is not [code, message]");
}
