/* The owner of a loopback TCP peer's socket (peer_uid.h).
 *
 * The kernel keeps the socket at the other end of a loopback connection in the same table as
 * kilnd's own, with the uid of the process that made it. One NETLINK_SOCK_DIAG request for
 * exactly that socket (inet_diag by the 4-tuple, no dump) is answered before sendto returns,
 * in microseconds however many sockets the machine has; /proc/net/tcp{,6} (a scan of every
 * socket) is read only when the request itself fails (no netlink in a sandbox, no inet_diag
 * in the kernel), never because the kernel answered that there is no such socket: a peer
 * that closes early must not make kilnd scan the table.
 *
 * What the table says is trusted only for a full socket that a process still holds:
 *  - the kernel reports uid 0 for TIME_WAIT and request sockets, and older kernels (those
 *    whose sock_i_uid reads the owner from the socket's inode) report uid 0 for an orphaned socket (closed by its process while its data or FIN are
 *    still in flight): a peer could write requests, close, and pass for root. Those sockets
 *    have no inode, so an inode of 0 is refused, whatever the state;
 *  - the exact lookup falls back to a listener on the peer's address and port when the
 *    connected socket is gone: the answer's addresses and ports must be the ones asked for. */
#include "server/peer_uid.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/util.h"

/* The loopback interface is ifindex 1 in every network namespace (the kernel's
 * LOOPBACK_IFINDEX). A socket bound to it (SO_BINDTODEVICE) is found only when the lookup
 * names it; an unbound one is found either way. */
#define LOOPBACK_IFINDEX 1

typedef struct tuple {
  int family;             /* AF_INET or AF_INET6 */
  uint8_t local[16];      /* kilnd's end: network order, IPv4 in the first 4 bytes */
  uint8_t peer[16];
  uint16_t local_port;    /* network order */
  uint16_t peer_port;
} tuple_t;

static bool v4mapped(const struct sockaddr *a) {
  return a->sa_family == AF_INET6 &&
         IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

/* One end into the tuple's form; the family it is read as (AF_INET for a mapped address). */
static int read_end(const struct sockaddr *a, uint8_t addr[16], uint16_t *port) {
  memset(addr, 0, 16);
  if (a->sa_family == AF_INET) {
    const struct sockaddr_in *v4 = (const struct sockaddr_in *)a;
    memcpy(addr, &v4->sin_addr, 4);
    *port = v4->sin_port;
    return AF_INET;
  }
  if (a->sa_family != AF_INET6) return AF_UNSPEC;
  const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)a;
  *port = v6->sin6_port;
  if (v4mapped(a)) {
    memcpy(addr, v6->sin6_addr.s6_addr + 12, 4);
    return AF_INET;
  }
  memcpy(addr, v6->sin6_addr.s6_addr, 16);
  return AF_INET6;
}

static size_t addr_len(int family) { return family == AF_INET ? 4 : 16; }

/* States in which the peer's end of a connection kilnd has not closed can be, with a process
 * holding it (TIME_WAIT, LISTEN and the request states are none of them). */
static bool connected_state(unsigned st) {
  return st == TCP_ESTABLISHED || st == TCP_FIN_WAIT1 || st == TCP_FIN_WAIT2 ||
         st == TCP_CLOSE_WAIT || st == TCP_LAST_ACK || st == TCP_CLOSING;
}

static kiln_status_t unowned(unsigned state) {
  return KILN_STATUS(KILN_E_UNAUTHENTICATED,
                     "its socket is %s, so no user can be told from it",
                     state == TCP_TIME_WAIT ? "in TIME_WAIT" : "held by no process (closed)");
}

static int remaining_ms(uint64_t deadline_ns) {
  uint64_t now = kiln_now_ns();
  return now >= deadline_ns ? 0 : (int)((deadline_ns - now + 999999) / 1000000);
}

/* *out_answered: the kernel gave an answer about the socket (found, or no such socket);
 * false when the query itself failed, so /proc may be read instead. */
static kiln_status_t via_netlink(const tuple_t *t, uint64_t deadline_ns, bool *out_answered,
                                 uint32_t *out_uid) {
  *out_answered = false;
  int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_SOCK_DIAG);
  if (fd < 0)
    return KILN_STATUS(KILN_E_UNAUTHENTICATED, "no sock_diag netlink socket: %s", strerror(errno));
  struct {
    struct nlmsghdr nh;
    struct inet_diag_req_v2 r;
  } req;
  memset(&req, 0, sizeof(req));
  req.nh.nlmsg_len = sizeof(req);
  req.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  req.nh.nlmsg_flags = NLM_F_REQUEST; /* one socket, not a dump */
  req.nh.nlmsg_seq = 1; /* a socket of its own: one request, one answer */
  req.r.sdiag_family = (uint8_t)t->family;
  req.r.sdiag_protocol = IPPROTO_TCP;
  req.r.idiag_states = ~0u; /* the state is checked on the answer */
  req.r.id.idiag_sport = t->peer_port;
  req.r.id.idiag_dport = t->local_port;
  memcpy(req.r.id.idiag_src, t->peer, addr_len(t->family));
  memcpy(req.r.id.idiag_dst, t->local, addr_len(t->family));
  req.r.id.idiag_if = LOOPBACK_IFINDEX;
  req.r.id.idiag_cookie[0] = req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  kiln_status_t st = KILN_OK;
  if (sendto(fd, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) !=
      (ssize_t)sizeof(req)) {
    st = KILN_STATUS(KILN_E_UNAUTHENTICATED, "sock_diag request failed: %s", strerror(errno));
    goto done;
  }
  /* The kernel answers inside sendto; the wait is for a kernel that would not. */
  for (;;) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int wait = remaining_ms(deadline_ns);
    int pr = poll(&pfd, 1, wait);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) {
      st = KILN_STATUS(KILN_E_UNAUTHENTICATED, "sock_diag did not answer in time");
      goto done;
    }
    uint32_t buf[2048]; /* aligned for nlmsghdr */
    struct sockaddr_nl from;
    socklen_t flen = sizeof(from);
    ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) {
      st = KILN_STATUS(KILN_E_UNAUTHENTICATED, "sock_diag answer: %s", strerror(errno));
      goto done;
    }
    if (from.nl_pid != 0) continue; /* only the kernel speaks here, but say so */
    int len = (int)n;
    for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_seq != req.nh.nlmsg_seq) continue;
      if (h->nlmsg_type == NLMSG_ERROR) {
        const struct nlmsgerr *e = NLMSG_DATA(h);
        int err = h->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) ? -e->error : EPROTO;
        *out_answered = err == ENOENT;
        st = err == ENOENT ? KILN_STATUS(KILN_E_UNAUTHENTICATED,
                                         "no socket of this machine is its end (it is gone)")
                           : KILN_STATUS(KILN_E_UNAUTHENTICATED, "sock_diag refused: %s",
                                         strerror(err));
        goto done;
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
      const struct inet_diag_msg *m = NLMSG_DATA(h);
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*m))) continue;
      *out_answered = true;
      size_t al = addr_len(t->family);
      if (m->idiag_family != t->family || m->id.idiag_sport != t->peer_port ||
          m->id.idiag_dport != t->local_port || memcmp(m->id.idiag_src, t->peer, al) != 0 ||
          memcmp(m->id.idiag_dst, t->local, al) != 0)
        st = KILN_STATUS(KILN_E_UNAUTHENTICATED,
                         "no socket of this machine is its end (only another one on its port)");
      else if (!connected_state(m->idiag_state) || m->idiag_inode == 0)
        st = unowned(m->idiag_state);
      else *out_uid = m->idiag_uid;
      goto done;
    }
  }
done:
  close(fd);
  return st;
}

/* An address as /proc/net/tcp{,6} prints it: each 32-bit word as stored, in hex, then the
 * port in host order. */
static void proc_form(int family, const uint8_t *addr, uint16_t port, char out[48]) {
  int n = 0;
  for (size_t i = 0; i < addr_len(family); i += 4) {
    uint32_t w;
    memcpy(&w, addr + i, 4);
    n += snprintf(out + n, (size_t)(48 - n), "%08X", w);
  }
  snprintf(out + n, (size_t)(48 - n), ":%04X", ntohs(port));
}

/* The fallback: a scan of /proc/net/tcp{,6} for the line whose local address is the peer's
 * and whose remote address is kilnd's end, bounded by the deadline. */
static kiln_status_t via_proc(const tuple_t *t, uint64_t deadline_ns, uint32_t *out_uid) {
  const char *path = t->family == AF_INET ? "/proc/net/tcp" : "/proc/net/tcp6";
  FILE *f = fopen(path, "re");
  if (!f) return KILN_STATUS(KILN_E_UNAUTHENTICATED, "cannot read %s: %s", path, strerror(errno));
  char want_local[48], want_remote[48];
  proc_form(t->family, t->peer, t->peer_port, want_local);
  proc_form(t->family, t->local, t->local_port, want_remote);
  kiln_status_t st = KILN_STATUS(KILN_E_UNAUTHENTICATED, "no socket of this machine is its end (it is gone)");
  char line[512];
  unsigned lines = 0;
  bool first = true;
  while (fgets(line, sizeof(line), f)) {
    if (first) { /* the header */
      first = false;
      continue;
    }
    if (++lines % 256 == 0 && remaining_ms(deadline_ns) == 0) {
      kiln_status_free(st);
      st = KILN_STATUS(KILN_E_UNAUTHENTICATED, "%s was not read through in time", path);
      break;
    }
    char loc[64], rem[64];
    unsigned state, uid;
    unsigned long inode;
    /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
    if (sscanf(line, " %*s %63s %63s %x %*s %*s %*s %u %*s %lu", loc, rem, &state, &uid, &inode) != 5)
      continue;
    if (strcasecmp(loc, want_local) != 0 || strcasecmp(rem, want_remote) != 0) continue;
    kiln_status_free(st);
    st = KILN_OK;
    if (state == TCP_TIME_WAIT) { /* a TIME_WAIT entry may stand beside a new connection */
      st = unowned(state);
      continue;
    }
    if (!connected_state(state) || inode == 0) st = unowned(state);
    else *out_uid = uid;
    break;
  }
  fclose(f);
  return st;
}

kiln_status_t kiln_peer_uid(const struct sockaddr *local, const struct sockaddr *peer,
                            kiln_peer_uid_via_t via, int timeout_ms, uint32_t *out_uid) {
  tuple_t t;
  memset(&t, 0, sizeof(t));
  int fl = read_end(local, t.local, &t.local_port);
  int fp = read_end(peer, t.peer, &t.peer_port);
  if (fl == AF_UNSPEC || fl != fp)
    return KILN_STATUS(KILN_E_UNAUTHENTICATED, "its address is not an IPv4 or IPv6 one like ours");
  t.family = fl;
  uint64_t deadline = kiln_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000u;
  uint32_t uid = 0;
  kiln_status_t st = KILN_OK;
  if (via != KILN_PEER_UID_PROC) {
    bool answered;
    st = via_netlink(&t, deadline, &answered, &uid);
    if (st && !answered && via == KILN_PEER_UID_ANY) {
      kiln_status_t again = via_proc(&t, deadline, &uid);
      kiln_status_t both =
          again ? KILN_STATUS(KILN_E_UNAUTHENTICATED, "%s; %s", kiln_status_message(st),
                              kiln_status_message(again))
                : KILN_OK;
      kiln_status_free(st);
      kiln_status_free(again);
      st = both;
    }
  } else {
    st = via_proc(&t, deadline, &uid);
  }
  if (!st) *out_uid = uid;
  return st;
}
