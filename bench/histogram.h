/* A latency histogram with bounded memory: log-linear buckets (64 per power of two, so a
 * reported percentile is within 1.6% of the true value), nanoseconds up to ~18 minutes. */
#ifndef KILN_BENCH_HISTOGRAM_H
#define KILN_BENCH_HISTOGRAM_H

#include <stdint.h>

#define KILN_HIST_SUB_BITS 6
#define KILN_HIST_BUCKETS ((40 - KILN_HIST_SUB_BITS + 1) << KILN_HIST_SUB_BITS)

typedef struct kiln_hist {
  uint64_t count, max, sum;
  uint64_t buckets[KILN_HIST_BUCKETS];
} kiln_hist_t;

void kiln_hist_record(kiln_hist_t *h, uint64_t ns);
void kiln_hist_merge(kiln_hist_t *into, const kiln_hist_t *from);
/* The value at quantile q (0..1): the upper edge of the bucket holding it, capped at max. */
uint64_t kiln_hist_quantile(const kiln_hist_t *h, double q);

#endif
