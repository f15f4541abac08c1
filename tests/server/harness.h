/* Test harness for the real kilnd: starts it with --ready-fd on a pipe (no sleeps), reads
 * the bound addresses, connects raw sockets, and speaks MessagePack-RPC with protocol/. */
#ifndef KILN_TESTS_SERVER_HARNESS_H
#define KILN_TESTS_SERVER_HARNESS_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "protocol/frame.h"
#include "protocol/rpc.h"

typedef struct daemon {
  pid_t pid;
  char tcp[128];   /* "127.0.0.1:PORT" */
  int port;
  char unix_path[256];
  char dir[64];    /* private temp dir (cache, socket) */
  char metrics[128]; /* "http://127.0.0.1:PORT/metrics" when started with --metrics, else "" */
  int tls_port;      /* the first tls: listener's port when started with one, else 0 */
  int tcp6_port;     /* the first tcp:[::1]:PORT listener's port when started with one, else 0 */
} daemon_t;

/* Starts kilnd (path from $KILND) with the extra arguments (NULL-terminated). */
void daemon_start(daemon_t *d, const char *const *extra);
/* Starts kilnd as daemon_start does and expects it to refuse: returns its exit status (0 when
 * it started after all, then stopped) with the start of its stderr in log. */
int daemon_start_fails(const char *const *extra, char *log, size_t cap);
/* Sends SIGTERM and returns the exit status as from waitpid. */
int daemon_stop(daemon_t *d);

typedef struct client {
  int fd;
  kiln_reader_t reader;
  kiln_rpc_msg_t msg; /* last reply (valid until the next recv) */
  bool have_msg;
  uint32_t progress_seen; /* compile_batch `progress` notifications client_recv passed over */
} client_t;

void client_connect_tcp(client_t *c, const daemon_t *d);
/* Connects from a given local address (any of 127.0.0.0/8 works on loopback): the daemon
 * sees another peer. */
void client_connect_tcp_from(client_t *c, const daemon_t *d, const char *source_ip);
/* Connects to 127.0.0.1:port (AF_INET) or [::1]:port (AF_INET6). */
void client_connect_loopback(client_t *c, int family, int port);
void client_connect_unix(client_t *c, const daemon_t *d);
void client_close(client_t *c);
void client_send_raw(client_t *c, const void *bytes, size_t len);
/* Sends [0, msgid, method, [params]] with params packed by the caller into `params`
 * (a whole map) or no params when NULL. */
void client_send(client_t *c, uint32_t msgid, const char *method, const kiln_buf_t *params);
/* Receives the next message; returns false on EOF/error (within timeout_ms). */
bool client_recv(client_t *c, int timeout_ms);
/* The last reply's error: its code (0 when the reply is a result) and its message ("" when
 * none), written into buf. */
/* Sends `compile` of IR text (as bin) for target; the reply is read with client_recv. */
void client_send_compile(client_t *c, uint32_t msgid, const char *ir, const char *target);
/* Sends `upload` of a 1-D float32 tensor of n values (to `device`, or the default when NULL);
 * the reply is read with client_recv. */
void client_send_upload_f32(client_t *c, uint32_t msgid, const char *device, const float *v, uint32_t n);
/* Sends a request whose params are {"id": id} (download, free, read ...). */
void client_send_id(client_t *c, uint32_t msgid, const char *method, uint64_t id);
/* Sends `hello` with a token. */
void client_send_hello(client_t *c, uint32_t msgid, const char *token);
uint64_t code_of(const client_t *c);
const char *text_of(const client_t *c, char *buf, size_t cap);
/* The object at a dotted path of maps ("compile.pids"); NULL when absent. */
const msgpack_object *obj_path(const msgpack_object *map, const char *path);
/* The value of one series in a Prometheus text page, written exactly as kilnd writes it
 * (name{labels}); -1 when absent. */
double metrics_value(const char *page, const char *series);
/* Reads until `n` `progress` notifications have been seen on c in all (true), passing over
 * none of another kind: false when a reply comes first (held in c->msg) or none within
 * timeout_ms. */
bool client_wait_progress(client_t *c, uint32_t n, int timeout_ms);
/* True once the peer has closed (reads EOF within timeout_ms). */
bool client_wait_closed(client_t *c, int timeout_ms);

/* Builder for a params map: pb_begin(&b, n_fields) then kiln_pack_kv_* on pb.pk. */
typedef struct pbuild {
  kiln_buf_t buf;
  kiln_packer_t p;
} pbuild_t;
void pb_begin(pbuild_t *b, uint32_t nfields);
void pb_end(pbuild_t *b);
/* Sends a request (params ended here) and waits up to 120 s for its reply, which must be the
 * next message on c. */
void client_call(client_t *c, const char *method, pbuild_t *params);

/* Packs the four fields module, kernel, grid [grid] and block [block] of a launch's params. */
void pack_launch_geometry(msgpack_packer *pk, const char *module, const char *kernel, uint32_t grid,
                          uint32_t block);
/* Compiles `ir` for the cpu (asserting success) and writes the module id (64 hex + NUL). */
void compile_module(client_t *c, uint32_t msgid, const char *ir, char out[65]);

/* Writes (replaces) a whole file, e.g. a tokens file before a start or a SIGHUP. */
void write_text_file(const char *path, const char *text);

int count_fds(pid_t pid);
long rss_kib(pid_t pid);
/* Pids of the direct children of pid. */
int children_of(pid_t pid, pid_t *out, int cap);
/* The first direct child of pid whose command name (/proc/PID/comm, 15 characters at most)
 * starts with prefix; 0 if none. */
pid_t daemon_child_named(pid_t pid, const char *prefix);

#endif
