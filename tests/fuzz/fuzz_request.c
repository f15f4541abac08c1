/* libFuzzer target: arbitrary bytes framed the way kilnd frames a connection (default
 * limits), each message through kiln_rpc_parse, then through the checks kilnd makes on the
 * params of its method before it touches any state (server/request.c for compile,
 * compile_batch, launch and time; the tensor codec for alloc and upload).
 * Besides memory errors it checks that:
 *   - a rejected request gets E_INVALID_ARGUMENT or E_RESOURCE_EXHAUSTED with a message;
 *   - an accepted build has a payload inside the message, of 1 byte to the payload limit,
 *     a known format, opt_level 0..3, max_block <= 65536, NUL-terminated strings;
 *   - an accepted launch has module and kernel inside the message and an args array.
 *
 * Input: the byte stream of one connection. Build and run with tests/fuzz/run.sh request. */
#include <stdint.h>
#include <string.h>

#include "protocol/frame.h"
#include "protocol/rpc.h"
#include "protocol/tensor.h"
#include "server/request.h"
#include "tests/fuzz/fuzz_check.h"

static const uint8_t *msg_lo, *msg_hi; /* the message being checked */

static bool inside(const void *p, size_t n) {
  const uint8_t *b = p;
  return b >= msg_lo && b <= msg_hi && n <= (size_t)(msg_hi - b);
}

static void check_rejection(kiln_status_t st) {
  kiln_code_t code = kiln_status_code(st);
  CHECK(code == KILN_E_INVALID_ARGUMENT || code == KILN_E_RESOURCE_EXHAUSTED);
  CHECK(kiln_status_message(st)[0] != 0);
  kiln_status_free(st);
}

static void check_build(const msgpack_object *p, const char *what) {
  kiln_build_params_t b;
  kiln_status_t st = kiln_build_params_parse(p, what, &b);
  if (st) return check_rejection(st);
  CHECK(b.size > 0 && b.size <= KILN_MAX_PAYLOAD && inside(b.payload, b.size));
  CHECK((unsigned)b.kind < KILN_PAYLOAD_KINDS_);
  CHECK(strnlen(b.target_arg, sizeof(b.target_arg)) < sizeof(b.target_arg));
  CHECK(b.opt_level <= 3 && b.max_block <= 65536);
}

static void check_launch(const msgpack_object *p, bool timed) {
  kiln_launch_params_t l;
  kiln_status_t st = kiln_launch_params_parse(p, timed, &l);
  if (st) return check_rejection(st);
  CHECK(l.module && inside(l.module, l.module_len));
  CHECK(l.kernel && inside(l.kernel, l.kernel_len));
  CHECK(!l.device || inside(l.device, l.device_len));
  CHECK(l.args);
}

static void check_request(const kiln_rpc_msg_t *m) {
  const msgpack_object *p = m->params;
  if (kiln_rpc_method_is(m, "compile")) {
    check_build(p, "compile");
  } else if (kiln_rpc_method_is(m, "compile_batch")) {
    const msgpack_object_array *items = NULL;
    kiln_status_t st = kiln_params_array(p, "items", true, &items);
    if (st) return check_rejection(st);
    for (uint32_t i = 0; i < items->size && i < 4096; i++) {
      const msgpack_object *it = &items->ptr[i];
      check_build(it->type == MSGPACK_OBJECT_MAP ? it : NULL, "item");
    }
  } else if (kiln_rpc_method_is(m, "launch") || kiln_rpc_method_is(m, "time")) {
    check_launch(p, kiln_rpc_method_is(m, "time"));
  } else if (kiln_rpc_method_is(m, "alloc")) {
    kiln_tensor_desc_t d;
    kiln_status_t st = kiln_tensor_desc_parse(kiln_params_find(p, "dtype"),
                                              kiln_params_find(p, "shape"), &d);
    if (st) return check_rejection(st);
    CHECK(d.nbytes <= KILN_TENSOR_MAX_BYTES && d.ndim <= KILN_MAX_DIMS);
  } else if (kiln_rpc_method_is(m, "upload")) {
    kiln_tensor_desc_t d;
    const uint8_t *data;
    const msgpack_object *t = kiln_params_find(p, "tensor");
    if (!t) return;
    kiln_status_t st = kiln_tensor_parse(t, &d, &data);
    if (st) return check_rejection(st);
    CHECK(d.nbytes <= KILN_TENSOR_MAX_BYTES && (d.nbytes == 0 || inside(data, d.nbytes)));
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  kiln_reader_t r;
  kiln_reader_init(&r, &lim, 0);
  size_t fed = 0;
  bool done = false;
  while (fed < size && !done) {
    size_t space;
    uint8_t *dst = kiln_reader_space(&r, &space);
    if (!dst) break;
    size_t k = size - fed < space ? size - fed : space;
    memcpy(dst, data + fed, k);
    kiln_reader_commit(&r, k);
    fed += k;
    for (;;) {
      const uint8_t *msg;
      size_t len;
      kiln_frame_result_t res = kiln_reader_next(&r, &msg, &len);
      if (res == KILN_FRAME_ERROR) done = true;
      if (res != KILN_FRAME_MESSAGE) break;
      kiln_rpc_msg_t m;
      bool has_msgid;
      kiln_status_t st = kiln_rpc_parse(msg, len, &m, &has_msgid);
      msg_lo = msg;
      msg_hi = msg + len;
      if (st) kiln_status_free(st);
      else if (m.type == KILN_RPC_REQUEST) check_request(&m);
      kiln_rpc_msg_deinit(&m);
    }
  }
  kiln_reader_deinit(&r);
  return 0;
}
