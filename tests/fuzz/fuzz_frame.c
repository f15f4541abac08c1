/* libFuzzer target: arbitrary bytes through the framer (in input-chosen splits and limits),
 * then every framed message through kiln_rpc_parse, the params getters and the tensor
 * codec. Besides memory errors (ASan/UBSan) it checks that:
 *   - splitting the input never changes what the framer returns (messages and final state);
 *   - msgpack-c sees each framed message as exactly one whole object, and protocol/mp.h's
 *     reader decodes it to the same tree;
 *   - the msgid peeked from raw bytes agrees with the one kiln_rpc_parse recovers.
 *
 * Input layout: byte 0 chooses limits and buffer size, byte 1 seeds the split pattern, the
 * rest is the stream. Build and run with tests/fuzz/run.sh. */
#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/frame.h"
#include "protocol/mp.h"
#include "protocol/rpc.h"
#include "protocol/tensor.h"
#include "tests/fuzz/fuzz_check.h"

#define MAX_MSGS 4096

typedef struct run {
  size_t count;
  size_t off[MAX_MSGS]; /* offset of each message in the input */
  size_t len[MAX_MSGS];
  kiln_frame_result_t last;
  kiln_code_t error_code;
} run_t;

static void exercise_params(const msgpack_object *params) {
  static const char *const names[] = {"dtype", "shape", "data", "id",     "offset", "size",
                                      "tensor", "device", "version", "token", "client", "absent",
                                      "fds",    "code",   "message", NULL};
  for (const char *const *n = names; *n; n++) {
    const char *s;
    uint32_t sn;
    const uint8_t *b;
    size_t bn;
    uint64_t u;
    int64_t i;
    double d;
    bool t;
    const msgpack_object_array *a;
    const msgpack_object *m;
    if (!kiln_params_find(params, *n)) {
      /* Absent: required is an error naming the field, optional leaves the output alone. */
      kiln_status_t st = kiln_params_u64(params, *n, true, &u);
      CHECK(st && strstr(kiln_status_message(st), *n));
      kiln_status_free(st);
      u = 7;
      CHECK(!kiln_params_u64(params, *n, false, &u) && u == 7);
      continue;
    }
    /* Strings and bytes are never NULL, even empty (callers memcpy them). */
    s = NULL;
    kiln_status_t st = kiln_params_str(params, *n, true, &s, &sn);
    CHECK(st || s);
    kiln_status_free(st);
    b = NULL;
    st = kiln_params_bytes(params, *n, true, &b, &bn);
    CHECK(st || b);
    kiln_status_free(st);
    kiln_status_free(kiln_params_u64(params, *n, true, &u));
    kiln_status_free(kiln_params_i64(params, *n, true, &i));
    kiln_status_free(kiln_params_f64(params, *n, true, &d));
    kiln_status_free(kiln_params_bool(params, *n, true, &t));
    kiln_status_free(kiln_params_array(params, *n, true, &a));
    kiln_status_free(kiln_params_map(params, *n, false, &m));
    const msgpack_object *o = kiln_params_find(params, *n);
    char buf[16];
    kiln_status_free(kiln_obj_cstr(o, *n, buf, sizeof(buf)));
    /* A field that could be a tensor. */
    kiln_tensor_desc_t desc;
    const uint8_t *data;
    st = kiln_tensor_parse(o, &desc, &data);
    if (!st) CHECK(desc.nbytes <= KILN_TENSOR_MAX_BYTES && desc.ndim <= KILN_MAX_DIMS);
    kiln_status_free(st);
  }
  kiln_status_free(kiln_params_check(params, "fuzz", names));
  static const char *const none[] = {NULL};
  kiln_status_free(kiln_params_check(params, "fuzz", none));
  kiln_tensor_desc_t desc;
  const uint8_t *data;
  kiln_status_t st = kiln_tensor_parse(params, &desc, &data);
  if (!st) {
    CHECK(desc.nbytes <= KILN_TENSOR_MAX_BYTES);
    size_t want = (size_t)desc.nbytes;
    /* The data must lie inside the message: touch its last byte. */
    if (want) {
      volatile uint8_t last = data[want - 1];
      (void)last;
    }
  }
  kiln_status_free(st);
  kiln_status_free(kiln_tensor_desc_parse(kiln_params_find(params, "dtype"),
                                          kiln_params_find(params, "shape"), &desc));
}

/* msgpack_object_equal, but floats compared by their bits (NaN is a value here). */
static bool same(const msgpack_object *a, const msgpack_object *b) {
  if (a->type != b->type) return false;
  switch (a->type) {
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64: return memcmp(&a->via.f64, &b->via.f64, 8) == 0;
  case MSGPACK_OBJECT_ARRAY:
    if (a->via.array.size != b->via.array.size) return false;
    for (uint32_t i = 0; i < a->via.array.size; i++)
      if (!same(&a->via.array.ptr[i], &b->via.array.ptr[i])) return false;
    return true;
  case MSGPACK_OBJECT_MAP:
    if (a->via.map.size != b->via.map.size) return false;
    for (uint32_t i = 0; i < a->via.map.size; i++)
      if (!same(&a->via.map.ptr[i].key, &b->via.map.ptr[i].key) ||
          !same(&a->via.map.ptr[i].val, &b->via.map.ptr[i].val))
        return false;
    return true;
  default: return msgpack_object_equal(*a, *b);
  }
}

static void exercise_message(const uint8_t *msg, size_t len) {
  /* msgpack-c agrees that this is exactly one object. */
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  CHECK(msgpack_unpack_next(&u, (const char *)msg, len, &off) == MSGPACK_UNPACK_SUCCESS);
  CHECK(off == len);
  /* ...and kiln's own reader (protocol/mp.h) decodes it to the same tree. */
  kiln_mp_doc_t doc;
  kiln_status_t ds = kiln_mp_doc_read(&doc, msg, len, KILN_FRAME_MAX_DEPTH_CAP, true, &kiln_mp_err_params);
  CHECK(!ds);
  CHECK(same(&doc.root, &u.data));
  kiln_mp_doc_deinit(&doc);
  msgpack_unpacked_destroy(&u);

  kiln_rpc_msg_t m;
  bool has_msgid = false;
  kiln_status_t s = kiln_rpc_parse(msg, len, &m, &has_msgid);
  uint32_t peeked;
  if (kiln_rpc_peek_msgid(msg, len, &peeked) && has_msgid) CHECK(peeked == m.msgid);
  if (s) {
    CHECK(kiln_status_code(s) == KILN_E_INVALID_ARGUMENT);
    CHECK(kiln_status_message(s)[0] != 0);
    kiln_status_free(s);
  } else {
    if (m.type != KILN_RPC_RESPONSE) {
      /* Only a notification may lack a readable method (it is ignored, never refused). */
      CHECK(m.method != NULL || (m.type == KILN_RPC_NOTIFICATION && m.odd));
      (void)kiln_rpc_method_is(&m, "upload");
      if (m.params) CHECK(m.params->type == MSGPACK_OBJECT_MAP);
      exercise_params(m.params);
      const msgpack_object *t = kiln_params_find(m.params, "tensor");
      if (t) exercise_params(t->type == MSGPACK_OBJECT_MAP ? t : NULL);
    } else {
      kiln_status_free(kiln_rpc_error_to_status(m.error));
      if (m.result->type == MSGPACK_OBJECT_MAP) exercise_params(m.result);
    }
  }
  kiln_rpc_msg_deinit(&m);
}

/* Feeds the stream; chunk sizes come from `seed` (0: all at once). */
static void run_reader(const kiln_limits_t *lim, size_t initial_cap, const uint8_t *p, size_t n,
                       uint32_t seed, bool exercise, run_t *out) {
  kiln_reader_t r;
  kiln_reader_init(&r, lim, initial_cap);
  memset(out, 0, offsetof(run_t, off));
  out->last = KILN_FRAME_NEED_MORE;
  size_t fed = 0, consumed = 0;
  uint32_t x = seed * 2654435761u + 1;
  while (fed < n && out->last != KILN_FRAME_ERROR) {
    size_t space;
    uint8_t *dst = kiln_reader_space(&r, &space);
    if (!dst) {
      out->last = KILN_FRAME_ERROR;
      break;
    }
    CHECK(space > 0);
    size_t k = n - fed;
    if (seed) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      size_t c = (x & 3) == 0 ? 1 : 1 + (x >> 4) % ((x & 3) == 1 ? 8 : 300);
      if (c < k) k = c;
    }
    if (k > space) k = space;
    memcpy(dst, p + fed, k);
    kiln_reader_commit(&r, k);
    fed += k;
    for (;;) {
      const uint8_t *msg;
      size_t len;
      kiln_frame_result_t res = kiln_reader_next(&r, &msg, &len);
      if (res != KILN_FRAME_MESSAGE) {
        out->last = res;
        break;
      }
      CHECK(len > 0 && len <= lim->max_message);
      CHECK(consumed + len <= fed);
      CHECK(memcmp(msg, p + consumed, len) == 0);
      if (out->count < MAX_MSGS) {
        out->off[out->count] = consumed;
        out->len[out->count] = len;
      }
      out->count++;
      consumed += len;
      if (exercise) exercise_message(msg, len);
    }
  }
  if (out->last == KILN_FRAME_ERROR) {
    kiln_status_t e = kiln_reader_error(&r);
    CHECK(e != NULL);
    out->error_code = kiln_status_code(e);
    size_t plen;
    const uint8_t *pending = kiln_reader_pending(&r, &plen);
    uint32_t id;
    (void)kiln_rpc_peek_msgid(pending, plen, &id);
    /* A byte that starts no object: msgpack-c rejects the message too. */
    if (out->error_code == KILN_E_INVALID_ARGUMENT && exercise) {
      msgpack_unpacked u;
      msgpack_unpacked_init(&u);
      size_t off = 0;
      CHECK(msgpack_unpack_next(&u, (const char *)p + consumed, n - consumed, &off) ==
            MSGPACK_UNPACK_PARSE_ERROR);
      msgpack_unpacked_destroy(&u);
    }
  } else {
    CHECK(kiln_reader_partial(&r) == (consumed < fed));
  }
  kiln_reader_deinit(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  uint8_t mode = data[0], seed = data[1];
  data += 2;
  size -= 2;

  kiln_limits_t lim;
  kiln_limits_default(&lim);
  /* Small limits keep each run fast and let the fuzzer reach them; msgpack-c's own stack
   * holds 32 levels, so depth stays at or below that. */
  lim.max_message = (mode & 1) ? 4096 : (1u << 20);
  lim.max_depth = 1 + (mode >> 3) % 32;
  lim.max_items = (mode & 2) ? 16 : 4096;
  lim.max_str = (mode & 4) ? 8 : 65536;
  size_t initial_cap = (mode & 0x80) ? 8 : 0;

  static run_t split, whole;
  run_reader(&lim, initial_cap, data, size, seed ? seed : 1, true, &split);
  run_reader(&lim, 0, data, size, 0, false, &whole);
  CHECK(split.count == whole.count);
  for (size_t i = 0; i < split.count && i < MAX_MSGS; i++)
    CHECK(split.off[i] == whole.off[i] && split.len[i] == whole.len[i]);
  CHECK(split.last == whole.last);
  CHECK(split.error_code == whole.error_code);
  return 0;
}
