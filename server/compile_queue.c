/* The compile queue (server/compile_queue.h). */
#include "server/compile_queue.h"

#include <stdlib.h>

#include "base/util.h"

/* The items one tenant has queued at one priority, oldest first; in its priority's ring
 * while it has any. */
struct kiln_cq_tenant {
  kiln_cq_tenant_t *prev, *next; /* the ring, while len > 0 */
  kiln_tenant_t *tenant;
  kiln_cq_item_t *head, *tail;
  uint32_t len;
};

void kiln_cq_init(kiln_cqueue_t *q) {
  *q = (kiln_cqueue_t){0};
  kiln_map_init(&q->tenants[0]);
  kiln_map_init(&q->tenants[1]);
}

static void ring_remove(kiln_cqueue_t *q, int p, kiln_cq_tenant_t *tq) {
  if (tq->next == tq) {
    q->ring[p] = NULL;
  } else {
    tq->prev->next = tq->next;
    tq->next->prev = tq->prev;
    if (q->ring[p] == tq) q->ring[p] = tq->next;
  }
  tq->prev = tq->next = NULL;
}

/* Takes `it` (whose predecessor in its tenant's FIFO is prev, or NULL) out of the queue. */
static void unqueue(kiln_cqueue_t *q, kiln_cq_tenant_t *tq, kiln_cq_item_t *prev, kiln_cq_item_t *it) {
  int p = it->prio;
  if (prev) prev->next = it->next;
  else tq->head = it->next;
  if (tq->tail == it) tq->tail = prev;
  it->next = NULL;
  tq->len--;
  q->len[p]--;
  if (tq->len == 0) ring_remove(q, p, tq);
}

kiln_cq_item_t *kiln_cq_pop(kiln_cqueue_t *q) {
  for (int p = 0; p < 2; p++) {
    kiln_cq_tenant_t *tq = q->ring[p];
    if (!tq) continue;
    q->ring[p] = tq->next; /* the turn passes to the next tenant */
    kiln_cq_item_t *it = tq->head;
    unqueue(q, tq, NULL, it);
    return it;
  }
  return NULL;
}

static kiln_cq_tenant_t *tenant_fifo(kiln_cqueue_t *q, int p, kiln_tenant_t *t) {
  kiln_cq_tenant_t *tq = kiln_map_get(&q->tenants[p], t->index);
  if (tq) return tq;
  tq = calloc(1, sizeof(*tq));
  if (!tq) return NULL;
  tq->tenant = t;
  if (kiln_map_put(&q->tenants[p], t->index, tq)) {
    free(tq);
    return NULL;
  }
  return tq;
}

kiln_status_t kiln_cq_push(kiln_cqueue_t *q, kiln_cq_item_t *it) {
  int p = it->prio;
  kiln_cq_tenant_t *tq = tenant_fifo(q, p, it->owner);
  if (!tq) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  it->queued_ns = kiln_now_ns();
  it->next = NULL;
  if (tq->tail) tq->tail->next = it;
  else tq->head = it;
  tq->tail = it;
  if (tq->len++ == 0) {
    /* Joins the ring last in the current round: every tenant already waiting goes first. */
    kiln_cq_tenant_t *r = q->ring[p];
    if (!r) {
      tq->prev = tq->next = tq;
      q->ring[p] = tq;
    } else {
      tq->next = r;
      tq->prev = r->prev;
      r->prev->next = tq;
      r->prev = tq;
    }
  }
  q->len[p]++;
  return KILN_OK;
}

void kiln_cq_promote(kiln_cqueue_t *q, kiln_cq_item_t *it) {
  kiln_cq_tenant_t *tq = kiln_map_get(&q->tenants[KILN_PRIO_BATCH], it->owner->index);
  kiln_cq_item_t *prev = NULL;
  for (kiln_cq_item_t *c = tq ? tq->head : NULL; c; prev = c, c = c->next) {
    if (c != it) continue;
    unqueue(q, tq, prev, it);
    it->prio = KILN_PRIO_INTERACTIVE;
    kiln_status_t st = kiln_cq_push(q, it);
    if (st) {
      /* No memory for the interactive queue: it stays a batch item. */
      kiln_status_free(st);
      it->prio = KILN_PRIO_BATCH;
      kiln_status_free(kiln_cq_push(q, it));
    }
    return;
  }
}

uint64_t kiln_cq_queued(const kiln_cqueue_t *q, const kiln_tenant_t *t, int prio) {
  kiln_cq_tenant_t *tq = kiln_map_get(&q->tenants[prio ? 1 : 0], t->index);
  return tq ? tq->len : 0;
}

void kiln_cq_filter(kiln_cqueue_t *q, bool (*visit)(void *ctx, kiln_cq_item_t *it),
                    void (*dropped)(void *ctx, kiln_cq_item_t *it), void *ctx) {
  for (int p = 0; p < 2; p++) {
    size_t i = 0;
    void *v;
    while (kiln_map_next(&q->tenants[p], &i, NULL, &v)) {
      kiln_cq_tenant_t *tq = v;
      kiln_cq_item_t *prev = NULL;
      for (kiln_cq_item_t *it = tq->head; it;) {
        kiln_cq_item_t *next = it->next;
        if (visit(ctx, it)) {
          unqueue(q, tq, prev, it);
          dropped(ctx, it);
        } else {
          prev = it;
        }
        it = next;
      }
    }
  }
}
