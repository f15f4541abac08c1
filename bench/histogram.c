#include "histogram.h"

#define SUB (1u << KILN_HIST_SUB_BITS)

/* Values below SUB get one bucket each; above, the top KILN_HIST_SUB_BITS bits after the
 * leading one pick one of SUB buckets within their power of two. */
static unsigned bucket_of(uint64_t v) {
  if (v < SUB) return (unsigned)v;
  unsigned e = 63u - (unsigned)__builtin_clzll(v); /* position of the leading one */
  if (e > 39) return KILN_HIST_BUCKETS - 1;
  unsigned shift = e - KILN_HIST_SUB_BITS;
  unsigned sub = (unsigned)(v >> shift) & (SUB - 1);
  return ((shift + 1) << KILN_HIST_SUB_BITS) + sub;
}

static uint64_t upper_edge(unsigned b) {
  if (b < SUB) return b;
  unsigned shift = (b >> KILN_HIST_SUB_BITS) - 1;
  uint64_t sub = b & (SUB - 1);
  return ((SUB + sub + 1) << shift) - 1;
}

void kiln_hist_record(kiln_hist_t *h, uint64_t ns) {
  h->buckets[bucket_of(ns)]++;
  h->count++;
  h->sum += ns;
  if (ns > h->max) h->max = ns;
}

void kiln_hist_merge(kiln_hist_t *into, const kiln_hist_t *from) {
  for (unsigned i = 0; i < KILN_HIST_BUCKETS; i++) into->buckets[i] += from->buckets[i];
  into->count += from->count;
  into->sum += from->sum;
  if (from->max > into->max) into->max = from->max;
}

uint64_t kiln_hist_quantile(const kiln_hist_t *h, double q) {
  if (h->count == 0) return 0;
  uint64_t rank = (uint64_t)(q * (double)h->count);
  if (rank >= h->count) rank = h->count - 1;
  uint64_t seen = 0;
  for (unsigned i = 0; i < KILN_HIST_BUCKETS; i++) {
    seen += h->buckets[i];
    if (seen > rank) {
      uint64_t v = upper_edge(i);
      return v < h->max ? v : h->max;
    }
  }
  return h->max;
}
