#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kiln_status_s {
  kiln_code_t code;
  char where[64];
  char message[]; /* NUL-terminated */
};

/* Returned when even the status cannot be allocated. Storage sized for its text. */
static union {
  struct kiln_status_s s;
  char bytes[sizeof(struct kiln_status_s) + 64];
} oom_storage;
#define oom_status oom_storage

static kiln_status_t oom(void) {
  if (!oom_storage.s.message[0]) {
    oom_storage.s.code = KILN_E_RESOURCE_EXHAUSTED;
    strcpy(oom_storage.s.where, "status.c");
    strcpy(oom_storage.s.message, "out of memory while reporting an error");
  }
  return &oom_storage.s;
}

static const char *const code_names[KILN_E_COUNT_] = {
    [KILN_E_OK] = "E_OK",
    [KILN_E_INVALID_ARGUMENT] = "E_INVALID_ARGUMENT",
    [KILN_E_NO_METHOD] = "E_NO_METHOD",
    [KILN_E_UNAUTHENTICATED] = "E_UNAUTHENTICATED",
    [KILN_E_PERMISSION] = "E_PERMISSION",
    [KILN_E_NOT_FOUND] = "E_NOT_FOUND",
    [KILN_E_RESOURCE_EXHAUSTED] = "E_RESOURCE_EXHAUSTED",
    [KILN_E_COMPILE] = "E_COMPILE",
    [KILN_E_COMPILER_CRASHED] = "E_COMPILER_CRASHED",
    [KILN_E_DEVICE] = "E_DEVICE",
    [KILN_E_DEVICE_FAULT] = "E_DEVICE_FAULT",
    [KILN_E_TIMEOUT] = "E_TIMEOUT",
    [KILN_E_CANCELLED] = "E_CANCELLED",
    [KILN_E_UNAVAILABLE] = "E_UNAVAILABLE",
    [KILN_E_INTERNAL] = "E_INTERNAL",
};

static kiln_status_t alloc_status(kiln_code_t code, const char *where, const char *text) {
  size_t n = strlen(text);
  struct kiln_status_s *s = malloc(sizeof(*s) + n + 1);
  if (!s) return oom();
  s->code = code;
  snprintf(s->where, sizeof(s->where), "%s", where);
  memcpy(s->message, text, n + 1);
  return s;
}

kiln_status_t kiln_status_makev(kiln_code_t code, const char *file, int line, const char *fmt,
                                va_list ap) {
  char stack[512];
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(stack, sizeof(stack), fmt, ap);
  char *text = stack;
  if (n >= (int)sizeof(stack)) {
    text = malloc((size_t)n + 1);
    if (text) vsnprintf(text, (size_t)n + 1, fmt, ap2);
    else text = stack;
  }
  va_end(ap2);
  const char *base = strrchr(file, '/');
  char where[64];
  snprintf(where, sizeof(where), "%s:%d", base ? base + 1 : file, line);
  kiln_status_t s = alloc_status(code == KILN_E_OK ? KILN_E_INTERNAL : code, where, text);
  if (text != stack) free(text);
  return s;
}

kiln_status_t kiln_status_make(kiln_code_t code, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kiln_status_t s = kiln_status_makev(code, file, line, fmt, ap);
  va_end(ap);
  return s;
}

kiln_code_t kiln_status_code(kiln_status_t s) { return s ? s->code : KILN_E_OK; }
const char *kiln_status_message(kiln_status_t s) { return s ? s->message : "ok"; }
const char *kiln_status_where(kiln_status_t s) { return s ? s->where : ""; }

void kiln_status_free(kiln_status_t s) {
  if (s && s != &oom_status.s) free(s);
}

kiln_status_t kiln_status_annotate(kiln_status_t s, const char *fmt, ...) {
  if (!s || s == &oom_status.s) return s;
  char prefix[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof(prefix), fmt, ap);
  va_end(ap);
  size_t pn = strlen(prefix), mn = strlen(s->message);
  struct kiln_status_s *t = malloc(sizeof(*t) + pn + 2 + mn + 1);
  if (!t) return s;
  t->code = s->code;
  memcpy(t->where, s->where, sizeof(t->where));
  memcpy(t->message, prefix, pn);
  memcpy(t->message + pn, ": ", 2);
  memcpy(t->message + pn + 2, s->message, mn + 1);
  free(s);
  return t;
}

const char *kiln_code_name(kiln_code_t code) {
  if ((unsigned)code < KILN_E_COUNT_) return code_names[code];
  return "E_UNKNOWN";
}

bool kiln_code_from_name(const char *name, kiln_code_t *out_code) {
  for (int i = 0; i < KILN_E_COUNT_; i++) {
    if (strcmp(code_names[i], name) == 0) {
      *out_code = (kiln_code_t)i;
      return true;
    }
  }
  return false;
}
