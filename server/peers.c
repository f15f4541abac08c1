/* Peers: what kilnd allows a network address before it has authenticated (issue 11 §5).
 *
 * On a tokens server a new connection is anonymous until `hello` succeeds. Anonymous
 * connections get a small message limit and reply buffer (conn.c), must authenticate within
 * --hello-timeout of connecting, are at most --max-anonymous-per-peer per peer (a new one
 * beyond is refused) and --max-anonymous in all (a new one beyond closes the oldest: it has
 * had the longest to say hello, and a real client says hello within one round trip, so a
 * flood of connections evicts the flood). Failed hellos cost a peer one unit of a bucket of
 * KILN_HELLO_FAILURE_BURST that refills by one every KILN_HELLO_FAILURE_REFILL_S seconds; a
 * peer with an empty bucket is refused before its token is looked at.
 *
 * A peer is an IPv4 address, an IPv6 /64 (one host usually holds a whole /64), or for unix
 * sockets the client's uid. Keys are a salted BLAKE2b of that, so no one can pick addresses
 * that collide with someone else's key. */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "server/peer_uid.h"
#include "server/server.h"

/* Peers remembered at once. Past it (tens of thousands of addresses failing within a minute)
 * new peers share one entry, so their failures limit each other instead of going uncounted. */
#define PEERS_MAX 65536
#define OVERFLOW_KEY 1

kiln_status_t kiln_peers_init(kiln_server_t *s) {
  kiln_map_init(&s->peers);
  if (getrandom(s->peer_salt, sizeof(s->peer_salt), 0) != (ssize_t)sizeof(s->peer_salt))
    return KILN_STATUS(KILN_E_INTERNAL, "getrandom failed");
  return KILN_OK;
}

static uint64_t key_of(const kiln_server_t *s, const uint8_t *m, size_t n) {
  uint8_t buf[sizeof(s->peer_salt) + 32], h[KILN_HASH_BYTES];
  memcpy(buf, s->peer_salt, sizeof(s->peer_salt));
  memcpy(buf + sizeof(s->peer_salt), m, n);
  kiln_hash(buf, sizeof(s->peer_salt) + n, h);
  uint64_t k;
  memcpy(&k, h, sizeof(k));
  return (k >> 2) | (1ull << 62); /* never 0, OVERFLOW_KEY or UINT64_MAX */
}

void kiln_peer_identify(kiln_conn_t *c, bool tcp) {
  uint8_t m[17] = {'?'};
  size_t n = 1;
  snprintf(c->peer, sizeof(c->peer), "?");
  if (tcp) {
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&ss, &len) == 0) {
      struct sockaddr_in v4 = {.sin_family = AF_INET};
      bool is4 = ss.ss_family == AF_INET;
      if (is4) v4 = *(struct sockaddr_in *)&ss;
      const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&ss;
      if (ss.ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
        memcpy(&v4.sin_addr, a6->sin6_addr.s6_addr + 12, 4);
        is4 = true;
      }
      if (is4) {
        uv_ip4_name(&v4, c->peer, sizeof(c->peer));
        m[0] = '4';
        memcpy(m + 1, &v4.sin_addr, 4);
        n = 5;
      } else if (ss.ss_family == AF_INET6) {
        uv_ip6_name(a6, c->peer, sizeof(c->peer));
        m[0] = '6';
        memcpy(m + 1, a6->sin6_addr.s6_addr, 8); /* the /64 */
        n = 9;
      }
    }
  } else {
    uv_os_fd_t fd;
    struct ucred cr;
    socklen_t len = sizeof(cr);
    snprintf(c->peer, sizeof(c->peer), "unix");
    if (uv_fileno(&c->h.handle, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
      snprintf(c->peer, sizeof(c->peer), "uid:%u", (unsigned)cr.uid);
      m[0] = 'u';
      memcpy(m + 1, &cr.uid, sizeof(cr.uid));
      n = 1 + sizeof(cr.uid);
    }
  }
  c->peer_key = key_of(c->server, m, n);
}

/* Loopback is not private to a user: without tokens, the listener itself cannot tell one
 * local user from another. The kernel can: it knows which uid made the peer's socket. */
kiln_status_t kiln_peer_check_owner(kiln_conn_t *c, const kiln_listener_t *l) {
  struct sockaddr_storage mine, theirs;
  int ml = sizeof(mine), tl = sizeof(theirs);
  uint32_t uid = 0, me = (uint32_t)geteuid();
  kiln_status_t st;
  if (uv_tcp_getsockname(&c->h.tcp, (struct sockaddr *)&mine, &ml) != 0 ||
      uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&theirs, &tl) != 0)
    st = KILN_STATUS(KILN_E_UNAUTHENTICATED, "the connection has no addresses (it is gone)");
  else
    st = kiln_peer_uid((struct sockaddr *)&mine, (struct sockaddr *)&theirs, KILN_PEER_UID_ANY,
                       KILN_PEER_UID_TIMEOUT_MS, &uid);
  char q[300];
  if (st) {
    kiln_status_t why = st;
    KILN_LOG_WARN("peer_refused", "conn=%llu listener=%s peer=%s uid=- reason=%s",
                  (unsigned long long)c->id, l->address, c->peer,
                  kiln_log_quote(q, sizeof(q), kiln_status_message(why)));
    st = KILN_STATUS(KILN_E_UNAUTHENTICATED,
                     "%s has no tokens and admits only kilnd's user (uid %u) and root, and cannot "
                     "tell which user this connection comes from: %s. Connect from a process that "
                     "keeps its socket open, or use a tokens server (docs/operations.md "
                     "\"Listening\")",
                     l->address, me, kiln_status_message(why));
    kiln_status_free(why);
    return st;
  }
  if (uid == me || uid == 0) {
    KILN_LOG_DEBUG("peer_uid", "conn=%llu peer=%s uid=%u", (unsigned long long)c->id, c->peer, uid);
    return KILN_OK;
  }
  KILN_LOG_WARN("peer_refused", "conn=%llu listener=%s peer=%s uid=%u reason=\"not kilnd's user "
                "(uid %u) nor root\"",
                (unsigned long long)c->id, l->address, c->peer, uid, me);
  return KILN_STATUS(KILN_E_UNAUTHENTICATED,
                     "%s has no tokens and admits only kilnd's user (uid %u) and root; this "
                     "connection comes from uid %u. Start a kilnd of your own (kiln starts one "
                     "on a private unix socket), or ask the operator for a token "
                     "(docs/operations.md \"Listening\")",
                     l->address, me, uid);
}

static void refill(kiln_peer_t *p, uint64_t now) {
  double add = (double)(now - p->budget_at_ns) / 1e9 / KILN_HELLO_FAILURE_REFILL_S;
  p->hello_budget = KILN_MIN((double)KILN_HELLO_FAILURE_BURST, p->hello_budget + add);
  p->budget_at_ns = now;
}

/* Forgets peers that hold nothing: no anonymous connection and a full bucket. */
static void prune(kiln_server_t *s, uint64_t now) {
  size_t it = 0;
  uint64_t key;
  void *v;
  while (kiln_map_next(&s->peers, &it, &key, &v)) {
    kiln_peer_t *p = v;
    if (p->anonymous) continue;
    refill(p, now);
    if (p->hello_budget >= KILN_HELLO_FAILURE_BURST) {
      kiln_map_remove(&s->peers, key);
      free(p);
    }
  }
}

/* The peer of c, created when `create`; may move c to the shared overflow entry. */
static kiln_peer_t *peer_of(kiln_server_t *s, kiln_conn_t *c, bool create) {
  kiln_peer_t *p = kiln_map_get(&s->peers, c->peer_key);
  if (p || !create) return p;
  uint64_t now = kiln_now_ns();
  if (s->peers.count >= PEERS_MAX) prune(s, now);
  if (s->peers.count >= PEERS_MAX) {
    c->peer_key = OVERFLOW_KEY;
    if ((p = kiln_map_get(&s->peers, OVERFLOW_KEY))) return p;
  }
  p = calloc(1, sizeof(*p));
  if (!p) return NULL;
  p->hello_budget = KILN_HELLO_FAILURE_BURST;
  p->budget_at_ns = now;
  kiln_status_t st = kiln_map_put(&s->peers, c->peer_key, p);
  if (st) {
    kiln_status_free(st);
    free(p);
    return NULL;
  }
  return p;
}

kiln_status_t kiln_peer_admit(kiln_server_t *s, kiln_conn_t *c, kiln_conn_t **out_evicted) {
  kiln_peer_t *p = peer_of(s, c, true);
  if (!p) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory accepting a connection");
  if (p->anonymous >= s->cfg.max_anonymous_per_peer)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                       "%s already has %u connections that have not completed hello (the "
                       "limit per address); send hello on those first",
                       c->peer, p->anonymous);
  *out_evicted = s->num_anonymous >= s->cfg.max_anonymous ? kiln_peer_evict_oldest(s, c) : NULL;
  p->anonymous++;
  s->num_anonymous++;
  c->anonymous = true;
  c->anon_prev = s->anon_tail;
  c->anon_next = NULL;
  if (s->anon_tail) s->anon_tail->anon_next = c;
  else s->anon_head = c;
  s->anon_tail = c;
  return KILN_OK;
}

void kiln_peer_leave_anonymous(kiln_server_t *s, kiln_conn_t *c) {
  if (!c->anonymous) return;
  c->anonymous = false;
  s->num_anonymous--;
  kiln_peer_t *p = peer_of(s, c, false);
  if (p && p->anonymous) p->anonymous--;
  if (c->anon_prev) c->anon_prev->anon_next = c->anon_next;
  else s->anon_head = c->anon_next;
  if (c->anon_next) c->anon_next->anon_prev = c->anon_prev;
  else s->anon_tail = c->anon_prev;
  c->anon_prev = c->anon_next = NULL;
}

kiln_conn_t *kiln_peer_evict_oldest(kiln_server_t *s, const kiln_conn_t *except) {
  kiln_conn_t *o = s->anon_head;
  if (!o || o == except) return NULL;
  kiln_peer_leave_anonymous(s, o);
  KILN_LOG_INFO("conn_evicted", "conn=%llu peer=%s", (unsigned long long)o->id, o->peer);
  return o;
}

bool kiln_peer_hello_allowed(kiln_server_t *s, kiln_conn_t *c, uint32_t *out_retry_s) {
  kiln_peer_t *p = kiln_map_get(&s->peers, c->peer_key);
  if (!p) return true;
  refill(p, kiln_now_ns());
  if (p->hello_budget >= 1) return true;
  *out_retry_s = (uint32_t)((1 - p->hello_budget) * KILN_HELLO_FAILURE_REFILL_S) + 1;
  return false;
}

void kiln_peer_hello_failed(kiln_server_t *s, kiln_conn_t *c) {
  kiln_peer_t *p = peer_of(s, c, true);
  if (!p) return;
  refill(p, kiln_now_ns());
  p->hello_budget = KILN_MAX(0.0, p->hello_budget - 1);
}

kiln_conn_t *kiln_peer_expired(kiln_server_t *s, uint64_t now) {
  uint64_t limit = (uint64_t)(s->cfg.hello_timeout_s * 1e9);
  kiln_conn_t *c = s->anon_head;
  if (!c || now - c->accepted_ns <= limit) return NULL;
  kiln_peer_leave_anonymous(s, c);
  return c;
}

void kiln_peers_prune(kiln_server_t *s, uint64_t now) { prune(s, now); }
