/* A dispatch: the kernel descriptor read as AMDGPUUsage defines it, the initial register state
 * of every wave (user SGPRs in their fixed order, system SGPRs at USER_SGPR_COUNT, packed
 * work-item ids in v0, a partial EXEC for partial groups, everything else poisoned), the
 * work-groups spread over a thread pool, and the waves of one group run cooperatively on its
 * thread, switching at s_barrier. */
#include <errno.h>
#include <fenv.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "device/softgpu/isa/internal.h"

/* ---- environment ------------------------------------------------------------------------- */

static struct {
  unsigned threads;
  bool jitter;
  uint64_t jitter_seed;
  uint32_t check;
} env;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void env_read(void) {
  const char *t = getenv("SOFTGPU_THREADS");
  long n = t ? strtol(t, NULL, 10) : 0;
  if (n <= 0) {
    cpu_set_t set;
    n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
  }
  env.threads = (unsigned)(n < 1 ? 1 : n > 256 ? 256 : n);
  const char *j = getenv("SOFTGPU_JITTER");
  if (j && *j) {
    env.jitter = true;
    env.jitter_seed = strtoull(j, NULL, 0);
  }
  const char *c = getenv("SOFTGPU_CHECK");
  if (c) {
    if (strstr(c, "uninit")) env.check |= SG_CHECK_UNINIT;
    if (strstr(c, "race")) env.check |= SG_CHECK_RACE;
  }
}

/* ---- the kernel descriptor ------------------------------------------------------------------ */

static uint32_t rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static bool kd_read(const sg_dispatch_t *d, sg_kd_t *kd, uint64_t *entry, char *err, size_t cap) {
  sg_code_t *c = d->code;
  if (!c || d->kernel_object < c->va || d->kernel_object + 64 > c->va + c->size || (d->kernel_object & 63)) {
    snprintf(err, cap, "kernel object 0x%llx is not a 64-byte aligned kernel descriptor inside the code image",
             (unsigned long long)d->kernel_object);
    return false;
  }
  const uint8_t *p = c->image + (d->kernel_object - c->va);
  memset(kd, 0, sizeof(*kd));
  kd->group_fixed = rd32(p + 0);
  kd->private_fixed = rd32(p + 4);
  kd->kernarg_size = rd32(p + 8);
  memcpy(&kd->entry_offset, p + 16, 8);
  kd->rsrc3 = rd32(p + 44);
  kd->rsrc1 = rd32(p + 48);
  kd->rsrc2 = rd32(p + 52);
  memcpy(&kd->props, p + 56, 2);
  memcpy(&kd->preload, p + 58, 2);
  kd->user_sgpr_count = (kd->rsrc2 >> 1) & 0x1f;
  kd->round32 = (kd->rsrc1 >> 12) & 3;
  kd->round64 = (kd->rsrc1 >> 14) & 3;
  kd->denorm32 = (kd->rsrc1 >> 16) & 3;
  kd->denorm64 = (kd->rsrc1 >> 18) & 3;
  kd->dx10 = (kd->rsrc1 >> 21) & 1;
  kd->ieee = (kd->rsrc1 >> 23) & 1;
  /* gfx90a/gfx942: VGPRs and AGPRs share one file in granules of 8; ACCUM_OFFSET = first AGPR */
  uint32_t total = ((kd->rsrc1 & 0x3f) + 1) * 8;
  uint32_t accum = ((kd->rsrc3 & 0x3f) + 1) * 4;
  kd->vgprs = accum < total ? accum : total;
  kd->agprs = total > accum ? total - accum : 0;
  if (kd->vgprs > 256) kd->vgprs = 256;
  if (kd->agprs > 256) kd->agprs = 256;
  if (kd->props & (1u << 10)) {
    snprintf(err, cap, "the kernel descriptor asks for wave32; gfx90a and gfx942 run wave64 only");
    return false;
  }
  if (kd->preload & 0x7f) {
    snprintf(err, cap, "the kernel descriptor preloads %u kernarg dwords into SGPRs; softgpu does not model kernarg "
                       "preloading",
             kd->preload & 0x7f);
    return false;
  }
  int64_t e = (int64_t)d->kernel_object + kd->entry_offset;
  if (e < (int64_t)c->va || (uint64_t)e >= c->va + c->size || (e & 3)) {
    snprintf(err, cap, "the kernel entry 0x%llx is outside the code image", (unsigned long long)e);
    return false;
  }
  *entry = (uint64_t)e;
  return true;
}

/* ---- waves and groups ---------------------------------------------------------------------- */

typedef struct worker_mem {
  sg_wave_t *waves;
  uint32_t (*regs)[SG_LANES]; /* 512 rows per wave: VGPRs then AGPRs */
  uint8_t *lds;
  uint32_t *race;
  uint32_t nwaves;
} worker_mem_t;

static void wave_init(sg_group_t *g, sg_wave_t *w, uint32_t index, uint32_t items) {
  sg_job_t *job = g->job;
  const sg_kd_t *kd = &job->kd;
  const sg_dispatch_t *d = &job->d;
  uint32_t (*v)[SG_LANES] = w->v;
  uint32_t (*a)[SG_LANES] = w->a;
  memset(w, 0, sizeof(*w));
  w->v = v;
  w->a = a;
  w->g = g;
  w->index = index;
  w->pc = job->entry;
  for (int i = 0; i < 128; i++) w->s[i] = SG_POISON;
  w->scc = 0;
  for (uint32_t r = 0; r < kd->vgprs; r++)
    for (int l = 0; l < SG_LANES; l++) w->v[r][l] = SG_POISON;
  for (uint32_t r = 0; r < kd->agprs; r++)
    for (int l = 0; l < SG_LANES; l++) w->a[r][l] = SG_POISON;
  w->scratch_base = g->scratch_va + (uint64_t)index * job->wave_scratch;
  if (d->target == SG_GFX942) sg_set_sgpr64(w, SG_SRC_FLAT_SCR_LO, w->scratch_base); /* architected */

  /* user SGPRs, densely from s0 in the order of kernel_code_properties' enable bits */
  unsigned s = 0;
  if (kd->props & 1) for (int i = 0; i < 4; i++) w->s[s++] = d->scratch_srd[i];
  if (kd->props & 2) { sg_set_sgpr64(w, s, d->packet_va); s += 2; }
  if (kd->props & 4) { sg_set_sgpr64(w, s, d->queue_va); s += 2; }
  if (kd->props & 8) { sg_set_sgpr64(w, s, d->kernarg_address); s += 2; }
  if (kd->props & 16) { sg_set_sgpr64(w, s, d->dispatch_id); s += 2; }
  if (kd->props & 32) { sg_set_sgpr64(w, s, d->scratch_va); s += 2; }
  if (kd->props & 64) w->s[s++] = d->private_segment_size;
  /* system SGPRs at USER_SGPR_COUNT */
  s = kd->user_sgpr_count;
  if (kd->rsrc2 & (1u << 7)) w->s[s++] = g->id[0];
  if (kd->rsrc2 & (1u << 8)) w->s[s++] = g->id[1];
  if (kd->rsrc2 & (1u << 9)) w->s[s++] = g->id[2];
  if (kd->rsrc2 & (1u << 10)) w->s[s++] = (index == 0 ? 1u << 31 : 0) | (g->nwaves & 0x3f);
  if ((kd->rsrc2 & 1) && d->target == SG_GFX90A) w->s[s++] = (uint32_t)(w->scratch_base - d->scratch_va);

  /* v0: packed work-item ids; EXEC: the lanes holding work-items */
  unsigned ids = (kd->rsrc2 >> 11) & 3;
  uint32_t first = index * SG_LANES;
  uint32_t n = items - first < SG_LANES ? items - first : SG_LANES;
  for (uint32_t l = 0; l < n; l++) {
    uint32_t i = first + l;
    uint32_t x = i % g->size[0], y = (i / g->size[0]) % g->size[1], z = i / (g->size[0] * g->size[1]);
    w->v[0][l] = x | (ids >= 1 ? y << 10 : 0) | (ids >= 2 ? z << 20 : 0);
  }
  w->lanes = n;
  sg_set_exec(w, n == SG_LANES ? ~0ull : ((1ull << n) - 1));
}

static int wave_run(sg_wave_t *w) {
  sg_job_t *job = w->g->job;
  sg_code_t *code = job->d.code;
  uint64_t count = 0;
  char err[160];
  while (w->state == SG_W_RUN) {
    uint64_t pc = w->pc;
    const sg_inst_t *in;
    uint64_t slot = (pc - code->va) >> 2;
    if (pc - code->va < code->size && !(pc & 3) &&
        (in = atomic_load_explicit(&code->slots[slot], memory_order_acquire)) != NULL) {
      /* decoded before */
    } else if (!(in = sg_code_fetch(code, pc, err, sizeof(err)))) {
      sg_wave_fail(w, NULL, SG_ERR_ILLEGAL, pc, 0, -1, "%s", err);
      break;
    }
    w->pc = pc + in->size;
    count++;
    if (in->fn(w, in)) break;
    if ((count & 0xfff) == 0 && atomic_load_explicit(&job->stop, memory_order_relaxed)) {
      w->state = SG_W_ERROR;
      break;
    }
    if (job->d.max_instructions && w->icount + count > job->d.max_instructions) {
      sg_wave_fail(w, in, SG_ERR_BUDGET, 0, 0, -1, "a wave ran more than %llu instructions (last %s at 0x%llx)",
                   (unsigned long long)job->d.max_instructions, in->mnem, (unsigned long long)in->pc);
      break;
    }
  }
  w->icount += count;
  return w->state == SG_W_ERROR;
}

int sg_group_run(sg_group_t *g) {
  for (;;) {
    uint32_t done = 0, waiting = 0;
    for (uint32_t i = 0; i < g->nwaves; i++) {
      sg_wave_t *w = &g->waves[i];
      if (w->state == SG_W_RUN && wave_run(w)) return 1;
      if (w->state == SG_W_DONE) done++;
      else if (w->state == SG_W_BARRIER) waiting++;
      else if (w->state == SG_W_ERROR) return 1;
    }
    if (done == g->nwaves) return 0;
    if (waiting + done == g->nwaves) {
      /* every live wave reached s_barrier: release them (ended waves do not take part) */
      g->barrier_epoch++;
      for (uint32_t i = 0; i < g->nwaves; i++)
        if (g->waves[i].state == SG_W_BARRIER) g->waves[i].state = SG_W_RUN;
    }
  }
}

static int group_exec(sg_job_t *job, worker_mem_t *wm, sg_region_cache_t *rc, uint32_t slot, uint64_t linear) {
  sg_group_t g;
  memset(&g, 0, sizeof(g));
  g.job = job;
  g.rc = rc;
  g.id[0] = (uint32_t)(linear % job->ngroups[0]);
  g.id[1] = (uint32_t)((linear / job->ngroups[0]) % job->ngroups[1]);
  g.id[2] = (uint32_t)(linear / ((uint64_t)job->ngroups[0] * job->ngroups[1]));
  uint32_t items = 1;
  for (int k = 0; k < 3; k++) {
    uint32_t wg = job->d.workgroup_size[k];
    uint64_t start = (uint64_t)g.id[k] * wg;
    g.size[k] = (uint32_t)(job->d.grid_size[k] - start < wg ? job->d.grid_size[k] - start : wg);
    items *= g.size[k];
  }
  g.nwaves = (items + SG_LANES - 1) / SG_LANES;
  g.waves = wm->waves;
  g.lds = wm->lds;
  g.lds_size = job->d.group_segment_size;
  memset(g.lds, SG_POISON_BYTE, g.lds_size);
  if (wm->race) {
    g.race_w = wm->race;
    g.race_r = wm->race + (g.lds_size + 3) / 4;
    memset(wm->race, 0, 2 * sizeof(uint32_t) * ((g.lds_size + 3) / 4));
    g.barrier_epoch = 1;
  }
  g.scratch_va = job->d.scratch_va + (uint64_t)slot * job->waves_per_group * job->wave_scratch;
  if (job->wave_scratch)
    memset(job->scratch + (g.scratch_va - job->d.scratch_va), SG_POISON_BYTE, (size_t)g.nwaves * job->wave_scratch);
  for (uint32_t i = 0; i < g.nwaves; i++) {
    g.waves[i].v = wm->regs + (size_t)i * 512;
    g.waves[i].a = wm->regs + (size_t)i * 512 + 256;
    wave_init(&g, &g.waves[i], i, items);
  }
  int rc_ = sg_group_run(&g);
  uint64_t n = 0;
  for (uint32_t i = 0; i < g.nwaves; i++) n += g.waves[i].icount;
  atomic_fetch_add_explicit(&job->icount, n, memory_order_relaxed);
  return rc_;
}

/* ---- the pool ------------------------------------------------------------------------------- */

static struct {
  pthread_mutex_t lock;
  pthread_cond_t work;
  sg_job_t *head;
  pthread_t *threads;
  unsigned n;
  bool quit;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, false};

static bool job_open(const sg_job_t *j) {
  return !atomic_load(&j->stop) && atomic_load(&j->next_group) < j->total_groups && j->active_workers < j->nslots;
}

static void job_work(sg_job_t *job, uint32_t slot) {
  worker_mem_t wm = {0};
  sg_region_cache_t rc = {0};
  uint32_t nw = job->waves_per_group;
  wm.waves = calloc(nw, sizeof(sg_wave_t));
  wm.regs = malloc((size_t)nw * 512 * sizeof(*wm.regs));
  wm.lds = malloc(job->d.group_segment_size + 16);
  if (job->check & SG_CHECK_RACE) wm.race = calloc(2 * ((job->d.group_segment_size + 3) / 4) + 2, sizeof(uint32_t));
  if (!wm.waves || !wm.regs || !wm.lds || ((job->check & SG_CHECK_RACE) && !wm.race)) {
    sg_report_t r = {.status = SG_ERR_ILLEGAL};
    snprintf(r.message, sizeof(r.message), "out of memory for the registers of %u waves", nw);
    sg_job_stop(job, &r);
  } else {
    /* rounding mode of the kernel descriptor on this (the interpreter's own) thread */
    static const int modes[4] = {FE_TONEAREST, FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO};
    fesetround(modes[job->kd.round32 & 3]);
    for (;;) {
      if (atomic_load_explicit(&job->stop, memory_order_relaxed)) break;
      uint64_t gi = atomic_fetch_add(&job->next_group, 1);
      if (gi >= job->total_groups) break;
      if (group_exec(job, &wm, &rc, slot, gi)) break;
    }
    fesetround(FE_TONEAREST);
  }
  free(wm.waves);
  free(wm.regs);
  free(wm.lds);
  free(wm.race);
}

static void *worker_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    sg_job_t *job = NULL;
    while (!pool.quit) {
      for (sg_job_t *j = pool.head; j; j = j->next)
        if (job_open(j)) {
          job = j;
          break;
        }
      if (job) break;
      pthread_cond_wait(&pool.work, &pool.lock);
    }
    if (pool.quit) break;
    uint32_t slot = 0;
    while (job->slot_used & (1ull << slot)) slot++;
    job->slot_used |= 1ull << slot;
    job->active_workers++;
    pthread_mutex_unlock(&pool.lock);
    job_work(job, slot);
    pthread_mutex_lock(&pool.lock);
    job->slot_used &= ~(1ull << slot);
    job->active_workers--;
    if (job->active_workers == 0) pthread_cond_broadcast(&pool.work);
  }
  pthread_mutex_unlock(&pool.lock);
  return NULL;
}

/* Creates the threads at the first dispatch (never at load: kiln forks probe children first). */
static bool pool_start(char *err, size_t cap) {
  if (pool.threads) return true;
  pool.threads = calloc(env.threads, sizeof(pthread_t));
  if (!pool.threads) {
    snprintf(err, cap, "out of memory for the worker threads");
    return false;
  }
  pool.quit = false;
  for (unsigned i = 0; i < env.threads; i++) {
    if (pthread_create(&pool.threads[i], NULL, worker_main, NULL) != 0) break;
    pool.n++;
  }
  if (pool.n == 0) {
    snprintf(err, cap, "cannot create the interpreter's threads: %s", strerror(errno));
    free(pool.threads);
    pool.threads = NULL;
    return false;
  }
  return true;
}

void sg_shutdown(void) {
  pthread_mutex_lock(&pool.lock);
  if (!pool.threads) {
    pthread_mutex_unlock(&pool.lock);
    return;
  }
  pool.quit = true;
  pthread_cond_broadcast(&pool.work);
  pthread_mutex_unlock(&pool.lock);
  for (unsigned i = 0; i < pool.n; i++) pthread_join(pool.threads[i], NULL);
  pthread_mutex_lock(&pool.lock);
  free(pool.threads);
  pool.threads = NULL;
  pool.n = 0;
  pthread_mutex_unlock(&pool.lock);
}

/* ---- sg_dispatch_run ------------------------------------------------------------------------ */

static sg_status_t refuse(sg_report_t *out, sg_status_t st, const char *fmt, ...) {
  memset(out, 0, sizeof(*out));
  out->status = st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->message, sizeof(out->message), fmt, ap);
  va_end(ap);
  return st;
}

sg_status_t sg_dispatch_run(const sg_dispatch_t *d, const sg_memory_t *mem, sg_warn_fn warn, void *warn_ctx,
                            sg_report_t *out) {
  pthread_once(&env_once, env_read);
  sg_report_t scratch_report;
  if (!out) out = &scratch_report;
  if (!d || !d->code) return refuse(out, SG_ERR_ILLEGAL, "a dispatch needs a code image");
  if (d->target != d->code->target) return refuse(out, SG_ERR_ILLEGAL, "the dispatch and its code image are for different targets");
  sg_job_t *job = calloc(1, sizeof(*job));
  if (!job) return refuse(out, SG_ERR_ILLEGAL, "out of memory");
  job->d = *d;
  job->mem = mem;
  job->warn = warn;
  job->warn_ctx = warn_ctx;
  job->check = env.check;
  job->jitter = env.jitter;
  job->jitter_seed = env.jitter_seed;
  char err[200];
  if (!kd_read(d, &job->kd, &job->entry, err, sizeof(err))) {
    free(job);
    return refuse(out, SG_ERR_ILLEGAL, "%s", err);
  }
  uint64_t wg_items = 1;
  for (int k = 0; k < 3; k++) {
    if (d->workgroup_size[k] == 0 || d->grid_size[k] == 0) {
      free(job);
      return refuse(out, SG_ERR_ILLEGAL, "work-group size and grid size must be at least 1 in every dimension");
    }
    job->ngroups[k] = (d->grid_size[k] + d->workgroup_size[k] - 1) / d->workgroup_size[k];
    wg_items *= d->workgroup_size[k];
  }
  if (wg_items > 1024) {
    free(job);
    return refuse(out, SG_ERR_ILLEGAL, "a work-group of %llu work-items is more than 1024", (unsigned long long)wg_items);
  }
  job->total_groups = (uint64_t)job->ngroups[0] * job->ngroups[1] * job->ngroups[2];
  job->waves_per_group = (uint32_t)((wg_items + SG_LANES - 1) / SG_LANES);
  /* scratch: one slot of waves_per_group waves per worker thread, each wave private_segment_size
   * bytes per lane; the runtime's scratch range bounds how many groups run at once */
  job->nslots = env.threads;
  if (d->private_segment_size) {
    job->wave_scratch = ((uint64_t)d->private_segment_size * SG_LANES + 1023) & ~1023ull;
    uint64_t per_slot = job->wave_scratch * job->waves_per_group;
    uint64_t fit = d->scratch_va_size / per_slot;
    if (fit == 0) {
      free(job);
      return refuse(out, SG_ERR_ILLEGAL,
                    "the queue's scratch (%llu bytes) cannot hold one work-group's private segments (%llu bytes)",
                    (unsigned long long)d->scratch_va_size, (unsigned long long)per_slot);
    }
    if (fit < job->nslots) job->nslots = (uint32_t)fit;
    job->scratch_bytes = per_slot * job->nslots;
    job->scratch = malloc(job->scratch_bytes);
    if (!job->scratch) {
      uint64_t want = job->scratch_bytes;
      free(job);
      return refuse(out, SG_ERR_ILLEGAL, "out of memory for %llu bytes of scratch", (unsigned long long)want);
    }
  }
  if (job->nslots > 64) job->nslots = 64;
  pthread_mutex_init(&job->lock, NULL);
  pthread_mutex_lock(&pool.lock);
  if (!pool_start(err, sizeof(err))) {
    pthread_mutex_unlock(&pool.lock);
    free(job->scratch);
    pthread_mutex_destroy(&job->lock);
    free(job);
    return refuse(out, SG_ERR_ILLEGAL, "%s", err);
  }
  /* append, so that dispatches from several queues are served in order */
  sg_job_t **tail = &pool.head;
  while (*tail) tail = &(*tail)->next;
  *tail = job;
  pthread_cond_broadcast(&pool.work);
  while (!((atomic_load(&job->stop) || atomic_load(&job->next_group) >= job->total_groups) && job->active_workers == 0))
    pthread_cond_wait(&pool.work, &pool.lock);
  for (tail = &pool.head; *tail != job; tail = &(*tail)->next) {
  }
  *tail = job->next;
  pthread_mutex_unlock(&pool.lock);

  sg_status_t st = SG_OK;
  if (job->stopped) {
    *out = job->report;
    st = job->report.status;
  } else {
    memset(out, 0, sizeof(*out));
    out->status = SG_OK;
  }
  out->instructions = atomic_load(&job->icount);
  free(job->scratch);
  pthread_mutex_destroy(&job->lock);
  free(job);
  return st;
}
