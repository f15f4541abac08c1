/* Payload kinds, the one sniffer, the build key (protocol/payload.h). */
#include "protocol/payload.h"

#include <string.h>

static const char *const kind_names[KILN_PAYLOAD_KINDS_] = {
    [KILN_PAYLOAD_AUTO] = "auto", [KILN_PAYLOAD_LLVM] = "llvm",     [KILN_PAYLOAD_HSACO] = "hsaco",
    [KILN_PAYLOAD_PTX] = "ptx",   [KILN_PAYLOAD_CPU_SO] = "cpu-so", [KILN_PAYLOAD_TE] = "te",
};

kiln_status_t kiln_payload_kind_parse(const char *name, kiln_payload_kind_t *out_kind) {
  for (size_t i = 0; name && i < KILN_PAYLOAD_KINDS_; i++) {
    if (strcmp(kind_names[i], name) == 0) {
      *out_kind = (kiln_payload_kind_t)i;
      return KILN_OK;
    }
  }
  return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                     "unknown payload format '%s': use \"auto\", \"llvm\", \"hsaco\", \"ptx\", "
                     "\"cpu-so\" or \"te\"",
                     name ? name : "(null)");
}

const char *kiln_payload_kind_name(kiln_payload_kind_t kind) {
  return (unsigned)kind < KILN_PAYLOAD_KINDS_ ? kind_names[kind] : "unknown";
}

static bool starts_with(const uint8_t *p, size_t n, const char *prefix) {
  size_t k = strlen(prefix);
  return n >= k && memcmp(p, prefix, k) == 0;
}

/* Skips PTX comments and blank space; PTX files start with comments, then ".version". */
static bool looks_like_ptx(const uint8_t *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r') {
      i++;
    } else if (i + 1 < n && p[i] == '/' && p[i + 1] == '/') {
      while (i < n && p[i] != '\n') i++;
    } else if (i + 1 < n && p[i] == '/' && p[i + 1] == '*') {
      i += 2;
      while (i + 1 < n && !(p[i] == '*' && p[i + 1] == '/')) i++;
      i += 2;
    } else {
      return starts_with(p + i, n - i, ".version");
    }
  }
  return false;
}

kiln_payload_kind_t kiln_payload_resolve(kiln_payload_kind_t kind, const uint8_t *p, size_t n) {
  if (kind != KILN_PAYLOAD_AUTO) return kind;
  if (starts_with(p, n, "\x7f" "ELF")) {
    uint16_t machine = n >= 20 ? (uint16_t)(p[18] | p[19] << 8) : 0;
    return machine == 224 /* EM_AMDGPU */ ? KILN_PAYLOAD_HSACO : KILN_PAYLOAD_CPU_SO;
  }
  if (looks_like_ptx(p, n)) return KILN_PAYLOAD_PTX;
  return KILN_PAYLOAD_LLVM;
}

void kiln_build_key(const kiln_build_inputs_t *in, uint8_t out_key[KILN_HASH_BYTES]) {
  kiln_hasher_t h;
  kiln_hasher_init(&h);
  static const char tag[] = "kiln-build-v1";
  kiln_hasher_field(&h, tag, sizeof(tag) - 1);
  kiln_hasher_field(&h, in->payload, in->size);
  const char *kind = kiln_payload_kind_name(kiln_payload_resolve(in->kind, in->payload, in->size));
  kiln_hasher_field(&h, kind, strlen(kind));
  kiln_hasher_field(&h, in->target, strlen(in->target));
  if (strcmp(in->target, "cpu") == 0) kiln_hasher_field(&h, in->host, strlen(in->host));
  uint64_t opts[3] = {in->opt_level, in->max_block, in->fast_math};
  kiln_hasher_field(&h, opts, sizeof(opts));
  kiln_hasher_field(&h, in->identity, strlen(in->identity));
  kiln_hasher_final(&h, out_key);
}

uint64_t kiln_module_key64(const uint8_t key[KILN_HASH_BYTES]) {
  uint64_t v;
  memcpy(&v, key, sizeof(v));
  v &= 0x7fffffffffffffffULL; /* base/map.h reserves 0 and UINT64_MAX */
  return v ? v : 1;
}
