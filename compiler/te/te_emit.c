/* The kernel function of a te kernel (te_emit.h): a void function in section "kiln.kernel"
 * whose parameters are the kernel's args (tensors as noalias pointers, shape vars as index
 * scalars), with the launch bound GPUs get from its block; its body is the output stage's
 * nest (te_emit_nest.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/te/te_emit.h"

/* The block is known: GPU back ends get it as the launch bound (more registers per work-item
 * than the 1024 default allows), unless the request sets max_block. */
static void fn_attr(te_em_t *m, const char *attr, const char *val) {
  LLVMAddAttributeAtIndex(m->fn, LLVMAttributeFunctionIndex,
                          LLVMCreateStringAttribute(m->ctx, attr, (unsigned)strlen(attr), val, (unsigned)strlen(val)));
}

/* launch_bounds' min_blocks (docs/te.md §5): NVPTX nvvm.minctasm (.minnctapersm), which ptxas
 * meets by capping registers at 64K / (min_blocks * block); AMDGPU the waves per SIMD that many
 * work-groups make, amdgpu-waves-per-eu (4 SIMDs a CU on gfx9, 2 on gfx10+ in CU mode; at
 * most 8, what every gfx9+ SIMD holds). */
static void occupancy_hint(te_em_t *m, int64_t threads) {
  char v[32];
  int64_t b = m->k->min_blocks;
  if (!b) return;
  if (m->job->target.kind == KILN_TARGET_NVPTX) {
    snprintf(v, sizeof(v), "%lld", (long long)b);
    fn_attr(m, "nvvm.minctasm", v);
    return;
  }
  int64_t wave = m->job->target.wave_size ? m->job->target.wave_size : 64;
  int64_t simds = strncmp(m->job->target.cpu, "gfx9", 4) == 0 ? 4 : 2;
  int64_t w = (b * ((threads + wave - 1) / wave) + simds - 1) / simds;
  snprintf(v, sizeof(v), "%lld", (long long)(w < 1 ? 1 : w > 8 ? 8 : w));
  fn_attr(m, "amdgpu-waves-per-eu", v);
}

static void launch_bound(te_em_t *m) {
  const te_kernel_t *k = m->k;
  int64_t threads = k->block[0] * k->block[1] * k->block[2];
  if (m->job->target.kind == KILN_TARGET_CPU) return;
  occupancy_hint(m, m->job->req->options.max_block ? m->job->req->options.max_block : threads);
  if (m->job->req->options.max_block) return;
  bool amd = m->job->target.kind == KILN_TARGET_AMDGPU;
  char bound[32];
  snprintf(bound, sizeof(bound), amd ? "1,%lld" : "%lld", (long long)threads);
  fn_attr(m, amd ? "amdgpu-flat-work-group-size" : "nvvm.maxntid", bound);
}

static void name_params(te_em_t *m) {
  const te_kernel_t *k = m->k;
  unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
  for (int a = 0; a < k->nargs; a++) {
    LLVMValueRef prm = LLVMGetParam(m->fn, (unsigned)a);
    if (k->args[a] >= 0) {
      const char *name = m->p->tensors[k->args[a]].name;
      LLVMSetValueName2(prm, name, strlen(name));
      LLVMAddAttributeAtIndex(m->fn, (unsigned)a + 1, LLVMCreateEnumAttribute(m->ctx, noalias, 0));
    } else {
      const te_var_t *v = &m->p->vars[-k->args[a] - 1];
      LLVMSetValueName2(prm, v->name, strlen(v->name));
      m->val[-k->args[a] - 1] = prm;
    }
  }
}

static kiln_status_t kernel_function(te_em_t *m) {
  const te_kernel_t *k = m->k;
  LLVMTypeRef params[KC_MAX_PARAMS];
  for (int a = 0; a < k->nargs; a++) params[a] = k->args[a] >= 0 ? m->ptr : m->ity;
  LLVMTypeRef ft = LLVMFunctionType(LLVMVoidTypeInContext(m->ctx), params, (unsigned)k->nargs, 0);
  if (LLVMGetNamedFunction(m->mod, k->name))
    return KC_COMPILE_ERROR("te: kernel name %s clashes with a function kiln declares", k->name);
  m->fn = LLVMAddFunction(m->mod, k->name, ft);
  LLVMSetSection(m->fn, KC_KERNEL_SECTION);
  launch_bound(m);
  name_params(m);
  return KILN_OK;
}

kiln_status_t te_emit_kernel(kc_job_t *job, te_program_t *p, int kernel) {
  te_em_t m = {.job = job, .p = p, .k = &p->kernels[kernel], .ctx = job->ctx, .mod = job->mod};
  m.i1 = LLVMInt1TypeInContext(m.ctx);
  m.i8 = LLVMInt8TypeInContext(m.ctx);
  m.i32 = LLVMInt32TypeInContext(m.ctx);
  m.i64 = LLVMInt64TypeInContext(m.ctx);
  m.ptr = LLVMPointerTypeInContext(m.ctx, 0);
  m.ity = p->index_dtype == TE_I64 ? m.i64 : m.i32;
  m.sub = calloc((size_t)p->nvars + 1, sizeof(*m.sub));
  m.val = calloc((size_t)p->nvars + 1, sizeof(*m.val));
  m.buf = calloc((size_t)p->ntensors + 1, sizeof(*m.buf));
  m.half = calloc((size_t)p->ntensors + 1, sizeof(*m.half));
  m.regs = calloc((size_t)p->ntensors + 1, sizeof(*m.regs));
  m.vtvar = calloc((size_t)p->nvars + 1, sizeof(*m.vtvar));
  for (int v = 0; m.vtvar && v < p->nvars; v++) m.vtvar[v] = p->vars[v].vthread && p->vars[v].leaf;
  kiln_status_t s = !m.sub || !m.val || !m.buf || !m.half || !m.regs || !m.vtvar
                        ? KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory")
                        : KILN_OK;
  if (!s) s = kernel_function(&m);
  if (!s) {
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(m.ctx, m.fn, "entry");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(m.ctx, m.fn, "start");
    m.b = LLVMCreateBuilderInContext(m.ctx);
    m.eb = LLVMCreateBuilderInContext(m.ctx);
    LLVMPositionBuilderAtEnd(m.eb, entry);
    LLVMPositionBuilderAtEnd(m.b, body);
    te_em_stage(&m, m.k->root);
    if (!m.err) {
      LLVMBuildRetVoid(m.b);
      LLVMBuildBr(m.eb, body);
    }
    LLVMDisposeBuilder(m.b);
    LLVMDisposeBuilder(m.eb);
    s = m.err;
  }
  free(m.sub);
  free(m.val);
  free(m.buf);
  free(m.half);
  free(m.regs);
  free(m.vtvar);
  return s;
}
