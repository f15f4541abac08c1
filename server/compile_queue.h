/* The compile queue: per priority, a ring of tenants, each with its own FIFO. The workers take
 * one item per tenant in turn, interactive before batch, so a tenant that queues thousands
 * delays another by one item per worker. Items live in the caller's jobs (an embedded
 * kiln_cq_item_t); the queue owns only its per-tenant lists. Loop thread. */
#ifndef KILN_SERVER_COMPILE_QUEUE_H
#define KILN_SERVER_COMPILE_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/map.h"
#include "base/status.h"
#include "server/tenants.h"

enum { KILN_PRIO_INTERACTIVE = 0, KILN_PRIO_BATCH = 1 };

typedef struct kiln_cq_item {
  struct kiln_cq_item *next;
  int prio;
  kiln_tenant_t *owner; /* whose FIFO it waits in */
  uint64_t queued_ns;
} kiln_cq_item_t;

typedef struct kiln_cq_tenant kiln_cq_tenant_t;
typedef struct kiln_cqueue {
  kiln_map_t tenants[2];      /* per priority: tenant index -> kiln_cq_tenant_t* */
  kiln_cq_tenant_t *ring[2];  /* per priority: the tenant served next; NULL when none waits */
  uint32_t len[2];            /* items queued per priority */
} kiln_cqueue_t;

void kiln_cq_init(kiln_cqueue_t *q);
/* Appends `it` (its prio and owner set) to its tenant's FIFO; a tenant that had none queued
 * joins its ring last in the current round. E_RESOURCE_EXHAUSTED when out of memory. */
KILN_MUST_USE kiln_status_t kiln_cq_push(kiln_cqueue_t *q, kiln_cq_item_t *it);
/* The next item, taken out of the queue; NULL when none waits. */
kiln_cq_item_t *kiln_cq_pop(kiln_cqueue_t *q);
/* Moves a queued batch item to the interactive queue (an interactive request joined it). */
void kiln_cq_promote(kiln_cqueue_t *q, kiln_cq_item_t *it);
/* Items tenant t has queued at priority prio. */
uint64_t kiln_cq_queued(const kiln_cqueue_t *q, const kiln_tenant_t *t, int prio);
/* Calls visit(ctx, it) for every queued item; one it answers true for is taken out of the
 * queue and handed to dropped(ctx, it), which may free it. */
void kiln_cq_filter(kiln_cqueue_t *q, bool (*visit)(void *ctx, kiln_cq_item_t *it),
                    void (*dropped)(void *ctx, kiln_cq_item_t *it), void *ctx);

#endif
