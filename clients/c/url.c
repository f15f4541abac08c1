/* Turning a kiln URL into a connected, non-blocking socket. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
  else snprintf(out, cap, "unix:/tmp/kiln-%u.sock", (unsigned)getuid());
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
    else snprintf(user, sizeof(user), "unix:/tmp/kiln-%u.sock", (unsigned)getuid());
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
