/* One connection to Redis on kilnd's loop (hiredis's async API and its libuv adapter),
 * made to survive Redis: it reconnects with backoff when Redis goes away or restarts, every
 * command has a deadline (a Redis that stops answering is dropped, its commands fail and the
 * connection is made again), and replies are bounded (a reply buffer or a parsed reply tree
 * past max_reply bytes, an array past 4096 elements, or an array inside an array drops the
 * connection), so a hostile or broken Redis costs the
 * caller a failed command and nothing else.
 *
 * A large reply is read in few reads, straight into hiredis's reader buffer, and a command
 * may watch its bulk reply arrive (kiln_redis_command_progress) and keep its buffer
 * (kiln_redis_take_str): a bulk reply to such a command is read from the socket once, into
 * the buffer the caller keeps, and its length is checked strictly (one that does not parse, is
 * negative other than nil, passes max_reply, or is not followed by CRLF drops the connection
 * with a log line, redis_bad_reply: the command fails).
 *
 * A connection made with spare_max may keep one spare receive buffer (below): a block whose
 * pages were all touched on libuv's thread pool, into which such a bulk reply is read, so that
 * the kernel's copy from the socket does not fault fresh pages in on the loop thread.
 *
 * Commands are accepted only while the connection is up (connected, AUTH and SELECT done);
 * otherwise kiln_redis_command returns false at once and the caller carries on without Redis.
 *
 * Threads: everything here runs on the loop thread that created the connection. */
#ifndef KILN_FLEET_REDIS_H
#define KILN_FLEET_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include <hiredis/hiredis.h>

#include "base/status.h"
#include "server/fleet/redis_conf.h" /* kiln_redis_url_parse, kiln_redis_auth_read */

typedef struct kiln_redis kiln_redis_t;

#define KILN_REDIS_SPARE_MAX (8ull << 20) /* the largest spare receive buffer */

typedef struct kiln_redis_config {
  const char *url;        /* redis://HOST:PORT[/DB] or unix:PATH[?db=N] */
  const char *auth_file;  /* NULL, or a file of one line: PASSWORD or USER PASSWORD */
  const char *what;       /* the name in log lines: "cache_remote", "fleet" */
  uint32_t timeout_ms;    /* a command's deadline and the connect deadline (0: 2000) */
  uint64_t max_reply;     /* the largest reply buffered (0: 64 MiB + 1 MiB) */
  uint64_t spare_max;     /* 0: no spare. Otherwise the largest spare receive buffer kept (at
                           * most KILN_REDIS_SPARE_MAX and max_reply): one block at a time, made
                           * and its pages touched on the thread pool, sized for the last large
                           * bulk reply (one bulk reply read without a spare sizes the first),
                           * adopted as the reader's buffer when a bulk reply of TAKE_MIN or more
                           * to a progress command starts and fits in it; another is made after */
  void (*on_up)(void *arg); /* NULL, or called from the loop each time the connection is up
                             * (AUTH, SELECT and PING done): commands may be sent from it */
  void *up_arg;
} kiln_redis_config_t;

typedef struct kiln_redis_stats {
  bool up;
  uint64_t connects, disconnects, errors, timeouts, auth_failures;
  uint64_t taken; /* bulk replies of TAKE_MIN (64 KiB) or more read in place: not copied */
  uint64_t spare_used;   /* ... of those, read into the spare receive buffer */
  uint64_t spare_missed; /* ... read without it: none ready (being made, or the first), or too small */
  uint64_t spare_bytes;  /* the spare's bytes now, ready or being made (0 or 1 block) */
  bool spare_ready;      /* a spare is ready now (not being made) */
} kiln_redis_stats_t;

/* The reply of a command, or NULL when it failed (Redis down, dropped, timed out, or the
 * connection closed). The reply is borrowed: valid only during the callback. */
typedef void (*kiln_redis_cb)(void *arg, const redisReply *reply);

/* Parses the URL and reads the AUTH file (it must be a regular file nobody but kilnd's user
 * can read), then starts connecting in the background: E_INVALID_ARGUMENT for a URL that
 * does not parse, E_PERMISSION/E_NOT_FOUND for the AUTH file; Redis being down is no error. */
KILN_MUST_USE kiln_status_t kiln_redis_create(uv_loop_t *loop, const kiln_redis_config_t *cfg,
                                              kiln_redis_t **out);

/* Closes the connection and frees it. Callbacks of commands still pending are NOT called
 * (kilnd is exiting); their args belong to the caller. */
void kiln_redis_destroy(kiln_redis_t *r);

bool kiln_redis_up(const kiln_redis_t *r);

/* Sends a command (argv with lengths, binary-safe). false when the connection is not up or
 * the command could not be queued: cb is then never called. Otherwise cb is called exactly
 * once, from the loop, never inside this call. */
bool kiln_redis_command(kiln_redis_t *r, kiln_redis_cb cb, void *arg, int argc, const char **argv,
                        const size_t *lens);

/* The bytes of a bulk-string reply as they arrive, before the reply is whole: payload[0, have)
 * of its `total` bytes (have grows from call to call; bytes once shown never change, and the
 * reply cb then gets exactly these bytes). Not called for other replies, nor for the part
 * of one that arrives with its end. For work that can overlap the transfer (a MAC). */
typedef void (*kiln_redis_progress_cb)(void *arg, const uint8_t *payload, size_t have, size_t total);

/* kiln_redis_command with a progress callback (NULL: none), called with the same arg. */
bool kiln_redis_command_progress(kiln_redis_t *r, kiln_redis_cb cb, kiln_redis_progress_cb progress, void *arg,
                                 int argc, const char **argv, const size_t *lens);

/* Inside a reply callback: takes the buffer of a string reply, a malloc'd block holding its
 * `reply->len` bytes and a NUL (reply->str: at the block's start, or for a bulk reply of 64 KiB
 * or more to a command with a progress callback, inside it: the reader's buffer the reply was
 * read into, never copied): the caller owns it and frees it with free(); the reply is left
 * without it. NULL for a reply of another type. */
char *kiln_redis_take_str(const redisReply *reply);

void kiln_redis_stats(const kiln_redis_t *r, kiln_redis_stats_t *out);

/* The URL with no secret in it (for logs and metrics). */
const char *kiln_redis_url(const kiln_redis_t *r);

#endif
