/* Launching on the device's stream, timing with events, waiting with a deadline. */
#include <sched.h>
#include <time.h>

#include "base/util.h"
#include "device/common.h"
#include "device/cuda/backend.h"

/* The default dynamic shared memory limit of a kernel; beyond it the kernel must opt in. */
#define DEFAULT_DYNAMIC_SHARED (48u * 1024u)
/* Poll without sleeping this long (short kernels finish within it), then sleep between polls. */
#define SPIN_NS 200000u
#define SLEEP_NS 20000

static CUfunction find_fn(const kiln_dmodule_t *m, const kiln_kernel_t *k) {
  int64_t i = kiln_device_kernel_index(m->art, k);
  return i < 0 ? NULL : m->fns[i];
}

/* cuStreamSynchronize cannot time out: poll cuStreamQuery against the deadline instead. */
static kiln_status_t wait_stream(kiln_device_t *dev, const kiln_launch_t *l, uint64_t deadline_ns) {
  uint64_t start = kiln_now_ns();
  for (;;) {
    CUresult r = kiln_cuda.cuStreamQuery(dev->stream);
    if (r == CUDA_SUCCESS) return KILN_OK;
    if (r != CUDA_ERROR_NOT_READY)
      return kiln_status_annotate(kiln_cuda_error(r, __FILE__, __LINE__, "kernel execution"),
                                  "kernel \"%s\" on %s (CUDA does not report the faulting address)",
                                  l->kernel->name, dev->info.id);
    uint64_t waited = kiln_now_ns() - start;
    if (deadline_ns && waited > deadline_ns)
      return KILN_STATUS(KILN_E_TIMEOUT,
                         "kernel \"%s\" ran past its deadline of %.3f ms; the GPU may still be busy "
                         "and the device worker restarts",
                         l->kernel->name, (double)deadline_ns / 1e6);
    if (waited < SPIN_NS) {
      sched_yield();
    } else {
      struct timespec ts = {0, SLEEP_NS};
      nanosleep(&ts, NULL);
    }
  }
}

kiln_status_t kiln_cuda_launch(kiln_device_t *dev, kiln_dmodule_t *mod, const kiln_launch_t *l,
                               uint32_t count, uint64_t deadline_ns, uint64_t *out_elapsed_ns) {
  if (count == 0) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "launch count must be at least 1");
  CUfunction fn = find_fn(mod, l->kernel);
  if (!fn) return KILN_STATUS(KILN_E_NOT_FOUND, "kernel \"%s\" is not in this module", l->kernel->name);
  if (l->shared > DEFAULT_DYNAMIC_SHARED)
    KILN_CU_TRY(kiln_cuda.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                             (int)l->shared));
  if (out_elapsed_ns) KILN_CU_TRY(kiln_cuda.cuEventRecord(dev->start, dev->stream));
  for (uint32_t c = 0; c < count; c++) {
    /* kernelParams: one pointer per parameter to its value, exactly kiln_launch_t.args. */
    CUresult r = kiln_cuda.cuLaunchKernel(fn, l->grid[0], l->grid[1], l->grid[2], l->block[0],
                                          l->block[1], l->block[2], l->shared, dev->stream,
                                          (void **)l->args, NULL);
    if (r != CUDA_SUCCESS)
      return kiln_status_annotate(kiln_cuda_error(r, __FILE__, __LINE__, "cuLaunchKernel"),
                                  "kernel \"%s\"", l->kernel->name);
  }
  if (out_elapsed_ns) KILN_CU_TRY(kiln_cuda.cuEventRecord(dev->stop, dev->stream));
  KILN_RETURN_IF_ERROR(wait_stream(dev, l, deadline_ns));
  if (out_elapsed_ns) {
    float ms = 0;
    KILN_CU_TRY(kiln_cuda.cuEventElapsedTime(&ms, dev->start, dev->stop));
    *out_elapsed_ns = (uint64_t)((double)ms * 1e6);
  }
  return KILN_OK;
}
