/* Just enough ELF64 (little-endian) reading for our checks: the header, notes, and symbols.
 * Every offset from the file is bounds-checked: prebuilt code objects come from clients. */
#include <string.h>

#include "compiler/internal.h"

#define SHT_SYMTAB 2
#define SHT_NOTE 7
#define SHT_NOBITS 8
#define SHT_DYNAMIC 6
#define SHT_DYNSYM 11
#define PT_NOTE 4

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static bool in_file(const kc_elf_t *e, uint64_t off, uint64_t size) {
  return off <= e->len && size <= e->len - off;
}

kiln_status_t kc_elf_open(const uint8_t *data, size_t len, kc_elf_t *out) {
  if (len < 64 || memcmp(data, "\x7f" "ELF", 4) != 0)
    return KC_COMPILE_ERROR("not an ELF file (bad magic or shorter than an ELF header)");
  if (data[4] != 2 || data[5] != 1)
    return KC_COMPILE_ERROR("not a 64-bit little-endian ELF file (class %u, data %u)", data[4], data[5]);
  kc_elf_t e = {.data = data, .len = len};
  e.type = rd16(data + 16);
  e.machine = rd16(data + 18);
  e.flags = rd32(data + 48);
  e.phoff = rd64(data + 32);
  e.shoff = rd64(data + 40);
  e.phentsize = rd16(data + 54);
  e.phnum = rd16(data + 56);
  e.shentsize = rd16(data + 58);
  e.shnum = rd16(data + 60);
  if (e.phnum && (e.phentsize < 56 || !in_file(&e, e.phoff, (uint64_t)e.phnum * e.phentsize)))
    return KC_COMPILE_ERROR("ELF program headers lie outside the file");
  if (e.shnum && (e.shentsize < 64 || !in_file(&e, e.shoff, (uint64_t)e.shnum * e.shentsize)))
    return KC_COMPILE_ERROR("ELF section headers lie outside the file");
  *out = e;
  return KILN_OK;
}

static const uint8_t *section(const kc_elf_t *e, uint32_t i) {
  return i < e->shnum ? e->data + e->shoff + (uint64_t)i * e->shentsize : NULL;
}

static bool walk_notes(const kc_elf_t *e, uint64_t off, uint64_t size,
                       bool (*cb)(void *, const char *, uint32_t, uint32_t, const uint8_t *, uint32_t),
                       void *ud) {
  if (!in_file(e, off, size)) return false;
  uint64_t end = off + size;
  while (end - off >= 12) {
    const uint8_t *p = e->data + off;
    uint32_t namesz = rd32(p), descsz = rd32(p + 4), type = rd32(p + 8);
    uint64_t name_off = off + 12;
    uint64_t desc_off = name_off + (((uint64_t)namesz + 3) & ~3ull);
    uint64_t next = desc_off + (((uint64_t)descsz + 3) & ~3ull);
    if (desc_off > end || next > end || desc_off + descsz > end) return false;
    /* The name is NUL-terminated within namesz; pass its length without the NUL. */
    uint32_t nlen = namesz && e->data[name_off + namesz - 1] == 0 ? namesz - 1 : namesz;
    if (cb(ud, (const char *)e->data + name_off, nlen, type, e->data + desc_off, descsz)) return true;
    off = next;
  }
  return false;
}

void kc_elf_notes(const kc_elf_t *e,
                  bool (*cb)(void *ud, const char *name, uint32_t name_len, uint32_t type,
                             const uint8_t *desc, uint32_t desc_len),
                  void *ud) {
  for (uint32_t i = 0; i < e->phnum; i++) {
    const uint8_t *ph = e->data + e->phoff + (uint64_t)i * e->phentsize;
    if (rd32(ph) == PT_NOTE && walk_notes(e, rd64(ph + 8), rd64(ph + 32), cb, ud)) return;
  }
  if (e->phnum) return; /* a linked file's notes are all in PT_NOTE */
  for (uint32_t i = 0; i < e->shnum; i++) {
    const uint8_t *sh = section(e, i);
    if (rd32(sh + 4) == SHT_NOTE && walk_notes(e, rd64(sh + 24), rd64(sh + 32), cb, ud)) return;
  }
}

/* Symbols of the first section of type `type`, with their string table. */
static bool symtab(const kc_elf_t *e, uint32_t type, const uint8_t **syms, uint64_t *count,
                   const char **strs, uint64_t *strs_len) {
  for (uint32_t i = 0; i < e->shnum; i++) {
    const uint8_t *sh = section(e, i);
    if (rd32(sh + 4) != type) continue;
    uint64_t off = rd64(sh + 24), size = rd64(sh + 32);
    const uint8_t *str = section(e, rd32(sh + 40));
    if (!str || !in_file(e, off, size)) return false;
    uint64_t soff = rd64(str + 24), ssize = rd64(str + 32);
    if (!in_file(e, soff, ssize) || ssize == 0) return false;
    *syms = e->data + off;
    *count = size / 24;
    *strs = (const char *)e->data + soff;
    *strs_len = ssize;
    return true;
  }
  return false;
}

static const char *sym_name(const char *strs, uint64_t strs_len, uint32_t off) {
  if (off >= strs_len || !memchr(strs + off, 0, strs_len - off)) return "";
  return strs + off;
}

static bool lookup(const kc_elf_t *e, uint32_t type, const char *name, const uint8_t **out_bytes,
                   uint64_t *out_size) {
  const uint8_t *syms;
  const char *strs;
  uint64_t n, slen;
  if (!symtab(e, type, &syms, &n, &strs, &slen)) return false;
  for (uint64_t i = 1; i < n; i++) {
    const uint8_t *s = syms + i * 24;
    uint16_t shndx = rd16(s + 6);
    if (shndx == 0 || shndx >= e->shnum || strcmp(sym_name(strs, slen, rd32(s)), name) != 0) continue;
    uint64_t value = rd64(s + 8), size = rd64(s + 16);
    const uint8_t *sh = section(e, shndx);
    uint64_t addr = rd64(sh + 16), off = rd64(sh + 24), ssize = rd64(sh + 32);
    if (rd32(sh + 4) == SHT_NOBITS || value < addr || value - addr > ssize || size > ssize - (value - addr))
      return false;
    uint64_t pos = off + (value - addr);
    if (pos < off || !in_file(e, pos, size)) return false; /* the sum must not wrap */
    *out_bytes = e->data + pos;
    *out_size = size;
    return true;
  }
  return false;
}

bool kc_elf_symbol(const kc_elf_t *e, const char *name, const uint8_t **out_bytes, uint64_t *out_size) {
  return lookup(e, SHT_DYNSYM, name, out_bytes, out_size) || lookup(e, SHT_SYMTAB, name, out_bytes, out_size);
}

void kc_elf_sections(const kc_elf_t *e, bool (*cb)(void *ud, const kc_elf_section_t *s), void *ud) {
  uint16_t shstrndx = rd16(e->data + 62);
  const uint8_t *strsec = section(e, shstrndx);
  uint64_t soff = strsec ? rd64(strsec + 24) : 0, ssize = strsec ? rd64(strsec + 32) : 0;
  if (strsec && !in_file(e, soff, ssize)) strsec = NULL;
  for (uint32_t i = 1; i < e->shnum; i++) {
    const uint8_t *sh = section(e, i);
    kc_elf_section_t s = {.index = i, .type = rd32(sh + 4), .flags = rd64(sh + 8), .addr = rd64(sh + 16),
                          .offset = rd64(sh + 24), .size = rd64(sh + 32)};
    s.name = strsec ? sym_name((const char *)e->data + soff, ssize, rd32(sh)) : "";
    if (s.type != SHT_NOBITS && !in_file(e, s.offset, s.size)) continue;
    if (cb(ud, &s)) return;
  }
}

void kc_elf_symbols(const kc_elf_t *e,
                    bool (*cb)(void *ud, const char *name, uint8_t info, uint16_t shndx, uint64_t value), void *ud) {
  const uint8_t *syms;
  const char *strs;
  uint64_t n, slen;
  if (!symtab(e, SHT_SYMTAB, &syms, &n, &strs, &slen)) return;
  for (uint64_t i = 1; i < n; i++) {
    const uint8_t *s = syms + i * 24;
    if (cb(ud, sym_name(strs, slen, rd32(s)), s[4], rd16(s + 6), rd64(s + 8))) return;
  }
}

/* .dynsym entries that are defined (or, with want_defined false, undefined). */
static void dynsyms(const kc_elf_t *e, bool want_defined, bool (*cb)(void *ud, const char *name, uint8_t info),
                    void *ud) {
  const uint8_t *syms;
  const char *strs;
  uint64_t n, slen;
  if (!symtab(e, SHT_DYNSYM, &syms, &n, &strs, &slen)) return;
  for (uint64_t i = 1; i < n; i++) {
    const uint8_t *s = syms + i * 24;
    if ((rd16(s + 6) != 0) != want_defined) continue; /* section index 0: undefined */
    if (cb(ud, sym_name(strs, slen, rd32(s)), s[4])) return;
  }
}

void kc_elf_dynsyms(const kc_elf_t *e, bool (*cb)(void *ud, const char *name, uint8_t info), void *ud) {
  dynsyms(e, true, cb, ud);
}

void kc_elf_undefined(const kc_elf_t *e, bool (*cb)(void *ud, const char *name, uint8_t info), void *ud) {
  dynsyms(e, false, cb, ud);
}

void kc_elf_dynamic(const kc_elf_t *e, bool (*cb)(void *ud, uint64_t tag, uint64_t value, const char *str),
                    void *ud) {
  for (uint32_t i = 0; i < e->shnum; i++) {
    const uint8_t *sh = section(e, i);
    if (rd32(sh + 4) != SHT_DYNAMIC) continue;
    uint64_t off = rd64(sh + 24), size = rd64(sh + 32);
    const uint8_t *str = section(e, rd32(sh + 40));
    if (!in_file(e, off, size)) return;
    uint64_t soff = str ? rd64(str + 24) : 0, ssize = str ? rd64(str + 32) : 0;
    if (str && !in_file(e, soff, ssize)) str = NULL;
    for (uint64_t k = 0; k + 16 <= size; k += 16) {
      uint64_t tag = rd64(e->data + off + k), value = rd64(e->data + off + k + 8);
      const char *s = str && value < ssize && memchr(e->data + soff + value, 0, ssize - value)
                          ? (const char *)e->data + soff + value
                          : NULL;
      if (cb(ud, tag, value, s)) return;
      if (tag == 0) return; /* DT_NULL ends the array */
    }
    return;
  }
}
