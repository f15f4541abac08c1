#include "device/seq.h"

#include <stdlib.h>

#include "base/util.h"

kiln_status_t kiln_seq_marks_init(kiln_seq_marks_t *m, const kiln_seq_item_t *items, uint32_t count) {
  *m = (kiln_seq_marks_t){0};
  if (count == 0) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "a launch sequence needs at least one launch");
  m->ends = calloc(count, sizeof *m->ends);
  m->kernels = calloc(count, sizeof *m->kernels);
  if (!m->ends || !m->kernels) {
    kiln_seq_marks_deinit(m);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  m->items = count;
  for (uint32_t i = 0; i < count; i++) {
    m->kernels[i] = items[i].launch->kernel->name;
    if (items[i].mark || i + 1 == count) m->ends[m->count++] = i + 1;
  }
  return KILN_OK;
}

void kiln_seq_marks_deinit(kiln_seq_marks_t *m) {
  free(m->ends);
  free(m->kernels);
  *m = (kiln_seq_marks_t){0};
}

const char *kiln_seq_marks_kernel(const kiln_seq_marks_t *m, uint32_t at) {
  return m->kernels[at < m->items ? at : m->items - 1];
}

void kiln_seq_watch_init(kiln_seq_watch_t *w, const kiln_seq_marks_t *m, uint64_t deadline_ns,
                         kiln_seq_progress_cb progress, void *ctx) {
  *w = (kiln_seq_watch_t){
      .marks = m, .progress = progress, .ctx = ctx, .start_ns = kiln_now_ns(), .deadline_ns = deadline_ns};
}

bool kiln_seq_watch_seen(kiln_seq_watch_t *w, uint32_t done) {
  if (done > w->marks->count) done = w->marks->count;
  if (done > w->done) {
    w->done = done;
    if (w->progress) w->progress(w->ctx, kiln_seq_watch_open(w));
  }
  return w->done == w->marks->count;
}

uint32_t kiln_seq_watch_open(const kiln_seq_watch_t *w) {
  /* the item after the last mark seen: a later item may have finished, but nothing says so */
  return w->done ? w->marks->ends[w->done - 1] : 0;
}

const char *kiln_seq_watch_kernel(const kiln_seq_watch_t *w) {
  return kiln_seq_marks_kernel(w->marks, kiln_seq_watch_open(w));
}

kiln_status_t kiln_seq_watch_place(const kiln_seq_watch_t *w, kiln_status_t st, uint32_t *out_at) {
  if (st) *out_at = kiln_seq_watch_open(w);
  return st;
}

kiln_status_t kiln_seq_watch_deadline(const kiln_seq_watch_t *w, uint32_t *out_at) {
  if (!w->deadline_ns || kiln_now_ns() - w->start_ns <= w->deadline_ns) return KILN_OK;
  return kiln_seq_watch_place(w,
                              KILN_STATUS(KILN_E_TIMEOUT,
                                          "kernel \"%s\" (or one after it) ran past the deadline of %.3f ms; the "
                                          "GPU may still be busy and the device worker restarts",
                                          kiln_seq_watch_kernel(w), (double)w->deadline_ns / 1e6),
                              out_at);
}
