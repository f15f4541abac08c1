/* The artifact codec: round trips, and hostile bytes (truncations, flips, wrong shapes)
 * rejected with E_INVALID_ARGUMENT, never a crash. */
#include <criterion/criterion.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "tests/compiler/harness.h"

static void same(const kiln_artifact_t *a, const kiln_artifact_t *b) {
  cr_assert_eq(a->format, b->format);
  cr_assert_str_eq(a->target, b->target);
  cr_assert_eq(a->code_size, b->code_size);
  cr_assert(memcmp(a->code, b->code, a->code_size) == 0);
  cr_assert_eq(a->num_kernels, b->num_kernels);
  for (uint32_t i = 0; i < a->num_kernels; i++) {
    const kiln_kernel_t *x = &a->kernels[i], *y = &b->kernels[i];
    cr_assert_str_eq(x->name, y->name);
    cr_assert_eq(x->num_args, y->num_args);
    cr_assert_eq(x->num_hidden, y->num_hidden);
    cr_assert(memcmp(x->args, y->args, (x->num_args + x->num_hidden) * sizeof(*x->args)) == 0);
    cr_assert_eq(x->kernarg_size, y->kernarg_size);
    cr_assert_eq(x->group_segment_size, y->group_segment_size);
    cr_assert_eq(x->vgpr_count, y->vgpr_count);
    cr_assert_eq(x->wavefront_size, y->wavefront_size);
  }
  cr_assert_str_eq(a->llvm_ir ? a->llvm_ir : "", b->llvm_ir ? b->llvm_ir : "");
  cr_assert_str_eq(a->assembly ? a->assembly : "", b->assembly ? b->assembly : "");
  cr_assert_str_eq(a->log ? a->log : "", b->log ? b->log : "");
}

static void roundtrip(const kiln_artifact_t *a) {
  uint8_t *bytes;
  size_t len;
  cr_assert(!kiln_artifact_encode(a, &bytes, &len));
  kiln_artifact_t b;
  kiln_status_t s = kiln_artifact_decode(bytes, len, &b);
  cr_assert(!s, "%s", s ? kiln_status_message(s) : "");
  same(a, &b);
  kiln_artifact_deinit(&b);
  free(bytes);
}

Test(artifact, roundtrip_compiled) {
  static const char *const targets[] = {"gfx942", "sm_90", "cpu"};
  size_t n;
  uint8_t *bc = th_example_bc("reduce", &n);
  for (int i = 0; i < 3; i++) {
    kiln_artifact_t a;
    th_compile(bc, n, targets[i], NULL, &a);
    roundtrip(&a);
    kiln_artifact_deinit(&a);
  }
  free(bc);
}

Test(artifact, arg_type_names) {
  for (int t = KILN_ARG_PTR; t <= KILN_ARG_F64; t++) {
    const char *name = kiln_arg_type_name((kiln_arg_type_t)t);
    cr_assert_eq(kiln_arg_type_from_name(name), t, "%s", name);
    cr_assert_gt(kiln_arg_type_size((kiln_arg_type_t)t), 0);
  }
  cr_assert_str_eq(kiln_arg_type_name(KILN_ARG_BF16), "bfloat16");
  cr_assert_eq(kiln_arg_type_from_name("float128"), 0);
  cr_assert_eq(kiln_arg_type_size(0), 0);
}

static uint8_t *encoded_vadd(size_t *len) {
  size_t n;
  uint8_t *bc = th_example_bc("vadd", &n);
  kiln_artifact_t a;
  th_compile(bc, n, "gfx942", NULL, &a);
  free(bc);
  free(a.llvm_ir);
  free(a.assembly);
  a.llvm_ir = a.assembly = NULL;
  uint8_t *bytes;
  cr_assert(!kiln_artifact_encode(&a, &bytes, len));
  kiln_artifact_deinit(&a);
  return bytes;
}

Test(artifact, every_truncation_is_rejected) {
  size_t len;
  uint8_t *bytes = encoded_vadd(&len);
  for (size_t cut = 0; cut < len; cut += (cut < 512 ? 1 : 97)) {
    kiln_artifact_t a;
    kiln_status_t s = kiln_artifact_decode(bytes, cut, &a);
    cr_assert(s, "a %zu-byte prefix of %zu decoded", cut, len);
    cr_assert_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
    kiln_status_free(s);
  }
  free(bytes);
}

Test(artifact, bit_flips_never_crash) {
  size_t len;
  uint8_t *bytes = encoded_vadd(&len);
  uint8_t *copy = malloc(len);
  uint32_t seed = 12345;
  for (int i = 0; i < 3000; i++) {
    memcpy(copy, bytes, len);
    for (int k = 0; k < 3; k++) {
      seed = seed * 1103515245u + 12345u;
      size_t at = (seed >> 8) % (len < 2048 ? len : 2048); /* the structure lives outside the code bytes */
      copy[at] ^= (uint8_t)(1u << (seed % 8));
    }
    kiln_artifact_t a;
    kiln_status_t s = kiln_artifact_decode(copy, len, &a);
    if (s) kiln_status_free(s);
    else kiln_artifact_deinit(&a);
  }
  free(copy);
  free(bytes);
}

/* A hand-made value with one field wrong at a time. */
static kiln_status_t decode_with(void (*tweak)(msgpack_packer *pk, int field), int field) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  tweak(&pk, field);
  kiln_artifact_t a;
  kiln_status_t s = kiln_artifact_decode((const uint8_t *)sb.data, sb.size, &a);
  if (!s) kiln_artifact_deinit(&a);
  msgpack_sbuffer_destroy(&sb);
  return s;
}

static void str(msgpack_packer *pk, const char *s) {
  msgpack_pack_str(pk, strlen(s));
  msgpack_pack_str_body(pk, s, strlen(s));
}

static void artifact_map(msgpack_packer *pk, int bad) {
  msgpack_pack_map(pk, 8);
  str(pk, "v");
  msgpack_pack_uint32(pk, bad == 0 ? 2 : 1);
  str(pk, "format");
  str(pk, bad == 1 ? "elf" : "cpu-so");
  str(pk, "target");
  str(pk, "cpu");
  str(pk, "code");
  if (bad == 2) msgpack_pack_nil(pk);
  else {
    msgpack_pack_bin(pk, 3);
    msgpack_pack_bin_body(pk, "abc", 3);
  }
  str(pk, "kernels");
  msgpack_pack_array(pk, 1);
  msgpack_pack_map(pk, 13);
  str(pk, "name");
  str(pk, "k");
  str(pk, "args");
  msgpack_pack_array(pk, 1);
  msgpack_pack_map(pk, 4);
  str(pk, "name");
  str(pk, "");
  str(pk, "type");
  str(pk, bad == 3 ? "float128" : "float32");
  str(pk, "offset");
  msgpack_pack_uint32(pk, 0);
  str(pk, "size");
  msgpack_pack_uint32(pk, bad == 4 ? 8 : 4);
  str(pk, "hidden_args");
  msgpack_pack_array(pk, bad == 5 ? 1 : 0);
  if (bad == 5) {
    msgpack_pack_map(pk, 4);
    str(pk, "name");
    str(pk, "");
    str(pk, "hidden");
    str(pk, "block_count_x");
    str(pk, "offset");
    msgpack_pack_uint32(pk, 8);
    str(pk, "size");
    msgpack_pack_uint32(pk, 4);
  }
  static const char *const u32s[] = {"kernarg_size", "kernarg_align", "group_segment_size", "private_segment_size",
                                     "max_block", "sgpr_count", "vgpr_count", "sgpr_spill_count",
                                     "vgpr_spill_count", "wavefront_size"};
  for (int i = 0; i < 10; i++) {
    str(pk, bad == 6 && i == 3 ? "private" : u32s[i]);
    if (bad == 7 && i == 0) msgpack_pack_int32(pk, -4);
    else msgpack_pack_uint32(pk, i == 1 ? (bad == 8 ? 3 : 4) : 4);
  }
  str(pk, "llvm_ir");
  msgpack_pack_nil(pk);
  str(pk, "assembly");
  if (bad == 9) msgpack_pack_uint32(pk, 7);
  else msgpack_pack_nil(pk);
  str(pk, "log");
  str(pk, "warning: none");
}

Test(artifact, fields_are_validated) {
  kiln_status_t s = decode_with(artifact_map, -1);
  cr_assert(!s, "the reference value decodes: %s", s ? kiln_status_message(s) : "");
  for (int bad = 0; bad <= 9; bad++) {
    s = decode_with(artifact_map, bad);
    cr_assert(s, "variant %d decoded", bad);
    cr_assert_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
    kiln_status_free(s);
  }
}

Test(artifact, container_bombs) {
  /* An array header claiming 2^32-1 elements in 6 bytes, nested maps, and a huge str. */
  static const uint8_t bomb1[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x00};
  static const uint8_t bomb2[] = {0x81, 0xa1, 'v', 0xdf, 0x7f, 0xff, 0xff, 0xff};
  static const uint8_t bomb3[] = {0xdb, 0xff, 0xff, 0xff, 0xf0, 'a'};
  uint8_t deep[64];
  for (int i = 0; i < 64; i++) deep[i] = 0x91; /* [[[[...]]]] */
  const uint8_t *bombs[] = {bomb1, bomb2, bomb3, deep};
  size_t lens[] = {sizeof(bomb1), sizeof(bomb2), sizeof(bomb3), sizeof(deep)};
  for (int i = 0; i < 4; i++) {
    kiln_artifact_t a;
    kiln_status_t s = kiln_artifact_decode(bombs[i], lens[i], &a);
    cr_assert(s && kiln_status_code(s) == KILN_E_INVALID_ARGUMENT, "bomb %d", i);
    kiln_status_free(s);
  }
}
