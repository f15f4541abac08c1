/* quotas: the calling tenant's own quotas and what it uses of each (docs/protocol.md).
 * A tuner sizes its batches and leases from it instead of learning them from errors. */
#include "server/server.h"
#include "server/tenants.h"

/* A limit as the wire says it: nil for unlimited. */
static void pack_limit(msgpack_packer *pk, const char *name, uint64_t v) {
  kiln_pack_cstr(pk, name);
  if (v == UINT64_MAX) msgpack_pack_nil(pk);
  else msgpack_pack_uint64(pk, v);
}

kiln_status_t kiln_method_quotas(kiln_call_t *call) {
  static const char *const fields[] = {NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "quotas", fields));
  const kiln_tenant_t *t = call->conn->tenant;
  const kiln_quotas_t *q = &t->quotas;
  const struct { const char *name; uint64_t limit, used; bool counted; } rows[] = {
      {"memory", q->memory, t->memory, true},
      {"tensors", q->tensors, t->tensors, true},
      {"launches", q->launches, t->launches, true},
      {"compiles", q->compiles, t->compiles, true},
      {"message", q->message, 0, false},
      {"connections", q->connections, t->connections, true},
      /* the longest lease granted: the quota, capped by kilnd's own maximum (lease.c) */
      {"lease", KILN_MIN(q->lease, (uint64_t)KILN_LEASE_MAX_S), 0, false},
  };
  msgpack_packer *pk = call->pk;
  msgpack_pack_map(pk, 3);
  kiln_pack_kv_str(pk, "tenant", t->name);
  kiln_pack_cstr(pk, "limits");
  msgpack_pack_map(pk, (uint32_t)KILN_ARRAY_SIZE(rows));
  uint32_t counted = 0;
  for (size_t i = 0; i < KILN_ARRAY_SIZE(rows); i++) {
    pack_limit(pk, rows[i].name, rows[i].limit);
    counted += rows[i].counted;
  }
  kiln_pack_cstr(pk, "used");
  msgpack_pack_map(pk, counted);
  for (size_t i = 0; i < KILN_ARRAY_SIZE(rows); i++)
    if (rows[i].counted) kiln_pack_kv_u64(pk, rows[i].name, rows[i].used);
  return KILN_OK;
}
