/* tls: URLs: OpenSSL on the client's socket (TLS 1.3, the daemon's certificate verified
 * against the CA given or the system's, and its name against the URL's host). OpenSSL's
 * errors are converted here, once. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "base/util.h"
#include "internal.h"

/* The handshake blocks (kiln_client_create is synchronous) but never forever. */
#define HANDSHAKE_TIMEOUT_S 30

static const char *pick(const char *given, const char *env) {
  if (given && *given) return given;
  const char *v = getenv(env);
  return v && *v ? v : NULL;
}

static const char *ssl_reason(char *buf, size_t cap) {
  unsigned long e = ERR_peek_last_error();
  if (e) ERR_error_string_n(e, buf, cap);
  else snprintf(buf, cap, "%s", errno ? strerror(errno) : "the connection closed");
  ERR_clear_error();
  return buf;
}

static kiln_status_t file_error(const char *what, const char *file) {
  char b[256];
  return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "cannot load %s %s: %s", what, file,
                     ssl_reason(b, sizeof(b)));
}

static kiln_status_t make_ctx(const kiln_client_options_t *o, SSL_CTX **out) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for TLS");
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  /* Fewer, larger reads from the socket: whole records in one recv. */
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, 256u << 10);
  const char *ca = pick(o ? o->tls_ca : NULL, "KILN_TLS_CA");
  const char *cert = pick(o ? o->tls_cert : NULL, "KILN_TLS_CERT");
  const char *key = pick(o ? o->tls_key : NULL, "KILN_TLS_KEY");
  kiln_status_t s = KILN_OK;
  if (ca ? SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1
         : SSL_CTX_set_default_verify_paths(ctx) != 1)
    s = file_error("the CA file", ca ? ca : "(the system's)");
  else if (cert && SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
    s = file_error("the client certificate", cert);
  else if (cert && SSL_CTX_use_PrivateKey_file(ctx, key ? key : cert, SSL_FILETYPE_PEM) != 1)
    s = file_error("the client key", key ? key : cert);
  else if (cert && SSL_CTX_check_private_key(ctx) != 1)
    s = file_error("a key that matches the client certificate", key ? key : cert);
  if (s) {
    SSL_CTX_free(ctx);
    return s;
  }
  *out = ctx;
  return KILN_OK;
}

static void set_timeouts(int fd, int seconds) {
  struct timeval tv = {.tv_sec = seconds};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static BIO *out_bio(kiln_client_t *c);

kiln_status_t kiln_tls_connect(kiln_client_t *c, const char *url, const char *host,
                               const kiln_client_options_t *opts) {
  KILN_RETURN_IF_ERROR(make_ctx(opts, &c->ssl_ctx));
  SSL *ssl = SSL_new(c->ssl_ctx);
  if (!ssl || SSL_set_fd(ssl, c->fd) != 1) {
    SSL_free(ssl);
    kiln_tls_close(c);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for TLS");
  }
  /* The certificate must name the host of the URL: an IP address as such, a name as a DNS
   * name (which also goes out as SNI). */
  unsigned char ip[16];
  if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host);
  } else {
    SSL_set_tlsext_host_name(ssl, host);
    SSL_set1_host(ssl, host);
  }
  SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  c->ssl = ssl;
  int fl = fcntl(c->fd, F_GETFL);
  fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
  set_timeouts(c->fd, HANDSHAKE_TIMEOUT_S);
  errno = 0;
  int rc = SSL_connect(ssl);
  set_timeouts(c->fd, 0);
  fcntl(c->fd, F_SETFL, fl | O_NONBLOCK);
  if (rc == 1) {
    BIO *out = out_bio(c);
    if (!out) {
      kiln_tls_close(c);
      return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for TLS");
    }
    SSL_set0_wbio(ssl, out);
    return KILN_OK;
  }
  char b[256];
  long verify = SSL_get_verify_result(ssl);
  kiln_status_t s =
      verify != X509_V_OK
          ? KILN_STATUS(KILN_E_UNAVAILABLE,
                        "TLS handshake with %s failed: the daemon's certificate is not trusted "
                        "(%s); give its CA with --tls-ca or KILN_TLS_CA",
                        url, X509_verify_cert_error_string(verify))
          : KILN_STATUS(KILN_E_UNAVAILABLE, "TLS handshake with %s failed: %s", url,
                        ssl_reason(b, sizeof(b)));
  ERR_clear_error();
  kiln_tls_close(c);
  return s;
}

void kiln_tls_close(kiln_client_t *c) {
  if (c->ssl) {
    /* close_notify, if the socket takes it now; nothing waits for the daemon's. */
    SSL_shutdown(c->ssl);
    kiln_status_t ignored = NULL;
    if (c->fd >= 0 && kiln_tls_flush(c, &ignored) < 0) kiln_status_free(ignored);
    SSL_free(c->ssl);
    ERR_clear_error();
  }
  free(c->tls_out);
  c->tls_out = NULL;
  c->tls_out_off = c->tls_out_len = c->tls_out_cap = 0;
  SSL_CTX_free(c->ssl_ctx);
  c->ssl = NULL;
  c->ssl_ctx = NULL;
}

ssize_t kiln_tls_encrypt(kiln_client_t *c, const void *p, size_t n, kiln_status_t *out_err) {
  size_t done = 0;
  if (SSL_write_ex(c->ssl, p, n, &done) == 1) return (ssize_t)done;
  char b[256];
  *out_err = KILN_STATUS(KILN_E_UNAVAILABLE, "sending to %s failed: %s", c->url,
                         ssl_reason(b, sizeof(b)));
  return -1;
}

int kiln_tls_flush(kiln_client_t *c, kiln_status_t *out_err) {
  while (c->tls_out_off < c->tls_out_len) {
    ssize_t k = send(c->fd, c->tls_out + c->tls_out_off, c->tls_out_len - c->tls_out_off,
                     MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
      *out_err = KILN_STATUS(KILN_E_UNAVAILABLE, "sending to %s failed: %s", c->url,
                             strerror(errno));
      return -1;
    }
    c->tls_out_off += (size_t)k;
  }
  c->tls_out_off = c->tls_out_len = 0;
  return 0;
}

/* After the handshake the ciphertext goes to a buffer of the client's (this BIO) and leaves
 * in one send per SSL_write of up to 1 MiB, not in one syscall per 16 KiB record as through
 * a socket BIO. Reads stay on the socket BIO (with read-ahead). */
static int out_write(BIO *b, const char *src, size_t n, size_t *put) {
  kiln_client_t *c = BIO_get_data(b);
  *put = 0;
  if (n == 0) return 1;
  if (c->tls_out_len + n > c->tls_out_cap) {
    size_t cap = KILN_MAX(c->tls_out_len + n, 2 * c->tls_out_cap);
    uint8_t *p = realloc(c->tls_out, cap);
    if (!p) return 0;
    c->tls_out = p;
    c->tls_out_cap = cap;
  }
  memcpy(c->tls_out + c->tls_out_len, src, n);
  c->tls_out_len += n;
  *put = n;
  return 1;
}

static long out_ctrl(BIO *b, int cmd, long num, void *ptr) {
  kiln_client_t *c = BIO_get_data(b);
  (void)num;
  (void)ptr;
  if (cmd == BIO_CTRL_FLUSH) return 1;
  if (cmd == BIO_CTRL_WPENDING) return (long)(c->tls_out_len - c->tls_out_off);
  return 0;
}

static int out_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

static BIO *out_bio(kiln_client_t *c) {
  static BIO_METHOD *m;
  if (!m && (m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "kiln client"))) {
    BIO_meth_set_write_ex(m, out_write);
    BIO_meth_set_ctrl(m, out_ctrl);
    BIO_meth_set_create(m, out_create);
  }
  BIO *b = m ? BIO_new(m) : NULL;
  if (b) BIO_set_data(b, c);
  return b;
}

ssize_t kiln_tls_recv(kiln_client_t *c, void *p, size_t cap, kiln_status_t *out_err) {
  size_t got = 0;
  errno = 0;
  if (SSL_read_ex(c->ssl, p, cap, &got) == 1) return (ssize_t)got;
  int e = SSL_get_error(c->ssl, 0);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    ERR_clear_error();
    return -2;
  }
  if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0)) {
    ERR_clear_error();
    return 0; /* close_notify, or the connection ended */
  }
  char b[256];
  const char *why = ssl_reason(b, sizeof(b));
  /* TLS 1.3 finishes the client's side of the handshake before the daemon has looked at its
   * certificate: a refusal arrives as an alert on the first read. */
  *out_err = KILN_STATUS(KILN_E_UNAVAILABLE, "receiving from %s failed: %s%s", c->url, why,
                         strstr(why, "certificate") ? " (a daemon with client certificates "
                                                      "needs --tls-cert/--tls-key or "
                                                      "KILN_TLS_CERT/KILN_TLS_KEY from its CA)"
                                                    : "");
  return -1;
}

bool kiln_tls_has_pending(const kiln_client_t *c) { return c->ssl && SSL_has_pending(c->ssl); }
