/* libkiln: the C client of kilnd (docs/protocol.md is the wire contract, docs/client.md the guide).
 *
 *   kiln_client_t *c;
 *   KILN_RETURN_IF_ERROR(kiln_client_create(NULL, &c));       // $KILN_URL or the default socket
 *   uint64_t id;
 *   kiln_status_t s = kiln_client_upload(c, NULL, &desc, data, &id);
 *   ...
 *   kiln_client_destroy(c);
 *
 * Two ways to call:
 * - Synchronous: kiln_client_ping(), kiln_client_upload(), ... send one request and wait for
 *   its reply. Server errors come back as a kiln_status_t carrying the server's code
 *   (E_NOT_FOUND, ...) and message.
 * - Pipelined: kiln_client_submit_*() queue a request and return its msgid at once; any number
 *   may be in flight. kiln_client_wait() waits for one msgid, kiln_client_wait_any() returns
 *   replies in the order the daemon completed them. Queued requests are sent in batches (one
 *   writev for many), and while the client sends it also reads, so a deep pipeline never
 *   deadlocks against the daemon's backpressure.
 *
 * Threads: a kiln_client_t and its replies belong to one thread at a time (no locks inside).
 * Use one client per thread; different clients are independent.
 * Signals: writes use MSG_NOSIGNAL, so a closed connection is an error value, never SIGPIPE. */
#ifndef KILN_CLIENT_H
#define KILN_CLIENT_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "protocol/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_client kiln_client_t;
typedef struct kiln_reply kiln_reply_t;

/* --- Connection ------------------------------------------------------------------------- */

/* Writes the URL used when none is given: $KILN_URL, else "unix:$XDG_RUNTIME_DIR/kiln.sock",
 * else "unix:/tmp/kiln-$UID/kiln.sock" (docs/protocol.md §1). Returns out. */
const char *kiln_client_default_url(char *out, size_t cap);
/* Writes the space-separated URLs tried, in order, when no URL is given and $KILN_URL is unset:
 * $KILN_SEARCH when set, else the user socket above, "unix:/run/kiln/kiln.sock" (a system
 * daemon) and "tcp:127.0.0.1:7070". */
void kiln_client_search_list(char *out, size_t cap);

/* Connects to "tcp:HOST:PORT" ("tcp:[::1]:7070" for IPv6), "tls:HOST:PORT" or "unix:PATH";
 * NULL means $KILN_URL, else the first of kiln_client_search_list() that accepts the
 * connection and whose daemon runs as root or this user (a unix socket's
 * SO_PEERCRED, a loopback port's owner in /proc/net/tcp; docs/protocol.md §1), checked before
 * anything is sent (E_UNAVAILABLE saying why each did not when none does). Sends nothing: hello is optional without tokens
 * (kiln_client_hello). E_UNAVAILABLE when nothing listens there or the TLS handshake fails
 * (the message says why: an untrusted certificate, a name that does not match),
 * E_INVALID_ARGUMENT for a malformed URL or an unreadable certificate file. The caller owns
 * *out_client (kiln_client_destroy). TLS options come from the environment here
 * (kiln_client_options_t says which). */
KILN_MUST_USE kiln_status_t kiln_client_create(const char *url, kiln_client_t **out_client);

/* Options of a connection; a NULL field takes the environment variable named, else the
 * default. Only tls: URLs use them. */
typedef struct kiln_client_options {
  const char *tls_ca;   /* PEM file of the CA(s) to trust; $KILN_TLS_CA; default: the system's */
  const char *tls_cert; /* client certificate chain (PEM) for a daemon that asks for one;
                           $KILN_TLS_CERT; default: none */
  const char *tls_key;  /* its private key (PEM); $KILN_TLS_KEY; default: the tls_cert file */
} kiln_client_options_t;

/* kiln_client_create with options (opts may be NULL). TLS 1.3 only; the daemon's certificate
 * must chain to a trusted CA and name the URL's host (DNS name or IP address). */
KILN_MUST_USE kiln_status_t kiln_client_create_with(const char *url, const kiln_client_options_t *opts,
                                      kiln_client_t **out_client);
/* Closes the connection. Unanswered requests are abandoned (the daemon drops their replies);
 * replies already returned to the caller stay valid and are freed with kiln_reply_free. */
void kiln_client_destroy(kiln_client_t *c);

/* Bounds every wait of this client: E_TIMEOUT after `ms` milliseconds without the awaited
 * reply (the request stays in flight; its reply is kept when it arrives). 0: wait forever
 * (the default). */
void kiln_client_set_timeout(kiln_client_t *c, int ms);
/* The URL this client connected to (borrowed). */
const char *kiln_client_url(const kiln_client_t *c);
/* The file descriptor of the connection (for poll; do not read or write it). On a tls: URL
 * replies can be waiting decrypted in the client while the descriptor is not readable: poll
 * only while kiln_client_wait* would block, and call them when it says readable. */
int kiln_client_fd(const kiln_client_t *c);

/* --- Synchronous calls ------------------------------------------------------------------ */

typedef struct kiln_hello {
  char server[64];  /* "kilnd 0.1.0" */
  uint32_t version; /* protocol version: 1 */
  char tenant[128];
  uint64_t max_message;
  uint32_t max_depth, max_items, max_str, max_inflight;
} kiln_hello_t;

/* token and client_name may be NULL. out may be NULL. Also lowers the size at which
 * kiln_client_upload splits a tensor into chunks to the daemon's max_message. */
KILN_MUST_USE kiln_status_t kiln_client_hello(kiln_client_t *c, const char *token, const char *client_name,
                                kiln_hello_t *out);
KILN_MUST_USE kiln_status_t kiln_client_ping(kiln_client_t *c);

typedef struct kiln_device_info {
  char id[32];   /* "cpu:0"; for an absent backend its kind ("hsa") */
  char kind[16]; /* "cpu", "hsa", "cuda" */
  char name[128];
  char arch[64];
  uint64_t memory;
  uint64_t compute_units, max_block, wave_size, max_shared;
  bool available;
  char reason[256]; /* why an absent backend found no device; "" otherwise */
} kiln_device_info_t;

/* Fills out[0 .. min(cap, n)) and sets *out_n to the number of devices the daemon reported
 * (which may exceed cap). absent: also list backend kinds that found no device. */
KILN_MUST_USE kiln_status_t kiln_client_devices(kiln_client_t *c, bool absent, kiln_device_info_t *out,
                                  size_t cap, size_t *out_n);

/* device: "cpu:0", "hsa:1", ...; NULL means the daemon's default ("cpu:0").
 * Memory is zero-filled. */
KILN_MUST_USE kiln_status_t kiln_client_alloc(kiln_client_t *c, const char *device, kiln_dtype_t dtype,
                                const uint64_t *shape, uint32_t ndim, uint64_t *out_id);
/* Uploads desc->nbytes bytes from data (little-endian, C-contiguous). desc->nbytes must be
 * the product of the shape times the element size. A tensor larger than what one message may
 * carry is sent as alloc + write chunks, transparently. */
KILN_MUST_USE kiln_status_t kiln_client_upload(kiln_client_t *c, const char *device,
                                 const kiln_tensor_desc_t *desc, const void *data,
                                 uint64_t *out_id);
KILN_MUST_USE kiln_status_t kiln_client_write(kiln_client_t *c, uint64_t id, uint64_t offset, const void *data,
                                size_t n);
/* Reads exactly n bytes at byte offset `offset` into dst. */
KILN_MUST_USE kiln_status_t kiln_client_read(kiln_client_t *c, uint64_t id, uint64_t offset, void *dst,
                               size_t n);
/* Downloads a whole tensor (at most 1 GiB; use kiln_client_read beyond). The tensor's bytes
 * are borrowed from the reply: read them with kiln_reply_tensor(), then kiln_reply_free().
 * No copy is made of large tensors. */
KILN_MUST_USE kiln_status_t kiln_client_download(kiln_client_t *c, uint64_t id, kiln_reply_t **out_reply);
/* Downloads into caller storage: E_RESOURCE_EXHAUSTED if the tensor is larger than cap.
 * out_desc may be NULL. */
KILN_MUST_USE kiln_status_t kiln_client_download_into(kiln_client_t *c, uint64_t id, void *dst, size_t cap,
                                        kiln_tensor_desc_t *out_desc);
/* The "free" method (named so that it is not mistaken for destroying the client). */
KILN_MUST_USE kiln_status_t kiln_client_free_tensor(kiln_client_t *c, uint64_t id);
/* The stats map (docs/protocol.md §stats); read it with kiln_reply_result/kiln_object_get. */
KILN_MUST_USE kiln_status_t kiln_client_stats(kiln_client_t *c, kiln_reply_t **out_reply);

/* Generic call, for methods without a typed wrapper (compile, launch, time, ...).
 * build packs the named fields as ONE msgpack map (msgpack_pack_map + pairs) into pk; NULL
 * sends no fields ([]). On success *out_reply holds the result (kiln_reply_result); a server
 * error comes back as the status and no reply. */
typedef void (*kiln_params_cb)(msgpack_packer *pk, void *ctx);
KILN_MUST_USE kiln_status_t kiln_client_call(kiln_client_t *c, const char *method, kiln_params_cb build,
                               void *ctx, kiln_reply_t **out_reply);

/* --- Pipelined calls -------------------------------------------------------------------- */

/* Each submit queues one request and returns its msgid; the reply is collected with
 * kiln_client_wait(msgid) or kiln_client_wait_any(). Errors here are local (a broken
 * connection, out of memory); server errors arrive in the reply. Data passed by pointer
 * (upload, write) is sent from the caller's memory without a copy: it must stay valid
 * and unchanged until that request's reply has been received. */
KILN_MUST_USE kiln_status_t kiln_client_submit_ping(kiln_client_t *c, uint32_t *out_msgid);
KILN_MUST_USE kiln_status_t kiln_client_submit_alloc(kiln_client_t *c, const char *device, kiln_dtype_t dtype,
                                       const uint64_t *shape, uint32_t ndim,
                                       uint32_t *out_msgid);
KILN_MUST_USE kiln_status_t kiln_client_submit_upload(kiln_client_t *c, const char *device,
                                        const kiln_tensor_desc_t *desc, const void *data,
                                        uint32_t *out_msgid);
KILN_MUST_USE kiln_status_t kiln_client_submit_write(kiln_client_t *c, uint64_t id, uint64_t offset,
                                       const void *data, size_t n, uint32_t *out_msgid);
KILN_MUST_USE kiln_status_t kiln_client_submit_read(kiln_client_t *c, uint64_t id, uint64_t offset,
                                      uint64_t size, uint32_t *out_msgid);
KILN_MUST_USE kiln_status_t kiln_client_submit_download(kiln_client_t *c, uint64_t id, uint32_t *out_msgid);
KILN_MUST_USE kiln_status_t kiln_client_submit_free(kiln_client_t *c, uint64_t id, uint32_t *out_msgid);
KILN_MUST_USE kiln_status_t kiln_client_submit_call(kiln_client_t *c, const char *method,
                                      kiln_params_cb build, void *ctx, uint32_t *out_msgid);

/* Lowest level: kiln_client_request_begin packs [0, msgid, method, and returns the packer;
 * the caller packs params (an array: [] or [map]) and calls kiln_client_request_end, or
 * kiln_client_request_abort to drop what was packed. Between them, kiln_client_attach()
 * appends bytes by reference (after packing a bin/str header of that size), so that bulk
 * data goes out without a copy. Nothing else may be called on c between begin and end. */
msgpack_packer *kiln_client_request_begin(kiln_client_t *c, const char *method,
                                          uint32_t *out_msgid);
void kiln_client_attach(kiln_client_t *c, const void *data, size_t n);
KILN_MUST_USE kiln_status_t kiln_client_request_end(kiln_client_t *c);
void kiln_client_request_abort(kiln_client_t *c);

/* Sends everything queued (still reading replies meanwhile). */
KILN_MUST_USE kiln_status_t kiln_client_flush(kiln_client_t *c);
/* Waits for the reply to msgid. The caller owns *out_reply. E_NOT_FOUND if msgid is not in
 * flight; E_UNAVAILABLE (or the daemon's connection-level error) if the connection ends
 * first. */
KILN_MUST_USE kiln_status_t kiln_client_wait(kiln_client_t *c, uint32_t msgid, kiln_reply_t **out_reply);
/* Returns the earliest completed reply not yet collected, waiting for one if needed.
 * *out_reply is NULL (and the status OK) when nothing is in flight or waiting. */
KILN_MUST_USE kiln_status_t kiln_client_wait_any(kiln_client_t *c, kiln_reply_t **out_reply);
/* Waits until every request in flight has its reply (kept for wait/wait_any). */
KILN_MUST_USE kiln_status_t kiln_client_wait_all(kiln_client_t *c);
/* Requests sent or queued whose replies have not arrived yet. */
size_t kiln_client_inflight(const kiln_client_t *c);

/* --- Replies ---------------------------------------------------------------------------- */

uint32_t kiln_reply_msgid(const kiln_reply_t *r);
/* The server's error as a new status (the caller frees it), or KILN_OK. */
KILN_MUST_USE kiln_status_t kiln_reply_status(const kiln_reply_t *r);
/* The result object (borrowed; lives as long as r), or NULL if the reply is an error. */
const msgpack_object *kiln_reply_result(const kiln_reply_t *r);
/* Typed views of common results. Each returns the server's error if the reply is one, else
 * E_INTERNAL if the result does not have the documented shape. */
KILN_MUST_USE kiln_status_t kiln_reply_id(const kiln_reply_t *r, uint64_t *out_id);            /* alloc, upload */
KILN_MUST_USE kiln_status_t kiln_reply_void(const kiln_reply_t *r);                            /* write, free */
KILN_MUST_USE kiln_status_t kiln_reply_bytes(const kiln_reply_t *r, const void **out_data,
                               size_t *out_n);                                    /* read */
KILN_MUST_USE kiln_status_t kiln_reply_tensor(const kiln_reply_t *r, kiln_tensor_desc_t *out_desc,
                                const void **out_data);                           /* download */
void kiln_reply_free(kiln_reply_t *r);

/* --- Result helpers --------------------------------------------------------------------- */

/* The value under str key `key` of a map object, or NULL (also when map is not a map). */
const msgpack_object *kiln_object_get(const msgpack_object *map, const char *key);
/* Writes o as JSON (bins as {"bin": N} with their length; non-finite floats as null). */
void kiln_object_print_json(FILE *f, const msgpack_object *o, bool pretty);

#ifdef __cplusplus
}
#endif

#endif
