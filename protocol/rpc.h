/* MessagePack-RPC messages (docs/protocol.md §1):
 *   request      [0, msgid, method, params]     params = [] or [ {named fields} ]
 *   response     [1, msgid, error, result]      error = nil or [code, message]
 *   notification [2, method, params]
 * Parsing works on one whole message cut by protocol/frame.h, decoded by protocol/mp.h; the
 * decoded objects point into the message bytes, so they live as long as those bytes and the
 * kiln_rpc_msg_t. The named-field getters are mp.h's with the RPC's error. */
#ifndef KILN_PROTOCOL_RPC_H
#define KILN_PROTOCOL_RPC_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/buf.h"
#include "base/status.h"
#include "protocol/frame.h"
#include "protocol/mp.h"

typedef enum kiln_rpc_type {
  KILN_RPC_REQUEST = 0,
  KILN_RPC_RESPONSE = 1,
  KILN_RPC_NOTIFICATION = 2,
} kiln_rpc_type_t;

typedef struct kiln_rpc_msg {
  kiln_rpc_type_t type;
  uint32_t msgid;            /* requests and responses */
  const char *method;        /* requests and notifications; not NUL-terminated */
  uint32_t method_len;
  const msgpack_object *params; /* the named-field map, or NULL for [] (empty) */
  const msgpack_object *error;  /* responses: nil or [code, message] */
  const msgpack_object *result; /* responses */
  bool odd; /* notifications: the method is not a str/bin (method NULL) or the params are not
               [] / [map] / map / nil (params NULL) */
  kiln_mp_doc_t doc;            /* the decoded tree (protocol/mp.h) */
} kiln_rpc_msg_t;

/* Decodes one whole message. On failure *out_has_msgid says whether out->msgid holds the
 * request's msgid: then the message is a well-framed request [0, msgid, method, params]
 * whose method or params are wrong, and an error reply can be addressed to it; otherwise
 * the message is none of the three shapes. A notification [2, method, params] always
 * decodes, whatever its method and params (see `odd`). The caller still calls
 * kiln_rpc_msg_deinit(). */
KILN_MUST_USE kiln_status_t kiln_rpc_parse(const uint8_t *bytes, size_t len, kiln_rpc_msg_t *out,
                             bool *out_has_msgid);
void kiln_rpc_msg_deinit(kiln_rpc_msg_t *m);

/* Best-effort msgid of a request whose bytes are (partly) `p`: [0, msgid, ...]. */
bool kiln_rpc_peek_msgid(const uint8_t *p, size_t len, uint32_t *out_msgid);

bool kiln_rpc_method_is(const kiln_rpc_msg_t *m, const char *name);

/* --- Named-field parameters ------------------------------------------------------------ */

/* Checks that every key of `params` is a str in `allowed` (NULL-terminated). The error
 * names the first unknown field and lists the allowed ones. */
KILN_MUST_USE kiln_status_t kiln_params_check(const msgpack_object *params, const char *method,
                                const char *const *allowed);
/* The value of field `name`, or NULL if absent (or params is NULL). */
const msgpack_object *kiln_params_find(const msgpack_object *params, const char *name);

/* Typed getters: E_INVALID_ARGUMENT naming the field when it is missing (and required) or
 * of the wrong type. When absent and not required they return OK and leave *out as is. */
KILN_MUST_USE kiln_status_t kiln_params_str(const msgpack_object *params, const char *name, bool required,
                              const char **out_ptr, uint32_t *out_len);
/* Accepts str or bin. */
KILN_MUST_USE kiln_status_t kiln_params_bytes(const msgpack_object *params, const char *name, bool required,
                                const uint8_t **out_ptr, size_t *out_len);
KILN_MUST_USE kiln_status_t kiln_params_u64(const msgpack_object *params, const char *name, bool required,
                              uint64_t *out);
KILN_MUST_USE kiln_status_t kiln_params_i64(const msgpack_object *params, const char *name, bool required,
                              int64_t *out);
/* Accepts float or integer. */
KILN_MUST_USE kiln_status_t kiln_params_f64(const msgpack_object *params, const char *name, bool required,
                              double *out);
KILN_MUST_USE kiln_status_t kiln_params_bool(const msgpack_object *params, const char *name, bool required,
                               bool *out);
KILN_MUST_USE kiln_status_t kiln_params_array(const msgpack_object *params, const char *name, bool required,
                                const msgpack_object_array **out);
KILN_MUST_USE kiln_status_t kiln_params_map(const msgpack_object *params, const char *name, bool required,
                              const msgpack_object **out);

/* Copies a str object into a NUL-terminated buffer; E_INVALID_ARGUMENT if it does not fit. */
KILN_MUST_USE kiln_status_t kiln_obj_cstr(const msgpack_object *o, const char *what, char *out, size_t cap);
bool kiln_obj_str_eq(const msgpack_object *o, const char *s);

/* --- Encoding --------------------------------------------------------------------------- */

/* A packer writing into a kiln_buf_t. msgpack_pack_* calls return 0 or -1 (out of memory);
 * kiln_packer_status() reports the first failure. */
typedef struct kiln_packer {
  msgpack_packer pk;
  kiln_buf_t *buf;
  bool failed;
} kiln_packer_t;

void kiln_packer_init(kiln_packer_t *p, kiln_buf_t *buf);
KILN_MUST_USE kiln_status_t kiln_packer_status(const kiln_packer_t *p);
/* Writes what p packed to f and flushes f (the workers' --probe and --identity answers, packed
 * whole first because a counted map's header is set last). False when packing or writing
 * failed. */
bool kiln_packer_write(const kiln_packer_t *p, FILE *f);

void kiln_pack_cstr(msgpack_packer *pk, const char *s);
void kiln_pack_kv_str(msgpack_packer *pk, const char *key, const char *value);
void kiln_pack_kv_u64(msgpack_packer *pk, const char *key, uint64_t value);
void kiln_pack_kv_i64(msgpack_packer *pk, const char *key, int64_t value);
void kiln_pack_kv_f64(msgpack_packer *pk, const char *key, double value);
void kiln_pack_kv_bool(msgpack_packer *pk, const char *key, bool value);

/* A map whose fields are counted as they are packed, so that no count is written by hand (a
 * wrong one silently corrupts the stream). kiln_fields_begin reserves the map's header in the
 * packer's buffer; kiln_fields_key packs one key and counts its field (the caller packs the
 * value, any value: a nested map is another kiln_fields_t), kiln_fields_str/... pack a whole
 * field; kiln_fields_end writes the header for the count in the form msgpack_pack_map would
 * (fixmap below 16 fields, map16, map32), moving the fields up when it needs more than the byte
 * reserved. The bytes are those of msgpack_pack_map(n) and the same fields. The packer must be
 * a kiln_packer_t's (its buffer is patched; another packer is a bug and aborts). After an out of
 * memory the packer's status reports it and end writes nothing. */
typedef struct kiln_fields {
  msgpack_packer *pk;
  size_t at;  /* the header's offset in the buffer */
  uint32_t n; /* fields so far */
} kiln_fields_t;

void kiln_fields_begin(kiln_fields_t *m, msgpack_packer *pk);
void kiln_fields_key(kiln_fields_t *m, const char *key);
void kiln_fields_key_object(kiln_fields_t *m, const msgpack_object *key); /* a key as decoded */
/* One whole field each, as kiln_pack_kv_* packs it. */
void kiln_fields_str(kiln_fields_t *m, const char *key, const char *value);
void kiln_fields_u64(kiln_fields_t *m, const char *key, uint64_t value);
void kiln_fields_i64(kiln_fields_t *m, const char *key, int64_t value);
void kiln_fields_f64(kiln_fields_t *m, const char *key, double value);
void kiln_fields_bool(kiln_fields_t *m, const char *key, bool value);
void kiln_fields_end(kiln_fields_t *m);

/* [0, msgid, method, then the caller packs params (an array: [] or [map]). */
void kiln_rpc_pack_request_head(msgpack_packer *pk, uint32_t msgid, const char *method);
/* [1, msgid, nil, then the caller packs the result. */
void kiln_rpc_pack_result_head(msgpack_packer *pk, uint32_t msgid);
/* [1, msgid, [code, message], nil] */
void kiln_rpc_pack_error(msgpack_packer *pk, uint32_t msgid, kiln_code_t code, const char *message);
/* [2, method, then the caller packs params. */
void kiln_rpc_pack_notification_head(msgpack_packer *pk, const char *method);

/* Reads an error object [code, message] of a response into a status (NULL if nil). */
KILN_MUST_USE kiln_status_t kiln_rpc_error_to_status(const msgpack_object *error);

#endif
