#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static kiln_log_level_t current_level = KILN_LOG_INFO;
static char process_name[32];
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void kiln_log_set_level(kiln_log_level_t level) { current_level = level; }
kiln_log_level_t kiln_log_get_level(void) { return current_level; }

int kiln_log_level_parse(const char *name) {
  for (int i = 0; i < 4; i++)
    if (strcmp(name, level_names[i]) == 0) return i;
  return -1;
}

void kiln_log_set_process(const char *name) {
  snprintf(process_name, sizeof(process_name), "%s", name ? name : "");
}

void kiln_log(kiln_log_level_t level, const char *event, const char *fmt, ...) {
  if (level < current_level) return;
  char line[2048];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof(line), "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                   tm.tm_sec, ts.tv_nsec / 1000000, level_names[level]);
  if (process_name[0] && n < (int)sizeof(line))
    n += snprintf(line + n, sizeof(line) - (size_t)n, " proc=%s", process_name);
  if (n < (int)sizeof(line)) n += snprintf(line + n, sizeof(line) - (size_t)n, " event=%s", event);
  if (fmt && fmt[0] && n < (int)sizeof(line) - 1) {
    line[n++] = ' ';
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
  }
  if (n >= (int)sizeof(line) - 1) n = (int)sizeof(line) - 2;
  line[n++] = '\n';
  /* One write so lines from several processes sharing stderr do not interleave. */
  ssize_t w = write(STDERR_FILENO, line, (size_t)n);
  (void)w;
}

const char *kiln_log_quote(char *buf, size_t cap, const char *s) {
  size_t o = 0;
  if (cap < 3) return "\"\"";
  buf[o++] = '"';
  for (; s && *s && o + 3 < cap; s++) {
    char c = *s;
    if (c == '"' || c == '\\') {
      buf[o++] = '\\';
      buf[o++] = c;
    } else if (c == '\n') {
      buf[o++] = '\\';
      buf[o++] = 'n';
    } else if ((unsigned char)c < 0x20) {
      buf[o++] = ' ';
    } else {
      buf[o++] = c;
    }
  }
  buf[o++] = '"';
  buf[o] = 0;
  return buf;
}
