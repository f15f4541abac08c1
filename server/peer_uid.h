/* Who is at the other end of a loopback TCP connection: the uid that owns the peer's socket,
 * read from the kernel's socket table (NETLINK_SOCK_DIAG, else /proc/net/tcp{,6}). kilnd
 * asks it of every connection to a loopback listener that has no tokens (conn.c,
 * docs/operations.md "Listening"). A leaf: base/ only. Any thread; blocks at most the
 * timeout given. */
#ifndef KILN_SERVER_PEER_UID_H
#define KILN_SERVER_PEER_UID_H

#include <stdint.h>

#include "base/status.h"

struct sockaddr;

/* Where to look: the netlink query, then /proc when the query itself fails (not when it
 * answers that there is no such socket); or only one of them (tests). */
typedef enum { KILN_PEER_UID_ANY, KILN_PEER_UID_NETLINK, KILN_PEER_UID_PROC } kiln_peer_uid_via_t;

/* The uid owning the socket whose local address is `peer` and whose remote address is
 * `local` (this end's getsockname and getpeername: the two ends of one connection on this
 * machine), AF_INET or AF_INET6 (IPv4-mapped addresses are read as IPv4). Only a full socket
 * of the connection counts: none (it is gone, or it is not on this machine), a TIME_WAIT or
 * request socket or an orphan (whose uid the kernel may report as 0) or a listener that a lookup falls back
 * to fail with E_UNAUTHENTICATED saying why; so does a timeout (timeout_ms in all). Sets
 * *out_uid on success only. */
KILN_MUST_USE kiln_status_t kiln_peer_uid(const struct sockaddr *local, const struct sockaddr *peer,
                                         kiln_peer_uid_via_t via, int timeout_ms,
                                         uint32_t *out_uid);

#endif
