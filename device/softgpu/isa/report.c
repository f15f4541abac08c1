/* Reports of a wave that stops a job (a fault, an unimplemented instruction) or warns (the
 * SOFTGPU_CHECK findings): the first report of a job wins, with the group and work-item of the
 * lane that made it. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "device/softgpu/isa/internal.h"

void sg_job_stop(sg_job_t *job, const sg_report_t *r) {
  pthread_mutex_lock(&job->lock);
  if (!job->stopped) {
    job->stopped = true;
    job->report = *r;
  }
  pthread_mutex_unlock(&job->lock);
  atomic_store(&job->stop, 1);
}

static void item_of(const sg_wave_t *w, int lane, uint32_t out[3]) {
  const sg_group_t *g = w->g;
  uint32_t i = w->index * SG_LANES + (uint32_t)(lane < 0 ? 0 : lane);
  out[0] = i % g->size[0];
  out[1] = (i / g->size[0]) % g->size[1];
  out[2] = i / (g->size[0] * g->size[1]);
}

static void fill_report(sg_wave_t *w, const sg_inst_t *in, sg_status_t st, uint64_t addr, uint32_t reason, int lane,
                        sg_report_t *r) {
  memset(r, 0, sizeof(*r));
  r->status = st;
  r->address = addr;
  r->fault_reason = reason;
  r->pc = in ? in->pc : w->pc;
  memcpy(r->group, w->g->id, sizeof(r->group));
  if (lane < 0 && sg_exec(w)) lane = __builtin_ctzll(sg_exec(w));
  item_of(w, lane, r->item);
}

int sg_wave_fail(sg_wave_t *w, const sg_inst_t *in, sg_status_t st, uint64_t addr, uint32_t reason, int lane,
                 const char *fmt, ...) {
  sg_report_t r;
  fill_report(w, in, st, addr, reason, lane, &r);
  va_list ap;
  va_start(ap, fmt);
  char msg[200];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(r.message, sizeof(r.message), "%s (group %u,%u,%u, work-item %u,%u,%u)", msg, r.group[0], r.group[1],
           r.group[2], r.item[0], r.item[1], r.item[2]);
  w->state = SG_W_ERROR;
  sg_job_stop(w->g->job, &r);
  return 1;
}

void sg_wave_warn(sg_wave_t *w, const sg_inst_t *in, int lane, uint64_t addr, const char *fmt, ...) {
  sg_job_t *job = w->g->job;
  if (!job->warn) return;
  pthread_mutex_lock(&job->lock);
  bool go = job->warn_count < 100;
  job->warn_count++;
  pthread_mutex_unlock(&job->lock);
  if (!go) return;
  sg_report_t r;
  fill_report(w, in, SG_ERR_CHECK, addr, 0, lane, &r);
  va_list ap;
  va_start(ap, fmt);
  char msg[200];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(r.message, sizeof(r.message), "%s (kernel descriptor 0x%llx, group %u,%u,%u, work-item %u,%u,%u)", msg,
           (unsigned long long)job->d.kernel_object, r.group[0], r.group[1], r.group[2], r.item[0], r.item[1],
           r.item[2]);
  job->warn(job->warn_ctx, &r);
}

int sg_unimplemented(sg_wave_t *w, const sg_inst_t *in) {
  return sg_wave_fail(w, in, SG_ERR_UNIMPLEMENTED, 0, 0, -1,
                      "%s at 0x%llx is not implemented by the softgpu interpreter (encoding 0x%08x%s)", in->mnem,
                      (unsigned long long)in->pc, in->w0, in->size > 4 ? " ..." : "");
}
