/* A graph payload checked and planned (server/graph.h): names, views, nodes and their
 * launches against docs/graph.md §1, and the memory plan of §4. No server state: it works on
 * the decoded payload alone, so it can be tested and fuzzed without a daemon. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/map.h"
#include "base/util.h"
#include "protocol/rpc.h"
#include "server/graph.h"

#define ALIGN 256u

static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) & ~(uint64_t)(ALIGN - 1); }

void kiln_gplan_deinit(kiln_gplan_t *p) {
  free(p->names);
  if (p->nodes)
    for (uint32_t i = 0; i < p->num_nodes; i++) free(p->nodes[i].launches);
  free(p->nodes);
  free(p->args);
  free(p->programs);
  free(p->outputs);
  kiln_map_deinit(&p->index);
  memset(p, 0, sizeof(*p));
}

/* Checks that map `o` (called `where`) has only `allowed` keys. */
static kiln_status_t keys(const msgpack_object *o, const char *where, const char *const *allowed) {
  if (o->type != MSGPACK_OBJECT_MAP) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s must be a map", where);
  return kiln_params_check(o, where, allowed);
}

static kiln_status_t array(const msgpack_object *m, const char *key, const char *where,
                           const msgpack_object_array **out) {
  const msgpack_object *o = kiln_params_find(m, key);
  if (!o) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: missing required field '%s'", where, key);
  if (o->type != MSGPACK_OBJECT_ARRAY)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: '%s' must be an array", where, key);
  *out = &o->via.array;
  return KILN_OK;
}

static kiln_status_t str(const msgpack_object *m, const char *key, const char *where, bool name,
                         const char **s, uint32_t *len) {
  const msgpack_object *o = kiln_params_find(m, key);
  if (!o) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: missing required field '%s'", where, key);
  if (o->type != MSGPACK_OBJECT_STR)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: '%s' must be a string", where, key);
  if (name && (o->via.str.size < 1 || o->via.str.size > 255))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: '%s' must be 1 to 255 bytes", where, key);
  *s = o->via.str.ptr;
  *len = o->via.str.size;
  return KILN_OK;
}

static uint64_t name_key(const char *s, uint32_t len) { return kiln_hash_bytes64(s, len) | 1; }

/* The name's index, or -1. Names hash to 64 bits; a collision chains through `next`. */
static int64_t find_name(const kiln_gplan_t *p, const char *s, uint32_t len) {
  uintptr_t v = (uintptr_t)kiln_map_get(&p->index, name_key(s, len));
  for (int64_t i = (int64_t)v - 1; i >= 0; i = p->names[i].next) {
    const kiln_gname_t *n = &p->names[i];
    if (n->len == len && memcmp(n->s, s, len) == 0) return i;
  }
  return -1;
}

static kiln_status_t declare(kiln_gplan_t *p, const msgpack_object *m, const char *where,
                             kiln_gkind_t kind, uint32_t *out) {
  const char *s;
  uint32_t len;
  KILN_RETURN_IF_ERROR(str(m, "name", where, true, &s, &len));
  if (find_name(p, s, len) >= 0)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: name '%.*s' is declared twice", where, (int)len, s);
  if (p->num_names >= KILN_GRAPH_MAX_NAMES)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "a graph declares at most %u names",
                       KILN_GRAPH_MAX_NAMES);
  uint32_t i = p->num_names++;
  kiln_gname_t *n = &p->names[i];
  memset(n, 0, sizeof(*n));
  n->s = s;
  n->len = len;
  n->kind = kind;
  n->base = i;
  n->writer = -1;
  n->last_use = -1;
  uint64_t k = name_key(s, len);
  n->next = (int64_t)(uintptr_t)kiln_map_get(&p->index, k) - 1;
  KILN_RETURN_IF_ERROR(kiln_map_put(&p->index, k, (void *)(uintptr_t)(i + 1)));
  *out = i;
  return KILN_OK;
}

static kiln_status_t desc(const msgpack_object *m, const char *where, kiln_tensor_desc_t *d) {
  const msgpack_object *dt = kiln_params_find(m, "dtype"), *sh = kiln_params_find(m, "shape");
  if (!dt || !sh)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: missing required field '%s'", where, dt ? "shape" : "dtype");
  kiln_status_t st = kiln_tensor_desc_parse(dt, sh, d);
  if (st) {
    kiln_status_t e = KILN_STATUS(kiln_status_code(st), "%s: %s", where, kiln_status_message(st));
    kiln_status_free(st);
    return e;
  }
  if (d->dtype == KILN_BFLOAT16)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: bfloat16 is not a graph dtype", where);
  return KILN_OK;
}

static kiln_status_t decl_section(kiln_gplan_t *p, const msgpack_object *g, const char *key,
                                  kiln_gkind_t kind) {
  const msgpack_object_array *a;
  KILN_RETURN_IF_ERROR(array(g, key, "graph", &a));
  static const char *const f_decl[] = {"name", "dtype", "shape", NULL};
  static const char *const f_const[] = {"name", "tensor", "id", "dtype", "shape", NULL};
  static const char *const f_view[] = {"name", "of", "shape", NULL};
  for (uint32_t i = 0; i < a->size; i++) {
    char where[64];
    snprintf(where, sizeof(where), "%s[%u]", key, i);
    const msgpack_object *m = &a->ptr[i];
    KILN_RETURN_IF_ERROR(keys(m, where, kind == KILN_GCONST ? f_const : kind == KILN_GVIEW ? f_view : f_decl));
    uint32_t idx = 0;
    KILN_RETURN_IF_ERROR(declare(p, m, where, kind, &idx));
    kiln_gname_t *n = &p->names[idx];
    snprintf(where, sizeof(where), "%s '%.*s'", key, (int)(n->len < 40 ? n->len : 40), n->s);
    if (kind == KILN_GCONST) {
      const msgpack_object *t = kiln_params_find(m, "tensor");
      if (!t) {
        /* a tensor of the tenant's, found and checked by graph_create (graph.c) */
        if (!kiln_params_find(m, "id"))
          return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: missing required field 'tensor' or 'id'", where);
        KILN_RETURN_IF_ERROR(kiln_params_u64(m, "id", true, &n->tensor));
        KILN_RETURN_IF_ERROR(desc(m, where, &n->desc));
        if (n->tensor == 0) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: 'id' 0 names no tensor", where);
        p->num_id_constants++;
        continue;
      }
      if (kiln_params_find(m, "id") || kiln_params_find(m, "dtype") || kiln_params_find(m, "shape"))
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: an inline constant has only 'name' and 'tensor'", where);
      if (t->type != MSGPACK_OBJECT_MAP)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: 'tensor' must be a tensor map", where);
      kiln_status_t st = kiln_tensor_parse(t, &n->desc, &n->data);
      if (st) {
        kiln_status_t e = KILN_STATUS(kiln_status_code(st), "%s: %s", where, kiln_status_message(st));
        kiln_status_free(st);
        return e;
      }
      if (n->desc.dtype == KILN_BFLOAT16)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: bfloat16 is not a graph dtype", where);
    } else if (kind == KILN_GVIEW) {
      const char *of;
      uint32_t oflen;
      KILN_RETURN_IF_ERROR(str(m, "of", where, true, &of, &oflen));
      int64_t b = find_name(p, of, oflen);
      if (b < 0 || (uint32_t)b == idx)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: 'of' names '%.*s', which is not declared before it",
                           where, (int)oflen, of);
      const kiln_gname_t *base = &p->names[b];
      msgpack_object dt;
      dt.type = MSGPACK_OBJECT_STR;
      dt.via.str.ptr = kiln_dtype_name(base->desc.dtype);
      dt.via.str.size = (uint32_t)strlen(dt.via.str.ptr);
      const msgpack_object *sh = kiln_params_find(m, "shape");
      if (!sh) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: missing required field 'shape'", where);
      KILN_RETURN_IF_ERROR(kiln_tensor_desc_parse(&dt, sh, &n->desc));
      if (n->desc.nbytes != base->desc.nbytes)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: a view of '%.*s' must keep its element count",
                           where, (int)base->len, base->s);
      n->base = base->base;
    } else {
      KILN_RETURN_IF_ERROR(desc(m, where, &n->desc));
    }
  }
  return KILN_OK;
}

/* docs/graph.md §1; `g` is the decoded payload map. */
kiln_status_t kiln_gplan_decode(const msgpack_object *g, kiln_gplan_t *p) {
  memset(p, 0, sizeof(*p));
  kiln_map_init(&p->index);
  static const char *const fields[] = {"graph", "name", "inputs", "outputs", "constants", "values",
                                       "views", "programs", "nodes", NULL};
  KILN_RETURN_IF_ERROR(keys(g, "graph", fields));
  const msgpack_object *v = kiln_params_find(g, "graph");
  if (!v || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 != 1)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "graph: 'graph' (the version) must be 1");
  const char *name = "";
  uint32_t nlen = 0;
  if (kiln_params_find(g, "name")) {
    KILN_RETURN_IF_ERROR(str(g, "name", "graph", false, &name, &nlen));
    if (nlen > 255) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "graph: 'name' is at most 255 bytes");
  }
  snprintf(p->name, sizeof(p->name), "%.*s", (int)nlen, name);
  /* Sizes first, so that nothing is allocated for counts beyond the limits. */
  static const char *const sections[] = {"inputs", "constants", "values", "views"};
  uint64_t total = 0;
  for (size_t i = 0; i < 4; i++) {
    const msgpack_object_array *a;
    KILN_RETURN_IF_ERROR(array(g, sections[i], "graph", &a));
    total += a->size;
  }
  if (total > KILN_GRAPH_MAX_NAMES)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "a graph declares at most %u names; this one %llu",
                       KILN_GRAPH_MAX_NAMES, (unsigned long long)total);
  const msgpack_object_array *progs, *nodes, *outs;
  KILN_RETURN_IF_ERROR(array(g, "programs", "graph", &progs));
  KILN_RETURN_IF_ERROR(array(g, "nodes", "graph", &nodes));
  KILN_RETURN_IF_ERROR(array(g, "outputs", "graph", &outs));
  if (progs->size > KILN_GRAPH_MAX_PROGRAMS)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "a graph has at most %u programs; this one %u",
                       KILN_GRAPH_MAX_PROGRAMS, progs->size);
  if (nodes->size > KILN_GRAPH_MAX_NODES)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "a graph has at most %u nodes; this one %u",
                       KILN_GRAPH_MAX_NODES, nodes->size);
  if (outs->size < 1 || outs->size > KILN_GRAPH_MAX_NAMES)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "graph: 'outputs' must name 1 to %u outputs",
                       KILN_GRAPH_MAX_NAMES);
  p->names = calloc(total ? total : 1, sizeof(*p->names));
  p->programs = calloc(progs->size ? progs->size : 1, sizeof(*p->programs));
  p->nodes = calloc(nodes->size ? nodes->size : 1, sizeof(*p->nodes));
  p->outputs = calloc(outs->size, sizeof(*p->outputs));
  if (!p->names || !p->programs || !p->nodes || !p->outputs)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  KILN_RETURN_IF_ERROR(decl_section(p, g, "inputs", KILN_GINPUT));
  p->num_inputs = p->num_names;
  KILN_RETURN_IF_ERROR(decl_section(p, g, "constants", KILN_GCONST));
  KILN_RETURN_IF_ERROR(decl_section(p, g, "values", KILN_GVALUE));
  KILN_RETURN_IF_ERROR(decl_section(p, g, "views", KILN_GVIEW));

  static const char *const f_prog[] = {"format", "ir", "module", NULL};
  for (uint32_t i = 0; i < progs->size; i++) {
    char where[48];
    snprintf(where, sizeof(where), "programs[%u]", i);
    const msgpack_object *m = &progs->ptr[i];
    KILN_RETURN_IF_ERROR(keys(m, where, f_prog));
    kiln_gprogram_t *pr = &p->programs[i];
    pr->item = m;
    const msgpack_object *mod = kiln_params_find(m, "module");
    if (mod) {
      if (kiln_params_find(m, "format") || kiln_params_find(m, "ir"))
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: a module program has only 'module'", where);
      if (mod->type != MSGPACK_OBJECT_STR || mod->via.str.size != 2 * KILN_HASH_BYTES)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: 'module' must be a module id (64 hex digits)", where);
      pr->kind = KILN_GPROG_MODULE;
      continue;
    }
    const char *fmt;
    uint32_t flen;
    KILN_RETURN_IF_ERROR(str(m, "format", where, false, &fmt, &flen));
    if (flen == 2 && memcmp(fmt, "te", 2) == 0) pr->kind = KILN_GPROG_TE;
    else if (flen == 4 && memcmp(fmt, "llvm", 4) == 0) pr->kind = KILN_GPROG_LLVM;
    else return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: 'format' must be \"te\" or \"llvm\"", where);
    const msgpack_object *ir = kiln_params_find(m, "ir");
    if (!ir || (ir->type != MSGPACK_OBJECT_BIN && ir->type != MSGPACK_OBJECT_STR))
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: 'ir' must be bin or str", where);
  }
  p->num_programs = progs->size;

  /* Nodes: count launches and arguments first. */
  static const char *const f_node[] = {"name", "program", "launches", "label", NULL};
  static const char *const f_launch[] = {"kernel", "args", "grid", "block", "shared", NULL};
  uint64_t nl = 0, na = 0;
  for (uint32_t i = 0; i < nodes->size; i++) {
    char where[48];
    snprintf(where, sizeof(where), "nodes[%u]", i);
    KILN_RETURN_IF_ERROR(keys(&nodes->ptr[i], where, f_node));
    const msgpack_object_array *ls;
    KILN_RETURN_IF_ERROR(array(&nodes->ptr[i], "launches", where, &ls));
    nl += ls->size;
    if (nl > KILN_GRAPH_MAX_LAUNCHES)
      return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "a graph has at most %u launches",
                         KILN_GRAPH_MAX_LAUNCHES);
    for (uint32_t j = 0; j < ls->size; j++) {
      snprintf(where, sizeof(where), "nodes[%u].launches[%u]", i, j);
      KILN_RETURN_IF_ERROR(keys(&ls->ptr[j], where, f_launch));
      const msgpack_object_array *as;
      KILN_RETURN_IF_ERROR(array(&ls->ptr[j], "args", where, &as));
      na += as->size;
      if (na > 16ull * KILN_GRAPH_MAX_LAUNCHES)
        return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "a graph has at most %u launch arguments",
                           16u * KILN_GRAPH_MAX_LAUNCHES);
    }
  }
  p->args = calloc(na ? na : 1, sizeof(*p->args));
  if (!p->args) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  uint64_t arg_at = 0;
  for (uint32_t i = 0; i < nodes->size; i++) {
    const msgpack_object *m = &nodes->ptr[i];
    kiln_gnode_t *nd = &p->nodes[i];
    char where[300];
    snprintf(where, sizeof(where), "nodes[%u]", i);
    KILN_RETURN_IF_ERROR(str(m, "name", where, true, &nd->name, &nd->name_len));
    if (kiln_params_find(m, "label")) {
      uint32_t ll;
      KILN_RETURN_IF_ERROR(str(m, "label", where, false, &nd->label, &ll));
      nd->label_len = ll;
    }
    snprintf(where, sizeof(where), "node %.*s", (int)nd->name_len, nd->name);
    uint64_t prog = 0;
    KILN_RETURN_IF_ERROR(kiln_params_u64(m, "program", true, &prog));
    if (prog >= p->num_programs)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: program %llu is not one of the %u programs", where,
                         (unsigned long long)prog, p->num_programs);
    nd->program = (uint32_t)prog;
    const msgpack_object_array *ls;
    KILN_RETURN_IF_ERROR(array(m, "launches", where, &ls));
    nd->launches = calloc(ls->size ? ls->size : 1, sizeof(*nd->launches));
    if (!nd->launches) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    nd->num_launches = ls->size;
    p->num_nodes = i + 1;
    bool te = p->programs[prog].kind == KILN_GPROG_TE;
    for (uint32_t j = 0; j < ls->size; j++) {
      const msgpack_object *lm = &ls->ptr[j];
      kiln_glaunch_t *l = &nd->launches[j];
      const char *kn;
      uint32_t kl;
      KILN_RETURN_IF_ERROR(str(lm, "kernel", where, false, &kn, &kl));
      if (kl < 1 || kl > 127)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: kernel names are 1 to 127 bytes", where);
      memcpy(l->kernel, kn, kl);
      l->kernel[kl] = 0;
      bool has_geom = kiln_params_find(lm, "grid") || kiln_params_find(lm, "block");
      if (te && has_geom)
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: grid and block come from the launch recipe of a te program; "
                           "leave them out", where);
      if (!te) {
        if (!kiln_params_find(lm, "grid") || !kiln_params_find(lm, "block"))
          return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: grid and block are required for llvm and module programs",
                             where);
        for (int d = 0; d < 2; d++) {
          const char *f = d ? "block" : "grid";
          const msgpack_object_array *ga;
          KILN_RETURN_IF_ERROR(array(lm, f, where, &ga));
          uint32_t *out = d ? l->block : l->grid;
          out[0] = out[1] = out[2] = 1;
          if (ga->size < 1 || ga->size > 3)
            return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: %s has 1 to 3 entries", where, f);
          for (uint32_t k = 0; k < ga->size; k++) {
            if (ga->ptr[k].type != MSGPACK_OBJECT_POSITIVE_INTEGER || ga->ptr[k].via.u64 > UINT32_MAX)
              return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: %s[%u] must be an integer 0..2^32-1", where, f, k);
            out[k] = (uint32_t)ga->ptr[k].via.u64;
          }
        }
      }
      uint64_t shared = 0;
      KILN_RETURN_IF_ERROR(kiln_params_u64(lm, "shared", false, &shared));
      if (shared > UINT32_MAX) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: shared is too large", where);
      l->shared = (uint32_t)shared;
      const msgpack_object_array *as;
      KILN_RETURN_IF_ERROR(array(lm, "args", where, &as));
      l->args = p->args + arg_at;
      l->num_args = as->size;
      arg_at += as->size;
      for (uint32_t k = 0; k < as->size; k++) {
        const msgpack_object *a = &as->ptr[k];
        kiln_garg_t *ga = &l->args[k];
        switch (a->type) {
          case MSGPACK_OBJECT_POSITIVE_INTEGER: ga->kind = KILN_GARG_UINT; ga->u = a->via.u64; break;
          case MSGPACK_OBJECT_NEGATIVE_INTEGER: ga->kind = KILN_GARG_INT; ga->i = a->via.i64; break;
          case MSGPACK_OBJECT_FLOAT32:
          case MSGPACK_OBJECT_FLOAT64: ga->kind = KILN_GARG_FLOAT; ga->f = a->via.f64; break;
          case MSGPACK_OBJECT_MAP: {
            static const char *const f_arg[] = {"value", NULL};
            char w2[340];
            snprintf(w2, sizeof(w2), "%s argument %u", where, k);
            KILN_RETURN_IF_ERROR(keys(a, w2, f_arg));
            const char *vn;
            uint32_t vl;
            KILN_RETURN_IF_ERROR(str(a, "value", w2, true, &vn, &vl));
            int64_t ni = find_name(p, vn, vl);
            if (ni < 0)
              return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: argument %u names '%.*s', which is not declared",
                                 where, k, (int)vl, vn);
            ga->kind = KILN_GARG_NAME;
            ga->name = (uint32_t)ni;
            break;
          }
          default:
            return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: argument %u must be a number or {\"value\": name}",
                               where, k);
        }
      }
    }
  }

  /* Reads and writes, in node order (§1). */
  for (uint32_t i = 0; i < p->num_nodes; i++) {
    kiln_gnode_t *nd = &p->nodes[i];
    for (uint32_t j = 0; j < nd->num_launches; j++) {
      kiln_glaunch_t *l = &nd->launches[j];
      for (uint32_t k = 0; k < l->num_args; k++) {
        if (l->args[k].kind != KILN_GARG_NAME) continue;
        kiln_gname_t *b = &p->names[p->names[l->args[k].name].base];
        /* the first node that passes a value writes it; later ones read it (§1) */
        if (b->kind == KILN_GVALUE && b->writer < 0) b->writer = (int32_t)i;
        b->last_use = (int32_t)i;
      }
      /* kernel pointers are noalias: bytes this node writes are passed once per launch */
      for (uint32_t k = 0; k < l->num_args; k++) {
        if (l->args[k].kind != KILN_GARG_NAME) continue;
        uint32_t bk = p->names[l->args[k].name].base;
        if (p->names[bk].kind != KILN_GVALUE || p->names[bk].writer != (int32_t)i) continue;
        for (uint32_t q = k + 1; q < l->num_args; q++)
          if (l->args[q].kind == KILN_GARG_NAME && p->names[l->args[q].name].base == bk)
            return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                               "node %.*s: launch %u passes '%.*s', which it writes, twice (kernel pointers do "
                               "not alias)",
                               (int)nd->name_len, nd->name, j, (int)p->names[bk].len, p->names[bk].s);
      }
    }
  }
  for (uint32_t i = 0; i < outs->size; i++) {
    const msgpack_object *o = &outs->ptr[i];
    if (o->type != MSGPACK_OBJECT_STR)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "graph: outputs[%u] must be a name", i);
    int64_t ni = find_name(p, o->via.str.ptr, o->via.str.size);
    if (ni < 0)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "graph: output '%.*s' is not declared",
                         (int)(o->via.str.size < 255 ? o->via.str.size : 255), o->via.str.ptr);
    const kiln_gname_t *b = &p->names[p->names[ni].base];
    if (b->kind == KILN_GVALUE && b->writer < 0)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "graph: output '%.*s' is a value no node writes",
                         (int)o->via.str.size, o->via.str.ptr);
    p->outputs[i] = (uint32_t)ni;
  }
  p->num_outputs = outs->size;
  return KILN_OK;
}

/* One free block of the arena. */
typedef struct block {
  uint64_t at, size;
} block_t;

typedef struct freelist {
  block_t *b;
  uint32_t n, cap;
  uint64_t end; /* arena size so far */
} freelist_t;

static kiln_status_t fl_take(freelist_t *f, uint64_t size, uint64_t *out) {
  size = align_up(size ? size : 1);
  int64_t best = -1;
  for (uint32_t i = 0; i < f->n; i++)
    if (f->b[i].size >= size && (best < 0 || f->b[i].size < f->b[best].size)) best = i;
  if (best >= 0) {
    *out = f->b[best].at;
    f->b[best].at += size;
    f->b[best].size -= size;
    if (f->b[best].size == 0) f->b[best] = f->b[--f->n];
    return KILN_OK;
  }
  /* A free block that ends the arena grows instead of a new one. */
  for (uint32_t i = 0; i < f->n; i++)
    if (f->b[i].at + f->b[i].size == f->end) {
      *out = f->b[i].at;
      f->end = f->b[i].at + size;
      f->b[i] = f->b[--f->n];
      return KILN_OK;
    }
  *out = f->end;
  f->end += size;
  return KILN_OK;
}

static kiln_status_t fl_give(freelist_t *f, uint64_t at, uint64_t size) {
  size = align_up(size ? size : 1);
  /* merge with neighbours */
  for (uint32_t i = 0; i < f->n;) {
    if (f->b[i].at + f->b[i].size == at) {
      at = f->b[i].at;
      size += f->b[i].size;
      f->b[i] = f->b[--f->n];
    } else if (at + size == f->b[i].at) {
      size += f->b[i].size;
      f->b[i] = f->b[--f->n];
    } else {
      i++;
    }
  }
  if (f->n == f->cap) {
    uint32_t cap = f->cap ? 2 * f->cap : 64;
    block_t *nb = realloc(f->b, cap * sizeof(*nb));
    if (!nb) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    f->b = nb;
    f->cap = cap;
  }
  f->b[f->n++] = (block_t){at, size};
  return KILN_OK;
}

kiln_status_t kiln_gplan_memory(kiln_gplan_t *p) {
  uint64_t at = 0;
  for (uint32_t i = 0; i < p->num_names; i++) {
    kiln_gname_t *n = &p->names[i];
    if (n->kind == KILN_GINPUT) {
      n->offset = at;
      at = align_up(at + n->desc.nbytes);
    }
  }
  p->input_bytes = at;
  at = 0;
  for (uint32_t i = 0; i < p->num_names; i++) {
    kiln_gname_t *n = &p->names[i];
    if (n->kind == KILN_GCONST) {
      n->offset = at;
      at = align_up(at + n->desc.nbytes);
    }
  }
  p->constant_bytes = at;
  for (uint32_t i = 0; i < p->num_outputs; i++) p->names[p->names[p->outputs[i]].base].output = true;
  /* Values: taken when their writer runs, given back after their last reader (§4). */
  uint32_t *order = calloc(p->num_names ? p->num_names : 1, sizeof(*order));
  uint32_t *count = calloc(p->num_nodes + 1, sizeof(*count)); /* values ending at node i */
  if (!order || !count) {
    free(order);
    free(count);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  freelist_t fl = {0};
  kiln_status_t st = KILN_OK;
  /* bucket the values by the node that writes them */
  uint32_t *wstart = calloc(p->num_nodes + 2, sizeof(*wstart));
  uint32_t *estart = calloc(p->num_nodes + 2, sizeof(*estart));
  uint32_t *byw = calloc(p->num_names ? p->num_names : 1, sizeof(*byw));
  if (!wstart || !estart || !byw) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; !st && i < p->num_names; i++) {
    const kiln_gname_t *n = &p->names[i];
    if (n->kind != KILN_GVALUE || n->writer < 0) continue;
    wstart[n->writer + 1]++;
    if (!n->output) estart[n->last_use + 1]++;
  }
  for (uint32_t i = 0; !st && i < p->num_nodes; i++) {
    wstart[i + 1] += wstart[i];
    estart[i + 1] += estart[i];
  }
  if (!st) {
    uint32_t *wfill = calloc(p->num_nodes + 1, sizeof(*wfill)), *efill = calloc(p->num_nodes + 1, sizeof(*efill));
    if (!wfill || !efill) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    for (uint32_t i = 0; !st && i < p->num_names; i++) {
      const kiln_gname_t *n = &p->names[i];
      if (n->kind != KILN_GVALUE || n->writer < 0) continue;
      byw[wstart[n->writer] + wfill[n->writer]++] = i;
      if (!n->output) order[estart[n->last_use] + efill[n->last_use]++] = i;
    }
    free(wfill);
    free(efill);
  }
  for (uint32_t i = 0; !st && i < p->num_nodes; i++) {
    for (uint32_t k = wstart[i]; !st && k < wstart[i + 1]; k++)
      st = fl_take(&fl, p->names[byw[k]].desc.nbytes, &p->names[byw[k]].offset);
    for (uint32_t k = estart[i]; !st && k < estart[i + 1]; k++)
      st = fl_give(&fl, p->names[order[k]].offset, p->names[order[k]].desc.nbytes);
  }
  p->arena_bytes = fl.end;
  free(fl.b);
  free(order);
  free(count);
  free(wstart);
  free(estart);
  free(byw);
  /* views sit where their base does */
  for (uint32_t i = 0; i < p->num_names; i++) {
    kiln_gname_t *n = &p->names[i];
    if (n->kind == KILN_GVIEW) n->offset = p->names[n->base].offset;
  }
  return st;
}

kiln_gregion_t kiln_gname_region(const kiln_gplan_t *p, uint32_t name) {
  switch (p->names[p->names[name].base].kind) {
    case KILN_GINPUT: return KILN_GREGION_INPUTS;
    case KILN_GCONST: return KILN_GREGION_CONSTANTS;
    default: return KILN_GREGION_ARENA;
  }
}
