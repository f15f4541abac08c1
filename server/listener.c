/* Listeners: tcp:HOST:PORT, tls:HOST:PORT and unix:PATH. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <errno.h>
#include <grp.h>

#include "base/log.h"
#include "server/server.h"
#include "server/tls.h"

static void on_connection(uv_stream_t *server, int status) {
  kiln_listener_t *l = server->data;
  if (status < 0) {
    KILN_LOG_WARN("accept_error", "listener=%s error=%s", l->address, uv_strerror(status));
    return;
  }
  kiln_conn_accept(l);
}

kiln_status_t kiln_tcp_address(const char *spec, struct sockaddr_storage *out, bool *out_loopback) {
  /* HOST:PORT, HOST may be [v6]. */
  char host[256];
  const char *colon = strrchr(spec, ':');
  if (!colon || colon == spec)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "address 'tcp:%s' needs HOST:PORT", spec);
  size_t hn = (size_t)(colon - spec);
  if (hn >= sizeof(host)) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "host name too long");
  memcpy(host, spec, hn);
  host[hn] = 0;
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || port < 0 || port > 65535 || colon[1] == 0)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "bad port in 'tcp:%s'", spec);
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof(ss));
  int rc;
  if (host[0] == '[' && hn > 2 && host[hn - 1] == ']') {
    host[hn - 1] = 0;
    rc = uv_ip6_addr(host + 1, (int)port, (struct sockaddr_in6 *)&ss);
  } else {
    rc = uv_ip4_addr(strcmp(host, "localhost") == 0 ? "127.0.0.1" : host, (int)port,
                     (struct sockaddr_in *)&ss);
  }
  if (rc) return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "bad address 'tcp:%s' (use an IP address)", spec);
  *out_loopback = ss.ss_family == AF_INET
                      ? (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127
                      : IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&ss)->sin6_addr);
  *out = ss;
  return KILN_OK;
}

/* Beyond loopback, anyone who can reach the port could run code here: kilnd needs to know
 * who connects (tokens, or for TLS client certificates), and tokens must not cross the
 * network in clear unless the operator says the network is trusted. */
static kiln_status_t check_exposure(kiln_server_t *s, const char *spec, bool tls) {
  const char *scheme = tls ? "tls" : "tcp";
  bool client_certs = tls && s->cfg.tls_client_ca[0];
  if (!s->tenants.auth_required && !client_certs)
    return KILN_STATUS(KILN_E_PERMISSION,
                       "refusing to listen on %s:%s without a tokens file%s: anyone who can reach "
                       "it could run code here. Pass --tokens FILE (docs/operations.md) or listen "
                       "on 127.0.0.1",
                       scheme, spec, tls ? " or --tls-client-ca" : "");
  if (!tls && !s->cfg.insecure_tcp)
    return KILN_STATUS(KILN_E_PERMISSION,
                       "refusing to listen on tcp:%s beyond loopback: tokens and tensors would "
                       "cross the network in clear. Listen on tls:%s with --tls-cert and "
                       "--tls-key, or pass --insecure-tcp on a network you trust",
                       spec, spec);
  return KILN_OK;
}

/* A tls: listener's connections speak through conn_tls.c (server.h says why a table). */
static const kiln_conn_tls_ops_t tls_ops = {
    .start = kiln_conn_tls_start,
    .free = kiln_conn_tls_free,
    .alloc = kiln_conn_tls_alloc,
    .received = kiln_conn_tls_received,
    .send = kiln_conn_tls_send,
    .unsent = kiln_conn_tls_unsent,
    .partial = kiln_conn_tls_partial,
    .handshaking = kiln_conn_tls_handshaking,
    .closing = kiln_conn_tls_closing,
};

static kiln_status_t start_tcp(kiln_server_t *s, kiln_listener_t *l, const char *spec, bool tls) {
  struct sockaddr_storage ss;
  bool loopback;
  KILN_RETURN_IF_ERROR(kiln_tcp_address(spec, &ss, &loopback));
  if (!loopback) KILN_RETURN_IF_ERROR(check_exposure(s, spec, tls));
  if (tls && !s->tls_ctx) {
    s->tls_ops = &tls_ops;
    if (!s->cfg.tls_cert[0] || !s->cfg.tls_key[0])
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "listening on tls:%s needs --tls-cert FILE and --tls-key FILE", spec);
    KILN_RETURN_IF_ERROR(kiln_tls_ctx_create(s->cfg.tls_cert, s->cfg.tls_key,
                                             s->cfg.tls_client_ca[0] ? s->cfg.tls_client_ca : NULL,
                                             &s->tls_ctx));
  }
  uv_tcp_init(s->loop, &l->h.tcp);
  l->is_tcp = true;
  l->tls = tls;
  l->owner_only = loopback && !s->tenants.auth_required && !(tls && s->cfg.tls_client_ca[0]);
  l->h.handle.data = l;
  int rc = uv_tcp_bind(&l->h.tcp, (struct sockaddr *)&ss, 0);
  if (!rc) rc = uv_listen(&l->h.stream, 511, on_connection);
  if (rc)
    return KILN_STATUS(KILN_E_UNAVAILABLE, "cannot listen on %s:%s: %s", tls ? "tls" : "tcp", spec,
                       uv_strerror(rc));
  struct sockaddr_storage bound;
  int blen = sizeof(bound);
  uv_tcp_getsockname(&l->h.tcp, (struct sockaddr *)&bound, &blen);
  char ip[64];
  if (bound.ss_family == AF_INET6) {
    uv_ip6_name((struct sockaddr_in6 *)&bound, ip, sizeof(ip));
    snprintf(l->address, sizeof(l->address), "%s:[%s]:%d", tls ? "tls" : "tcp", ip,
             ntohs(((struct sockaddr_in6 *)&bound)->sin6_port));
  } else {
    uv_ip4_name((struct sockaddr_in *)&bound, ip, sizeof(ip));
    snprintf(l->address, sizeof(l->address), "%s:%s:%d", tls ? "tls" : "tcp", ip,
             ntohs(((struct sockaddr_in *)&bound)->sin_port));
  }
  /* Loopback is not private on a shared machine: without tokens, every connection's peer
   * socket must belong to kilnd's user or root (peers.c). Said where the operator looks, with
   * what a team needs instead. */
  if (l->owner_only)
    KILN_LOG_INFO("anonymous_tcp",
                  "listener=%s uid=%u message=\"no --tokens: only kilnd's user (uid %u) and root "
                  "may connect, checked by the owner of each peer's socket; for other users give "
                  "--tokens, or --socket-group on a unix socket\"",
                  l->address, (unsigned)geteuid(), (unsigned)geteuid());
  return KILN_OK;
}

/* Connects to the socket at path: 0 when something listens there, ECONNREFUSED when nothing
 * does (a leftover), another errno when unsure (EAGAIN: a listener with a full backlog).
 * Non-blocking, so a busy listener cannot stall the start. */
static int unix_socket_probe(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  int err = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ? errno : 0;
  close(fd);
  return err;
}

bool kiln_socket_option(kiln_config_t *cfg, bool mode, const char *v) {
  char *end;
  errno = 0;
  unsigned long n = strtoul(v, &end, mode ? 8 : 10);
  bool number = v[0] >= '0' && v[0] <= '9' && !*end && !errno;
  if (mode) {
    if (!number || n > 0777) return false;
    cfg->socket_mode = (uint32_t)n;
    return true;
  }
  if (number) {
    if (n >= (uint32_t)-1) return false;
    cfg->socket_gid = (uint32_t)n;
    return true;
  }
  struct group *g = getgrnam(v);
  if (!g) return false;
  cfg->socket_gid = (uint32_t)g->gr_gid;
  return true;
}

/* The default listener is a unix socket in a directory only kilnd's user may write: the
 * login's $XDG_RUNTIME_DIR, else /tmp/kiln-$UID, made here with mode 0700. One that another
 * user made or may write is refused: they could put their own socket where clients look. */
kiln_status_t kiln_default_unix_path(char *out, size_t cap) {
  const char *rt = getenv("XDG_RUNTIME_DIR");
  bool runtime = rt && rt[0];
  char dir[256];
  struct stat st;
  int rc;
  if (runtime) {
    snprintf(dir, sizeof(dir), "%s", rt);
    rc = stat(dir, &st);
  } else {
    snprintf(dir, sizeof(dir), "/tmp/kiln-%u", (unsigned)geteuid());
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
      return KILN_STATUS(KILN_E_UNAVAILABLE, "cannot create %s for the default unix socket: %s",
                         dir, strerror(errno));
    rc = lstat(dir, &st); /* a symbolic link planted there is not followed */
  }
  if (rc != 0)
    return KILN_STATUS(KILN_E_UNAVAILABLE, "the default unix socket's directory %s: %s", dir,
                       strerror(errno));
  char why[96] = "";
  if (!S_ISDIR(st.st_mode)) snprintf(why, sizeof(why), "is not a directory");
  else if (st.st_uid != geteuid())
    snprintf(why, sizeof(why), "belongs to uid %u, not to kilnd's user (uid %u)",
             (unsigned)st.st_uid, (unsigned)geteuid());
  else if (st.st_mode & (runtime ? 022 : 077))
    snprintf(why, sizeof(why), "has mode %04o: others may %s it", (unsigned)(st.st_mode & 07777),
             runtime ? "write to" : "enter or write to");
  if (why[0])
    return KILN_STATUS(KILN_E_PERMISSION,
                       "refusing the default unix socket in %s%s: it %s, so another user could "
                       "put a socket of theirs where clients look. Fix the directory or pass "
                       "--listen unix:PATH (docs/operations.md \"Listening\")",
                       dir, runtime ? " ($XDG_RUNTIME_DIR)" : "", why);
  if (snprintf(out, cap, "%s/kiln.sock", dir) >= (int)cap)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "the default unix socket path in %s is too long", dir);
  return KILN_OK;
}

static kiln_status_t start_unix(kiln_server_t *s, kiln_listener_t *l, const char *path) {
  if (!path[0] || strlen(path) >= sizeof(l->unix_path) || strlen(path) >= 108)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "unix socket path '%s' is empty or too long", path);
  /* A socket file left by a daemon that died is removed; anything else is kept, a socket
   * where a live daemon answers above all (unlinking it would make that daemon unreachable,
   * even if this one then failed to start). */
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return KILN_STATUS(KILN_E_UNAVAILABLE, "'%s' exists and is not a socket", path);
    int err = unix_socket_probe(path);
    if (err != ECONNREFUSED && err != ENOENT)
      return KILN_STATUS(KILN_E_UNAVAILABLE,
                         "unix:%s is in use%s%s: stop the process listening there (another kilnd?) or "
                         "choose another path",
                         path, err ? ": " : " (a process accepts connections on it)", err ? strerror(err) : "");
    unlink(path);
  }
  uv_pipe_init(s->loop, &l->h.pipe, 0);
  l->h.handle.data = l;
  int rc = uv_pipe_bind(&l->h.pipe, path);
  if (rc) return KILN_STATUS(KILN_E_UNAVAILABLE, "cannot listen on unix:%s: %s", path, uv_strerror(rc));
  snprintf(l->unix_path, sizeof(l->unix_path), "%s", path); /* from here on, removed at exit */
  /* Who may connect (connecting needs write permission) is set before anyone can: the file
   * exists from bind, but connections are refused until listen. */
  const kiln_config_t *cfg = &s->cfg;
  if (cfg->socket_gid != (uint32_t)-1 && chown(path, (uid_t)-1, (gid_t)cfg->socket_gid) != 0)
    return KILN_STATUS(KILN_E_UNAVAILABLE,
                       "cannot give unix:%s to group %u (--socket-group): %s%s", path,
                       cfg->socket_gid, strerror(errno),
                       errno == EPERM ? " (kilnd's user must be a member of the group)" : "");
  if (cfg->socket_mode != (uint32_t)-1 && chmod(path, (mode_t)cfg->socket_mode) != 0)
    return KILN_STATUS(KILN_E_UNAVAILABLE, "cannot set the mode of unix:%s: %s", path, strerror(errno));
  rc = uv_listen(&l->h.stream, 511, on_connection);
  if (rc) return KILN_STATUS(KILN_E_UNAVAILABLE, "cannot listen on unix:%s: %s", path, uv_strerror(rc));
  snprintf(l->address, sizeof(l->address), "unix:%s", path);
  return KILN_OK;
}

kiln_status_t kiln_listeners_start(kiln_server_t *s) {
  for (int i = 0; i < s->cfg.num_listen; i++) {
    const char *spec = s->cfg.listen[i];
    kiln_listener_t *l = &s->listeners[s->num_listeners];
    memset(l, 0, sizeof(*l));
    l->server = s;
    kiln_status_t st;
    if (strncmp(spec, "tcp:", 4) == 0) st = start_tcp(s, l, spec + 4, false);
    else if (strncmp(spec, "tls:", 4) == 0) st = start_tcp(s, l, spec + 4, true);
    else if (strncmp(spec, "unix:", 5) == 0) st = start_unix(s, l, spec + 5);
    else
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "listen address '%s' must start with tcp:, tls: or unix:", spec);
    if (st) return st;
    s->num_listeners++;
    KILN_LOG_INFO("listen", "addr=%s", l->address);
  }
  return KILN_OK;
}

void kiln_listeners_close(kiln_server_t *s) {
  for (int i = 0; i < s->num_listeners; i++) {
    kiln_listener_t *l = &s->listeners[i];
    if (!uv_is_closing(&l->h.handle)) uv_close(&l->h.handle, NULL);
    if (l->unix_path[0]) unlink(l->unix_path);
  }
}
