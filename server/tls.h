/* TLS for client connections (`--listen tls:HOST:PORT`, docs/operations.md "TLS").
 *
 * OpenSSL shakes hands on the loop thread through BIOs of kiln's own; then the records are
 * kiln's (protocol/tls13.h). kilnd's libuv stream reads ciphertext into a buffer and hands it
 * to the session (kiln_tls_feed); plaintext comes out with kiln_tls_read straight into the
 * frame reader's space; plaintext to send goes in with kiln_tls_write and ciphertext comes out
 * with kiln_tls_take, a buffer the connection writes with uv_write. Nothing here touches the
 * socket or blocks: the loop's back-pressure and timers work on a TLS connection as on a plain
 * one. Long runs of records are sealed and opened on protocol/tls13.h's pool, the loop taking
 * a share and waiting for the rest.
 *
 * Only TLS 1.3. One kiln_tls_ctx_t (certificate, key, optional client CA) serves every tls
 * listener; SIGHUP loads the files again (kiln_tls_ctx_reload), and sessions already open
 * keep the context they started with. One thread (the loop). */
#ifndef KILN_SERVER_TLS_H
#define KILN_SERVER_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct kiln_tls_ctx kiln_tls_ctx_t;
typedef struct kiln_tls kiln_tls_t;

/* Loads the certificate chain and key (PEM), and with client_ca (PEM, may be NULL) requires
 * every client to present a certificate that chains to it. Errors name the file and what
 * OpenSSL said. The caller owns *out (kiln_tls_ctx_destroy). */
KILN_MUST_USE kiln_status_t kiln_tls_ctx_create(const char *cert, const char *key, const char *client_ca,
                                  kiln_tls_ctx_t **out);
/* Loads the same files again; on error the context stays as it was. */
KILN_MUST_USE kiln_status_t kiln_tls_ctx_reload(kiln_tls_ctx_t *ctx);
void kiln_tls_ctx_destroy(kiln_tls_ctx_t *ctx);

/* A server-side session for one accepted connection. */
KILN_MUST_USE kiln_status_t kiln_tls_create(kiln_tls_ctx_t *ctx, kiln_tls_t **out);
void kiln_tls_destroy(kiln_tls_t *t);

/* Ciphertext received from the peer, borrowed until kiln_tls_feed_end: kiln_tls_read
 * decrypts from it in place of a copy. */
void kiln_tls_feed(kiln_tls_t *t, const void *p, size_t n);
/* Keeps what the reads left of the feed (part of a record) for the next one. */
KILN_MUST_USE kiln_status_t kiln_tls_feed_end(kiln_tls_t *t);

typedef enum kiln_tls_result {
  KILN_TLS_DATA = 0,   /* *out_n > 0 plaintext bytes were read */
  KILN_TLS_AGAIN = 1,  /* nothing more until more ciphertext is fed */
  KILN_TLS_CLOSED = 2, /* the peer sent close_notify */
  KILN_TLS_ERROR = 3,  /* the session is unusable: kiln_tls_error() says why */
} kiln_tls_result_t;

/* Decrypts into dst (up to cap bytes); drives the handshake while it is not done. On
 * KILN_TLS_ERROR the alert the failure calls for waits in the output. */
kiln_tls_result_t kiln_tls_read(kiln_tls_t *t, void *dst, size_t cap, size_t *out_n);
/* Encrypts plaintext (all of it; the ciphertext waits for kiln_tls_take). */
KILN_MUST_USE kiln_status_t kiln_tls_write(kiln_tls_t *t, const void *p, size_t n);
/* Queues close_notify. */
void kiln_tls_shutdown(kiln_tls_t *t);
/* Ciphertext waiting to be sent, in bytes. */
size_t kiln_tls_pending_out(const kiln_tls_t *t);
/* All the waiting ciphertext: *out_len bytes of a buffer of *out_cap (NULL when none), the
 * caller's now; kiln_tls_give_back it once written (it is reused) or free it. */
uint8_t *kiln_tls_take(kiln_tls_t *t, size_t *out_len, size_t *out_cap);
void kiln_tls_give_back(kiln_tls_t *t, uint8_t *p, size_t cap);
/* Frees the output buffer when nothing waits in it. */
void kiln_tls_trim(kiln_tls_t *t);
/* True while ciphertext is buffered that did not make a whole record yet (a peer that
 * stops here has stalled mid-message). */
bool kiln_tls_partial_in(const kiln_tls_t *t);
bool kiln_tls_handshake_done(const kiln_tls_t *t);
/* Why the session failed (static text, or OpenSSL's reason). */
const char *kiln_tls_error(const kiln_tls_t *t);
/* After the handshake: "TLSv1.3 TLS_AES_128_GCM_SHA256" and the client certificate's subject
 * (or "-"), for the log. */
void kiln_tls_describe(const kiln_tls_t *t, char *out, size_t cap);

#endif
