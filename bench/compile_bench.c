/* Compile latency of the vector-add kernel in the dialect, warm compiler (one
 * kiln_compiler_t, as in a compile worker), per target: p50/p90/min over N runs after a
 * warm-up, in wall time and in this process's CPU time (which a busy machine disturbs
 * less). Usage: compile_bench VADD.bc [runs]. Prints one line per target. */
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "compiler/compiler.h"

static uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s VADD.bc [runs]\n", argv[0]);
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) return perror(argv[1]), 1;
  static uint8_t payload[1 << 20];
  size_t n = fread(payload, 1, sizeof(payload), f);
  fclose(f);
  int runs = argc > 2 ? atoi(argv[2]) : 50;
  kiln_compiler_t *c;
  kiln_status_t s = kiln_compiler_create(NULL, &c);
  if (s) return fprintf(stderr, "%s\n", kiln_status_message(s)), 1;
  static const char *const targets[] = {"gfx942", "sm_90", "cpu"};
  uint64_t *t = calloc((size_t)runs, sizeof(uint64_t)), *ct = calloc((size_t)runs, sizeof(uint64_t));
  printf("%s; %s\n", kiln_compiler_identity(), argv[1]);
  for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
    kiln_compile_request_t req = {.payload = payload, .payload_size = n, .kind = KILN_PAYLOAD_AUTO,
                                  .target = targets[i], .options = kiln_compile_options_default()};
    uint64_t first = 0;
    for (int r = -3; r < runs; r++) {
      kiln_artifact_t a;
      uint64_t t0 = kiln_now_ns(), c0 = cpu_ns();
      s = kiln_compiler_compile(c, &req, &a);
      uint64_t dt = kiln_now_ns() - t0, dc = cpu_ns() - c0;
      if (s) return fprintf(stderr, "%s: %s\n", targets[i], kiln_status_message(s)), 1;
      kiln_artifact_deinit(&a);
      if (r == -3) first = dt;
      if (r >= 0) t[r] = dt, ct[r] = dc;
    }
    qsort(t, (size_t)runs, sizeof(uint64_t), cmp_u64);
    qsort(ct, (size_t)runs, sizeof(uint64_t), cmp_u64);
    printf("%-7s first %6.2f ms  warm wall p50 %6.2f p90 %6.2f min %6.2f ms  cpu p50 %6.2f min %6.2f ms  (%d runs)\n",
           targets[i], first / 1e6, t[runs / 2] / 1e6, t[runs * 9 / 10] / 1e6, t[0] / 1e6, ct[runs / 2] / 1e6,
           ct[0] / 1e6, runs);
  }
  free(t);
  free(ct);
  kiln_compiler_destroy(c);
  return 0;
}
