/* Vector memory: DS (LDS), FLAT/GLOBAL/SCRATCH and MUBUF (the gfx90a scratch path through the
 * V#). Private memory uses the swizzled dword layout of SOFTGPU.md §4 for scratch_*, buffer
 * and flat-to-private alike, so the three agree. Global atomics are host atomics: work-groups
 * run on several threads. */
#include <stdio.h>

#include "device/softgpu/isa/internal.h"

enum { K_READ = 1, K_READ2, K_WRITE, K_WRITE2, K_ATOM, K_BPERM, K_PERM, K_LOAD, K_STORE, K_GATOM,
       K_LOAD_D16, K_LOAD_D16_HI, K_STORE_D16_HI };
enum { FX_SX = 1, FX_ST64 = 2, FX_RTN = 4 };
enum { A_ADD = 1, A_SUB, A_SWAP, A_CMPSWAP, A_SMIN, A_UMIN, A_SMAX, A_UMAX, A_AND, A_OR, A_XOR, A_INC, A_DEC,
       A_ADD_F32 };
#define MS(kind, size, flags, aop) ((kind) | (size) << 4 | (flags) << 9 | (aop) << 12)
#define KIND(s) ((s) & 15)
#define SIZE(s) (((s) >> 4) & 31)
#define FLAGS(s) (((s) >> 9) & 7)
#define AOP(s) (((s) >> 12) & 15)

static uint32_t *vreg(sg_wave_t *w, unsigned r, bool acc) { return acc ? w->a[r & 0xff] : w->v[r & 0xff]; }

/* The new memory value of an atomic (32 or 64 bits). */
static uint64_t atom_new(unsigned op, uint64_t old, uint64_t src, uint64_t cmp, unsigned size) {
  bool wide = size == 8;
  switch (op) {
  case A_ADD: return old + src;
  case A_SUB: return old - src;
  case A_SWAP: return src;
  case A_CMPSWAP: return old == cmp ? src : old;
  case A_SMIN: return wide ? ((int64_t)src < (int64_t)old ? src : old) : ((int32_t)src < (int32_t)old ? src : old);
  case A_UMIN: return src < old ? src : old;
  case A_SMAX: return wide ? ((int64_t)src > (int64_t)old ? src : old) : ((int32_t)src > (int32_t)old ? src : old);
  case A_UMAX: return src > old ? src : old;
  case A_AND: return old & src;
  case A_OR: return old | src;
  case A_XOR: return old ^ src;
  case A_INC: return old >= src ? 0 : old + 1;
  case A_DEC: return (old == 0 || old > src) ? src : old - 1;
  case A_ADD_F32: return sg_u32(sg_f32((uint32_t)old) + sg_f32((uint32_t)src));
  default: return old;
  }
}

/* ---- DS ---------------------------------------------------------------------------------- */

static int ds(sg_wave_t *w, const sg_inst_t *in) {
  unsigned sub = in->desc->sub, kind = KIND(sub), size = SIZE(sub), fl = FLAGS(sub);
  uint64_t m = sg_exec(w);
  if (in->gds)
    return sg_wave_fail(w, in, SG_ERR_UNIMPLEMENTED, 0, 0, -1, "%s at 0x%llx: GDS is not modelled", in->mnem,
                        (unsigned long long)in->pc);
  const uint32_t *addr = w->v[in->addr];
  uint32_t off16 = (uint32_t)in->offset1 << 8 | in->offset0;
  if (kind == K_BPERM || kind == K_PERM) {
    /* cross-lane through the LDS crossbar, no LDS access: the byte address selects the lane */
    const uint32_t *data = vreg(w, in->data0, in->acc);
    uint32_t out[SG_LANES];
    uint32_t *dst = vreg(w, in->vdst, in->acc);
    memcpy(out, dst, sizeof(out));
    if (kind == K_BPERM) {
      for (int l = 0; l < SG_LANES; l++) {
        if (!((m >> l) & 1)) continue;
        unsigned src = ((addr[l] + off16) >> 2) & 63;
        out[l] = ((m >> src) & 1) ? data[src] : 0;
      }
    } else {
      uint32_t tmp[SG_LANES] = {0};
      for (int l = 0; l < SG_LANES; l++)
        if ((m >> l) & 1) tmp[((addr[l] + off16) >> 2) & 63] = data[l];
      for (int l = 0; l < SG_LANES; l++)
        if ((m >> l) & 1) out[l] = tmp[l];
    }
    memcpy(dst, out, sizeof(out));
    return 0;
  }
  for (int l = 0; l < SG_LANES; l++) {
    if (!((m >> l) & 1)) continue;
    uint64_t a = addr[l];
    switch (kind) {
    case K_READ: {
      uint8_t *p = sg_lds(w, in, a + off16, size, false, l);
      if (!p) return 1;
      if (size >= 4) {
        for (unsigned i = 0; i < size / 4; i++) memcpy(&vreg(w, in->vdst + i, in->acc)[l], p + 4 * i, 4);
      } else {
        uint32_t v = 0;
        memcpy(&v, p, size);
        if (fl & FX_SX) v = size == 1 ? (uint32_t)(int32_t)(int8_t)v : (uint32_t)(int32_t)(int16_t)v;
        vreg(w, in->vdst, in->acc)[l] = v;
      }
      break;
    }
    case K_READ2: {
      uint64_t stride = (uint64_t)size * ((fl & FX_ST64) ? 64 : 1);
      for (int k = 0; k < 2; k++) {
        uint64_t o = a + (k ? in->offset1 : in->offset0) * stride;
        uint8_t *p = sg_lds(w, in, o, size, false, l);
        if (!p) return 1;
        for (unsigned i = 0; i < size / 4; i++)
          memcpy(&vreg(w, in->vdst + k * (size / 4) + i, in->acc)[l], p + 4 * i, 4);
      }
      break;
    }
    case K_WRITE: {
      uint8_t *p = sg_lds(w, in, a + off16, size, true, l);
      if (!p) return 1;
      if (size >= 4) {
        for (unsigned i = 0; i < size / 4; i++) memcpy(p + 4 * i, &vreg(w, in->data0 + i, in->acc)[l], 4);
      } else {
        memcpy(p, &vreg(w, in->data0, in->acc)[l], size);
      }
      break;
    }
    case K_WRITE2: {
      uint64_t stride = (uint64_t)size * ((fl & FX_ST64) ? 64 : 1);
      for (int k = 0; k < 2; k++) {
        uint64_t o = a + (k ? in->offset1 : in->offset0) * stride;
        uint8_t *p = sg_lds(w, in, o, size, true, l);
        if (!p) return 1;
        unsigned reg = k ? in->data1 : in->data0;
        for (unsigned i = 0; i < size / 4; i++) memcpy(p + 4 * i, &vreg(w, reg + i, in->acc)[l], 4);
      }
      break;
    }
    case K_ATOM: {
      uint8_t *p = sg_lds(w, in, a + off16, size, true, l);
      if (!p) return 1;
      uint64_t old = 0, src = 0, cmp = 0;
      memcpy(&old, p, size);
      src = vreg(w, in->data0, in->acc)[l];
      if (size == 8) src |= (uint64_t)vreg(w, in->data0 + 1, in->acc)[l] << 32;
      /* ds_cmpst: DATA0 is the compare value, DATA1 the new one */
      if (AOP(sub) == A_CMPSWAP) {
        cmp = src;
        src = vreg(w, in->data1, in->acc)[l];
      }
      uint64_t nv = atom_new(AOP(sub), old, src, cmp, size);
      memcpy(p, &nv, size);
      if (fl & FX_RTN) {
        vreg(w, in->vdst, in->acc)[l] = (uint32_t)old;
        if (size == 8) vreg(w, in->vdst + 1, in->acc)[l] = (uint32_t)(old >> 32);
      }
      break;
    }
    default:
      return sg_unimplemented(w, in);
    }
  }
  return 0;
}

/* ---- one lane's access of global, private or LDS memory through an address ---------------- */

typedef enum { SP_GLOBAL, SP_PRIVATE, SP_LDS } space_t;

/* Host pointer of dword-or-smaller piece [addr, addr+n) in `space` for lane l. Private
 * addresses are per-lane offsets; `base` is the wave's scratch base. NULL after a stop. */
static uint8_t *piece(sg_wave_t *w, const sg_inst_t *in, space_t sp, uint64_t addr, uint32_t n, bool write,
                      int l, uint64_t base, sg_region_t **r) {
  *r = NULL;
  if (sp == SP_LDS) return sg_lds(w, in, addr, n, write, l);
  if (sp == SP_PRIVATE) {
    uint32_t per_lane = w->g->job->d.private_segment_size;
    if (addr + n > per_lane) {
      sg_wave_fail(w, in, SG_FAULT_MEMORY, sg_swizzle(base, addr, (unsigned)l), SG_FAULT_PAGE_NOT_PRESENT, l,
                   "%s at 0x%llx: private (scratch) offset 0x%llx of %u bytes is beyond the %u bytes per work-item "
                   "of the dispatch",
                   in->mnem, (unsigned long long)in->pc, (unsigned long long)addr, n, per_lane);
      return NULL;
    }
    return sg_mem_global(w, in, sg_swizzle(base, addr, (unsigned)l), n, write ? SG_ACC_WRITE : SG_ACC_READ, l, r);
  }
  return sg_mem_global(w, in, addr, n, write ? SG_ACC_WRITE : SG_ACC_READ, l, r);
}

static bool check_uninit(const sg_wave_t *w) { return w->g->job->check & SG_CHECK_UNINIT; }

/* Loads or stores `size` bytes at addr for lane l (split in dwords: private memory swizzles
 * every dword separately). */
static int lane_access(sg_wave_t *w, const sg_inst_t *in, space_t sp, uint64_t addr, unsigned kind, unsigned size,
                       unsigned fl, int l, uint64_t base) {
  unsigned nd = size < 4 ? 1 : size / 4;
  bool store = kind == K_STORE || kind == K_STORE_D16_HI;
  bool acc = in->acc;
  for (unsigned i = 0; i < nd; i++) {
    unsigned n = size < 4 ? size : 4;
    sg_region_t *r;
    uint8_t *p = piece(w, in, sp, addr + 4 * i, n, store, l, base, &r);
    if (!p) return 1;
    if (store) {
      uint32_t v = vreg(w, in->data0 + i, acc)[l];
      if (kind == K_STORE_D16_HI) v >>= 16;
      memcpy(p, &v, n);
      if (r && r->init_bits) sg_mem_init_mark(r, addr + 4 * i, n);
    } else {
      if (r && check_uninit(w)) sg_mem_init_check(w, in, r, addr + 4 * i, n, l);
      uint32_t v = 0;
      memcpy(&v, p, n);
      uint32_t *dst = &vreg(w, in->vdst + i, acc)[l];
      if (kind == K_LOAD_D16 || kind == K_LOAD_D16_HI) {
        if (fl & FX_SX) v = (uint32_t)(n == 1 ? (int32_t)(int8_t)v : (int32_t)(int16_t)v);
        v &= 0xffff;
        *dst = kind == K_LOAD_D16 ? ((*dst & 0xffff0000u) | v) : ((*dst & 0xffff) | v << 16);
      } else {
        if (n < 4 && (fl & FX_SX)) v = (uint32_t)(n == 1 ? (int32_t)(int8_t)v : (int32_t)(int16_t)v);
        *dst = v;
      }
    }
  }
  return 0;
}

static int lane_atomic(sg_wave_t *w, const sg_inst_t *in, uint64_t va, unsigned size, unsigned aop, bool rtn, int l) {
  sg_region_t *r;
  if (va & (size - 1))
    return sg_wave_fail(w, in, SG_FAULT_MEMORY, va, SG_FAULT_PAGE_NOT_PRESENT, l,
                        "%s at 0x%llx: atomic at 0x%llx is not %u-byte aligned", in->mnem, (unsigned long long)in->pc,
                        (unsigned long long)va, size);
  uint8_t *p = sg_mem_global(w, in, va, size, SG_ACC_READ | SG_ACC_WRITE, l, &r);
  if (!p) return 1;
  uint64_t src = vreg(w, in->data0, in->acc)[l], cmp = 0;
  unsigned dw = size / 4;
  if (size == 8) src |= (uint64_t)vreg(w, in->data0 + 1, in->acc)[l] << 32;
  if (aop == A_CMPSWAP) {
    /* global cmpswap: DATA holds {new, compare} */
    cmp = vreg(w, in->data0 + dw, in->acc)[l];
    if (size == 8) cmp |= (uint64_t)vreg(w, in->data0 + dw + 1, in->acc)[l] << 32;
  }
  uint64_t old;
  if (size == 4) {
    uint32_t o = __atomic_load_n((uint32_t *)p, __ATOMIC_RELAXED), nv;
    do {
      nv = (uint32_t)atom_new(aop, o, src, cmp, 4);
    } while (!__atomic_compare_exchange_n((uint32_t *)p, &o, nv, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    old = o;
  } else {
    uint64_t o = __atomic_load_n((uint64_t *)p, __ATOMIC_RELAXED), nv;
    do {
      nv = atom_new(aop, o, src, cmp, 8);
    } while (!__atomic_compare_exchange_n((uint64_t *)p, &o, nv, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    old = o;
  }
  if (r && r->init_bits) sg_mem_init_mark(r, va, size);
  if (rtn) {
    vreg(w, in->vdst, in->acc)[l] = (uint32_t)old;
    if (size == 8) vreg(w, in->vdst + 1, in->acc)[l] = (uint32_t)(old >> 32);
  }
  return 0;
}

static bool canonical(uint64_t va) { return va < (1ull << 47) || va >= 0xffff800000000000ull; }

static int flat(sg_wave_t *w, const sg_inst_t *in) {
  unsigned sub = in->desc->sub, kind = KIND(sub), size = SIZE(sub), fl = FLAGS(sub);
  sg_job_t *job = w->g->job;
  uint64_t m = sg_exec(w);
  bool use_saddr = in->saddr != 0x7f;
  uint64_t wave_base = job->d.target == SG_GFX942 ? w->scratch_base : sg_sgpr64(w, SG_SRC_FLAT_SCR_LO);
  for (int l = 0; l < SG_LANES; l++) {
    if (!((m >> l) & 1)) continue;
    space_t sp = SP_GLOBAL;
    uint64_t va;
    if (in->seg == 1) { /* scratch: a per-lane private offset */
      bool use_v = job->d.target == SG_GFX942 ? in->lds : !use_saddr;
      va = (use_saddr ? w->s[in->saddr] : 0) + (use_v ? w->v[in->addr][l] : 0) + (int64_t)in->simm;
      va &= 0xffffffffull;
      sp = SP_PRIVATE;
    } else {
      if (in->seg == 2 && use_saddr) va = sg_sgpr64(w, in->saddr) + w->v[in->addr][l];
      else va = (uint64_t)w->v[in->addr][l] | (uint64_t)w->v[(in->addr + 1) & 0xff][l] << 32;
      va += (uint64_t)(int64_t)in->simm;
      if (in->seg == 0) {
        const sg_dispatch_t *d = &job->d;
        if (va - d->shared_aperture_base < (1ull << 32)) {
          sp = SP_LDS;
          va -= d->shared_aperture_base;
        } else if (va - d->private_aperture_base < (1ull << 32)) {
          sp = SP_PRIVATE;
          va -= d->private_aperture_base;
        } else if (!canonical(va)) {
          return sg_wave_fail(w, in, SG_FAULT_APERTURE, va, 0, l,
                              "%s at 0x%llx: flat address 0x%llx is outside every aperture", in->mnem,
                              (unsigned long long)in->pc, (unsigned long long)va);
        }
      }
    }
    if (kind == K_GATOM) {
      if (sp != SP_GLOBAL)
        return sg_wave_fail(w, in, SG_ERR_UNIMPLEMENTED, va, 0, l,
                            "%s at 0x%llx: a flat atomic on LDS or scratch is not modelled", in->mnem,
                            (unsigned long long)in->pc);
      if (lane_atomic(w, in, va, size, AOP(sub), in->glc, l)) return 1;
      continue;
    }
    if (lane_access(w, in, sp, va, kind, size, fl, l, wave_base)) return 1;
  }
  return 0;
}

/* ---- MUBUF --------------------------------------------------------------------------------- */

static int mubuf(sg_wave_t *w, const sg_inst_t *in) {
  unsigned sub = in->desc->sub, kind = KIND(sub), size = SIZE(sub), fl = FLAGS(sub);
  if (in->lds)
    return sg_wave_fail(w, in, SG_ERR_UNIMPLEMENTED, 0, 0, -1, "%s at 0x%llx: buffer loads to LDS are not modelled",
                        in->mnem, (unsigned long long)in->pc);
  uint32_t v0 = w->s[in->srsrc & 127], v1 = w->s[(in->srsrc + 1) & 127], v3 = w->s[(in->srsrc + 3) & 127];
  uint64_t base = (uint64_t)v0 | (uint64_t)(v1 & 0xffff) << 32;
  uint32_t stride = (v1 >> 16) & 0x3fff;
  bool swizzle = (v1 >> 31) & 1;
  unsigned elem = 2u << ((v3 >> 19) & 3);         /* ELEMENT_SIZE: 2, 4, 8, 16 bytes */
  unsigned istride = 8u << ((v3 >> 21) & 3);      /* INDEX_STRIDE: 8, 16, 32, 64 */
  bool add_tid = (v3 >> 23) & 1;
  uint32_t soff = sg_scalar32(w, in, in->soffset, SG_TY_B32);
  uint64_t m = sg_exec(w);
  sg_job_t *job = w->g->job;
  bool scratch = base - job->d.scratch_va < job->d.scratch_va_size;
  for (int l = 0; l < SG_LANES; l++) {
    if (!((m >> l) & 1)) continue;
    uint32_t index = (in->idxen ? w->v[in->addr][l] : 0) + (add_tid ? (uint32_t)l : 0);
    uint32_t voff = in->offen ? w->v[(in->addr + (in->idxen ? 1 : 0)) & 0xff][l] : 0;
    unsigned nd = size < 4 ? 1 : size / 4;
    for (unsigned i = 0; i < nd; i++) {
      uint64_t offset = (uint64_t)voff + (uint32_t)in->simm + 4 * i;
      uint64_t va;
      if (swizzle) {
        va = base + soff + ((index / istride) * stride + (offset / elem) * elem) * istride + (index % istride) * elem +
             offset % elem;
      } else {
        va = base + soff + offset + (uint64_t)index * stride;
      }
      unsigned n = size < 4 ? size : 4;
      bool store = kind == K_STORE;
      sg_region_t *r;
      if (scratch && swizzle && offset + n > job->d.private_segment_size) {
        return sg_wave_fail(w, in, SG_FAULT_MEMORY, va, SG_FAULT_PAGE_NOT_PRESENT, l,
                            "%s at 0x%llx: scratch offset 0x%llx is beyond the %u bytes per work-item of the dispatch",
                            in->mnem, (unsigned long long)in->pc, (unsigned long long)offset,
                            job->d.private_segment_size);
      }
      uint8_t *p = sg_mem_global(w, in, va, n, store ? SG_ACC_WRITE : SG_ACC_READ, l, &r);
      if (!p) return 1;
      if (store) {
        memcpy(p, &vreg(w, in->data0 + i, in->acc)[l], n);
        if (r && r->init_bits) sg_mem_init_mark(r, va, n);
      } else {
        if (r && check_uninit(w)) sg_mem_init_check(w, in, r, va, n, l);
        uint32_t v = 0;
        memcpy(&v, p, n);
        if (n < 4 && (fl & FX_SX)) v = (uint32_t)(n == 1 ? (int32_t)(int8_t)v : (int32_t)(int16_t)v);
        vreg(w, in->data0 + i, in->acc)[l] = v; /* MUBUF loads write VDATA */
      }
    }
  }
  return 0;
}

#define DSOP(n, kind, size, fl, aop) {#n, ds, MS(kind, size, fl, aop), 0, 0}
#define FL(n, kind, size, fl) {"flat_" #n, flat, MS(kind, size, fl, 0), 0, 0}, \
                              {"global_" #n, flat, MS(kind, size, fl, 0), 0, 0}, \
                              {"scratch_" #n, flat, MS(kind, size, fl, 0), 0, 0},
#define AT(n, size, aop) {"flat_atomic_" #n, flat, MS(K_GATOM, size, 0, aop), 0, 0}, \
                         {"global_atomic_" #n, flat, MS(K_GATOM, size, 0, aop), 0, 0},
#define BUF(n, kind, size, fl) {"buffer_" #n, mubuf, MS(kind, size, fl, 0), 0, 0},

const sg_opdesc_t sg_ops_mem[] = {
  DSOP(ds_read_b32, K_READ, 4, 0, 0), DSOP(ds_read_b64, K_READ, 8, 0, 0), DSOP(ds_read_b96, K_READ, 12, 0, 0),
  DSOP(ds_read_b128, K_READ, 16, 0, 0), DSOP(ds_read_u8, K_READ, 1, 0, 0), DSOP(ds_read_i8, K_READ, 1, FX_SX, 0),
  DSOP(ds_read_u16, K_READ, 2, 0, 0), DSOP(ds_read_i16, K_READ, 2, FX_SX, 0),
  DSOP(ds_read2_b32, K_READ2, 4, 0, 0), DSOP(ds_read2_b64, K_READ2, 8, 0, 0),
  DSOP(ds_read2st64_b32, K_READ2, 4, FX_ST64, 0), DSOP(ds_read2st64_b64, K_READ2, 8, FX_ST64, 0),
  DSOP(ds_write_b8, K_WRITE, 1, 0, 0), DSOP(ds_write_b16, K_WRITE, 2, 0, 0), DSOP(ds_write_b32, K_WRITE, 4, 0, 0),
  DSOP(ds_write_b64, K_WRITE, 8, 0, 0), DSOP(ds_write_b96, K_WRITE, 12, 0, 0),
  DSOP(ds_write_b128, K_WRITE, 16, 0, 0), DSOP(ds_write2_b32, K_WRITE2, 4, 0, 0),
  DSOP(ds_write2_b64, K_WRITE2, 8, 0, 0), DSOP(ds_write2st64_b32, K_WRITE2, 4, FX_ST64, 0),
  DSOP(ds_write2st64_b64, K_WRITE2, 8, FX_ST64, 0),
  DSOP(ds_add_u32, K_ATOM, 4, 0, A_ADD), DSOP(ds_add_rtn_u32, K_ATOM, 4, FX_RTN, A_ADD),
  DSOP(ds_sub_u32, K_ATOM, 4, 0, A_SUB), DSOP(ds_sub_rtn_u32, K_ATOM, 4, FX_RTN, A_SUB),
  DSOP(ds_min_i32, K_ATOM, 4, 0, A_SMIN), DSOP(ds_max_i32, K_ATOM, 4, 0, A_SMAX),
  DSOP(ds_min_u32, K_ATOM, 4, 0, A_UMIN), DSOP(ds_max_u32, K_ATOM, 4, 0, A_UMAX),
  DSOP(ds_and_b32, K_ATOM, 4, 0, A_AND), DSOP(ds_or_b32, K_ATOM, 4, 0, A_OR), DSOP(ds_xor_b32, K_ATOM, 4, 0, A_XOR),
  DSOP(ds_add_f32, K_ATOM, 4, 0, A_ADD_F32), DSOP(ds_add_rtn_f32, K_ATOM, 4, FX_RTN, A_ADD_F32),
  DSOP(ds_wrxchg_rtn_b32, K_ATOM, 4, FX_RTN, A_SWAP), DSOP(ds_cmpst_rtn_b32, K_ATOM, 4, FX_RTN, A_CMPSWAP),
  DSOP(ds_add_u64, K_ATOM, 8, 0, A_ADD), DSOP(ds_add_rtn_u64, K_ATOM, 8, FX_RTN, A_ADD),
  DSOP(ds_bpermute_b32, K_BPERM, 4, 0, 0), DSOP(ds_permute_b32, K_PERM, 4, 0, 0),
  FL(load_dword, K_LOAD, 4, 0) FL(load_dwordx2, K_LOAD, 8, 0) FL(load_dwordx3, K_LOAD, 12, 0)
  FL(load_dwordx4, K_LOAD, 16, 0) FL(load_ubyte, K_LOAD, 1, 0) FL(load_sbyte, K_LOAD, 1, FX_SX)
  FL(load_ushort, K_LOAD, 2, 0) FL(load_sshort, K_LOAD, 2, FX_SX)
  FL(load_short_d16, K_LOAD_D16, 2, 0) FL(load_short_d16_hi, K_LOAD_D16_HI, 2, 0)
  FL(load_ubyte_d16, K_LOAD_D16, 1, 0) FL(load_ubyte_d16_hi, K_LOAD_D16_HI, 1, 0)
  FL(load_sbyte_d16, K_LOAD_D16, 1, FX_SX) FL(load_sbyte_d16_hi, K_LOAD_D16_HI, 1, FX_SX)
  FL(store_dword, K_STORE, 4, 0) FL(store_dwordx2, K_STORE, 8, 0) FL(store_dwordx3, K_STORE, 12, 0)
  FL(store_dwordx4, K_STORE, 16, 0) FL(store_byte, K_STORE, 1, 0) FL(store_short, K_STORE, 2, 0)
  FL(store_byte_d16_hi, K_STORE_D16_HI, 1, 0) FL(store_short_d16_hi, K_STORE_D16_HI, 2, 0)
  AT(add, 4, A_ADD) AT(sub, 4, A_SUB) AT(swap, 4, A_SWAP) AT(cmpswap, 4, A_CMPSWAP) AT(smin, 4, A_SMIN)
  AT(umin, 4, A_UMIN) AT(smax, 4, A_SMAX) AT(umax, 4, A_UMAX) AT(and, 4, A_AND) AT(or, 4, A_OR)
  AT(xor, 4, A_XOR) AT(inc, 4, A_INC) AT(dec, 4, A_DEC) AT(add_f32, 4, A_ADD_F32)
  AT(add_x2, 8, A_ADD) AT(sub_x2, 8, A_SUB) AT(swap_x2, 8, A_SWAP) AT(cmpswap_x2, 8, A_CMPSWAP)
  AT(smin_x2, 8, A_SMIN) AT(umin_x2, 8, A_UMIN) AT(smax_x2, 8, A_SMAX) AT(umax_x2, 8, A_UMAX)
  AT(and_x2, 8, A_AND) AT(or_x2, 8, A_OR) AT(xor_x2, 8, A_XOR)
  BUF(load_dword, K_LOAD, 4, 0) BUF(load_dwordx2, K_LOAD, 8, 0) BUF(load_dwordx3, K_LOAD, 12, 0)
  BUF(load_dwordx4, K_LOAD, 16, 0) BUF(load_ubyte, K_LOAD, 1, 0) BUF(load_sbyte, K_LOAD, 1, FX_SX)
  BUF(load_ushort, K_LOAD, 2, 0) BUF(load_sshort, K_LOAD, 2, FX_SX)
  BUF(store_dword, K_STORE, 4, 0) BUF(store_dwordx2, K_STORE, 8, 0) BUF(store_dwordx3, K_STORE, 12, 0)
  BUF(store_dwordx4, K_STORE, 16, 0) BUF(store_byte, K_STORE, 1, 0) BUF(store_short, K_STORE, 2, 0)
};
const size_t sg_ops_mem_n = sizeof(sg_ops_mem) / sizeof(sg_ops_mem[0]);
