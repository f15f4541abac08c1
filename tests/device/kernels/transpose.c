#include <kiln/kernel.h>

#define TILE 16

/* out (cols x rows) = transpose of in (rows x cols), through a work-group tile; the extra
 * column keeps GPU shared-memory banks apart. Launch with 16x16 work-groups. */
KILN_KERNEL void transpose(const float *in, float *out, int rows, int cols) {
  static KILN_SHARED float tile[TILE][TILE + 1];
  int lx = (int)kiln_local_id(0), ly = (int)kiln_local_id(1);
  int bx = (int)kiln_group_id(0) * TILE, by = (int)kiln_group_id(1) * TILE;
  int x = bx + lx, y = by + ly;
  if (x < cols && y < rows) tile[ly][lx] = in[y * cols + x];
  kiln_barrier();
  /* Write the tile transposed: this work-item now covers element (by + lx, bx + ly). */
  int ox = by + lx, oy = bx + ly;
  if (ox < rows && oy < cols) out[oy * rows + ox] = tile[lx][ly];
}
