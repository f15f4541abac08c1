/* The NT_AMDGPU_METADATA note (HSA.md §4) -> the artifact's kernel table.
 *
 * Explicit argument types come from the kernel's IR signature when kiln compiled it; for a
 * prebuilt code object they are inferred from the note: global_buffer -> ptr, by_value ->
 * intN by size, unless the note carries an OpenCL .type_name (docs/kernels.md). */
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"
#include "protocol/frame.h"

#define NT_AMDGPU_METADATA 32

typedef struct note_find {
  const uint8_t *desc;
  uint32_t len;
} note_find_t;

static bool find_note(void *ud, const char *name, uint32_t name_len, uint32_t type, const uint8_t *desc,
                      uint32_t desc_len) {
  note_find_t *f = ud;
  if (type != NT_AMDGPU_METADATA || name_len != 6 || memcmp(name, "AMDGPU", 6) != 0) return false;
  f->desc = desc;
  f->len = desc_len;
  return true;
}

static bool str_eq(const msgpack_object *o, const char *s) {
  size_t n = strlen(s);
  return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n && memcmp(o->via.str.ptr, s, n) == 0;
}

static const msgpack_object *map_get(const msgpack_object *m, const char *key) {
  if (m->type != MSGPACK_OBJECT_MAP) return NULL;
  for (uint32_t i = 0; i < m->via.map.size; i++)
    if (str_eq(&m->via.map.ptr[i].key, key)) return &m->via.map.ptr[i].val;
  return NULL;
}

static uint32_t get_u32(const msgpack_object *m, const char *key, uint32_t dflt) {
  const msgpack_object *v = map_get(m, key);
  if (!v || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 > UINT32_MAX) return dflt;
  return (uint32_t)v->via.u64;
}

static void get_str(const msgpack_object *m, const char *key, char *out, size_t cap) {
  const msgpack_object *v = map_get(m, key);
  out[0] = 0;
  if (!v || v->type != MSGPACK_OBJECT_STR) return;
  size_t n = v->via.str.size < cap - 1 ? v->via.str.size : cap - 1;
  memcpy(out, v->via.str.ptr, n);
  out[n] = 0;
  if (strlen(out) != n) out[0] = 0; /* embedded NUL: treat as absent */
}

static kiln_hidden_kind_t hidden_kind(const char *kind) {
  static const struct {
    const char *name;
    kiln_hidden_kind_t kind;
  } table[] = {
      {"hidden_block_count_x", KILN_HIDDEN_BLOCK_COUNT_X},     {"hidden_block_count_y", KILN_HIDDEN_BLOCK_COUNT_Y},
      {"hidden_block_count_z", KILN_HIDDEN_BLOCK_COUNT_Z},     {"hidden_group_size_x", KILN_HIDDEN_GROUP_SIZE_X},
      {"hidden_group_size_y", KILN_HIDDEN_GROUP_SIZE_Y},       {"hidden_group_size_z", KILN_HIDDEN_GROUP_SIZE_Z},
      {"hidden_remainder_x", KILN_HIDDEN_REMAINDER_X},         {"hidden_remainder_y", KILN_HIDDEN_REMAINDER_Y},
      {"hidden_remainder_z", KILN_HIDDEN_REMAINDER_Z},         {"hidden_global_offset_x", KILN_HIDDEN_GLOBAL_OFFSET_X},
      {"hidden_global_offset_y", KILN_HIDDEN_GLOBAL_OFFSET_Y}, {"hidden_global_offset_z", KILN_HIDDEN_GLOBAL_OFFSET_Z},
      {"hidden_grid_dims", KILN_HIDDEN_GRID_DIMS},             {"hidden_dynamic_lds_size", KILN_HIDDEN_DYNAMIC_LDS_SIZE},
      {"hidden_queue_ptr", KILN_HIDDEN_QUEUE_PTR},             {"hidden_private_base", KILN_HIDDEN_PRIVATE_BASE},
      {"hidden_shared_base", KILN_HIDDEN_SHARED_BASE},
  };
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
    if (strcmp(table[i].name, kind) == 0) return table[i].kind;
  return KILN_HIDDEN_OTHER;
}

/* A by_value argument of a prebuilt code object: its OpenCL type name if any, else by size. */
static kiln_arg_type_t infer_type(const char *type_name, uint32_t size) {
  static const struct {
    const char *name;
    kiln_arg_type_t t;
  } names[] = {{"float", KILN_ARG_F32}, {"double", KILN_ARG_F64}, {"half", KILN_ARG_F16},
               {"int", KILN_ARG_I32},   {"uint", KILN_ARG_U32},   {"long", KILN_ARG_I64},
               {"ulong", KILN_ARG_U64}, {"short", KILN_ARG_I16},  {"ushort", KILN_ARG_U16},
               {"char", KILN_ARG_I8},   {"uchar", KILN_ARG_U8}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(names[i].name, type_name) == 0 && kiln_arg_type_size(names[i].t) == size) return names[i].t;
  switch (size) {
  case 1: return KILN_ARG_I8;
  case 2: return KILN_ARG_I16;
  case 4: return KILN_ARG_I32;
  case 8: return KILN_ARG_I64;
  default: return 0;
  }
}

static const kc_kernel_t *job_kernel(const kc_job_t *job, const char *name) {
  for (uint32_t i = 0; job && i < job->num_kernels; i++)
    if (strcmp(job->kernels[i].name, name) == 0) return &job->kernels[i];
  return NULL;
}

static kiln_status_t parse_args(const msgpack_object *args, const kc_job_t *job, kiln_kernel_t *k) {
  uint32_t n = args && args->type == MSGPACK_OBJECT_ARRAY ? args->via.array.size : 0;
  if (n > 1024) return KC_COMPILE_ERROR("kernel '%s' lists %u arguments", k->name, n);
  k->args = calloc(n + 1, sizeof(*k->args));
  if (!k->args) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  const kc_kernel_t *src = job_kernel(job, k->name);
  /* Two passes: explicit arguments first, then hidden ones, as the artifact wants them. */
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t i = 0; i < n; i++) {
      const msgpack_object *a = &args->via.array.ptr[i];
      char kind[64], type_name[64];
      get_str(a, ".value_kind", kind, sizeof(kind));
      bool hidden = strncmp(kind, "hidden_", 7) == 0;
      if (hidden != (pass == 1)) continue;
      kiln_kernel_arg_t *arg = &k->args[k->num_args + k->num_hidden];
      get_str(a, ".name", arg->name, sizeof(arg->name));
      arg->offset = get_u32(a, ".offset", UINT32_MAX);
      arg->size = get_u32(a, ".size", 0);
      if (arg->offset == UINT32_MAX || (uint64_t)arg->offset + arg->size > k->kernarg_size)
        return KC_COMPILE_ERROR("kernel '%s': argument %u has no offset inside the kernarg segment", k->name, i);
      if (hidden) {
        arg->hidden = hidden_kind(kind);
        k->num_hidden++;
        continue;
      }
      if (src) {
        if (k->num_args >= src->num_params)
          return KILN_STATUS(KILN_E_INTERNAL, "kernel '%s': the code object has more arguments than the IR", k->name);
        arg->type = src->params[k->num_args];
      } else {
        get_str(a, ".type_name", type_name, sizeof(type_name));
        char *star = strchr(type_name, '*');
        arg->type = strcmp(kind, "global_buffer") == 0 || star ? KILN_ARG_PTR
                    : strcmp(kind, "by_value") == 0            ? infer_type(type_name, arg->size)
                                                               : 0;
        if (!arg->type)
          return KC_COMPILE_ERROR("kernel '%s' argument %u has kind '%s' and size %u: kiln passes only "
                                  "pointers and scalars",
                                  k->name, i, kind, arg->size);
      }
      if (arg->size != kiln_arg_type_size(arg->type))
        return KC_COMPILE_ERROR("kernel '%s' argument %u is %u bytes, not the %u of a %s", k->name, i,
                                arg->size, kiln_arg_type_size(arg->type), kiln_arg_type_name(arg->type));
      k->num_args++;
    }
  }
  if (src && k->num_args != src->num_params)
    return KILN_STATUS(KILN_E_INTERNAL, "kernel '%s': %u arguments in the code object, %u in the IR", k->name,
                       k->num_args, src->num_params);
  return KILN_OK;
}

static kiln_status_t parse_kernel(const msgpack_object *m, const kc_job_t *job, kiln_kernel_t *k) {
  get_str(m, ".name", k->name, sizeof(k->name));
  if (!k->name[0]) return KC_COMPILE_ERROR("a kernel in the metadata note has no usable .name");
  k->kernarg_size = get_u32(m, ".kernarg_segment_size", 0);
  k->kernarg_align = get_u32(m, ".kernarg_segment_align", 16);
  k->group_segment_size = get_u32(m, ".group_segment_fixed_size", 0);
  k->private_segment_size = get_u32(m, ".private_segment_fixed_size", 0);
  k->max_block = get_u32(m, ".max_flat_workgroup_size", 0);
  k->sgpr_count = get_u32(m, ".sgpr_count", 0);
  k->vgpr_count = get_u32(m, ".vgpr_count", 0);
  k->sgpr_spill_count = get_u32(m, ".sgpr_spill_count", 0);
  k->vgpr_spill_count = get_u32(m, ".vgpr_spill_count", 0);
  k->wavefront_size = get_u32(m, ".wavefront_size", 64);
  if (k->kernarg_align == 0 || (k->kernarg_align & (k->kernarg_align - 1)))
    return KC_COMPILE_ERROR("kernel '%s': .kernarg_segment_align %u is not a power of two", k->name, k->kernarg_align);
  return parse_args(map_get(m, ".args"), job, k);
}

static kiln_status_t parse_root(const msgpack_object *root, const kc_job_t *job, kiln_artifact_t *art,
                                char *out_target, size_t target_cap) {
  const msgpack_object *ver = map_get(root, "amdhsa.version");
  if (!ver || ver->type != MSGPACK_OBJECT_ARRAY || ver->via.array.size != 2 ||
      ver->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
      ver->via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
    return KC_COMPILE_ERROR("the AMDGPU metadata note has no amdhsa.version");
  uint64_t major = ver->via.array.ptr[0].via.u64, minor = ver->via.array.ptr[1].via.u64;
  if (major != 1 || (minor != 1 && minor != 2))
    return KC_COMPILE_ERROR("code object metadata version %llu.%llu: kiln loads code object v4 (1.1) and "
                            "v5 (1.2); rebuild with -mcode-object-version=5",
                            (unsigned long long)major, (unsigned long long)minor);
  char target[128];
  get_str(root, "amdhsa.target", target, sizeof(target));
  const char *prefix = "amdgcn-amd-amdhsa--";
  if (strncmp(target, prefix, strlen(prefix)) != 0)
    return KC_COMPILE_ERROR("the code object's amdhsa.target '%s' is not an amdgcn-amd-amdhsa target ID", target);
  snprintf(out_target, target_cap, "%s", target + strlen(prefix));

  const msgpack_object *kernels = map_get(root, "amdhsa.kernels");
  if (!kernels || kernels->type != MSGPACK_OBJECT_ARRAY || kernels->via.array.size == 0)
    return KC_COMPILE_ERROR("the code object has no kernels in its metadata (amdhsa.kernels)");
  uint32_t n = kernels->via.array.size;
  if (n > KC_MAX_KERNELS) return KC_COMPILE_ERROR("more than %d kernels in one code object", KC_MAX_KERNELS);
  art->kernels = calloc(n, sizeof(*art->kernels));
  if (!art->kernels) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < n; i++) {
    art->num_kernels = i + 1;
    KILN_RETURN_IF_ERROR(parse_kernel(&kernels->via.array.ptr[i], job, &art->kernels[i]));
  }
  return KILN_OK;
}

/* Whether the note is one whole msgpack object within limits. msgpack-c allocates what a
 * container header declares before it reads the elements, so a note claiming 2^32 of them
 * would ask for ~100 GiB; the framer checks every count against the bytes present first. */
static bool note_is_sane(const uint8_t *desc, size_t len) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  lim.max_message = len;
  lim.max_items = 1u << 16;
  kiln_reader_t r;
  kiln_reader_init(&r, &lim, len);
  size_t fed = 0, space = 0, msg_len = 0;
  uint8_t *dst;
  while (fed < len && (dst = kiln_reader_space(&r, &space))) {
    size_t k = len - fed < space ? len - fed : space;
    memcpy(dst, desc + fed, k);
    kiln_reader_commit(&r, k);
    fed += k;
  }
  const uint8_t *msg;
  bool ok = fed == len && kiln_reader_next(&r, &msg, &msg_len) == KILN_FRAME_MESSAGE;
  kiln_reader_deinit(&r);
  return ok;
}

kiln_status_t kc_amdgpu_metadata_parse(const uint8_t *elf, size_t len, const kc_job_t *job_or_null,
                                       kiln_artifact_t *art, char *out_target, size_t target_cap) {
  kc_elf_t e;
  KILN_RETURN_IF_ERROR(kc_elf_open(elf, len, &e));
  note_find_t note = {0};
  kc_elf_notes(&e, find_note, &note);
  if (!note.desc)
    return KC_COMPILE_ERROR("the code object has no NT_AMDGPU_METADATA note: kiln needs code object v4 or v5");
  if (!note_is_sane(note.desc, note.len))
    return KC_COMPILE_ERROR("the AMDGPU metadata note is not valid msgpack or exceeds kiln's limits");
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  msgpack_unpack_return r = msgpack_unpack_next(&u, (const char *)note.desc, note.len, &off);
  kiln_status_t s = r == MSGPACK_UNPACK_SUCCESS ? parse_root(&u.data, job_or_null, art, out_target, target_cap)
                                                : KC_COMPILE_ERROR("the AMDGPU metadata note is not valid msgpack");
  msgpack_unpacked_destroy(&u);
  return s;
}
