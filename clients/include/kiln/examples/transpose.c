/* Tiled transpose through work-group memory: out[x][y] = in[y][x] for an h x w matrix.
 * Launch with block (TILE, TILE) and grid (ceil(w/TILE), ceil(h/TILE)). The tile has one
 * column of padding so that GPU threads of a column hit different memory banks. */
#include <kiln/kernel.h>

#define TILE 16

KILN_KERNEL void transpose(const float *in, float *out, int h, int w) {
  static KILN_SHARED float tile[TILE][TILE + 1];
  unsigned tx = kiln_local_id(0), ty = kiln_local_id(1);
  unsigned x = kiln_group_id(0) * TILE + tx, y = kiln_group_id(1) * TILE + ty;
  if (x < (unsigned)w && y < (unsigned)h) tile[ty][tx] = in[y * w + x];
  kiln_barrier();
  /* Write the transposed tile: block (bx, by) of `in` becomes block (by, bx) of `out`. */
  unsigned ox = kiln_group_id(1) * TILE + tx, oy = kiln_group_id(0) * TILE + ty;
  if (ox < (unsigned)h && oy < (unsigned)w) out[oy * h + ox] = tile[tx][ty];
}
