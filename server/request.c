/* Request params checked from the message alone (server/request.h). */
#include "server/request.h"

#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "protocol/rpc.h"

kiln_status_t kiln_build_params_parse(const msgpack_object *p, const char *what,
                                      kiln_build_params_t *b) {
  static const char *const fields[] = {"ir", "target", "format", "options", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(p, what, fields));
  memset(b, 0, sizeof(*b));
  KILN_RETURN_IF_ERROR(kiln_params_bytes(p, "ir", true, &b->payload, &b->size));
  if (b->size == 0) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "ir is empty");
  if (b->size > KILN_MAX_PAYLOAD)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "payload of %zu bytes exceeds the limit of %llu",
                       b->size, (unsigned long long)KILN_MAX_PAYLOAD);
  b->kind = KILN_PAYLOAD_AUTO;
  const msgpack_object *o;
  if ((o = kiln_params_find(p, "format"))) {
    char name[16];
    KILN_RETURN_IF_ERROR(kiln_obj_cstr(o, "format", name, sizeof(name)));
    kiln_status_t st = kiln_payload_kind_parse(name, &b->kind);
    if (st) {
      kiln_status_free(st);
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "format '%s' is not one of auto, llvm, hsaco, ptx, cpu-so, te", name);
    }
  }
  snprintf(b->target_arg, sizeof(b->target_arg), "cpu");
  if ((o = kiln_params_find(p, "target")))
    KILN_RETURN_IF_ERROR(kiln_obj_cstr(o, "target", b->target_arg, sizeof(b->target_arg)));
  b->opt_level = 3;
  const msgpack_object *opts = NULL;
  KILN_RETURN_IF_ERROR(kiln_params_map(p, "options", false, &opts));
  if (opts) {
    static const char *const ofields[] = {"opt_level", "max_block", "fast_math", NULL};
    KILN_RETURN_IF_ERROR(kiln_params_check(opts, "options", ofields));
    const msgpack_object *ol = kiln_params_find(opts, "opt_level");
    if (ol && ol->type == MSGPACK_OBJECT_STR && ol->via.str.size == 2 &&
        (ol->via.str.ptr[0] == 'O' || ol->via.str.ptr[0] == 'o'))
      b->opt_level = (uint64_t)(ol->via.str.ptr[1] - '0');
    else if (ol) KILN_RETURN_IF_ERROR(kiln_params_u64(opts, "opt_level", false, &b->opt_level));
    if (b->opt_level > 3)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "opt_level must be 0..3 or \"O0\"..\"O3\"");
    KILN_RETURN_IF_ERROR(kiln_params_u64(opts, "max_block", false, &b->max_block));
    if (b->max_block > 65536)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "max_block must be at most 65536");
    KILN_RETURN_IF_ERROR(kiln_params_bool(opts, "fast_math", false, &b->fast_math));
  }
  return KILN_OK;
}

/* [x] .. [x, y, z], each 1 .. 2^32-1; unused dimensions are 1. */
static kiln_status_t parse_dims(const msgpack_object *params, const char *name, uint32_t out[3]) {
  out[0] = out[1] = out[2] = 1;
  const msgpack_object_array *a = NULL;
  KILN_RETURN_IF_ERROR(kiln_params_array(params, name, true, &a));
  if (a->size < 1 || a->size > 3)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s must be an array of 1 to 3 positive integers",
                       name);
  for (uint32_t i = 0; i < a->size; i++) {
    if (a->ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a->ptr[i].via.u64 == 0 ||
        a->ptr[i].via.u64 > UINT32_MAX)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s[%u] must be an integer from 1 to 2^32-1",
                         name, i);
    out[i] = (uint32_t)a->ptr[i].via.u64;
  }
  return KILN_OK;
}

kiln_status_t kiln_launch_params_parse(const msgpack_object *p, bool timed,
                                       kiln_launch_params_t *out) {
  static const char *const lfields[] = {"module", "kernel", "device", "grid", "block", "args",
                                        "shared", "wait", "timeout_ms", NULL};
  static const char *const tfields[] = {"module", "kernel", "device", "grid", "block", "args",
                                        "shared", "wait", "timeout_ms", "number", "repeat",
                                        "min_repeat_ms", "warmup", "flush", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(p, timed ? "time" : "launch", timed ? tfields : lfields));
  /* time's defaults: one warm-up run, then one repeat of one run. */
  kiln_launch_params_t l = {.wait = true, .number = 1, .repeat = 1, .warmup = 1};
  KILN_RETURN_IF_ERROR(kiln_params_str(p, "module", true, &l.module, &l.module_len));
  KILN_RETURN_IF_ERROR(kiln_params_str(p, "kernel", true, &l.kernel, &l.kernel_len));
  KILN_RETURN_IF_ERROR(kiln_params_str(p, "device", false, &l.device, &l.device_len));
  KILN_RETURN_IF_ERROR(parse_dims(p, "grid", l.grid));
  KILN_RETURN_IF_ERROR(parse_dims(p, "block", l.block));
  uint64_t u = 0;
  KILN_RETURN_IF_ERROR(kiln_params_u64(p, "shared", false, &u));
  if (u > UINT32_MAX) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "shared is too large");
  l.shared = (uint32_t)u;
  if (timed) {
    static const char *const nums[] = {"number", "repeat", "min_repeat_ms", "warmup"};
    uint32_t *outs[] = {&l.number, &l.repeat, &l.min_repeat_ms, &l.warmup};
    for (size_t i = 0; i < KILN_ARRAY_SIZE(nums); i++) {
      u = *outs[i];
      KILN_RETURN_IF_ERROR(kiln_params_u64(p, nums[i], false, &u));
      if (u > 1000000)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s must be at most 1000000", nums[i]);
      *outs[i] = (uint32_t)u;
    }
    KILN_RETURN_IF_ERROR(kiln_params_bool(p, "flush", false, &l.flush));
  }
  KILN_RETURN_IF_ERROR(kiln_params_bool(p, "wait", false, &l.wait));
  KILN_RETURN_IF_ERROR(kiln_params_u64(p, "timeout_ms", false, &l.timeout_ms));
  if (l.timeout_ms > 7ull * 24 * 3600 * 1000)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "timeout_ms must be at most 604800000 (7 days)");
  KILN_RETURN_IF_ERROR(kiln_params_array(p, "args", true, &l.args));
  *out = l;
  return KILN_OK;
}
