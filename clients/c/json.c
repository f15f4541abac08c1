/* msgpack objects as JSON, for the CLI and for people reading results. */
#include <math.h>
#include <stdio.h>

#include "internal.h"

static void put_string(FILE *f, const char *p, size_t n) {
  fputc('"', f);
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)p[i];
    switch (ch) {
      case '"': fputs("\\\"", f); break;
      case '\\': fputs("\\\\", f); break;
      case '\n': fputs("\\n", f); break;
      case '\r': fputs("\\r", f); break;
      case '\t': fputs("\\t", f); break;
      default:
        if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f); /* UTF-8 passes through as is */
    }
  }
  fputc('"', f);
}

static void indent(FILE *f, bool pretty, int depth) {
  if (!pretty) return;
  fputc('\n', f);
  for (int i = 0; i < depth; i++) fputs("  ", f);
}

static void print(FILE *f, const msgpack_object *o, bool pretty, int depth) {
  switch (o->type) {
    case MSGPACK_OBJECT_NIL: fputs("null", f); break;
    case MSGPACK_OBJECT_BOOLEAN: fputs(o->via.boolean ? "true" : "false", f); break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: fprintf(f, "%llu", (unsigned long long)o->via.u64); break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: fprintf(f, "%lld", (long long)o->via.i64); break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
      if (isfinite(o->via.f64)) fprintf(f, "%.15g", o->via.f64);
      else fputs("null", f);
      break;
    case MSGPACK_OBJECT_STR: put_string(f, o->via.str.ptr, o->via.str.size); break;
    case MSGPACK_OBJECT_BIN: fprintf(f, "{\"bin\": %u}", o->via.bin.size); break;
    case MSGPACK_OBJECT_EXT: fprintf(f, "{\"ext\": %d, \"size\": %u}", o->via.ext.type, o->via.ext.size); break;
    case MSGPACK_OBJECT_ARRAY:
      fputc('[', f);
      for (uint32_t i = 0; i < o->via.array.size; i++) {
        if (i) fputc(',', f);
        indent(f, pretty, depth + 1);
        print(f, &o->via.array.ptr[i], pretty, depth + 1);
      }
      if (o->via.array.size) indent(f, pretty, depth);
      fputc(']', f);
      break;
    case MSGPACK_OBJECT_MAP:
      fputc('{', f);
      for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        if (i) fputc(',', f);
        indent(f, pretty, depth + 1);
        /* JSON keys are strings: other key types are written as their JSON text, quoted. */
        if (kv->key.type == MSGPACK_OBJECT_STR) put_string(f, kv->key.via.str.ptr, kv->key.via.str.size);
        else {
          fputc('"', f);
          print(f, &kv->key, false, 0);
          fputc('"', f);
        }
        fputs(": ", f);
        print(f, &kv->val, pretty, depth + 1);
      }
      if (o->via.map.size) indent(f, pretty, depth);
      fputc('}', f);
      break;
  }
}

void kiln_object_print_json(FILE *f, const msgpack_object *o, bool pretty) {
  print(f, o, pretty, 0);
}
