/* JSON text (strings quoted with " or ') -> MessagePack, for te programs in tests. */
#include "tests/compiler/te_json.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *skip_ws(const char *s) {
  while (*s && isspace((unsigned char)*s)) s++;
  return s;
}

static const char *json_value(msgpack_packer *pk, const char *s);

/* Strings may be quoted with ' too, which keeps programs in C strings readable. */
static const char *json_string(msgpack_packer *pk, const char *s) {
  const char *e = strchr(s + 1, *s);
  cr_assert(e, "unterminated string in test JSON");
  msgpack_pack_str_with_body(pk, s + 1, (size_t)(e - s - 1));
  return e + 1;
}

static int count_items(const char *s, char close) {
  int depth = 0, n = 0;
  bool any = false, str = false;
  for (; *s; s++) {
    if (str) {
      if (*s == '"' || *s == '\'') str = false;
      continue;
    }
    if (*s == '"' || *s == '\'') str = true;
    if (*s == '[' || *s == '{') depth++;
    else if ((*s == ']' || *s == '}') && depth == 0) break;
    else if (*s == ']' || *s == '}') depth--;
    else if (*s == ',' && depth == 0) n++;
    if (!isspace((unsigned char)*s)) any = true;
  }
  (void)close;
  return any ? n + 1 : 0;
}

static const char *json_value(msgpack_packer *pk, const char *s) {
  s = skip_ws(s);
  if (*s == '"' || *s == '\'') return json_string(pk, s);
  if (*s == '[' || *s == '{') {
    bool obj = *s == '{';
    char close = obj ? '}' : ']';
    int n = count_items(s + 1, close);
    if (obj) msgpack_pack_map(pk, (uint32_t)n);
    else msgpack_pack_array(pk, (uint32_t)n);
    s = skip_ws(s + 1);
    for (int i = 0; i < n; i++) {
      if (obj) {
        s = json_string(pk, skip_ws(s));
        s = skip_ws(s);
        cr_assert(*s == ':', "expected ':' in test JSON at %.20s", s);
        s++;
      }
      s = skip_ws(json_value(pk, s));
      if (*s == ',') s++;
    }
    s = skip_ws(s);
    cr_assert(*s == close, "expected '%c' in test JSON at %.20s", close, s);
    return s + 1;
  }
  if (strncmp(s, "true", 4) == 0) return msgpack_pack_true(pk), s + 4;
  if (strncmp(s, "false", 5) == 0) return msgpack_pack_false(pk), s + 5;
  if (strncmp(s, "null", 4) == 0) return msgpack_pack_nil(pk), s + 4;
  char *end;
  size_t len = strspn(s, "+-0123456789.eE");
  if (memchr(s, '.', len) || memchr(s, 'e', len)) {
    double d = strtod(s, &end);
    msgpack_pack_double(pk, d);
  } else {
    long long v = strtoll(s, &end, 10);
    msgpack_pack_int64(pk, v);
  }
  cr_assert(end != s, "bad test JSON at %.20s", s);
  return end;
}

msgpack_sbuffer te_json_to_msgpack(const char *json) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  const char *end = skip_ws(json_value(&pk, json));
  cr_assert(*end == 0, "trailing test JSON: %.30s", end);
  return sb;
}

