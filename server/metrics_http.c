/* GET /metrics on --metrics tcp:HOST:PORT: libmicrohttpd without threads of its own, run from
 * the loop.
 *
 * Why libmicrohttpd (docs/operations.md, "Metrics"): Debian ships it maintained
 * (libmicrohttpd-dev); it parses HTTP/1.0 and 1.1, bounds a request head by a per-connection
 * memory pool (431 beyond it), times idle connections out and caps their number. In its
 * external-epoll mode it hands us one epoll descriptor to poll, so the page is rendered on the
 * loop thread that owns every number on it. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "server/metrics.h"

/* A request head (request line and headers) must fit the connection's memory pool;
 * libmicrohttpd answers 431 beyond it. */
#define HTTP_POOL_BYTES (8u << 10)
#define HTTP_MAX_CONNECTIONS 64
#define HTTP_IDLE_TIMEOUT_S 10

typedef struct endpoint {
  struct MHD_Daemon *mhd;
  uv_poll_t poll; /* on libmicrohttpd's epoll descriptor */
  uv_timer_t timer;
  bool running;
} endpoint_t;

static endpoint_t M;

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned code, char *body, size_t len,
                              enum MHD_ResponseMemoryMode mode, const char *type) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
  if (!r) {
    if (mode == MHD_RESPMEM_MUST_FREE) free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (code == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result rc = MHD_queue_response(conn, code, r);
  MHD_destroy_response(r);
  return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls) {
  kiln_server_t *s = cls;
  static const char text[] = "text/plain; charset=utf-8";
  bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0, head_m = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  if (!get && !head_m) {
    /* A body that came with another method is not read: the answer closes the connection. */
    static char msg[] = "only GET and HEAD are served here\n";
    kiln_metrics_http_answered(405);
    return answer(conn, MHD_HTTP_METHOD_NOT_ALLOWED, msg, sizeof(msg) - 1, MHD_RESPMEM_PERSISTENT, text);
  }
  if (strcmp(url, "/metrics") != 0) {
    static char msg[] = "not found: the metrics are at /metrics\n";
    kiln_metrics_http_answered(404);
    return answer(conn, MHD_HTTP_NOT_FOUND, msg, sizeof(msg) - 1, MHD_RESPMEM_PERSISTENT, text);
  }
  kiln_metrics_http_answered(200);
  size_t len = 0;
  char *body = kiln_metrics_render(s, &len);
  if (!body) return MHD_NO; /* out of memory: the connection is closed */
  return answer(conn, MHD_HTTP_OK, body, len, MHD_RESPMEM_MUST_FREE,
                "text/plain; version=0.0.4; charset=utf-8");
}

static void run_mhd(void);

static void on_timer(uv_timer_t *t) { run_mhd(); }

static void on_poll(uv_poll_t *p, int status, int events) { run_mhd(); }

/* Lets libmicrohttpd do everything that is ready, then sleeps until its next deadline
 * (idle timeouts), until its epoll descriptor becomes readable, or HTTP_RERUN_MS at most:
 * at its connection limit libmicrohttpd takes the listening socket out of its epoll set and
 * puts it back only from a later run, which no descriptor event would cause once the
 * scrapers that filled it have gone. */
#define HTTP_RERUN_MS 500
static void run_mhd(void) {
  if (!M.running) return;
  MHD_run(M.mhd);
  MHD_UNSIGNED_LONG_LONG ms;
  if (MHD_get_timeout(M.mhd, &ms) != MHD_YES || ms > HTTP_RERUN_MS) ms = HTTP_RERUN_MS;
  uv_timer_start(&M.timer, on_timer, ms, 0);
}

static kiln_status_t bind_socket(const char *spec, int *out_fd, char *out_url, size_t cap) {
  struct sockaddr_storage ss;
  bool loopback;
  KILN_RETURN_IF_ERROR(kiln_tcp_address(spec, &ss, &loopback));
  if (!loopback)
    KILN_LOG_WARN("metrics_public",
                  "addr=%s note=\"the metrics endpoint has no authentication; it shows tenant "
                  "names and activity\"",
                  spec);
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return KILN_STATUS(KILN_E_UNAVAILABLE, "metrics socket: %s", strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t alen = ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  if (bind(fd, (struct sockaddr *)&ss, alen) != 0 || listen(fd, 64) != 0) {
    int e = errno;
    close(fd);
    return KILN_STATUS(KILN_E_UNAVAILABLE, "cannot listen on --metrics %s: %s", spec, strerror(e));
  }
  struct sockaddr_storage b;
  socklen_t blen = sizeof(b);
  getsockname(fd, (struct sockaddr *)&b, &blen);
  char ip[64];
  if (b.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&b)->sin6_addr, ip, sizeof(ip));
    snprintf(out_url, cap, "http://[%s]:%d/metrics", ip, ntohs(((struct sockaddr_in6 *)&b)->sin6_port));
  } else {
    inet_ntop(AF_INET, &((struct sockaddr_in *)&b)->sin_addr, ip, sizeof(ip));
    snprintf(out_url, cap, "http://%s:%d/metrics", ip, ntohs(((struct sockaddr_in *)&b)->sin_port));
  }
  *out_fd = fd;
  return KILN_OK;
}

kiln_status_t kiln_metrics_start(kiln_server_t *s, const char *spec, char *out_url, size_t cap) {
  if (strncmp(spec, "tcp:", 4) != 0)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "--metrics '%s' must be tcp:HOST:PORT", spec);
  int fd;
  KILN_RETURN_IF_ERROR(bind_socket(spec + 4, &fd, out_url, cap));
  M.mhd = MHD_start_daemon(MHD_USE_EPOLL, 0, NULL, NULL, on_request, s,
                           MHD_OPTION_LISTEN_SOCKET, fd,
                           MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNECTIONS,
                           MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
                           MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_POOL_BYTES,
                           MHD_OPTION_END);
  if (!M.mhd) {
    close(fd);
    return KILN_STATUS(KILN_E_UNAVAILABLE, "libmicrohttpd did not start on --metrics %s", spec);
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(M.mhd, MHD_DAEMON_INFO_EPOLL_FD);
  if (!info) {
    MHD_stop_daemon(M.mhd);
    M.mhd = NULL;
    return KILN_STATUS(KILN_E_UNAVAILABLE, "libmicrohttpd gave no epoll descriptor");
  }
  uv_poll_init(s->loop, &M.poll, info->epoll_fd);
  uv_timer_init(s->loop, &M.timer);
  M.running = true;
  uv_poll_start(&M.poll, UV_READABLE, on_poll);
  run_mhd();
  KILN_LOG_INFO("metrics", "url=%s", out_url);
  return KILN_OK;
}

static void on_closed(uv_handle_t *h) {}

void kiln_metrics_stop(kiln_server_t *s) {
  if (!M.running) return;
  M.running = false;
  /* The poll handle watches libmicrohttpd's epoll descriptor: close it before the daemon
   * closes the descriptor. */
  if (!uv_is_closing((uv_handle_t *)&M.poll)) uv_close((uv_handle_t *)&M.poll, on_closed);
  if (!uv_is_closing((uv_handle_t *)&M.timer)) uv_close((uv_handle_t *)&M.timer, on_closed);
  MHD_stop_daemon(M.mhd);
  M.mhd = NULL;
}
