/* libFuzzer target: the checks kiln makes on prebuilt code objects before it stores and
 * loads them (compiler/validate.c over compiler/elf.c, compiler/amdgpu_metadata.c and
 * compiler/kernel_table.c), and the artifact codec on what they accept.
 *
 * Input: byte 0 picks the payload kind (HSACO, PTX, cpu shared object, or the AMDGPU
 * metadata note alone), byte 1 the target it is checked for; the rest is the payload.
 * Besides memory errors it checks that:
 *   - a rejection is E_COMPILE (or out of memory) with a message;
 *   - an accepted code object has its format and target, its code bytes (PTX NUL-terminated),
 *     and a kernel table kilnd can trust: named kernels, explicit arguments with a known type
 *     of the right size, every HSACO argument inside the kernarg segment;
 *   - the artifact it makes encodes, and decodes back to the same kernel table. */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "compiler/internal.h"
#include "tests/fuzz/fuzz_check.h"

/* The validators log warnings through the job; the fuzzer has no use for them. */
void kc_log(kc_job_t *job, const char *fmt, ...) {
  (void)job;
  (void)fmt;
}

static const char *const amd_targets[] = {"gfx942", "gfx90a", "gfx942:xnack-", "gfx1100"};
static const char *const nv_targets[] = {"sm_90", "sm_80", "sm_90a", "sm_52"};

static void check_kernels(const kiln_artifact_t *a) {
  for (uint32_t i = 0; i < a->num_kernels; i++) {
    const kiln_kernel_t *k = &a->kernels[i];
    CHECK(strnlen(k->name, sizeof(k->name)) < sizeof(k->name) && k->name[0]);
    CHECK(k->num_args + k->num_hidden == 0 || k->args);
    for (uint32_t j = 0; j < k->num_args; j++) {
      CHECK(kiln_arg_type_name(k->args[j].type) != NULL);
      CHECK(k->args[j].size == kiln_arg_type_size(k->args[j].type) && k->args[j].size > 0);
    }
    if (a->format == KILN_FORMAT_HSACO)
      for (uint32_t j = 0; j < k->num_args + k->num_hidden; j++)
        CHECK((uint64_t)k->args[j].offset + k->args[j].size <= k->kernarg_size);
  }
}

static void check_round_trip(const kiln_artifact_t *a) {
  uint8_t *bytes = NULL;
  size_t len = 0;
  kiln_status_t st = kiln_artifact_encode(a, &bytes, &len);
  CHECK(st == KILN_OK);
  kiln_artifact_t b;
  kiln_artifact_init(&b);
  st = kiln_artifact_decode(bytes, len, &b);
  if (st) fprintf(stderr, "decode: %s\n", kiln_status_message(st));
  CHECK(st == KILN_OK);
  CHECK(b.format == a->format && strcmp(b.target, a->target) == 0);
  CHECK(b.code_size == a->code_size && memcmp(b.code, a->code, a->code_size) == 0);
  CHECK(b.num_kernels == a->num_kernels);
  for (uint32_t i = 0; i < a->num_kernels; i++) {
    const kiln_kernel_t *x = &a->kernels[i], *y = &b.kernels[i];
    CHECK(strcmp(x->name, y->name) == 0 && x->num_args == y->num_args && x->num_hidden == y->num_hidden);
    CHECK(x->kernarg_size == y->kernarg_size);
    for (uint32_t j = 0; j < x->num_args + x->num_hidden; j++)
      CHECK(x->args[j].type == y->args[j].type && x->args[j].offset == y->args[j].offset &&
            x->args[j].size == y->args[j].size && x->args[j].hidden == y->args[j].hidden);
  }
  kiln_artifact_deinit(&b);
  free(bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  int mode = data[0] % 4;
  uint8_t pick = data[1];
  kiln_compile_request_t req = {.payload = data + 2, .payload_size = size - 2};
  static kc_job_t job; /* large (kernel tables): static, zeroed per run */
  memset(&job, 0, sizeof(job));
  job.req = &req;
  const char *t = mode == 1 ? nv_targets[pick % 4] : mode == 2 ? "cpu" : amd_targets[pick % 4];
  snprintf(job.target.id, sizeof(job.target.id), "%s", t);
  snprintf(job.target.cpu, sizeof(job.target.cpu), "%.*s", (int)strcspn(t, ":"), t);
  kiln_artifact_t a;
  kiln_artifact_init(&a);
  snprintf(a.target, sizeof(a.target), "%s", job.target.id); /* as kiln_compiler_compile does */
  kiln_status_t st;
  char target[96];
  switch (mode) {
  case 0: st = kc_validate_hsaco(&job, &a); break;
  case 1: st = kc_validate_ptx(&job, &a); break;
  case 2: st = kc_validate_cpu_so(&job, &a); break;
  default: st = kc_amdgpu_metadata_parse(req.payload, req.payload_size, NULL, &a, target, sizeof(target)); break;
  }
  if (st) {
    kiln_code_t code = kiln_status_code(st);
    CHECK(code == KILN_E_COMPILE || code == KILN_E_RESOURCE_EXHAUSTED);
    CHECK(kiln_status_message(st)[0] != 0);
    kiln_status_free(st);
  } else if (mode == 3) {
    CHECK(strnlen(target, sizeof(target)) < sizeof(target));
    a.format = KILN_FORMAT_HSACO;
    check_kernels(&a);
  } else {
    CHECK(a.format == (mode == 0 ? KILN_FORMAT_HSACO : mode == 1 ? KILN_FORMAT_PTX : KILN_FORMAT_CPU_SO));
    CHECK(a.code && a.target[0]);
    if (mode == 1) CHECK(a.code_size >= 1 && a.code[a.code_size - 1] == 0);
    else CHECK(a.code_size == req.payload_size && memcmp(a.code, req.payload, req.payload_size) == 0);
    check_kernels(&a);
    check_round_trip(&a);
  }
  kiln_artifact_deinit(&a);
  return 0;
}
