/* TLS sessions over memory BIOs (server/tls.h). OpenSSL's errors are converted here, once. */
#include "server/tls.h"

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

struct kiln_tls {
  SSL *ssl;
  BIO *rbio, *wbio; /* owned by ssl */
  char error[256];
};

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
  t->ssl = SSL_new(ctx->ssl);
  t->rbio = BIO_new(BIO_s_mem());
  t->wbio = BIO_new(BIO_s_mem());
  if (!t->ssl || !t->rbio || !t->wbio) {
    SSL_free(t->ssl);
    BIO_free(t->rbio);
    BIO_free(t->wbio);
    free(t);
    ERR_clear_error();
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for a TLS session");
  }
  /* An empty memory BIO means "more later", not end of stream. */
  BIO_set_mem_eof_return(t->rbio, -1);
  SSL_set_bio(t->ssl, t->rbio, t->wbio);
  SSL_set_accept_state(t->ssl);
  SSL_set_read_ahead(t->ssl, 1);
  *out = t;
  return KILN_OK;
}

void kiln_tls_destroy(kiln_tls_t *t) {
  if (!t) return;
  SSL_free(t->ssl);
  free(t);
}

kiln_status_t kiln_tls_feed(kiln_tls_t *t, const void *p, size_t n) {
  while (n > 0) {
    int k = BIO_write(t->rbio, p, n > (1u << 30) ? (1 << 30) : (int)n);
    if (k <= 0) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory buffering TLS input");
    p = (const uint8_t *)p + k;
    n -= (size_t)k;
  }
  return KILN_OK;
}

kiln_tls_result_t kiln_tls_read(kiln_tls_t *t, void *dst, size_t cap, size_t *out_n) {
  *out_n = 0;
  if (t->error[0]) return KILN_TLS_ERROR;
  size_t got = 0;
  if (SSL_read_ex(t->ssl, dst, cap, &got) == 1) {
    *out_n = got;
    return KILN_TLS_DATA;
  }
  switch (SSL_get_error(t->ssl, 0)) {
    case SSL_ERROR_WANT_READ: return KILN_TLS_AGAIN;
    case SSL_ERROR_ZERO_RETURN: return KILN_TLS_CLOSED;
    default:
      last_error(t->error, sizeof(t->error));
      return KILN_TLS_ERROR;
  }
}

kiln_status_t kiln_tls_write(kiln_tls_t *t, const void *p, size_t n) {
  while (n > 0) {
    size_t done = 0;
    if (SSL_write_ex(t->ssl, p, n, &done) != 1) {
      last_error(t->error, sizeof(t->error));
      return KILN_STATUS(KILN_E_UNAVAILABLE, "TLS: %s", t->error);
    }
    p = (const uint8_t *)p + done;
    n -= done;
  }
  return KILN_OK;
}

void kiln_tls_shutdown(kiln_tls_t *t) {
  if (!t->error[0] && SSL_is_init_finished(t->ssl)) SSL_shutdown(t->ssl);
  ERR_clear_error();
}

size_t kiln_tls_pending_out(const kiln_tls_t *t) { return BIO_ctrl_pending(t->wbio); }

size_t kiln_tls_take(kiln_tls_t *t, void *dst, size_t cap) {
  int k = BIO_read(t->wbio, dst, cap > (1u << 30) ? (1 << 30) : (int)cap);
  return k > 0 ? (size_t)k : 0;
}

bool kiln_tls_partial_in(const kiln_tls_t *t) {
  return BIO_ctrl_pending(t->rbio) > 0 || SSL_has_pending(t->ssl);
}

bool kiln_tls_handshake_done(const kiln_tls_t *t) { return SSL_is_init_finished(t->ssl); }

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
