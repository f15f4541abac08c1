#include "device/common.h"

#include <stdlib.h>
#include <string.h>

kiln_status_t kiln_device_check_range(uint64_t size, uint64_t offset, uint64_t bytes) {
  if (offset > size || bytes > size - offset)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "copy of %llu bytes at offset %llu is outside a buffer of %llu bytes",
                       (unsigned long long)bytes, (unsigned long long)offset,
                       (unsigned long long)size);
  return KILN_OK;
}

int64_t kiln_device_kernel_index(const kiln_artifact_t *art, const kiln_kernel_t *k) {
  if (k >= art->kernels && k < art->kernels + art->num_kernels) return k - art->kernels;
  for (uint32_t i = 0; i < art->num_kernels; i++)
    if (strcmp(art->kernels[i].name, k->name) == 0) return i;
  return -1;
}

kiln_status_t kiln_seq_marks_init(kiln_seq_marks_t *m, const kiln_seq_item_t *items, uint32_t count) {
  m->count = 0;
  m->ends = NULL;
  if (count == 0) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "a launch sequence needs at least one launch");
  if (!(m->ends = calloc(count, sizeof *m->ends))) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < count; i++)
    if (items[i].mark || i + 1 == count) m->ends[m->count++] = i + 1;
  return KILN_OK;
}

void kiln_seq_marks_deinit(kiln_seq_marks_t *m) {
  free(m->ends);
  m->ends = NULL;
  m->count = 0;
}
