/* kiln's TLS 1.3 records (protocol/tls13.h) against OpenSSL's: a real OpenSSL client and
 * server shake hands in memory, then kiln's records take the client's place. What kiln seals
 * OpenSSL's server must read, and what OpenSSL's server writes (padded records, KeyUpdates,
 * close_notify) kiln must open, fed whole, one byte at a time and in random splits, into
 * destinations of every size. Forged, oversized and unprotected records fail the stream with
 * the alert RFC 8446 names. */
#include <criterion/criterion.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/tls13.h"

typedef struct keys {
  uint8_t s[2][48]; /* client, server traffic secret */
  size_t len[2];
} keys_t;

static void keylog(const SSL *ssl, const char *line) {
  keys_t *k = SSL_get_app_data(ssl);
  kiln_tls13_keylog_secret(line, "CLIENT_TRAFFIC_SECRET_0", k->s[0], 48, &k->len[0]);
  kiln_tls13_keylog_secret(line, "SERVER_TRAFFIC_SECRET_0", k->s[1], 48, &k->len[1]);
}

typedef struct pair {
  SSL_CTX *cctx, *sctx;
  SSL *client, *server;
  BIO *c_in, *c_out, *s_in, *s_out; /* memory BIOs: what each side reads and writes */
  keys_t keys;
  kiln_tls13_t rec; /* kiln in the client's place after the handshake */
} pair_t;

/* A self-signed P-256 certificate for the server. */
static void self_signed(SSL_CTX *ctx) {
  EVP_PKEY *key = EVP_EC_gen("P-256");
  X509 *x = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), 0);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC, (const unsigned char *)"kiln", -1,
                             -1, 0);
  X509_set_issuer_name(x, X509_get_subject_name(x));
  cr_assert(X509_sign(x, key, EVP_sha256()) > 0);
  cr_assert(SSL_CTX_use_certificate(ctx, x) == 1 && SSL_CTX_use_PrivateKey(ctx, key) == 1);
  X509_free(x);
  EVP_PKEY_free(key);
}

static void move(BIO *from, BIO *to) {
  char buf[4096];
  int n;
  while ((n = BIO_read(from, buf, sizeof(buf))) > 0) BIO_write(to, buf, n);
}

/* Hands shaken with `suite`; kiln's records take over the client's side. */
static void pair_init(pair_t *p, const char *suite) {
  memset(p, 0, sizeof(*p));
  p->cctx = SSL_CTX_new(TLS_client_method());
  p->sctx = SSL_CTX_new(TLS_server_method());
  SSL_CTX_set_min_proto_version(p->cctx, TLS1_3_VERSION);
  SSL_CTX_set_min_proto_version(p->sctx, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(p->cctx, suite);
  SSL_CTX_set_ciphersuites(p->sctx, suite);
  SSL_CTX_set_num_tickets(p->sctx, 0);
  SSL_CTX_set_keylog_callback(p->cctx, keylog);
  self_signed(p->sctx);
  p->client = SSL_new(p->cctx);
  p->server = SSL_new(p->sctx);
  SSL_set_app_data(p->client, &p->keys);
  p->c_in = BIO_new(BIO_s_mem());
  p->c_out = BIO_new(BIO_s_mem());
  p->s_in = BIO_new(BIO_s_mem());
  p->s_out = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(p->c_in, -1);
  BIO_set_mem_eof_return(p->s_in, -1);
  SSL_set_bio(p->client, p->c_in, p->c_out);
  SSL_set_bio(p->server, p->s_in, p->s_out);
  SSL_set_connect_state(p->client);
  SSL_set_accept_state(p->server);
  int c = 0, s = 0;
  for (int i = 0; i < 10 && (c != 1 || s != 1); i++) {
    if (c != 1) c = SSL_do_handshake(p->client);
    move(p->c_out, p->s_in);
    if (s != 1) s = SSL_do_handshake(p->server);
    move(p->s_out, p->c_in);
  }
  cr_assert(c == 1 && s == 1, "the handshake did not complete");
  cr_assert_eq(p->keys.len[0], p->keys.len[1]);
  uint16_t id = (uint16_t)SSL_CIPHER_get_protocol_id(SSL_get_current_cipher(p->client));
  cr_assert_null(kiln_tls13_init(&p->rec, id, p->keys.s[1], p->keys.s[0], p->keys.len[0]));
}

static void pair_deinit(pair_t *p) {
  kiln_tls13_deinit(&p->rec);
  SSL_free(p->client);
  SSL_free(p->server);
  SSL_CTX_free(p->cctx);
  SSL_CTX_free(p->sctx);
}

/* kiln seals n bytes; OpenSSL's server must read them back. */
static void kiln_to_openssl(pair_t *p, const uint8_t *data, size_t n) {
  uint8_t *out = malloc(kiln_tls13_seal_bound(n));
  size_t w = 0;
  cr_assert_null(kiln_tls13_seal(&p->rec, data, n, out, &w));
  cr_assert_leq(w, kiln_tls13_seal_bound(n));
  BIO_write(p->s_in, out, (int)w);
  free(out);
  uint8_t *back = malloc(n + 1);
  size_t got = 0;
  while (got < n) {
    size_t k = 0;
    cr_assert(SSL_read_ex(p->server, back + got, n - got, &k) == 1, "OpenSSL refused kiln's records");
    got += k;
  }
  cr_assert(memcmp(back, data, n) == 0);
  free(back);
}

/* Ciphertext OpenSSL's server wrote, opened by kiln with input pieces of `piece` bytes (0:
 * random) into destinations of `cap` bytes (0: random). Returns the bytes opened. */
static size_t open_all(pair_t *p, uint8_t *dst, size_t dst_cap, size_t piece, size_t cap, kiln_tls13_result_t *last) {
  char *ct;
  long ct_len = BIO_get_mem_data(p->s_out, &ct);
  uint8_t *copy = malloc((size_t)ct_len + 1);
  memcpy(copy, ct, (size_t)ct_len);
  (void)BIO_reset(p->s_out);
  size_t off = 0, got = 0;
  *last = KILN_TLS13_AGAIN;
  while (off < (size_t)ct_len) {
    size_t k = piece ? piece : 1 + (size_t)rand() % 40000;
    k = k < (size_t)ct_len - off ? k : (size_t)ct_len - off;
    /* The feed is a fresh buffer each time, as libuv's reads are: what is left is kept. */
    uint8_t *feed = malloc(k);
    memcpy(feed, copy + off, k);
    off += k;
    const uint8_t *in = feed;
    size_t in_len = k;
    for (;;) {
      size_t c = cap ? cap : 1 + (size_t)rand() % 20000, n = 0;
      if (c > dst_cap - got) c = dst_cap - got;
      *last = kiln_tls13_open(&p->rec, &in, &in_len, dst + got, c, &n);
      got += n;
      if (*last != KILN_TLS13_DATA || got == dst_cap) break;
    }
    cr_assert_null(kiln_tls13_keep(&p->rec, in, in_len));
    free(feed);
    if (*last == KILN_TLS13_ERROR || *last == KILN_TLS13_CLOSED) break;
  }
  free(copy);
  return got;
}

static void openssl_writes(pair_t *p, const uint8_t *data, size_t n, size_t record) {
  for (size_t off = 0; off < n;) {
    size_t k = record ? record : 1 + (size_t)rand() % 16384, done = 0;
    if (k > n - off) k = n - off;
    cr_assert(SSL_write_ex(p->server, data + off, k, &done) == 1 && done == k);
    off += k;
  }
}

static uint8_t *pattern(size_t n) {
  uint8_t *b = malloc(n);
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 2654435761u >> 13);
  return b;
}

TestSuite(tls13, .timeout = 120);

Test(tls13, both_ways_with_every_suite_split_every_way) {
  const char *suites[] = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"};
  size_t n = 300000;
  uint8_t *data = pattern(n), *back = malloc(n);
  for (int s = 0; s < 3; s++) {
    pair_t p;
    pair_init(&p, suites[s]);
    kiln_to_openssl(&p, data, n);
    kiln_to_openssl(&p, data, 1);
    kiln_to_openssl(&p, data, 16384);
    kiln_to_openssl(&p, data, 16385);
    struct { size_t record, piece, cap; } ways[] = {
        {0, 0, 0}, {16384, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1000, 7, 333}, {16384, 65536, 1u << 20}};
    for (size_t w = 0; w < sizeof(ways) / sizeof(ways[0]); w++) {
      size_t len = ways[w].piece == 1 || ways[w].cap == 1 ? 40000 : n;
      openssl_writes(&p, data, len, ways[w].record);
      kiln_tls13_result_t last;
      memset(back, 0, n);
      cr_assert_eq(open_all(&p, back, len, ways[w].piece, ways[w].cap, &last), len, "suite %s way %zu", suites[s], w);
      cr_assert(memcmp(back, data, len) == 0, "suite %s way %zu", suites[s], w);
      cr_assert_not(kiln_tls13_partial(&p.rec));
    }
    pair_deinit(&p);
  }
  free(data);
  free(back);
}

Test(tls13, padded_records) {
  pair_t p;
  pair_init(&p, "TLS_AES_128_GCM_SHA256");
  SSL_set_block_padding(p.server, 4096);
  size_t n = 100000;
  uint8_t *data = pattern(n), *back = malloc(n);
  openssl_writes(&p, data, n, 0);
  kiln_tls13_result_t last;
  cr_assert_eq(open_all(&p, back, n, 0, 0, &last), n);
  cr_assert(memcmp(back, data, n) == 0);
  free(data);
  free(back);
  pair_deinit(&p);
}

Test(tls13, key_updates_both_ways) {
  pair_t p;
  pair_init(&p, "TLS_AES_128_GCM_SHA256");
  uint8_t *data = pattern(50000), back[50000];
  for (int round = 0; round < 3; round++) {
    /* The server updates its keys and asks for ours: kiln opens with the new keys, and its
     * next records start with its own KeyUpdate. */
    cr_assert(SSL_key_update(p.server, round == 1 ? SSL_KEY_UPDATE_NOT_REQUESTED : SSL_KEY_UPDATE_REQUESTED) == 1);
    openssl_writes(&p, data, sizeof(back), 0);
    kiln_tls13_result_t last;
    cr_assert_eq(open_all(&p, back, sizeof(back), 0, 0, &last), sizeof(back));
    cr_assert(memcmp(back, data, sizeof(back)) == 0);
    cr_assert_eq(p.rec.update_due, round != 1);
    kiln_to_openssl(&p, data, 20000);
    cr_assert_not(p.rec.update_due);
  }
  free(data);
  pair_deinit(&p);
}

Test(tls13, close_notify_ends_the_stream) {
  pair_t p;
  pair_init(&p, "TLS_AES_128_GCM_SHA256");
  uint8_t data[100] = {1, 2, 3}, back[100];
  openssl_writes(&p, data, sizeof(data), 0);
  SSL_shutdown(p.server);
  kiln_tls13_result_t last;
  cr_assert_eq(open_all(&p, back, sizeof(back), 0, 0, &last), sizeof(back));
  size_t n;
  const uint8_t *in = NULL;
  size_t in_len = 0;
  cr_assert_eq(kiln_tls13_open(&p.rec, &in, &in_len, back, sizeof(back), &n), KILN_TLS13_CLOSED);
  /* kiln's close_notify reaches OpenSSL as one. */
  uint8_t alert[KILN_TLS13_ALERT_BYTES];
  size_t a = kiln_tls13_seal_alert(&p.rec, alert);
  cr_assert_gt(a, 0);
  BIO_write(p.s_in, alert, (int)a);
  cr_assert(SSL_read_ex(p.server, back, sizeof(back), &n) == 0);
  cr_assert_eq(SSL_get_error(p.server, 0), SSL_ERROR_ZERO_RETURN);
  pair_deinit(&p);
}

/* A record changed in flight: no byte of it is handed out, the stream fails for good, and the
 * alert kiln answers with is OpenSSL's bad_record_mac. */
static void forged(size_t at) {
  pair_t p;
  pair_init(&p, "TLS_AES_128_GCM_SHA256");
  uint8_t data[3000], back[3000];
  memset(data, 7, sizeof(data));
  openssl_writes(&p, data, 1000, 1000);
  char *ct;
  long len = BIO_get_mem_data(p.s_out, &ct);
  cr_assert_gt(len, (long)at);
  ct[at] ^= 0x40;
  kiln_tls13_result_t last;
  cr_assert_eq(open_all(&p, back, sizeof(back), 0, 0, &last), 0);
  cr_assert_eq(last, KILN_TLS13_ERROR);
  cr_assert_eq(p.rec.alert, 20, "%s", p.rec.error);
  uint8_t alert[KILN_TLS13_ALERT_BYTES];
  size_t a = kiln_tls13_seal_alert(&p.rec, alert);
  BIO_write(p.s_in, alert, (int)a);
  size_t n;
  cr_assert(SSL_read_ex(p.server, back, sizeof(back), &n) == 0);
  cr_assert(strstr(ERR_reason_error_string(ERR_peek_last_error()), "bad record mac"),
            "%s", ERR_reason_error_string(ERR_peek_last_error()));
  ERR_clear_error();
  const uint8_t *in = NULL;
  size_t in_len = 0;
  cr_assert_eq(kiln_tls13_open(&p.rec, &in, &in_len, back, sizeof(back), &n), KILN_TLS13_ERROR);
  pair_deinit(&p);
}

Test(tls13, a_forged_header_body_or_tag_fails) {
  forged(4);    /* the length: the record's header is its associated data */
  forged(200);  /* the ciphertext */
  forged(1020); /* the tag */
}

/* Records no peer may send after the handshake, each alone on a fresh stream. */
static void refused(const uint8_t *bytes, size_t n, int alert) {
  pair_t p;
  pair_init(&p, "TLS_AES_128_GCM_SHA256");
  uint8_t back[64];
  size_t got;
  const uint8_t *in = bytes;
  size_t in_len = n;
  cr_assert_eq(kiln_tls13_open(&p.rec, &in, &in_len, back, sizeof(back), &got), KILN_TLS13_ERROR);
  cr_assert_eq(p.rec.alert, alert, "%s", p.rec.error);
  pair_deinit(&p);
}

Test(tls13, oversized_short_and_unprotected_records_fail) {
  uint8_t big[] = {23, 3, 3, 0x41, 0x01};         /* 16641 bytes: more than 2^14 + 256 */
  uint8_t tiny[] = {23, 3, 3, 0, 16, 0, 0, 0, 0}; /* shorter than a tag and a type */
  uint8_t clear_alert[] = {21, 3, 3, 0, 2, 2, 40};
  uint8_t ccs[] = {20, 3, 3, 0, 1, 1};
  refused(big, sizeof(big), 22);
  refused(tiny, sizeof(tiny), 50);
  refused(clear_alert, sizeof(clear_alert), 10);
  refused(ccs, sizeof(ccs), 10);
}

/* Garbage of every length never reads out of bounds or hands out a byte (run under ASan). */
Test(tls13, garbage_never_opens) {
  pair_t p;
  pair_init(&p, "TLS_AES_128_GCM_SHA256");
  uint8_t junk[20000], back[20000];
  for (int round = 0; round < 200; round++) {
    for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (uint8_t)rand();
    junk[0] = 23;
    junk[1] = junk[2] = 3;
    size_t n = 1 + (size_t)rand() % sizeof(junk), got = 0;
    kiln_tls13_t fresh;
    cr_assert_null(kiln_tls13_init(&fresh, 0x1301, p.keys.s[1], p.keys.s[0], 32));
    const uint8_t *in = junk;
    size_t in_len = n;
    kiln_tls13_result_t r = kiln_tls13_open(&fresh, &in, &in_len, back, 1 + (size_t)rand() % sizeof(back), &got);
    cr_assert(r == KILN_TLS13_AGAIN || r == KILN_TLS13_ERROR);
    cr_assert_eq(got, 0);
    kiln_tls13_deinit(&fresh);
  }
  pair_deinit(&p);
}

Test(tls13, keylog_lines) {
  uint8_t s[48];
  size_t n = 0;
  cr_assert(kiln_tls13_keylog_secret("CLIENT_TRAFFIC_SECRET_0 00ff 0a0B", "CLIENT_TRAFFIC_SECRET_0", s, sizeof(s), &n));
  cr_assert(n == 2 && s[0] == 0x0a && s[1] == 0x0b);
  cr_assert_not(kiln_tls13_keylog_secret("CLIENT_HANDSHAKE_TRAFFIC_SECRET 00 0a", "CLIENT_TRAFFIC_SECRET_0", s, 48, &n));
  cr_assert_not(kiln_tls13_keylog_secret("CLIENT_TRAFFIC_SECRET_0 00 0", "CLIENT_TRAFFIC_SECRET_0", s, 48, &n));
  cr_assert_not(kiln_tls13_keylog_secret("CLIENT_TRAFFIC_SECRET_0 00 zz", "CLIENT_TRAFFIC_SECRET_0", s, 48, &n));
}

/* --- the pool: runs of records on several threads -------------------------------------------- */

Test(tls13, pooled_runs_match_openssl_both_ways) {
  kiln_tls13_pool_t *pool;
  cr_assert_null(kiln_tls13_pool_create(3, &pool));
  cr_assert_eq(kiln_tls13_pool_threads(pool), 3);
  size_t n = 3000000;
  uint8_t *data = pattern(n), *back = malloc(n);
  for (int padded = 0; padded < 2; padded++) {
    pair_t p;
    pair_init(&p, padded ? "TLS_AES_256_GCM_SHA384" : "TLS_AES_128_GCM_SHA256");
    p.rec.pool = pool;
    kiln_to_openssl(&p, data, n);
    kiln_to_openssl(&p, data, 8 * 16384 + 1);
    /* Full records (the pool's runs), then odd ones, padded ones, a KeyUpdate in the middle
     * of a run: each run stops where its assumption fails and the rest is opened one by one. */
    if (padded) SSL_set_block_padding(p.server, 1000);
    openssl_writes(&p, data, n / 2, 16384);
    cr_assert(SSL_key_update(p.server, SSL_KEY_UPDATE_REQUESTED) == 1);
    openssl_writes(&p, data + n / 2, n - n / 2, padded ? 0 : 16384);
    kiln_tls13_result_t last;
    memset(back, 0, n);
    cr_assert_eq(open_all(&p, back, n, 1u << 20, n, &last), n);
    cr_assert(memcmp(back, data, n) == 0);
    kiln_to_openssl(&p, data, n); /* under the new keys, after kiln's own KeyUpdate */
    pair_deinit(&p);
  }
  free(data);
  free(back);
  kiln_tls13_pool_destroy(pool);
}

/* A forged record in the middle of a run: the records before it are handed out, none after. */
Test(tls13, a_forged_record_inside_a_pooled_run) {
  kiln_tls13_pool_t *pool;
  cr_assert_null(kiln_tls13_pool_create(2, &pool));
  pair_t p;
  pair_init(&p, "TLS_AES_128_GCM_SHA256");
  p.rec.pool = pool;
  size_t n = 40 * 16384;
  uint8_t *data = pattern(n), *back = malloc(n);
  openssl_writes(&p, data, n, 16384);
  char *ct;
  long len = BIO_get_mem_data(p.s_out, &ct);
  cr_assert_eq(len, 40 * (16384 + 22));
  ct[25 * (16384 + 22) + 100] ^= 1; /* in record 25 */
  kiln_tls13_result_t last;
  cr_assert_eq(open_all(&p, back, n, (size_t)len, n, &last), 25 * 16384);
  cr_assert_eq(last, KILN_TLS13_ERROR);
  cr_assert_eq(p.rec.alert, 20);
  cr_assert(memcmp(back, data, 25 * 16384) == 0);
  pair_deinit(&p);
  free(data);
  free(back);
  kiln_tls13_pool_destroy(pool);
}
