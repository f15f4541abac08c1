/* libFuzzer target: kiln_artifact_decode (protocol/artifact.c) on arbitrary bytes, as it
 * reads cache files and worker replies. Besides memory errors it checks that:
 *   - a rejection has a code and a message, and leaves nothing to free;
 *   - an accepted artifact has a known format, NUL-terminated strings, a kernel table whose
 *     arguments exist, and re-encodes to bytes that decode to the same artifact and encode
 *     to the same bytes again (the encoding is canonical). */
#include <stdint.h>
#include <string.h>

#include "protocol/artifact.h"
#include "tests/fuzz/fuzz_check.h"

static void same(const kiln_artifact_t *a, const kiln_artifact_t *b) {
  CHECK(a->format == b->format && strcmp(a->target, b->target) == 0);
  CHECK(a->code_size == b->code_size && (a->code_size == 0 || !memcmp(a->code, b->code, a->code_size)));
  CHECK(a->num_kernels == b->num_kernels);
  for (uint32_t i = 0; i < a->num_kernels; i++) {
    const kiln_kernel_t *x = &a->kernels[i], *y = &b->kernels[i];
    CHECK(!strcmp(x->name, y->name) && x->num_args == y->num_args && x->num_hidden == y->num_hidden);
    CHECK(x->kernarg_size == y->kernarg_size && x->group_segment_size == y->group_segment_size);
    for (uint32_t j = 0; j < x->num_args + x->num_hidden; j++)
      CHECK(!memcmp(&x->args[j], &y->args[j], sizeof(x->args[j])));
  }
  CHECK(!a->llvm_ir == !b->llvm_ir && (!a->llvm_ir || !strcmp(a->llvm_ir, b->llvm_ir)));
  CHECK(!a->assembly == !b->assembly && (!a->assembly || !strcmp(a->assembly, b->assembly)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_artifact_t a;
  kiln_artifact_init(&a);
  kiln_status_t st = kiln_artifact_decode(data, size, &a);
  if (st) {
    CHECK(kiln_status_code(st) != 0 && kiln_status_message(st)[0] != 0);
    kiln_status_free(st);
    kiln_artifact_deinit(&a);
    return 0;
  }
  CHECK(a.format == KILN_FORMAT_CPU_SO || a.format == KILN_FORMAT_HSACO || a.format == KILN_FORMAT_PTX);
  CHECK(strnlen(a.target, sizeof(a.target)) < sizeof(a.target));
  for (uint32_t i = 0; i < a.num_kernels; i++) {
    const kiln_kernel_t *k = &a.kernels[i];
    CHECK(strnlen(k->name, sizeof(k->name)) < sizeof(k->name));
    CHECK(k->num_args + k->num_hidden == 0 || k->args);
    for (uint32_t j = 0; j < k->num_args + k->num_hidden; j++)
      CHECK(strnlen(k->args[j].name, sizeof(k->args[j].name)) < sizeof(k->args[j].name));
  }
  uint8_t *bytes = NULL, *bytes2 = NULL;
  size_t len = 0, len2 = 0;
  CHECK(kiln_artifact_encode(&a, &bytes, &len) == KILN_OK);
  kiln_artifact_t b;
  kiln_artifact_init(&b);
  st = kiln_artifact_decode(bytes, len, &b);
  if (st) fprintf(stderr, "re-decode: %s\n", kiln_status_message(st));
  CHECK(st == KILN_OK);
  same(&a, &b);
  CHECK(kiln_artifact_encode(&b, &bytes2, &len2) == KILN_OK);
  CHECK(len == len2 && !memcmp(bytes, bytes2, len));
  free(bytes);
  free(bytes2);
  kiln_artifact_deinit(&a);
  kiln_artifact_deinit(&b);
  return 0;
}
