/* Internals of the cuda backend shared by its files (device/cuda/ only). */
#ifndef KILN_DEVICE_CUDA_BACKEND_H
#define KILN_DEVICE_CUDA_BACKEND_H

#include "device/cuda/lib.h"
#include "device/device.h"

struct kiln_device {
  kiln_device_info_t info;
  CUdevice dev;
  CUcontext ctx; /* the device's primary context, retained */
  CUstream stream;
  CUstream capture; /* where launch sequences are captured into CUDA graphs; made on first use */
  CUevent start, stop;
  CUdeviceptr flush_buf;
  size_t flush_bytes;
  bool retained;
};

struct kiln_dmem {
  CUdeviceptr ptr;
  uint64_t bytes;
};

struct kiln_dmodule {
  const kiln_artifact_t *art;
  CUmodule module;
  CUfunction *fns; /* parallel to art->kernels */
};

KILN_MUST_USE kiln_status_t kiln_cuda_describe(CUdevice d, uint32_t index, kiln_device_info_t *info);
KILN_MUST_USE kiln_status_t kiln_cuda_probe_here(kiln_device_info_t *infos, size_t cap, size_t *out_count,
                                   char *reason, size_t reason_cap);

KILN_MUST_USE kiln_status_t kiln_cuda_module_load(kiln_device_t *dev, const kiln_artifact_t *art,
                                    kiln_dmodule_t **out_mod);
void kiln_cuda_module_unload(kiln_device_t *dev, kiln_dmodule_t *mod);
KILN_MUST_USE kiln_status_t kiln_cuda_launch(kiln_device_t *dev, kiln_dmodule_t *mod, const kiln_launch_t *l,
                               uint32_t count, uint64_t deadline_ns, uint64_t *out_elapsed_ns);

/* Launch sequences (seq.c). */
KILN_MUST_USE kiln_status_t kiln_cuda_seq_create(kiln_device_t *dev, const kiln_seq_item_t *items, uint32_t count,
                                                 kiln_dseq_t **out_seq);
void kiln_cuda_seq_destroy(kiln_device_t *dev, kiln_dseq_t *seq);
KILN_MUST_USE kiln_status_t kiln_cuda_seq_run(kiln_device_t *dev, kiln_dseq_t *seq, uint64_t deadline_ns,
                                              kiln_seq_progress_cb progress, void *ctx, uint32_t *out_at);

#endif
