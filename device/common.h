/* Small checks every backend needs. Pure functions; any thread. */
#ifndef KILN_DEVICE_COMMON_H
#define KILN_DEVICE_COMMON_H

#include <stdint.h>

#include "device/device.h"

/* E_INVALID_ARGUMENT unless [offset, offset + bytes) lies within a buffer of `size` bytes. */
KILN_MUST_USE kiln_status_t kiln_device_check_range(uint64_t size, uint64_t offset, uint64_t bytes);

/* The index of `kernel` in art->kernels: by address when it is an entry of that table (the
 * usual case), else by name; -1 when absent. */
int64_t kiln_device_kernel_index(const kiln_artifact_t *art, const kiln_kernel_t *kernel);

/* Where a launch sequence's marks fall (device.h seq_*): ends[i] is the number of items
 * complete once mark i is (its item's index + 1); the last item is always marked. */
typedef struct kiln_seq_marks {
  uint32_t *ends;
  uint32_t count;
} kiln_seq_marks_t;

KILN_MUST_USE kiln_status_t kiln_seq_marks_init(kiln_seq_marks_t *m, const kiln_seq_item_t *items, uint32_t count);
void kiln_seq_marks_deinit(kiln_seq_marks_t *m);
/* The first item not known complete once `done` marks are (0 .. the item count). */
static inline uint32_t kiln_seq_marks_open(const kiln_seq_marks_t *m, uint32_t done) {
  return done ? m->ends[(done < m->count ? done : m->count) - 1] : 0;
}

#endif
