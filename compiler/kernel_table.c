/* Kernel tables for the formats whose code object does not describe its arguments:
 * from IR signatures (PTX and cpu compiles), from the `__kiln_kernels` descriptor that kiln
 * embeds in cpu shared objects, and from PTX `.entry` parameter lists. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/internal.h"

static kiln_status_t alloc_kernels(kiln_artifact_t *out, uint32_t n) {
  out->kernels = calloc(n ? n : 1, sizeof(*out->kernels));
  if (!out->kernels) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  return KILN_OK;
}

/* Explicit arguments in parameter order; offsets as in a packed C struct with natural
 * alignment (what the PTX parameter space uses). */
static void layout(kiln_kernel_t *k) {
  uint32_t off = 0, align = 1;
  for (uint32_t i = 0; i < k->num_args; i++) {
    uint32_t sz = k->args[i].size;
    off = (off + sz - 1) / sz * sz;
    k->args[i].offset = off;
    off += sz;
    if (sz > align) align = sz;
  }
  k->kernarg_size = off;
  k->kernarg_align = align;
}

kiln_status_t kc_kernel_table_from_signatures(kc_job_t *job, kiln_artifact_t *out) {
  KILN_RETURN_IF_ERROR(alloc_kernels(out, job->num_kernels));
  for (uint32_t i = 0; i < job->num_kernels; i++) {
    const kc_kernel_t *src = &job->kernels[i];
    kiln_kernel_t *k = &out->kernels[i];
    out->num_kernels = i + 1;
    snprintf(k->name, sizeof(k->name), "%s", src->name);
    k->args = calloc(src->num_params + 1, sizeof(*k->args));
    if (!k->args) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    k->num_args = src->num_params;
    const char *pn = job->param_names.len ? (const char *)job->param_names.data + src->names : NULL;
    for (uint32_t a = 0; a < src->num_params; a++) {
      k->args[a].type = src->params[a];
      k->args[a].size = kiln_arg_type_size(src->params[a]);
      if (pn) {
        snprintf(k->args[a].name, sizeof(k->args[a].name), "%s", pn);
        pn += strlen(pn) + 1;
      }
    }
    layout(k);
    k->group_segment_size = src->group_segment_size;
    k->private_segment_size = src->private_segment_size;
    k->max_block = job->req->options.max_block;
    k->wavefront_size = job->target.wave_size;
  }
  return KILN_OK;
}

/* ---- cpu descriptor ------------------------------------------------------------------
 * One line per kernel: "NAME GROUP_BYTES PRIVATE_BYTES MAX_BLOCK TYPE,TYPE,...\n" (a
 * kernel without parameters has "-" for the list). */

char *kc_cpu_descriptor(const kc_job_t *job) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_status_t s = KILN_OK;
  for (uint32_t i = 0; i < job->num_kernels && !s; i++) {
    const kc_kernel_t *k = &job->kernels[i];
    char line[256];
    int n = snprintf(line, sizeof(line), "%s %u %u %u ", k->name, k->group_segment_size, k->private_segment_size,
                     job->req->options.max_block);
    s = kiln_buf_append(&b, line, (size_t)n);
    for (uint32_t a = 0; a < k->num_params && !s; a++) {
      const char *t = kiln_arg_type_name(k->params[a]);
      s = kiln_buf_append(&b, t, strlen(t));
      if (!s && a + 1 < k->num_params) s = kiln_buf_append(&b, ",", 1);
    }
    if (!s && !k->num_params) s = kiln_buf_append(&b, "-", 1);
    if (!s) s = kiln_buf_append(&b, "\n", 1);
  }
  if (!s) s = kiln_buf_append(&b, "", 1);
  if (s) {
    kiln_status_free(s);
    kiln_buf_deinit(&b);
    return NULL;
  }
  return (char *)kiln_buf_release(&b, &(size_t){0});
}

kiln_status_t kc_cpu_descriptor_parse(const char *text, size_t len, kiln_artifact_t *out) {
  uint32_t lines = 0;
  for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
  if (!lines || lines > KC_MAX_KERNELS) return KC_COMPILE_ERROR("the __kiln_kernels descriptor lists no kernels");
  KILN_RETURN_IF_ERROR(alloc_kernels(out, lines));
  size_t pos = 0;
  for (uint32_t i = 0; i < lines; i++) {
    const char *nl = memchr(text + pos, '\n', len - pos);
    char line[4096];
    size_t n = (size_t)(nl - (text + pos));
    if (n >= sizeof(line)) return KC_COMPILE_ERROR("a __kiln_kernels line is too long");
    memcpy(line, text + pos, n);
    line[n] = 0;
    pos += n + 1;
    kiln_kernel_t *k = &out->kernels[i];
    out->num_kernels = i + 1;
    char types[3800];
    unsigned g, p, mb;
    if (sscanf(line, "%127s %u %u %u %3799s", k->name, &g, &p, &mb, types) != 5)
      return KC_COMPILE_ERROR("malformed __kiln_kernels line %u: '%s'", i + 1, line);
    k->group_segment_size = g;
    k->private_segment_size = p;
    k->max_block = mb;
    k->wavefront_size = 1;
    k->args = calloc(KC_MAX_PARAMS + 1, sizeof(*k->args));
    if (!k->args) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    if (strcmp(types, "-") != 0) {
      char *save = NULL;
      for (char *t = strtok_r(types, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (k->num_args == KC_MAX_PARAMS) return KC_COMPILE_ERROR("kernel '%s' has too many parameters", k->name);
        kiln_arg_type_t ty = kiln_arg_type_from_name(t);
        if (!ty) return KC_COMPILE_ERROR("kernel '%s': unknown parameter type '%s'", k->name, t);
        k->args[k->num_args].type = ty;
        k->args[k->num_args].size = kiln_arg_type_size(ty);
        k->num_args++;
      }
    }
    layout(k);
  }
  return KILN_OK;
}

/* ---- PTX .entry lists ----------------------------------------------------------------
 * `.visible .entry NAME( .param .u64 NAME_param_0, .param .f32 NAME_param_1 )`. Parameter
 * types: .u64/.b64 -> ptr (what compilers emit for pointers), .s64 -> int64, .f32/.f64/.f16
 * -> floats, other integers -> intN by width (compilers write .u32 for C's int, so the
 * sign is not in the PTX). Aggregates (.align N .b8 x[K]) are refused. */

static const char *skip_ws(const char *p, const char *end) {
  while (p < end) {
    if (isspace((unsigned char)*p)) p++;
    else if (end - p >= 2 && p[0] == '/' && p[1] == '/') { while (p < end && *p != '\n') p++; }
    else if (end - p >= 2 && p[0] == '/' && p[1] == '*') {
      p += 2;
      while (end - p >= 2 && !(p[0] == '*' && p[1] == '/')) p++;
      p = end - p >= 2 ? p + 2 : end;
    } else break;
  }
  return p;
}

static size_t token(const char *p, const char *end, char *out, size_t cap) {
  size_t n = 0;
  while (p + n < end && (isalnum((unsigned char)p[n]) || p[n] == '_' || p[n] == '.' || p[n] == '$') && n + 1 < cap) {
    out[n] = p[n];
    n++;
  }
  out[n] = 0;
  return n;
}

static kiln_arg_type_t ptx_param_type(const char *t) {
  static const struct {
    const char *ptx;
    kiln_arg_type_t t;
  } map[] = {{".u64", KILN_ARG_PTR}, {".b64", KILN_ARG_PTR}, {".s64", KILN_ARG_I64}, {".u32", KILN_ARG_I32},
             {".b32", KILN_ARG_I32}, {".s32", KILN_ARG_I32}, {".u16", KILN_ARG_I16}, {".b16", KILN_ARG_I16},
             {".s16", KILN_ARG_I16}, {".u8", KILN_ARG_I8},   {".b8", KILN_ARG_I8},   {".s8", KILN_ARG_I8},
             {".f16", KILN_ARG_F16}, {".bf16", KILN_ARG_BF16}, {".f32", KILN_ARG_F32}, {".f64", KILN_ARG_F64}};
  for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
    if (strcmp(map[i].ptx, t) == 0) return map[i].t;
  return 0;
}

static kiln_status_t parse_entry(const char **pp, const char *end, kiln_kernel_t *k) {
  const char *p = skip_ws(*pp, end);
  size_t n = token(p, end, k->name, sizeof(k->name));
  if (!n) return KC_COMPILE_ERROR("a PTX .entry has no name");
  p = skip_ws(p + n, end);
  k->args = calloc(KC_MAX_PARAMS + 1, sizeof(*k->args));
  if (!k->args) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  if (p < end && *p == '(') {
    p++;
    for (;;) {
      p = skip_ws(p, end);
      if (p < end && *p == ')') { p++; break; }
      char tok[64];
      n = token(p, end, tok, sizeof(tok));
      if (strcmp(tok, ".param") != 0) return KC_COMPILE_ERROR("PTX .entry %s: expected .param", k->name);
      p = skip_ws(p + n, end);
      kiln_arg_type_t ty = 0;
      /* Attributes such as .ptr .global .align N come between type and name. */
      while (p < end && *p == '.') {
        n = token(p, end, tok, sizeof(tok));
        if (!ty) ty = ptx_param_type(tok);
        if (strcmp(tok, ".align") == 0) {
          p = skip_ws(p + n, end);
          while (p < end && isdigit((unsigned char)*p)) p++;
        } else {
          p += n;
        }
        p = skip_ws(p, end);
      }
      n = token(p, end, tok, sizeof(tok));
      p = skip_ws(p + n, end);
      if (!ty || (p < end && *p == '['))
        return KC_COMPILE_ERROR("PTX .entry %s parameter %u is an aggregate or has an unknown type: kiln "
                                "passes only pointers and scalars", k->name, k->num_args);
      if (k->num_args == KC_MAX_PARAMS) return KC_COMPILE_ERROR("PTX .entry %s has too many parameters", k->name);
      k->args[k->num_args].type = ty;
      k->args[k->num_args].size = kiln_arg_type_size(ty);
      snprintf(k->args[k->num_args].name, sizeof(k->args[0].name), "%s", tok);
      k->num_args++;
      if (p < end && *p == ',') p++;
      else if (!(p < end && *p == ')')) return KC_COMPILE_ERROR("PTX .entry %s: malformed parameter list", k->name);
    }
  }
  layout(k);
  k->wavefront_size = 32;
  *pp = p;
  return KILN_OK;
}

/* The next `.entry` directive at or after `p` in [ptx, end), pointing past the word; NULL if
 * none. A match must be a whole word (".entryfoo" is not one) outside a // comment (LLVM's
 * header lines are comments, and any text may be). */
static const char *next_entry(const char *ptx, const char *p, const char *end) {
  for (; (p = memmem(p, (size_t)(end - p), ".entry", 6)); p += 6) {
    if (p + 6 < end && !isspace((unsigned char)p[6])) continue;
    if (p > ptx && !isspace((unsigned char)p[-1])) continue;
    const char *line = p;
    while (line > ptx && line[-1] != '\n') line--;
    if (memmem(line, (size_t)(p - line), "//", 2)) continue;
    return p + 6;
  }
  return NULL;
}

kiln_status_t kc_ptx_kernel_table(const char *ptx, size_t len, kiln_artifact_t *out) {
  const char *end = ptx + len;
  uint32_t count = 0;
  for (const char *p = ptx; (p = next_entry(ptx, p, end)); ) count++;
  if (!count) return KC_COMPILE_ERROR("the PTX has no .entry (no kernels)");
  if (count > KC_MAX_KERNELS) return KC_COMPILE_ERROR("more than %d kernels in one PTX module", KC_MAX_KERNELS);
  KILN_RETURN_IF_ERROR(alloc_kernels(out, count));
  const char *p = ptx;
  for (uint32_t i = 0; i < count; i++) {
    /* An .entry inside the previous entry's text (its name, a comment) was counted above. */
    if (!(p = next_entry(ptx, p, end))) return KC_COMPILE_ERROR("the PTX has a malformed .entry list");
    out->num_kernels = i + 1;
    KILN_RETURN_IF_ERROR(parse_entry(&p, end, &out->kernels[i]));
  }
  return KILN_OK;
}
