/* Prebuilt code objects: checked, then stored as they are with their kernel table.
 * HSACO: ELF64 for EM_AMDGPU, linked (ET_DYN), HSA OS ABI, metadata note v4/v5, a target ID
 * that fits the requested target. PTX: .version/.target lines and .entry kernels. cpu-so:
 * an ELF shared object for this host made by kiln (it carries __kiln_kernels). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"
#include "protocol/cpu_abi.h"

#define EM_AMDGPU 224
#define ET_DYN 3
#define ELFOSABI_AMDGPU_HSA 64

static kiln_status_t copy_code(const kiln_compile_request_t *req, bool add_nul, kiln_artifact_t *out) {
  out->code = malloc(req->payload_size + 1);
  if (!out->code) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(out->code, req->payload, req->payload_size);
  out->code[req->payload_size] = 0;
  out->code_size = req->payload_size + (add_nul ? 1 : 0);
  return KILN_OK;
}

/* "gfx90a:sramecc+:xnack-" fits "gfx90a" and "gfx90a:xnack-"; a feature both name must agree. */
static bool target_fits(const char *have, const char *want) {
  size_t hp = strcspn(have, ":"), wp = strcspn(want, ":");
  if (hp != wp || strncmp(have, want, hp) != 0) return false;
  static const char *const features[] = {"sramecc", "xnack"};
  for (size_t i = 0; i < 2; i++) {
    char on[16], off[16];
    snprintf(on, sizeof(on), ":%s+", features[i]);
    snprintf(off, sizeof(off), ":%s-", features[i]);
    if ((strstr(have, on) && strstr(want, off)) || (strstr(have, off) && strstr(want, on))) return false;
  }
  return true;
}

/* kilnd finds kernels by name, and the artifact codec rejects a table that names one twice:
 * a code object that does (two PTX .entry lines, a metadata note listing a kernel twice)
 * is refused here, with a message, rather than failing later as an internal error. */
static kiln_status_t unique_kernels(const kiln_artifact_t *a) {
  for (uint32_t i = 0; i < a->num_kernels; i++)
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(a->kernels[i].name, a->kernels[j].name) == 0)
        return KC_COMPILE_ERROR("the code object defines kernel '%s' twice", a->kernels[i].name);
  return KILN_OK;
}

/* The payload as a linked ELF shared object for `machine`. */
static kiln_status_t open_shared_object(kc_job_t *job, unsigned machine, kc_elf_t *e) {
  KILN_RETURN_IF_ERROR(kc_elf_open(job->req->payload, job->req->payload_size, e));
  if (e->machine != machine)
    return KC_COMPILE_ERROR("the code object is for ELF machine %u, target %s needs machine %u", e->machine,
                            job->target.id, machine);
  if (e->type != ET_DYN)
    return KC_COMPILE_ERROR("the code object is not linked (e_type %u, want ET_DYN): link it with "
                            "`ld.lld -shared --no-undefined`; loaders reject relocatable objects",
                            e->type);
  return KILN_OK;
}

kiln_status_t kc_validate_hsaco(kc_job_t *job, kiln_artifact_t *out) {
  const uint8_t *p = job->req->payload;
  size_t n = job->req->payload_size;
  kc_elf_t e;
  KILN_RETURN_IF_ERROR(open_shared_object(job, EM_AMDGPU, &e));
  if (p[7] != ELFOSABI_AMDGPU_HSA) return KC_COMPILE_ERROR("the code object is not for the HSA OS ABI (EI_OSABI %u)", p[7]);
  char target[96];
  KILN_RETURN_IF_ERROR(kc_amdgpu_metadata_parse(p, n, NULL, out, target, sizeof(target)));
  KILN_RETURN_IF_ERROR(unique_kernels(out));
  if (!target_fits(target, job->target.id))
    return KC_COMPILE_ERROR("the code object is for %s and cannot run on %s", target, job->target.id);
  /* The code object's own target ID is the precise one (it may pin features). */
  snprintf(out->target, sizeof(out->target), "%s", strchr(job->target.id, ':') ? job->target.id : target);
  out->format = KILN_FORMAT_HSACO;
  return copy_code(job->req, false, out);
}

/* The value after a PTX directive at the start of a line, e.g. ".target sm_90, debug". */
static bool directive(const char *text, size_t len, const char *name, char *out, size_t cap) {
  size_t nl = strlen(name);
  for (size_t i = 0; i + nl < len; i++) {
    if ((i == 0 || text[i - 1] == '\n') && strncmp(text + i, name, nl) == 0 && isspace((unsigned char)text[i + nl])) {
      size_t j = i + nl, k = 0;
      while (j < len && (text[j] == ' ' || text[j] == '\t')) j++;
      while (j < len && k + 1 < cap && (isalnum((unsigned char)text[j]) || text[j] == '_' || text[j] == '.')) out[k++] = text[j++];
      out[k] = 0;
      return k > 0;
    }
  }
  return false;
}

static unsigned sm_number(const char *sm) { return (unsigned)strtoul(sm + 3, NULL, 10); }

kiln_status_t kc_validate_ptx(kc_job_t *job, kiln_artifact_t *out) {
  const char *text = (const char *)job->req->payload;
  size_t len = job->req->payload_size;
  while (len && text[len - 1] == 0) len--; /* a C string's NUL is fine */
  if (memchr(text, 0, len)) return KC_COMPILE_ERROR("the PTX holds a NUL byte: PTX is text");
  char version[16], target[32];
  if (!directive(text, len, ".version", version, sizeof(version)))
    return KC_COMPILE_ERROR("the PTX has no .version line");
  if (!directive(text, len, ".target", target, sizeof(target)) || strncmp(target, "sm_", 3) != 0)
    return KC_COMPILE_ERROR("the PTX has no .target sm_NN line");
  if (!directive(text, len, ".address_size", (char[8]){0}, 8))
    kc_log(job, "warning: the PTX has no .address_size (64 is assumed by the driver only for newer PTX)");
  /* PTX is forward compatible: the driver JIT-compiles sm_80 PTX for sm_90. Arch-specific
   * variants (sm_90a) run only on their own architecture. */
  bool specific = !isdigit((unsigned char)target[strlen(target) - 1]);
  if (specific ? strcmp(target, job->target.cpu) != 0 : sm_number(target) > sm_number(job->target.cpu))
    return KC_COMPILE_ERROR("the PTX is for %s and cannot run on %s", target, job->target.id);
  KILN_RETURN_IF_ERROR(kc_ptx_kernel_table(text, len, out));
  KILN_RETURN_IF_ERROR(unique_kernels(out));
  out->format = KILN_FORMAT_PTX;
  KILN_RETURN_IF_ERROR(copy_code(job->req, false, out));
  out->code_size = len + 1; /* PTX code is stored NUL-terminated for cuModuleLoadData */
  out->code[len] = 0;
  return KILN_OK;
}

typedef struct wg_check {
  const kiln_artifact_t *art;
  uint32_t found;
} wg_check_t;

static bool count_wg(void *ud, const char *name, uint8_t info) {
  wg_check_t *c = ud;
  if ((info & 0xf) != 2 /* STT_FUNC */ || strncmp(name, KILN_CPU_WG_PREFIX, strlen(KILN_CPU_WG_PREFIX)) != 0) return false;
  if (kiln_artifact_kernel(c->art, name + strlen(KILN_CPU_WG_PREFIX))) c->found++;
  return false;
}

kiln_status_t kc_validate_cpu_so(kc_job_t *job, kiln_artifact_t *out) {
#if defined(__x86_64__)
  const unsigned host_machine = 62;
#elif defined(__aarch64__)
  const unsigned host_machine = 183;
#else
  const unsigned host_machine = 0;
#endif
  kc_elf_t e;
  KILN_RETURN_IF_ERROR(open_shared_object(job, host_machine, &e));
  const uint8_t *bytes;
  uint64_t size;
  if (!kc_elf_symbol(&e, "__kiln_kernels", &bytes, &size) || !kc_elf_symbol(&e, KILN_CPU_ABI_SYMBOL, &bytes, &size))
    return KC_COMPILE_ERROR("cpu code objects must come from kiln (this one lacks the __kiln_kernels and "
                            "__kiln_cpu_abi_version symbols): send the kernel's LLVM IR for target cpu instead");
  uint32_t abi = size == 4 ? (uint32_t)(bytes[0] | bytes[1] << 8 | bytes[2] << 16 | (uint32_t)bytes[3] << 24) : 0;
  if (abi != KILN_CPU_ABI_VERSION)
    return KC_COMPILE_ERROR("the shared object has cpu ABI version %u, this kiln runs version %d: rebuild it", abi,
                            KILN_CPU_ABI_VERSION);
  kc_elf_symbol(&e, "__kiln_kernels", &bytes, &size);
  size_t len = memchr(bytes, 0, size) ? strlen((const char *)bytes) : 0;
  if (!len) return KC_COMPILE_ERROR("the __kiln_kernels descriptor is empty or not NUL-terminated");
  KILN_RETURN_IF_ERROR(kc_cpu_descriptor_parse((const char *)bytes, len, out));
  KILN_RETURN_IF_ERROR(unique_kernels(out));
  wg_check_t c = {out, 0};
  kc_elf_dynsyms(&e, count_wg, &c);
  if (c.found != out->num_kernels)
    return KC_COMPILE_ERROR("the shared object exports %u of the %u work-group functions (__kiln_wg_*) its "
                            "descriptor lists", c.found, out->num_kernels);
  out->format = KILN_FORMAT_CPU_SO;
  return copy_code(job->req, false, out);
}
