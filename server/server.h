/* kilnd internals shared by the files of server/. Nothing outside server/ includes this.
 *
 * One libuv loop thread owns everything here: connections, requests, tenants, the tensor
 * table, workers. kilnd never runs LLVM or user code; it moves bytes between clients and
 * worker processes (DESIGN §1). */
#ifndef KILN_SERVER_SERVER_H
#define KILN_SERVER_SERVER_H

#include <msgpack.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "base/map.h"
#include "base/status.h"
#include "protocol/frame.h"
#include "protocol/rpc.h"
#include "protocol/shm_pool.h"
#include "protocol/tensor.h"
#include "server/tenants.h"

/* libuv's negative ints never leave server/: converted here, once, with the call site. */
#define KILN_UV_STATUS(rc, what) \
  KILN_STATUS(KILN_E_UNAVAILABLE, "%s: %s", (what), uv_strerror(rc))

typedef struct kiln_server kiln_server_t;

/* --- lifecycle events (hooks.c) ----------------------------------------------------------
 * What transport and worker code tells the rest of kilnd without naming it: conn.c,
 * dispatch.c and worker.c fire events; main.c, the one place that knows every part, says who
 * hears them (the drain state machine, the sweeps, what a closed connection ends). Handlers
 * run in the order they were added. Loop thread. */
typedef enum kiln_event {
  KILN_EVENT_SWEEP,       /* once a second (arg NULL) */
  KILN_EVENT_CONN_CLOSED, /* a connection's handle closed (arg: its kiln_conn_t) */
  KILN_EVENT_SETTLED,     /* a request, a connection or a worker ended: a drain may finish */
  KILN_EVENT_RECLAIM,     /* bytes are to be charged (memory.c): dead workers' go back first */
  KILN_EVENTS_
} kiln_event_t;
#define KILN_HOOKS_MAX 8
typedef void (*kiln_hook_fn)(kiln_server_t *s, void *arg);
void kiln_hook_add(kiln_server_t *s, kiln_event_t ev, kiln_hook_fn fn); /* aborts past KILN_HOOKS_MAX */
void kiln_hooks_fire(kiln_server_t *s, kiln_event_t ev, void *arg);

typedef struct kiln_conn kiln_conn_t;
typedef struct kiln_req kiln_req_t;
typedef struct kiln_worker kiln_worker_t;

/* --- configuration (main.c) --------------------------------------------------------------- */

#define KILN_MAX_LISTENERS 16

typedef struct kiln_config {
  char *listen[KILN_MAX_LISTENERS];
  int num_listen;
  int ready_fd;
  char cache_dir[512];
  char devices[256]; /* "" = all found; else comma-separated ids or kinds */
  char worker_dir[512];
  char tokens[512]; /* --tokens FILE; "" = no authentication */
  char *pins[KILN_MAX_LISTENERS]; /* --pin DEVICE=CPULIST */
  int num_pins;
  uint32_t max_connections;
  double idle_timeout_s;
  double partial_timeout_s;
  double grace_s;
  kiln_limits_t limits;
  uint32_t max_inflight;     /* per connection, before reading pauses */
  uint64_t max_unsent_bytes; /* per connection, before reading pauses */
  uint32_t compile_workers;
  double compile_timeout_s;
  double launch_timeout_s; /* default deadline of one launch; 0 = none */
  uint64_t compile_max_memory; /* RLIMIT_AS of each compile worker */
  /* Connections before hello on a tokens server (peers.c, docs/operations.md). */
  double hello_timeout_s;
  uint32_t max_anonymous, max_anonymous_per_peer;
  /* TLS listeners (tls.c, conn_tls.c) and plain TCP beyond loopback (listener.c). */
  char tls_cert[512], tls_key[512], tls_client_ca[512];
  double handshake_timeout_s;
  bool insecure_tcp;
  uint64_t cache_max_bytes;    /* disk store bound */
  uint64_t cpu_memory;         /* --cpu-memory: capacity of cpu:0; 0 = the default */
  uint32_t worker_uid_first, worker_uid_last; /* --worker-uids; 0 = not given */
  bool allow_prebuilt_cpu;     /* --allow-prebuilt-cpu */
  uint32_t socket_mode;        /* --socket-mode of unix: listeners; -1: 0600 (0660 with a group) */
  uint32_t socket_gid;         /* --socket-group; (uint32_t)-1: kilnd's own */
  /* The fleet (server/fleet/): the shared artifact tier on Redis ("" = none). */
  char cache_remote[512], cache_remote_auth[512], fleet_secret_file[512];
  uint64_t cache_remote_max_bytes; /* 0: 64 MiB */
  double cache_remote_timeout_s, cache_remote_wait_s; /* 0: 2 s and 60 s */
  /* The fleet registry (server/fleet_host.c): --fleet URL, --advertise URL, --fleet-ttl S. */
  char fleet[512], fleet_auth[512], advertise[256];
  char fleet_key[512]; /* --fleet-key FILE: records signed (server/fleet/record.h); "" = unsigned */
  double fleet_ttl_s; /* default 15 */
} kiln_config_t;

/* A listener's or a connection's libuv handle: TCP or a unix socket, seen as the stream and
 * handle that libuv's calls take (handle.data points back at the owner). */
typedef union kiln_uv_stream {
  uv_tcp_t tcp;
  uv_pipe_t pipe;
  uv_stream_t stream;
  uv_handle_t handle;
} kiln_uv_stream_t;

/* --- listeners (listener.c) --------------------------------------------------------------- */

typedef struct kiln_listener {
  kiln_uv_stream_t h;
  kiln_server_t *server;
  bool is_tcp;
  bool tls; /* tls:HOST:PORT: TCP with TLS on every connection */
  /* On loopback with neither tokens nor client certificates: a connection is admitted only
   * from a socket of kilnd's uid or root's (kiln_peer_check_owner). */
  bool owner_only;
  char address[300]; /* as bound: "tcp:127.0.0.1:40123", "tls:[::1]:7443", "unix:/path" */
  char unix_path[256];
} kiln_listener_t;

KILN_MUST_USE kiln_status_t kiln_listeners_start(kiln_server_t *s);
/* Parses "HOST:PORT" (HOST an IPv4 address, [v6] or localhost) and says whether it is a
 * loopback address (--listen, --metrics). */
struct sockaddr_storage;
KILN_MUST_USE kiln_status_t kiln_tcp_address(const char *spec, struct sockaddr_storage *out, bool *out_loopback);
void kiln_listeners_close(kiln_server_t *s);
/* --socket-mode (octal, at most 0777) or --socket-group (a name or number): false when the
 * value is not one. */
bool kiln_socket_option(kiln_config_t *cfg, bool mode, const char *value);

/* --- connections (conn.c) ----------------------------------------------------------------- */

struct kiln_conn {
  kiln_uv_stream_t h;
  kiln_server_t *server;
  kiln_conn_t *prev, *next; /* server's list */
  kiln_reader_t reader;
  uint32_t refs;     /* 1 while open + one per request in flight */
  uint32_t inflight; /* requests not yet answered */
  bool reading;
  bool closing;      /* uv_close called or close pending after the last write */
  bool close_after_write;
  bool condemned;    /* closing or closing after the last write: not counted against the cap */
  bool in_dispatch;  /* inside read_cb: small replies are coalesced and flushed after it */
  kiln_buf_t out;    /* small replies not yet handed to the socket */
  uint64_t accepted_ns;
  uint64_t last_activity_ns; /* bytes last arrived (or the connection was accepted) */
  uint64_t reading_since_ns; /* kilnd last started reading (after back-pressure) */
  uint64_t id;
  kiln_tenant_t *tenant; /* NULL until `hello` authenticates (when a tokens file is set) */
  uint8_t token_hash[KILN_HASH_BYTES]; /* of the token `hello` gave: SIGHUP checks it is still valid */
  char peer[64];
  uint64_t peer_key;          /* the peer's address (peers.c) */
  bool anonymous;             /* on a tokens server, until hello authenticates */
  kiln_conn_t *anon_prev, *anon_next; /* server's anonymous list, oldest first */
  kiln_req_t *reqs;           /* requests in flight (dispatch.c) */
  char client[129];           /* hello's `client` name ("" when none) */
  bool session_tensors;       /* hello {"tensors": "session"}: its tensors end with it */
  struct kiln_conn_tls *tls;  /* NULL on plain connections (conn_tls.c) */
};

/* What conn.c hands up without naming who takes it: main.c sets the server's handler
 * (dispatch.c's and tensors.c's functions), so conn.c sits below the methods that reply
 * through it. Loop thread. */
typedef struct kiln_conn_handler {
  void (*message)(kiln_conn_t *c, const uint8_t *bytes, size_t len); /* one whole message */
  /* Answers every request of c in flight with st (takes ownership of st): shutdown. */
  void (*cancel_requests)(kiln_conn_t *c, kiln_status_t st);
  /* The allocator the connection's reader receives large messages with. */
  void (*reader_alloc)(kiln_conn_t *c, kiln_reader_alloc_t *out);
} kiln_conn_handler_t;

/* A TLS connection's side of the transport (conn_tls.c, which calls conn.c back by name):
 * listener.c sets the server's table when it opens a tls: listener, so conn.c reaches TLS
 * through it and the two files do not call each other. Each entry is the conn_tls.c function
 * of the same name, declared below. */
struct kiln_tls_ctx;
typedef struct kiln_conn_tls_ops {
  kiln_status_t (*start)(kiln_conn_t *c, struct kiln_tls_ctx *ctx);
  void (*free)(kiln_conn_t *c);
  void (*alloc)(kiln_conn_t *c, uv_buf_t *buf);
  void (*received)(kiln_conn_t *c, const void *p, size_t n);
  void (*send)(kiln_conn_t *c, uint8_t *bytes, size_t len, const void *extra, size_t extra_len,
               void (*release)(void *), void *ctx);
  size_t (*unsent)(const kiln_conn_t *c);
  bool (*partial)(const kiln_conn_t *c);
  bool (*handshaking)(const kiln_conn_t *c);
  void (*closing)(kiln_conn_t *c);
} kiln_conn_tls_ops_t;

void kiln_conn_accept(kiln_listener_t *l);
/* Queues bytes for the client. `extra`/`extra_len`, when given, go right after `bytes`
 * without being copied; `release(extra_ctx)` is called once they have been written (or
 * dropped). Takes ownership of `bytes` (a kiln_buf's data). */
void kiln_conn_send(kiln_conn_t *c, kiln_buf_t *bytes, const void *extra, size_t extra_len,
                    void (*release)(void *), void *extra_ctx);
/* Sends an error (response when msgid is known, else an "error" notification) and closes
 * the connection once it is written. */
void kiln_conn_fail(kiln_conn_t *c, bool has_msgid, uint32_t msgid, kiln_status_t st);
void kiln_conn_close(kiln_conn_t *c);
void kiln_conn_release(kiln_conn_t *c);
/* Re-evaluates backpressure (after a reply or a write completes). */
void kiln_conn_update_reading(kiln_conn_t *c);
void kiln_conns_sweep(kiln_server_t *s); /* idle heap, peers, timeouts: on the sweep event */
/* Shutdown, past the grace period: every request still in flight is answered E_CANCELLED,
 * and each connection closes once what it was sent has been written. */
void kiln_conns_cancel_and_close(kiln_server_t *s);
/* A write of len bytes ended with status (libuv's): counted, or the connection closed on an
 * error. True while the connection stays open. */
bool kiln_conn_written(kiln_conn_t *c, int status, size_t len);
/* Dispatches every whole message the reader holds; false once the connection is closing. */
bool kiln_conn_consume(kiln_conn_t *c);

/* --- TLS connections (conn_tls.c; the session is server/tls.h) ----------------------------- */

KILN_MUST_USE kiln_status_t kiln_conn_tls_start(kiln_conn_t *c, struct kiln_tls_ctx *ctx);
void kiln_conn_tls_free(kiln_conn_t *c);
void kiln_conn_tls_alloc(kiln_conn_t *c, uv_buf_t *buf);
/* Ciphertext received: decrypts it into the reader and dispatches what is whole. */
void kiln_conn_tls_received(kiln_conn_t *c, const void *p, size_t n);
/* As kiln_conn_send's write: takes `bytes`, releases `extra` once encrypted. */
void kiln_conn_tls_send(kiln_conn_t *c, uint8_t *bytes, size_t len, const void *extra,
                        size_t extra_len, void (*release)(void *), void *ctx);
size_t kiln_conn_tls_unsent(const kiln_conn_t *c); /* plaintext and ciphertext not written */
bool kiln_conn_tls_partial(const kiln_conn_t *c);  /* part of a record is buffered */
bool kiln_conn_tls_handshaking(const kiln_conn_t *c);
void kiln_conn_tls_closing(kiln_conn_t *c); /* close_notify, best effort */

/* --- peers: connections before hello (peers.c) -------------------------------------------- */

#define KILN_ANON_MAX_MESSAGE (64u << 10) /* bytes of one message before hello */
#define KILN_ANON_MAX_UNSENT (64u << 10)  /* replies unsent before reading pauses */
#define KILN_HELLO_FAILURE_BURST 10       /* failed hellos a peer may make at once */
#define KILN_HELLO_FAILURE_REFILL_S 6     /* and then one more per this many seconds */

typedef struct kiln_peer {
  uint32_t anonymous;    /* its open connections that have not authenticated */
  double hello_budget;   /* failed hellos it may still make */
  uint64_t budget_at_ns; /* when hello_budget was brought up to date */
} kiln_peer_t;

KILN_MUST_USE kiln_status_t kiln_peers_init(kiln_server_t *s);
/* Names the peer of an accepted connection (c->peer) and computes its key. */
void kiln_peer_identify(kiln_conn_t *c, bool tcp);
/* The owner check of an owner_only listener's connection: KILN_OK when its peer's socket
 * belongs to kilnd's effective uid or to root; otherwise E_UNAUTHENTICATED saying whose it is
 * or why that cannot be told (logged as peer_refused). At most KILN_PEER_UID_TIMEOUT_MS on the
 * loop (peer_uid.h: one netlink round trip, microseconds). */
#define KILN_PEER_UID_TIMEOUT_MS 100
KILN_MUST_USE kiln_status_t kiln_peer_check_owner(kiln_conn_t *c, const kiln_listener_t *l);
/* peers.c keeps the books and closes nothing: it hands conn.c the connections to close.
 * A new connection on a tokens server becomes anonymous: E_RESOURCE_EXHAUSTED when its peer
 * holds max_anonymous_per_peer already; when max_anonymous are open, the oldest leaves the
 * anonymous ones to make room and is *out_evicted (else NULL), for the caller to close. */
KILN_MUST_USE kiln_status_t kiln_peer_admit(kiln_server_t *s, kiln_conn_t *c,
                                            kiln_conn_t **out_evicted);
/* The connection authenticated or closed (idempotent). */
void kiln_peer_leave_anonymous(kiln_server_t *s, kiln_conn_t *c);
/* The oldest anonymous connection but `except`, taken off the anonymous ones for the caller
 * to close; NULL when there is none. */
kiln_conn_t *kiln_peer_evict_oldest(kiln_server_t *s, const kiln_conn_t *except);
/* Failed-hello rate limit: whether the peer may try now (else the seconds until it may). */
bool kiln_peer_hello_allowed(kiln_server_t *s, kiln_conn_t *c, uint32_t *out_retry_s);
void kiln_peer_hello_failed(kiln_server_t *s, kiln_conn_t *c);
/* Once a second: the anonymous connections past --hello-timeout, one per call, taken off the
 * anonymous ones for the caller to close (NULL: no more); then prune forgets idle peers. */
kiln_conn_t *kiln_peer_expired(kiln_server_t *s, uint64_t now);
void kiln_peers_prune(kiln_server_t *s, uint64_t now);

/* --- requests (dispatch.c) ---------------------------------------------------------------- */

struct kiln_req {
  kiln_conn_t *conn;
  kiln_req_t *prev, *next; /* the connection's requests in flight */
  bool answered;           /* cancelled by shutdown: the handler's answer is dropped */
  uint32_t msgid;
  int method; /* index in the dispatch table */
  uint64_t start_ns;
};

/* Creates a request for an asynchronous handler (takes a ref on the connection). */
kiln_req_t *kiln_req_create(kiln_conn_t *c, uint32_t msgid, int method);
/* Replies with a result packed by the caller after kiln_rpc_pack_result_head(), plus
 * optional zero-copy extra bytes (see kiln_conn_send). Frees the request. */
void kiln_req_reply(kiln_req_t *r, kiln_buf_t *bytes, const void *extra, size_t extra_len,
                    void (*release)(void *), void *extra_ctx);
/* Replies with an error and frees the request; takes ownership of st. */
void kiln_req_fail(kiln_req_t *r, kiln_status_t st);
/* Answers every request of c still in flight with st (a copy each; takes ownership of st).
 * Their handlers still hold them: what they answer later is dropped. */
void kiln_reqs_cancel(kiln_conn_t *c, kiln_status_t st);

/* Handles one whole message from a client (conn.c's message handler: main.c sets it). */
void kiln_dispatch(kiln_conn_t *c, const uint8_t *bytes, size_t len);
/* The server's method table (methods.c, set by main.c): a method's name, "?" when none. */
const char *kiln_method_name(const kiln_server_t *s, int method);
int kiln_method_count(const kiln_server_t *s);

/* A handler either answers synchronously (returns OK having packed a result into `out`
 * after the result head, or returns an error) or takes over the request
 * (*out_async = true) and answers later with kiln_req_reply/kiln_req_fail. */
typedef struct kiln_call {
  kiln_server_t *server;
  kiln_conn_t *conn;
  const msgpack_object *params;
  uint32_t msgid;
  int method;
  msgpack_packer *pk; /* result packer (head already written) */
  bool async;         /* set by an async handler: it called kiln_req_create */
  kiln_req_t *req;
} kiln_call_t;

typedef kiln_status_t (*kiln_handler_fn)(kiln_call_t *call);
typedef struct kiln_method {
  const char *name;
  kiln_handler_fn fn;
} kiln_method_t;
/* The method table (methods.c): hello first, ping second. */
const kiln_method_t *kiln_methods(int *out_count);

KILN_MUST_USE kiln_status_t kiln_method_hello(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_ping(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_devices(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_stats(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_quotas(kiln_call_t *call); /* quotas.c */
KILN_MUST_USE kiln_status_t kiln_method_alloc(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_upload(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_write(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_read(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_download(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_free(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_tensors(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_launch(kiln_call_t *call); /* launch.c */
KILN_MUST_USE kiln_status_t kiln_method_time(kiln_call_t *call);
/* For graph.c (launch.c): sends module m to the slot's worker unless this worker process
 * has it (jobs queued after this see it loaded); packs a worker's time reply as the client's
 * `time` result map. */
struct kiln_dslot;
struct kiln_module;
KILN_MUST_USE kiln_status_t kiln_slot_ensure_loaded(struct kiln_dslot *d, const struct kiln_module *m);
/* The slot's worker maps a cancel page (launch.c): sent before the first job that names a cell. */
KILN_MUST_USE kiln_status_t kiln_slot_ensure_cancel_page(struct kiln_dslot *d);
KILN_MUST_USE kiln_status_t kiln_pack_time_result(msgpack_packer *pk, const msgpack_object *result);
/* Graphs (graph.c, docs/graph.md). */
KILN_MUST_USE kiln_status_t kiln_method_graph_create(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_graph_run(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_graph_time(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_graph_free(kiln_call_t *call);
/* Live graphs and their device bytes (of tenant t, or all when NULL), runs answered. */
void kiln_graphs_counts(kiln_server_t *s, const kiln_tenant_t *t, uint64_t *out_live, uint64_t *out_bytes,
                        uint64_t *out_runs_ok, uint64_t *out_runs_failed);
void kiln_graphs_shutdown(kiln_server_t *s);
/* A connection closed (the hook of main.c): the graph runs and timings it asked for are
 * cancelled in their worker (skipped when queued, stopped before their next launch). */
void kiln_graphs_conn_closed(kiln_server_t *s, void *conn);

/* --- devices and workers (devices.c, worker.c) -------------------------------------------- */

#define KILN_MAX_DEVICES 32

typedef struct kiln_device_entry {
  char id[32];
  char kind[8];
  uint32_t index; /* within its backend */
  char arch[96];  /* compile target of the device */
  kiln_buf_t info; /* the packed map answered by `devices` */
  kiln_map_t slots; /* tenant index -> kiln_dslot_t*: one device worker per (device, tenant) */
  uint32_t running; /* launches/timings in flight on this device, all tenants */
  uint64_t capacity; /* bytes kilnd lets tensors hold here (memory.c) */
  uint64_t used;     /* bytes of live tensors and of allocations on their way, all tenants */
  /* lease: exclusive use by one tenant (docs/protocol.md `lease`) */
  kiln_tenant_t *lease_tenant;
  kiln_conn_t *lease_conn;
  uint64_t lease_id;
  uint64_t lease_start_ns;
  uv_timer_t lease_timer;
  struct kiln_held *held_head, *held_tail; /* requests waiting for the lease to change */
  uv_timer_t held_timer; /* the next held launch's deadline, or a lease's cool-down end */
  /* The last lease, for its tenant's next one (lease.c): `contended` when another tenant
   * wanted the device while it stood or has used it since. */
  kiln_tenant_t *last_lease_tenant;
  uint64_t last_lease_end_ns, last_lease_ns;
  bool lease_contended;
} kiln_device_entry_t;

/* The device worker of one tenant on one device, and what it has loaded. */
typedef struct kiln_dslot {
  kiln_device_entry_t *device;
  kiln_tenant_t *tenant;
  kiln_worker_t *worker;
  kiln_map_t loaded; /* module key64 -> worker generation + 1 it was loaded in */
  uint32_t reaped_generation; /* tensors of older worker generations are given up (tensors.c) */
  /* Launches and timings at the worker (launch.c), and the shared page through which kilnd
   * tells the worker to drop those whose client has gone: cell seq % KILN_CANCEL_CELLS holds
   * the seq of a cancelled request. */
  struct launch_op *ops;
  uint64_t *cancel_page; /* a fresh one per worker process; kilnd keeps no fd of it */
  uint32_t cancel_sent;  /* worker generation + 1 that has the page */
  uint64_t cancel_seq;
} kiln_dslot_t;

#define KILN_CANCEL_PAGE_BYTES 4096
#define KILN_CANCEL_CELLS (KILN_CANCEL_PAGE_BYTES / 8)

/* Once a second: ends device workers silent past their launches' deadlines. */
void kiln_devices_watchdog(kiln_server_t *s);
/* The slot of (device, tenant), created (and its worker set up) on first use. */
KILN_MUST_USE kiln_status_t kiln_device_slot(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                               kiln_dslot_t **out);
/* A connection closed (conn.c): its leases end, its held launches and pending lease requests
 * are dropped, and the worker is told to skip or stop its launches and timings. */
void kiln_devices_conn_closed(kiln_server_t *s, kiln_conn_t *c);
/* Leases (lease.c). */
KILN_MUST_USE kiln_status_t kiln_method_lease(kiln_call_t *call);
KILN_MUST_USE kiln_status_t kiln_method_release(kiln_call_t *call);
/* Tenant t uses or waits for the device: a leaseholder that leases again soon after will
 * wait its turn (gate.c; lease.c reads the note). */
void kiln_lease_note_use(kiln_device_entry_t *d, const kiln_tenant_t *t);

/* The device gate (gate.c): requests that may not go to a device worker yet wait there.
 * Launch gate: runs `go(ctx, OK)` now (*out_now) when the device is free for this tenant,
 * holds it while another tenant's lease is pending or active, or fails with E_UNAVAILABLE when
 * the client asked not to wait. A held launch gets go(ctx, E_TIMEOUT) after waiting `wait_ms`
 * (0: no limit) and go(ctx, E_CANCELLED) when its connection closes; `go` then calls
 * kiln_device_run_done like a launch that ran. */
typedef void (*kiln_held_fn)(void *ctx, kiln_status_t st);
KILN_MUST_USE kiln_status_t kiln_device_gate(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                               kiln_conn_t *c, bool wait, uint64_t wait_ms, kiln_held_fn go,
                               void *ctx, bool *out_now);
void kiln_device_run_done(kiln_server_t *s, kiln_device_entry_t *d);
/* A tensor operation of a tenant whose launches are held on the device waits behind them
 * (*out_queued; `go` as for the gate, without kiln_device_run_done), so that a tenant's
 * requests on one device stay in order; with nothing of the tenant held it is not queued. */
KILN_MUST_USE kiln_status_t kiln_device_follow(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                                 kiln_conn_t *c, kiln_held_fn go, void *ctx, bool *out_queued);
/* A read or download of `bytes` waits (*out_queued) while its tenant's transfer buffers hold
 * KILN_TRANSFER_BUDGET (one transfer of any size may go when none is out), and behind what
 * else of the tenant is held; `go` as for follow. Not queued: the caller charges the bytes
 * now. kiln_tenant_transfer_done gives them back. */
#define KILN_TRANSFER_BUDGET (512ull << 20)
KILN_MUST_USE kiln_status_t kiln_device_transfer(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                                   kiln_conn_t *c, uint64_t bytes, kiln_held_fn go, void *ctx,
                                   bool *out_queued);
void kiln_tenant_transfer_done(kiln_server_t *s, kiln_tenant_t *t, uint64_t bytes);
/* A lease request, granted by `go(ctx, OK)` once nothing else runs and not before
 * not_before_ns (0: at once); go(ctx, error) when dropped. */
KILN_MUST_USE kiln_status_t kiln_device_hold_lease(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                                     kiln_conn_t *c, uint64_t not_before_ns, kiln_held_fn go,
                                     void *ctx);
/* Whether a lease asked for now would have to wait (something runs or holds the device). */
bool kiln_device_lease_waits(const kiln_device_entry_t *d, const kiln_tenant_t *t);
/* Lets through what may go now, fails launches past their wait, arms the timer. */
void kiln_device_pump(kiln_server_t *s, kiln_device_entry_t *d);
/* Fails the held requests of connection c or of tenant t with a copy of `why`. */
void kiln_device_drop_held(kiln_server_t *s, kiln_device_entry_t *d, const kiln_conn_t *c,
                           const kiln_tenant_t *t, kiln_status_t why);
/* Ends what a tenant may no longer reach on the device (a reload took the device from its
 * line, or the tenant from the file): its lease, its held requests, its device worker (the
 * tensors in it are lost and their bytes given back). */
void kiln_device_revoke(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t);
/* Tells the tenant's worker to skip or stop the launches of a closed connection (launch.c). */
void kiln_launches_conn_closed(kiln_server_t *s, kiln_conn_t *c);
/* After a tokens reload (SIGHUP): closes connections whose tenant left the file or whose
 * token is no longer listed, and revokes devices tenants lost (lease.c). */
void kiln_tenants_revoke(kiln_server_t *s);

/* Memory (memory.c): a tensor's bytes are charged to its tenant's `memory` quota and to
 * the device's capacity before a worker allocates them, and given back when it is freed or
 * lost. E_RESOURCE_EXHAUSTED naming the quota or the capacity. */
KILN_MUST_USE kiln_status_t kiln_memory_reserve(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                                  uint64_t bytes);
void kiln_memory_release(kiln_device_entry_t *d, kiln_tenant_t *t, uint64_t bytes);
/* The most tensor bytes the tenant's worker on this device can ever be asked to hold: its
 * memory quota or the device's capacity, whichever is smaller (for the worker's limits). */
uint64_t kiln_device_memory_bound(const kiln_device_entry_t *d, const kiln_tenant_t *t);
/* The default capacity of cpu:0: half of what kilnd may use (physical RAM, or its cgroup's
 * memory.max when smaller), which is stored in *out_usable when given. */
uint64_t kiln_memory_host_default(uint64_t *out_usable);

/* E_PERMISSION unless the tenant may use the device. */
KILN_MUST_USE kiln_status_t kiln_device_permit(const kiln_device_entry_t *d, const kiln_tenant_t *t);

typedef struct kiln_absent_backend {
  char kind[8];
  char reason[256];
} kiln_absent_backend_t;

/* Runs the device worker binary in probe mode and fills the device table. */
KILN_MUST_USE kiln_status_t kiln_devices_probe(kiln_server_t *s);
/* The cores --pin gives `id` (a device id, or "compile" for the compile workers; "0,2-3",
 * the last --pin of it wins), or NULL. */
const char *kiln_pin_of(const kiln_server_t *s, const char *id);
/* Fills `set` with the cores of a --pin list; returns how many distinct cores
 * it names, 0 when it is malformed (the start-up check refuses it). */
uint32_t kiln_pin_set(const char *cpus, cpu_set_t *set);
/* Finds a served device by id ("cpu:0"); NULL if none. `id` may be NULL for the default. */
kiln_device_entry_t *kiln_device_find(kiln_server_t *s, const char *id, uint32_t len);

typedef void (*kiln_worker_cb)(void *ctx, kiln_status_t st, const msgpack_object *result);
/* For a reply that carries fds: the callback owns them (nfds of them; none with an error). */
typedef void (*kiln_worker_fd_cb)(void *ctx, kiln_status_t st, const msgpack_object *result,
                                  int *fds, int nfds);

typedef enum kiln_worker_kind { KILN_WORKER_DEVICE = 1, KILN_WORKER_COMPILER = 2 } kiln_worker_kind_t;

/* Checks --worker-uids against how kilnd runs and the tenants, and settles which uids
 * workers get (docs/operations.md "Security model"); called once at start. */
KILN_MUST_USE kiln_status_t kiln_workers_identity_init(kiln_server_t *s);
/* Creates the supervisor of one worker process (spawned lazily on first call). */
KILN_MUST_USE kiln_status_t kiln_worker_create(kiln_server_t *s, kiln_worker_kind_t kind, const char *device_id,
                                 const char *const *argv_tail, kiln_worker_t **out);
void kiln_worker_destroy(kiln_worker_t *w); /* kills the process */
/* The device and tenant whose device worker this is: it runs under the tenant's uid (kilnd as
 * root) and with an address space sized, at each spawn, from the tenant's memory bound on the
 * device (memory.c). Set before the first call. */
void kiln_worker_set_tenant(kiln_worker_t *w, const kiln_device_entry_t *d, const kiln_tenant_t *t);
/* Runs every incarnation of the process on these cores; set before the first start. */
void kiln_worker_set_cpus(kiln_worker_t *w, const cpu_set_t *cpus);
/* Starts the process now instead of at the first call (compile workers start warm). */
KILN_MUST_USE kiln_status_t kiln_worker_start(kiln_worker_t *w);
/* Kills the process now; the calls it held fail with `code` and `reason` instead of the
 * crash error (used for time limits). */
void kiln_worker_kill(kiln_worker_t *w, kiln_code_t code, const char *reason);
/* Sends a request to the worker. `pack_params` is the already-packed params array (e.g.
 * [ {…} ]); fds are passed with it and closed by this call. The callback runs exactly once:
 * with the reply, or with E_DEVICE_FAULT/E_COMPILER_CRASHED when the worker dies. */
KILN_MUST_USE kiln_status_t kiln_worker_call(kiln_worker_t *w, const char *method, const kiln_buf_t *params,
                               const int *fds, int nfds, kiln_worker_cb cb, void *ctx);
/* kiln_worker_call with a time budget: when the worker has answered nothing for the largest
 * budget among its calls plus a grace period, kiln_worker_watchdog ends it with E_TIMEOUT.
 * A call with budget 0 (unbounded) in flight turns the watchdog off until it is answered. */
KILN_MUST_USE kiln_status_t kiln_worker_call_budget(kiln_worker_t *w, const char *method, const kiln_buf_t *params,
                                      const int *fds, int nfds, uint64_t budget_ms, kiln_worker_cb cb,
                                      void *ctx);
/* kiln_worker_call for a job whose successful reply carries reply_nfds fds (the compile
 * worker's artifact in a memfd: docs/worker_jobs.md). */
KILN_MUST_USE kiln_status_t kiln_worker_call_fds(kiln_worker_t *w, const char *method, const kiln_buf_t *params,
                                   const int *fds, int nfds, uint32_t reply_nfds,
                                   kiln_worker_fd_cb cb, void *ctx);
#define KILN_WORKER_WATCHDOG_GRACE_MS 5000
void kiln_worker_watchdog(kiln_worker_t *w, uint64_t now_ns);
/* Called when a worker restarts: the server drops what lived in it. */
/* Runs `path flag` (the workers' --probe and --identity), its stdout into out (at most max
 * bytes); E_UNAVAILABLE when it cannot start or does not exit 0. Blocking: startup only. */
KILN_MUST_USE kiln_status_t kiln_worker_run_print(const char *path, const char *flag, uint64_t max,
                                    kiln_buf_t *out);
KILN_MUST_USE kiln_status_t kiln_worker_find_binary(const kiln_server_t *s, const char *name, char *out,
                                      size_t cap);
uint32_t kiln_worker_generation(const kiln_worker_t *w);
int kiln_worker_pid(const kiln_worker_t *w);
uint32_t kiln_worker_restarts(const kiln_worker_t *w);
uint32_t kiln_worker_inflight(const kiln_worker_t *w);
/* At exit, after the workers were told to stop (their channels closed, SIGTERM): waits for
 * every child process, so that none outlives kilnd; those still running after 2 s are
 * killed. Blocking: the last thing kilnd does. */
void kiln_workers_reap_all(void);
/* Starts shutting workers down; returns true when none is left running. */
bool kiln_worker_idle(const kiln_worker_t *w);

/* --- tensors (tensors.c) ------------------------------------------------------------------ */

typedef struct kiln_tensor {
  uint64_t id;
  kiln_tensor_desc_t desc;
  kiln_device_entry_t *device;
  kiln_dslot_t *slot;
  uint32_t generation; /* of the worker that holds it; stale = lost */
  kiln_tenant_t *tenant;
  uint32_t pending; /* operations in flight on it */
  bool freed;       /* free requested; the entry goes when pending drops to 0 */
  uint64_t created_ns;
  uint64_t session; /* the id of the connection whose closing frees it; 0: the tenant's */
  char client[129]; /* the creating connection's hello `client` name, for `tensors` */
} kiln_tensor_t;

/* The tensor `id` of the calling tenant; E_NOT_FOUND if absent, another tenant's, or lost
 * with a device worker that died. */
KILN_MUST_USE kiln_status_t kiln_tensor_lookup(kiln_call_t *call, uint64_t id, kiln_tensor_t **out);
/* A tensor another method made in the slot's worker (graph_run's kept outputs) enters the
 * table; its bytes and its count must already be charged to the tenant (the tensor holds
 * the charge from here). kiln_tensor_drop forgets one and has its worker free it (a reply
 * that never reached its client). */
KILN_MUST_USE kiln_status_t kiln_tensor_adopt(kiln_server_t *s, kiln_dslot_t *slot, uint32_t generation, uint64_t id,
                                              const kiln_tensor_desc_t *desc);
void kiln_tensor_drop(kiln_server_t *s, uint64_t id);
/* The allocator a connection's reader receives large messages with: buffers from the
 * server's shared-memory pool, which upload and write hand to the worker without a copy. */
void kiln_tensor_reader_alloc(kiln_conn_t *c, kiln_reader_alloc_t *out);
/* Once a second (the sweep event): gives back pooled memory that has gone unused. */
void kiln_tensors_sweep(kiln_server_t *s);
/* Gives up the tensors of device workers that died since the last call (their bytes go back
 * to the quotas and capacities at once; their ids answer "lost" when next used). */
void kiln_tensors_reap(kiln_server_t *s);
/* A connection closed: the tensors bound to it (hello {"tensors": "session"}) are freed. */
void kiln_tensors_conn_closed(kiln_server_t *s, kiln_conn_t *c);

/* --- the server --------------------------------------------------------------------------- */

struct kiln_server {
  uv_loop_t *loop;
  kiln_config_t cfg;
  kiln_listener_t listeners[KILN_MAX_LISTENERS];
  int num_listeners;
  kiln_conn_t *conns; /* doubly linked */
  uint32_t num_conns;
  uint32_t num_condemned; /* of those, closing (conn.c) */
  uint64_t next_conn_id;
  uv_timer_t sweep_timer;
  uv_timer_t drain_timer;
  uv_signal_t sig_term, sig_int, sig_pipe;
  bool draining;
  bool drain_forced;   /* the grace period ended */
  bool drain_finished; /* answers cancelled; connections are flushing and closing */
  bool drain_walked;   /* every handle is closing; the loop is about to end */
  uint64_t start_ns;

  kiln_device_entry_t devices[KILN_MAX_DEVICES];
  uint32_t num_devices;
  kiln_absent_backend_t absent[8];
  uint32_t num_absent;

  kiln_map_t tensors; /* id -> kiln_tensor_t* */
  kiln_map_t lost_tensors; /* id -> tenant index << 6 | device index, of tensors reaped with
                              their worker (tensors.c) */
  kiln_tenants_t tenants;
  uv_signal_t sig_hup;
  struct kiln_compile_state *compile;
  struct kiln_cache *cache; /* the artifact cache (opened by compile.c; server/modules.h reads it) */
  struct kiln_graph_state *graphs; /* graph.c; made on first use */
  uint64_t tensor_bytes;
  kiln_shm_pool_t shm_pool; /* bulk-byte buffers (tensors.c); set up on first use */
  bool shm_pool_ready;

  /* the method table (methods.c), given by main.c to dispatch.c */
  const kiln_method_t *methods;
  int num_methods;

  /* statistics */
  uint64_t *requests_by_method;
  uint64_t errors_by_code[KILN_E_COUNT_];
  uint64_t total_requests;
  uint64_t total_inflight;
  uint64_t idle_since_ns; /* when total_inflight last became 0 (sweep's view); 0 while busy */
  bool heap_trimmed;      /* malloc_trim ran since the server last went idle */

  /* peers.c */
  kiln_map_t peers;        /* peer key -> kiln_peer_t* */
  uint8_t peer_salt[16];   /* keys are salted hashes: no one can aim a collision */
  uint32_t num_anonymous;
  kiln_conn_t *anon_head, *anon_tail;
  struct kiln_tls_ctx *tls_ctx; /* set when a tls: listener is configured */
  const kiln_conn_tls_ops_t *tls_ops;      /* set with it (listener.c) */
  const kiln_conn_handler_t *conn_handler; /* set by main.c */

  /* hooks.c: who hears each lifecycle event (registered by main.c) */
  kiln_hook_fn hooks[KILN_EVENTS_][KILN_HOOKS_MAX];
  uint8_t num_hooks[KILN_EVENTS_];
};

kiln_server_t *kiln_server_get(void); /* the one server of this process */
kiln_status_t kiln_default_unix_path(char *out, size_t cap); /* listener.c */
void kiln_server_maybe_finish_drain(kiln_server_t *s);

#endif
