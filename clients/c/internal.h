/* libkiln internals shared by the files of clients/c (not installed, not for other modules). */
#ifndef KILN_CLIENTS_C_INTERNAL_H
#define KILN_CLIENTS_C_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "base/map.h"
#include "kiln/client.h"
#include "protocol/frame.h"
#include "protocol/rpc.h"

/* One piece of the output stream: bytes packed into client->out (ext == NULL, at `off`), or
 * caller memory attached by reference (ext). */
typedef struct kiln_seg {
  const uint8_t *ext;
  size_t off;
  size_t len;
} kiln_seg_t;

struct kiln_reply {
  kiln_reply_t *prev, *next; /* the client's completed-and-uncollected queue */
  uint32_t msgid;
  uint8_t *bytes; /* the whole response message; the decoded tree points into it */
  size_t len;
  kiln_rpc_msg_t msg;
};

/* Value stored in client->calls for a request whose reply has not arrived. */
#define KILN_CALL_INFLIGHT ((void *)1)

struct ssl_st;
struct ssl_ctx_st;
struct kiln_tls13;

struct kiln_client {
  int fd;
  struct ssl_st *ssl;         /* tls: URLs; NULL on plain connections */
  struct ssl_ctx_st *ssl_ctx;
  struct kiln_tls13 *tls_rec; /* the records after the handshake (protocol/tls13.h) */
  uint8_t *tls_out;           /* ciphertext encrypted, not yet sent: [tls_out_off, tls_out_len) */
  size_t tls_out_off, tls_out_len, tls_out_cap;
  uint8_t *tls_in;            /* ciphertext received, not yet opened: [tls_in_off, tls_in_len) */
  size_t tls_in_off, tls_in_len;
  int timeout_ms; /* 0: none */
  char url[512];
  uint32_t next_msgid;
  uint64_t chunk_bytes; /* uploads above this go as alloc + write chunks */

  kiln_reader_t reader;
  const uint8_t *advised; /* the reader buffer last given the huge-page hint */

  /* Output queue: segments [seg_head, nsegs) are unsent; seg_sent bytes of seg_head are out. */
  kiln_buf_t out;
  kiln_packer_t packer;
  kiln_seg_t *segs;
  size_t nsegs, segs_cap, seg_head, seg_sent;
  size_t mark;        /* first byte of out not yet covered by a segment */
  size_t queued;      /* unsent bytes, packed and attached */
  size_t queued_packed;

  /* The request being built between request_begin and request_end, and how to undo it. */
  bool building;
  uint32_t building_msgid;
  size_t undo_out_len, undo_nsegs, undo_last_len, undo_mark, undo_queued, undo_queued_packed;

  kiln_map_t calls; /* msgid + 1 -> KILN_CALL_INFLIGHT or the kiln_reply_t */
  size_t inflight;
  kiln_reply_t *done_head, *done_tail; /* replies in the order they completed */

  kiln_status_t broken; /* sticky: why the connection cannot be used any more */
  bool spoke;           /* a MessagePack-RPC message arrived: the peer is a kilnd */
};

static inline uint64_t kiln_call_key(uint32_t msgid) { return (uint64_t)msgid + 1; }

/* url.c: connects, and for tls: URLs shakes hands (c->ssl, c->ssl_ctx). */
KILN_MUST_USE kiln_status_t kiln_url_connect(kiln_client_t *c, const char *url,
                               const kiln_client_options_t *opts);
/* url.c: E_UNAVAILABLE unless the daemon at connected fd runs as root, this user or kiln. */
KILN_MUST_USE kiln_status_t kiln_url_check_owner(int fd, const char *url);
/* tls.c */
KILN_MUST_USE kiln_status_t kiln_tls_connect(kiln_client_t *c, const char *url, const char *host,
                               const kiln_client_options_t *opts);
void kiln_tls_close(kiln_client_t *c);
/* Encrypts up to n bytes into the client's ciphertext buffer (call when it is empty): the
 * bytes taken (> 0), or -1 with *out_err. */
ssize_t kiln_tls_encrypt(kiln_client_t *c, const void *p, size_t n, kiln_status_t *out_err);
/* Sends buffered ciphertext: 0 when none is left, 1 when the socket is full, -1 with
 * *out_err when the connection failed. */
int kiln_tls_flush(kiln_client_t *c, kiln_status_t *out_err);
static inline bool kiln_tls_unsent(const kiln_client_t *c) { return c->tls_out_off < c->tls_out_len; }
/* Bytes received (> 0), 0 at the end of the stream, -2 when nothing is there now, -1 with
 * *out_err when the connection failed. */
ssize_t kiln_tls_recv(kiln_client_t *c, void *p, size_t cap, kiln_status_t *out_err);
/* Received bytes wait, opened or in whole records: a poll() would not see them. */
bool kiln_tls_has_pending(const kiln_client_t *c);

/* io.c: moving bytes. deadline_ns 0 means none. */
KILN_MUST_USE kiln_status_t kiln_io_write_some(kiln_client_t *c);
KILN_MUST_USE kiln_status_t kiln_io_flush(kiln_client_t *c, uint64_t deadline_ns);
/* Waits until at least one reply has been received (or the connection broke: then it
 * returns that error). */
KILN_MUST_USE kiln_status_t kiln_io_receive(kiln_client_t *c, uint64_t deadline_ns);
uint64_t kiln_io_deadline(const kiln_client_t *c);
/* A copy of c->broken for the caller to own. */
KILN_MUST_USE kiln_status_t kiln_io_broken(const kiln_client_t *c);

/* reply.c */
void kiln_reply_unlink(kiln_client_t *c, kiln_reply_t *r);

#endif
