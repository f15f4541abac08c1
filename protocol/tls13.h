/* TLS 1.3's record layer after the handshake (RFC 8446 §5, §4.6.3), for kilnd and libkiln.
 *
 * OpenSSL does the handshake (certificates, client certificates, key exchange); once it is
 * done, its traffic secrets are handed here and application data is sealed and opened with
 * AEAD calls on the caller's buffers: ciphertext is decrypted from the buffer the socket read
 * it into straight into its destination (a shared-memory tensor buffer in kilnd), and
 * plaintext is encrypted from its source straight into the buffer the socket writes. OpenSSL's
 * own record layer would copy each record into its buffer and copy the plaintext out again
 * (the kernel's TLS, where present, would do what this does).
 *
 * What the peer may send after the handshake is handled here too: alerts (close_notify ends
 * the stream; any other ends it with an error), KeyUpdate (new receive keys; a requested one
 * is answered before the next record sent), NewSessionTicket (ignored: no resumption). A
 * record that fails authentication, is too long, or carries anything else ends the stream
 * with the alert RFC 8446 names, which kiln_tls13_seal_alert writes for the caller to send.
 * Sending keys are updated before 2^24 records (AES-GCM's limit, RFC 8446 §5.5).
 *
 * Storage is the caller's (_init/_deinit); one thread at a time. Only libcrypto is used. */
#ifndef KILN_PROTOCOL_TLS13_H
#define KILN_PROTOCOL_TLS13_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define KILN_TLS13_MAX_PLAIN 16384u               /* application data per record */
#define KILN_TLS13_MAX_RECORD (5u + 16384u + 256u) /* header + largest ciphertext allowed */
#define KILN_TLS13_ALERT_BYTES 64u                /* room for one sealed alert */

struct evp_cipher_ctx_st;

/* Records sealed and opened on several threads at once, for large transfers on machines with
 * cores to spare: the caller splits a run of records, works on a share itself and waits for
 * the rest (each record's nonce is known in advance, so records are independent). One run at a
 * time: a caller that finds the pool busy works alone. Any thread may use it. */
typedef struct kiln_tls13_pool kiln_tls13_pool_t;

/* threads < 0: $KILN_TLS_THREADS, else a quarter of the cores (at most 3). With 0 threads
 * *out is NULL: no pool. The caller owns *out (kiln_tls13_pool_destroy). */
KILN_MUST_USE kiln_status_t kiln_tls13_pool_create(int threads, kiln_tls13_pool_t **out);
void kiln_tls13_pool_destroy(kiln_tls13_pool_t *p);
/* Helper threads of the pool (0 for NULL). */
int kiln_tls13_pool_threads(const kiln_tls13_pool_t *p);

typedef struct kiln_tls13_dir {
  struct evp_cipher_ctx_st *ctx; /* the key, set once per secret */
  uint8_t secret[48];
  uint8_t key[32]; /* for the pool's threads, which key contexts of their own */
  uint8_t iv[12];
  uint64_t seq; /* records protected with this secret */
} kiln_tls13_dir_t;

typedef struct kiln_tls13 {
  uint16_t suite; /* 0x1301 TLS_AES_128_GCM_SHA256, 0x1302 ..._256_GCM_SHA384, 0x1303 CHACHA20 */
  size_t hash_len;
  kiln_tls13_dir_t rx, tx;
  uint8_t *carry; /* input kept between calls (part of a record): [carry_off, carry_len) */
  size_t carry_off, carry_len, carry_cap;
  uint8_t *plain; /* opened application data the caller had no room for: [plain_off, plain_len) */
  size_t plain_off, plain_len;
  bool closed;      /* close_notify received: the peer sends nothing more */
  bool update_due;  /* the peer asked for a KeyUpdate: the next seal sends one */
  int alert;        /* after a failure, the alert to send (-1: none) */
  char error[160];  /* why the stream failed; empty while it works */
  kiln_tls13_pool_t *pool;               /* borrowed; NULL: one thread */
  size_t one_by_one; /* records to open without the pool since a run met one it could not */
  struct evp_cipher_ctx_st *share_ctx;   /* the caller's share of a pool run */
} kiln_tls13_t;

/* Takes the traffic secrets of both directions (secret_len: the suite's hash length) and
 * derives the keys. An unknown suite is E_INVALID_ARGUMENT. */
KILN_MUST_USE kiln_status_t kiln_tls13_init(kiln_tls13_t *t, uint16_t suite, const uint8_t *rx_secret,
                                            const uint8_t *tx_secret, size_t secret_len);
/* Wipes the keys. */
void kiln_tls13_deinit(kiln_tls13_t *t);

typedef enum kiln_tls13_result {
  KILN_TLS13_DATA = 0,   /* *out_n > 0 bytes of application data */
  KILN_TLS13_AGAIN = 1,  /* no whole record in what was given: more input, then call again */
  KILN_TLS13_CLOSED = 2, /* the peer sent close_notify */
  KILN_TLS13_ERROR = 3,  /* the stream failed: t->error says why, t->alert what to answer */
} kiln_tls13_result_t;

/* Opens records from what was kept plus *in (advanced past the records used) into dst, as
 * many as fit in cap. A record whose data does not fit is opened aside and handed out over
 * the next calls. What is left of *in on AGAIN is part of a record: kiln_tls13_keep it if
 * the buffer it lives in is reused. Bytes of dst past *out_n may have been written. */
kiln_tls13_result_t kiln_tls13_open(kiln_tls13_t *t, const uint8_t **in, size_t *in_len, void *dst,
                                    size_t cap, size_t *out_n);
/* Copies input that open could not use yet (part of a record) for the next call. */
KILN_MUST_USE kiln_status_t kiln_tls13_keep(kiln_tls13_t *t, const uint8_t *in, size_t n);
/* True while something was kept or opened and not handed out (a stalled peer is mid-record). */
bool kiln_tls13_partial(const kiln_tls13_t *t);
/* True when open would return without more input: data, or a whole record, is waiting. */
bool kiln_tls13_readable(const kiln_tls13_t *t);

/* The most bytes kiln_tls13_seal writes for n bytes of data. */
size_t kiln_tls13_seal_bound(size_t n);
/* Seals n bytes of application data into records at out (kiln_tls13_seal_bound(n) bytes of
 * room); *out_len is what was written. */
KILN_MUST_USE kiln_status_t kiln_tls13_seal(kiln_tls13_t *t, const void *p, size_t n, uint8_t *out,
                                            size_t *out_len);
/* One alert record at out (KILN_TLS13_ALERT_BYTES of room): close_notify when the stream is
 * fine, else the fatal alert its failure calls for. Returns its length (0 when none can be
 * made). */
size_t kiln_tls13_seal_alert(kiln_tls13_t *t, uint8_t *out);

/* From an OpenSSL key log line ("LABEL CLIENT_RANDOM SECRET", SSL_CTX_set_keylog_callback):
 * the secret, when the line's label is `label`. */
bool kiln_tls13_keylog_secret(const char *line, const char *label, uint8_t *out, size_t cap,
                              size_t *out_len);

#endif
