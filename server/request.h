/* The pure part of checking request params: what kilnd can tell about a request from its
 * params alone, before it looks up devices, modules, tensors or quotas. No server state, so
 * it can be fuzzed (tests/fuzz/fuzz_request.c); any thread. */
#ifndef KILN_SERVER_REQUEST_H
#define KILN_SERVER_REQUEST_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "protocol/payload.h"

#define KILN_MAX_PAYLOAD (256ull << 20) /* bytes of one compile payload */

/* One build: the params of `compile`, or one item of `compile_batch`. Pointers borrow the
 * message. `target_arg` is the target as sent ("cpu" when absent); `target` is filled by
 * the caller once device ids are resolved. */
typedef struct kiln_build_params {
  const uint8_t *payload;
  size_t size;
  kiln_payload_kind_t kind; /* as named: auto is resolved with the payload (protocol/payload.h) */
  char target_arg[128];
  char target[128];
  uint64_t opt_level, max_block;
  bool fast_math;
} kiln_build_params_t;

/* Checks fields, payload size, format and options; `what` names the map in errors. */
KILN_MUST_USE kiln_status_t kiln_build_params_parse(const msgpack_object *p, const char *what,
                                      kiln_build_params_t *out);

/* `launch` and `time` params before the module and device are looked up. Strings borrow
 * the message and are not NUL-terminated. */
typedef struct kiln_launch_params {
  const char *module, *kernel, *device; /* device may be NULL (the default device) */
  uint32_t module_len, kernel_len, device_len;
  bool wait;
  uint64_t timeout_ms; /* 0: the server's --launch-timeout */
  const msgpack_object_array *args; /* checked against the kernel by server/launch.c */
  uint32_t grid[3], block[3]; /* unused dimensions 1 */
  uint32_t shared;
  /* time only (defaults 1, 1, 0, 1, false): */
  uint32_t number, repeat, min_repeat_ms, warmup;
  bool flush;
} kiln_launch_params_t;

KILN_MUST_USE kiln_status_t kiln_launch_params_parse(const msgpack_object *p, bool timed,
                                       kiln_launch_params_t *out);

#endif
