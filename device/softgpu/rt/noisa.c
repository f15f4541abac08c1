/* Used only while device/softgpu/isa/ is not in the tree: code objects load (the runtime's checks
 * all run) but a dispatch stops with a clear error instead of running. */
#include <stdio.h>
#include <stdlib.h>

#include "device/softgpu/isa/sgisa.h"

struct sg_code {
  int unused;
};

sg_code_t *sg_code_create(sg_target_t target, uint64_t va, const uint8_t *image, uint64_t size, char *err,
                          size_t errcap) {
  (void)target, (void)va, (void)image, (void)size, (void)err, (void)errcap;
  return calloc(1, sizeof(sg_code_t));
}

void sg_code_destroy(sg_code_t *code) { free(code); }

sg_status_t sg_dispatch_run(const sg_dispatch_t *d, const sg_memory_t *mem, sg_warn_fn warn, void *warn_ctx,
                            sg_report_t *out) {
  (void)d, (void)mem, (void)warn, (void)warn_ctx;
  out->status = SG_ERR_UNIMPLEMENTED;
  snprintf(out->message, sizeof out->message,
           "this build of the stand-in has no interpreter (device/softgpu/isa/ was absent): kernels cannot run");
  return SG_ERR_UNIMPLEMENTED;
}

void sg_shutdown(void) {}
