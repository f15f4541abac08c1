/* The runtime's one state (rt) and the small helpers every other file shares: logging and the
 * strictness rule, clocks and timestamp ticks, a hash, reading client memory that may be gone.
 * A leaf: it calls no other file of the runtime. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "rt.h"

rt_state_t rt = {.lock = PTHREAD_MUTEX_INITIALIZER};

bool rt_open(void) {
  pthread_mutex_lock(&rt.lock);
  bool open = rt.refcount > 0;
  pthread_mutex_unlock(&rt.lock);
  return open;
}

static void emit(const char *prefix, const char *suffix, const char *fmt, va_list ap) {
  char line[1024];
  vsnprintf(line, sizeof line, fmt, ap);
  /* one call, so lines from several threads do not interleave */
  fprintf(stderr, "softgpu: %s%s%s\n", prefix, line, suffix);
}

void rt_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit("", "", fmt, ap);
  va_end(ap);
}

bool rt_strict(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit("strict: ", rt.cfg.strict ? "" : " (SOFTGPU_STRICT=0: warning only)", fmt, ap);
  va_end(ap);
  return rt.cfg.strict;
}

uint64_t rt_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t rt_ticks(void) {
  uint64_t ns = rt_now_ns();
  uint64_t hz = rt.cfg.timestamp_hz ? rt.cfg.timestamp_hz : 1000000000ull;
  return (uint64_t)((unsigned __int128)ns * hz / 1000000000ull);
}

uint64_t rt_ticks_to_ns(uint64_t ticks) {
  uint64_t hz = rt.cfg.timestamp_hz ? rt.cfg.timestamp_hz : 1000000000ull;
  unsigned __int128 ns = (unsigned __int128)ticks * 1000000000ull / hz;
  return ns > UINT64_MAX ? UINT64_MAX : (uint64_t)ns;
}

uint64_t rt_hash(const void *p, size_t n) {
  const uint8_t *b = p;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* Whether every page of [p, p+n) is mapped (mincore fails with ENOMEM on an unmapped page). */
static bool mapped(const void *p, size_t n) {
  uintptr_t a = (uintptr_t)p / RT_PAGE * RT_PAGE, end = (uintptr_t)p + n;
  unsigned char vec[64];
  while (a < end) {
    size_t pages = (end - a + RT_PAGE - 1) / RT_PAGE;
    if (pages > sizeof vec) pages = sizeof vec;
    if (mincore((void *)a, pages * RT_PAGE, vec) != 0) return false;
    a += pages * RT_PAGE;
  }
  return true;
}

bool rt_read_safely(const void *p, size_t n, void *dst) {
  /* process_vm_readv on ourselves reports EFAULT for unmapped pages instead of crashing, so a
   * buffer the client has already freed (and the allocator unmapped) is detected, not read.
   * Where a seccomp filter refuses it, mincore says whether the pages are mapped. */
  size_t done = 0;
  while (done < n) {
    size_t chunk = n - done > (1u << 20) ? (1u << 20) : n - done;
    struct iovec local = {(uint8_t *)dst + done, chunk};
    struct iovec remote = {(void *)((uintptr_t)p + done), chunk};
    ssize_t r = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (r <= 0 && (errno == EPERM || errno == ENOSYS || errno == EACCES)) {
      if (!mapped((const uint8_t *)p + done, n - done)) return false;
      memcpy((uint8_t *)dst + done, (const uint8_t *)p + done, n - done);
      return true;
    }
    if (r <= 0) return false;
    done += (size_t)r;
  }
  return true;
}
