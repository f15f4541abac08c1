/* quotas: the calling tenant's own quotas and what it uses of each (docs/protocol.md).
 * A tuner sizes its batches and leases from it instead of learning them from errors. */
#include "server/server.h"
#include "server/tenants.h"

/* A limit as the wire says it: nil for unlimited. */
static void pack_limit(kiln_fields_t *m, const char *name, uint64_t v) {
  kiln_fields_key(m, name);
  if (v == UINT64_MAX) msgpack_pack_nil(m->pk);
  else msgpack_pack_uint64(m->pk, v);
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
  kiln_fields_t r, m;
  kiln_fields_begin(&r, call->pk);
  kiln_fields_str(&r, "tenant", t->name);
  kiln_fields_key(&r, "limits");
  kiln_fields_begin(&m, call->pk);
  for (size_t i = 0; i < KILN_ARRAY_SIZE(rows); i++) pack_limit(&m, rows[i].name, rows[i].limit);
  kiln_fields_end(&m);
  kiln_fields_key(&r, "used");
  kiln_fields_begin(&m, call->pk);
  for (size_t i = 0; i < KILN_ARRAY_SIZE(rows); i++)
    if (rows[i].counted) kiln_fields_u64(&m, rows[i].name, rows[i].used);
  kiln_fields_end(&m);
  kiln_fields_end(&r);
  return KILN_OK;
}
