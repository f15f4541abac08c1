/* server/compile_queue.c on its own: interactive before batch, one item per tenant in turn
 * (a tenant that queues many delays another by one), promotion to interactive, the counts
 * per tenant, and the filter that `cancel` uses. */
#include <criterion/criterion.h>

#include "server/compile_queue.h"

typedef struct item {
  kiln_cq_item_t q;
  int id;
} item_t;

static kiln_tenant_t alice = {.index = 1}, bob = {.index = 2};

static void push(kiln_cqueue_t *q, item_t *it, int id, kiln_tenant_t *t, int prio) {
  *it = (item_t){.q = {.prio = prio, .owner = t}, .id = id};
  cr_assert_null(kiln_cq_push(q, &it->q));
}

static int pop(kiln_cqueue_t *q) {
  item_t *it = (item_t *)kiln_cq_pop(q);
  return it ? it->id : -1;
}

Test(compile_queue, tenants_take_turns_and_interactive_goes_first) {
  kiln_cqueue_t q;
  kiln_cq_init(&q);
  item_t it[6];
  push(&q, &it[0], 1, &alice, KILN_PRIO_BATCH);
  push(&q, &it[1], 2, &alice, KILN_PRIO_BATCH);
  push(&q, &it[2], 3, &alice, KILN_PRIO_BATCH);
  push(&q, &it[3], 4, &bob, KILN_PRIO_BATCH);
  push(&q, &it[4], 5, &bob, KILN_PRIO_INTERACTIVE);
  cr_expect_eq(kiln_cq_queued(&q, &alice, KILN_PRIO_BATCH), 3);
  cr_expect_eq(kiln_cq_queued(&q, &bob, KILN_PRIO_INTERACTIVE), 1);
  cr_expect_eq(q.len[KILN_PRIO_BATCH], 4);
  int want[] = {5, 1, 4, 2, 3, -1};
  for (int i = 0; i < 6; i++) cr_expect_eq(pop(&q), want[i], "pop %d", i);
  cr_expect_eq(q.len[0] + q.len[1], 0);
}

Test(compile_queue, promote_moves_a_batch_item_ahead) {
  kiln_cqueue_t q;
  kiln_cq_init(&q);
  item_t it[3];
  push(&q, &it[0], 1, &alice, KILN_PRIO_BATCH);
  push(&q, &it[1], 2, &alice, KILN_PRIO_BATCH);
  push(&q, &it[2], 3, &bob, KILN_PRIO_BATCH);
  kiln_cq_promote(&q, &it[1].q);
  cr_expect_eq(it[1].q.prio, KILN_PRIO_INTERACTIVE);
  cr_expect_eq(kiln_cq_queued(&q, &alice, KILN_PRIO_BATCH), 1);
  cr_expect_eq(pop(&q), 2);
  cr_expect_eq(pop(&q), 1);
  cr_expect_eq(pop(&q), 3);
}

static bool even(void *ctx, kiln_cq_item_t *it) {
  (void)ctx;
  return ((item_t *)it)->id % 2 == 0;
}
static void count(void *ctx, kiln_cq_item_t *it) {
  (void)it;
  ++*(int *)ctx;
}

Test(compile_queue, filter_takes_out_what_it_is_told) {
  kiln_cqueue_t q;
  kiln_cq_init(&q);
  item_t it[5];
  for (int i = 0; i < 5; i++) push(&q, &it[i], i + 1, i % 2 ? &bob : &alice, KILN_PRIO_BATCH);
  int dropped = 0;
  kiln_cq_filter(&q, even, count, &dropped);
  cr_expect_eq(dropped, 2);
  cr_expect_eq(q.len[KILN_PRIO_BATCH], 3);
  cr_expect_eq(kiln_cq_queued(&q, &bob, KILN_PRIO_BATCH), 0, "bob's items were 2 and 4");
  int want[] = {1, 3, 5, -1};
  for (int i = 0; i < 4; i++) cr_expect_eq(pop(&q), want[i], "pop %d", i);
}
