/* Code object readers, executables and their symbols: the loader.
 *
 * A code object (AU "ELF code object") is checked the way ROCr's loader checks it, its PT_LOAD
 * segments are copied into executable-owned device memory at their relative addresses, the
 * dynamic relocations are applied, and every "<kernel>.kd" symbol becomes a kernel (R
 * executable.cpp LoadDefinitionSymbol: sizes come from the 64-byte kernel descriptor, the
 * kernarg alignment is always 16). The image is handed to the interpreter (sg_code_create).
 *
 * A reader made from memory keeps the caller's pointer (R amd_hsa_loader: no copy; the loaded
 * code object keeps pointing at it for tools and debuggers), so the buffer must outlive the
 * executable: the stand-in checksums it at creation and checks it at load and at destroy. */
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt.h"

/* AU "ELF Header" */
#define ELFOSABI_AMDGPU_HSA 64
#define EF_AMDGPU_MACH 0x0ff
#define EF_AMDGPU_FEATURE_XNACK 0x300
#define EF_AMDGPU_FEATURE_XNACK_ANY 0x100
#define EF_AMDGPU_FEATURE_XNACK_OFF 0x200
#define EF_AMDGPU_FEATURE_SRAMECC 0xc00
#define EF_AMDGPU_FEATURE_SRAMECC_ANY 0x400
#define EF_AMDGPU_FEATURE_SRAMECC_ON 0xc00
/* AU "Relocation Records" */
#define R_AMDGPU_NONE 0
#define R_AMDGPU_ABS32_LO 1
#define R_AMDGPU_ABS32_HI 2
#define R_AMDGPU_ABS64 3
#define R_AMDGPU_REL32 4
#define R_AMDGPU_REL64 5
#define R_AMDGPU_ABS32 6
#define R_AMDGPU_RELATIVE64 13

#define READER_MAGIC 0x53475244u
#define EXEC_MAGIC 0x53474558u

typedef struct reader {
  uint32_t magic;
  const uint8_t *ptr;
  size_t size;
  uint64_t hash;
  uint8_t *owned; /* from a file: our copy */
} reader_t;

typedef struct symbol {
  uint32_t magic;
  struct exec *exec;
  char *name;
  bool kernel;
  uint64_t address; /* kernel: the KD; variable: the variable */
  uint64_t size;
  uint32_t kernarg_size, group_size, private_size;
  bool dynamic_stack;
} symbol_t;

typedef struct loaded {
  const uint8_t *buf; /* the reader's buffer, which the client keeps alive */
  size_t buf_size;
  uint64_t buf_hash;
  void *va;
  uint8_t *host;
  uint64_t size;
  sg_code_t *code;
  symbol_t *syms;
  size_t nsyms;
} loaded_t;

typedef struct exec {
  uint32_t magic;
  hsa_executable_state_t state;
  hsa_profile_t profile;
  hsa_default_float_rounding_mode_t rounding;
  loaded_t *objs;
  size_t nobjs;
  uint32_t inflight; /* dispatches of its kernels that have not completed */
  struct exec *next;
} exec_t;

static pthread_mutex_t ld_lock = PTHREAD_MUTEX_INITIALIZER;
static exec_t *execs;

static reader_t *reader_from(hsa_code_object_reader_t r) {
  reader_t *p = (reader_t *)(uintptr_t)r.handle;
  /* Readers are heap objects the client holds; checking the magic is the best a handle allows. */
  return p && p->magic == READER_MAGIC ? p : NULL;
}

/* Caller holds ld_lock. */
static exec_t *exec_from(hsa_executable_t e) {
  for (exec_t *x = execs; x; x = x->next)
    if ((uint64_t)(uintptr_t)x == e.handle) return x;
  return NULL;
}

static symbol_t *symbol_from(hsa_executable_symbol_t s) {
  for (exec_t *x = execs; x; x = x->next)
    for (size_t i = 0; i < x->nobjs; i++)
      for (size_t k = 0; k < x->objs[i].nsyms; k++)
        if ((uint64_t)(uintptr_t)&x->objs[i].syms[k] == s.handle) return &x->objs[i].syms[k];
  return NULL;
}

/* --- readers ---------------------------------------------------------------------------------- */

RT_EXPORT hsa_status_t hsa_code_object_reader_create_from_memory(const void *code_object, size_t size,
                                                                 hsa_code_object_reader_t *code_object_reader) {
  RT_REQUIRE_OPEN();
  if (!code_object || size == 0 || !code_object_reader) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  reader_t *r = calloc(1, sizeof *r);
  if (!r) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  r->magic = READER_MAGIC;
  r->ptr = code_object;
  r->size = size;
  r->hash = rt_hash(code_object, size);
  code_object_reader->handle = (uint64_t)(uintptr_t)r;
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_code_object_reader_create_from_file(hsa_file_t file,
                                                               hsa_code_object_reader_t *code_object_reader) {
  RT_REQUIRE_OPEN();
  if (!code_object_reader) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  off_t end = lseek(file, 0, SEEK_END);
  if (end <= 0 || lseek(file, 0, SEEK_SET) != 0) return HSA_STATUS_ERROR_INVALID_FILE;
  uint8_t *buf = malloc((size_t)end);
  if (!buf) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  size_t got = 0;
  while (got < (size_t)end) {
    ssize_t n = read(file, buf + got, (size_t)end - got);
    if (n <= 0) {
      free(buf);
      return HSA_STATUS_ERROR_INVALID_FILE;
    }
    got += (size_t)n;
  }
  hsa_status_t s = hsa_code_object_reader_create_from_memory(buf, got, code_object_reader);
  if (s != HSA_STATUS_SUCCESS) {
    free(buf);
    return s;
  }
  reader_from(*code_object_reader)->owned = buf;
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_code_object_reader_destroy(hsa_code_object_reader_t code_object_reader) {
  RT_REQUIRE_OPEN();
  reader_t *r = reader_from(code_object_reader);
  if (!r) return HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER;
  r->magic = 0;
  free(r->owned);
  free(r);
  return HSA_STATUS_SUCCESS;
}

/* True when [p, p+n) is still mapped and hashes to `hash`. */
static bool buffer_intact(const uint8_t *p, size_t n, uint64_t hash) {
  uint8_t *copy = malloc(n);
  if (!copy) return true; /* cannot check: do not accuse the client */
  bool ok = rt_read_safely(p, n, copy) && rt_hash(copy, n) == hash;
  free(copy);
  return ok;
}

/* --- executables -------------------------------------------------------------------------------- */

RT_EXPORT hsa_status_t hsa_executable_create_alt(hsa_profile_t profile,
                                                 hsa_default_float_rounding_mode_t default_float_rounding_mode,
                                                 const char *options, hsa_executable_t *executable) {
  RT_REQUIRE_OPEN();
  if (!executable || (profile != HSA_PROFILE_BASE && profile != HSA_PROFILE_FULL) ||
      default_float_rounding_mode > HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR)
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  exec_t *x = calloc(1, sizeof *x);
  if (!x) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  x->magic = EXEC_MAGIC;
  x->state = HSA_EXECUTABLE_STATE_UNFROZEN;
  x->profile = profile;
  x->rounding = default_float_rounding_mode;
  pthread_mutex_lock(&ld_lock);
  x->next = execs;
  execs = x;
  pthread_mutex_unlock(&ld_lock);
  executable->handle = (uint64_t)(uintptr_t)x;
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_executable_create(hsa_profile_t profile, hsa_executable_state_t executable_state,
                                             const char *options, hsa_executable_t *executable) {
  if (executable_state != HSA_EXECUTABLE_STATE_UNFROZEN) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  return hsa_executable_create_alt(profile, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, options, executable);
}

static void loaded_free(loaded_t *o) {
  if (o->code) sg_code_destroy(o->code);
  if (o->va) rt_mem_free_code(o->va, o->host, o->size);
  for (size_t k = 0; k < o->nsyms; k++) free(o->syms[k].name);
  free(o->syms);
}

/* The ELF checks of ROCr's loader and isa.cpp; a message for each refusal. */
static hsa_status_t check_header(Elf *elf, size_t size, GElf_Ehdr *eh) {
  if (elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, eh)) {
    rt_log("load: the code object is not an ELF file");
    return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
  }
  if (gelf_getclass(elf) != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB) {
    rt_log("load: the code object is not a little-endian ELF64 file");
    return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
  }
  if (eh->e_machine != EM_AMDGPU || eh->e_ident[EI_OSABI] != ELFOSABI_AMDGPU_HSA) {
    rt_log("load: e_machine %u / OS ABI %u: not an AMDGPU HSA code object (want 224 / 64)", eh->e_machine,
           eh->e_ident[EI_OSABI]);
    return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
  }
  /* AU: ABI version 2, 3, 4 = code object v4, v5, v6; R executable.cpp refuses versions it
   * does not know. */
  uint32_t v = eh->e_ident[EI_ABIVERSION] + 2u;
  if (eh->e_ident[EI_ABIVERSION] < 2 || v > rt.cfg.max_code_object) {
    rt_log("load: code object v%u (ABI version %u); the stand-in loads v4 to v%u", v, eh->e_ident[EI_ABIVERSION],
           rt.cfg.max_code_object);
    return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
  }
  if (eh->e_type != ET_DYN) {
    rt_log("load: e_type %u: a code object must be a shared object (ET_DYN) linked with ld.lld -shared",
           eh->e_type);
    return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
  }
  /* the tables the loader reads must lie inside the buffer (a truncated file is not a code
   * object, even where libelf would read what is left) */
  if (eh->e_phoff > size || (uint64_t)eh->e_phnum * eh->e_phentsize > size - eh->e_phoff ||
      eh->e_shoff > size || (uint64_t)eh->e_shnum * eh->e_shentsize > size - eh->e_shoff) {
    rt_log("load: the program or section header table lies outside the %zu-byte code object", size);
    return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
  }
  uint32_t mach = eh->e_flags & EF_AMDGPU_MACH, xnack = eh->e_flags & EF_AMDGPU_FEATURE_XNACK,
           sramecc = eh->e_flags & EF_AMDGPU_FEATURE_SRAMECC;
  if (mach != rt.cfg.elf_mach) {
    rt_log("load: the code object is for EF_AMDGPU_MACH 0x%x, the agent is %s (0x%x)", mach, rt.cfg.proc,
           rt.cfg.elf_mach);
    return HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS; /* R: ISA not supported by the agent */
  }
  /* R isa.cpp: a feature set to on/off must match the agent's (sramecc+, xnack-); "any" runs on
   * either. */
  if ((xnack != EF_AMDGPU_FEATURE_XNACK_ANY && xnack != EF_AMDGPU_FEATURE_XNACK_OFF) ||
      (sramecc != EF_AMDGPU_FEATURE_SRAMECC_ANY && sramecc != EF_AMDGPU_FEATURE_SRAMECC_ON)) {
    rt_log("load: the code object's xnack/sramecc settings (e_flags 0x%x) do not match the agent's %s",
           eh->e_flags, rt.cfg.isa_name);
    return HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS;
  }
  return HSA_STATUS_SUCCESS;
}

/* Places the PT_LOAD segments; fills o->va/host/size. */
static hsa_status_t load_segments(Elf *elf, const uint8_t *buf, size_t size, loaded_t *o, uint64_t *out_delta) {
  size_t nph;
  if (elf_getphdrnum(elf, &nph) != 0) return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
  uint64_t lo = UINT64_MAX, hi = 0;
  rt_code_range_t ranges[32];
  size_t nr = 0;
  for (size_t i = 0; i < nph; i++) {
    GElf_Phdr ph;
    if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD) continue;
    if (ph.p_filesz > ph.p_memsz || ph.p_offset > size || ph.p_filesz > size - ph.p_offset ||
        ph.p_vaddr + ph.p_memsz < ph.p_vaddr || ph.p_vaddr + ph.p_memsz > (1ull << 40)) {
      rt_log("load: a PT_LOAD segment lies outside the file or the address range");
      return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
    }
    if (ph.p_memsz == 0) continue;
    uint64_t a = ph.p_vaddr / RT_PAGE * RT_PAGE, b = rt_round_up(ph.p_vaddr + ph.p_memsz, RT_PAGE);
    if (a < lo) lo = a;
    if (b > hi) hi = b;
    /* Loaded code and read-only data are not GPU-writable (a write faults READ_ONLY);
     * PF_W segments (device globals) are. */
    uint32_t acc = SG_ACC_READ | ((ph.p_flags & PF_W) ? SG_ACC_WRITE : 0);
    if (nr == sizeof ranges / sizeof ranges[0]) return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
    ranges[nr++] = (rt_code_range_t){a, b - a, acc};
  }
  if (nr == 0) {
    rt_log("load: the code object has no PT_LOAD segment");
    return HSA_STATUS_ERROR_INVALID_CODE_OBJECT; /* R executable.cpp LoadSegmentsV2 */
  }
  /* Page ranges sorted and merged; a page two segments share gets the union of their access. */
  for (size_t i = 0; i < nr; i++)
    for (size_t j = i + 1; j < nr; j++)
      if (ranges[j].offset < ranges[i].offset) {
        rt_code_range_t t = ranges[i];
        ranges[i] = ranges[j], ranges[j] = t;
      }
  rt_code_range_t merged[64];
  size_t nm = 0;
  for (size_t i = 0; i < nr; i++) {
    for (uint64_t p = ranges[i].offset; p < ranges[i].offset + ranges[i].size; p += RT_PAGE) {
      if (nm && merged[nm - 1].offset + merged[nm - 1].size > p) {
        merged[nm - 1].access |= ranges[i].access; /* shared page */
        continue;
      }
      if (nm && merged[nm - 1].offset + merged[nm - 1].size == p && merged[nm - 1].access == ranges[i].access) {
        merged[nm - 1].size += RT_PAGE;
        continue;
      }
      if (nm == sizeof merged / sizeof merged[0]) return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
      merged[nm++] = (rt_code_range_t){p, RT_PAGE, ranges[i].access};
    }
  }
  for (size_t i = 0; i < nm; i++) merged[i].offset -= lo;
  o->size = hi - lo;
  hsa_status_t s = rt_mem_alloc_code(o->size, merged, nm, &o->va, &o->host);
  if (s != HSA_STATUS_SUCCESS) return s;
  for (size_t i = 0; i < nph; i++) {
    GElf_Phdr ph;
    if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD || ph.p_filesz == 0) continue;
    memcpy(o->host + (ph.p_vaddr - lo), buf + ph.p_offset, ph.p_filesz);
  }
  *out_delta = (uint64_t)(uintptr_t)o->va - lo; /* device address = vaddr + delta */
  return HSA_STATUS_SUCCESS;
}

static Elf_Scn *section_of_type(Elf *elf, uint32_t type) {
  for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) && sh.sh_type == type) return scn;
  }
  return NULL;
}

/* AU "Relocation Records": the dynamic relocations a loader applies. */
static hsa_status_t relocate(Elf *elf, loaded_t *o, uint64_t delta, uint64_t lo_va) {
  Elf_Data *symdata = NULL;
  Elf_Scn *dynsym = section_of_type(elf, SHT_DYNSYM);
  if (dynsym) symdata = elf_getdata(dynsym, NULL);
  for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_RELA) continue;
    Elf_Data *d = elf_getdata(scn, NULL);
    if (!d || !sh.sh_entsize) continue;
    size_t n = sh.sh_size / sh.sh_entsize;
    for (size_t i = 0; i < n; i++) {
      GElf_Rela r;
      if (!gelf_getrela(d, (int)i, &r)) return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
      uint32_t type = (uint32_t)GELF_R_TYPE(r.r_info), symi = (uint32_t)GELF_R_SYM(r.r_info);
      if (type == R_AMDGPU_NONE) continue;
      uint64_t where = r.r_offset + delta;
      uint64_t base = (uint64_t)(uintptr_t)o->va;
      if (where < base || where + 8 > base + o->size) {
        rt_log("load: a relocation at 0x%llx lies outside the loaded image", (unsigned long long)r.r_offset);
        return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
      }
      uint64_t S = 0;
      if (symi) {
        GElf_Sym sym;
        if (!symdata || !gelf_getsym(symdata, (int)symi, &sym)) return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
        if (sym.st_shndx == SHN_UNDEF) {
          rt_log("load: relocation against an undefined symbol (the stand-in defines no program variables)");
          return HSA_STATUS_ERROR_VARIABLE_UNDEFINED;
        }
        S = sym.st_value + delta;
      }
      uint64_t A = (uint64_t)r.r_addend, P = where, v;
      uint8_t *at = o->host + (where - base);
      switch (type) {
        case R_AMDGPU_ABS64: v = S + A; memcpy(at, &v, 8); break;
        case R_AMDGPU_RELATIVE64: v = delta + A; memcpy(at, &v, 8); break;
        case R_AMDGPU_REL64: v = S + A - P; memcpy(at, &v, 8); break;
        case R_AMDGPU_ABS32_LO: { uint32_t w = (uint32_t)(S + A); memcpy(at, &w, 4); break; }
        case R_AMDGPU_ABS32_HI: { uint32_t w = (uint32_t)((S + A) >> 32); memcpy(at, &w, 4); break; }
        case R_AMDGPU_ABS32: { uint32_t w = (uint32_t)(S + A); memcpy(at, &w, 4); break; }
        case R_AMDGPU_REL32: { uint32_t w = (uint32_t)(S + A - P); memcpy(at, &w, 4); break; }
        default:
          rt_log("load: relocation type %u is not one a loader applies (AU)", type);
          return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
      }
    }
  }
  (void)lo_va;
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t load_symbols(Elf *elf, loaded_t *o, exec_t *x, uint64_t delta) {
  Elf_Scn *scn = section_of_type(elf, SHT_DYNSYM);
  if (!scn) return HSA_STATUS_SUCCESS;
  GElf_Shdr sh;
  Elf_Data *d = elf_getdata(scn, NULL);
  if (!d || !gelf_getshdr(scn, &sh) || !sh.sh_entsize) return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
  size_t n = sh.sh_size / sh.sh_entsize;
  o->syms = calloc(n ? n : 1, sizeof *o->syms);
  if (!o->syms) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  uint64_t base = (uint64_t)(uintptr_t)o->va;
  for (size_t i = 1; i < n; i++) {
    GElf_Sym sym;
    if (!gelf_getsym(d, (int)i, &sym)) return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
    const char *name = elf_strptr(elf, sh.sh_link, sym.st_name);
    if (!name || sym.st_shndx == SHN_UNDEF || GELF_ST_BIND(sym.st_info) == STB_LOCAL) continue;
    size_t len = strlen(name);
    bool kd = len > 3 && strcmp(name + len - 3, ".kd") == 0;
    if (!kd && GELF_ST_TYPE(sym.st_info) != STT_OBJECT) continue; /* functions are not HSA symbols */
    symbol_t *s = &o->syms[o->nsyms];
    s->address = sym.st_value + delta;
    s->size = sym.st_size;
    if (s->address < base || s->address > base + o->size || s->size > base + o->size - s->address) {
      rt_log("load: symbol %s lies outside the loaded image", name);
      return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
    }
    if (kd) {
      /* AU "Kernel Descriptor": 64 bytes; ROCr reads the segment sizes from it. */
      if (base + o->size - s->address < 64) {
        rt_log("load: kernel descriptor %s is shorter than 64 bytes", name);
        return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
      }
      const uint8_t *k = o->host + (s->address - base);
      memcpy(&s->group_size, k + 0, 4);
      memcpy(&s->private_size, k + 4, 4);
      memcpy(&s->kernarg_size, k + 8, 4);
      uint16_t props;
      memcpy(&props, k + 56, 2);
      s->dynamic_stack = (props >> 11) & 1; /* KERNEL_CODE_PROPERTY_USES_DYNAMIC_STACK */
      s->kernel = true;
    }
    s->name = strdup(name);
    if (!s->name) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    s->magic = EXEC_MAGIC;
    s->exec = x;
    /* R executable.cpp: one definition per name and agent in an executable. */
    for (size_t j = 0; j < x->nobjs; j++)
      for (size_t k = 0; k < x->objs[j].nsyms; k++)
        if (strcmp(x->objs[j].syms[k].name, name) == 0) {
          rt_log("load: symbol %s is already defined in this executable", name);
          return HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED;
        }
    o->nsyms++;
  }
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_executable_load_agent_code_object(hsa_executable_t executable, hsa_agent_t agent,
                                                             hsa_code_object_reader_t code_object_reader,
                                                             const char *options,
                                                             hsa_loaded_code_object_t *loaded_code_object) {
  RT_REQUIRE_OPEN();
  rt_agent_t *a = rt_agent_from(agent);
  if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
  reader_t *r = reader_from(code_object_reader);
  if (!r) return HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER;
  pthread_mutex_lock(&ld_lock);
  exec_t *x = exec_from(executable);
  hsa_status_t s = HSA_STATUS_SUCCESS;
  if (!x) {
    s = HSA_STATUS_ERROR_INVALID_EXECUTABLE;
    goto out;
  }
  if (x->state == HSA_EXECUTABLE_STATE_FROZEN) {
    s = HSA_STATUS_ERROR_FROZEN_EXECUTABLE; /* R executable.cpp LoadCodeObject */
    goto out;
  }
  if (a != &rt_gpu_agent) {
    rt_log("load: the CPU agent runs no code objects");
    s = HSA_STATUS_ERROR_INVALID_AGENT;
    goto out;
  }
  if (!buffer_intact(r->ptr, r->size, r->hash) &&
      rt_strict("hsa_executable_load_agent_code_object: the code object buffer at %p (%zu bytes) was changed "
                "or freed after hsa_code_object_reader_create_from_memory; the reader keeps the caller's "
                "pointer (R amd_hsa_loader), so the buffer must stay unchanged until the executable is "
                "destroyed", (const void *)r->ptr, r->size)) {
    s = HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
    goto out;
  }
  elf_version(EV_CURRENT);
  Elf *elf = elf_memory((char *)(uintptr_t)r->ptr, r->size);
  if (!elf) {
    rt_log("load: libelf cannot read the code object: %s", elf_errmsg(-1));
    s = HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
    goto out;
  }
  loaded_t o = {.buf = r->ptr, .buf_size = r->size, .buf_hash = r->hash};
  GElf_Ehdr eh;
  uint64_t delta = 0;
  char err[256] = "";
  s = check_header(elf, r->size, &eh);
  if (s == HSA_STATUS_SUCCESS) s = load_segments(elf, r->ptr, r->size, &o, &delta);
  if (s == HSA_STATUS_SUCCESS) s = relocate(elf, &o, delta, 0);
  if (s == HSA_STATUS_SUCCESS) s = load_symbols(elf, &o, x, delta);
  if (s == HSA_STATUS_SUCCESS) {
    o.code = sg_code_create(rt.cfg.target, (uint64_t)(uintptr_t)o.va, o.host, o.size, err, sizeof err);
    if (!o.code) {
      rt_log("load: the interpreter refused the code object: %s", err);
      s = HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
    }
  }
  elf_end(elf);
  loaded_t *objs = s == HSA_STATUS_SUCCESS ? realloc(x->objs, (x->nobjs + 1) * sizeof *objs) : NULL;
  if (!objs) {
    if (s == HSA_STATUS_SUCCESS) s = HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    loaded_free(&o);
    goto out;
  }
  /* symbols point at their executable; their array moves with the loaded record, not within it */
  x->objs = objs;
  x->objs[x->nobjs++] = o;
  if (loaded_code_object) loaded_code_object->handle = (uint64_t)(uintptr_t)o.va;
out:
  pthread_mutex_unlock(&ld_lock);
  return s;
}

RT_EXPORT hsa_status_t hsa_executable_freeze(hsa_executable_t executable, const char *options) {
  RT_REQUIRE_OPEN();
  pthread_mutex_lock(&ld_lock);
  exec_t *x = exec_from(executable);
  hsa_status_t s = !x ? HSA_STATUS_ERROR_INVALID_EXECUTABLE
                      : x->state == HSA_EXECUTABLE_STATE_FROZEN ? HSA_STATUS_ERROR_FROZEN_EXECUTABLE
                                                                : HSA_STATUS_SUCCESS;
  if (s == HSA_STATUS_SUCCESS) x->state = HSA_EXECUTABLE_STATE_FROZEN;
  pthread_mutex_unlock(&ld_lock);
  return s;
}

RT_EXPORT hsa_status_t hsa_executable_destroy(hsa_executable_t executable) {
  RT_REQUIRE_OPEN();
  pthread_mutex_lock(&ld_lock);
  exec_t *x = exec_from(executable);
  if (!x) {
    pthread_mutex_unlock(&ld_lock);
    return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  }
  if (x->inflight) {
    uint32_t n = x->inflight;
    pthread_mutex_unlock(&ld_lock);
    /* The kernel's code would be unmapped under it: always refused. */
    rt_log("hsa_executable_destroy: %u dispatch(es) of this executable's kernels have not completed; wait for "
           "their completion signals first (the executable stays loaded)", n);
    return HSA_STATUS_ERROR_RESOURCE_FREE;
  }
  hsa_status_t s = HSA_STATUS_SUCCESS;
  for (size_t i = 0; i < x->nobjs; i++)
    if (!buffer_intact(x->objs[i].buf, x->objs[i].buf_size, x->objs[i].buf_hash) &&
        rt_strict("hsa_executable_destroy: the code object buffer at %p (%zu bytes) was freed or changed "
                  "before the executable was destroyed; the loader keeps the caller's pointer for the "
                  "executable's lifetime (R amd_hsa_loader: tools and debuggers read the ELF from it)",
                  (const void *)x->objs[i].buf, x->objs[i].buf_size))
      s = HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
  for (exec_t **p = &execs; *p; p = &(*p)->next)
    if (*p == x) {
      *p = x->next;
      break;
    }
  pthread_mutex_unlock(&ld_lock);
  for (size_t i = 0; i < x->nobjs; i++) loaded_free(&x->objs[i]);
  free(x->objs);
  x->magic = 0;
  free(x);
  return s;
}

RT_EXPORT hsa_status_t hsa_executable_get_info(hsa_executable_t executable, hsa_executable_info_t attribute,
                                               void *value) {
  RT_REQUIRE_OPEN();
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  pthread_mutex_lock(&ld_lock);
  exec_t *x = exec_from(executable);
  hsa_status_t s = HSA_STATUS_SUCCESS;
  if (!x) s = HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  else if (attribute == HSA_EXECUTABLE_INFO_PROFILE) RT_PUT(value, hsa_profile_t, x->profile);
  else if (attribute == HSA_EXECUTABLE_INFO_STATE) RT_PUT(value, hsa_executable_state_t, x->state);
  else if (attribute == HSA_EXECUTABLE_INFO_DEFAULT_FLOAT_ROUNDING_MODE)
    RT_PUT(value, hsa_default_float_rounding_mode_t, x->rounding);
  else s = HSA_STATUS_ERROR_INVALID_ARGUMENT;
  pthread_mutex_unlock(&ld_lock);
  return s;
}

RT_EXPORT hsa_status_t hsa_executable_validate(hsa_executable_t executable, uint32_t *result) {
  RT_REQUIRE_OPEN();
  if (!result) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  pthread_mutex_lock(&ld_lock);
  exec_t *x = exec_from(executable);
  pthread_mutex_unlock(&ld_lock);
  if (!x) return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  *result = 0; /* the checks ran at load */
  return HSA_STATUS_SUCCESS;
}

RT_EXPORT hsa_status_t hsa_executable_validate_alt(hsa_executable_t executable, const char *options, uint32_t *result) {
  return hsa_executable_validate(executable, result);
}

/* --- symbols --------------------------------------------------------------------------------- */

RT_EXPORT hsa_status_t hsa_executable_get_symbol_by_name(hsa_executable_t executable, const char *symbol_name,
                                                         const hsa_agent_t *agent, hsa_executable_symbol_t *symbol) {
  RT_REQUIRE_OPEN();
  if (!symbol_name || !symbol) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (agent && !rt_agent_from(*agent)) return HSA_STATUS_ERROR_INVALID_AGENT;
  pthread_mutex_lock(&ld_lock);
  exec_t *x = exec_from(executable);
  hsa_status_t s = x ? HSA_STATUS_ERROR_INVALID_SYMBOL_NAME : HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  /* R executable.cpp GetSymbolInternal: agent symbols need their agent; with no agent only
   * program symbols match, and a code object for an agent defines none. */
  if (x && agent && rt_agent_from(*agent) == &rt_gpu_agent)
    for (size_t i = 0; i < x->nobjs && s != HSA_STATUS_SUCCESS; i++)
      for (size_t k = 0; k < x->objs[i].nsyms; k++)
        if (strcmp(x->objs[i].syms[k].name, symbol_name) == 0) {
          symbol->handle = (uint64_t)(uintptr_t)&x->objs[i].syms[k];
          s = HSA_STATUS_SUCCESS;
          break;
        }
  pthread_mutex_unlock(&ld_lock);
  return s;
}

RT_EXPORT hsa_status_t hsa_executable_get_symbol(hsa_executable_t executable, const char *module_name,
                                                 const char *symbol_name, hsa_agent_t agent, int32_t call_convention,
                                                 hsa_executable_symbol_t *symbol) {
  return hsa_executable_get_symbol_by_name(executable, symbol_name, &agent, symbol);
}

RT_EXPORT hsa_status_t hsa_executable_symbol_get_info(hsa_executable_symbol_t executable_symbol,
                                                      hsa_executable_symbol_info_t attribute, void *value) {
  RT_REQUIRE_OPEN();
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  pthread_mutex_lock(&ld_lock);
  symbol_t *s = symbol_from(executable_symbol);
  hsa_status_t st = HSA_STATUS_SUCCESS;
  if (!s) {
    pthread_mutex_unlock(&ld_lock);
    return HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL;
  }
  bool kernel_attr = false, variable_attr = false;
  switch ((int)attribute) {
    case HSA_EXECUTABLE_SYMBOL_INFO_TYPE:
      RT_PUT(value, hsa_symbol_kind_t, s->kernel ? HSA_SYMBOL_KIND_KERNEL : HSA_SYMBOL_KIND_VARIABLE);
      break;
    case HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH: RT_PUT(value, uint32_t, (uint32_t)strlen(s->name)); break;
    case HSA_EXECUTABLE_SYMBOL_INFO_NAME: memcpy(value, s->name, strlen(s->name)); break; /* R: no NUL */
    case HSA_EXECUTABLE_SYMBOL_INFO_MODULE_NAME_LENGTH: RT_PUT(value, uint32_t, 0); break;
    case HSA_EXECUTABLE_SYMBOL_INFO_MODULE_NAME: break;
    case HSA_EXECUTABLE_SYMBOL_INFO_AGENT: RT_PUT(value, hsa_agent_t, rt_agent_handle(&rt_gpu_agent)); break;
    case HSA_EXECUTABLE_SYMBOL_INFO_LINKAGE: RT_PUT(value, hsa_symbol_linkage_t, HSA_SYMBOL_LINKAGE_PROGRAM); break;
    case HSA_EXECUTABLE_SYMBOL_INFO_IS_DEFINITION: RT_PUT(value, bool, true); break;
    case HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS:
      variable_attr = true;
      RT_PUT(value, uint64_t, s->address);
      break;
    case HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ALLOCATION:
      variable_attr = true;
      RT_PUT(value, hsa_variable_allocation_t, HSA_VARIABLE_ALLOCATION_AGENT);
      break;
    case HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SEGMENT:
      variable_attr = true;
      RT_PUT(value, hsa_variable_segment_t, HSA_VARIABLE_SEGMENT_GLOBAL);
      break;
    case HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ALIGNMENT: variable_attr = true; RT_PUT(value, uint32_t, 8); break;
    case HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE: variable_attr = true; RT_PUT(value, uint32_t, (uint32_t)s->size); break;
    case HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST: variable_attr = true; RT_PUT(value, bool, false); break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT: kernel_attr = true; RT_PUT(value, uint64_t, s->address); break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE:
      kernel_attr = true;
      RT_PUT(value, uint32_t, s->kernarg_size);
      break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT:
      kernel_attr = true;
      RT_PUT(value, uint32_t, 16); /* R executable.cpp: always 16 */
      break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE: kernel_attr = true; RT_PUT(value, uint32_t, s->group_size); break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE:
      kernel_attr = true;
      RT_PUT(value, uint32_t, s->private_size);
      break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK: kernel_attr = true; RT_PUT(value, bool, s->dynamic_stack); break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_CALL_CONVENTION: kernel_attr = true; RT_PUT(value, uint32_t, 0); break;
    default: st = HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  if ((kernel_attr && !s->kernel) || (variable_attr && s->kernel)) st = HSA_STATUS_ERROR_INVALID_ARGUMENT;
  pthread_mutex_unlock(&ld_lock);
  return st;
}

static hsa_status_t iterate(hsa_executable_t executable, const hsa_agent_t *agent,
                            hsa_status_t (*cb)(hsa_executable_t, hsa_agent_t, hsa_executable_symbol_t, void *),
                            hsa_status_t (*cb_noagent)(hsa_executable_t, hsa_executable_symbol_t, void *), void *data) {
  RT_REQUIRE_OPEN();
  if (!cb && !cb_noagent) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  pthread_mutex_lock(&ld_lock);
  exec_t *x = exec_from(executable);
  if (!x) {
    pthread_mutex_unlock(&ld_lock);
    return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  }
  size_t total = 0;
  for (size_t i = 0; i < x->nobjs; i++) total += x->objs[i].nsyms;
  hsa_executable_symbol_t *list = calloc(total ? total : 1, sizeof *list);
  size_t n = 0;
  for (size_t i = 0; i < x->nobjs && list; i++)
    for (size_t k = 0; k < x->objs[i].nsyms; k++) list[n++].handle = (uint64_t)(uintptr_t)&x->objs[i].syms[k];
  pthread_mutex_unlock(&ld_lock);
  if (!list) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  hsa_status_t s = HSA_STATUS_SUCCESS;
  for (size_t i = 0; i < n && s == HSA_STATUS_SUCCESS; i++)
    s = cb ? cb(executable, agent ? *agent : rt_agent_handle(&rt_gpu_agent), list[i], data)
           : cb_noagent(executable, list[i], data);
  free(list);
  return s;
}

RT_EXPORT hsa_status_t hsa_executable_iterate_agent_symbols(
    hsa_executable_t executable, hsa_agent_t agent,
    hsa_status_t (*callback)(hsa_executable_t exec, hsa_agent_t agent, hsa_executable_symbol_t symbol, void *data),
    void *data) {
  if (rt_open() && rt_agent_from(agent) != &rt_gpu_agent)
    return rt_agent_from(agent) ? HSA_STATUS_SUCCESS : HSA_STATUS_ERROR_INVALID_AGENT;
  return iterate(executable, &agent, callback, NULL, data);
}

RT_EXPORT hsa_status_t hsa_executable_iterate_program_symbols(
    hsa_executable_t executable,
    hsa_status_t (*callback)(hsa_executable_t exec, hsa_executable_symbol_t symbol, void *data), void *data) {
  RT_REQUIRE_OPEN();
  if (!callback) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  pthread_mutex_lock(&ld_lock);
  exec_t *x = exec_from(executable);
  pthread_mutex_unlock(&ld_lock);
  return x ? HSA_STATUS_SUCCESS : HSA_STATUS_ERROR_INVALID_EXECUTABLE; /* no program symbols */
}

RT_EXPORT hsa_status_t hsa_executable_iterate_symbols(
    hsa_executable_t executable,
    hsa_status_t (*callback)(hsa_executable_t exec, hsa_executable_symbol_t symbol, void *data), void *data) {
  return iterate(executable, NULL, NULL, callback, data);
}

/* --- the packet processor's view ---------------------------------------------------------------- */

bool rt_exec_pin_kernel(uint64_t kd, rt_kernel_info_t *out, char *why, size_t whycap) {
  pthread_mutex_lock(&ld_lock);
  for (exec_t *x = execs; x; x = x->next)
    for (size_t i = 0; i < x->nobjs; i++)
      for (size_t k = 0; k < x->objs[i].nsyms; k++) {
        symbol_t *s = &x->objs[i].syms[k];
        if (!s->kernel || s->address != kd) continue;
        if (x->state != HSA_EXECUTABLE_STATE_FROZEN) {
          pthread_mutex_unlock(&ld_lock);
          /* H hsa_executable_freeze: kernels may run only once their executable is frozen. */
          snprintf(why, whycap, "kernel_object 0x%llx is %s of an executable that is not frozen (H: call "
                   "hsa_executable_freeze before dispatching)", (unsigned long long)kd, s->name);
          return false;
        }
        x->inflight++;
        out->code = x->objs[i].code;
        out->kernarg_size = s->kernarg_size;
        out->group_size = s->group_size;
        out->private_size = s->private_size;
        out->kd_va = kd;
        pthread_mutex_unlock(&ld_lock);
        return true;
      }
  pthread_mutex_unlock(&ld_lock);
  snprintf(why, whycap, "kernel_object 0x%llx is not the .kd address of a kernel in a loaded executable "
           "(never loaded, already destroyed, or not a kernel descriptor)", (unsigned long long)kd);
  return false;
}

void rt_exec_unpin_kernel(uint64_t kd) {
  pthread_mutex_lock(&ld_lock);
  for (exec_t *x = execs; x; x = x->next)
    for (size_t i = 0; i < x->nobjs; i++)
      for (size_t k = 0; k < x->objs[i].nsyms; k++)
        if (x->objs[i].syms[k].kernel && x->objs[i].syms[k].address == kd && x->inflight) {
          x->inflight--;
          pthread_mutex_unlock(&ld_lock);
          return;
        }
  pthread_mutex_unlock(&ld_lock);
}

size_t rt_exec_live(void) {
  pthread_mutex_lock(&ld_lock);
  size_t n = 0;
  for (exec_t *x = execs; x; x = x->next) n++;
  pthread_mutex_unlock(&ld_lock);
  return n;
}

void rt_exec_release_all(void) {
  pthread_mutex_lock(&ld_lock);
  exec_t *x = execs;
  execs = NULL;
  pthread_mutex_unlock(&ld_lock);
  while (x) {
    exec_t *next = x->next;
    for (size_t i = 0; i < x->nobjs; i++) loaded_free(&x->objs[i]);
    free(x->objs);
    free(x);
    x = next;
  }
}
