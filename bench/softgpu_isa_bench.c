/* softgpu-isa-bench: the interpreter's speed on the TE GEMM (kiln.topi's 256^3 matmul, built by
 * tests/softgpu/isa for gfx942 and gfx90a): wave instructions per second over repeated
 * dispatches, with the first dispatch (which decodes every PC through LLVM) reported apart.
 * SOFTGPU_THREADS sets the interpreter's threads (default: the CPUs this process may use).
 *
 *   softgpu-isa-bench [STEM [REPEATS]]      STEM defaults to gemm256 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/softgpu/isa/harness.h"

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU seconds of every thread of the process: a shared machine's load does not inflate it */
static double cpu(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void bench(sg_target_t t, const char *stem, int repeats) {
  enum { N = 256 };
  sgt_ctx_t c;
  sgt_init(&c, t);
  sgt_load_kart(&c, stem);
  static float a[N * N], b[N * N], o[N * N];
  unsigned seed = 1;
  for (int i = 0; i < N * N; i++) a[i] = (float)rand_r(&seed) / RAND_MAX, b[i] = (float)rand_r(&seed) / RAND_MAX;
  uint64_t va = sgt_upload(&c, a, sizeof(a)), vb = sgt_upload(&c, b, sizeof(b));
  uint64_t vo = sgt_alloc(&c, sizeof(o), SG_ACC_READ | SG_ACC_WRITE);
  sgt_arg_t args[] = {SGA_PTR(va), SGA_PTR(vb), SGA_PTR(vo)};
  const sgt_kernel_t *k = sgt_kernel(&c, stem);
  if (!k || !k->has_launch) {
    fprintf(stderr, "%s: no kernel %s with a launch recipe\n", stem, stem);
    exit(1);
  }
  double *secs = calloc((size_t)repeats, sizeof(double)), *cpus = calloc((size_t)repeats, sizeof(double));
  uint64_t insts = 0;
  double first = 0;
  for (int r = -1; r < repeats; r++) {
    sg_report_t rep;
    double t0 = now(), c0 = cpu();
    sg_status_t st = sgt_launch(&c, stem, k->grid, k->block, 0, args, 3, &rep);
    double dt = now() - t0, dc = cpu() - c0;
    if (st != SG_OK) {
      fprintf(stderr, "%s on %s: %s\n", stem, sgt_target_name(t), rep.message);
      exit(1);
    }
    if (r < 0) first = dt;
    else secs[r] = dt, cpus[r] = dc;
    insts = rep.instructions;
  }
  /* the result is a GEMM: spot-check one element so a broken run cannot report a speed */
  sgt_download(&c, vo, o, sizeof(o));
  double want = 0;
  for (int kk = 0; kk < N; kk++) want += (double)a[5 * N + kk] * b[kk * N + 7];
  if (fabs(o[5 * N + 7] - want) > 1e-3 * want) {
    fprintf(stderr, "wrong result: %g, want %g\n", o[5 * N + 7], want);
    exit(1);
  }
  qsort(secs, (size_t)repeats, sizeof(double), cmp);
  qsort(cpus, (size_t)repeats, sizeof(double), cmp);
  double med = secs[repeats / 2], best = secs[0], cmed = cpus[repeats / 2];
  printf("| %s | %s | %llu | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f |\n", stem, sgt_target_name(t),
         (unsigned long long)insts, first, best, med, cmed, (double)insts / med / 1e6, (double)insts / cmed / 1e6);
  free(secs);
  free(cpus);
  sgt_deinit(&c);
}

int main(int argc, char **argv) {
  const char *stem = argc > 1 ? argv[1] : "gemm256";
  int repeats = argc > 2 ? atoi(argv[2]) : 5;
  if (repeats < 1) repeats = 1;
  const char *th = getenv("SOFTGPU_THREADS");
  printf("SOFTGPU_THREADS=%s\n\n", th ? th : "(unset: all CPUs)");
  printf("| kernel | target | wave instructions | first dispatch s | best s | median s | median CPU s | "
         "M wave inst/s (wall) | M wave inst per CPU s |\n");
  printf("|---|---|---|---|---|---|---|---|---|\n");
  bench(SG_GFX942, stem, repeats);
  bench(SG_GFX90A, stem, repeats);
  return 0;
}
