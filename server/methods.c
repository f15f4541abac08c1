/* The method table: each protocol method's name and handler (docs/protocol.md). main.c gives
 * it to dispatch.c, which so names no handler: the handlers reply through dispatch.c, and the
 * table sits above both. `hello` comes first and `ping` second (dispatch.c lets only these
 * two through before a tokens server's hello). */
#include "base/util.h"
#include "server/cache_admin.h"
#include "server/compile.h"
#include "server/server.h"

static const kiln_method_t methods[] = {
    {"hello", kiln_method_hello},       {"ping", kiln_method_ping},
    {"devices", kiln_method_devices},   {"stats", kiln_method_stats},
    {"alloc", kiln_method_alloc},       {"upload", kiln_method_upload},
    {"write", kiln_method_write},       {"read", kiln_method_read},
    {"download", kiln_method_download}, {"free", kiln_method_free},
    {"compile", kiln_method_compile},   {"compile_batch", kiln_method_compile_batch},
    {"source", kiln_method_source},     {"cancel", kiln_method_cancel},
    {"launch", kiln_method_launch},     {"time", kiln_method_time},
    {"lease", kiln_method_lease},       {"release", kiln_method_release},
    {"graph_create", kiln_method_graph_create}, {"graph_run", kiln_method_graph_run},
    {"graph_time", kiln_method_graph_time},     {"graph_free", kiln_method_graph_free},
    {"quotas", kiln_method_quotas},           {"tensors", kiln_method_tensors},
    {"module", kiln_method_module},
    {"cache_list", kiln_method_cache_list}, {"cache_prune", kiln_method_cache_prune},
};

const kiln_method_t *kiln_methods(int *out_count) {
  *out_count = (int)KILN_ARRAY_SIZE(methods);
  return methods;
}
