/* Tiled SGEMM for the compile_batch benchmark (bench/kilnd_bench.py): C = A * B, row-major,
 * A is M x K, B is K x N. A work-group of BX x BY work-items computes a (BY*RM) x (BX*RN)
 * block of C; each work-item computes RM x RN outputs held in registers; the K loop steps by
 * TK through KILN_SHARED tiles of A and B, its inner loop unrolled UNROLL times.
 *
 * The tuning knobs are #defines so that every setting gives a different IR payload:
 *   RM, RN   outputs per work-item (rows, columns)
 *   TK       K-tile depth
 *   UNROLL   unroll factor of the inner product loop
 *   BX, BY   work-group shape (launch with block = [BX, BY])
 * Compile: clang -O2 -emit-llvm -c -I clients/include -DRM=4 -DRN=4 -DTK=8 -DUNROLL=4 gemm_tiled.c */
#include <kiln/kernel.h>

#ifndef RM
#define RM 4
#endif
#ifndef RN
#define RN 4
#endif
#ifndef TK
#define TK 8
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef BX
#define BX 16
#endif
#ifndef BY
#define BY 16
#endif

#define TILE_M (BY * RM)
#define TILE_N (BX * RN)

#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)
/* The kernel's name carries its settings (gemm_tiled_4x4_k8_u4), so that two settings the
 * optimiser happens to turn into the same code are still distinct payloads and modules. */
#define KILN_CAT2(a, b, c, d) gemm_tiled_##a##x##b##_k##c##_u##d
#define KILN_CAT(a, b, c, d) KILN_CAT2(a, b, c, d)
#define GEMM_NAME KILN_CAT(RM, RN, TK, UNROLL)

KILN_KERNEL void GEMM_NAME(const float *a, const float *b, float *c, int m, int n, int k) {
  static KILN_SHARED float as[TK][TILE_M + 1];
  static KILN_SHARED float bs[TK][TILE_N + 1];

  const int tx = (int)kiln_local_id(0), ty = (int)kiln_local_id(1);
  const int row0 = (int)kiln_group_id(1) * TILE_M;
  const int col0 = (int)kiln_group_id(0) * TILE_N;
  const int tid = ty * BX + tx;

  float acc[RM][RN];
  for (int i = 0; i < RM; i++)
    for (int j = 0; j < RN; j++) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < k; k0 += TK) {
    /* Cooperative loads of the A tile (TILE_M x TK) and the B tile (TK x TILE_N). */
    for (int e = tid; e < TILE_M * TK; e += BX * BY) {
      int r = e / TK, kk = e % TK;
      int gr = row0 + r, gk = k0 + kk;
      as[kk][r] = (gr < m && gk < k) ? a[(long)gr * k + gk] : 0.0f;
    }
    for (int e = tid; e < TK * TILE_N; e += BX * BY) {
      int kk = e / TILE_N, cc = e % TILE_N;
      int gk = k0 + kk, gc = col0 + cc;
      bs[kk][cc] = (gk < k && gc < n) ? b[(long)gk * n + gc] : 0.0f;
    }
    kiln_barrier();

    _Pragma(KILN_STR(clang loop unroll_count(UNROLL)))
    for (int kk = 0; kk < TK; kk++) {
      float av[RM], bv[RN];
      for (int i = 0; i < RM; i++) av[i] = as[kk][ty * RM + i];
      for (int j = 0; j < RN; j++) bv[j] = bs[kk][tx * RN + j];
      for (int i = 0; i < RM; i++)
        for (int j = 0; j < RN; j++) acc[i][j] += av[i] * bv[j];
    }
    kiln_barrier();
  }

  for (int i = 0; i < RM; i++) {
    int gr = row0 + ty * RM + i;
    if (gr >= m) continue;
    for (int j = 0; j < RN; j++) {
      int gc = col0 + tx * RN + j;
      if (gc < n) c[(long)gr * n + gc] = acc[i][j];
    }
  }
}
