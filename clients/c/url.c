/* Turning a kiln URL into a connected, non-blocking socket. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

const char *kiln_client_default_url(char *out, size_t cap) {
  const char *env = getenv("KILN_URL");
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  if (env && *env) snprintf(out, cap, "%s", env);
  else if (xdg && *xdg) snprintf(out, cap, "unix:%s/kiln.sock", xdg);
  else snprintf(out, cap, "unix:/tmp/kiln-%u/kiln.sock", (unsigned)getuid());
  return out;
}

void kiln_client_search_list(char *out, size_t cap) {
  const char *env = getenv("KILN_SEARCH");
  char user[300];
  if (env && *env) {
    snprintf(out, cap, "%s", env);
    return;
  }
  kiln_client_default_url(user, sizeof(user));
  if (strncmp(user, "unix:", 5) != 0) { /* $KILN_URL: only the user socket itself */
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (xdg && *xdg) snprintf(user, sizeof(user), "unix:%s/kiln.sock", xdg);
    else snprintf(user, sizeof(user), "unix:/tmp/kiln-%u/kiln.sock", (unsigned)getuid());
  }
  snprintf(out, cap, "%s unix:/run/kiln/kiln.sock tcp:127.0.0.1:7070", user);
}

/* Errors that mean "no daemon there" get a hint; others say what the system said. */
static kiln_status_t connect_error(const char *url, int err) {
  if (err == ECONNREFUSED || err == ENOENT)
    return KILN_STATUS(KILN_E_UNAVAILABLE,
                       "nothing listens at %s (%s); is kilnd running? start it with "
                       "`kilnd --listen %s` or set KILN_URL",
                       url, strerror(err), url);
  if (err == EACCES && strncmp(url, "unix:", 5) == 0)
    return KILN_STATUS(KILN_E_UNAVAILABLE,
                       "cannot connect to %s: %s (the socket's group and mode decide who may: "
                       "kilnd --socket-group, --socket-mode; is your user in that group?)",
                       url, strerror(err));
  return KILN_STATUS(KILN_E_UNAVAILABLE, "cannot connect to %s: %s", url, strerror(err));
}

/* The client waits with poll(), so the socket is non-blocking once connected; the connect
 * itself blocks, which is what a caller of kiln_client_create expects. */
static kiln_status_t finish(int fd, bool tcp, int *out_fd) {
  int one = 1;
  /* Requests are small and latency-bound: never wait for Nagle to coalesce them (the client
   * batches by itself with writev). */
  if (tcp) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
    int err = errno;
    close(fd);
    return KILN_STATUS(KILN_E_INTERNAL, "cannot make the socket non-blocking: %s", strerror(err));
  }
  *out_fd = fd;
  return KILN_OK;
}

static kiln_status_t connect_unix(const char *url, const char *path, int *out_fd) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof(sa.sun_path))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "unix socket path of %s is empty or longer than %zu bytes", url,
                       sizeof(sa.sun_path) - 1);
  memcpy(sa.sun_path, path, n + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "socket: %s", strerror(errno));
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
    int err = errno;
    close(fd);
    return connect_error(url, err);
  }
  return finish(fd, false, out_fd);
}

/* "HOST:PORT" or "[V6]:PORT" into host and port strings. */
static kiln_status_t split_host_port(const char *url, const char *hp, char *host, size_t hcap,
                                     char *port, size_t pcap) {
  const char *colon;
  const char *h = hp;
  size_t hn;
  if (hp[0] == '[') {
    const char *close = strchr(hp, ']');
    if (!close || close[1] != ':') goto bad;
    h = hp + 1;
    hn = (size_t)(close - h);
    colon = close + 1;
  } else {
    colon = strrchr(hp, ':');
    if (!colon) goto bad;
    hn = (size_t)(colon - hp);
  }
  size_t pn = strlen(colon + 1);
  if (hn == 0 || hn >= hcap || pn == 0 || pn >= pcap || strspn(colon + 1, "0123456789") != pn)
    goto bad;
  memcpy(host, h, hn);
  host[hn] = 0;
  memcpy(port, colon + 1, pn + 1);
  return KILN_OK;
bad:
  return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                     "malformed URL %s; expected tcp:HOST:PORT, tls:HOST:PORT (HOST may be [IPV6]) "
                     "or unix:PATH", url);
}

static kiln_status_t connect_tcp(const char *url, const char *hp, int *out_fd, char *host,
                                size_t hcap) {
  char port[16];
  KILN_RETURN_IF_ERROR(split_host_port(url, hp, host, hcap, port, sizeof(port)));
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV};
  struct addrinfo *res = NULL;
  int rc = getaddrinfo(host, port, &hints, &res);
  if (rc != 0)
    return KILN_STATUS(KILN_E_UNAVAILABLE, "cannot resolve %s: %s", host, gai_strerror(rc));
  int err = EHOSTUNREACH;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      freeaddrinfo(res);
      return finish(fd, true, out_fd);
    }
    err = errno;
    close(fd);
  }
  freeaddrinfo(res);
  return connect_error(url, err);
}

/* --- Who runs the daemon a search found ------------------------------------------------ */

/* A socket's address as /proc/net/tcp{,6} prints it: each 32-bit word of the address as
 * stored (network order) printed as a number in hex, then the port. An IPv4 address also
 * has its IPv4-mapped IPv6 form (a listener on [::] accepts 127.0.0.1 as ::ffff:127.0.0.1). */
static void proc_net_address(const struct sockaddr_storage *ss, bool mapped, char *out, size_t cap) {
  if (ss->ss_family == AF_INET && !mapped) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
    snprintf(out, cap, "%08X:%04X", (unsigned)a->sin_addr.s_addr, ntohs(a->sin_port));
    return;
  }
  struct in6_addr v6;
  uint16_t port;
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
    memset(&v6, 0, sizeof(v6));
    v6.s6_addr[10] = v6.s6_addr[11] = 0xff;
    memcpy(&v6.s6_addr[12], &a->sin_addr, 4);
    port = a->sin_port;
  } else {
    v6 = ((const struct sockaddr_in6 *)ss)->sin6_addr;
    port = ((const struct sockaddr_in6 *)ss)->sin6_port;
  }
  uint32_t w[4];
  memcpy(w, &v6, sizeof(w));
  snprintf(out, cap, "%08X%08X%08X%08X:%04X", (unsigned)w[0], (unsigned)w[1], (unsigned)w[2],
           (unsigned)w[3], ntohs(port));
}

static bool is_loopback(const struct sockaddr_storage *ss) {
  if (ss->ss_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
  const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

/* The uid of the daemon's end of connected TCP socket fd (the listener's owner: an accepted
 * socket inherits it), from the kernel's table of this network namespace. -1 if not found:
 * *remote says whether the daemon is on another machine (not loopback, not in the table). */
static long tcp_peer_uid(int fd, bool *remote) {
  struct sockaddr_storage mine, theirs;
  socklen_t ml = sizeof(mine), tl = sizeof(theirs);
  *remote = false;
  if (getsockname(fd, (struct sockaddr *)&mine, &ml) || getpeername(fd, (struct sockaddr *)&theirs, &tl))
    return -1;
  *remote = !is_loopback(&theirs);
  for (int pass = 0; pass < 2; pass++) {
    bool six = mine.ss_family == AF_INET6 || pass == 1;
    if (mine.ss_family == AF_INET6 && pass == 1) break;
    char want_local[64], want_remote[64], line[512], local[64], remote[64];
    proc_net_address(&theirs, six, want_local, sizeof(want_local));
    proc_net_address(&mine, six, want_remote, sizeof(want_remote));
    FILE *f = fopen(six ? "/proc/net/tcp6" : "/proc/net/tcp", "r");
    if (!f) continue;
    long uid = -1;
    unsigned u;
    while (uid < 0 && fgets(line, sizeof(line), f))
      if (sscanf(line, " %*d: %63s %63s %*x %*s %*s %*s %u", local, remote, &u) == 3 &&
          !strcasecmp(local, want_local) && !strcasecmp(remote, want_remote))
        uid = (long)u;
    fclose(f);
    if (uid >= 0) {
      *remote = false;
      return uid;
    }
  }
  return -1;
}

/* A daemon found by searching (not named by the user) on this machine must run as someone
 * the user trusts with their work: root or the user. Anyone may
 * listen on a loopback port or on a socket in a directory they own first and wait for another
 * user's kernels, inputs and token (docs/protocol.md §1). Checked before a byte is sent. A
 * host of $KILN_SEARCH on another machine has no local owner: it is the user's choice. */
kiln_status_t kiln_url_check_owner(int fd, const char *url) {
  long uid = -1;
  if (strncmp(url, "unix:", 5) == 0) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) uid = (long)cred.uid;
  } else if (strncmp(url, "tcp:", 4) == 0) {
    bool remote;
    uid = tcp_peer_uid(fd, &remote);
    if (remote) return KILN_OK;
  } else {
    return KILN_OK; /* tls: the certificate says who it is */
  }
  /* root (the system daemon runs as root) and the caller only: no name is trusted, since kiln
   * makes no user of its own and an account named kiln could be anyone's */
  if (uid == 0 || uid == (long)geteuid()) return KILN_OK;
  char who[96];
  struct passwd *pw = uid >= 0 ? getpwuid((uid_t)uid) : NULL;
  if (uid < 0) snprintf(who, sizeof(who), "cannot tell which user runs it");
  else snprintf(who, sizeof(who), "it runs as uid %ld%s%s%s", uid, pw ? " (" : "", pw ? pw->pw_name : "", pw ? ")" : "");
  return KILN_STATUS(KILN_E_UNAVAILABLE,
                     "%s: not used: %s, not as you (uid %u), or root, and another user's "
                     "daemon would receive your kernels, data and token; set KILN_URL=%s to "
                     "use it anyway",
                     url, who, (unsigned)geteuid(), url);
}

kiln_status_t kiln_url_connect(kiln_client_t *c, const char *url,
                               const kiln_client_options_t *opts) {
  char host[256];
  if (strncmp(url, "unix:", 5) == 0) return connect_unix(url, url + 5, &c->fd);
  if (strncmp(url, "tcp:", 4) == 0) return connect_tcp(url, url + 4, &c->fd, host, sizeof(host));
  if (strncmp(url, "tls:", 4) == 0) {
    KILN_RETURN_IF_ERROR(connect_tcp(url, url + 4, &c->fd, host, sizeof(host)));
    kiln_status_t s = kiln_tls_connect(c, url, host, opts);
    if (s) {
      close(c->fd);
      c->fd = -1;
    }
    return s;
  }
  return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                     "unsupported URL '%s'; use tcp:HOST:PORT, tls:HOST:PORT or unix:PATH", url);
}
