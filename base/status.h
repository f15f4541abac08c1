/* kiln status values: errors are values.
 *
 * A fallible function returns kiln_status_t: NULL (KILN_OK) on success, otherwise a heap
 * object holding a code from the protocol's error table and a message that says what
 * happened and where (file:line). The receiver owns it: pass it up, turn it into a reply,
 * or kiln_status_free() it. Any thread may create and free statuses. */
#ifndef KILN_BASE_STATUS_H
#define KILN_BASE_STATUS_H

#include <stdarg.h>
#include <stdbool.h>

/* The stable error table of the protocol (docs/protocol.md). Never renumber. */
typedef enum kiln_code {
  KILN_E_OK = 0,
  KILN_E_INVALID_ARGUMENT = 1,
  KILN_E_NO_METHOD = 2,
  KILN_E_UNAUTHENTICATED = 3,
  KILN_E_PERMISSION = 4,
  KILN_E_NOT_FOUND = 5,
  KILN_E_RESOURCE_EXHAUSTED = 6,
  KILN_E_COMPILE = 7,
  KILN_E_COMPILER_CRASHED = 8,
  KILN_E_DEVICE = 9,
  KILN_E_DEVICE_FAULT = 10,
  KILN_E_TIMEOUT = 11,
  KILN_E_CANCELLED = 12,
  KILN_E_UNAVAILABLE = 13,
  KILN_E_INTERNAL = 14,
  KILN_E_COUNT_
} kiln_code_t;

typedef struct kiln_status_s *kiln_status_t;
#define KILN_OK ((kiln_status_t)0)

/* On a function returning a status (or anything that must not be dropped): ignoring the
 * result is a warning, an error under CI's -Werror. */
#define KILN_MUST_USE __attribute__((warn_unused_result))

/* Never returns NULL: on allocation failure a static "out of memory" status is returned
 * (kiln_status_free ignores it). */
KILN_MUST_USE kiln_status_t kiln_status_make(kiln_code_t code, const char *file, int line,
                                            const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
KILN_MUST_USE kiln_status_t kiln_status_makev(kiln_code_t code, const char *file, int line, const char *fmt,
                                va_list ap);

#define KILN_STATUS(code, ...) kiln_status_make((code), __FILE__, __LINE__, __VA_ARGS__)

#define KILN_RETURN_IF_ERROR(expr)                                                            \
  do {                                                                                        \
    kiln_status_t kiln_s_ = (expr);                                                           \
    if (kiln_s_) return kiln_s_;                                                              \
  } while (0)

kiln_code_t kiln_status_code(kiln_status_t s);
/* The human sentence, without the location. Borrowed; lives as long as s. */
const char *kiln_status_message(kiln_status_t s);
/* "file.c:123" where the status was made. Borrowed. */
const char *kiln_status_where(kiln_status_t s);
void kiln_status_free(kiln_status_t s);

/* Prepends "context: " to the message (keeps code and location). Returns the annotated
 * status, which replaces s: s itself is freed (unless it was KILN_OK or the static
 * out-of-memory status, which are returned as they are). */
KILN_MUST_USE kiln_status_t kiln_status_annotate(kiln_status_t s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "E_INVALID_ARGUMENT" etc.; "E_UNKNOWN" for codes outside the table. */
const char *kiln_code_name(kiln_code_t code);
/* Inverse of kiln_code_name; returns false if the name is not in the table. */
bool kiln_code_from_name(const char *name, kiln_code_t *out_code);

#endif
