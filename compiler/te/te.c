/* The te front end's entry points: payload -> kernel-dialect module, and the launch recipes
 * (docs/te.md §7) that go into the artifact. */
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/te/te.h"

void kc_te_free(kc_te_program_t *p) {
  if (!p) return;
  for (int i = 0; i < p->nkernels; i++) free(p->kernels[i].launch);
  te_arena_free(p);
  free(p->vars);
  free(p->tensors);
  free(p);
}

/* Launch expressions: ints, shape vars, add sub mul floordiv floormod min max. */
static bool pack_launch_expr(const kc_te_program_t *p, msgpack_packer *pk, const te_expr_t *e) {
  static const char *const ops[] = {[TE_ADD] = "add", [TE_SUB] = "sub", [TE_MUL] = "mul",
                                    [TE_FLOORDIV] = "floordiv", [TE_FLOORMOD] = "floormod",
                                    [TE_MIN] = "min", [TE_MAX] = "max"};
  switch (e->kind) {
  case TE_INT: msgpack_pack_int64(pk, e->i); return true;
  case TE_VAR:
    if (p->vars[e->ref].kind != TE_V_SHAPE) return false;
    msgpack_pack_array(pk, 2);
    msgpack_pack_str_with_body(pk, "var", 3);
    msgpack_pack_str_with_body(pk, p->vars[e->ref].name, strlen(p->vars[e->ref].name));
    return true;
  case TE_BIN:
  case TE_CAST:
    if (e->kind == TE_CAST) return pack_launch_expr(p, pk, e->args[0]);
    if (e->op >= KILN_ARRAY_SIZE(ops) || !ops[e->op]) return false;
    msgpack_pack_array(pk, 3);
    msgpack_pack_str_with_body(pk, ops[e->op], strlen(ops[e->op]));
    return pack_launch_expr(p, pk, e->args[0]) && pack_launch_expr(p, pk, e->args[1]);
  default: return false;
  }
}

static kiln_status_t encode_launch(kc_te_program_t *p, te_kernel_t *k) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  bool ok = true;
  msgpack_pack_map(&pk, 3);
  msgpack_pack_str_with_body(&pk, "grid", 4);
  msgpack_pack_array(&pk, 3);
  for (int d = 0; d < 3; d++) ok &= pack_launch_expr(p, &pk, te_simplify(p, k->grid[d]));
  msgpack_pack_str_with_body(&pk, "block", 5);
  msgpack_pack_array(&pk, 3);
  for (int d = 0; d < 3; d++) msgpack_pack_int64(&pk, k->block[d]);
  msgpack_pack_str_with_body(&pk, "vars", 4);
  msgpack_pack_array(&pk, (uint32_t)p->nshape);
  for (int i = 0; i < p->nshape; i++) {
    int v = p->shape_vars[i];
    const char *name = p->vars[v].name;
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "name", 4);
    msgpack_pack_str_with_body(&pk, name, strlen(name));
    msgpack_pack_str_with_body(&pk, "arg", 3);
    int arg = -1;
    for (int a = 0; a < k->nargs; a++)
      if (k->args[a] == -v - 1) arg = a;
    msgpack_pack_uint32(&pk, (uint32_t)arg);
    msgpack_pack_str_with_body(&pk, "from", 4);
    int from_arg = -1, from_dim = -1;
    for (int a = 0; a < k->nargs && from_arg < 0; a++) {
      if (k->args[a] < 0) continue;
      const te_tensor_t *t = &p->tensors[k->args[a]];
      for (int d = 0; d < t->ndim && from_arg < 0; d++)
        if (t->shape[d]->kind == TE_VAR && t->shape[d]->ref == v) from_arg = a, from_dim = d;
    }
    if (from_arg < 0) {
      msgpack_pack_nil(&pk);
    } else {
      msgpack_pack_array(&pk, 2);
      msgpack_pack_uint32(&pk, (uint32_t)from_arg);
      msgpack_pack_uint32(&pk, (uint32_t)from_dim);
    }
  }
  if (!ok || sb.size > 65536) {
    msgpack_sbuffer_destroy(&sb);
    return KC_COMPILE_ERROR("te: kernel %s: its grid is not expressible over the shape vars (use splits by "
                            "constants on bound vars)",
                            k->name);
  }
  k->launch = (uint8_t *)sb.data;
  k->launch_size = sb.size;
  return KILN_OK;
}

kiln_status_t kc_te_build(kc_job_t *job, kc_te_program_t **out_prog) {
  kc_te_program_t *p = calloc(1, sizeof(*p));
  if (p) {
    p->vars = calloc(TE_MAX_VARS, sizeof(*p->vars));
    p->tensors = calloc(TE_MAX_TENSORS, sizeof(*p->tensors));
  }
  if (!p || !p->vars || !p->tensors) {
    kc_te_free(p);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory reading the te program");
  }
  *out_prog = p;
  KILN_RETURN_IF_ERROR(te_parse(job->req->payload, job->req->payload_size, p));
  KILN_RETURN_IF_ERROR(te_inline_all(p));
  job->mod = LLVMModuleCreateWithNameInContext("te", job->ctx);
  for (int k = 0; k < p->nkernels; k++) {
    KILN_RETURN_IF_ERROR(te_infer_bounds(p, k));
    KILN_RETURN_IF_ERROR(te_emit_kernel(job, p, k));
    KILN_RETURN_IF_ERROR(encode_launch(p, &p->kernels[k]));
  }
  return KILN_OK;
}

kiln_status_t kc_te_attach_launch(const kc_te_program_t *p, kiln_artifact_t *art) {
  for (int i = 0; i < p->nkernels; i++) {
    const te_kernel_t *k = &p->kernels[i];
    for (uint32_t j = 0; j < art->num_kernels; j++) {
      kiln_kernel_t *ak = &art->kernels[j];
      if (strcmp(ak->name, k->name) != 0 || ak->launch) continue;
      ak->launch = malloc(k->launch_size);
      if (!ak->launch) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
      memcpy(ak->launch, k->launch, k->launch_size);
      ak->launch_size = (uint32_t)k->launch_size;
    }
  }
  return KILN_OK;
}

void kc_te_tune_cpu(kc_job_t *job) {
  if (!strstr(job->target.features, "+avx512f")) return;
  static const char attr[] = "prefer-vector-width", val[] = "512";
  for (LLVMValueRef f = LLVMGetFirstFunction(job->mod); f; f = LLVMGetNextFunction(f))
    if (!LLVMIsDeclaration(f))
      LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                              LLVMCreateStringAttribute(job->ctx, attr, sizeof(attr) - 1, val, sizeof(val) - 1));
}
