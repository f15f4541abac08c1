/* Compile fairness through the real kilnd: with one compile worker, a tenant that queued
 * hundreds of batch items delays another tenant's batch item by at most one item (the one
 * running plus one more), where a FIFO queue would make it wait for all of them. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/server/harness.h"

#define TOK_A "fair-alpha-token-0123456789"
#define TOK_B "fair-bravo-token-0123456789"
#define A_ITEMS 300

static daemon_t d;
static char tokens_path[128];

static void start(void) {
  snprintf(tokens_path, sizeof(tokens_path), "/tmp/kiln-fair-tokens-%d", (int)getpid());
  FILE *f = fopen(tokens_path, "w");
  cr_assert(f);
  fputs(TOK_A " alpha\n" TOK_B " bravo\n", f);
  fclose(f);
  const char *extra[] = {"--tokens", tokens_path, "--compile-workers", "1", NULL};
  daemon_start(&d, extra);
}

static void stop(void) {
  if (d.pid) daemon_stop(&d);
  unlink(tokens_path);
}

TestSuite(fair, .init = start, .fini = stop, .timeout = 300);

static void hello(client_t *c, const char *token) {
  client_send_hello(c, 1, token);
  cr_assert(client_recv(c, 5000));
  cr_assert_eq(code_of(c), 0);
}

static void ping(client_t *c) {
  client_send(c, 99, "ping", NULL);
  cr_assert(client_recv(c, 10000), "no ping reply");
}

/* A small kernel made unique by `salt` (so that no two items share a build). */
static void pack_item(msgpack_packer *pk, const char *who, int i) {
  char ir[512];
  snprintf(ir, sizeof(ir),
           "; %s item %d\n"
           "define void @k(ptr %%a) section \"kiln.kernel\" {\n"
           "  store float %d.0, ptr %%a\n"
           "  ret void\n"
           "}\n",
           who, i, i);
  msgpack_pack_map(pk, 1);
  kiln_pack_kv_str(pk, "ir", ir);
}

static void send_batch(client_t *c, uint32_t msgid, const char *who, int n) {
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_cstr(&b.p.pk, "items");
  msgpack_pack_array(&b.p.pk, (uint32_t)n);
  for (int i = 0; i < n; i++) pack_item(&b.p.pk, who, i);
  client_send(c, msgid, "compile_batch", &b.buf);
  pb_end(&b);
}

static uint64_t compiles_done(client_t *c) {
  client_send(c, 98, "stats", NULL);
  cr_assert(client_recv(c, 10000));
  const msgpack_object *comp = kiln_params_find(c->msg.result, "compile");
  return kiln_params_find(comp, "compiles")->via.u64;
}

/* Alpha and bravo connected, and the only compile worker stopped: what both queue now waits,
 * except alpha's first item, which goes to the stopped worker. */
typedef struct scene {
  client_t a, b;
  pid_t worker;
  uint64_t before; /* builds finished before the scene */
} scene_t;

static void scene_begin(scene_t *s) {
  client_connect_tcp(&s->a, &d);
  client_connect_tcp(&s->b, &d);
  hello(&s->a, TOK_A);
  hello(&s->b, TOK_B);
  s->worker = daemon_child_named(d.pid, "kiln-compile-wo");
  cr_assert(s->worker > 0);
  s->before = compiles_done(&s->b);
  cr_assert_eq(kill(s->worker, SIGSTOP), 0);
}

/* Lets the worker go and reads alpha's `progress` until its `alpha_done`-th item has been
 * answered; by then bravo's answer `msgid` must have come. The test reads kilnd's order of
 * events, never how fast it reacts: the ping sent to bravo now is handled after kilnd wrote
 * that progress, and bravo's connection answers in order, so a compile reply that comes
 * after the pong was made after alpha's `alpha_done`-th item. */
static void scene_bravo_before_alpha(scene_t *s, uint32_t msgid, uint32_t alpha_done) {
  cr_assert_eq(kill(s->worker, SIGCONT), 0);
  cr_assert(client_wait_progress(&s->a, alpha_done, 120000),
            "alpha's item %u was not answered", alpha_done);
  /* Stopped again, with most of alpha's items still queued, for scene_end's cancel. */
  cr_assert_eq(kill(s->worker, SIGSTOP), 0);
  client_send(&s->b, 99, "ping", NULL);
  cr_assert(client_recv(&s->b, 120000), "bravo was not answered");
  cr_assert_eq(s->b.msg.msgid, msgid,
               "bravo's item was still waiting when %u of alpha's had been built", alpha_done);
  cr_assert_eq(code_of(&s->b), 0);
  cr_assert(client_recv(&s->b, 10000), "no ping reply");
  cr_assert_eq(s->b.msg.msgid, 99);
  cr_log_info("builds finished before bravo's ping: %llu",
              (unsigned long long)(compiles_done(&s->b) - s->before));
}

/* Alpha cancels its batch `msgid` (of n items) while the worker is stopped, so that what the
 * cancel drops is fixed when kilnd handles it, not by how fast this process reacts: every
 * item is answered, exactly the ones the cancel counted are cancelled, the rest were built,
 * and the stop left items queued to cancel. */
static void scene_end(scene_t *s, uint32_t msgid, uint32_t n) {
  pbuild_t p;
  pb_begin(&p, 1);
  kiln_pack_kv_u64(&p.p.pk, "msgid", msgid);
  client_send(&s->a, msgid + 1, "cancel", &p.buf);
  pb_end(&p);
  bool got_batch = false, got_cancel = false;
  uint64_t said = 0;
  while (!got_batch || !got_cancel) {
    cr_assert(client_recv(&s->a, 120000), "alpha's answers did not all come");
    if (s->a.msg.msgid == msgid + 1) {
      cr_assert_eq(code_of(&s->a), 0);
      said = kiln_params_find(s->a.msg.result, "cancelled")->via.u64;
      got_cancel = true;
      cr_assert_eq(kill(s->worker, SIGCONT), 0); /* the running item may end now */
    }
    if (s->a.msg.msgid != msgid) continue;
    cr_assert(got_cancel, "the batch ended before the cancel was handled");
    got_batch = true;
    cr_assert_eq(code_of(&s->a), 0);
    const msgpack_object *r = s->a.msg.result;
    cr_assert_eq(r->via.array.size, n);
    uint32_t built = 0, cancelled = 0;
    for (uint32_t i = 0; i < r->via.array.size; i++) {
      if (kiln_params_find(&r->via.array.ptr[i], "module")) built++;
      else cancelled++;
    }
    cr_assert(built >= 1 && cancelled >= 1 && cancelled == said,
              "built %u, cancelled %u, the cancel said %llu", built, cancelled,
              (unsigned long long)said);
  }
  client_close(&s->a);
  client_close(&s->b);
}

Test(fair, batch_items_of_two_tenants_take_turns) {
  scene_t s;
  scene_begin(&s);
  /* A ping after each batch on the same connection proves kilnd has queued it (messages
   * are handled in order). */
  send_batch(&s.a, 10, "alpha", A_ITEMS);
  ping(&s.a);
  send_batch(&s.b, 20, "bravo", 1);
  ping(&s.b);
  client_send(&s.b, 97, "stats", NULL);
  cr_assert(client_recv(&s.b, 10000));
  const msgpack_object *comp = kiln_params_find(s.b.msg.result, "compile");
  cr_assert_eq(kiln_params_find(comp, "queued_batch")->via.u64, A_ITEMS,
               "queued: alpha's rest and bravo's one");
  /* Alpha's item that was running and at most one more of alpha's go before bravo's: a
   * FIFO queue would answer bravo after all A_ITEMS of alpha's. */
  scene_bravo_before_alpha(&s, 20, 3);
  scene_end(&s, 10, A_ITEMS);
}

/* Interactive before batch still holds across tenants: bravo's `compile` overtakes every
 * queued batch item of alpha. */
Test(fair, interactive_overtakes_other_tenants_batch) {
  scene_t s;
  scene_begin(&s);
  send_batch(&s.a, 10, "alpha", A_ITEMS);
  ping(&s.a);
  pbuild_t p;
  pb_begin(&p, 1);
  kiln_pack_cstr(&p.p.pk, "ir");
  kiln_pack_cstr(&p.p.pk, "; bravo interactive\n"
                          "define void @k(ptr %a) section \"kiln.kernel\" {\n  ret void\n}\n");
  client_send(&s.b, 30, "compile", &p.buf);
  pb_end(&p);
  ping(&s.b);
  /* Only alpha's item that was running goes before bravo's. */
  scene_bravo_before_alpha(&s, 30, 2);
  scene_end(&s, 10, A_ITEMS);
}
