/* 10,000 connections opened and dropped while another client keeps working: the worker
 * notices nothing, and kilnd's file descriptors return to their baseline. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/util.h"
#include "fixture.h"

TestSuite(churn, .init = fixture_up, .fini = fixture_down, .timeout = 300);

typedef struct worker {
  kiln_client_t *c;
  atomic_bool stop;
  uint64_t calls;
  kiln_status_t error; /* the first failure */
} worker_t;

/* Pings, and round-trips a small tensor every 64 calls, until told to stop. */
static void *work(void *arg) {
  worker_t *w = arg;
  float v[64], back[64];
  for (int i = 0; i < 64; i++) v[i] = (float)i;
  kiln_tensor_desc_t d = {.dtype = KILN_FLOAT32, .ndim = 1, .shape = {64}, .nbytes = sizeof(v)};
  while (!atomic_load(&w->stop) && !w->error) {
    if (w->calls % 64 == 0) {
      uint64_t id;
      w->error = kiln_client_upload(w->c, NULL, &d, v, &id);
      if (!w->error) w->error = kiln_client_download_into(w->c, id, back, sizeof(back), NULL);
      if (!w->error && memcmp(v, back, sizeof(v)) != 0)
        w->error = KILN_STATUS(KILN_E_INTERNAL, "tensor came back different");
      if (!w->error) w->error = kiln_client_free_tensor(w->c, id);
    } else {
      w->error = kiln_client_ping(w->c);
    }
    w->calls++;
  }
  return NULL;
}

static uint64_t connections(kiln_client_t *c) {
  kiln_reply_t *r;
  ASSERT_OK(kiln_client_stats(c, &r));
  const msgpack_object *o = kiln_object_get(kiln_reply_result(r), "connections");
  uint64_t n = o ? o->via.u64 : 0;
  kiln_reply_free(r);
  return n;
}

static void await_connections(kiln_client_t *c, uint64_t want) {
  uint64_t deadline = kiln_now_ns() + 30ull * 1000000000u, n;
  while ((n = connections(c)) != want && kiln_now_ns() < deadline) ASSERT_OK(kiln_client_ping(c));
  cr_assert_eq(n, want, "kilnd still counts %llu connections, expected %llu",
               (unsigned long long)n, (unsigned long long)want);
}

Test(churn, ten_thousand_connections) {
  worker_t w = {.c = fixture_connect(g_kilnd.unix_url)};
  /* One round of the worker's calls first: kilnd starts the cpu:0 device worker (and its
   * channel's socket) on the first tensor, which belongs in the baseline. */
  static const uint64_t shape[] = {1};
  uint64_t id;
  ASSERT_OK(kiln_client_alloc(w.c, NULL, KILN_UINT8, shape, 1, &id));
  ASSERT_OK(kiln_client_free_tensor(w.c, id));
  await_connections(g_client, 2);
  int fds_before = kiln_test_fd_count(g_kilnd.pid);

  long rss_before = kiln_test_rss_kib(g_kilnd.pid);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, work, &w), 0);

  static const uint8_t partial[] = {0x94, 0x00, 0x01, 0xa4, 'p', 'i'}; /* [0, 1, "pi... */
  for (int i = 0; i < 10000; i++) {
    kiln_client_t *c = fixture_connect(i % 2 ? g_kilnd.tcp_url : g_kilnd.unix_url);
    uint32_t id;
    switch (i % 4) {
      case 0: break; /* connect and drop */
      case 1: /* a request whose reply is never read */
        ASSERT_OK(kiln_client_submit_ping(c, &id));
        ASSERT_OK(kiln_client_flush(c));
        break;
      case 2: /* half a message */
        cr_assert_eq(send(kiln_client_fd(c), partial, sizeof(partial), MSG_NOSIGNAL),
                     (ssize_t)sizeof(partial));
        break;
      case 3: /* a full round trip */
        ASSERT_OK(kiln_client_ping(c));
        break;
    }
    kiln_client_destroy(c);
  }
  atomic_store(&w.stop, true);
  pthread_join(t, NULL);
  ASSERT_OK(w.error);
  cr_assert_gt(w.calls, 0);

  await_connections(g_client, 2);
  /* kilnd may count a connection gone a loop iteration before its socket is closed
   * (uv_close completes later): give it a few round trips to settle. */
  int fds_after = kiln_test_fd_count(g_kilnd.pid);
  for (int i = 0; i < 1000 && fds_after != fds_before; i++) {
    ASSERT_OK(kiln_client_ping(g_client));
    fds_after = kiln_test_fd_count(g_kilnd.pid);
  }
  if (fds_after != fds_before) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd >&2", (int)g_kilnd.pid);
    if (system(cmd) != 0) cr_log_warn("cannot list kilnd's fds");
  }
  cr_expect_eq(fds_after, fds_before, "kilnd had %d fds before the churn and %d after",
               fds_before, fds_after);
  long rss_after = kiln_test_rss_kib(g_kilnd.pid);
  cr_log_info("worker calls during churn: %llu; kilnd RSS %ld -> %ld KiB",
              (unsigned long long)w.calls, rss_before, rss_after);
  kiln_client_destroy(w.c);
}
