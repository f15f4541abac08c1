/* The te front end's entry points (te.h): payload -> program -> inlined -> per kernel bound
 * inference, emission and launch recipe. */
#include "compiler/te/te.h"

#include <stdlib.h>
#include <string.h>

#include "compiler/te/te_bounds.h"
#include "compiler/te/te_emit.h"
#include "compiler/te/te_inline.h"
#include "compiler/te/te_launch.h"
#include "compiler/te/te_parse.h"
#include "compiler/te/te_program.h"

void kc_te_free(kc_te_program_t *p) { te_program_destroy(p); }

kiln_status_t kc_te_build(kc_job_t *job, kc_te_program_t **out_prog) {
  te_program_t *p = te_program_create();
  if (!p) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory reading the te program");
  *out_prog = p;
  KILN_RETURN_IF_ERROR(te_parse(job->req->payload, job->req->payload_size, p));
  KILN_RETURN_IF_ERROR(te_inline_all(p));
  job->mod = LLVMModuleCreateWithNameInContext("te", job->ctx);
  for (int k = 0; k < p->nkernels; k++) {
    KILN_RETURN_IF_ERROR(te_infer_bounds(p, k));
    KILN_RETURN_IF_ERROR(te_emit_kernel(job, p, k));
    KILN_RETURN_IF_ERROR(te_launch_encode(p, &p->kernels[k]));
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
