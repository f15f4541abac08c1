/* What the GPU backends' launch sequences share (device.h seq_*). Both submit a sequence whole
 * and learn how far it got only at its marked items (cuda: an event recorded after each; hsa:
 * a signal the marked packets decrement), so both place a fault or a hang the same way: at the
 * first item not seen complete. kiln_seq_marks_t is where the marks fall, made at seq_create
 * and owned by the sequence; kiln_seq_watch_t is one run's view of them, on seq_run's stack:
 * the progress reports, the placing of a failure, the deadline. Called from the thread that
 * runs the sequence. */
#ifndef KILN_DEVICE_SEQ_H
#define KILN_DEVICE_SEQ_H

#include <stdbool.h>
#include <stdint.h>

#include "device/device.h"

typedef struct kiln_seq_marks {
  uint32_t *ends;       /* mark i: the number of items complete once it is (its item's index + 1) */
  uint32_t count;       /* marks; the last item is always marked */
  const char **kernels; /* each item's kernel name, for the errors (the launches outlive the marks) */
  uint32_t items;
} kiln_seq_marks_t;

/* E_INVALID_ARGUMENT for an empty sequence. */
KILN_MUST_USE kiln_status_t kiln_seq_marks_init(kiln_seq_marks_t *m, const kiln_seq_item_t *items, uint32_t count);
void kiln_seq_marks_deinit(kiln_seq_marks_t *m);
/* The kernel name of item `at` (the last item's for `at` past the end). Borrowed. */
const char *kiln_seq_marks_kernel(const kiln_seq_marks_t *m, uint32_t at);

typedef struct kiln_seq_watch {
  const kiln_seq_marks_t *marks;
  kiln_seq_progress_cb progress; /* may be NULL */
  void *ctx;
  uint64_t start_ns;
  uint64_t deadline_ns; /* from start_ns; 0: none */
  uint32_t done;        /* marks seen complete */
} kiln_seq_watch_t;

/* A run starting now: nothing seen complete yet. */
void kiln_seq_watch_init(kiln_seq_watch_t *w, const kiln_seq_marks_t *m, uint64_t deadline_ns,
                         kiln_seq_progress_cb progress, void *ctx);
/* `done` marks are now seen complete: progress is told when that moves forward (a smaller
 * count changes nothing; a larger one than there are marks means all). Returns whether every
 * item is complete. */
bool kiln_seq_watch_seen(kiln_seq_watch_t *w, uint32_t done);
/* The first item not seen complete (the item count once all are). */
uint32_t kiln_seq_watch_open(const kiln_seq_watch_t *w);
/* The kernel name of the first item not seen complete: where a fault or a hang is. Borrowed. */
const char *kiln_seq_watch_kernel(const kiln_seq_watch_t *w);
/* `st`, seen while the sequence runs (a fault, a failed query), placed at the first item not
 * seen complete: sets *out_at when st is an error. Returns st. */
kiln_status_t kiln_seq_watch_place(const kiln_seq_watch_t *w, kiln_status_t st, uint32_t *out_at);
/* E_TIMEOUT, placed as kiln_seq_watch_place places it, once the deadline has passed; else OK. */
KILN_MUST_USE kiln_status_t kiln_seq_watch_deadline(const kiln_seq_watch_t *w, uint32_t *out_at);

#endif
