/* kiln-loadgen: N connections x pipeline depth against a local kilnd, on one libuv loop.
 *
 *   kiln-loadgen --url tcp:127.0.0.1:7070 --connections 16 --depth 32 --requests 1000000
 *
 * Each connection keeps `depth` requests in flight: every reply is answered by the next
 * request, and all requests queued while handling one read leave in one write. Latency is
 * measured from queueing a request to parsing its reply, into a log-linear histogram.
 * Prints one line of key=value results. Loopback only: a load generator pointed at someone
 * else's machine is a denial-of-service tool, so other addresses are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/buf.h"
#include "histogram.h"
#include "protocol/frame.h"
#include "protocol/rpc.h"
#include "protocol/tensor.h"

typedef enum kind { K_IDLE, K_PING, K_UPLOAD, K_DOWNLOAD, K_FREE, K_SETUP } kind_t;

typedef struct slot {
  uint64_t t0;
  kind_t kind;
} slot_t;

struct bench;

typedef struct conn {
  union {
    uv_tcp_t tcp;
    uv_pipe_t pipe;
    uv_stream_t stream;
    uv_handle_t handle;
  } h;
  uv_connect_t connect_req;
  uv_write_t write_req;
  struct bench *b;
  bool writing, ready, closing, final_free_sent;
  int cur; /* out[cur] collects requests; out[cur ^ 1] is being written */
  kiln_buf_t out[2];
  kiln_reader_t reader;
  slot_t *slots;
  uint32_t *free_ids, nfree, inflight;
  uint64_t tensor; /* download: the tensor this connection downloads */
} conn_t;

typedef struct bench {
  uv_loop_t *loop;
  conn_t *conns;
  int nconns, ready, closing;
  uint32_t depth;
  kind_t method;
  size_t size;
  uint8_t *payload;
  uint64_t target, issued, completed, errors;
  bool started, stopping;
  uint64_t t_start, t_last;
  double duration_s;
  uv_timer_t timer;
  kiln_hist_t hist;
  const char *url;
  struct sockaddr_storage addr;
  bool is_unix;
  const char *unix_path;
  char first_error[256];
} bench_t;

static void fill(conn_t *c);
static void maybe_finish(conn_t *c);

static void fail(const char *fmt, const char *arg) {
  fprintf(stderr, "kiln-loadgen: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(2);
}

static void note_error(bench_t *b, const char *msg, size_t n) {
  b->errors++;
  if (!b->first_error[0])
    snprintf(b->first_error, sizeof(b->first_error), "%.*s", (int)(n < 200 ? n : 200), msg);
}

/* --- Encoding ---------------------------------------------------------------------------- */

/* [0, msgid, "ping", []] with msgid as a fixed uint32: no packer on the hot path. */
static void put_ping(kiln_buf_t *o, uint32_t id) {
  uint8_t m[] = {0x94, 0x00, 0xce, id >> 24, id >> 16, id >> 8, id, 0xa4, 'p', 'i', 'n', 'g', 0x90};
  kiln_status_free(kiln_buf_append(o, m, sizeof(m)));
}

/* [0, msgid, "download", [{"id": tensor}]] */
static void put_download(kiln_buf_t *o, uint32_t id, uint64_t t) {
  uint8_t m[32] = {0x94, 0x00, 0xce, id >> 24, id >> 16, id >> 8, id, 0xa8};
  memcpy(m + 8, "download", 8);
  uint8_t *p = m + 16;
  *p++ = 0x91;
  *p++ = 0x81;
  *p++ = 0xa2;
  *p++ = 'i';
  *p++ = 'd';
  *p++ = 0xcf;
  for (int i = 7; i >= 0; i--) *p++ = (uint8_t)(t >> (8 * i));
  kiln_status_free(kiln_buf_append(o, m, (size_t)(p - m)));
}

static void put_upload(bench_t *b, kiln_buf_t *o, uint32_t id) {
  kiln_packer_t pk;
  kiln_packer_init(&pk, o);
  kiln_rpc_pack_request_head(&pk.pk, id, "upload");
  msgpack_pack_array(&pk.pk, 1);
  msgpack_pack_map(&pk.pk, 1);
  kiln_pack_cstr(&pk.pk, "tensor");
  kiln_tensor_desc_t d = {.dtype = KILN_UINT8, .ndim = 1, .shape = {b->size}, .nbytes = b->size};
  kiln_tensor_pack_head(&pk.pk, &d);
  kiln_status_free(kiln_buf_append(o, b->payload, b->size));
}

static void put_free(kiln_buf_t *o, uint32_t id, uint64_t t) {
  kiln_packer_t pk;
  kiln_packer_init(&pk, o);
  kiln_rpc_pack_request_head(&pk.pk, id, "free");
  msgpack_pack_array(&pk.pk, 1);
  msgpack_pack_map(&pk.pk, 1);
  kiln_pack_kv_u64(&pk.pk, "id", t);
}

/* --- Writing ----------------------------------------------------------------------------- */

static void flush(conn_t *c);

static void on_write(uv_write_t *req, int status) {
  conn_t *c = req->data;
  c->writing = false;
  c->out[c->cur ^ 1].len = 0;
  if (status < 0) {
    const char *e = uv_strerror(status);
    note_error(c->b, e, strlen(e));
    return;
  }
  flush(c);
}

static void flush(conn_t *c) {
  if (c->writing || c->out[c->cur].len == 0 || c->closing) return;
  uv_buf_t buf = uv_buf_init((char *)c->out[c->cur].data, (unsigned)c->out[c->cur].len);
  c->writing = true;
  c->cur ^= 1;
  c->write_req.data = c;
  int rc = uv_write(&c->write_req, &c->h.stream, &buf, 1, on_write);
  if (rc < 0) fail("write: %s", uv_strerror(rc));
}

static uint32_t take_slot(conn_t *c, kind_t kind) {
  uint32_t id = c->free_ids[--c->nfree];
  c->slots[id].kind = kind;
  c->slots[id].t0 = uv_hrtime();
  c->inflight++;
  return id;
}

static void release_slot(conn_t *c, uint32_t id) {
  c->slots[id].kind = K_IDLE;
  c->free_ids[c->nfree++] = id;
  c->inflight--;
}

/* Tops the connection's window up to `depth` requests in flight. */
static void fill(conn_t *c) {
  bench_t *b = c->b;
  kiln_buf_t *o = &c->out[c->cur];
  while (b->started && !b->stopping && c->nfree > 0 && b->issued < b->target) {
    uint32_t id = take_slot(c, b->method);
    switch (b->method) {
      case K_PING: put_ping(o, id); break;
      case K_UPLOAD: put_upload(b, o, id); break;
      case K_DOWNLOAD: put_download(o, id, c->tensor); break;
      default: break;
    }
    b->issued++;
  }
  flush(c);
  if (b->issued >= b->target && !b->stopping) {
    /* Connections with nothing in flight get no more reads: tell each the run is over. */
    b->stopping = true;
    for (int i = 0; i < b->nconns; i++) maybe_finish(&b->conns[i]);
  }
}

/* --- Reading ----------------------------------------------------------------------------- */

static bool peek_response(const uint8_t *p, size_t len, uint32_t *out_id, size_t *out_hdr) {
  if (len < 4 || p[0] != 0x94 || p[1] != 0x01) return false;
  uint8_t t = p[2];
  int n = t <= 0x7f ? 0 : t == 0xcc ? 1 : t == 0xcd ? 2 : t == 0xce ? 4 : -1;
  if (n < 0 || len < 4 + (size_t)n) return false;
  uint32_t v = n == 0 ? t : 0;
  for (int i = 0; i < n; i++) v = (v << 8) | p[3 + i];
  *out_id = v;
  *out_hdr = 3 + (size_t)n;
  return true;
}

/* The id of an upload's {"id": uint} result. */
static uint64_t result_id(bench_t *b, const uint8_t *msg, size_t len) {
  kiln_rpc_msg_t m;
  bool has;
  uint64_t id = 0;
  kiln_status_t s = kiln_rpc_parse(msg, len, &m, &has);
  if (!s && m.result && m.result->type == MSGPACK_OBJECT_MAP)
    kiln_status_free(kiln_params_u64(m.result, "id", true, &id));
  kiln_status_free(s);
  kiln_rpc_msg_deinit(&m);
  if (!id) note_error(b, "upload result without an id", 27);
  return id;
}

static void handle_error_reply(bench_t *b, const uint8_t *msg, size_t len) {
  kiln_rpc_msg_t m;
  bool has;
  kiln_status_t s = kiln_rpc_parse(msg, len, &m, &has);
  if (!s) s = kiln_rpc_error_to_status(m.error);
  const char *text = s ? kiln_status_message(s) : "error";
  note_error(b, text, strlen(text));
  kiln_status_free(s);
  kiln_rpc_msg_deinit(&m);
}

static void handle(conn_t *c, const uint8_t *msg, size_t len) {
  bench_t *b = c->b;
  uint32_t id;
  size_t hdr;
  if (!peek_response(msg, len, &id, &hdr) || id >= b->depth || c->slots[id].kind == K_IDLE) {
    note_error(b, "unexpected message", 18);
    return;
  }
  slot_t *s = &c->slots[id];
  bool ok = msg[hdr] == 0xc0; /* nil error */
  if (!ok) handle_error_reply(b, msg, len);
  uint64_t now = uv_hrtime();
  switch (s->kind) {
    case K_PING:
    case K_DOWNLOAD:
    case K_UPLOAD:
      kiln_hist_record(&b->hist, now - s->t0);
      b->completed++;
      b->t_last = now;
      if (s->kind == K_UPLOAD && ok) {
        uint64_t t = result_id(b, msg, len);
        if (t) { /* free it right away on the same slot: memory stays flat */
          s->kind = K_FREE;
          put_free(&c->out[c->cur], id, t);
          return;
        }
      }
      release_slot(c, id);
      break;
    case K_FREE: release_slot(c, id); break;
    case K_SETUP:
      if (ok) c->tensor = result_id(b, msg, len);
      release_slot(c, id);
      if (!c->tensor) fail("could not upload the tensor to download%s", "");
      c->ready = true;
      if (++b->ready == b->nconns) {
        b->started = true;
        b->t_start = uv_hrtime();
        for (int i = 0; i < b->nconns; i++) fill(&b->conns[i]);
      }
      break;
    default: break;
  }
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn_t *c = h->data;
  size_t n;
  void *p = kiln_reader_space(&c->reader, &n);
  *buf = uv_buf_init(p, (unsigned)(n > UINT32_MAX ? UINT32_MAX : n));
}

static void close_conn(conn_t *c) {
  if (c->closing) return;
  c->closing = true;
  uv_close(&c->h.handle, NULL);
  /* The last connection takes the duration timer with it, so that uv_run returns. */
  if (++c->b->closing == c->b->nconns) uv_close((uv_handle_t *)&c->b->timer, NULL);
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = st->data;
  if (nread < 0) {
    if (!c->b->stopping || c->inflight) {
      const char *e = nread == UV_EOF ? "kilnd closed the connection" : uv_strerror((int)nread);
      note_error(c->b, e, strlen(e));
    }
    close_conn(c);
    return;
  }
  kiln_reader_commit(&c->reader, (size_t)nread);
  const uint8_t *msg;
  size_t len;
  kiln_frame_result_t fr;
  while ((fr = kiln_reader_next(&c->reader, &msg, &len)) == KILN_FRAME_MESSAGE) handle(c, msg, len);
  if (fr == KILN_FRAME_ERROR) {
    const char *e = kiln_status_message(kiln_reader_error(&c->reader));
    note_error(c->b, e, strlen(e));
    close_conn(c);
    return;
  }
  fill(c);
  maybe_finish(c);
}

/* Once the run is over and nothing is in flight: free the download tensor, then close. */
static void maybe_finish(conn_t *c) {
  if (!c->b->stopping || c->inflight || c->closing) return;
  if (c->tensor && !c->final_free_sent) {
    c->final_free_sent = true;
    uint32_t id = take_slot(c, K_FREE);
    put_free(&c->out[c->cur], id, c->tensor);
    flush(c);
    return;
  }
  close_conn(c);
}

static void on_timer(uv_timer_t *t) {
  bench_t *b = t->data;
  b->stopping = true;
  for (int i = 0; i < b->nconns; i++) maybe_finish(&b->conns[i]);
}

static void on_connect(uv_connect_t *req, int status) {
  conn_t *c = req->data;
  bench_t *b = c->b;
  if (status < 0) {
    fprintf(stderr, "kiln-loadgen: cannot connect to %s: %s\n", b->url, uv_strerror(status));
    exit(3);
  }
  if (!b->is_unix) uv_tcp_nodelay(&c->h.tcp, 1);
  uv_read_start(&c->h.stream, alloc_cb, read_cb);
  if (b->method == K_DOWNLOAD) { /* the tensor every download of this connection reads */
    uint32_t id = take_slot(c, K_SETUP);
    put_upload(b, &c->out[c->cur], id);
    flush(c);
    return;
  }
  c->ready = true;
  if (++b->ready == b->nconns) {
    b->started = true;
    b->t_start = uv_hrtime();
    for (int i = 0; i < b->nconns; i++) fill(&b->conns[i]);
  }
}

/* --- Setup ------------------------------------------------------------------------------- */

/* Accepts tcp:127.x.x.x:PORT, tcp:localhost:PORT, tcp:[::1]:PORT and unix:PATH. */
static void resolve(bench_t *b) {
  const char *u = b->url;
  if (strncmp(u, "unix:", 5) == 0) {
    b->is_unix = true;
    b->unix_path = u + 5;
    return;
  }
  if (strncmp(u, "tcp:", 4) != 0) fail("unsupported URL %s (tcp:HOST:PORT or unix:PATH)", u);
  char host[128];
  const char *hp = u + 4, *colon = strrchr(hp, ':');
  if (!colon || (size_t)(colon - hp) >= sizeof(host)) fail("malformed URL %s", u);
  memcpy(host, hp, (size_t)(colon - hp));
  host[colon - hp] = 0;
  int port = atoi(colon + 1);
  if (!strcmp(host, "localhost")) strcpy(host, "127.0.0.1");
  if (!strcmp(host, "[::1]")) {
    uv_ip6_addr("::1", port, (struct sockaddr_in6 *)&b->addr);
    return;
  }
  struct sockaddr_in *in = (struct sockaddr_in *)&b->addr;
  if (uv_ip4_addr(host, port, in) != 0)
    fail("%s is not a numeric loopback address (kiln-loadgen only targets this machine)", host);
  if ((ntohl(in->sin_addr.s_addr) >> 24) != 127)
    fail("refusing %s: kiln-loadgen only targets loopback addresses (127.0.0.0/8, ::1)", host);
}

static const char USAGE[] =
    "usage: kiln-loadgen --url URL [--connections N] [--depth D] [--requests R]\n"
    "                    [--duration S] [--method ping|upload|download] [--size BYTES]\n"
    "  --url          tcp:127.0.0.1:PORT, tcp:[::1]:PORT or unix:PATH (loopback only)\n"
    "  --connections  connections (default 1)\n"
    "  --depth        requests in flight per connection (default 1)\n"
    "  --requests     stop after this many requests (default 100000)\n"
    "  --duration     or after this many seconds (default 60)\n"
    "  --method       ping (default); upload: upload SIZE bytes then free them;\n"
    "                 download: download a SIZE-byte tensor\n"
    "  --size         tensor bytes for upload/download (default 4096)\n"
    "prints: method=.. connections=.. depth=.. requests=.. errors=.. seconds=.. req_per_s=..\n"
    "        mb_per_s=.. p50_us=.. p99_us=.. p999_us=.. max_us=.. mean_us=..\n"
    "exit status: 0 no errors, 1 some requests failed, 2 usage, 3 cannot connect\n";

int main(int argc, char **argv) {
  bench_t b = {.nconns = 1, .depth = 1, .target = 100000, .duration_s = 60, .method = K_PING,
               .size = 4096};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help")) {
      fputs(USAGE, stdout);
      return 0;
    }
    if (!v) fail("%s needs a value (see --help)", a);
    i++;
    if (!strcmp(a, "--url")) b.url = v;
    else if (!strcmp(a, "--connections")) b.nconns = atoi(v);
    else if (!strcmp(a, "--depth")) b.depth = (uint32_t)atoi(v);
    else if (!strcmp(a, "--requests")) b.target = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--duration")) b.duration_s = atof(v);
    else if (!strcmp(a, "--size")) b.size = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--method")) {
      if (!strcmp(v, "ping")) b.method = K_PING;
      else if (!strcmp(v, "upload")) b.method = K_UPLOAD;
      else if (!strcmp(v, "download")) b.method = K_DOWNLOAD;
      else fail("unknown method %s (ping, upload, download)", v);
    } else fail("unknown option %s (see --help)", a);
  }
  if (!b.url) fail("--url is required%s", "");
  if (b.nconns < 1 || b.nconns > 1000) fail("--connections must be 1..1000%s", "");
  if (b.depth < 1 || b.depth > 4096) fail("--depth must be 1..4096%s", "");
  if (b.target < 1 || b.duration_s <= 0) fail("--requests and --duration must be positive%s", "");
  resolve(&b);
  b.payload = calloc(1, b.size ? b.size : 1);
  b.loop = uv_default_loop();
  uv_timer_init(b.loop, &b.timer);
  b.timer.data = &b;
  uv_timer_start(&b.timer, on_timer, (uint64_t)(b.duration_s * 1000), 0);
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  b.conns = calloc((size_t)b.nconns, sizeof(conn_t));
  for (int i = 0; i < b.nconns; i++) {
    conn_t *c = &b.conns[i];
    c->b = &b;
    c->slots = calloc(b.depth, sizeof(slot_t));
    c->free_ids = malloc(b.depth * sizeof(uint32_t));
    for (uint32_t k = 0; k < b.depth; k++) c->free_ids[k] = b.depth - 1 - k;
    c->nfree = b.depth;
    kiln_buf_init(&c->out[0]);
    kiln_buf_init(&c->out[1]);
    kiln_reader_init(&c->reader, &lim, 0);
    c->connect_req.data = c;
    if (b.is_unix) {
      uv_pipe_init(b.loop, &c->h.pipe, 0);
      c->h.handle.data = c;
      uv_pipe_connect(&c->connect_req, &c->h.pipe, b.unix_path, on_connect);
    } else {
      uv_tcp_init(b.loop, &c->h.tcp);
      c->h.handle.data = c;
      int rc = uv_tcp_connect(&c->connect_req, &c->h.tcp, (struct sockaddr *)&b.addr, on_connect);
      if (rc < 0) fail("connect: %s", uv_strerror(rc));
    }
  }
  uv_run(b.loop, UV_RUN_DEFAULT);

  double secs = b.t_last > b.t_start ? (double)(b.t_last - b.t_start) / 1e9 : 0;
  const char *names[] = {"", "ping", "upload", "download"};
  printf("method=%s connections=%d depth=%u requests=%llu errors=%llu seconds=%.3f "
         "req_per_s=%.0f mb_per_s=%.1f p50_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f "
         "mean_us=%.1f\n",
         names[b.method], b.nconns, b.depth, (unsigned long long)b.completed,
         (unsigned long long)b.errors, secs, secs > 0 ? (double)b.completed / secs : 0,
         b.method == K_PING || secs <= 0 ? 0 : (double)b.completed * (double)b.size / secs / 1e6,
         kiln_hist_quantile(&b.hist, 0.5) / 1e3, kiln_hist_quantile(&b.hist, 0.99) / 1e3,
         kiln_hist_quantile(&b.hist, 0.999) / 1e3, b.hist.max / 1e3,
         b.hist.count ? (double)b.hist.sum / (double)b.hist.count / 1e3 : 0);
  if (b.errors) fprintf(stderr, "kiln-loadgen: %llu errors; first: %s\n",
                        (unsigned long long)b.errors, b.first_error);
  return b.errors ? 1 : 0;
}
