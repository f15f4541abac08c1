/* The artifact: init/deinit, lookups, argument type names, and its msgpack encoding
 * (docs/cache.md, "Artifact encoding"). Decoding treats the bytes as hostile: every field is
 * type-checked, bounded and copied; nothing is trusted because it came from our own worker or
 * our own disk. */
#include "protocol/artifact.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "protocol/mp.h"
#include "protocol/rpc.h"

#define ENCODING_VERSION 1
#define MAX_KERNELS 4096
#define MAX_ARGS 1024
#define MAX_DEPTH 8

void kiln_artifact_init(kiln_artifact_t *a) { memset(a, 0, sizeof(*a)); }

void kiln_artifact_deinit(kiln_artifact_t *a) {
  if (!a) return;
  for (uint32_t i = 0; i < a->num_kernels && a->kernels; i++) {
    free(a->kernels[i].args);
    free(a->kernels[i].launch);
  }
  free(a->kernels);
  free(a->code);
  free(a->llvm_ir);
  free(a->assembly);
  free(a->log);
  memset(a, 0, sizeof(*a));
}

const kiln_kernel_t *kiln_artifact_kernel(const kiln_artifact_t *a, const char *name) {
  for (uint32_t i = 0; i < a->num_kernels; i++)
    if (strcmp(a->kernels[i].name, name) == 0) return &a->kernels[i];
  return NULL;
}

/* ---- argument types ---------------------------------------------------------------- */

static const struct {
  const char *name;
  uint32_t size;
} arg_types[] = {
    [KILN_ARG_PTR] = {"ptr", 8},       [KILN_ARG_I8] = {"int8", 1},
    [KILN_ARG_I16] = {"int16", 2},     [KILN_ARG_I32] = {"int32", 4},
    [KILN_ARG_I64] = {"int64", 8},     [KILN_ARG_U8] = {"uint8", 1},
    [KILN_ARG_U16] = {"uint16", 2},    [KILN_ARG_U32] = {"uint32", 4},
    [KILN_ARG_U64] = {"uint64", 8},    [KILN_ARG_F16] = {"float16", 2},
    [KILN_ARG_BF16] = {"bfloat16", 2}, [KILN_ARG_F32] = {"float32", 4},
    [KILN_ARG_F64] = {"float64", 8},
};
#define NUM_ARG_TYPES (sizeof(arg_types) / sizeof(arg_types[0]))

const char *kiln_arg_type_name(kiln_arg_type_t t) {
  if ((unsigned)t == 0 || (unsigned)t >= NUM_ARG_TYPES) return "unknown";
  return arg_types[t].name;
}

kiln_arg_type_t kiln_arg_type_from_name(const char *name) {
  for (unsigned i = 1; i < NUM_ARG_TYPES; i++)
    if (strcmp(arg_types[i].name, name) == 0) return (kiln_arg_type_t)i;
  return 0;
}

uint32_t kiln_arg_type_size(kiln_arg_type_t t) {
  if ((unsigned)t == 0 || (unsigned)t >= NUM_ARG_TYPES) return 0;
  return arg_types[t].size;
}

static const char *const hidden_names[] = {
    [KILN_HIDDEN_NONE] = "none",
    [KILN_HIDDEN_BLOCK_COUNT_X] = "block_count_x",
    [KILN_HIDDEN_BLOCK_COUNT_Y] = "block_count_y",
    [KILN_HIDDEN_BLOCK_COUNT_Z] = "block_count_z",
    [KILN_HIDDEN_GROUP_SIZE_X] = "group_size_x",
    [KILN_HIDDEN_GROUP_SIZE_Y] = "group_size_y",
    [KILN_HIDDEN_GROUP_SIZE_Z] = "group_size_z",
    [KILN_HIDDEN_REMAINDER_X] = "remainder_x",
    [KILN_HIDDEN_REMAINDER_Y] = "remainder_y",
    [KILN_HIDDEN_REMAINDER_Z] = "remainder_z",
    [KILN_HIDDEN_GLOBAL_OFFSET_X] = "global_offset_x",
    [KILN_HIDDEN_GLOBAL_OFFSET_Y] = "global_offset_y",
    [KILN_HIDDEN_GLOBAL_OFFSET_Z] = "global_offset_z",
    [KILN_HIDDEN_GRID_DIMS] = "grid_dims",
    [KILN_HIDDEN_DYNAMIC_LDS_SIZE] = "dynamic_lds_size",
    [KILN_HIDDEN_QUEUE_PTR] = "queue_ptr",
    [KILN_HIDDEN_PRIVATE_BASE] = "private_base",
    [KILN_HIDDEN_SHARED_BASE] = "shared_base",
    [KILN_HIDDEN_OTHER] = "other",
};
#define NUM_HIDDEN (sizeof(hidden_names) / sizeof(hidden_names[0]))

/* ---- encoding ---------------------------------------------------------------------- */

/* A text field: the string, or nil when there is none. */
static void pack_text(kiln_fields_t *m, const char *key, const char *text) {
  if (text)
    kiln_fields_str(m, key, text);
  else {
    kiln_fields_key(m, key);
    msgpack_pack_nil(m->pk);
  }
}

static void pack_arg(msgpack_packer *pk, const kiln_kernel_arg_t *arg, bool hidden) {
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  pack_text(&m, "name", arg->name);
  if (hidden)
    kiln_fields_str(&m, "hidden",
                    (unsigned)arg->hidden < NUM_HIDDEN ? hidden_names[arg->hidden] : "other");
  else
    kiln_fields_str(&m, "type", kiln_arg_type_name(arg->type));
  kiln_fields_u64(&m, "offset", arg->offset);
  kiln_fields_u64(&m, "size", arg->size);
  kiln_fields_end(&m);
}

static void pack_kernel(msgpack_packer *pk, const kiln_kernel_t *k) {
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  pack_text(&m, "name", k->name);
  kiln_fields_key(&m, "args");
  msgpack_pack_array(pk, k->num_args);
  for (uint32_t i = 0; i < k->num_args; i++) pack_arg(pk, &k->args[i], false);
  kiln_fields_key(&m, "hidden_args");
  msgpack_pack_array(pk, k->num_hidden);
  for (uint32_t i = 0; i < k->num_hidden; i++) pack_arg(pk, &k->args[k->num_args + i], true);
  kiln_fields_u64(&m, "kernarg_size", k->kernarg_size);
  kiln_fields_u64(&m, "kernarg_align", k->kernarg_align);
  kiln_fields_u64(&m, "group_segment_size", k->group_segment_size);
  kiln_fields_u64(&m, "private_segment_size", k->private_segment_size);
  kiln_fields_u64(&m, "max_block", k->max_block);
  kiln_fields_u64(&m, "sgpr_count", k->sgpr_count);
  kiln_fields_u64(&m, "vgpr_count", k->vgpr_count);
  kiln_fields_u64(&m, "sgpr_spill_count", k->sgpr_spill_count);
  kiln_fields_u64(&m, "vgpr_spill_count", k->vgpr_spill_count);
  kiln_fields_u64(&m, "wavefront_size", k->wavefront_size);
  if (k->launch) {
    kiln_fields_key(&m, "launch");
    msgpack_pack_bin(pk, k->launch_size);
    msgpack_pack_bin_body(pk, k->launch, k->launch_size);
  }
  kiln_fields_end(&m);
}

static const char *format_name(kiln_artifact_format_t f) {
  switch (f) {
  case KILN_FORMAT_CPU_SO: return "cpu-so";
  case KILN_FORMAT_HSACO: return "hsaco";
  case KILN_FORMAT_PTX: return "ptx";
  }
  return NULL;
}

kiln_status_t kiln_artifact_encode(const kiln_artifact_t *a, uint8_t **out_bytes, size_t *out_len) {
  const char *fmt = format_name(a->format);
  if (!fmt) return KILN_STATUS(KILN_E_INTERNAL, "artifact has no valid format (%d)", (int)a->format);
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  kiln_packer_t p;
  kiln_packer_init(&p, &buf);
  msgpack_packer *pk = &p.pk;

  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_u64(&m, "v", ENCODING_VERSION);
  pack_text(&m, "format", fmt);
  pack_text(&m, "target", a->target);
  kiln_fields_key(&m, "code");
  msgpack_pack_bin(pk, a->code_size);
  msgpack_pack_bin_body(pk, a->code, a->code_size);
  kiln_fields_key(&m, "kernels");
  msgpack_pack_array(pk, a->num_kernels);
  for (uint32_t i = 0; i < a->num_kernels; i++) pack_kernel(pk, &a->kernels[i]);
  pack_text(&m, "llvm_ir", a->llvm_ir);
  pack_text(&m, "assembly", a->assembly);
  pack_text(&m, "log", a->log);
  kiln_fields_end(&m);

  kiln_status_t st = kiln_packer_status(&p);
  if (st) {
    kiln_buf_deinit(&buf);
    return st;
  }
  *out_bytes = kiln_buf_release(&buf, out_len);
  return KILN_OK;
}

/* ---- decoding ---------------------------------------------------------------------- */

static const kiln_mp_err_t artifact_err = {KILN_E_INVALID_ARGUMENT, "artifact decode: ", "field"};
#define BAD(...) KILN_STATUS(KILN_E_INVALID_ARGUMENT, "artifact decode: " __VA_ARGS__)

static bool key_is(const msgpack_object *k, const char *name) {
  return k->type == MSGPACK_OBJECT_STR && kiln_mp_eq(k, name);
}

static kiln_status_t get_u32(const msgpack_object *o, const char *what, uint32_t *out) {
  uint64_t v;
  KILN_RETURN_IF_ERROR(kiln_mp_uint(&artifact_err, o, what, UINT32_MAX, &v));
  *out = (uint32_t)v;
  return KILN_OK;
}

static kiln_status_t get_fixed_str(const msgpack_object *o, const char *what, char *dst, size_t cap) {
  return kiln_mp_cstr(&artifact_err, o, what, dst, cap);
}

static kiln_status_t decode_arg(const msgpack_object *o, bool hidden, kiln_kernel_arg_t *arg) {
  if (o->type != MSGPACK_OBJECT_MAP) return BAD("a kernel argument must be a map");
  bool have_kind = false, have_offset = false, have_size = false;
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    const msgpack_object *k = &o->via.map.ptr[i].key, *v = &o->via.map.ptr[i].val;
    if (key_is(k, "name")) {
      KILN_RETURN_IF_ERROR(get_fixed_str(v, "args.name", arg->name, sizeof(arg->name)));
    } else if (key_is(k, "offset")) {
      KILN_RETURN_IF_ERROR(get_u32(v, "args.offset", &arg->offset));
      have_offset = true;
    } else if (key_is(k, "size")) {
      KILN_RETURN_IF_ERROR(get_u32(v, "args.size", &arg->size));
      have_size = true;
    } else if (!hidden && key_is(k, "type")) {
      char name[16];
      KILN_RETURN_IF_ERROR(get_fixed_str(v, "args.type", name, sizeof(name)));
      arg->type = kiln_arg_type_from_name(name);
      if (!arg->type) return BAD("unknown argument type '%s'", name);
      have_kind = true;
    } else if (hidden && key_is(k, "hidden")) {
      char name[32];
      KILN_RETURN_IF_ERROR(get_fixed_str(v, "hidden_args.hidden", name, sizeof(name)));
      unsigned h = 1;
      while (h < NUM_HIDDEN && strcmp(hidden_names[h], name) != 0) h++;
      if (h == NUM_HIDDEN) return BAD("unknown hidden argument kind '%s'", name);
      arg->hidden = (kiln_hidden_kind_t)h;
      have_kind = true;
    } else {
      return BAD("unknown field in a kernel argument");
    }
  }
  if (!have_kind || !have_offset || !have_size)
    return BAD("a kernel argument lacks one of %s, offset, size", hidden ? "hidden" : "type");
  if (!hidden && arg->size != kiln_arg_type_size(arg->type))
    return BAD("argument '%s' of type %s has size %u", arg->name, kiln_arg_type_name(arg->type),
               arg->size);
  if ((uint64_t)arg->offset + arg->size > UINT32_MAX) return BAD("argument offset overflows");
  return KILN_OK;
}

static kiln_status_t decode_args(const msgpack_object *o, bool hidden, kiln_kernel_arg_t **out,
                                 uint32_t *out_n) {
  if (o->type != MSGPACK_OBJECT_ARRAY) return BAD("'%s' must be an array", hidden ? "hidden_args" : "args");
  if (o->via.array.size > MAX_ARGS) return BAD("more than %d arguments in a kernel", MAX_ARGS);
  *out_n = o->via.array.size;
  *out = calloc(o->via.array.size + 1, sizeof(**out));
  if (!*out) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory decoding arguments");
  for (uint32_t i = 0; i < o->via.array.size; i++)
    KILN_RETURN_IF_ERROR(decode_arg(&o->via.array.ptr[i], hidden, &(*out)[i]));
  return KILN_OK;
}

static kiln_status_t decode_kernel(const msgpack_object *o, kiln_artifact_format_t format,
                                   kiln_kernel_t *k) {
  if (o->type != MSGPACK_OBJECT_MAP) return BAD("a kernel must be a map");
  kiln_kernel_arg_t *explicit_args = NULL, *hidden_args = NULL;
  uint32_t n_explicit = 0, n_hidden = 0;
  bool have_name = false, have_args = false, have_hidden = false;
  kiln_status_t s = KILN_OK;
  static const struct {
    const char *key;
    size_t off;
  } u32_fields[] = {
      {"kernarg_size", offsetof(kiln_kernel_t, kernarg_size)},
      {"kernarg_align", offsetof(kiln_kernel_t, kernarg_align)},
      {"group_segment_size", offsetof(kiln_kernel_t, group_segment_size)},
      {"private_segment_size", offsetof(kiln_kernel_t, private_segment_size)},
      {"max_block", offsetof(kiln_kernel_t, max_block)},
      {"sgpr_count", offsetof(kiln_kernel_t, sgpr_count)},
      {"vgpr_count", offsetof(kiln_kernel_t, vgpr_count)},
      {"sgpr_spill_count", offsetof(kiln_kernel_t, sgpr_spill_count)},
      {"vgpr_spill_count", offsetof(kiln_kernel_t, vgpr_spill_count)},
      {"wavefront_size", offsetof(kiln_kernel_t, wavefront_size)},
  };
  bool seen[KILN_ARRAY_SIZE(u32_fields)];
  memset(seen, 0, sizeof(seen));
  for (uint32_t i = 0; i < o->via.map.size && !s; i++) {
    const msgpack_object *key = &o->via.map.ptr[i].key, *v = &o->via.map.ptr[i].val;
    if (key_is(key, "name")) {
      s = get_fixed_str(v, "kernels.name", k->name, sizeof(k->name));
      have_name = !s && k->name[0];
    } else if (key_is(key, "args") && !have_args) {
      s = decode_args(v, false, &explicit_args, &n_explicit);
      have_args = true;
    } else if (key_is(key, "hidden_args") && !have_hidden) {
      s = decode_args(v, true, &hidden_args, &n_hidden);
      have_hidden = true;
    } else if (key_is(key, "launch") && !k->launch) {
      /* Optional (te kernels): the launch recipe's own MessagePack, kept as bytes. */
      if (v->type != MSGPACK_OBJECT_BIN || v->via.bin.size == 0 || v->via.bin.size > 65536)
        s = BAD("kernel '%s': launch must be a bin of 1..65536 bytes", k->name);
      else if (!(k->launch = malloc(v->via.bin.size)))
        s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory decoding a kernel");
      else {
        memcpy(k->launch, v->via.bin.ptr, v->via.bin.size);
        k->launch_size = v->via.bin.size;
      }
    } else {
      size_t f = 0;
      while (f < KILN_ARRAY_SIZE(u32_fields) && !key_is(key, u32_fields[f].key)) f++;
      if (f == KILN_ARRAY_SIZE(u32_fields)) {
        s = BAD("unknown or repeated field in a kernel");
      } else {
        s = get_u32(v, u32_fields[f].key, (uint32_t *)((char *)k + u32_fields[f].off));
        seen[f] = true;
      }
    }
  }
  if (!s && (!have_name || !have_args || !have_hidden))
    s = BAD("a kernel lacks one of name, args, hidden_args");
  for (size_t f = 0; !s && f < KILN_ARRAY_SIZE(u32_fields); f++)
    if (!seen[f]) s = BAD("kernel '%s' lacks field '%s'", k->name, u32_fields[f].key);
  if (!s && format != KILN_FORMAT_HSACO && n_hidden)
    s = BAD("kernel '%s' has hidden arguments but is not an HSACO kernel", k->name);
  if (!s && format == KILN_FORMAT_HSACO) {
    for (uint32_t i = 0; i < n_explicit + n_hidden && !s; i++) {
      const kiln_kernel_arg_t *a = i < n_explicit ? &explicit_args[i] : &hidden_args[i - n_explicit];
      if (a->offset + a->size > k->kernarg_size)
        s = BAD("kernel '%s': argument at offset %u lies outside its %u-byte kernarg segment",
                k->name, a->offset, k->kernarg_size);
    }
  }
  if (!s && k->kernarg_align & (k->kernarg_align - 1))
    s = BAD("kernel '%s': kernarg_align %u is not a power of two", k->name, k->kernarg_align);
  if (!s) {
    k->args = calloc((size_t)n_explicit + n_hidden + 1, sizeof(*k->args));
    if (!k->args) s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory decoding a kernel");
  }
  if (!s) {
    if (n_explicit) memcpy(k->args, explicit_args, n_explicit * sizeof(*k->args));
    if (n_hidden) memcpy(k->args + n_explicit, hidden_args, n_hidden * sizeof(*k->args));
    k->num_args = n_explicit;
    k->num_hidden = n_hidden;
  }
  free(explicit_args);
  free(hidden_args);
  return s;
}

static kiln_status_t decode_kernels(const msgpack_object *o, kiln_artifact_t *a) {
  if (o->type != MSGPACK_OBJECT_ARRAY) return BAD("'kernels' must be an array");
  if (o->via.array.size > MAX_KERNELS) return BAD("more than %d kernels", MAX_KERNELS);
  a->kernels = calloc(o->via.array.size + 1, sizeof(*a->kernels));
  if (!a->kernels) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory decoding kernels");
  for (uint32_t i = 0; i < o->via.array.size; i++) {
    kiln_status_t s = decode_kernel(&o->via.array.ptr[i], a->format, &a->kernels[i]);
    a->num_kernels = i + 1; /* so that deinit frees what was decoded so far */
    if (s) return s;
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(a->kernels[j].name, a->kernels[i].name) == 0)
        return BAD("kernel '%s' appears twice", a->kernels[i].name);
  }
  return KILN_OK;
}

static kiln_status_t decode_root(const msgpack_object *root, kiln_artifact_part_t what,
                                 kiln_artifact_t *a) {
  if (root->type != MSGPACK_OBJECT_MAP) return BAD("the artifact must be a map");
  enum { F_V, F_FORMAT, F_TARGET, F_CODE, F_KERNELS, F_IR, F_ASM, F_LOG, F_N };
  static const char *const names[F_N] = {"v", "format", "target", "code",
                                         "kernels", "llvm_ir", "assembly", "log"};
  const msgpack_object *field[F_N] = {0};
  for (uint32_t i = 0; i < root->via.map.size; i++) {
    int f = 0;
    while (f < F_N && !key_is(&root->via.map.ptr[i].key, names[f])) f++;
    if (f == F_N || field[f]) return BAD("unknown or repeated top-level field");
    field[f] = &root->via.map.ptr[i].val;
  }
  for (int f = 0; f < F_N; f++)
    if (!field[f]) return BAD("field '%s' is missing", names[f]);

  uint32_t version = 0;
  KILN_RETURN_IF_ERROR(get_u32(field[F_V], "v", &version));
  if (version != ENCODING_VERSION)
    return BAD("encoding version %u, this kiln reads version %d", version, ENCODING_VERSION);
  char fmt[16];
  KILN_RETURN_IF_ERROR(get_fixed_str(field[F_FORMAT], "format", fmt, sizeof(fmt)));
  if (strcmp(fmt, "cpu-so") == 0) a->format = KILN_FORMAT_CPU_SO;
  else if (strcmp(fmt, "hsaco") == 0) a->format = KILN_FORMAT_HSACO;
  else if (strcmp(fmt, "ptx") == 0) a->format = KILN_FORMAT_PTX;
  else return BAD("unknown format '%s'", fmt);
  KILN_RETURN_IF_ERROR(get_fixed_str(field[F_TARGET], "target", a->target, sizeof(a->target)));
  if (!a->target[0]) return BAD("empty target");

  const msgpack_object *code = field[F_CODE];
  if (code->type != MSGPACK_OBJECT_BIN || code->via.bin.size == 0)
    return BAD("'code' must be non-empty bin");
  a->code_size = code->via.bin.size;
  if (what == KILN_ARTIFACT_ALL) {
    a->code = malloc(code->via.bin.size);
    if (!a->code) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory decoding code");
    memcpy(a->code, code->via.bin.ptr, code->via.bin.size);
  }

  KILN_RETURN_IF_ERROR(decode_kernels(field[F_KERNELS], a));
  KILN_RETURN_IF_ERROR(kiln_mp_opt_text(&artifact_err, field[F_LOG], "log", &a->log));
  if (what == KILN_ARTIFACT_TABLE) {
    /* The texts are checked, not kept. */
    for (int f = F_IR; f <= F_ASM; f++)
      if (field[f]->type != MSGPACK_OBJECT_NIL &&
          (field[f]->type != MSGPACK_OBJECT_STR || memchr(field[f]->via.str.ptr, 0, field[f]->via.str.size)))
        return BAD("%s must be a string without NUL, or nil", names[f]);
    return KILN_OK;
  }
  KILN_RETURN_IF_ERROR(kiln_mp_opt_text(&artifact_err, field[F_IR], "llvm_ir", &a->llvm_ir));
  KILN_RETURN_IF_ERROR(kiln_mp_opt_text(&artifact_err, field[F_ASM], "assembly", &a->assembly));
  return KILN_OK;
}

kiln_status_t kiln_artifact_decode_part(const uint8_t *bytes, size_t len, kiln_artifact_part_t what,
                                        kiln_artifact_t *out) {
  kiln_mp_doc_t doc;
  kiln_status_t s = kiln_mp_doc_read(&doc, bytes, len, MAX_DEPTH, false, &artifact_err);
  kiln_artifact_t a;
  kiln_artifact_init(&a);
  if (!s) s = decode_root(&doc.root, what, &a);
  kiln_mp_doc_deinit(&doc);
  if (s) {
    kiln_artifact_deinit(&a);
    return s;
  }
  *out = a;
  return KILN_OK;
}

kiln_status_t kiln_artifact_decode(const uint8_t *bytes, size_t len, kiln_artifact_t *out) {
  return kiln_artifact_decode_part(bytes, len, KILN_ARTIFACT_ALL, out);
}
