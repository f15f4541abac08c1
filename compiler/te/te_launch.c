/* Launch recipes (te_launch.h). */
#include "compiler/te/te_launch.h"

#include <msgpack.h>

#include "compiler/te/te_expr.h"
#include "protocol/rpc.h"

/* Launch expressions: ints, shape vars, add sub mul floordiv floormod min max. */
static bool pack_launch_expr(const te_program_t *p, msgpack_packer *pk, const te_expr_t *e) {
  static const char *const ops[] = {[TE_ADD] = "add", [TE_SUB] = "sub", [TE_MUL] = "mul",
                                    [TE_FLOORDIV] = "floordiv", [TE_FLOORMOD] = "floormod",
                                    [TE_MIN] = "min", [TE_MAX] = "max"};
  switch (e->kind) {
  case TE_INT: msgpack_pack_int64(pk, e->i); return true;
  case TE_VAR:
    if (p->vars[e->ref].kind != TE_V_SHAPE) return false;
    msgpack_pack_array(pk, 2);
    kiln_pack_cstr(pk, "var");
    kiln_pack_cstr(pk, p->vars[e->ref].name);
    return true;
  case TE_CAST: return pack_launch_expr(p, pk, e->args[0]);
  case TE_BIN:
    if (e->op >= KILN_ARRAY_SIZE(ops) || !ops[e->op]) return false;
    msgpack_pack_array(pk, 3);
    kiln_pack_cstr(pk, ops[e->op]);
    return pack_launch_expr(p, pk, e->args[0]) && pack_launch_expr(p, pk, e->args[1]);
  default: return false;
  }
}

/* {"name", "arg": its parameter index, "from": [argument, dimension] of the first tensor
 * argument whose declared shape has exactly the var there, or nil}. */
static void pack_var(const te_program_t *p, const te_kernel_t *k, msgpack_packer *pk, int v) {
  int arg = -1, from_arg = -1, from_dim = -1;
  for (int a = 0; a < k->nargs; a++)
    if (k->args[a] == -v - 1) arg = a;
  for (int a = 0; a < k->nargs && from_arg < 0; a++) {
    if (k->args[a] < 0) continue;
    const te_tensor_t *t = &p->tensors[k->args[a]];
    for (int d = 0; d < t->ndim && from_arg < 0; d++)
      if (t->shape[d]->kind == TE_VAR && t->shape[d]->ref == v) from_arg = a, from_dim = d;
  }
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_str(&m, "name", p->vars[v].name);
  kiln_fields_u64(&m, "arg", (uint32_t)arg);
  kiln_fields_key(&m, "from");
  if (from_arg < 0) {
    msgpack_pack_nil(pk);
  } else {
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint32(pk, (uint32_t)from_arg);
    msgpack_pack_uint32(pk, (uint32_t)from_dim);
  }
  kiln_fields_end(&m);
}

kiln_status_t te_launch_encode(te_program_t *p, te_kernel_t *k) {
  kiln_buf_t buf;
  kiln_packer_t packer;
  msgpack_packer *pk = &packer.pk;
  bool ok = true;
  kiln_buf_init(&buf);
  kiln_packer_init(&packer, &buf);
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_key(&m, "grid");
  msgpack_pack_array(pk, 3);
  for (int d = 0; d < 3; d++) ok &= pack_launch_expr(p, pk, te_simplify(p, k->grid[d]));
  kiln_fields_key(&m, "block");
  msgpack_pack_array(pk, 3);
  for (int d = 0; d < 3; d++) msgpack_pack_int64(pk, k->block[d]);
  kiln_fields_key(&m, "vars");
  msgpack_pack_array(pk, (uint32_t)p->nshape);
  for (int i = 0; i < p->nshape; i++) pack_var(p, k, pk, p->shape_vars[i]);
  if (k->parallel) { /* dimensions a client may launch with fewer groups (one per pool thread) */
    kiln_fields_key(&m, "parallel");
    msgpack_pack_array(pk, (uint32_t)__builtin_popcount(k->parallel));
    for (int d = 0; d < 3; d++)
      if (k->parallel >> d & 1) msgpack_pack_uint32(pk, (uint32_t)d);
  }
  kiln_fields_end(&m);
  kiln_status_t st = kiln_packer_status(&packer);
  if (st || !ok || buf.len > 65536) {
    kiln_buf_deinit(&buf);
    if (st) return st;
    return KC_COMPILE_ERROR("te: kernel %s: its grid is not expressible over the shape vars (use splits by constants "
                            "on bound vars)",
                            k->name);
  }
  size_t len;
  k->launch = kiln_buf_release(&buf, &len);
  k->launch_size = len;
  return KILN_OK;
}
