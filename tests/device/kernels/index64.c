#include <kiln/kernel.h>

/* buf[base + i] = i * 7 + 1 with a 64-bit base: offsets past 2^31 must not wrap. */
KILN_KERNEL void index64(unsigned char *buf, long long base, int n) {
  int i = (int)kiln_global_id(0);
  if (i < n) buf[base + i] = (unsigned char)(i * 7 + 1);
}
