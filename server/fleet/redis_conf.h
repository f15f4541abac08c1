/* What a Redis connection is told, apart from the connection itself: the URL and the AUTH
 * file. Shared by kilnd's connection (redis.c) and the `kiln fleet` command (clients/c), so
 * both accept the same spellings; no libuv, no hiredis.
 *
 * Threads: any. */
#ifndef KILN_FLEET_REDIS_CONF_H
#define KILN_FLEET_REDIS_CONF_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

/* Parses redis://HOST[:PORT][/DB] (HOST may be [IPv6]) or unix:PATH[?db=N]: host (or the
 * path for unix:), port and db. E_INVALID_ARGUMENT for anything else, credentials in the
 * URL included (they would show in ps and logs). */
KILN_MUST_USE kiln_status_t kiln_redis_url_parse(const char *url, char *host, size_t host_cap,
                                                 int *port, int *db, bool *is_unix);

/* Reads an AUTH file: one line, PASSWORD or USER PASSWORD, a regular file nobody but its
 * owner may read. out_user is "" when the line names no user. E_NOT_FOUND, E_PERMISSION (not
 * a regular file, readable by group or others, unreadable), E_INVALID_ARGUMENT (not one line
 * of that form, or a part longer than its buffer). */
KILN_MUST_USE kiln_status_t kiln_redis_auth_read(const char *path, char *out_user, size_t user_cap,
                                                 char *out_pass, size_t pass_cap);

/* Reads up to cap bytes of a file that must be a regular file nobody but its owner may read
 * (a password, a key): E_NOT_FOUND, E_PERMISSION naming `what` it holds. *out_n: the bytes
 * read (cap when the file is at least that long). */
KILN_MUST_USE kiln_status_t kiln_fleet_private_read(const char *path, const char *what, void *buf, size_t cap,
                                                    size_t *out_n);

#endif
