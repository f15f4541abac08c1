/* The remote artifact tier (server/fleet/remote.c) on a libuv loop against a real
 * redis-server this test starts on a unix socket: builds put while Redis is down reach it
 * when it comes up, all of them, even when the queue is at its bound (256 builds, 64 MiB) and
 * the command deadline is short; and what was put is a hit, byte for byte. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "server/fleet/remote.h"

#include <hiredis/hiredis.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#define REDIS_SERVER "/usr/bin/redis-server"

typedef struct fixture {
  char dir[40], sock[64], secret[64], url[80];
  pid_t redis;
  uv_loop_t loop;
  uv_timer_t tick; /* keeps UV_RUN_ONCE from blocking for long */
} fixture_t;

static void on_tick(uv_timer_t *t) { (void)t; }

static void setup(fixture_t *f) {
  if (access(REDIS_SERVER, X_OK) != 0) cr_skip_test("no %s", REDIS_SERVER);
  snprintf(f->dir, sizeof(f->dir), "/tmp/kiln-fleet-redis-XXXXXX");
  cr_assert(mkdtemp(f->dir));
  snprintf(f->sock, sizeof(f->sock), "%s/redis.sock", f->dir);
  snprintf(f->secret, sizeof(f->secret), "%s/secret", f->dir);
  snprintf(f->url, sizeof(f->url), "unix:%s", f->sock);
  int fd = open(f->secret, O_WRONLY | O_CREAT | O_EXCL, 0600);
  cr_assert(fd >= 0);
  cr_assert_eq(write(fd, "0123456789abcdef0123456789abcdef", 32), 32);
  close(fd);
  cr_assert_eq(uv_loop_init(&f->loop), 0);
  uv_timer_init(&f->loop, &f->tick);
  uv_timer_start(&f->tick, on_tick, 10, 10);
}

static void wait_for_socket(fixture_t *f, const char *what);

static void redis_start(fixture_t *f, const char *maxmemory) {
  f->redis = fork();
  cr_assert(f->redis >= 0);
  if (f->redis == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    execl(REDIS_SERVER, "redis-server", "--port", "0", "--unixsocket", f->sock, "--save", "", "--appendonly",
          "no", "--dir", f->dir, "--maxmemory", maxmemory, "--maxmemory-policy", "noeviction", (char *)NULL);
    _exit(127);
  }
  wait_for_socket(f, "redis-server");
}

/* Waits up to 5 s for f->sock to accept. */
static void wait_for_socket(fixture_t *f, const char *what) {
  for (int i = 0; i < 500; i++) {
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", f->sock);
    bool ok = connect(s, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(s);
    if (ok) return;
    usleep(10000);
  }
  cr_assert_fail("%s did not start", what);
}

static void redis_kill(fixture_t *f) {
  if (f->redis > 0) {
    kill(f->redis, SIGKILL);
    waitpid(f->redis, NULL, 0);
  }
  f->redis = 0;
  unlink(f->sock);
}

static void teardown(fixture_t *f) {
  redis_kill(f);
  uv_close((uv_handle_t *)&f->tick, NULL);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  uv_loop_close(&f->loop);
  unlink(f->secret);
  unlink(f->sock);
  rmdir(f->dir);
}

/* Runs the loop until *done or the deadline; true when done. */
static bool run_until(fixture_t *f, bool (*done)(void *), void *arg, double seconds) {
  uint64_t end = kiln_now_ns() + (uint64_t)(seconds * 1e9);
  while (!done(arg) && kiln_now_ns() < end) uv_run(&f->loop, UV_RUN_ONCE);
  return done(arg);
}

/* A counter of the tier's stats (its offset in kiln_remote_stats_t) that reached n. */
typedef struct want {
  kiln_remote_t *rc;
  size_t field;
  uint64_t n;
} want_t;
#define WANT(rc, field, n) ((want_t){(rc), offsetof(kiln_remote_stats_t, field), (n)})

static bool reached(void *arg) {
  want_t *w = arg;
  kiln_remote_stats_t s;
  kiln_remote_stats(w->rc, &s);
  uint64_t v;
  memcpy(&v, (const char *)&s + w->field, sizeof(v));
  return v >= w->n;
}

static bool is_up(void *arg) {
  kiln_remote_stats_t s;
  kiln_remote_stats(arg, &s);
  return s.redis.up;
}

typedef struct got {
  bool called;
  uint8_t *bytes;
  size_t len;
} got_t;

static void on_got(void *arg, const uint8_t *bytes, size_t len, void *block) {
  got_t *g = arg;
  g->called = true;
  g->len = len;
  g->bytes = bytes ? malloc(len) : NULL;
  if (bytes) memcpy(g->bytes, bytes, len);
  /* the block is the reply's buffer: hiredis's string, or (1 MiB) the reader's buffer it was read
   * into, where the bytes follow the RESP header and what was left of earlier replies (< 1 KiB) */
  cr_expect(!bytes == !block && (!block || (bytes > (uint8_t *)block && bytes < (uint8_t *)block + 2048)),
            "bytes at %td of their block", bytes ? bytes - (const uint8_t *)block : 0);
  free(block); /* the callee's */
}

static bool got(void *arg) { return ((got_t *)arg)->called; }

static void fill(uint8_t *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)((i * 2654435761u + seed) >> 13);
}

/* Sets f up and makes a tier while Redis is down, puts n builds of len bytes (queued: key i
 * holds fill(i); *buf is a scratch buffer of len bytes), then starts Redis. */
static kiln_remote_t *queued_tier(fixture_t *f, uint32_t timeout_ms, size_t n, size_t len, const char *maxmemory,
                                  uint8_t **buf) {
  setup(f);
  kiln_remote_config_t cfg = {.redis = {.url = f->url, .what = "cache_remote", .timeout_ms = timeout_ms},
                              .secret_file = f->secret};
  kiln_remote_t *rc = NULL;
  cr_assert_eq(kiln_remote_create(&f->loop, &cfg, &rc), KILN_OK); /* Redis down: no error */
  *buf = malloc(len);
  for (uint32_t i = 0; i < n; i++) {
    uint8_t key[KILN_REMOTE_KEY_BYTES] = {0};
    memcpy(key, &i, sizeof(i));
    fill(*buf, len, i);
    kiln_remote_put(rc, key, *buf, len);
  }
  kiln_remote_stats_t s;
  kiln_remote_stats(rc, &s);
  cr_assert_eq(s.requeued, n);
  cr_assert_eq(s.requeue_dropped, 0);
  redis_start(f, maxmemory);
  return rc;
}

/* A tier whose builds were queued while Redis was down (queued_tier), and what it is at. */
typedef struct queued {
  fixture_t f;
  kiln_remote_t *rc;
  uint8_t *buf;
  kiln_remote_stats_t s;
} queued_t;

/* queued_tier into q, then the loop until the counter at `field` of its stats (offsetof)
 * reaches `count` within `seconds`; q->s: the stats then. */
static void queued_until(queued_t *q, uint32_t timeout_ms, size_t n, size_t len, const char *maxmemory, size_t field,
                         uint64_t count, double seconds) {
  q->rc = queued_tier(&q->f, timeout_ms, n, len, maxmemory, &q->buf);
  want_t w = {q->rc, field, count};
  cr_assert(run_until(&q->f, reached, &w, seconds), "the counter at %zu did not reach %llu", field,
            (unsigned long long)count);
  kiln_remote_stats(q->rc, &q->s);
}

static void finish(fixture_t *f, kiln_remote_t *rc, uint8_t *buf) {
  free(buf);
  kiln_remote_destroy(rc);
  teardown(f);
}

/* Looks key i up and expects fill(i), len bytes (0: a miss). */
static void expect_entry(fixture_t *f, kiln_remote_t *rc, uint32_t i, size_t len) {
  uint8_t key[KILN_REMOTE_KEY_BYTES] = {0};
  memcpy(key, &i, sizeof(i));
  got_t g = {0};
  cr_assert(run_until(f, is_up, rc, 10));
  cr_assert(kiln_remote_get(rc, key, on_got, &g));
  cr_assert(run_until(f, got, &g, 10));
  uint8_t *want = malloc(len ? len : 1);
  fill(want, len, i);
  if (len) cr_expect(g.bytes && g.len == len && memcmp(g.bytes, want, len) == 0, "entry %u", i);
  else cr_expect(!g.bytes, "entry %u: a hit", i);
  free(want);
  free(g.bytes);
}

/* Review item: the re-put after an outage sent the whole queue at once, every SET under the
 * same deadline, so a queue at its bound could time out as a whole (and every put in flight
 * was lost). Paced, every build arrives though the deadline is short beside the queue. */
Test(fleet_redis, a_full_requeue_reaches_redis_under_a_short_deadline) {
  queued_t q = {0};
  const size_t n = KILN_REMOTE_REQUEUE_ENTRIES, len = KILN_REMOTE_REQUEUE_BYTES / KILN_REMOTE_REQUEUE_ENTRIES;
  queued_until(&q, 250, n, len, "0", offsetof(kiln_remote_stats_t, requeue_sent), n, 60);
  cr_expect_eq(q.s.puts, n, "puts %llu of %zu (errors %llu, timeouts %llu)", (unsigned long long)q.s.puts, n,
               (unsigned long long)q.s.put_errors, (unsigned long long)q.s.redis.timeouts);
  /* On a loaded machine even 4 MiB can pass 250 ms: a SET that timed out was queued again and
   * sent later (put_errors counts the attempt). Sent all at once, the queue would time out
   * again at every reconnect and never finish. */
  cr_expect_eq(q.s.requeue_dropped, 0);
  cr_expect_eq(q.s.bytes_written, (uint64_t)n * len);
  /* The first, a middle and the last build are hits, byte for byte. */
  expect_entry(&q.f, q.rc, 0, len);
  expect_entry(&q.f, q.rc, (uint32_t)n / 2, len);
  expect_entry(&q.f, q.rc, (uint32_t)n - 1, len);
  finish(&q.f, q.rc, q.buf);
}

/* Redis killed while the queue drains: the builds it had not answered go back to the queue
 * and reach the next Redis; none is dropped. */
Test(fleet_redis, builds_in_flight_when_redis_dies_are_queued_again) {
  queued_t q = {0};
  const size_t n = 64, len = 1u << 20;
  queued_until(&q, 0, n, len, "0", offsetof(kiln_remote_stats_t, requeue_sent), 8, 30);
  redis_kill(&q.f);
  kiln_remote_stats(q.rc, &q.s);
  cr_assert_lt(q.s.requeue_sent, n, "the whole queue was sent before the kill: nothing tested");
  redis_start(&q.f, "0");
  want_t d = WANT(q.rc, requeue_sent, n);
  cr_assert(run_until(&q.f, reached, &d, 60), "the requeue did not finish");
  kiln_remote_stats(q.rc, &q.s);
  cr_expect_eq(q.s.requeue_sent, n);
  cr_expect_eq(q.s.requeue_dropped, 0);
  expect_entry(&q.f, q.rc, (uint32_t)n - 1, len); /* in the queue or in flight at the kill */
  finish(&q.f, q.rc, q.buf);
}

/* Review item H6: a queued build whose SET cannot finish within the deadline was put back at
 * the head of the queue at every drop and sent first at every reconnect: the tier timed out
 * forever. Redis stopped (SIGSTOP) past the deadline while the queued SET is in flight, twice:
 * the first drop queues it again, the second drops it, and the tier comes back up and works. */
static void stop_while_in_flight(fixture_t *f, kiln_remote_t *rc, uint64_t drops) {
  cr_assert(run_until(f, is_up, rc, 10));
  /* on_up sent the queued SET; its bytes leave on a later turn of the loop, unanswered */
  cr_assert_eq(kill(f->redis, SIGSTOP), 0);
  kiln_remote_stats_t s;
  kiln_remote_stats(rc, &s);
  cr_assert_eq(s.requeue_sent, 0, "the SET was answered before the stop: nothing tested");
  want_t d = WANT(rc, redis.disconnects, drops);
  cr_assert(run_until(f, reached, &d, 10), "the stalled SET did not time out");
  cr_assert_eq(kill(f->redis, SIGCONT), 0);
}

Test(fleet_redis, a_queued_build_that_times_out_twice_is_dropped_and_the_tier_recovers) {
  fixture_t f = {0};
  const size_t len = 1u << 20;
  uint8_t *buf;
  kiln_remote_t *rc = queued_tier(&f, 300, 1, len, "0", &buf);
  stop_while_in_flight(&f, rc, 1);
  kiln_remote_stats_t s;
  kiln_remote_stats(rc, &s);
  cr_expect(s.put_errors == 1 && s.requeue_dropped == 0, "first drop: errors %llu dropped %llu",
            (unsigned long long)s.put_errors, (unsigned long long)s.requeue_dropped);
  stop_while_in_flight(&f, rc, 2); /* sent again at the reconnect, stalled again */
  want_t dropped = WANT(rc, requeue_dropped, 1);
  cr_assert(run_until(&f, reached, &dropped, 10));
  /* Up again, and it stays up: nothing is sent first at the reconnect any more. */
  cr_assert(run_until(&f, is_up, rc, 10));
  uint32_t k = 7;
  uint8_t key[KILN_REMOTE_KEY_BYTES] = {0};
  memcpy(key, &k, sizeof(k));
  fill(buf, 4096, k);
  kiln_remote_put(rc, key, buf, 4096);
  want_t stored = WANT(rc, puts, 1);
  cr_assert(run_until(&f, reached, &stored, 10));
  expect_entry(&f, rc, k, 4096);
  kiln_remote_stats(rc, &s);
  cr_expect(s.requeue_dropped == 1 && s.requeue_sent == 0 && s.put_errors == 2 && s.puts == 1,
            "dropped %llu sent %llu errors %llu puts %llu", (unsigned long long)s.requeue_dropped,
            (unsigned long long)s.requeue_sent, (unsigned long long)s.put_errors, (unsigned long long)s.puts);
  cr_expect_eq(s.redis.disconnects, 2);
  cr_expect(s.redis.up);
  finish(&f, rc, buf);
}

/* A Redis that refuses the SETs (full, noeviction): each queued build is tried once, counted
 * in put_errors and dropped; the drain ends, the connection stays up. */
Test(fleet_redis, a_redis_that_refuses_every_put_ends_the_drain) {
  queued_t q = {0};
  const size_t n = 16, len = 1u << 20;
  queued_until(&q, 0, n, len, "1mb", offsetof(kiln_remote_stats_t, put_errors), n, 30);
  cr_expect(q.s.put_errors == n && q.s.puts == 0 && q.s.requeue_sent == 0, "puts %llu errors %llu",
            (unsigned long long)q.s.puts, (unsigned long long)q.s.put_errors);
  cr_expect(q.s.redis.up && q.s.redis.disconnects == 0);
  expect_entry(&q.f, q.rc, 0, 0);
  finish(&q.f, q.rc, q.buf);
}

/* A synchronous connection of the test's own, to change what Redis holds. */
static redisContext *raw(fixture_t *f) {
  redisContext *c = redisConnectUnix(f->sock);
  cr_assert(c && !c->err);
  return c;
}

static void raw_cmd(redisContext *c, int argc, const char **argv, const size_t *lens) {
  redisReply *r = redisCommandArgv(c, argc, argv, lens);
  cr_assert(r && r->type != REDIS_REPLY_ERROR, "%s", r ? r->str : c->errstr);
  freeReplyObject(r);
}

/* Large entries are MACed as they arrive (on_progress), the tail when the reply is whole.
 * Every change to an entry of 1 MiB in Redis is refused, deleted and counted, never served,
 * and the build put again (as kilnd does after building it here) is a hit: one bit anywhere
 * (the magic, the length, the key, the nonce, the tag, the first payload byte, one in the
 * middle, the last), cut short, grown, another key's entry, the nonce of another seal of the
 * same build (its tag with our nonce), an entry sealed with another secret (a forger's), and
 * the same build in the first format (KILNRMT1, a good HMAC-SHA256 under our secret, as an
 * older kilnd wrote it: counted in old_format too). And a 64 KiB - 1 entry (MACed in one
 * pass). */
enum { CUT = -6, GROWN, OTHER_KEY, OTHER_NONCE, OTHER_SECRET, OLD_FORMAT }; /* else: flip a bit there */

/* The entry e (n bytes, key's sealed build) changed as `how` says, in a new buffer. */
static char *tampered(int how, const char *e, size_t n, const char *other, size_t other_n, const uint8_t *key,
                      size_t *out_n) {
  char *t = malloc(n + 1);
  memcpy(t, e, n);
  *out_n = n;
  size_t len = n - KILN_REMOTE_HEADER_BYTES;
  if (how >= 0) {
    t[how] ^= 0x01;
  } else if (how == CUT) {
    *out_n = n - 1;
  } else if (how == GROWN) {
    t[(*out_n)++] = 'x';
  } else if (how == OTHER_KEY) {
    free(t);
    t = malloc(other_n);
    memcpy(t, other, other_n);
    *out_n = other_n;
  } else if (how == OTHER_NONCE) { /* a second seal of the same build: its nonce, our tag */
    uint8_t *again = malloc(n);
    cr_assert(kiln_remote_seal((const uint8_t *)"0123456789abcdef0123456789abcdef", 32, key,
                               (const uint8_t *)e + KILN_REMOTE_HEADER_BYTES, len, again));
    memcpy(t + 48, again + 48, 16);
    free(again);
  } else if (how == OTHER_SECRET) {
    cr_assert(kiln_remote_seal((const uint8_t *)"another fleet's secret, 32 bytes", 32, key,
                               (const uint8_t *)e + KILN_REMOTE_HEADER_BYTES, len, (uint8_t *)t));
  } else if (how == OLD_FORMAT) {
    memcpy(t, "KILNRMT1", 8);
    unsigned int ml = 0;
    char *msg = malloc(48 + len);
    memcpy(msg, t, 48);
    memcpy(msg + 48, e + KILN_REMOTE_HEADER_BYTES, len);
    cr_assert(HMAC(EVP_sha256(), "0123456789abcdef0123456789abcdef", 32, (const uint8_t *)msg, 48 + len,
                   (uint8_t *)t + 48, &ml));
    free(msg);
  }
  return t;
}

Test(fleet_redis, a_large_entry_changed_anywhere_is_refused_as_it_streams) {
  fixture_t f = {0};
  setup(&f);
  redis_start(&f, "0");
  kiln_remote_config_t cfg = {.redis = {.url = f.url, .what = "cache_remote"}, .secret_file = f.secret};
  kiln_remote_t *rc = NULL;
  cr_assert_eq(kiln_remote_create(&f.loop, &cfg, &rc), KILN_OK);
  cr_assert(run_until(&f, is_up, rc, 10));
  const size_t len = 1u << 20, small = (64u << 10) - 1;
  uint8_t *buf = malloc(len);
  uint32_t k0 = 0, k1 = 1;
  uint8_t key[KILN_REMOTE_KEY_BYTES] = {0};
  fill(buf, len, k0);
  kiln_remote_put(rc, key, buf, len);
  want_t stored = WANT(rc, puts, 1);
  cr_assert(run_until(&f, reached, &stored, 10));
  expect_entry(&f, rc, k0, len);
  uint8_t key1[KILN_REMOTE_KEY_BYTES] = {0};
  memcpy(key1, &k1, sizeof(k1));
  uint8_t *buf1 = malloc(small);
  fill(buf1, small, k1);
  kiln_remote_put(rc, key1, buf1, small);
  free(buf1);
  redisContext *c = raw(&f);
  char name[sizeof("kiln:art:") + 64], name1[sizeof(name)];
  memcpy(name, "kiln:art:", 9);
  kiln_hex(key, KILN_REMOTE_KEY_BYTES, name + 9);
  memcpy(name1, "kiln:art:", 9);
  kiln_hex(key1, KILN_REMOTE_KEY_BYTES, name1 + 9);
  redisReply *other = NULL;
  for (int i = 0; i < 500 && !(other && other->type == REDIS_REPLY_STRING); i++) {
    freeReplyObject(other);
    uv_run(&f.loop, UV_RUN_NOWAIT);
    other = redisCommand(c, "GET %s", name1);
  }
  cr_assert(other && other->type == REDIS_REPLY_STRING && other->len == KILN_REMOTE_HEADER_BYTES + small);
  expect_entry(&f, rc, k1, small);
  redisReply *good = redisCommand(c, "GET %s", name);
  cr_assert(good && good->type == REDIS_REPLY_STRING && good->len == KILN_REMOTE_HEADER_BYTES + len);
  cr_assert(memcmp(good->str, "KILNRMT2", 8) == 0);
  size_t n = good->len;
  const int how[] = {0, 8, 20, 47, 48, 63, 64, 79, KILN_REMOTE_HEADER_BYTES, KILN_REMOTE_HEADER_BYTES + (64 << 10),
                     (int)n / 2, (int)n - 1, CUT, GROWN, OTHER_KEY, OTHER_NONCE, OTHER_SECRET, OLD_FORMAT};
  kiln_remote_stats_t s;
  uint64_t puts = 1 + 1;
  for (size_t i = 0; i < sizeof(how) / sizeof(how[0]); i++) {
    size_t elen;
    char *e = tampered(how[i], good->str, n, other->str, other->len, key, &elen);
    const char *argv[] = {"SET", name, e};
    size_t lens[] = {3, strlen(name), elen};
    raw_cmd(c, 3, argv, lens);
    free(e);
    kiln_remote_stats(rc, &s);
    uint64_t corrupt = s.corrupt, old = s.old_format;
    got_t g = {0};
    cr_assert(kiln_remote_get(rc, key, on_got, &g));
    cr_assert(run_until(&f, got, &g, 10));
    /* refused: the lookup then takes the build lock and builds here (a miss) */
    cr_expect(!g.bytes, "change %d was served", how[i]);
    free(g.bytes);
    kiln_remote_stats(rc, &s);
    cr_expect_eq(s.corrupt, corrupt + 1, "change %d not counted", how[i]);
    cr_expect_eq(s.old_format, old + (how[i] == OLD_FORMAT), "change %d: old_format %llu", how[i],
                 (unsigned long long)s.old_format);
    /* rebuilt: the build put again (it lets the lock go) is a hit, byte for byte */
    kiln_remote_put(rc, key, buf, len);
    want_t again = WANT(rc, puts, ++puts);
    cr_assert(run_until(&f, reached, &again, 10));
    expect_entry(&f, rc, k0, len);
  }
  freeReplyObject(other);
  freeReplyObject(good);
  redisFree(c);
  finish(&f, rc, buf);
}

/* --- hostile replies: a fake Redis ------------------------------------------------------------ */

/* How the fake sends its GETRANGE reply. */
enum { WHOLE, DRIP, CUT_OFF, STALL, THEN_HALF };

/* A child on f->sock that answers like Redis: +PONG to PING, the given bytes to GETRANGE
 * (WHOLE: in one write; DRIP: its first and last 300 bytes one byte a write, apart, the rest in
 * 64 KiB writes; CUT_OFF: whole, then it closes the connection; STALL: whole, then silence;
 * THEN_HALF: whole to a connection's first GETRANGE, its first half to the next, then the
 * connection closed),
 * :1 or +OK to anything else; connection after connection, until killed. */
static void fake_start(fixture_t *f, const char *reply, size_t n, int how) {
  int ls = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof(a.sun_path), "%s", f->sock);
  cr_assert(ls >= 0 && bind(ls, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(ls, 8) == 0);
  f->redis = fork();
  cr_assert(f->redis >= 0);
  if (f->redis > 0) {
    close(ls);
    wait_for_socket(f, "the fake Redis");
    return;
  }
  signal(SIGPIPE, SIG_IGN);
  for (;;) {
    int c = accept(ls, NULL, NULL);
    if (c < 0) _exit(1);
    char in[4096];
    ssize_t got;
    bool open_ = true;
    int getranges = 0;
    while (open_ && (got = read(c, in, sizeof(in) - 1)) > 0) {
      in[got] = 0;
      if (strstr(in, "PING")) {
        if (write(c, "+PONG\r\n", 7) != 7) break;
      } else if (strstr(in, "GETRANGE")) {
        size_t at = 0, end = how == THEN_HALF && getranges++ > 0 ? n / 2 : n;
        while (at < end) {
          bool drip = how == DRIP && (at < 300 || at >= n - 300);
          size_t step = drip ? 1 : how == DRIP ? (n - 300 - at < 65536 ? n - 300 - at : 65536) : end - at;
          ssize_t w = write(c, reply + at, step);
          if (w <= 0) break;
          at += (size_t)w;
          if (drip) usleep(100);
        }
        if (how == CUT_OFF || end < n) open_ = false;
        if (how == STALL) pause();
      } else if (strstr(in, "DEL")) {
        if (write(c, ":1\r\n", 4) != 4) break;
      } else if (write(c, "+OK\r\n", 5) != 5) {
        break;
      }
    }
    close(c);
  }
}

static char *resp_bulk(const char *header, const uint8_t *e, size_t n, const char *trailer, size_t *out_n) {
  size_t h = strlen(header), t = strlen(trailer);
  char *b = malloc(h + n + t);
  memcpy(b, header, h);
  memcpy(b + h, e, n);
  memcpy(b + h + n, trailer, t);
  *out_n = h + n + t;
  return b;
}

/* An entry of len bytes under key sealed with the test's secret (*out_payload: its payload,
 * fill(seed)), and in head the length line of its bulk reply. */
static uint8_t *sealed_entry(const uint8_t key[KILN_REMOTE_KEY_BYTES], uint32_t seed, size_t len,
                             uint8_t **out_payload, char head[32]) {
  size_t n = KILN_REMOTE_HEADER_BYTES + len;
  uint8_t *payload = malloc(len), *e = malloc(n);
  fill(payload, len, seed);
  cr_assert(kiln_remote_seal((const uint8_t *)"0123456789abcdef0123456789abcdef", 32, key, payload, len, e));
  snprintf(head, 32, "$%zu\r\n", n);
  *out_payload = payload;
  return e;
}

/* One look-up against a fake answering GETRANGE with `reply`: what it got, and the stats. */
static void fake_lookup(const char *reply, size_t n, int how, const uint8_t key[KILN_REMOTE_KEY_BYTES], got_t *g,
                        kiln_remote_stats_t *s) {
  fixture_t f = {0};
  setup(&f);
  fake_start(&f, reply, n, how);
  kiln_remote_config_t cfg = {.redis = {.url = f.url, .what = "cache_remote", .timeout_ms = 500},
                              .secret_file = f.secret, .max_bytes = 2u << 20};
  kiln_remote_t *rc = NULL;
  cr_assert_eq(kiln_remote_create(&f.loop, &cfg, &rc), KILN_OK);
  cr_assert(run_until(&f, is_up, rc, 10));
  cr_assert(kiln_remote_get(rc, key, on_got, g));
  cr_assert(run_until(&f, got, g, 10), "no answer");
  kiln_remote_stats(rc, s);
  kiln_remote_destroy(rc);
  teardown(&f);
}

/* The GETRANGE reply is read from the socket once, into the buffer the hit hands on (the
 * reader's, not a copy of it), whether it comes whole or a byte at a time; and a reply whose
 * declared length is wrong (short, long then cut off, long then silent), past the bound,
 * negative, not a number, or whose bytes are not followed by CRLF, is a clean miss: no crash,
 * no read past the reply (the bytes after the entry are the fake's), the connection dropped
 * with a log line (redis_bad_reply, or the deadline's and the close's redis_down). */
Test(fleet_redis, hostile_getrange_replies_are_clean_misses) {
  const size_t len = 1u << 20, n = KILN_REMOTE_HEADER_BYTES + len;
  uint8_t key[KILN_REMOTE_KEY_BYTES] = {0x17}, *payload;
  char head[32];
  uint8_t *e = sealed_entry(key, 17, len, &payload, head);
  for (int how = WHOLE; how <= DRIP; how++) { /* good: hits, read in place */
    size_t rn;
    char *reply = resp_bulk(head, e, n, "\r\n", &rn);
    got_t g = {0};
    kiln_remote_stats_t s;
    fake_lookup(reply, rn, how, key, &g, &s);
    cr_expect(g.bytes && g.len == len && memcmp(g.bytes, payload, len) == 0, "mode %d: not a hit", how);
    cr_expect(s.hits == 1 && s.redis.taken == 1, "mode %d: hits %llu taken %llu", how, (unsigned long long)s.hits,
              (unsigned long long)s.redis.taken);
    free(g.bytes);
    free(reply);
  }
  char longer[32], over[32];
  snprintf(longer, sizeof(longer), "$%zu\r\n", n + 100);
  snprintf(over, sizeof(over), "$%llu\r\n", (2ull << 20) + KILN_REMOTE_HEADER_BYTES + (1u << 20) + 1);
  struct {
    const char *head, *trailer;
    size_t body;
    int how;
  } bad[] = {
      {"$10\r\n", "\r\n", n, WHOLE},                      /* shorter than what follows */
      {"$10\r\n", "\r\n", n, DRIP},
      {longer, "\r\n", n, CUT_OFF},                       /* longer, then the connection ends */
      {longer, "\r\n", n, STALL},                         /* longer, then nothing: the deadline */
      {"$99999999999999999999999\r\n", "\r\n", n, WHOLE}, /* past 64 bits */
      {"$9223372036854775807\r\n", "\r\n", n, WHOLE},     /* past the bound */
      {over, "\r\n", n, DRIP},
      {"$-5\r\n", "", 0, WHOLE},                          /* negative */
      {"$-5\r\n", "", 0, DRIP},
      {"$-1048656\r\n", "\r\n", n, WHOLE},
      {"$12a\r\n", "\r\n", n, WHOLE},                     /* not a number */
      {"$+1048656\r\n", "\r\n", n, DRIP},
      {head, "XY", n, WHOLE},                             /* no CRLF after the bytes */
      {head, "\rX", n, DRIP},
      {head, "", n - 1, CUT_OFF},                         /* cut off inside the bytes */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    size_t rn;
    char *reply = resp_bulk(bad[i].head, e, bad[i].body, bad[i].trailer, &rn);
    got_t g = {0};
    kiln_remote_stats_t s;
    fake_lookup(reply, rn, bad[i].how, key, &g, &s);
    cr_expect(!g.bytes && s.hits == 0, "case %zu (%s) was served", i, bad[i].head);
    cr_expect(s.redis.errors + s.redis.timeouts + s.redis.disconnects >= 1, "case %zu (%s): no error counted", i,
              bad[i].head);
    free(g.bytes);
    free(reply);
  }
  free(payload);
  free(e);
}

/* --- the spare receive buffer (redis.c spare_adopt) ------------------------------------------- */

static bool spare_ready(void *arg) {
  kiln_remote_stats_t s;
  kiln_remote_stats(arg, &s);
  return s.redis.spare_ready;
}

/* A tier on a real Redis of its own (max_bytes 0: the default), up. */
static kiln_remote_t *live_tier(fixture_t *f, uint64_t max_bytes) {
  setup(f);
  redis_start(f, "0");
  kiln_remote_config_t cfg = {.redis = {.url = f->url, .what = "cache_remote"}, .secret_file = f->secret,
                              .max_bytes = max_bytes};
  kiln_remote_t *rc = NULL;
  cr_assert_eq(kiln_remote_create(&f->loop, &cfg, &rc), KILN_OK);
  cr_assert(run_until(f, is_up, rc, 10));
  return rc;
}

/* Puts entry i (fill(i), len bytes) and waits until Redis has it. */
static void put_entry(fixture_t *f, kiln_remote_t *rc, uint32_t i, size_t len) {
  uint8_t key[KILN_REMOTE_KEY_BYTES] = {0};
  memcpy(key, &i, sizeof(i));
  uint8_t *buf = malloc(len);
  fill(buf, len, i);
  kiln_remote_stats_t s;
  kiln_remote_stats(rc, &s);
  kiln_remote_put(rc, key, buf, len);
  free(buf);
  want_t w = WANT(rc, puts, s.puts + 1);
  cr_assert(run_until(f, reached, &w, 30));
}

/* expect_entry, then the spare's counters: large replies read into it, and read without it. */
static void expect_spare(fixture_t *f, kiln_remote_t *rc, uint32_t i, size_t len, uint64_t used, uint64_t missed) {
  expect_entry(f, rc, i, len);
  kiln_remote_stats_t s;
  kiln_remote_stats(rc, &s);
  cr_expect(s.redis.spare_used == used && s.redis.spare_missed == missed,
            "entry %u: spare used %llu missed %llu, want %llu %llu", i, (unsigned long long)s.redis.spare_used,
            (unsigned long long)s.redis.spare_missed, (unsigned long long)used, (unsigned long long)missed);
  cr_expect_leq(s.redis.spare_bytes, KILN_REDIS_SPARE_MAX);
}

/* A large hit is read into the spare made on the thread pool (the first large reply sizes it),
 * byte for byte, and is still MAC-checked: an entry changed in Redis and read into the spare is
 * refused and deleted. */
Test(fleet_redis, hits_read_into_the_spare_are_byte_identical_and_maced) {
  fixture_t f = {0};
  kiln_remote_t *rc = live_tier(&f, 0);
  const size_t len = 1u << 20;
  for (uint32_t i = 0; i < 4; i++) put_entry(&f, rc, i, len);
  kiln_remote_stats_t s;
  kiln_remote_stats(rc, &s);
  cr_expect(!s.redis.spare_ready && s.redis.spare_bytes == 0, "a spare before any large reply");
  expect_spare(&f, rc, 0, len, 0, 1); /* none yet: read as before, and the spare is sized for it */
  cr_assert(run_until(&f, spare_ready, rc, 10));
  kiln_remote_stats(rc, &s);
  cr_expect(s.redis.spare_bytes > len && s.redis.spare_bytes < 2 * len, "a spare of %llu bytes",
            (unsigned long long)s.redis.spare_bytes);
  expect_spare(&f, rc, 1, len, 1, 1);
  cr_assert(run_until(&f, spare_ready, rc, 10));
  expect_spare(&f, rc, 2, len, 2, 1);
  /* entry 3 with its last byte changed in Redis */
  uint32_t k = 3;
  uint8_t key[KILN_REMOTE_KEY_BYTES] = {0};
  memcpy(key, &k, sizeof(k));
  char name[sizeof("kiln:art:") + 64], at[24];
  memcpy(name, "kiln:art:", 9);
  kiln_hex(key, KILN_REMOTE_KEY_BYTES, name + 9);
  snprintf(at, sizeof(at), "%zu", KILN_REMOTE_HEADER_BYTES + len - 1);
  redisContext *c = raw(&f);
  redisReply *last = redisCommand(c, "GETRANGE %s %s %s", name, at, at);
  cr_assert(last && last->type == REDIS_REPLY_STRING && last->len == 1);
  char flipped[2] = {(char)(last->str[0] ^ 1), 0};
  freeReplyObject(last);
  const char *argv[] = {"SETRANGE", name, at, flipped};
  raw_cmd(c, 4, argv, NULL);
  redisFree(c);
  cr_assert(run_until(&f, spare_ready, rc, 10));
  kiln_remote_stats(rc, &s);
  uint64_t corrupt = s.corrupt;
  expect_spare(&f, rc, 3, 0, 3, 1); /* read into the spare, refused: a miss */
  kiln_remote_stats(rc, &s);
  cr_expect_eq(s.corrupt, corrupt + 1);
  finish(&f, rc, NULL);
}

/* Replies larger than the spare are read as without one and the spare is made again for their
 * size, off the loop: back to back, the second fits. One past KILN_REDIS_SPARE_MAX never goes
 * into a spare (the spare is kept for the next), and a spare over twice a reply's size is made
 * again for it rather than adopted. Every hit byte for byte. */
Test(fleet_redis, replies_larger_than_the_spare_are_read_as_before_and_resize_it) {
  fixture_t f = {0};
  kiln_remote_t *rc = live_tier(&f, 16u << 20);
  const size_t mib = 1u << 20, lens[] = {mib, 3 * mib, 12 * mib};
  for (uint32_t i = 0; i < 3; i++) put_entry(&f, rc, i, lens[i]);
  expect_spare(&f, rc, 0, mib, 0, 1);
  cr_assert(run_until(&f, spare_ready, rc, 10));
  expect_spare(&f, rc, 1, 3 * mib, 0, 2); /* larger than the spare */
  cr_assert(run_until(&f, spare_ready, rc, 10));
  kiln_remote_stats_t s;
  kiln_remote_stats(rc, &s);
  cr_expect(s.redis.spare_bytes > 3 * mib, "the spare was not made again larger: %llu bytes",
            (unsigned long long)s.redis.spare_bytes);
  expect_spare(&f, rc, 1, 3 * mib, 1, 2); /* the same size, back to back: it fits */
  cr_assert(run_until(&f, spare_ready, rc, 10));
  expect_spare(&f, rc, 2, 12 * mib, 1, 3); /* past the spare's bound */
  cr_expect(spare_ready(rc), "the spare was given up for a reply it can never hold");
  expect_spare(&f, rc, 2, 12 * mib, 1, 4);
  expect_spare(&f, rc, 0, mib, 1, 5); /* the spare is over twice its size */
  cr_assert(run_until(&f, spare_ready, rc, 10));
  kiln_remote_stats(rc, &s);
  cr_expect(s.redis.spare_bytes > mib && s.redis.spare_bytes < 2 * mib, "a spare of %llu bytes",
            (unsigned long long)s.redis.spare_bytes);
  expect_spare(&f, rc, 0, mib, 2, 5);
  finish(&f, rc, NULL);
}

/* libuv's thread pool, one thread (UV_THREADPOOL_SIZE, set before its first use in this test's
 * process), taken by a job that waits for a byte: a spare queued after it is not made until
 * the byte comes. Only cr_expect between block_pool and unblock_pool: a failed assertion would
 * leave the pool's thread waiting at exit. */
typedef struct blocker {
  uv_work_t req;
  int fd[2];
  bool done;
} blocker_t;

static void block_work(uv_work_t *w) {
  blocker_t *b = w->data;
  char c;
  while (read(b->fd[0], &c, 1) < 0 && errno == EINTR) {}
}

static void block_done(uv_work_t *w, int status) {
  (void)status;
  ((blocker_t *)w->data)->done = true;
}

static bool unblocked(void *arg) { return ((blocker_t *)arg)->done; }

static void block_pool(fixture_t *f, blocker_t *b) {
  cr_assert_eq(pipe(b->fd), 0);
  b->req.data = b;
  cr_assert_eq(uv_queue_work(&f->loop, &b->req, block_work, block_done), 0);
}

static void unblock_pool(fixture_t *f, blocker_t *b) {
  cr_assert_eq(write(b->fd[1], "x", 1), 1);
  cr_assert(run_until(f, unblocked, b, 10));
  close(b->fd[0]);
  close(b->fd[1]);
}

/* Hits while the next spare is still being made (the pool busy) are read as without one: the
 * loop never waits for it. */
Test(fleet_redis, hits_while_the_spare_is_being_made_are_read_as_before) {
  setenv("UV_THREADPOOL_SIZE", "1", 1);
  fixture_t f = {0};
  kiln_remote_t *rc = live_tier(&f, 0);
  const size_t len = 1u << 20;
  for (uint32_t i = 0; i < 3; i++) put_entry(&f, rc, i, len);
  expect_spare(&f, rc, 0, len, 0, 1);
  cr_assert(run_until(&f, spare_ready, rc, 10));
  blocker_t b = {0};
  block_pool(&f, &b);
  expect_spare(&f, rc, 1, len, 1, 1); /* adopted; the next one waits behind the blocker */
  kiln_remote_stats_t s;
  kiln_remote_stats(rc, &s);
  cr_expect(!s.redis.spare_ready && s.redis.spare_bytes > len, "ready %d, %llu bytes", s.redis.spare_ready,
            (unsigned long long)s.redis.spare_bytes);
  expect_spare(&f, rc, 2, len, 1, 2);
  expect_spare(&f, rc, 0, len, 1, 3);
  unblock_pool(&f, &b);
  cr_assert(run_until(&f, spare_ready, rc, 10));
  expect_spare(&f, rc, 1, len, 2, 3);
  finish(&f, rc, NULL);
}

/* kilnd exiting while a spare is being made: the tier destroyed with its next spare queued
 * behind a busy pool (cancelled), and one destroyed right after a hit (its spare being made,
 * or made): the loop ends, and nothing leaks (the ASan build runs this). */
Test(fleet_redis, a_tier_destroyed_while_its_spare_is_being_made_frees_it) {
  setenv("UV_THREADPOOL_SIZE", "1", 1);
  fixture_t f = {0};
  kiln_remote_t *rc = live_tier(&f, 0);
  const size_t len = 1u << 20;
  for (uint32_t i = 0; i < 2; i++) put_entry(&f, rc, i, len);
  expect_spare(&f, rc, 0, len, 0, 1);
  cr_assert(run_until(&f, spare_ready, rc, 10));
  blocker_t b = {0};
  block_pool(&f, &b);
  expect_spare(&f, rc, 1, len, 1, 1);
  kiln_remote_destroy(rc);
  unblock_pool(&f, &b);
  teardown(&f);

  fixture_t g = {0};
  rc = live_tier(&g, 0);
  put_entry(&g, rc, 0, len);
  expect_spare(&g, rc, 0, len, 0, 1); /* the first spare starts now */
  kiln_remote_destroy(rc);
  teardown(&g);
}

/* Redis gone in the middle of a bulk reply read into the spare: a miss, the spare (by then the
 * reader's buffer) freed with the connection; on the next connection hits are read into the
 * next spare, byte for byte. */
Test(fleet_redis, a_connection_lost_mid_reply_in_the_spare_frees_it) {
  const size_t len = 1u << 20, n = KILN_REMOTE_HEADER_BYTES + len;
  uint8_t key[KILN_REMOTE_KEY_BYTES] = {0x21}, *payload;
  char head[32];
  uint8_t *e = sealed_entry(key, 21, len, &payload, head);
  size_t rn;
  char *reply = resp_bulk(head, e, n, "\r\n", &rn);
  fixture_t f = {0};
  setup(&f);
  fake_start(&f, reply, rn, THEN_HALF);
  kiln_remote_config_t cfg = {.redis = {.url = f.url, .what = "cache_remote", .timeout_ms = 1000},
                              .secret_file = f.secret, .max_bytes = 2u << 20};
  kiln_remote_t *rc = NULL;
  cr_assert_eq(kiln_remote_create(&f.loop, &cfg, &rc), KILN_OK);
  kiln_remote_stats_t s;
  for (int round = 0; round < 2; round++) {
    cr_assert(run_until(&f, is_up, rc, 10));
    got_t g = {0};
    cr_assert(kiln_remote_get(rc, key, on_got, &g));
    cr_assert(run_until(&f, got, &g, 10));
    cr_expect(g.bytes && g.len == len && memcmp(g.bytes, payload, len) == 0, "round %d: not a hit", round);
    free(g.bytes);
    cr_assert(run_until(&f, spare_ready, rc, 10));
    kiln_remote_stats(rc, &s);
    uint64_t used = s.redis.spare_used, disconnects = s.redis.disconnects;
    got_t h = {0};
    cr_assert(kiln_remote_get(rc, key, on_got, &h)); /* half of it, then the connection closes */
    cr_assert(run_until(&f, got, &h, 10));
    cr_expect(!h.bytes, "round %d: half a reply was served", round);
    kiln_remote_stats(rc, &s);
    cr_expect(s.redis.spare_used == used + 1 && s.redis.disconnects == disconnects + 1,
              "round %d: spare used %llu, disconnects %llu", round, (unsigned long long)s.redis.spare_used,
              (unsigned long long)s.redis.disconnects);
  }
  kiln_remote_stats(rc, &s);
  cr_expect(s.redis.spare_used >= 3, "the next connection's hit was not read into the spare: used %llu",
            (unsigned long long)s.redis.spare_used);
  kiln_remote_destroy(rc);
  teardown(&f);
  free(reply);
  free(payload);
  free(e);
}
