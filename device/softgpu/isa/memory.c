/* Address checks (SOFTGPU.md §1 "Memory rules inside the interpreter"): every global, flat,
 * scalar and scratch access must lie inside one live allocation the GPU may access, with the
 * right access; LDS accesses inside the packet's group segment. SOFTGPU_CHECK=uninit marks and
 * checks initialised bytes; SOFTGPU_CHECK=race tracks LDS dwords per barrier epoch. */
#include <stdarg.h>
#include <stdio.h>

#include "device/softgpu/isa/internal.h"

static bool cached(sg_region_cache_t *rc, uint64_t va, uint32_t n, sg_region_t **out) {
  for (unsigned i = 0; i < rc->n; i++) {
    sg_region_t *r = &rc->r[i];
    if (va >= r->va && va - r->va < r->size && n <= r->size - (va - r->va)) {
      *out = r;
      return true;
    }
  }
  return false;
}

uint8_t *sg_mem_global(sg_wave_t *w, const sg_inst_t *in, uint64_t va, uint32_t n, uint32_t acc, int lane,
                       sg_region_t **out_region) {
  sg_job_t *job = w->g->job;
  *out_region = NULL;
  /* the queue's scratch range is backed by the interpreter */
  if (va >= job->d.scratch_va && va - job->d.scratch_va < job->d.scratch_va_size) {
    uint64_t off = va - job->d.scratch_va;
    if (off + n <= job->scratch_bytes) return job->scratch + off;
    sg_wave_fail(w, in, SG_FAULT_MEMORY, va, SG_FAULT_PAGE_NOT_PRESENT, lane,
                 "%s at 0x%llx: scratch address 0x%llx is beyond the scratch this dispatch set up", in->mnem,
                 (unsigned long long)in->pc, (unsigned long long)va);
    return NULL;
  }
  sg_region_cache_t *rc = w->g->rc;
  sg_region_t *r;
  if (!cached(rc, va, n, &r)) {
    sg_region_t fresh;
    if (!job->mem || !job->mem->lookup(job->mem->ctx, va, &fresh)) {
      sg_wave_fail(w, in, SG_FAULT_MEMORY, va, SG_FAULT_PAGE_NOT_PRESENT, lane,
                   "%s at 0x%llx: %s of %u bytes at 0x%llx: no allocation the GPU may access is there", in->mnem,
                   (unsigned long long)in->pc, acc & SG_ACC_WRITE ? "write" : "read", n, (unsigned long long)va);
      return NULL;
    }
    if (!(va >= fresh.va && va - fresh.va < fresh.size && n <= fresh.size - (va - fresh.va))) {
      uint64_t end = fresh.va + fresh.size;
      sg_wave_fail(w, in, SG_FAULT_MEMORY, va < end ? end : va, SG_FAULT_PAGE_NOT_PRESENT, lane,
                   "%s at 0x%llx: %s of %u bytes at 0x%llx runs past the end of its allocation [0x%llx, 0x%llx)",
                   in->mnem, (unsigned long long)in->pc, acc & SG_ACC_WRITE ? "write" : "read", n,
                   (unsigned long long)va, (unsigned long long)fresh.va, (unsigned long long)end);
      return NULL;
    }
    unsigned slot = rc->n < 8 ? rc->n++ : (rc->next++ & 7);
    rc->r[slot] = fresh;
    r = &rc->r[slot];
  }
  if ((r->access & acc) != acc) {
    bool wr = (acc & SG_ACC_WRITE) && !(r->access & SG_ACC_WRITE);
    sg_wave_fail(w, in, SG_FAULT_MEMORY, va, wr ? SG_FAULT_READ_ONLY : SG_FAULT_PAGE_NOT_PRESENT, lane,
                 "%s at 0x%llx: %s at 0x%llx: the allocation [0x%llx, +0x%llx) is %s", in->mnem,
                 (unsigned long long)in->pc, wr ? "write" : "read", (unsigned long long)va,
                 (unsigned long long)r->va, (unsigned long long)r->size, wr ? "read-only for the GPU" : "not readable");
    return NULL;
  }
  *out_region = r;
  return r->host + (va - r->va);
}

void sg_mem_init_mark(sg_region_t *r, uint64_t va, uint32_t n) {
  if (!r || !r->init_bits) return;
  uint64_t off = va - r->va;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t b = off + i;
    __atomic_fetch_or(&r->init_bits[b >> 3], (uint8_t)(1u << (b & 7)), __ATOMIC_RELAXED);
  }
}

void sg_mem_init_check(sg_wave_t *w, const sg_inst_t *in, sg_region_t *r, uint64_t va, uint32_t n, int lane) {
  if (!r || !r->init_bits) return;
  uint64_t off = va - r->va;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t b = off + i;
    if (!((__atomic_load_n(&r->init_bits[b >> 3], __ATOMIC_RELAXED) >> (b & 7)) & 1)) {
      sg_wave_warn(w, in, lane, va + i, "uninitialised read: %s at 0x%llx reads 0x%llx, which nothing wrote",
                   in->mnem, (unsigned long long)in->pc, (unsigned long long)(va + i));
      return;
    }
  }
}

uint8_t *sg_lds(sg_wave_t *w, const sg_inst_t *in, uint64_t off, uint32_t n, bool write, int lane) {
  sg_group_t *g = w->g;
  if (off + n > g->lds_size || off + n < off) {
    sg_wave_fail(w, in, SG_ERR_LDS_RANGE, off, 0, lane,
                 "%s at 0x%llx: LDS %s of %u bytes at offset 0x%llx is beyond the group segment (%u bytes)",
                 in->mnem, (unsigned long long)in->pc, write ? "write" : "read", n, (unsigned long long)off,
                 g->lds_size);
    return NULL;
  }
  if (g->race_w) {
    /* A dword touched by two waves between the same pair of barriers, with at least one
     * write, is a race (waves of a group run in any order on hardware). */
    uint32_t me = w->index + 1, ep = g->barrier_epoch;
    for (uint64_t d = off >> 2; d <= (off + n - 1) >> 2; d++) {
      uint32_t lw = g->race_w[d], lr = g->race_r[d];
      bool w_conflict = (lw >> 16) == (ep & 0xffff) && (lw & 0xffff) && (lw & 0xffff) != me;
      bool r_conflict = write && (lr >> 16) == (ep & 0xffff) && (lr & 0xffff) && (lr & 0xffff) != me;
      if (w_conflict || r_conflict) {
        sg_wave_warn(w, in, lane, off,
                     "LDS race: %s at 0x%llx %s LDS offset 0x%llx, which wave %u %s since the last barrier", in->mnem,
                     (unsigned long long)in->pc, write ? "writes" : "reads", (unsigned long long)(d * 4),
                     (w_conflict ? lw : lr) & 0xffff ? ((w_conflict ? lw : lr) & 0xffff) - 1 : 0,
                     w_conflict ? "wrote" : "read");
        /* report each dword once per epoch */
        g->race_w[d] = (ep & 0xffff) << 16 | me;
        g->race_r[d] = 0;
        continue;
      }
      if (write) g->race_w[d] = (ep & 0xffff) << 16 | me;
      else g->race_r[d] = (ep & 0xffff) << 16 | me;
    }
  }
  return g->lds + off;
}
