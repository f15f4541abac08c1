/* tls: URLs: OpenSSL shakes hands on the client's socket (TLS 1.3, the daemon's certificate
 * verified against the CA given or the system's, and its name against the URL's host); then
 * the records are kiln's (protocol/tls13.h): sealed from the caller's buffers straight into
 * the buffer send() takes, and opened from the buffer recv() filled straight into the reply
 * reader's. OpenSSL's errors are converted here, once. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "base/util.h"
#include "internal.h"
#include "protocol/tls13.h"

/* Ciphertext per recv(): 64 records, shares worth waking the TLS pool's threads for. */
#define TLS_IN_BYTES (1u << 20)

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

typedef struct secrets {
  uint8_t s[2][48]; /* the client's and the daemon's traffic secret */
  size_t len[2];
} secrets_t;

static void keylog(const SSL *ssl, const char *line) {
  secrets_t *k = SSL_get_app_data(ssl);
  if (!k) return;
  static const char *const label[2] = {"CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0"};
  for (int i = 0; i < 2; i++) kiln_tls13_keylog_secret(line, label[i], k->s[i], sizeof(k->s[i]), &k->len[i]);
}

static kiln_status_t make_ctx(const kiln_client_options_t *o, SSL_CTX **out) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for TLS");
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  /* No read-ahead: OpenSSL must read no further than the daemon's Finished, where the
   * records become kiln's. Its key log hands over the traffic secrets. */
  SSL_CTX_set_keylog_callback(ctx, keylog);
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

static bool reserve_out(kiln_client_t *c, size_t n);

static void set_timeouts(int fd, int seconds) {
  struct timeval tv = {.tv_sec = seconds};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Large transfers' records are sealed and opened on a few threads beside the caller's (it
 * takes a share and waits for the rest; $KILN_TLS_THREADS=0 turns them off): one pool for
 * the process, made at the first tls: connection. */
static kiln_tls13_pool_t *pool;
static void make_pool(void) {
  kiln_status_t s = kiln_tls13_pool_create(-1, &pool);
  kiln_status_free(s); /* without it, the caller's thread does all */
}

/* After SSL_connect: the records become kiln's. OpenSSL read nothing past the daemon's
 * Finished and sent nothing with the application keys: both counters start at 0. */
static kiln_status_t take_over(kiln_client_t *c, const secrets_t *k) {
  const SSL_CIPHER *cipher = SSL_get_current_cipher(c->ssl);
  if (!cipher || SSL_has_pending(c->ssl) || !k->len[0] || k->len[0] != k->len[1])
    return KILN_STATUS(KILN_E_INTERNAL, "TLS with %s: OpenSSL did not hand over the session's keys", c->url);
  c->tls_rec = malloc(sizeof(*c->tls_rec));
  c->tls_in = malloc(TLS_IN_BYTES);
  if (!c->tls_rec || !c->tls_in) {
    free(c->tls_rec);
    c->tls_rec = NULL;
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for TLS");
  }
  kiln_status_t s = kiln_tls13_init(c->tls_rec, (uint16_t)SSL_CIPHER_get_protocol_id(cipher), k->s[1],
                                    k->s[0], k->len[0]);
  if (s) {
    free(c->tls_rec);
    c->tls_rec = NULL;
    return s;
  }
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, make_pool);
  c->tls_rec->pool = pool;
  return KILN_OK;
}

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
  c->ssl = ssl;
  secrets_t keys = {0};
  SSL_set_app_data(ssl, &keys);
  int fl = fcntl(c->fd, F_GETFL);
  fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
  set_timeouts(c->fd, HANDSHAKE_TIMEOUT_S);
  errno = 0;
  int rc = SSL_connect(ssl);
  set_timeouts(c->fd, 0);
  fcntl(c->fd, F_SETFL, fl | O_NONBLOCK);
  SSL_set_app_data(ssl, NULL);
  if (rc == 1) {
    kiln_status_t s = take_over(c, &keys);
    OPENSSL_cleanse(&keys, sizeof(keys));
    if (s) kiln_tls_close(c);
    return s;
  }
  OPENSSL_cleanse(&keys, sizeof(keys));
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
  if (c->tls_rec) {
    /* close_notify, if the socket takes it now; nothing waits for the daemon's. */
    if (c->fd >= 0 && !c->tls_rec->error[0] && !c->tls_rec->closed && reserve_out(c, KILN_TLS13_ALERT_BYTES)) {
      c->tls_out_len += kiln_tls13_seal_alert(c->tls_rec, c->tls_out + c->tls_out_len);
      kiln_status_t ignored = NULL;
      if (kiln_tls_flush(c, &ignored) < 0) kiln_status_free(ignored);
    }
    kiln_tls13_deinit(c->tls_rec);
    free(c->tls_rec);
  }
  SSL_free(c->ssl);
  ERR_clear_error();
  free(c->tls_out);
  free(c->tls_in);
  c->tls_rec = NULL;
  c->tls_out = c->tls_in = NULL;
  c->tls_out_off = c->tls_out_len = c->tls_out_cap = c->tls_in_off = c->tls_in_len = 0;
  SSL_CTX_free(c->ssl_ctx);
  c->ssl = NULL;
  c->ssl_ctx = NULL;
}

ssize_t kiln_tls_encrypt(kiln_client_t *c, const void *p, size_t n, kiln_status_t *out_err) {
  n = KILN_MIN(n, (size_t)1 << 20);
  if (!reserve_out(c, kiln_tls13_seal_bound(n))) {
    *out_err = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for TLS");
    return -1;
  }
  size_t w = 0;
  kiln_status_t s = kiln_tls13_seal(c->tls_rec, p, n, c->tls_out + c->tls_out_len, &w);
  if (s) {
    *out_err = s;
    return -1;
  }
  c->tls_out_len += w;
  return (ssize_t)n;
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

/* Room for n more bytes of ciphertext in the client's buffer. */
static bool reserve_out(kiln_client_t *c, size_t n) {
  if (c->tls_out_len + n <= c->tls_out_cap) return true;
  size_t cap = KILN_MAX(c->tls_out_len + n, 2 * c->tls_out_cap);
  uint8_t *p = realloc(c->tls_out, cap);
  if (!p) return false;
  c->tls_out = p;
  c->tls_out_cap = cap;
  return true;
}

ssize_t kiln_tls_recv(kiln_client_t *c, void *p, size_t cap, kiln_status_t *out_err) {
  kiln_tls13_t *t = c->tls_rec;
  for (;;) {
    const uint8_t *in = c->tls_in + c->tls_in_off;
    size_t in_len = c->tls_in_len - c->tls_in_off, got = 0;
    kiln_tls13_result_t r = kiln_tls13_open(t, &in, &in_len, p, cap, &got);
    c->tls_in_off = c->tls_in_len - in_len;
    if (r == KILN_TLS13_DATA) return (ssize_t)got;
    if (r == KILN_TLS13_CLOSED) return 0;
    if (r == KILN_TLS13_ERROR) {
      /* TLS 1.3 finishes the client's side of the handshake before the daemon has looked at
       * its certificate: a refusal arrives as an alert on the first read. */
      bool cert = strstr(t->error, "certificate") != NULL;
      *out_err = KILN_STATUS(KILN_E_UNAVAILABLE, "receiving from %s failed: %s%s", c->url, t->error,
                             cert ? " (a daemon with client certificates needs a certificate "
                                    "from its CA: --tls-cert/--tls-key or KILN_TLS_CERT/KILN_TLS_KEY)"
                                  : "");
      if (t->alert >= 0 && reserve_out(c, KILN_TLS13_ALERT_BYTES))
        c->tls_out_len += kiln_tls13_seal_alert(t, c->tls_out + c->tls_out_len);
      return -1;
    }
    /* Part of a record: kept, and the buffer refilled. */
    kiln_status_t s = kiln_tls13_keep(t, in, in_len);
    c->tls_in_off = c->tls_in_len = 0;
    if (s) {
      *out_err = s;
      return -1;
    }
    ssize_t k = recv(c->fd, c->tls_in, TLS_IN_BYTES, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return -2;
      *out_err = KILN_STATUS(KILN_E_UNAVAILABLE, "receiving from %s failed: %s", c->url, strerror(errno));
      return -1;
    }
    if (k == 0) return 0; /* the connection ended (a record cut short ends it too) */
    c->tls_in_len = (size_t)k;
  }
}

bool kiln_tls_has_pending(const kiln_client_t *c) {
  return c->tls_rec && (c->tls_in_len > c->tls_in_off || kiln_tls13_readable(c->tls_rec));
}
