#include "tests/softgpu/isa/harness.h"

#ifdef SGT_NO_CRITERION
/* bench/softgpu_isa_bench.c builds the harness without Criterion: a failed check ends it */
#include <stdlib.h>
#define cr_assert(cond, ...) \
  do { if (!(cond)) { fprintf(stderr, "harness: " __VA_ARGS__); fprintf(stderr, " (%s)\n", #cond); abort(); } } while (0)
#define cr_assert_eq(a, b, ...) cr_assert((a) == (b), "" __VA_ARGS__)
#define cr_assert_fail(...) cr_assert(0, __VA_ARGS__)
#else
#include <criterion/criterion.h>
#endif
#include <elf.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/artifact.h"

#define DEVICE_VA_BASE 0x200000000000ull /* 32 TiB: no host pointer is handed out there */
#define VA_GAP 0x100000ull               /* unmapped space between allocations */
#define SCRATCH_VA 0x600000000000ull
#define SCRATCH_SIZE (256ull << 20)
#define IMAGE_VA 0x100000000000ull

const char *sgt_target_name(sg_target_t t) { return t == SG_GFX90A ? "gfx90a" : "gfx942"; }

void sgt_init(sgt_ctx_t *c, sg_target_t target) {
  memset(c, 0, sizeof(*c));
  c->target = target;
  c->next_va = DEVICE_VA_BASE;
}

void sgt_deinit(sgt_ctx_t *c) {
  for (int i = 0; i < c->nregions; i++) {
    if (c->regions[i].host != c->image) free(c->regions[i].host);
    free(c->regions[i].init_bits);
  }
  sg_code_destroy(c->code);
  free(c->image);
  memset(c, 0, sizeof(*c));
}

static bool lookup(void *ctx, uint64_t va, sg_region_t *out) {
  sgt_ctx_t *c = ctx;
  for (int i = 0; i < c->nregions; i++) {
    const sg_region_t *r = &c->regions[i];
    if (va >= r->va && va - r->va < r->size) {
      *out = *r;
      return true;
    }
  }
  return false;
}

uint64_t sgt_alloc(sgt_ctx_t *c, size_t bytes, uint32_t access) {
  cr_assert(c->nregions < 256, "too many allocations");
  size_t n = bytes ? bytes : 1;
  /* small allocations start with a pattern; large ones stay lazily zeroed pages */
  uint8_t *h = n > (64u << 20) ? calloc(1, n) : malloc(n);
  cr_assert(h, "cannot allocate %zu bytes", n);
  if (n <= (64u << 20)) memset(h, 0xcd, n);
  sg_region_t *r = &c->regions[c->nregions++];
  memset(r, 0, sizeof(*r));
  r->va = c->next_va;
  r->size = n;
  r->host = h;
  r->access = access;
  c->next_va += (n + VA_GAP + 0xffff) & ~0xffffull;
  return r->va;
}

static sg_region_t *region_of(sgt_ctx_t *c, uint64_t va) {
  for (int i = 0; i < c->nregions; i++)
    if (va >= c->regions[i].va && va - c->regions[i].va < c->regions[i].size) return &c->regions[i];
  cr_assert_fail("0x%llx is not device memory of the harness", (unsigned long long)va);
  return NULL;
}

void *sgt_host(sgt_ctx_t *c, uint64_t va) {
  sg_region_t *r = region_of(c, va);
  return r->host + (va - r->va);
}

void sgt_track_init(sgt_ctx_t *c, uint64_t va) {
  sg_region_t *r = region_of(c, va);
  r->init_bits = calloc((r->size + 7) / 8, 1);
  cr_assert(r->init_bits);
}

void sgt_mark_init(sgt_ctx_t *c, uint64_t va, size_t n) {
  sg_region_t *r = region_of(c, va);
  cr_assert(r->init_bits && va + n <= r->va + r->size);
  for (size_t i = 0; i < n; i++) r->init_bits[(va - r->va + i) >> 3] |= (uint8_t)(1u << ((va - r->va + i) & 7));
}

uint64_t sgt_upload(sgt_ctx_t *c, const void *src, size_t bytes) {
  uint64_t va = sgt_alloc(c, bytes, SG_ACC_READ | SG_ACC_WRITE);
  memcpy(sgt_host(c, va), src, bytes);
  return va;
}

void sgt_download(sgt_ctx_t *c, uint64_t va, void *dst, size_t bytes) { memcpy(dst, sgt_host(c, va), bytes); }

/* ---- the code object ------------------------------------------------------------------- */

static const msgpack_object *map_get(const msgpack_object *m, const char *key) {
  if (m->type != MSGPACK_OBJECT_MAP) return NULL;
  size_t k = strlen(key);
  for (uint32_t i = 0; i < m->via.map.size; i++) {
    const msgpack_object *kk = &m->via.map.ptr[i].key;
    if (kk->type == MSGPACK_OBJECT_STR && kk->via.str.size == k && memcmp(kk->via.str.ptr, key, k) == 0)
      return &m->via.map.ptr[i].val;
  }
  return NULL;
}

static uint64_t map_uint(const msgpack_object *m, const char *key) {
  const msgpack_object *v = map_get(m, key);
  return v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? v->via.u64 : 0;
}

static void map_str(const msgpack_object *m, const char *key, char *out, size_t cap) {
  const msgpack_object *v = map_get(m, key);
  out[0] = 0;
  if (v && v->type == MSGPACK_OBJECT_STR) snprintf(out, cap, "%.*s", (int)v->via.str.size, v->via.str.ptr);
}

/* The AMDGPU metadata note (NT_AMDGPU_METADATA, name "AMDGPU"): kernels and their arguments. */
static void parse_metadata(sgt_ctx_t *c, const uint8_t *desc, size_t n) {
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  cr_assert_eq(msgpack_unpack_next(&u, (const char *)desc, n, &off), MSGPACK_UNPACK_SUCCESS, "metadata msgpack");
  const msgpack_object *ks = map_get(&u.data, "amdhsa.kernels");
  cr_assert(ks && ks->type == MSGPACK_OBJECT_ARRAY, "amdhsa.kernels");
  for (uint32_t i = 0; i < ks->via.array.size && c->nkernels < SGT_MAX_KERNELS; i++) {
    const msgpack_object *k = &ks->via.array.ptr[i];
    sgt_kernel_t *kk = &c->kernels[c->nkernels++];
    memset(kk, 0, sizeof(*kk));
    map_str(k, ".name", kk->name, sizeof(kk->name));
    kk->kernarg_size = (uint32_t)map_uint(k, ".kernarg_segment_size");
    kk->group_fixed = (uint32_t)map_uint(k, ".group_segment_fixed_size");
    kk->private_fixed = (uint32_t)map_uint(k, ".private_segment_fixed_size");
    const msgpack_object *args = map_get(k, ".args");
    for (uint32_t a = 0; args && args->type == MSGPACK_OBJECT_ARRAY && a < args->via.array.size; a++) {
      cr_assert(kk->nargs < SGT_MAX_ARGS);
      sgt_kernel_arg_t *ka = &kk->args[kk->nargs++];
      ka->offset = (uint32_t)map_uint(&args->via.array.ptr[a], ".offset");
      ka->size = (uint32_t)map_uint(&args->via.array.ptr[a], ".size");
      map_str(&args->via.array.ptr[a], ".value_kind", ka->kind, sizeof(ka->kind));
    }
  }
  msgpack_unpacked_destroy(&u);
}

void sgt_load_elf(sgt_ctx_t *c, const uint8_t *elf, size_t n) {
  cr_assert(n >= sizeof(Elf64_Ehdr) && memcmp(elf, ELFMAG, SELFMAG) == 0, "not an ELF file");
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)elf;
  cr_assert_eq(eh->e_machine, 224, "not an AMDGPU code object");
  const Elf64_Phdr *ph = (const Elf64_Phdr *)(elf + eh->e_phoff);
  uint64_t end = 0;
  for (int i = 0; i < eh->e_phnum; i++)
    if (ph[i].p_type == PT_LOAD && ph[i].p_vaddr + ph[i].p_memsz > end) end = ph[i].p_vaddr + ph[i].p_memsz;
  cr_assert(end > 0, "no PT_LOAD segment");
  c->image_size = (end + 0xfff) & ~0xfffull;
  c->image = calloc(1, c->image_size);
  cr_assert(c->image);
  c->image_va = IMAGE_VA;
  for (int i = 0; i < eh->e_phnum; i++) {
    if (ph[i].p_type == PT_LOAD) {
      cr_assert(ph[i].p_offset + ph[i].p_filesz <= n);
      memcpy(c->image + ph[i].p_vaddr, elf + ph[i].p_offset, ph[i].p_filesz);
    } else if (ph[i].p_type == PT_NOTE) {
      const uint8_t *p = elf + ph[i].p_offset, *pe = p + ph[i].p_filesz;
      while (p + 12 <= pe) {
        uint32_t namesz, descsz, type;
        memcpy(&namesz, p, 4);
        memcpy(&descsz, p + 4, 4);
        memcpy(&type, p + 8, 4);
        const uint8_t *name = p + 12, *desc = name + ((namesz + 3) & ~3u);
        if (type == 32 && namesz == 7 && memcmp(name, "AMDGPU", 7) == 0) parse_metadata(c, desc, descsz);
        p = desc + ((descsz + 3) & ~3u);
      }
    }
  }
  /* dynamic relocations and the .kd symbols */
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(elf + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type == SHT_RELA) {
      const Elf64_Rela *r = (const Elf64_Rela *)(elf + sh[i].sh_offset);
      const Elf64_Sym *syms = (const Elf64_Sym *)(elf + sh[sh[i].sh_link].sh_offset);
      for (size_t k = 0; k < sh[i].sh_size / sizeof(*r); k++) {
        uint32_t type = ELF64_R_TYPE(r[k].r_info);
        uint64_t v;
        if (type == 13) v = c->image_va + (uint64_t)r[k].r_addend; /* R_AMDGPU_RELATIVE64 */
        else if (type == 3) v = c->image_va + syms[ELF64_R_SYM(r[k].r_info)].st_value + (uint64_t)r[k].r_addend;
        else cr_assert_fail("relocation type %u is not handled by the harness", type);
        cr_assert(r[k].r_offset + 8 <= c->image_size);
        memcpy(c->image + r[k].r_offset, &v, 8);
      }
    }
  }
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB && sh[i].sh_type != SHT_DYNSYM) continue;
    const Elf64_Sym *syms = (const Elf64_Sym *)(elf + sh[i].sh_offset);
    const char *strtab = (const char *)elf + sh[sh[i].sh_link].sh_offset;
    for (size_t k = 0; k < sh[i].sh_size / sizeof(*syms); k++) {
      const char *nm = strtab + syms[k].st_name;
      size_t ln = strlen(nm);
      if (ln < 4 || strcmp(nm + ln - 3, ".kd") != 0) continue;
      for (int j = 0; j < c->nkernels; j++)
        if (strlen(c->kernels[j].name) == ln - 3 && strncmp(c->kernels[j].name, nm, ln - 3) == 0)
          c->kernels[j].kd_va = c->image_va + syms[k].st_value;
    }
  }
  /* the loaded code is readable (constant tables), never writable */
  cr_assert(c->nregions < 256);
  sg_region_t *r = &c->regions[c->nregions++];
  memset(r, 0, sizeof(*r));
  r->va = c->image_va;
  r->size = c->image_size;
  r->host = c->image;
  r->access = SG_ACC_READ;
  char err[256];
  c->code = sg_code_create(c->target, c->image_va, c->image, c->image_size, err, sizeof(err));
  cr_assert(c->code, "sg_code_create: %s", err);
}

uint8_t *sgt_read_file(const char *path, size_t *out_len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)n + 1);
  cr_assert(b && fread(b, 1, (size_t)n, f) == (size_t)n, "reading %s", path);
  fclose(f);
  b[n] = 0;
  *out_len = (size_t)n;
  return b;
}

void sgt_load_kart(sgt_ctx_t *c, const char *stem) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s.%s.kart", KILN_TEST_OWN_KART_DIR, stem, sgt_target_name(c->target));
  size_t n;
  uint8_t *buf = sgt_read_file(path, &n);
  if (!buf) {
    snprintf(path, sizeof(path), "%s/%s.%s.kart", KILN_TEST_KART_DIR, stem, sgt_target_name(c->target));
    buf = sgt_read_file(path, &n);
  }
  cr_assert(buf, "cannot read %s (built by tests/device's conformance-artifacts)", path);
  cr_assert(memcmp(buf, "KILN-COMPILE-FAILED", 19) != 0, "%s did not compile: %s", path, buf);
  kiln_artifact_t a;
  kiln_status_t s = kiln_artifact_decode(buf, n, &a);
  cr_assert(!s, "%s: %s", path, s ? kiln_status_message(s) : "");
  free(buf);
  cr_assert_eq(a.format, KILN_FORMAT_HSACO);
  sgt_load_elf(c, a.code, a.code_size);
  for (uint32_t i = 0; i < a.num_kernels; i++) {
    const kiln_kernel_t *ak = &a.kernels[i];
    sgt_kernel_t *k = (sgt_kernel_t *)sgt_kernel(c, ak->name);
    if (!k || !ak->launch) continue;
    /* docs/te.md §7: {"grid": [e, e, e], "block": [e, e, e], "vars": [...]}; constants only here */
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    cr_assert_eq(msgpack_unpack_next(&u, (const char *)ak->launch, ak->launch_size, &off), MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *g = map_get(&u.data, "grid"), *b = map_get(&u.data, "block");
    bool ok = g && b && g->type == MSGPACK_OBJECT_ARRAY && b->type == MSGPACK_OBJECT_ARRAY && g->via.array.size == 3 &&
              b->via.array.size == 3;
    for (int d = 0; ok && d < 3; d++) {
      ok = g->via.array.ptr[d].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
           b->via.array.ptr[d].type == MSGPACK_OBJECT_POSITIVE_INTEGER;
      if (ok) {
        k->grid[d] = (uint32_t)g->via.array.ptr[d].via.u64;
        k->block[d] = (uint32_t)b->via.array.ptr[d].via.u64;
      }
    }
    k->has_launch = ok;
    msgpack_unpacked_destroy(&u);
  }
  kiln_artifact_deinit(&a);
}

const sgt_kernel_t *sgt_kernel(const sgt_ctx_t *c, const char *name) {
  for (int i = 0; i < c->nkernels; i++)
    if (strcmp(c->kernels[i].name, name) == 0) return &c->kernels[i];
  return NULL;
}

/* ---- launching -------------------------------------------------------------------------- */

static void warn_cb(void *ctx, const sg_report_t *r) {
  sgt_ctx_t *c = ctx;
  /* called from worker threads: the harness keeps the first few */
  int i = __atomic_fetch_add(&c->nwarnings, 1, __ATOMIC_RELAXED);
  if (i < 16) snprintf(c->warnings[i], sizeof(c->warnings[i]), "%s", r->message);
}

static void put(uint8_t *ka, uint32_t off, const void *v, uint32_t n) { memcpy(ka + off, v, n); }

sg_status_t sgt_launch(sgt_ctx_t *c, const char *kernel, const uint32_t grid[3], const uint32_t block[3],
                       uint32_t dyn_lds, const sgt_arg_t *args, int nargs, sg_report_t *rep) {
  uint32_t items[3] = {grid[0] * block[0], grid[1] * block[1], grid[2] * block[2]};
  return sgt_launch_items(c, kernel, items, block, dyn_lds, args, nargs, rep);
}

sg_status_t sgt_launch_items(sgt_ctx_t *c, const char *kernel, const uint32_t items[3], const uint32_t block[3],
                             uint32_t dyn_lds, const sgt_arg_t *args, int nargs, sg_report_t *rep) {
  const sgt_kernel_t *k = sgt_kernel(c, kernel);
  cr_assert(k && k->kd_va, "kernel %s is not in the code object", kernel);
  uint32_t kasize = k->kernarg_size ? k->kernarg_size : 16;
  uint64_t kva = sgt_alloc(c, kasize, SG_ACC_READ);
  uint8_t *ka = sgt_host(c, kva);
  memset(ka, 0, kasize);
  int explicit_i = 0;
  for (uint32_t i = 0; i < k->nargs; i++) {
    const sgt_kernel_arg_t *a = &k->args[i];
    cr_assert(a->offset + a->size <= kasize, "argument %u beyond the kernarg segment", i);
    /* AMDGPUUsage, code object v5 hidden arguments */
    uint32_t u32 = 0;
    uint16_t u16 = 0;
    uint64_t u64 = 0;
    if (strcmp(a->kind, "by_value") == 0 || strcmp(a->kind, "global_buffer") == 0) {
      cr_assert(explicit_i < nargs, "%s takes more than %d arguments", kernel, nargs);
      const sgt_arg_t *v = &args[explicit_i++];
      if (v->kind == SGT_F32) {
        float f = (float)v->f;
        cr_assert_eq(a->size, 4);
        put(ka, a->offset, &f, 4);
      } else if (v->kind == SGT_F64) {
        put(ka, a->offset, &v->f, 8);
      } else {
        cr_assert(a->size <= 8);
        put(ka, a->offset, &v->u, a->size);
      }
    } else if (strncmp(a->kind, "hidden_block_count_", 19) == 0) {
      /* whole work-groups; a partial one is described by hidden_remainder_* */
      int dim = a->kind[19] - 'x';
      u32 = items[dim] / block[dim];
      put(ka, a->offset, &u32, 4);
    } else if (strncmp(a->kind, "hidden_group_size_", 18) == 0) {
      u16 = (uint16_t)block[a->kind[18] - 'x'];
      put(ka, a->offset, &u16, 2);
    } else if (strncmp(a->kind, "hidden_remainder_", 17) == 0) {
      int dim = a->kind[17] - 'x';
      u16 = (uint16_t)(items[dim] % block[dim]);
      put(ka, a->offset, &u16, 2);
    } else if (strcmp(a->kind, "hidden_grid_dims") == 0) {
      u16 = items[2] > 1 ? 3 : items[1] > 1 ? 2 : 1;
      put(ka, a->offset, &u16, 2);
    } else if (strcmp(a->kind, "hidden_dynamic_lds_size") == 0) {
      put(ka, a->offset, &dyn_lds, 4);
    } else if (strcmp(a->kind, "hidden_private_base") == 0) {
      u32 = (uint32_t)(SGT_PRIVATE_APERTURE >> 32);
      put(ka, a->offset, &u32, 4);
    } else if (strcmp(a->kind, "hidden_shared_base") == 0) {
      u32 = (uint32_t)(SGT_SHARED_APERTURE >> 32);
      put(ka, a->offset, &u32, 4);
    } else if (strncmp(a->kind, "hidden_global_offset_", 21) == 0) {
      put(ka, a->offset, &u64, a->size);
    }
    /* hidden_queue_ptr, hostcall, heap, default queue, completion action: zero here */
  }
  cr_assert_eq(explicit_i, nargs, "%s takes %d arguments, the test passed %d", kernel, explicit_i, nargs);
  sg_dispatch_t d;
  memset(&d, 0, sizeof(d));
  d.target = c->target;
  d.code = c->code;
  d.kernel_object = k->kd_va;
  for (int i = 0; i < 3; i++) {
    d.workgroup_size[i] = (uint16_t)block[i];
    d.grid_size[i] = items[i];
  }
  d.group_segment_size = c->lds_override ? c->lds_override : k->group_fixed + dyn_lds;
  d.private_segment_size = k->private_fixed;
  d.kernarg_address = kva;
  d.max_instructions = c->max_instructions;
  d.shared_aperture_base = SGT_SHARED_APERTURE;
  d.private_aperture_base = SGT_PRIVATE_APERTURE;
  d.scratch_va = SCRATCH_VA;
  d.scratch_va_size = SCRATCH_SIZE;
  /* ROCr's InitScratchSRD for gfx9: base, stride 0, swizzle on, num_records = size;
   * DST_SEL XYZW, NUM_FORMAT UINT, DATA_FORMAT 32, ELEMENT_SIZE 4 bytes, INDEX_STRIDE 64,
   * ADD_TID_ENABLE */
  d.scratch_srd[0] = (uint32_t)SCRATCH_VA;
  d.scratch_srd[1] = (uint32_t)(SCRATCH_VA >> 32) | 1u << 31;
  d.scratch_srd[2] = (uint32_t)SCRATCH_SIZE;
  d.scratch_srd[3] = 4 | 5 << 3 | 6 << 6 | 7 << 9 | 4 << 12 | 4 << 15 | 1 << 19 | 3 << 21 | 1 << 23;
  sg_memory_t mem = {lookup, c};
  sg_report_t r;
  sg_status_t st = sg_dispatch_run(&d, &mem, warn_cb, c, &r);
  c->last_instructions = r.instructions;
  if (rep) *rep = r;
  return st;
}

void sgt_run(sgt_ctx_t *c, const char *kernel, const uint32_t grid[3], const uint32_t block[3], uint32_t dyn_lds,
             const sgt_arg_t *args, int nargs) {
  sg_report_t r;
  sg_status_t st = sgt_launch(c, kernel, grid, block, dyn_lds, args, nargs, &r);
  cr_assert_eq(st, SG_OK, "%s on %s: status %d: %s", kernel, sgt_target_name(c->target), (int)st, r.message);
}

/* Floats as points on one unsigned line (negative values reversed below the positives), so
 * that the distance counts the representable values between a and b. */
static uint32_t ordered(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (u >> 31) ? ~u : (u | 0x80000000u);
}

void sgt_run_te(sgt_ctx_t *c, const char *kernel, const sgt_arg_t *args, int nargs) {
  const sgt_kernel_t *k = sgt_kernel(c, kernel);
  cr_assert(k && k->has_launch, "%s has no constant launch recipe", kernel);
  sgt_run(c, kernel, k->grid, k->block, 0, args, nargs);
}

uint32_t sgt_ulp_diff(float a, float b) {
  if (a != a || b != b) return (a != a && b != b) ? 0 : UINT32_MAX;
  uint32_t x = ordered(a), y = ordered(b);
  if (a == b) return 0; /* +0 and -0 */
  return x > y ? x - y : y - x;
}
