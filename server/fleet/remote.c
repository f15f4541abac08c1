/* The remote artifact tier (remote.h): entries sealed with Poly1305 under a one-time key
 * derived per entry from the fleet secret, look-ups with a cross-host build lock, puts that
 * never wait.
 *
 * Entry under "kiln:art:<64 hex>", little-endian (docs/cache.md "The remote tier"):
 *   0  8  magic "KILNRMT2"
 *   8  8  payload length
 *  16 32  build key
 *  48 16  nonce: random, drawn for this entry
 *  64 16  tag: Poly1305(k, bytes 0..63 || payload), k = BLAKE2b-256 keyed with the fleet's
 *         MAC key over bytes 0..63 (so k is this entry's alone: key, length and nonce)
 *  80  n  payload (the encoded artifact)
 * The fleet's MAC key is BLAKE2b-256 of the fleet secret keyed with MAC_LABEL. Entries of the
 * first format (KILNRMT1, HMAC-SHA256) are refused, deleted and rebuilt (counted in
 * old_format and corrupt). Lock under "kiln:lock:<64 hex>": a random token of the holder,
 * with a TTL. */
#include "server/fleet/remote.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sodium.h>

#include "base/log.h"
#include "base/util.h"
#include "protocol/rpc.h"

#define ART_PREFIX "kiln:art:"
#define LOCK_PREFIX "kiln:lock:"
#define SECRET_MAX 4096

/* Compare-and-delete: a holder whose lock expired and was taken by another host must not
 * delete the other host's lock. */
static const char release_script[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end";

typedef struct lookup {
  struct lookup *prev, *next;
  kiln_remote_t *rc;
  uint8_t key[KILN_REMOTE_KEY_BYTES];
  kiln_remote_get_cb cb;
  void *arg;
  uint64_t wait_deadline_ns;
  uint64_t sent_ns, sent_cpu_ns; /* the last GETRANGE: wall clock, the loop thread's CPU clock */
  uint64_t first_ns;             /* its reply's first bytes seen (0: it came whole) */
  EVP_MAC_CTX *mac;              /* the MAC of its reply, fed as the reply arrives (on_progress) */
  size_t mac_upto;               /* ... over this many payload bytes so far */
  bool mac_failed;               /* ... could not be computed: on_get MACs the whole entry */
  bool waited;   /* found the lock held at least once */
  bool locked;   /* this host holds the build lock: a last look, then the build */
  bool in_redis; /* a command of ours is pending */
  uv_timer_t poll;
} lookup_t;

/* A build put while Redis was down, sent when it is back (remote.h). */
typedef struct pending {
  struct pending *next;
  uint8_t key[KILN_REMOTE_KEY_BYTES];
  size_t len;
  unsigned drops; /* connections that went while its SET was in flight */
  uint8_t bytes[];
} pending_t;

/* A queued build whose connection goes this many times while its SET is in flight is
 * dropped: a SET that cannot finish within the deadline (a slow link, a large build, a
 * stalled Redis) would otherwise be sent first at every reconnect and time out again,
 * forever, failing every other command on the connection each time. */
#define REQUEUE_MAX_DROPS 2u

typedef struct held {
  struct held *prev, *next;
  uint8_t key[KILN_REMOTE_KEY_BYTES];
} held_t;

struct kiln_remote {
  uv_loop_t *loop;
  kiln_redis_t *redis;
  uint8_t secret[SECRET_MAX];
  size_t secret_len;
  uint64_t max_bytes;
  uint32_t lock_ttl_ms, wait_ms, poll_ms;
  char token[33]; /* this kilnd's lock value */
  lookup_t *lookups;
  held_t *held;
  struct put_ctx *puts; /* SETs sent, reply not come */
  pending_t *queue, *queue_tail; /* oldest first */
  uint32_t queue_n;
  uint64_t queue_bytes;
  uint64_t drain_bytes; /* queued builds sent and not answered (at most REQUEUE_IN_FLIGHT) */
  uint32_t drain_sent;  /* ... and answered OK since the connection came up, for the log */
  uv_timer_t renew;
  kiln_remote_stats_t st;
};

/* --- the entry ---------------------------------------------------------------------------- */

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* The MAC (docs/cache.md "The remote tier" says why it is sound): Poly1305 through OpenSSL 3's
 * EVP_MAC (its AVX-512/AVX2 code: about 10 GB/s here against HMAC-SHA256's 1.4,
 * bench/mac_bench.c), under a one-time key derived from the fleet secret and the entry's
 * first 64 bytes (magic, length, build key and its random nonce), over those 64 bytes and then
 * the payload, in one call (mac) or as the payload arrives (mac_begin, EVP_MAC_update,
 * mac_end). False or NULL when it cannot be computed (no POLY1305 in the provider
 * configuration, out of memory, a secret shorter than read_secret allows): the caller must
 * then refuse the entry or skip the put, never compare against or store a placeholder (a
 * forger could write that placeholder). */
#define MAC_LABEL "kiln remote entry MAC key, KILNRMT2"
#define MACED_HEAD 64 /* bytes of the header under the MAC: all but the tag */
#define TAG_AT 64
#define TAG_BYTES 16

static EVP_MAC_CTX *mac_begin(const uint8_t *secret, size_t secret_len, const uint8_t *head) {
  static EVP_MAC *poly; /* fetched once; the loop thread is the only caller */
  if (!secret || secret_len < 32) return NULL;
  if (!poly) poly = EVP_MAC_fetch(NULL, "POLY1305", NULL);
  uint8_t fleet[32], k[32];
  EVP_MAC_CTX *c = poly ? EVP_MAC_CTX_new(poly) : NULL;
  bool ok = c && crypto_generichash(fleet, sizeof(fleet), secret, secret_len, (const uint8_t *)MAC_LABEL,
                                    sizeof(MAC_LABEL) - 1) == 0 &&
            crypto_generichash(k, sizeof(k), head, MACED_HEAD, fleet, sizeof(fleet)) == 0 &&
            EVP_MAC_init(c, k, sizeof(k), NULL) && EVP_MAC_update(c, head, MACED_HEAD);
  sodium_memzero(fleet, sizeof(fleet));
  sodium_memzero(k, sizeof(k));
  if (ok) return c;
  EVP_MAC_CTX_free(c);
  return NULL;
}

/* Ends c (freed either way) and writes the tag. */
static bool mac_end(EVP_MAC_CTX *c, uint8_t out[TAG_BYTES]) {
  size_t n = 0;
  bool ok = c && EVP_MAC_final(c, out, &n, TAG_BYTES) && n == TAG_BYTES;
  EVP_MAC_CTX_free(c);
  return ok;
}

static bool mac(const uint8_t *secret, size_t secret_len, const uint8_t *head, const uint8_t *payload,
                size_t len, uint8_t out[TAG_BYTES]) {
  EVP_MAC_CTX *c = mac_begin(secret, secret_len, head);
  if (c && !EVP_MAC_update(c, payload, len)) {
    EVP_MAC_CTX_free(c);
    return false;
  }
  return mac_end(c, out);
}

bool kiln_remote_seal(const uint8_t *secret, size_t secret_len, const uint8_t key[KILN_REMOTE_KEY_BYTES],
                      const uint8_t *bytes, size_t len, uint8_t *out) {
  memcpy(out, "KILNRMT2", 8);
  put_u64(out + 8, len);
  memcpy(out + 16, key, KILN_REMOTE_KEY_BYTES);
  randombytes_buf(out + 48, 16); /* the nonce: a one-time key MACs one message only */
  memcpy(out + KILN_REMOTE_HEADER_BYTES, bytes, len);
  return mac(secret, secret_len, out, out + KILN_REMOTE_HEADER_BYTES, len, out + TAG_AT);
}

/* open_entry's reason for an entry of the first format (on_get counts it apart). */
static const char old_format[] = "an entry of the old format (KILNRMT1, HMAC-SHA256): refused";

/* kiln_remote_open; with `streamed` (a MAC begun on these bytes' head and fed their first
 * `upto` payload bytes as they arrived, consumed here), only the rest is MACed now. */
static const uint8_t *open_entry(const uint8_t *secret, size_t secret_len, const uint8_t key[KILN_REMOTE_KEY_BYTES],
                                 const uint8_t *e, size_t n, uint64_t max_bytes, EVP_MAC_CTX *streamed, size_t upto,
                                 size_t *out_len, const char **why) {
  const uint8_t *p = NULL;
  uint64_t len = 0;
  if (n < KILN_REMOTE_HEADER_BYTES) {
    *why = "shorter than its header";
    goto out;
  }
  if (memcmp(e, "KILNRMT1", 8) == 0) {
    *why = old_format;
    goto out;
  }
  if (memcmp(e, "KILNRMT2", 8) != 0) {
    *why = "not a kiln entry (magic)";
    goto out;
  }
  len = get_u64(e + 8);
  if (len == 0 || len > max_bytes || len != n - KILN_REMOTE_HEADER_BYTES) {
    *why = "its length is wrong or over the bound";
    goto out;
  }
  if (memcmp(e + 16, key, KILN_REMOTE_KEY_BYTES) != 0) {
    *why = "it names another key";
    goto out;
  }
  uint8_t m[TAG_BYTES];
  bool ok;
  if (streamed && upto <= len) {
    ok = EVP_MAC_update(streamed, e + KILN_REMOTE_HEADER_BYTES + upto, (size_t)len - upto);
    if (ok) ok = mac_end(streamed, m); /* frees it */
    else EVP_MAC_CTX_free(streamed);
    streamed = NULL;
  } else {
    ok = mac(secret, secret_len, e, e + KILN_REMOTE_HEADER_BYTES, (size_t)len, m);
  }
  if (!ok) {
    *why = "cannot compute the MAC (libcrypto failed): refused";
    goto out;
  }
  if (CRYPTO_memcmp(m, e + TAG_AT, TAG_BYTES) != 0) {
    *why = "its MAC does not match (forged, corrupt, or another fleet secret)";
    goto out;
  }
  *out_len = (size_t)len;
  p = e + KILN_REMOTE_HEADER_BYTES;
out:
  EVP_MAC_CTX_free(streamed);
  return p;
}

const uint8_t *kiln_remote_open(const uint8_t *secret, size_t secret_len,
                                const uint8_t key[KILN_REMOTE_KEY_BYTES], const uint8_t *e,
                                size_t n, uint64_t max_bytes, size_t *out_len, const char **why) {
  return open_entry(secret, secret_len, key, e, n, max_bytes, NULL, 0, out_len, why);
}

static void key_name(const char *prefix, const uint8_t key[KILN_REMOTE_KEY_BYTES], char *out) {
  size_t p = strlen(prefix);
  memcpy(out, prefix, p);
  kiln_hex(key, KILN_REMOTE_KEY_BYTES, out + p);
}

/* --- the secret --------------------------------------------------------------------------- */

static kiln_status_t read_secret(kiln_remote_t *rc, const char *path) {
  if (!path || !path[0])
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "--cache-remote needs --fleet-secret-file: entries are MACed with the fleet "
                       "secret (at least 32 random bytes, the same file on every host)");
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return KILN_STATUS(errno == ENOENT ? KILN_E_NOT_FOUND : KILN_E_PERMISSION, "%s: %s", path,
                       strerror(errno));
  struct stat sb;
  kiln_status_t st = KILN_OK;
  ssize_t n = 0;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    st = KILN_STATUS(KILN_E_PERMISSION, "%s is not a regular file", path);
  else if (sb.st_mode & 077)
    st = KILN_STATUS(KILN_E_PERMISSION, "the fleet secret %s must not be readable by group or "
                     "others (chmod 600)", path);
  else if ((n = read(fd, rc->secret, SECRET_MAX)) < 32 || sb.st_size > SECRET_MAX)
    st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "the fleet secret %s must hold 32 to %d bytes "
                     "(head -c 32 /dev/urandom > %s)", path, SECRET_MAX, path);
  close(fd);
  if (st) return st;
  rc->secret_len = (size_t)n;
  return KILN_OK;
}

/* --- look-ups ----------------------------------------------------------------------------- */

static void send_get(lookup_t *l);
static void send_lock(lookup_t *l);
static bool release(kiln_remote_t *rc, const uint8_t key[KILN_REMOTE_KEY_BYTES]);

static void mac_reset(lookup_t *l) {
  EVP_MAC_CTX_free(l->mac);
  l->mac = NULL;
  l->mac_upto = 0;
  l->mac_failed = false;
  l->first_ns = 0;
}

static void lookup_closed(uv_handle_t *h) {
  mac_reset(h->data);
  free(h->data);
}

/* A hit hands `block` (the malloc'd reply holding bytes, or NULL) to the callback. */
static void lookup_end(lookup_t *l, const uint8_t *bytes, size_t len, void *block) {
  kiln_remote_t *rc = l->rc;
  if (l->prev) l->prev->next = l->next;
  else rc->lookups = l->next;
  if (l->next) l->next->prev = l->prev;
  if (bytes) {
    rc->st.hits++;
    rc->st.bytes_read += len;
    if (l->waited) rc->st.wait_hits++;
  } else {
    rc->st.misses++;
  }
  l->cb(l->arg, bytes, len, block);
  uv_close((uv_handle_t *)&l->poll, lookup_closed);
}

/* The loop thread's CPU time: beside the wall times of a hit's debug line, it shows how much of
 * them was this thread's work (while nothing else runs on the loop, as in bench/fleet_bench.py:
 * everything from sending GETRANGE to the answer) and how much waiting for a core. */
static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void ignore_reply(void *arg, const redisReply *reply) { (void)arg, (void)reply; }

static void drop_entry(kiln_remote_t *rc, const uint8_t key[KILN_REMOTE_KEY_BYTES], const char *why) {
  char name[sizeof(ART_PREFIX) + 64];
  key_name(ART_PREFIX, key, name);
  rc->st.corrupt++;
  if (why == old_format) rc->st.old_format++;
  KILN_LOG_WARN("cache_remote_corrupt", "key=%.16s reason=\"%s\" action=deleted_and_rebuilt",
                name + strlen(ART_PREFIX), why);
  const char *argv[] = {"DEL", name};
  (void)kiln_redis_command(rc->redis, ignore_reply, NULL, 2, argv, NULL);
}

static void on_get(void *arg, const redisReply *r) {
  lookup_t *l = arg;
  kiln_remote_t *rc = l->rc;
  l->in_redis = false;
  if (!r) { /* Redis went away: build it here */
    lookup_end(l, NULL, 0, NULL);
    return;
  }
  if (r->type == REDIS_REPLY_STRING && r->len > 0) {
    const char *why = NULL;
    size_t len = 0;
    uint64_t t0 = kiln_now_ns();
    /* The MAC fed as the reply arrived (on_progress) covers its first mac_upto payload bytes;
     * the rest is MACed now. Without one (a small entry, or it came in one read), all of it. */
    size_t streamed = l->mac && !l->mac_failed ? l->mac_upto : 0;
    EVP_MAC_CTX *c = l->mac_failed ? NULL : l->mac;
    l->mac = NULL; /* open_entry consumes it */
    const uint8_t *p = open_entry(rc->secret, rc->secret_len, l->key, (const uint8_t *)r->str, r->len,
                                  rc->max_bytes, c, streamed, &len, &why);
    if (p) {
      if (l->locked) release(rc, l->key); /* the entry came before our lock: no build */
      /* Where a hit's time goes: Redis (the round trip to the first reply bytes, then reading
       * the rest; the MAC overlaps the reading), what is left of the MAC, and the caller's
       * hand-off (decode, the answer, the local cache put). */
      char hex[2 * KILN_REMOTE_KEY_BYTES + 1];
      kiln_hex(l->key, KILN_REMOTE_KEY_BYTES, hex);
      uint64_t sent = l->sent_ns, sent_cpu = l->sent_cpu_ns, first = l->first_ns ? l->first_ns : t0,
               t1 = kiln_now_ns();
      /* The reply's buffer becomes the caller's (the local cache entry adopts it: no copy). */
      char *block = kiln_redis_take_str(r);
      lookup_end(l, p, len, block);
      uint64_t t2 = kiln_now_ns(), c2 = thread_cpu_ns();
      KILN_LOG_DEBUG("cache_remote_hit",
                     "key=%.16s bytes=%zu first_ms=%.3f redis_ms=%.3f mac_ms=%.3f mac_streamed=%zu handoff_ms=%.3f "
                     "cpu_ms=%.3f",
                     hex, len, (double)(first - sent) / 1e6, (double)(t0 - sent) / 1e6, (double)(t1 - t0) / 1e6,
                     streamed, (double)(t2 - t1) / 1e6, (double)(c2 - sent_cpu) / 1e6);
      return;
    }
    if (strncmp(why, "cannot compute", 14) != 0) drop_entry(rc, l->key, why);
    else KILN_LOG_WARN("cache_remote_mac", "reason=\"%s\" action=compile_here", why); /* ours, not the entry's */
  } else if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL) {
    drop_entry(rc, l->key, r->type == REDIS_REPLY_ERROR ? "Redis answered an error (a key of another type?)"
                                                       : "Redis answered a value of another type");
  }
  if (l->locked) lookup_end(l, NULL, 0, NULL); /* build it here, under our lock */
  else send_lock(l);
}

static void on_poll(uv_timer_t *t) { send_get(t->data); }

static void on_lock(void *arg, const redisReply *r) {
  lookup_t *l = arg;
  kiln_remote_t *rc = l->rc;
  l->in_redis = false;
  if (r && r->type == REDIS_REPLY_STATUS && r->len == 2 && memcmp(r->str, "OK", 2) == 0) {
    held_t *h = calloc(1, sizeof(*h));
    if (h) { /* without it the lock just expires */
      memcpy(h->key, l->key, KILN_REMOTE_KEY_BYTES);
      h->next = rc->held;
      if (rc->held) rc->held->prev = h;
      rc->held = h;
    }
    /* A host that built the key between our GET and our SET NX has let its lock go by now:
     * one more look before building it again. */
    l->locked = true;
    send_get(l);
    return;
  }
  if (!r || r->type != REDIS_REPLY_NIL) { /* down, or an answer SET NX cannot give */
    lookup_end(l, NULL, 0, NULL);
    return;
  }
  /* Another host builds it: wait for its entry, within bounds. */
  uint64_t now = kiln_now_ns();
  if (!l->waited) {
    l->waited = true;
    rc->st.lock_waits++;
    l->wait_deadline_ns = now + (uint64_t)rc->wait_ms * 1000000ull;
  } else if (now >= l->wait_deadline_ns) {
    rc->st.wait_timeouts++;
    KILN_LOG_WARN("cache_remote_wait_timeout", "wait_ms=%u action=compile_here", rc->wait_ms);
    lookup_end(l, NULL, 0, NULL);
    return;
  }
  uv_timer_start(&l->poll, on_poll, rc->poll_ms, 0);
}

/* The GETRANGE reply as it arrives (redis.h kiln_redis_progress_cb): the MAC of an entry of
 * STREAM_MIN bytes or more is computed over what has come, while the rest is still on its
 * way, so that on_get has only the tail left. Its first 48 bytes start it; nothing here
 * decides anything (a reply that is no entry fails its MAC, or open_entry's checks, in on_get). */
#define STREAM_MIN (64u << 10)
static void on_progress(void *arg, const uint8_t *s, size_t have, size_t total) {
  lookup_t *l = arg;
  kiln_remote_t *rc = l->rc;
  if (!l->first_ns) l->first_ns = kiln_now_ns();
  if (l->mac_failed || total < STREAM_MIN || have < KILN_REMOTE_HEADER_BYTES ||
      total - KILN_REMOTE_HEADER_BYTES > rc->max_bytes)
    return;
  if (!l->mac && !(l->mac = mac_begin(rc->secret, rc->secret_len, s))) {
    l->mac_failed = true;
    return;
  }
  size_t pay = have - KILN_REMOTE_HEADER_BYTES;
  if (pay <= l->mac_upto) return;
  if (!EVP_MAC_update(l->mac, s + KILN_REMOTE_HEADER_BYTES + l->mac_upto, pay - l->mac_upto)) {
    l->mac_failed = true;
    return;
  }
  l->mac_upto = pay;
}

/* Sends the look-up's GETRANGE (a new one each poll). False when it could not be sent. */
static bool get_send(lookup_t *l) {
  kiln_remote_t *rc = l->rc;
  char name[sizeof(ART_PREFIX) + 64], last[24];
  key_name(ART_PREFIX, l->key, name);
  /* GETRANGE bounds what even a well-behaved Redis sends for an oversized value. */
  snprintf(last, sizeof(last), "%llu", (unsigned long long)(rc->max_bytes + KILN_REMOTE_HEADER_BYTES));
  const char *argv[] = {"GETRANGE", name, "0", last};
  mac_reset(l);
  l->sent_ns = kiln_now_ns();
  l->sent_cpu_ns = thread_cpu_ns();
  return kiln_redis_command_progress(rc->redis, on_get, on_progress, l, 4, argv, NULL);
}

static void send_get(lookup_t *l) {
  l->in_redis = get_send(l);
  if (!l->in_redis) lookup_end(l, NULL, 0, NULL);
}

static void send_lock(lookup_t *l) {
  kiln_remote_t *rc = l->rc;
  char name[sizeof(LOCK_PREFIX) + 64], ttl[16];
  key_name(LOCK_PREFIX, l->key, name);
  snprintf(ttl, sizeof(ttl), "%u", rc->lock_ttl_ms);
  const char *argv[] = {"SET", name, rc->token, "NX", "PX", ttl};
  l->in_redis = kiln_redis_command(rc->redis, on_lock, l, 6, argv, NULL);
  if (!l->in_redis) lookup_end(l, NULL, 0, NULL);
}

bool kiln_remote_get(kiln_remote_t *rc, const uint8_t key[KILN_REMOTE_KEY_BYTES], kiln_remote_get_cb cb,
                     void *arg) {
  if (!kiln_redis_up(rc->redis)) {
    rc->st.skipped++;
    return false;
  }
  lookup_t *l = calloc(1, sizeof(*l));
  if (!l) return false;
  l->rc = rc;
  memcpy(l->key, key, KILN_REMOTE_KEY_BYTES);
  l->cb = cb;
  l->arg = arg;
  if (!get_send(l)) {
    mac_reset(l);
    free(l);
    rc->st.skipped++;
    return false;
  }
  l->in_redis = true;
  uv_timer_init(rc->loop, &l->poll);
  l->poll.data = l;
  l->next = rc->lookups;
  if (rc->lookups) rc->lookups->prev = l;
  rc->lookups = l;
  return true;
}

/* --- puts and locks ----------------------------------------------------------------------- */

static bool release(kiln_remote_t *rc, const uint8_t key[KILN_REMOTE_KEY_BYTES]) {
  held_t *h = rc->held;
  while (h && memcmp(h->key, key, KILN_REMOTE_KEY_BYTES) != 0) h = h->next;
  if (!h) return false;
  if (h->prev) h->prev->next = h->next;
  else rc->held = h->next;
  if (h->next) h->next->prev = h->prev;
  free(h);
  char name[sizeof(LOCK_PREFIX) + 64];
  key_name(LOCK_PREFIX, key, name);
  const char *argv[] = {"EVAL", release_script, "1", name, rc->token};
  (void)kiln_redis_command(rc->redis, ignore_reply, NULL, 5, argv, NULL);
  return true;
}

typedef struct put_ctx {
  kiln_remote_t *rc;
  size_t len;
  pending_t *queued; /* a build queued during an outage: kept until Redis has it */
  struct put_ctx *next, **prev; /* rc->puts: freed at destroy, whose pending callbacks never run */
} put_ctx_t;

static void drain(kiln_remote_t *rc);
static void requeue_oldest(kiln_remote_t *rc, pending_t *q);

static void on_put(void *arg, const redisReply *r) {
  put_ctx_t *p = arg;
  kiln_remote_t *rc = p->rc;
  *p->prev = p->next;
  if (p->next) p->next->prev = p->prev;
  bool ok = r && r->type == REDIS_REPLY_STATUS;
  if (ok) {
    rc->st.puts++;
    rc->st.bytes_written += p->len;
  } else {
    rc->st.put_errors++;
  }
  bool queued = p->queued != NULL;
  if (queued) {
    rc->drain_bytes -= p->len;
    if (ok) {
      rc->st.requeue_sent++;
      rc->drain_sent++;
      free(p->queued);
    } else if (!r && ++p->queued->drops < REQUEUE_MAX_DROPS) {
      requeue_oldest(rc, p->queued); /* the connection went: back to the queue, for when Redis is back */
    } else if (!r) {
      KILN_LOG_WARN("cache_remote_requeue", "bytes=%zu drops=%u action=dropped (its SET did not finish within the deadline)",
                    p->len, p->queued->drops);
      rc->st.requeue_dropped++;
      free(p->queued);
    } else {
      free(p->queued); /* Redis refused it (an error reply): trying again would not help */
    }
  }
  free(p);
  if (queued) drain(rc); /* the next ones, or the log line of the last */
}

/* Seals and SETs one build (a failure is counted in put_errors); a queued one (q) is kept by
 * the put until its answer. False when it could not be sent. */
static bool send_put(kiln_remote_t *rc, const uint8_t key[KILN_REMOTE_KEY_BYTES], const uint8_t *bytes, size_t len,
                     pending_t *q) {
  bool sent = false;
  uint8_t *e = malloc(KILN_REMOTE_HEADER_BYTES + len);
  put_ctx_t *p = malloc(sizeof(*p));
  if (e && p && !kiln_remote_seal(rc->secret, rc->secret_len, key, bytes, len, e)) {
    KILN_LOG_WARN("cache_remote_put", "cannot compute the MAC (libcrypto failed): not stored");
    rc->st.put_errors++;
  } else if (e && p) {
    char name[sizeof(ART_PREFIX) + 64];
    key_name(ART_PREFIX, key, name);
    const char *argv[] = {"SET", name, (const char *)e};
    size_t lens[] = {3, strlen(name), KILN_REMOTE_HEADER_BYTES + len};
    p->rc = rc;
    p->len = len;
    p->queued = q;
    if (kiln_redis_command(rc->redis, on_put, p, 3, argv, lens)) { /* hiredis copied e */
      p->next = rc->puts;
      p->prev = &rc->puts;
      if (rc->puts) rc->puts->prev = &p->next;
      rc->puts = p;
      p = NULL;
      sent = true;
    } else {
      rc->st.put_errors++;
    }
  } else {
    rc->st.put_errors++;
  }
  free(e);
  free(p);
  return sent;
}

/* Keeps a build put while Redis is down, within the queue's bounds (the oldest go first). */
static void requeue(kiln_remote_t *rc, const uint8_t key[KILN_REMOTE_KEY_BYTES], const uint8_t *bytes, size_t len) {
  if (len > KILN_REMOTE_REQUEUE_BYTES) {
    rc->st.requeue_dropped++;
    return;
  }
  while (rc->queue && (rc->queue_n >= KILN_REMOTE_REQUEUE_ENTRIES || rc->queue_bytes + len > KILN_REMOTE_REQUEUE_BYTES)) {
    pending_t *old = rc->queue;
    rc->queue = old->next;
    if (!rc->queue) rc->queue_tail = NULL;
    rc->queue_n--;
    rc->queue_bytes -= old->len;
    free(old);
    rc->st.requeue_dropped++;
  }
  pending_t *q = malloc(sizeof(*q) + len);
  if (!q) {
    rc->st.requeue_dropped++;
    return;
  }
  q->next = NULL;
  memcpy(q->key, key, KILN_REMOTE_KEY_BYTES);
  q->len = len;
  q->drops = 0;
  memcpy(q->bytes, bytes, len);
  if (rc->queue_tail) rc->queue_tail->next = q;
  else rc->queue = q;
  rc->queue_tail = q;
  rc->queue_n++;
  rc->queue_bytes += len;
  rc->st.requeued++;
}

/* Puts a queued build that Redis did not take (the connection went) back at the queue's
 * head, within the queue's bounds (it is the oldest: dropped first when they are passed). */
static void requeue_oldest(kiln_remote_t *rc, pending_t *q) {
  if (rc->queue_n >= KILN_REMOTE_REQUEUE_ENTRIES || rc->queue_bytes + q->len > KILN_REMOTE_REQUEUE_BYTES) {
    free(q);
    rc->st.requeue_dropped++;
    return;
  }
  q->next = rc->queue;
  rc->queue = q;
  if (!rc->queue_tail) rc->queue_tail = q;
  rc->queue_n++;
  rc->queue_bytes += q->len;
}

/* Sends queued builds while the connection is up, at most REQUEUE_IN_FLIGHT bytes of them
 * unanswered at a time (at least one): each answer sends the next. Sent all at once, a queue
 * at its bound (64 MiB) would sit behind itself on one connection: the later SETs' deadlines
 * (each starts when it is sent) would pass while the earlier ones are written, the connection
 * would drop, and every build in flight would be lost; and the look-ups of that time would
 * wait behind all of it. Paced, a SET waits behind at most REQUEUE_IN_FLIGHT bytes. */
#define REQUEUE_IN_FLIGHT (4u << 20)
static void drain(kiln_remote_t *rc) {
  while (rc->queue && kiln_redis_up(rc->redis) &&
         (rc->drain_bytes == 0 || rc->drain_bytes + rc->queue->len <= REQUEUE_IN_FLIGHT)) {
    pending_t *q = rc->queue;
    rc->queue = q->next;
    if (!rc->queue) rc->queue_tail = NULL;
    rc->queue_n--;
    rc->queue_bytes -= q->len;
    if (!send_put(rc, q->key, q->bytes, q->len, q)) {
      requeue_oldest(rc, q); /* not sent: Redis went down meanwhile */
      break;
    }
    rc->drain_bytes += q->len;
  }
  if (!rc->queue && rc->drain_bytes == 0 && rc->drain_sent) {
    KILN_LOG_INFO("cache_remote_requeue", "sent=%u left=0", rc->drain_sent);
    rc->drain_sent = 0;
  }
}

/* The connection is up again: the builds made during the outage go to Redis now, paced. */
static void on_up(void *arg) {
  kiln_remote_t *rc = arg;
  if (rc->queue)
    KILN_LOG_INFO("cache_remote_requeue", "queued=%u bytes=%llu action=sending", rc->queue_n,
                  (unsigned long long)rc->queue_bytes);
  rc->drain_sent = 0;
  drain(rc);
}

void kiln_remote_put(kiln_remote_t *rc, const uint8_t key[KILN_REMOTE_KEY_BYTES], const uint8_t *bytes,
                     size_t len) {
  if (len == 0 || len > rc->max_bytes) {
    rc->st.too_large += len > 0;
  } else if (!kiln_redis_up(rc->redis)) {
    rc->st.skipped++;
    requeue(rc, key, bytes, len);
  } else {
    (void)send_put(rc, key, bytes, len, NULL);
  }
  release(rc, key); /* after the SET: Redis runs one connection's commands in order */
}

void kiln_remote_abandon(kiln_remote_t *rc, const uint8_t key[KILN_REMOTE_KEY_BYTES]) { release(rc, key); }

static void on_renew(uv_timer_t *t) {
  kiln_remote_t *rc = t->data;
  char ttl[16];
  snprintf(ttl, sizeof(ttl), "%u", rc->lock_ttl_ms);
  for (held_t *h = rc->held; h; h = h->next) {
    char name[sizeof(LOCK_PREFIX) + 64];
    key_name(LOCK_PREFIX, h->key, name);
    const char *argv[] = {"PEXPIRE", name, ttl};
    (void)kiln_redis_command(rc->redis, ignore_reply, NULL, 3, argv, NULL);
  }
}

/* --- lifetime ----------------------------------------------------------------------------- */

kiln_status_t kiln_remote_create(uv_loop_t *loop, const kiln_remote_config_t *cfg, kiln_remote_t **out) {
  kiln_remote_t *rc = calloc(1, sizeof(*rc));
  if (!rc) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  kiln_status_t st = read_secret(rc, cfg->secret_file);
  kiln_redis_config_t redis = cfg->redis;
  uint64_t max_bytes = cfg->max_bytes ? cfg->max_bytes : KILN_REMOTE_DEFAULT_MAX_BYTES;
  redis.max_reply = max_bytes + KILN_REMOTE_HEADER_BYTES + (1u << 20); /* one entry and slack */
  /* A hit's reply is read into a prefaulted spare (redis.h): at most one entry's reply (its
   * bytes, the header, RESP's length line and CRLF), at most KILN_REDIS_SPARE_MAX. */
  redis.spare_max = max_bytes + KILN_REMOTE_HEADER_BYTES + 32;
  redis.on_up = on_up;
  redis.up_arg = rc;
  if (!st) { /* the MAC must work now: a failure later would only show as misses */
    uint8_t probe[KILN_REMOTE_HEADER_BYTES + 1] = {0}, k[KILN_REMOTE_KEY_BYTES] = {0};
    if (!kiln_remote_seal(rc->secret, rc->secret_len, k, probe, 1, probe))
      st = KILN_STATUS(KILN_E_UNAVAILABLE, "--cache-remote: libcrypto cannot compute Poly1305 "
                       "(is the OpenSSL default provider available?); entries could not be MACed");
  }
  if (!st) st = kiln_redis_create(loop, &redis, &rc->redis);
  if (st) {
    sodium_memzero(rc, sizeof(*rc));
    free(rc);
    return st;
  }
  rc->loop = loop;
  rc->max_bytes = max_bytes;
  rc->lock_ttl_ms = cfg->lock_ttl_ms ? cfg->lock_ttl_ms : 10000;
  rc->wait_ms = cfg->wait_ms ? cfg->wait_ms : 60000;
  rc->poll_ms = cfg->poll_ms ? cfg->poll_ms : 25;
  uint8_t tok[16];
  randombytes_buf(tok, sizeof(tok));
  kiln_hex(tok, sizeof(tok), rc->token);
  uv_timer_init(loop, &rc->renew);
  rc->renew.data = rc;
  uint64_t every = rc->lock_ttl_ms / 3 ? rc->lock_ttl_ms / 3 : 1;
  uv_timer_start(&rc->renew, on_renew, every, every);
  uv_unref((uv_handle_t *)&rc->renew);
  *out = rc;
  return KILN_OK;
}

static void renew_closed(uv_handle_t *h) {
  kiln_remote_t *rc = h->data;
  sodium_memzero(rc->secret, sizeof(rc->secret));
  free(rc);
}

void kiln_remote_destroy(kiln_remote_t *rc) {
  if (!rc) return;
  kiln_redis_destroy(rc->redis); /* pending callbacks are not called */
  rc->redis = NULL;
  for (lookup_t *l = rc->lookups, *n; l; l = n) {
    n = l->next;
    uv_close((uv_handle_t *)&l->poll, lookup_closed);
  }
  rc->lookups = NULL;
  for (held_t *h = rc->held, *n; h; h = n) {
    n = h->next;
    free(h);
  }
  rc->held = NULL;
  for (put_ctx_t *p = rc->puts, *n; p; p = n) {
    n = p->next;
    free(p->queued);
    free(p);
  }
  rc->puts = NULL;
  for (pending_t *q = rc->queue, *n; q; q = n) {
    n = q->next;
    free(q);
  }
  rc->queue = rc->queue_tail = NULL;
  uv_close((uv_handle_t *)&rc->renew, renew_closed);
}

void kiln_remote_stats(const kiln_remote_t *rc, kiln_remote_stats_t *out) {
  *out = rc->st;
  kiln_redis_stats(rc->redis, &out->redis);
}

const char *kiln_remote_url(const kiln_remote_t *rc) { return kiln_redis_url(rc->redis); }

void kiln_remote_pack_stats(const kiln_remote_t *rc, msgpack_packer *pk) {
  kiln_remote_stats_t s;
  kiln_remote_stats(rc, &s);
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_str(&m, "url", kiln_remote_url(rc));
  kiln_fields_bool(&m, "up", s.redis.up);
  kiln_fields_u64(&m, "hits", s.hits);
  kiln_fields_u64(&m, "misses", s.misses);
  kiln_fields_u64(&m, "skipped", s.skipped);
  kiln_fields_u64(&m, "requeued", s.requeued);
  kiln_fields_u64(&m, "requeue_dropped", s.requeue_dropped);
  kiln_fields_u64(&m, "requeue_sent", s.requeue_sent);
  kiln_fields_u64(&m, "corrupt", s.corrupt);
  kiln_fields_u64(&m, "old_format", s.old_format);
  kiln_fields_u64(&m, "bytes_read", s.bytes_read);
  kiln_fields_u64(&m, "bytes_written", s.bytes_written);
  kiln_fields_u64(&m, "puts", s.puts);
  kiln_fields_u64(&m, "put_errors", s.put_errors);
  kiln_fields_u64(&m, "too_large", s.too_large);
  kiln_fields_u64(&m, "lock_waits", s.lock_waits);
  kiln_fields_u64(&m, "wait_hits", s.wait_hits);
  kiln_fields_u64(&m, "wait_timeouts", s.wait_timeouts);
  kiln_fields_u64(&m, "errors", s.redis.errors);
  kiln_fields_u64(&m, "timeouts", s.redis.timeouts);
  kiln_fields_u64(&m, "connects", s.redis.connects);
  kiln_fields_u64(&m, "disconnects", s.redis.disconnects);
  kiln_fields_u64(&m, "auth_failures", s.redis.auth_failures);
  kiln_fields_u64(&m, "max_bytes", rc->max_bytes);
  kiln_fields_u64(&m, "spare_used", s.redis.spare_used);
  kiln_fields_u64(&m, "spare_missed", s.redis.spare_missed);
  kiln_fields_u64(&m, "spare_bytes", s.redis.spare_bytes);
  kiln_fields_end(&m);
}

static void metric(FILE *f, const char *name, const char *type, const char *help) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void kiln_remote_stats_render(const kiln_remote_stats_t *s, FILE *f) {
  metric(f, "kiln_cache_remote_up", "gauge", "1 while the remote artifact tier (Redis) is connected.");
  fprintf(f, "kiln_cache_remote_up %d\n", s->redis.up ? 1 : 0);
  metric(f, "kiln_cache_remote_lookups_total", "counter",
         "Remote tier look-ups by result: hit, miss (built here), skipped (Redis down).");
  fprintf(f, "kiln_cache_remote_lookups_total{result=\"hit\"} %llu\n", (unsigned long long)s->hits);
  fprintf(f, "kiln_cache_remote_lookups_total{result=\"miss\"} %llu\n", (unsigned long long)s->misses);
  fprintf(f, "kiln_cache_remote_lookups_total{result=\"skipped\"} %llu\n", (unsigned long long)s->skipped);
  metric(f, "kiln_cache_remote_bytes_total", "counter", "Artifact bytes read from and written to Redis.");
  fprintf(f, "kiln_cache_remote_bytes_total{direction=\"read\"} %llu\n", (unsigned long long)s->bytes_read);
  fprintf(f, "kiln_cache_remote_bytes_total{direction=\"written\"} %llu\n", (unsigned long long)s->bytes_written);
  metric(f, "kiln_cache_remote_puts_total", "counter", "Builds offered to Redis by result: ok, error, too_large.");
  fprintf(f, "kiln_cache_remote_puts_total{result=\"ok\"} %llu\n", (unsigned long long)s->puts);
  fprintf(f, "kiln_cache_remote_puts_total{result=\"error\"} %llu\n", (unsigned long long)s->put_errors);
  fprintf(f, "kiln_cache_remote_puts_total{result=\"too_large\"} %llu\n", (unsigned long long)s->too_large);
  metric(f, "kiln_cache_remote_requeue_total", "counter",
         "Builds put while Redis was down, by fate: queued, sent (when Redis was back), dropped (the queue's bound).");
  fprintf(f, "kiln_cache_remote_requeue_total{result=\"queued\"} %llu\n", (unsigned long long)s->requeued);
  fprintf(f, "kiln_cache_remote_requeue_total{result=\"sent\"} %llu\n", (unsigned long long)s->requeue_sent);
  fprintf(f, "kiln_cache_remote_requeue_total{result=\"dropped\"} %llu\n", (unsigned long long)s->requeue_dropped);
  metric(f, "kiln_cache_remote_corrupt_total", "counter",
         "Remote entries refused (MAC, size, key or type) and deleted; the build ran here.");
  fprintf(f, "kiln_cache_remote_corrupt_total %llu\n", (unsigned long long)s->corrupt);
  metric(f, "kiln_cache_remote_old_format_total", "counter",
         "Of those, entries of an older format (KILNRMT1) from an older kilnd: deleted, rebuilt here.");
  fprintf(f, "kiln_cache_remote_old_format_total %llu\n", (unsigned long long)s->old_format);
  metric(f, "kiln_cache_remote_lock_waits_total", "counter",
         "Look-ups that found another host building the key, by how the wait ended: hit, timeout, other.");
  uint64_t other = s->lock_waits - s->wait_hits - s->wait_timeouts;
  fprintf(f, "kiln_cache_remote_lock_waits_total{result=\"hit\"} %llu\n", (unsigned long long)s->wait_hits);
  fprintf(f, "kiln_cache_remote_lock_waits_total{result=\"timeout\"} %llu\n", (unsigned long long)s->wait_timeouts);
  fprintf(f, "kiln_cache_remote_lock_waits_total{result=\"other\"} %llu\n", (unsigned long long)other);
  metric(f, "kiln_cache_remote_errors_total", "counter",
         "Redis trouble by kind: error replies, command or connect timeouts, refused AUTH, lost connections.");
  fprintf(f, "kiln_cache_remote_errors_total{kind=\"reply\"} %llu\n", (unsigned long long)s->redis.errors);
  fprintf(f, "kiln_cache_remote_errors_total{kind=\"timeout\"} %llu\n", (unsigned long long)s->redis.timeouts);
  fprintf(f, "kiln_cache_remote_errors_total{kind=\"auth\"} %llu\n", (unsigned long long)s->redis.auth_failures);
  fprintf(f, "kiln_cache_remote_errors_total{kind=\"disconnect\"} %llu\n", (unsigned long long)s->redis.disconnects);
}
