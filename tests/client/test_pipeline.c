/* The pipelined API: many requests in flight, replies matched by msgid in completion order. */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "fixture.h"

TestSuite(pipeline, .init = fixture_up, .fini = fixture_down, .timeout = 120);

Test(pipeline, thousands_in_flight) {
  enum { N = 20000, UPLOAD_EVERY = 100 };
  static uint8_t seen[N + 64];
  static float payload[256];
  kiln_tensor_desc_t d = {.dtype = KILN_FLOAT32, .ndim = 1, .shape = {256}, .nbytes = 1024};
  uint32_t first = 0, last = 0;
  size_t uploads = 0;
  for (int i = 0; i < N; i++) {
    uint32_t id;
    if (i % UPLOAD_EVERY == 0) {
      ASSERT_OK(kiln_client_submit_upload(g_client, NULL, &d, payload, &id));
      uploads++;
    } else {
      ASSERT_OK(kiln_client_submit_ping(g_client, &id));
    }
    if (i == 0) first = id;
    last = id;
  }
  cr_assert_eq(last - first + 1, N, "msgids are not consecutive");
  cr_assert_eq(kiln_client_inflight(g_client), N);
  uint64_t *ids = calloc(uploads, sizeof(*ids));
  size_t got = 0, nids = 0;
  kiln_reply_t *r;
  for (;;) {
    ASSERT_OK(kiln_client_wait_any(g_client, &r));
    if (!r) break;
    uint32_t m = kiln_reply_msgid(r);
    cr_assert(m >= first && m <= last, "reply to msgid %u that was never sent", m);
    cr_assert_eq(seen[m - first], 0, "two replies to msgid %u", m);
    seen[m - first] = 1;
    if ((m - first) % UPLOAD_EVERY == 0) ASSERT_OK(kiln_reply_id(r, &ids[nids++]));
    else ASSERT_OK(kiln_reply_void(r));
    kiln_reply_free(r);
    got++;
  }
  cr_assert_eq(got, N);
  cr_assert_eq(kiln_client_inflight(g_client), 0);
  for (size_t i = 0; i < nids; i++) ASSERT_OK(kiln_client_free_tensor(g_client, ids[i]));
  free(ids);
}

Test(pipeline, replies_come_in_completion_order) {
  /* A 64 MiB upload is copied into the device worker's memory; a ping sent right behind it
   * needs no worker, so the daemon answers it first (docs/protocol.md: responses in
   * completion order, not request order). */
  static const size_t big = 64u << 20;
  uint8_t *data = calloc(1, big);
  kiln_tensor_desc_t d = {.dtype = KILN_UINT8, .ndim = 1, .shape = {big}, .nbytes = big};
  uint32_t up, ping;
  ASSERT_OK(kiln_client_submit_upload(g_client, NULL, &d, data, &up));
  ASSERT_OK(kiln_client_submit_ping(g_client, &ping));
  kiln_reply_t *r1, *r2;
  ASSERT_OK(kiln_client_wait_any(g_client, &r1));
  ASSERT_OK(kiln_client_wait_any(g_client, &r2));
  cr_expect_eq(kiln_reply_msgid(r1), ping, "the upload's reply came before the ping's");
  cr_expect_eq(kiln_reply_msgid(r2), up);
  uint64_t id;
  ASSERT_OK(kiln_reply_id(kiln_reply_msgid(r1) == up ? r1 : r2, &id));
  kiln_reply_free(r1);
  kiln_reply_free(r2);
  ASSERT_OK(kiln_client_free_tensor(g_client, id));
  free(data);
}

Test(pipeline, wait_for_a_msgid_out_of_order) {
  uint32_t a, b, c;
  ASSERT_OK(kiln_client_submit_ping(g_client, &a));
  ASSERT_OK(kiln_client_submit_ping(g_client, &b));
  ASSERT_OK(kiln_client_submit_ping(g_client, &c));
  kiln_reply_t *r;
  ASSERT_OK(kiln_client_wait(g_client, c, &r));
  cr_assert_eq(kiln_reply_msgid(r), c);
  kiln_reply_free(r);
  ASSERT_OK(kiln_client_wait(g_client, a, &r));
  cr_assert_eq(kiln_reply_msgid(r), a);
  kiln_reply_free(r);
  ASSERT_OK(kiln_client_wait_any(g_client, &r));
  cr_assert_eq(kiln_reply_msgid(r), b);
  kiln_reply_free(r);
  ASSERT_CODE(kiln_client_wait(g_client, b, &r), KILN_E_NOT_FOUND); /* collected already */
}

Test(pipeline, one_device_applies_requests_in_order) {
  enum { N = 4096 };
  static const uint64_t shape[] = {N};
  uint64_t id;
  ASSERT_OK(kiln_client_alloc(g_client, NULL, KILN_UINT8, shape, 1, &id));
  static uint8_t ones[N], twos[N / 2], back[N];
  memset(ones, 1, sizeof(ones));
  memset(twos, 2, sizeof(twos));
  uint32_t w1, w2, rd, fr;
  /* All four in flight at once: the read must see both writes, the free must come last. */
  ASSERT_OK(kiln_client_submit_write(g_client, id, 0, ones, N, &w1));
  ASSERT_OK(kiln_client_submit_write(g_client, id, 0, twos, N / 2, &w2));
  ASSERT_OK(kiln_client_submit_read(g_client, id, 0, N, &rd));
  ASSERT_OK(kiln_client_submit_free(g_client, id, &fr));
  kiln_reply_t *r;
  ASSERT_OK(kiln_client_wait(g_client, rd, &r));
  const void *p;
  size_t n;
  ASSERT_OK(kiln_reply_bytes(r, &p, &n));
  cr_assert_eq(n, N);
  memcpy(back, p, N);
  kiln_reply_free(r);
  for (int i = 0; i < N; i++) cr_assert_eq(back[i], i < N / 2 ? 2 : 1, "byte %d", i);
  uint32_t rest[] = {w1, w2, fr};
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(kiln_client_wait(g_client, rest[i], &r));
    ASSERT_OK(kiln_reply_void(r));
    kiln_reply_free(r);
  }
}

Test(pipeline, wait_all_keeps_replies) {
  enum { N = 1000 };
  for (int i = 0; i < N; i++) {
    uint32_t id;
    ASSERT_OK(kiln_client_submit_ping(g_client, &id));
  }
  ASSERT_OK(kiln_client_wait_all(g_client));
  cr_assert_eq(kiln_client_inflight(g_client), 0);
  int n = 0;
  kiln_reply_t *r;
  while (!kiln_client_wait_any(g_client, &r) && r) { /* an error status: none in flight */
    ASSERT_OK(kiln_reply_void(r));
    kiln_reply_free(r);
    n++;
  }
  cr_assert_eq(n, N);
}

static uint64_t stat_u64(kiln_client_t *c, const char *field) {
  kiln_reply_t *r;
  ASSERT_OK(kiln_client_stats(c, &r));
  const msgpack_object *o = kiln_object_get(kiln_reply_result(r), field);
  uint64_t v = o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : UINT64_MAX;
  kiln_reply_free(r);
  return v;
}

/* The daemon learns about a closed connection asynchronously; ask until it has (bounded). */
static void await_connections(kiln_client_t *c, uint64_t want) {
  uint64_t deadline = kiln_now_ns() + 20ull * 1000000000u, n;
  while ((n = stat_u64(c, "connections")) != want && kiln_now_ns() < deadline)
    ASSERT_OK(kiln_client_ping(c));
  cr_assert_eq(n, want, "kilnd still counts %llu connections", (unsigned long long)n);
}

Test(pipeline, disconnect_with_replies_pending) {
  static uint8_t blob[1u << 20];
  kiln_tensor_desc_t d = {.dtype = KILN_UINT8, .ndim = 1, .shape = {sizeof(blob)},
                          .nbytes = sizeof(blob)};
  uint64_t tensors_before = stat_u64(g_client, "tensors");
  for (int round = 0; round < 20; round++) {
    kiln_client_t *c = fixture_connect(g_kilnd.unix_url);
    uint32_t id;
    for (int i = 0; i < 500; i++) ASSERT_OK(kiln_client_submit_ping(c, &id));
    for (int i = 0; i < 4; i++) ASSERT_OK(kiln_client_submit_upload(c, NULL, &d, blob, &id));
    ASSERT_OK(kiln_client_flush(c));
    kiln_client_destroy(c); /* every reply still pending */
  }
  ASSERT_OK(kiln_client_ping(g_client));
  await_connections(g_client, 1);
  /* Tensors belong to the tenant: the uploads that completed are still there. */
  cr_expect_geq(stat_u64(g_client, "tensors"), tensors_before);
}
