/* Assembly listings by disassembling the emitted object: much cheaper than a second code
 * generation pass with LLVMAssemblyFile, and it shows exactly the bytes that run. Each
 * executable section is listed with its function symbols as labels. Relocations are not
 * applied (the object is relocatable), so call and branch targets to other sections read
 * as 0. */
#include <llvm-c/Disassembler.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"

#define SHF_EXECINSTR 4
#define MAX_LABELS 4096

typedef struct label {
  uint64_t value;
  const char *name;
} label_t;

typedef struct listing {
  const kc_elf_t *elf;
  LLVMDisasmContextRef dc;
  uint32_t step; /* bytes to skip over undecodable data */
  kiln_buf_t out;
  kiln_status_t status;
  label_t labels[MAX_LABELS];
  size_t nlabels;
  uint32_t section;
} listing_t;

static void put(listing_t *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(listing_t *l, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  if (n < 0 || l->status) return;
  l->status = kiln_buf_append(&l->out, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

static bool collect_label(void *ud, const char *name, uint8_t info, uint16_t shndx, uint64_t value) {
  listing_t *l = ud;
  uint8_t type = info & 0xf; /* STT_FUNC = 2, STT_NOTYPE = 0 (local labels) */
  if (shndx == l->section && (type == 2 || (type == 0 && name[0] && name[0] != '.')) && l->nlabels < MAX_LABELS)
    l->labels[l->nlabels++] = (label_t){value, name};
  return false;
}

static int by_value(const void *a, const void *b) {
  const label_t *x = a, *y = b;
  return x->value < y->value ? -1 : x->value > y->value;
}

static bool list_section(void *ud, const kc_elf_section_t *s) {
  listing_t *l = ud;
  if (!(s->flags & SHF_EXECINSTR) || s->type == 8 /* NOBITS */ || !s->size) return false;
  l->section = s->index;
  l->nlabels = 0;
  kc_elf_symbols(l->elf, collect_label, l);
  qsort(l->labels, l->nlabels, sizeof(label_t), by_value);
  put(l, "\t.section %s\n", s->name);
  const uint8_t *bytes = l->elf->data + s->offset;
  size_t next_label = 0;
  for (uint64_t pc = 0; pc < s->size && !l->status;) {
    while (next_label < l->nlabels && l->labels[next_label].value <= pc) {
      if (l->labels[next_label].value == pc) put(l, "%s:\n", l->labels[next_label].name);
      next_label++;
    }
    char text[256];
    size_t n = LLVMDisasmInstruction(l->dc, (uint8_t *)bytes + pc, s->size - pc, pc, text, sizeof(text));
    if (n == 0) {
      n = l->step < s->size - pc ? l->step : s->size - pc;
      put(l, "\t.byte");
      for (size_t i = 0; i < n; i++) put(l, "%s0x%02x", i ? ", " : " ", bytes[pc + i]);
      put(l, "\n");
    } else {
      put(l, "%s\t\t// %06llx\n", text, (unsigned long long)pc);
    }
    pc += n;
  }
  return l->status != KILN_OK;
}

kiln_status_t kc_disassemble(kc_job_t *job, const uint8_t *obj, size_t len, char **out_text) {
  kc_elf_t e;
  KILN_RETURN_IF_ERROR(kc_elf_open(obj, len, &e));
  LLVMDisasmContextRef dc =
      LLVMCreateDisasmCPUFeatures(job->target.triple, job->target.cpu, job->target.features, NULL, 0, NULL, NULL);
  if (!dc) return KILN_STATUS(KILN_E_INTERNAL, "LLVM has no disassembler for %s", job->target.triple);
  LLVMSetDisasmOptions(dc, LLVMDisassembler_Option_PrintImmHex);
  listing_t *l = calloc(1, sizeof(*l));
  if (!l) {
    LLVMDisasmDispose(dc);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  l->elf = &e;
  l->dc = dc;
  l->step = job->target.kind == KILN_TARGET_AMDGPU ? 4 : 1;
  kiln_buf_init(&l->out);
  put(l, "// %s, disassembled from the object kiln emitted\n", job->target.id);
  kc_elf_sections(&e, list_section, l);
  if (!l->status) l->status = kiln_buf_append(&l->out, "", 1);
  kiln_status_t s = l->status;
  if (!s) *out_text = (char *)kiln_buf_release(&l->out, &(size_t){0});
  kiln_buf_deinit(&l->out);
  LLVMDisasmDispose(dc);
  free(l);
  kc_mark(job, "disasm");
  return s;
}
