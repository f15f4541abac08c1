/* One line per event, key=value, to stderr:
 *   ts=2026-12-02T11:40:00.123Z level=info event=listen addr=tcp:127.0.0.1:7070
 * Callers pass the event name and a printf-style tail of key=value pairs. Values that may
 * hold spaces are quoted with kiln_log_quote(). Thread-safe (one write(2) per line). */
#ifndef KILN_BASE_LOG_H
#define KILN_BASE_LOG_H

#include <stddef.h>

typedef enum kiln_log_level {
  KILN_LOG_DEBUG = 0,
  KILN_LOG_INFO = 1,
  KILN_LOG_WARN = 2,
  KILN_LOG_ERROR = 3,
} kiln_log_level_t;

void kiln_log_set_level(kiln_log_level_t level);
kiln_log_level_t kiln_log_get_level(void);
/* Parses "debug", "info", "warn", "error"; returns -1 if unknown. */
int kiln_log_level_parse(const char *name);
/* Adds "proc=NAME" to every line (workers set it to tell their lines apart). */
void kiln_log_set_process(const char *name);

void kiln_log(kiln_log_level_t level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes `s` as a double-quoted value with \" \\ \n escaped, truncated to fit `cap`. */
const char *kiln_log_quote(char *buf, size_t cap, const char *s);

#define KILN_LOG_DEBUG(ev, ...) kiln_log(KILN_LOG_DEBUG, ev, __VA_ARGS__)
#define KILN_LOG_INFO(ev, ...) kiln_log(KILN_LOG_INFO, ev, __VA_ARGS__)
#define KILN_LOG_WARN(ev, ...) kiln_log(KILN_LOG_WARN, ev, __VA_ARGS__)
#define KILN_LOG_ERROR(ev, ...) kiln_log(KILN_LOG_ERROR, ev, __VA_ARGS__)

#endif
