/* TLS sessions over in-memory BIOs (server/tls.h). OpenSSL's errors are converted here, once. */
#include "server/tls.h"

#include "base/util.h"
#include "protocol/tls13.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kiln_tls_ctx {
  SSL_CTX *ssl;
  char cert[512], key[512], client_ca[512];
};

/* OpenSSL does the handshake through BIOs of kiln's own: it reads ciphertext straight from
 * the buffer libuv received it into (what it leaves unread is kept in `left`) and writes into
 * `out`, which the connection hands to uv_write as it is. After the handshake, records are
 * kiln's (protocol/tls13.h, `rec`): opened from the feed straight into the reader's space and
 * sealed from the reply straight into `out`, with no copy through OpenSSL's record buffers.
 * OpenSSL hands over its traffic secrets through the key log callback. */
struct kiln_tls {
  SSL *ssl;
  BIO *rbio, *wbio; /* owned by ssl */
  uint8_t *left;    /* ciphertext kept from earlier feeds: [left_off, left_len) unread */
  size_t left_off, left_len, left_cap;
  const uint8_t *chunk; /* the feed in progress (borrowed): [chunk_off, chunk_len) unread */
  size_t chunk_off, chunk_len;
  uint8_t *out; /* ciphertext not yet taken: out_len bytes of out_cap */
  size_t out_len, out_cap;
  bool out_failed;
  bool records;   /* the handshake is done and `rec` has the stream */
  kiln_tls13_t rec;
  uint8_t secret[2][48]; /* the client's and the server's traffic secret, until `rec` has them */
  size_t secret_len[2];
  char error[256];
};

static int bio_read(BIO *b, char *dst, size_t n, size_t *got) {
  kiln_tls_t *t = BIO_get_data(b);
  size_t k = KILN_MIN(n, t->left_len - t->left_off);
  if (k) memcpy(dst, t->left + t->left_off, k);
  t->left_off += k;
  size_t m = KILN_MIN(n - k, t->chunk_len - t->chunk_off);
  if (m) memcpy(dst + k, t->chunk + t->chunk_off, m);
  t->chunk_off += m;
  BIO_clear_retry_flags(b);
  if (k + m == 0) {
    BIO_set_retry_read(b); /* more later: not the end of the stream */
    return 0;
  }
  *got = k + m;
  return 1;
}

static bool reserve_out(kiln_tls_t *t, size_t n) {
  if (t->out_len + n <= t->out_cap) return true;
  size_t cap = KILN_MAX(t->out_len + n, 2 * t->out_cap);
  uint8_t *p = realloc(t->out, cap);
  if (!p) return false;
  t->out = p;
  t->out_cap = cap;
  return true;
}

static int bio_write(BIO *b, const char *src, size_t n, size_t *put) {
  kiln_tls_t *t = BIO_get_data(b);
  *put = 0;
  if (n == 0) return 1;
  if (!reserve_out(t, n)) {
    t->out_failed = true;
    return 0;
  }
  memcpy(t->out + t->out_len, src, n);
  t->out_len += n;
  *put = n;
  return 1;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
  kiln_tls_t *t = BIO_get_data(b);
  (void)num;
  (void)ptr;
  switch (cmd) {
    case BIO_CTRL_FLUSH: return 1;
    case BIO_CTRL_PENDING: return (long)(t->left_len - t->left_off + t->chunk_len - t->chunk_off);
    case BIO_CTRL_WPENDING: return (long)t->out_len;
    default: return 0;
  }
}

static int bio_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

static BIO_METHOD *bio_method(void) {
  static BIO_METHOD *m;
  if (!m && (m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "kiln"))) {
    BIO_meth_set_read_ex(m, bio_read);
    BIO_meth_set_write_ex(m, bio_write);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
  }
  return m;
}

/* OpenSSL's reason for the last failure, and the queue cleared for the next caller. */
static const char *last_error(char *buf, size_t cap) {
  unsigned long e = ERR_peek_last_error();
  if (e) ERR_error_string_n(e, buf, cap);
  else snprintf(buf, cap, "unknown error");
  ERR_clear_error();
  return buf;
}

static kiln_status_t ssl_status(const char *what, const char *file) {
  char b[256];
  return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s %s: %s", what, file, last_error(b, sizeof(b)));
}

/* OpenSSL's key log: the traffic secrets kiln's record layer takes over with. */
static void keylog(const SSL *ssl, const char *line) {
  kiln_tls_t *t = SSL_get_app_data(ssl);
  if (!t) return;
  static const char *const label[2] = {"CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0"};
  for (int i = 0; i < 2; i++)
    kiln_tls13_keylog_secret(line, label[i], t->secret[i], sizeof(t->secret[i]), &t->secret_len[i]);
}

/* TLS 1.3 only; AES-128-GCM first (the fastest with AES-NI, no weaker in practice), chosen
 * by the server; no session tickets (clients hold one connection for long). */
static kiln_status_t build(const kiln_tls_ctx_t *t, SSL_CTX **out) {
  SSL_CTX *c = SSL_CTX_new(TLS_server_method());
  if (!c) return KILN_STATUS(KILN_E_INTERNAL, "SSL_CTX_new failed");
  kiln_status_t st = KILN_OK;
  SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(c, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                              "TLS_CHACHA20_POLY1305_SHA256");
  SSL_CTX_set_options(c, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_num_tickets(c, 0);
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_keylog_callback(c, keylog);
  if (SSL_CTX_use_certificate_chain_file(c, t->cert) != 1)
    st = ssl_status("cannot load the certificate chain", t->cert);
  else if (SSL_CTX_use_PrivateKey_file(c, t->key, SSL_FILETYPE_PEM) != 1)
    st = ssl_status("cannot load the private key, or it does not match the certificate:", t->key);
  else if (SSL_CTX_check_private_key(c) != 1)
    st = ssl_status("the private key does not match the certificate", t->key);
  else if (t->client_ca[0]) {
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(t->client_ca);
    if (SSL_CTX_load_verify_locations(c, t->client_ca, NULL) != 1 || !names) {
      if (names) sk_X509_NAME_pop_free(names, X509_NAME_free);
      st = ssl_status("cannot load the client CA", t->client_ca);
    } else {
      SSL_CTX_set_client_CA_list(c, names);
      SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
  }
  if (st) {
    SSL_CTX_free(c);
    return st;
  }
  *out = c;
  return KILN_OK;
}

kiln_status_t kiln_tls_ctx_create(const char *cert, const char *key, const char *client_ca,
                                  kiln_tls_ctx_t **out) {
  kiln_tls_ctx_t *t = calloc(1, sizeof(*t));
  if (!t) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  if (strlen(cert) >= sizeof(t->cert) || strlen(key) >= sizeof(t->key) ||
      (client_ca && strlen(client_ca) >= sizeof(t->client_ca))) {
    free(t);
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "a TLS file path is too long");
  }
  snprintf(t->cert, sizeof(t->cert), "%s", cert);
  snprintf(t->key, sizeof(t->key), "%s", key);
  snprintf(t->client_ca, sizeof(t->client_ca), "%s", client_ca ? client_ca : "");
  kiln_status_t st = build(t, &t->ssl);
  if (st) {
    free(t);
    return st;
  }
  *out = t;
  return KILN_OK;
}

kiln_status_t kiln_tls_ctx_reload(kiln_tls_ctx_t *t) {
  SSL_CTX *c;
  KILN_RETURN_IF_ERROR(build(t, &c));
  SSL_CTX_free(t->ssl); /* sessions hold their own reference */
  t->ssl = c;
  return KILN_OK;
}

void kiln_tls_ctx_destroy(kiln_tls_ctx_t *t) {
  if (!t) return;
  SSL_CTX_free(t->ssl);
  free(t);
}

kiln_status_t kiln_tls_create(kiln_tls_ctx_t *ctx, kiln_tls_t **out) {
  kiln_tls_t *t = calloc(1, sizeof(*t));
  if (!t) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  BIO_METHOD *m = bio_method();
  t->ssl = SSL_new(ctx->ssl);
  t->rbio = m ? BIO_new(m) : NULL;
  t->wbio = m ? BIO_new(m) : NULL;
  if (!t->ssl || !t->rbio || !t->wbio) {
    SSL_free(t->ssl);
    BIO_free(t->rbio);
    BIO_free(t->wbio);
    free(t);
    ERR_clear_error();
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for a TLS session");
  }
  BIO_set_data(t->rbio, t);
  BIO_set_data(t->wbio, t);
  SSL_set_bio(t->ssl, t->rbio, t->wbio);
  SSL_set_app_data(t->ssl, t);
  /* No read-ahead: OpenSSL must stop at the end of the client's Finished, where the records
   * become kiln's. */
  SSL_set_accept_state(t->ssl);
  *out = t;
  return KILN_OK;
}

void kiln_tls_destroy(kiln_tls_t *t) {
  if (!t) return;
  SSL_free(t->ssl);
  if (t->records) kiln_tls13_deinit(&t->rec);
  OPENSSL_cleanse(t->secret, sizeof(t->secret));
  free(t->left);
  free(t->out);
  free(t);
}

void kiln_tls_feed(kiln_tls_t *t, const void *p, size_t n) {
  t->chunk = p;
  t->chunk_off = 0;
  t->chunk_len = n;
}

kiln_status_t kiln_tls_feed_end(kiln_tls_t *t) {
  if (t->records) {
    kiln_status_t st = kiln_tls13_keep(&t->rec, t->chunk + t->chunk_off, t->chunk_len - t->chunk_off);
    t->chunk = NULL;
    t->chunk_off = t->chunk_len = 0;
    return st;
  }
  size_t rest = t->chunk_len - t->chunk_off, kept = t->left_len - t->left_off;
  const uint8_t *tail = t->chunk + t->chunk_off;
  t->chunk = NULL;
  t->chunk_off = t->chunk_len = 0;
  if (kept) memmove(t->left, t->left + t->left_off, kept);
  t->left_off = 0;
  t->left_len = kept;
  if (!rest) return KILN_OK;
  if (kept + rest > t->left_cap) {
    size_t cap = KILN_MAX(kept + rest, 2 * t->left_cap);
    uint8_t *p = realloc(t->left, cap);
    if (!p) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory buffering TLS input");
    t->left = p;
    t->left_cap = cap;
  }
  memcpy(t->left + kept, tail, rest);
  t->left_len = kept + rest;
  return KILN_OK;
}

/* Large transfers' records are sealed and opened on a few threads beside the loop (the loop
 * takes a share and waits for the rest): one pool for every session, made at the first. */
static kiln_tls13_pool_t *shared_pool(void) {
  static kiln_tls13_pool_t *pool;
  static bool tried;
  if (!tried) {
    tried = true;
    kiln_status_t st = kiln_tls13_pool_create(-1, &pool);
    kiln_status_free(st); /* without it, one thread does all */
  }
  return pool;
}

/* The handshake is done: the records become kiln's, from where OpenSSL stopped reading (it
 * reads no further than the client's Finished without read-ahead, and has sent nothing with
 * the application keys yet: both counters start at 0). */
static bool take_over(kiln_tls_t *t) {
  const SSL_CIPHER *cipher = SSL_get_current_cipher(t->ssl);
  if (!cipher || SSL_has_pending(t->ssl) || !t->secret_len[0] || t->secret_len[0] != t->secret_len[1]) {
    snprintf(t->error, sizeof(t->error), "OpenSSL did not hand over the session's keys");
    return false;
  }
  kiln_status_t st = kiln_tls13_init(&t->rec, (uint16_t)SSL_CIPHER_get_protocol_id(cipher),
                                     t->secret[0], t->secret[1], t->secret_len[0]);
  OPENSSL_cleanse(t->secret, sizeof(t->secret));
  if (st) {
    snprintf(t->error, sizeof(t->error), "%s", kiln_status_message(st));
    kiln_status_free(st);
    return false;
  }
  t->records = true;
  t->rec.pool = shared_pool();
  /* What OpenSSL left unread comes before the rest of the feed. */
  st = kiln_tls13_keep(&t->rec, t->left + t->left_off, t->left_len - t->left_off);
  t->left_off = t->left_len = 0;
  if (st) {
    snprintf(t->error, sizeof(t->error), "%s", kiln_status_message(st));
    kiln_status_free(st);
    return false;
  }
  return true;
}

/* The record layer failed: the alert it calls for goes out with what is waiting. */
static void records_failed(kiln_tls_t *t) {
  snprintf(t->error, sizeof(t->error), "%s", t->rec.error);
  if (reserve_out(t, KILN_TLS13_ALERT_BYTES)) t->out_len += kiln_tls13_seal_alert(&t->rec, t->out + t->out_len);
}

kiln_tls_result_t kiln_tls_read(kiln_tls_t *t, void *dst, size_t cap, size_t *out_n) {
  *out_n = 0;
  if (t->error[0]) return KILN_TLS_ERROR;
  if (!t->records) {
    if (SSL_do_handshake(t->ssl) != 1) {
      switch (SSL_get_error(t->ssl, 0)) {
        case SSL_ERROR_WANT_READ: return KILN_TLS_AGAIN;
        case SSL_ERROR_ZERO_RETURN: return KILN_TLS_CLOSED;
        default:
          last_error(t->error, sizeof(t->error));
          return KILN_TLS_ERROR;
      }
    }
    if (!take_over(t)) return KILN_TLS_ERROR;
  }
  const uint8_t *in = t->chunk + t->chunk_off;
  size_t in_len = t->chunk_len - t->chunk_off;
  kiln_tls13_result_t r = kiln_tls13_open(&t->rec, &in, &in_len, dst, cap, out_n);
  t->chunk_off = t->chunk_len - in_len;
  switch (r) {
    case KILN_TLS13_DATA: return KILN_TLS_DATA;
    case KILN_TLS13_AGAIN: return KILN_TLS_AGAIN;
    case KILN_TLS13_CLOSED: return KILN_TLS_CLOSED;
    default: records_failed(t); return KILN_TLS_ERROR;
  }
}

kiln_status_t kiln_tls_write(kiln_tls_t *t, const void *p, size_t n) {
  if (!t->records) return KILN_STATUS(KILN_E_INTERNAL, "TLS: a write before the handshake");
  if (!reserve_out(t, kiln_tls13_seal_bound(n)))
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for TLS");
  size_t w = 0;
  kiln_status_t st = kiln_tls13_seal(&t->rec, p, n, t->out + t->out_len, &w);
  t->out_len += w;
  return st;
}

void kiln_tls_shutdown(kiln_tls_t *t) {
  if (t->records) {
    if (!t->error[0] && reserve_out(t, KILN_TLS13_ALERT_BYTES))
      t->out_len += kiln_tls13_seal_alert(&t->rec, t->out + t->out_len);
    return;
  }
  if (!t->error[0] && SSL_is_init_finished(t->ssl)) SSL_shutdown(t->ssl);
  ERR_clear_error();
}

size_t kiln_tls_pending_out(const kiln_tls_t *t) { return t->out_len; }

uint8_t *kiln_tls_take(kiln_tls_t *t, size_t *out_len, size_t *out_cap) {
  uint8_t *p = t->out;
  *out_len = t->out_len;
  *out_cap = t->out_cap;
  t->out = NULL;
  t->out_len = t->out_cap = 0;
  return p;
}

void kiln_tls_give_back(kiln_tls_t *t, uint8_t *p, size_t cap) {
  if (t->out_len == 0 && cap > t->out_cap) {
    free(t->out);
    t->out = p;
    t->out_cap = cap;
  } else {
    free(p);
  }
}

void kiln_tls_trim(kiln_tls_t *t) {
  if (t->out_len) return;
  free(t->out);
  t->out = NULL;
  t->out_cap = 0;
}

bool kiln_tls_partial_in(const kiln_tls_t *t) {
  if (t->records) return kiln_tls13_partial(&t->rec);
  return t->left_len > t->left_off || SSL_has_pending(t->ssl);
}

bool kiln_tls_handshake_done(const kiln_tls_t *t) { return t->records; }

const char *kiln_tls_error(const kiln_tls_t *t) { return t->error[0] ? t->error : "no error"; }

void kiln_tls_describe(const kiln_tls_t *t, char *out, size_t cap) {
  char subject[256] = "-";
  X509 *peer = SSL_get1_peer_certificate(t->ssl);
  if (peer) {
    X509_NAME_oneline(X509_get_subject_name(peer), subject, sizeof(subject));
    X509_free(peer);
  }
  snprintf(out, cap, "%s %s client_cert=%s", SSL_get_version(t->ssl),
           SSL_get_cipher_name(t->ssl), subject);
}
