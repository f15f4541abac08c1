/* TLS 1.3 records after the handshake (protocol/tls13.h). libcrypto's errors are converted
 * here, once. */
#include "protocol/tls13.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

#define HEADER 5u
#define TAG 16u
#define CONTENT_ALERT 21
#define CONTENT_HANDSHAKE 22
#define CONTENT_DATA 23
/* RFC 8446 §6 alert descriptions this file sends. */
#define ALERT_CLOSE_NOTIFY 0
#define ALERT_UNEXPECTED_MESSAGE 10
#define ALERT_BAD_RECORD_MAC 20
#define ALERT_RECORD_OVERFLOW 22
#define ALERT_DECODE_ERROR 50
#define ALERT_INTERNAL_ERROR 80
/* New sending keys before this many records: RFC 8446 §5.5 allows AES-GCM 2^24.5 full ones. */
#define REKEY_AFTER (1ull << 24)
/* Runs of at least this many records go to the pool; at most BATCH are opened per run. */
#define POOL_MIN_RECORDS 8
#define BATCH 256
#define POOL_MAX_THREADS 16

static const EVP_CIPHER *suite_cipher(uint16_t suite) {
  switch (suite) {
    case 0x1301: return EVP_aes_128_gcm();
    case 0x1302: return EVP_aes_256_gcm();
    case 0x1303: return EVP_chacha20_poly1305();
    default: return NULL;
  }
}

static const EVP_MD *suite_md(uint16_t suite) { return suite == 0x1302 ? EVP_sha384() : EVP_sha256(); }

/* HKDF-Expand-Label(secret, label, "", n) for n <= the hash length (RFC 8446 §7.1): one HMAC
 * block, HMAC(secret, HkdfLabel || 0x01). */
static bool expand_label(const kiln_tls13_t *t, const uint8_t *secret, const char *label,
                         uint8_t *out, size_t n) {
  uint8_t info[64], mac[EVP_MAX_MD_SIZE];
  size_t ll = 6 + strlen(label), k = 0;
  info[k++] = (uint8_t)(n >> 8);
  info[k++] = (uint8_t)n;
  info[k++] = (uint8_t)ll;
  memcpy(info + k, "tls13 ", 6);
  memcpy(info + k + 6, label, ll - 6);
  k += ll;
  info[k++] = 0; /* empty context */
  info[k++] = 1; /* the HKDF block counter */
  unsigned int ml = 0;
  if (!HMAC(suite_md(t->suite), secret, (int)t->hash_len, info, k, mac, &ml) || ml < n) return false;
  memcpy(out, mac, n);
  OPENSSL_cleanse(mac, sizeof(mac));
  return true;
}

/* Keys and IV from d->secret; the record counter starts again. */
static bool set_keys(kiln_tls13_t *t, kiln_tls13_dir_t *d, int enc) {
  const EVP_CIPHER *cipher = suite_cipher(t->suite);
  uint8_t key[32];
  size_t key_len = (size_t)EVP_CIPHER_get_key_length(cipher);
  bool ok = key_len <= sizeof(key) && expand_label(t, d->secret, "key", key, key_len) &&
            expand_label(t, d->secret, "iv", d->iv, sizeof(d->iv)) &&
            (d->ctx || (d->ctx = EVP_CIPHER_CTX_new())) &&
            EVP_CipherInit_ex(d->ctx, cipher, NULL, key, NULL, enc) == 1;
  memcpy(d->key, key, sizeof(key));
  OPENSSL_cleanse(key, sizeof(key));
  d->seq = 0;
  return ok;
}

/* The next secret of a direction (KeyUpdate, RFC 8446 §7.2). */
static bool next_secret(kiln_tls13_t *t, kiln_tls13_dir_t *d, int enc) {
  uint8_t s[48];
  if (!expand_label(t, d->secret, "traffic upd", s, t->hash_len)) return false;
  memcpy(d->secret, s, t->hash_len);
  OPENSSL_cleanse(s, sizeof(s));
  return set_keys(t, d, enc);
}

kiln_status_t kiln_tls13_init(kiln_tls13_t *t, uint16_t suite, const uint8_t *rx_secret,
                              const uint8_t *tx_secret, size_t secret_len) {
  memset(t, 0, sizeof(*t));
  t->alert = -1;
  t->suite = suite;
  t->hash_len = suite == 0x1302 ? 48 : 32;
  if (!suite_cipher(suite) || secret_len != t->hash_len)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "TLS 1.3 suite 0x%04x with a %zu-byte secret is not one kiln "
                       "knows", suite, secret_len);
  memcpy(t->rx.secret, rx_secret, secret_len);
  memcpy(t->tx.secret, tx_secret, secret_len);
  t->plain = malloc(KILN_TLS13_MAX_RECORD);
  if (!t->plain || !set_keys(t, &t->rx, 0) || !set_keys(t, &t->tx, 1)) {
    kiln_tls13_deinit(t);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cannot set up TLS record keys");
  }
  return KILN_OK;
}

void kiln_tls13_deinit(kiln_tls13_t *t) {
  EVP_CIPHER_CTX_free(t->rx.ctx);
  EVP_CIPHER_CTX_free(t->tx.ctx);
  EVP_CIPHER_CTX_free(t->share_ctx);
  free(t->carry);
  free(t->plain);
  OPENSSL_cleanse(t, sizeof(*t));
  t->alert = -1;
}

/* The nonce of record `seq`: the IV xor the record counter, big-endian at its end. */
static void nonce_at(const kiln_tls13_dir_t *d, uint64_t seq, uint8_t out[12]) {
  memcpy(out, d->iv, 12);
  for (int i = 0; i < 8; i++) out[11 - i] ^= (uint8_t)(seq >> (8 * i));
}

static void nonce(const kiln_tls13_dir_t *d, uint8_t out[12]) { nonce_at(d, d->seq, out); }

/* Decrypts and authenticates the record at rec (header included, total bytes) into out
 * (total - HEADER - TAG bytes). */
static bool aead_open(kiln_tls13_dir_t *d, const uint8_t *rec, size_t total, uint8_t *out) {
  uint8_t iv[12];
  int k = 0, k2 = 0;
  size_t n = total - HEADER - TAG;
  nonce(d, iv);
  EVP_CIPHER_CTX *c = d->ctx;
  if (EVP_DecryptInit_ex(c, NULL, NULL, NULL, iv) != 1 || EVP_DecryptUpdate(c, NULL, &k, rec, HEADER) != 1 ||
      EVP_DecryptUpdate(c, out, &k, rec + HEADER, (int)n) != 1 ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, TAG, (void *)(rec + HEADER + n)) != 1 ||
      EVP_DecryptFinal_ex(c, out + k, &k2) != 1)
    return false;
  d->seq++;
  return true;
}

/* Seals n bytes (at most KILN_TLS13_MAX_PLAIN) of content `type` as one record at out;
 * returns its length, 0 on failure. */
static size_t aead_seal(kiln_tls13_dir_t *d, uint8_t type, const uint8_t *p, size_t n, uint8_t *out) {
  size_t len = n + 1 + TAG;
  uint8_t iv[12];
  int k = 0, k2 = 0, k3 = 0;
  out[0] = CONTENT_DATA; /* the outer type of every protected record */
  out[1] = 3;
  out[2] = 3;
  out[3] = (uint8_t)(len >> 8);
  out[4] = (uint8_t)len;
  nonce(d, iv);
  EVP_CIPHER_CTX *c = d->ctx;
  if (EVP_EncryptInit_ex(c, NULL, NULL, NULL, iv) != 1 || EVP_EncryptUpdate(c, NULL, &k, out, HEADER) != 1 ||
      (n && EVP_EncryptUpdate(c, out + HEADER, &k, p, (int)n) != 1) ||
      EVP_EncryptUpdate(c, out + HEADER + n, &k2, &type, 1) != 1 ||
      EVP_EncryptFinal_ex(c, out + HEADER + n + 1, &k3) != 1 ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, TAG, out + HEADER + n + 1) != 1)
    return 0;
  d->seq++;
  return HEADER + len;
}

/* RFC 8446 §6's names of the alerts a peer may end the stream with. */
static const char *alert_name(uint8_t a) {
  switch (a) {
    case 10: return "unexpected message";
    case 20: return "bad record mac";
    case 22: return "record overflow";
    case 40: return "handshake failure";
    case 42: return "bad certificate";
    case 43: return "unsupported certificate";
    case 44: return "certificate revoked";
    case 45: return "certificate expired";
    case 46: return "certificate unknown";
    case 47: return "illegal parameter";
    case 48: return "unknown CA (certificate)";
    case 49: return "access denied";
    case 50: return "decode error";
    case 51: return "decrypt error";
    case 70: return "protocol version";
    case 80: return "internal error";
    case 90: return "user canceled";
    case 109: return "missing extension";
    case 116: return "certificate required";
    default: return "unknown";
  }
}

/* --- the pool ------------------------------------------------------------------------------ */

/* One record of a run being opened: where its content goes, and what came of it. */
typedef struct run_rec {
  const uint8_t *rec;
  size_t total;
  uint8_t *out; /* total - HEADER - TAG - 1 bytes: the content, the type byte aside */
  uint8_t type;
  bool ok;
} run_rec_t;

/* A share of a run: records [first, first + count) with nonces from seq. */
typedef struct task {
  const kiln_tls13_dir_t *dir;
  const EVP_CIPHER *cipher;
  uint64_t seq;
  size_t count;
  run_rec_t *recs;     /* opening: count records */
  const uint8_t *src;  /* sealing: n bytes into count records at dst */
  size_t n;
  uint8_t *dst;
  bool ok;
} task_t;

struct kiln_tls13_pool {
  pthread_mutex_t run;  /* held by the caller of a run */
  pthread_mutex_t mu;   /* the fields below */
  pthread_cond_t go, done;
  task_t *tasks;
  size_t ntasks, next, pending;
  bool stop;
  pid_t pid; /* after a fork the threads are gone: the child works alone */
  int n;
  pthread_t th[POOL_MAX_THREADS];
};

/* Opens one record with content to out and the type byte aside (the next record's content
 * may start where the type byte would go). */
static bool open_split(EVP_CIPHER_CTX *c, const kiln_tls13_dir_t *d, uint64_t seq, run_rec_t *r) {
  uint8_t iv[12];
  int k = 0;
  size_t n = r->total - HEADER - TAG - 1;
  nonce_at(d, seq, iv);
  return EVP_DecryptInit_ex(c, NULL, NULL, NULL, iv) == 1 &&
         EVP_DecryptUpdate(c, NULL, &k, r->rec, HEADER) == 1 &&
         (!n || EVP_DecryptUpdate(c, r->out, &k, r->rec + HEADER, (int)n) == 1) &&
         EVP_DecryptUpdate(c, &r->type, &k, r->rec + HEADER + n, 1) == 1 &&
         EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, TAG, (void *)(r->rec + HEADER + n + 1)) == 1 &&
         EVP_DecryptFinal_ex(c, r->out + n, &k) == 1;
}

static void run_task(EVP_CIPHER_CTX *c, task_t *t) {
  bool enc = t->recs == NULL;
  t->ok = EVP_CipherInit_ex(c, t->cipher, NULL, t->dir->key, NULL, enc) == 1;
  kiln_tls13_dir_t d = {.ctx = c, .seq = t->seq};
  memcpy(d.iv, t->dir->iv, sizeof(d.iv));
  for (size_t i = 0; t->ok && i < t->count; i++) {
    if (enc) {
      size_t k = KILN_MIN(t->n - i * KILN_TLS13_MAX_PLAIN, (size_t)KILN_TLS13_MAX_PLAIN);
      t->ok = aead_seal(&d, CONTENT_DATA, t->src + i * KILN_TLS13_MAX_PLAIN, k,
                        t->dst + i * (KILN_TLS13_MAX_PLAIN + HEADER + 1 + TAG)) != 0;
    } else {
      t->recs[i].ok = open_split(c, &d, t->seq + i, &t->recs[i]);
    }
  }
  OPENSSL_cleanse(&d, sizeof(d));
}

static void *pool_thread(void *arg) {
  kiln_tls13_pool_t *p = arg;
  EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->next >= p->ntasks) pthread_cond_wait(&p->go, &p->mu);
    if (p->stop) break;
    task_t *t = &p->tasks[p->next++];
    pthread_mutex_unlock(&p->mu);
    if (c) run_task(c, t);
    else t->ok = false;
    pthread_mutex_lock(&p->mu);
    if (--p->pending == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  EVP_CIPHER_CTX_free(c);
  return NULL;
}

kiln_status_t kiln_tls13_pool_create(int threads, kiln_tls13_pool_t **out) {
  *out = NULL;
  if (threads < 0) {
    const char *env = getenv("KILN_TLS_THREADS");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    /* A quarter of the cores, at most 3: on a small machine the threads only take turns with
     * the peer on the same cores (2 cores: +0.15 CPU s/GB per side, no faster). */
    threads = env && *env ? atoi(env) : (int)KILN_MIN(3, cores / 4);
  }
  threads = KILN_MIN(threads, POOL_MAX_THREADS);
  if (threads <= 0) return KILN_OK;
  kiln_tls13_pool_t *p = calloc(1, sizeof(*p));
  if (!p) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for the TLS pool");
  pthread_mutex_init(&p->run, NULL);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  p->pid = getpid();
  for (; p->n < threads; p->n++)
    if (pthread_create(&p->th[p->n], NULL, pool_thread, p) != 0) break;
  if (p->n == 0) {
    kiln_tls13_pool_destroy(p);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cannot start the TLS pool's threads");
  }
  *out = p;
  return KILN_OK;
}

void kiln_tls13_pool_destroy(kiln_tls13_pool_t *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n; i++) pthread_join(p->th[i], NULL);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->run);
  free(p);
}

int kiln_tls13_pool_threads(const kiln_tls13_pool_t *p) { return p ? p->n : 0; }

/* The pool, for one run, if it is there and free. */
static kiln_tls13_pool_t *pool_take(kiln_tls13_t *t) {
  kiln_tls13_pool_t *p = t->pool;
  if (!p || p->pid != getpid() || (!t->share_ctx && !(t->share_ctx = EVP_CIPHER_CTX_new())))
    return NULL;
  return pthread_mutex_trylock(&p->run) == 0 ? p : NULL;
}

/* Runs the tasks (the caller takes shares too) and returns when all are done. */
static void pool_run(kiln_tls13_t *t, kiln_tls13_pool_t *p, task_t *tasks, size_t n) {
  pthread_mutex_lock(&p->mu);
  p->tasks = tasks;
  p->ntasks = n;
  p->next = 0;
  p->pending = n;
  pthread_cond_broadcast(&p->go);
  while (p->next < p->ntasks) {
    task_t *k = &p->tasks[p->next++];
    pthread_mutex_unlock(&p->mu);
    run_task(t->share_ctx, k);
    pthread_mutex_lock(&p->mu);
    p->pending--;
  }
  while (p->pending) pthread_cond_wait(&p->done, &p->mu);
  p->tasks = NULL;
  p->ntasks = p->next = 0;
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&p->run);
}

/* Splits `count` records into a share per thread (the caller's included). */
static size_t shares(const kiln_tls13_pool_t *p, size_t count, size_t *per) {
  size_t k = (size_t)p->n + 1;
  *per = (count + k - 1) / k;
  return (count + *per - 1) / *per;
}

/* Seals n bytes (whole records but the last) on the pool; false when it was not used. */
static bool seal_pooled(kiln_tls13_t *t, const uint8_t *s, size_t n, uint8_t *out, size_t *out_len,
                        bool *ok) {
  size_t records = (n + KILN_TLS13_MAX_PLAIN - 1) / KILN_TLS13_MAX_PLAIN, per;
  if (records < POOL_MIN_RECORDS) return false;
  kiln_tls13_pool_t *p = pool_take(t);
  if (!p) return false;
  task_t tasks[POOL_MAX_THREADS + 1];
  size_t k = shares(p, records, &per);
  for (size_t i = 0; i < k; i++) {
    size_t first = i * per, bytes = first * KILN_TLS13_MAX_PLAIN;
    tasks[i] = (task_t){.dir = &t->tx, .cipher = suite_cipher(t->suite), .seq = t->tx.seq + first,
                        .count = KILN_MIN(per, records - first), .src = s + bytes,
                        .n = KILN_MIN(n - bytes, per * KILN_TLS13_MAX_PLAIN),
                        .dst = out + first * (KILN_TLS13_MAX_PLAIN + HEADER + 1 + TAG)};
  }
  pool_run(t, p, tasks, k);
  *ok = true;
  for (size_t i = 0; i < k; i++) *ok = *ok && tasks[i].ok;
  t->tx.seq += records;
  *out_len = n + records * (HEADER + 1 + TAG);
  return true;
}

/* Opens a run of whole records from *in straight into dst on the pool, assuming what every
 * kiln and OpenSSL peer sends: application data without padding, so that each record's place
 * in dst is known before it is opened. The run ends before the first record that is not so (a
 * padded one, an alert, a KeyUpdate, one failing authentication): the caller's one-by-one
 * path opens that one again and deals with it. Returns the bytes delivered. */
static size_t open_pooled(kiln_tls13_t *t, const uint8_t **in, size_t *in_len, uint8_t *dst, size_t cap) {
  run_rec_t recs[BATCH];
  size_t count = 0, off = 0, used = 0;
  while (count < BATCH && *in_len - used >= HEADER) {
    const uint8_t *h = *in + used;
    size_t len = ((size_t)h[3] << 8) | h[4];
    if (h[0] != CONTENT_DATA || len < TAG + 1 || len > KILN_TLS13_MAX_PLAIN + 1 + TAG ||
        *in_len - used < HEADER + len || off + len - TAG - 1 > cap)
      break;
    recs[count++] = (run_rec_t){.rec = h, .total = HEADER + len, .out = dst + off};
    off += len - TAG - 1;
    used += HEADER + len;
  }
  if (count < POOL_MIN_RECORDS) return 0;
  kiln_tls13_pool_t *p = pool_take(t);
  if (!p) return 0;
  task_t tasks[POOL_MAX_THREADS + 1];
  size_t per, k = shares(p, count, &per);
  for (size_t i = 0; i < k; i++)
    tasks[i] = (task_t){.dir = &t->rx, .cipher = suite_cipher(t->suite), .seq = t->rx.seq + i * per,
                        .count = KILN_MIN(per, count - i * per), .recs = recs + i * per};
  pool_run(t, p, tasks, k);
  size_t good = 0, bytes = 0;
  for (; good < count && recs[good].ok && recs[good].type == CONTENT_DATA; good++)
    bytes += recs[good].total - HEADER - TAG - 1;
  /* A peer that pads or sends other records gets them opened one by one for a while, not
   * opened twice run after run. */
  if (good < count) t->one_by_one = 4 * BATCH;
  t->rx.seq += good;
  used = good ? (size_t)(recs[good - 1].rec + recs[good - 1].total - *in) : 0;
  *in += used;
  *in_len -= used;
  return bytes;
}

static void fail(kiln_tls13_t *t, int alert, const char *why) {
  if (t->error[0]) return;
  t->alert = alert;
  snprintf(t->error, sizeof(t->error), "%s", why);
}

/* Length of the record whose header is at h, 0 after failing the stream for a bad header. */
static size_t record_length(kiln_tls13_t *t, const uint8_t *h) {
  size_t len = ((size_t)h[3] << 8) | h[4];
  if (h[0] != CONTENT_DATA) {
    fail(t, ALERT_UNEXPECTED_MESSAGE, h[0] == CONTENT_ALERT ? "an unprotected alert after the handshake"
                                                            : "an unprotected record after the handshake");
    return 0;
  }
  if (len > KILN_TLS13_MAX_RECORD - HEADER) {
    fail(t, ALERT_RECORD_OVERFLOW, "a record longer than TLS allows");
    return 0;
  }
  if (len < TAG + 1) {
    fail(t, ALERT_DECODE_ERROR, "a record too short to hold its tag");
    return 0;
  }
  return HEADER + len;
}

/* Handshake messages after the handshake (whole ones, in one record). */
static void handshake_messages(kiln_tls13_t *t, const uint8_t *p, size_t n) {
  while (n > 0) {
    if (n < 4) {
      fail(t, ALERT_UNEXPECTED_MESSAGE, "a handshake message split across records");
      return;
    }
    size_t len = ((size_t)p[1] << 16) | ((size_t)p[2] << 8) | p[3];
    if (len > n - 4) {
      fail(t, ALERT_UNEXPECTED_MESSAGE, "a handshake message split across records");
      return;
    }
    if (p[0] == 24) { /* KeyUpdate */
      if (len != 1 || p[4] > 1) {
        fail(t, ALERT_DECODE_ERROR, "a malformed KeyUpdate");
        return;
      }
      if (!next_secret(t, &t->rx, 0)) {
        fail(t, ALERT_INTERNAL_ERROR, "cannot derive the peer's next keys");
        return;
      }
      if (p[4] == 1) t->update_due = true;
    } else if (p[0] != 4) { /* NewSessionTicket: kiln does not resume sessions */
      fail(t, ALERT_UNEXPECTED_MESSAGE, "an unexpected handshake message after the handshake");
      return;
    }
    p += 4 + len;
    n -= 4 + len;
  }
}

/* The next whole record, from what was kept (completed from *in) or from *in; NULL when
 * there is none yet or the stream failed. */
static const uint8_t *next_record(kiln_tls13_t *t, const uint8_t **in, size_t *in_len, size_t *out_total) {
  if (t->carry_len > t->carry_off) {
    size_t have = t->carry_len - t->carry_off;
    size_t want = HEADER;
    if (have >= HEADER && !(want = record_length(t, t->carry + t->carry_off))) return NULL;
    if (have < want) {
      /* Part of a record: complete it from the input (the carry has room: keep reserved a
       * whole record). */
      size_t take = KILN_MIN(want - have, *in_len);
      memcpy(t->carry + t->carry_len, *in, take);
      t->carry_len += take;
      *in += take;
      *in_len -= take;
      if (have + take < HEADER) return NULL;
      if (have < HEADER) return next_record(t, in, in_len, out_total); /* now with its header */
      if (have + take < want) return NULL;
    }
    const uint8_t *rec = t->carry + t->carry_off;
    *out_total = want;
    t->carry_off += want;
    return rec;
  }
  if (*in_len < HEADER) return NULL;
  size_t total = record_length(t, *in);
  if (!total || *in_len < total) return NULL;
  const uint8_t *rec = *in;
  *in += total;
  *in_len -= total;
  *out_total = total;
  return rec;
}

kiln_tls13_result_t kiln_tls13_open(kiln_tls13_t *t, const uint8_t **in, size_t *in_len, void *dst,
                                    size_t cap, size_t *out_n) {
  uint8_t *d = dst;
  size_t got = 0;
  while (!t->error[0] && got < cap) {
    if (t->plain_len > t->plain_off) {
      size_t k = KILN_MIN(cap - got, t->plain_len - t->plain_off);
      memcpy(d + got, t->plain + t->plain_off, k);
      got += k;
      t->plain_off += k;
      continue;
    }
    if (t->closed) break;
    if (t->pool && t->carry_len == t->carry_off && !t->one_by_one) {
      size_t k = open_pooled(t, in, in_len, d + got, cap - got);
      got += k;
      if (k) continue;
    }
    size_t total;
    const uint8_t *rec = next_record(t, in, in_len, &total);
    if (!rec) break;
    if (t->one_by_one) t->one_by_one--;
    /* Straight into dst when the record's content fits there, else aside. */
    size_t n = total - HEADER - TAG;
    if (n > KILN_TLS13_MAX_PLAIN + 1) { /* content, type and padding: RFC 8446 §5.4 */
      fail(t, ALERT_RECORD_OVERFLOW, "a record with more content than TLS allows");
      break;
    }
    uint8_t *out = cap - got >= n ? d + got : t->plain;
    if (!aead_open(&t->rx, rec, total, out)) {
      fail(t, ALERT_BAD_RECORD_MAC, "a record failed authentication");
      break;
    }
    if (t->carry_off == t->carry_len) t->carry_off = t->carry_len = 0;
    while (n > 0 && out[n - 1] == 0) n--; /* padding */
    if (n == 0) {
      fail(t, ALERT_UNEXPECTED_MESSAGE, "a record without a content type");
      break;
    }
    uint8_t type = out[--n];
    if (type == CONTENT_DATA) {
      if (out == t->plain) {
        t->plain_off = 0;
        t->plain_len = n;
      } else {
        got += n;
      }
    } else if (type == CONTENT_ALERT) {
      if (n != 2) {
        fail(t, ALERT_DECODE_ERROR, "a malformed alert");
      } else if (out[1] == ALERT_CLOSE_NOTIFY) {
        t->closed = true;
      } else {
        char why[96];
        snprintf(why, sizeof(why), "the peer sent alert %u (%s)", out[1], alert_name(out[1]));
        fail(t, -1, why);
        t->alert = -2; /* the peer is gone: nothing to answer */
      }
    } else if (type == CONTENT_HANDSHAKE) {
      handshake_messages(t, out, n);
    } else {
      fail(t, ALERT_UNEXPECTED_MESSAGE, "a record of an unknown content type");
    }
  }
  *out_n = got;
  if (got) return KILN_TLS13_DATA;
  if (t->error[0]) return KILN_TLS13_ERROR;
  return t->closed ? KILN_TLS13_CLOSED : KILN_TLS13_AGAIN;
}

kiln_status_t kiln_tls13_keep(kiln_tls13_t *t, const uint8_t *in, size_t n) {
  if (t->carry_off) {
    memmove(t->carry, t->carry + t->carry_off, t->carry_len - t->carry_off);
    t->carry_len -= t->carry_off;
    t->carry_off = 0;
  }
  /* Room for what is kept plus the rest of a record open may complete in place. */
  size_t need = t->carry_len + n + KILN_TLS13_MAX_RECORD;
  if (need > t->carry_cap) {
    uint8_t *p = realloc(t->carry, need);
    if (!p) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory buffering TLS input");
    t->carry = p;
    t->carry_cap = need;
  }
  if (n) memcpy(t->carry + t->carry_len, in, n);
  t->carry_len += n;
  return KILN_OK;
}

bool kiln_tls13_partial(const kiln_tls13_t *t) {
  return t->carry_len > t->carry_off || t->plain_len > t->plain_off;
}

bool kiln_tls13_readable(const kiln_tls13_t *t) {
  if (t->plain_len > t->plain_off || t->error[0] || t->closed) return t->plain_len > t->plain_off;
  size_t have = t->carry_len - t->carry_off;
  if (have < HEADER) return false;
  const uint8_t *h = t->carry + t->carry_off;
  return have >= HEADER + (((size_t)h[3] << 8) | h[4]) || h[0] != CONTENT_DATA;
}

size_t kiln_tls13_seal_bound(size_t n) {
  size_t records = n / KILN_TLS13_MAX_PLAIN + 1;
  return n + records * (HEADER + 1 + TAG) + KILN_TLS13_ALERT_BYTES; /* and a KeyUpdate */
}

kiln_status_t kiln_tls13_seal(kiln_tls13_t *t, const void *p, size_t n, uint8_t *out, size_t *out_len) {
  const uint8_t *s = p;
  size_t w = 0;
  *out_len = 0;
  if (t->update_due || t->tx.seq >= REKEY_AFTER) {
    /* KeyUpdate(update_not_requested) under the old keys, then the new ones. */
    static const uint8_t key_update[5] = {24, 0, 0, 1, 0};
    size_t k = aead_seal(&t->tx, CONTENT_HANDSHAKE, key_update, sizeof(key_update), out);
    if (!k || !next_secret(t, &t->tx, 1))
      return KILN_STATUS(KILN_E_INTERNAL, "cannot update the TLS sending keys");
    w += k;
    t->update_due = false;
  }
  size_t pooled = 0;
  bool ok = true;
  if (t->pool && seal_pooled(t, s, n, out + w, &pooled, &ok)) {
    *out_len = w + pooled;
    return ok ? KILN_OK : KILN_STATUS(KILN_E_INTERNAL, "TLS record encryption failed");
  }
  while (n > 0) {
    size_t k = KILN_MIN(n, (size_t)KILN_TLS13_MAX_PLAIN);
    size_t r = aead_seal(&t->tx, CONTENT_DATA, s, k, out + w);
    if (!r) return KILN_STATUS(KILN_E_INTERNAL, "TLS record encryption failed");
    w += r;
    s += k;
    n -= k;
  }
  *out_len = w;
  return KILN_OK;
}

size_t kiln_tls13_seal_alert(kiln_tls13_t *t, uint8_t *out) {
  if (t->alert == -2) return 0;
  uint8_t a[2] = {t->error[0] ? 2 : 1, t->error[0] ? (uint8_t)t->alert : ALERT_CLOSE_NOTIFY};
  return t->tx.ctx ? aead_seal(&t->tx, CONTENT_ALERT, a, sizeof(a), out) : 0;
}

bool kiln_tls13_keylog_secret(const char *line, const char *label, uint8_t *out, size_t cap,
                              size_t *out_len) {
  size_t ll = strlen(label);
  if (strncmp(line, label, ll) != 0 || line[ll] != ' ') return false;
  const char *hex = strrchr(line, ' ') + 1;
  size_t n = strlen(hex);
  if (n % 2 || n / 2 > cap || hex == line + ll + 1) return false;
  for (size_t i = 0; i < n; i++) {
    char ch = hex[i];
    int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
          : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
    if (v < 0) return false;
    out[i / 2] = (uint8_t)(i % 2 ? (out[i / 2] << 4) | v : v);
  }
  *out_len = n / 2;
  return true;
}
