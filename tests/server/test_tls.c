/* TLS listeners against the real kilnd (issue 11 §8), with certificates made at test time
 * (make_pki.sh). The client here is OpenSSL over memory BIOs, so a test decides how the
 * ciphertext reaches the socket: in one piece, or one byte per send. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "tests/server/harness.h"
#include "tests/server/pki.h"

static daemon_t d;
static char pki[128];

static const char *pem(const char *name) { return pki_path(pki, name); }

static void make_pki(void) { pki_make(pki, sizeof(pki)); }

static void teardown(void) {
  if (d.pid) daemon_stop(&d);
  pki_remove(pki);
}

/* kilnd with a tls: listener beside the harness's tcp and unix ones. */
static void start_tls(const char *const *more) {
  const char *argv[32] = {"--listen", "tls:127.0.0.1:0", "--tls-cert", pem("server.pem"),
                          "--tls-key", pem("server.key")};
  int n = 6;
  for (; more && *more && n < 31; more++) argv[n++] = *more;
  argv[n] = NULL;
  daemon_start(&d, argv);
  cr_assert_gt(d.tls_port, 0, "no tls: line in the readiness output");
}

TestSuite(tls, .init = make_pki, .fini = teardown, .timeout = 240);

/* --- a TLS client over memory BIOs --------------------------------------------------------- */

typedef struct tls_client {
  int fd;
  SSL_CTX *ctx;
  SSL *ssl;
  BIO *rbio, *wbio;
  bool dribble; /* ciphertext goes out one byte per send */
  bool scatter; /* ciphertext goes out in sends of random sizes (1 byte to 70,000) */
  bool random_records; /* plaintext goes in records of random sizes (1 byte to 16 KiB) */
  bool eof;
  kiln_reader_t reader;
  kiln_rpc_msg_t msg;
  bool have_msg;
  char error[256];
} tls_client_t;

static void out(tls_client_t *t) {
  static char buf[1 << 18];
  int n;
  while ((n = BIO_read(t->wbio, buf, sizeof(buf))) > 0) {
    for (size_t off = 0, step; off < (size_t)n; off += step) {
      step = t->dribble ? 1 : t->scatter ? 1 + (size_t)rand() % 70000 : (size_t)n;
      step = KILN_MIN(step, (size_t)n - off);
      for (size_t sent = 0; sent < step;) { /* a blocking socket may still take less */
        ssize_t k = send(t->fd, buf + off + sent, step - sent, MSG_NOSIGNAL);
        if (k < 0) return;
        sent += (size_t)k;
      }
    }
  }
}

/* Reads what the socket has into the session; false at EOF or after timeout_ms. */
static bool in(tls_client_t *t, int timeout_ms) {
  struct pollfd p = {t->fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return false;
  char buf[65536];
  ssize_t n = recv(t->fd, buf, sizeof(buf), 0);
  if (n <= 0) {
    t->eof = true;
    return false;
  }
  BIO_write(t->rbio, buf, (int)n);
  return true;
}

static void note_error(tls_client_t *t) {
  unsigned long e = ERR_peek_last_error();
  if (e) ERR_error_string_n(e, t->error, sizeof(t->error));
  else snprintf(t->error, sizeof(t->error), "%s", t->eof ? "end of stream" : "no error");
  ERR_clear_error();
}

/* Connects and shakes hands. ca: the CA file to trust; cert/key: a client certificate or
 * NULL. Returns whether the handshake completed (t->error says why not). */
static bool tls_connect(tls_client_t *t, const char *ca, const char *cert, const char *key,
                        bool dribble) {
  memset(t, 0, sizeof(*t));
  t->dribble = dribble;
  t->fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d.tls_port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert(connect(t->fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect: %s", strerror(errno));
  int one = 1;
  setsockopt(t->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  lim.max_message = 1ull << 34;
  kiln_reader_init(&t->reader, &lim, 65536);
  t->ctx = SSL_CTX_new(TLS_client_method());
  cr_assert(SSL_CTX_load_verify_locations(t->ctx, ca, NULL) == 1);
  SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
  if (cert) {
    cr_assert(SSL_CTX_use_certificate_file(t->ctx, cert, SSL_FILETYPE_PEM) == 1);
    cr_assert(SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) == 1);
  }
  t->ssl = SSL_new(t->ctx);
  t->rbio = BIO_new(BIO_s_mem());
  t->wbio = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(t->rbio, -1);
  SSL_set_bio(t->ssl, t->rbio, t->wbio);
  SSL_set_connect_state(t->ssl);
  SSL_set1_host(t->ssl, "127.0.0.1");
  for (;;) {
    int rc = SSL_do_handshake(t->ssl);
    out(t);
    if (rc == 1) return true;
    if (SSL_get_error(t->ssl, rc) != SSL_ERROR_WANT_READ || !in(t, 10000)) {
      note_error(t);
      return false;
    }
  }
}

static void tls_close(tls_client_t *t) {
  if (t->have_msg) kiln_rpc_msg_deinit(&t->msg);
  kiln_reader_deinit(&t->reader);
  SSL_free(t->ssl);
  SSL_CTX_free(t->ctx);
  close(t->fd);
}

/* Sends plaintext; with `per_record`, one byte per TLS record. */
static void tls_send(tls_client_t *t, const void *p, size_t n, bool per_record) {
  const uint8_t *b = p;
  for (size_t off = 0, k; off < n; off += k) {
    k = KILN_MIN(per_record ? 1 : t->random_records ? 1 + (size_t)rand() % 16384 : n, n - off);
    size_t done = 0;
    cr_assert(SSL_write_ex(t->ssl, b + off, k, &done) == 1 && done == k);
    if (per_record || BIO_ctrl_pending(t->wbio) > (1u << 20)) out(t);
  }
  out(t);
}

static void tls_request(tls_client_t *t, uint32_t msgid, const char *method, const kiln_buf_t *params) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t p;
  kiln_packer_init(&p, &b);
  kiln_rpc_pack_request_head(&p.pk, msgid, method);
  msgpack_pack_array(&p.pk, params ? 1 : 0);
  if (params) cr_assert_null(kiln_buf_append(&b, params->data, params->len));
  tls_send(t, b.data, b.len, false);
  kiln_buf_deinit(&b);
}

/* The next message; false at EOF, on a TLS error (t->error) or after timeout_ms. */
static bool tls_recv(tls_client_t *t, int timeout_ms) {
  if (t->have_msg) kiln_rpc_msg_deinit(&t->msg);
  t->have_msg = false;
  for (;;) {
    const uint8_t *m;
    size_t len;
    kiln_frame_result_t fr = kiln_reader_next(&t->reader, &m, &len);
    if (fr == KILN_FRAME_MESSAGE) {
      bool has;
      cr_assert_null(kiln_rpc_parse(m, len, &t->msg, &has), "reply does not parse");
      t->have_msg = true;
      return true;
    }
    cr_assert(fr != KILN_FRAME_ERROR, "reply stream broken");
    size_t cap;
    void *space = kiln_reader_space(&t->reader, &cap);
    size_t got = 0;
    if (SSL_read_ex(t->ssl, space, cap, &got) == 1) {
      kiln_reader_commit(&t->reader, got);
      continue;
    }
    int e = SSL_get_error(t->ssl, 0);
    out(t);
    if (e != SSL_ERROR_WANT_READ || !in(t, timeout_ms)) {
      note_error(t);
      return false;
    }
  }
}

static uint64_t tls_code(const tls_client_t *t) {
  const msgpack_object *e = t->msg.error;
  return e && e->type == MSGPACK_OBJECT_ARRAY ? e->via.array.ptr[0].via.u64 : 0;
}

static void expect_pong(tls_client_t *t, uint32_t msgid) {
  cr_assert(tls_recv(t, 10000), "no reply to %u: %s", msgid, t->error);
  cr_assert_eq(t->msg.msgid, msgid);
  cr_assert(kiln_obj_str_eq(t->msg.result, "pong"));
}

/* --- tests ------------------------------------------------------------------------------ */

Test(tls, ping_and_a_pipeline_over_tls) {
  start_tls(NULL);
  tls_client_t t;
  cr_assert(tls_connect(&t, pem("ca.pem"), NULL, NULL, false), "handshake: %s", t.error);
  cr_assert_str_eq(SSL_get_version(t.ssl), "TLSv1.3");
  tls_request(&t, 1, "ping", NULL);
  expect_pong(&t, 1);
  enum { N = 2000 };
  kiln_buf_t all;
  kiln_buf_init(&all);
  kiln_packer_t p;
  kiln_packer_init(&p, &all);
  for (uint32_t i = 0; i < N; i++) {
    kiln_rpc_pack_request_head(&p.pk, 100 + i, "ping");
    msgpack_pack_array(&p.pk, 0);
  }
  tls_send(&t, all.data, all.len, false);
  kiln_buf_deinit(&all);
  static bool seen[N];
  memset(seen, 0, sizeof(seen));
  for (int i = 0; i < N; i++) {
    cr_assert(tls_recv(&t, 10000), "reply %d missing: %s", i, t.error);
    cr_assert_lt(t.msg.msgid - 100, N);
    cr_assert_not(seen[t.msg.msgid - 100]);
    seen[t.msg.msgid - 100] = true;
  }
  tls_close(&t);
  /* The plain listeners of the same daemon are unaffected. */
  client_t c;
  client_connect_tcp(&c, &d);
  client_send(&c, 1, "ping", NULL);
  cr_assert(client_recv(&c, 10000));
  cr_assert(kiln_obj_str_eq(c.msg.result, "pong"));
  client_close(&c);
}

Test(tls, ciphertext_one_byte_per_send_and_plaintext_one_byte_per_record) {
  start_tls(NULL);
  tls_client_t t;
  cr_assert(tls_connect(&t, pem("ca.pem"), NULL, NULL, true), "handshake: %s", t.error);
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t p;
  kiln_packer_init(&p, &b);
  kiln_rpc_pack_request_head(&p.pk, 7, "ping");
  msgpack_pack_array(&p.pk, 0);
  tls_send(&t, b.data, b.len, true);
  expect_pong(&t, 7);
  kiln_buf_deinit(&b);
  tls_close(&t);
}

/* Uploads n float32s, downloads them and compares. */
static void round_trip(tls_client_t *t, uint32_t n) {
  float *v = malloc((size_t)n * 4);
  for (uint32_t i = 0; i < n; i++) v[i] = (float)i * 0.25f;
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_cstr(&b.p.pk, "tensor");
  msgpack_pack_map(&b.p.pk, 3);
  kiln_pack_kv_str(&b.p.pk, "dtype", "float32");
  kiln_pack_cstr(&b.p.pk, "shape");
  msgpack_pack_array(&b.p.pk, 1);
  msgpack_pack_uint32(&b.p.pk, n);
  kiln_pack_cstr(&b.p.pk, "data");
  msgpack_pack_bin(&b.p.pk, n * 4);
  msgpack_pack_bin_body(&b.p.pk, v, (size_t)n * 4);
  tls_request(t, 1, "upload", &b.buf);
  pb_end(&b);
  cr_assert(tls_recv(t, 60000), "no upload reply: %s", t->error);
  cr_assert_eq(tls_code(t), 0);
  uint64_t id = kiln_params_find(t->msg.result, "id")->via.u64;
  pb_begin(&b, 1);
  kiln_pack_kv_u64(&b.p.pk, "id", id);
  tls_request(t, 2, "download", &b.buf);
  pb_end(&b);
  cr_assert(tls_recv(t, 60000), "no download reply: %s", t->error);
  cr_assert_eq(tls_code(t), 0);
  const msgpack_object *data = kiln_params_find(t->msg.result, "data");
  cr_assert(data && data->via.bin.size == n * 4);
  cr_assert(memcmp(data->via.bin.ptr, v, (size_t)n * 4) == 0, "downloaded bytes differ");
  free(v);
}

/* A large upload and download: replies are encrypted as the socket drains, zero-copy extra
 * bytes included. */
Test(tls, sixty_four_mib_round_trip) {
  setenv("KILN_TLS_THREADS", "2", 1); /* through kilnd's TLS pool, whatever the cores */
  start_tls(NULL);
  tls_client_t t;
  cr_assert(tls_connect(&t, pem("ca.pem"), NULL, NULL, false), "handshake: %s", t.error);
  round_trip(&t, 16u << 20);
  tls_close(&t);
}

Test(tls, a_client_trusting_another_ca_refuses_the_server) {
  start_tls(NULL);
  tls_client_t t;
  cr_assert_not(tls_connect(&t, pem("other-ca.pem"), NULL, NULL, false),
                "the handshake succeeded against an untrusted certificate");
  cr_assert(strstr(t.error, "certificate verify failed"), "error: %s", t.error);
  tls_close(&t);
  cr_assert(tls_connect(&t, pem("ca.pem"), NULL, NULL, false), "handshake: %s", t.error);
  tls_request(&t, 1, "ping", NULL);
  expect_pong(&t, 1);
  tls_close(&t);
}

/* With --tls-client-ca, a client without a certificate, or with one from another CA, gets no
 * answer: in TLS 1.3 the server's verdict comes as an alert after the client's Finished. */
Test(tls, client_certificates_when_required) {
  const char *more[] = {"--tls-client-ca", NULL, NULL};
  more[1] = pem("ca.pem");
  start_tls(more);
  struct {
    const char *cert, *key;
    bool ok;
  } cases[] = {
      {NULL, NULL, false},
      {pem("other-client.pem"), pem("other-client.key"), false},
      {pem("client.pem"), pem("client.key"), true},
  };
  for (size_t i = 0; i < 3; i++) {
    tls_client_t t;
    bool hs = tls_connect(&t, pem("ca.pem"), cases[i].cert, cases[i].key, false);
    bool answered = false;
    if (hs) {
      tls_request(&t, 1, "ping", NULL);
      answered = tls_recv(&t, 10000);
    }
    cr_assert_eq(answered, cases[i].ok, "case %zu: answered=%d (%s)", i, answered, t.error);
    if (!cases[i].ok) /* an alert (certificate required, unknown CA) or the close */
      cr_assert(strstr(t.error, "alert") || t.eof, "case %zu: %s", i, t.error);
    tls_close(&t);
  }
}

static int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
  return fd;
}

/* True once the peer closes (EOF or reset) within timeout_ms; bytes before it are read. */
static bool closed_within(int fd, int timeout_ms) {
  char buf[4096];
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0) return false;
  }
}

Test(tls, plaintext_before_the_handshake_is_closed) {
  start_tls(NULL);
  int fd = raw_connect(d.tls_port);
  const uint8_t ping[] = {0x94, 0x00, 0x01, 0xa4, 'p', 'i', 'n', 'g', 0x90};
  cr_assert(send(fd, ping, sizeof(ping), 0) == (ssize_t)sizeof(ping));
  cr_assert(closed_within(fd, 10000), "kilnd kept a connection that sent plaintext");
  close(fd);
  fd = raw_connect(d.tls_port);
  char junk[4096];
  memset(junk, 0x16, sizeof(junk)); /* looks like a handshake record, is not one */
  send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
  cr_assert(closed_within(fd, 10000), "kilnd kept a connection that sent junk records");
  close(fd);
  tls_client_t t;
  cr_assert(tls_connect(&t, pem("ca.pem"), NULL, NULL, false), "handshake: %s", t.error);
  tls_request(&t, 1, "ping", NULL);
  expect_pong(&t, 1);
  tls_close(&t);
}

Test(tls, a_handshake_that_stalls_is_closed) {
  const char *more[] = {"--handshake-timeout", "1", NULL};
  start_tls(more);
  int silent = raw_connect(d.tls_port);
  /* The first bytes of a ClientHello, then nothing. */
  int partial = raw_connect(d.tls_port);
  const uint8_t hello[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03};
  cr_assert(send(partial, hello, sizeof(hello), 0) == (ssize_t)sizeof(hello));
  cr_assert(closed_within(silent, 15000), "a silent connection outlived the handshake timeout");
  cr_assert(closed_within(partial, 15000), "a stalled handshake outlived the timeout");
  close(silent);
  close(partial);
  /* A connection that finished its handshake stays, however long it is quiet. */
  tls_client_t t;
  cr_assert(tls_connect(&t, pem("ca.pem"), NULL, NULL, false), "handshake: %s", t.error);
  usleep(2500 * 1000);
  tls_request(&t, 1, "ping", NULL);
  expect_pong(&t, 1);
  tls_close(&t);
}

static void copy_file(const char *from, const char *to) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
  cr_assert(system(cmd) == 0);
}

/* Whether a client trusting `ca` gets a pong. */
static bool answers(const char *ca) {
  tls_client_t t;
  bool ok = tls_connect(&t, ca, NULL, NULL, false);
  if (ok) {
    tls_request(&t, 1, "ping", NULL);
    ok = tls_recv(&t, 10000) && kiln_obj_str_eq(t.msg.result, "pong");
  }
  tls_close(&t);
  return ok;
}

/* SIGHUP loads the certificate and key again (a rotation); files that do not load leave the
 * old ones in force. */
Test(tls, sighup_reloads_the_certificate) {
  char cert[192], key[192];
  snprintf(cert, sizeof(cert), "%s", pem("live.pem"));
  snprintf(key, sizeof(key), "%s", pem("live.key"));
  copy_file(pem("server.pem"), cert);
  copy_file(pem("server.key"), key);
  const char *argv[] = {"--listen", "tls:127.0.0.1:0", "--tls-cert", cert, "--tls-key", key, NULL};
  daemon_start(&d, argv);
  cr_assert(answers(pem("ca.pem")));
  tls_client_t open_one;
  cr_assert(tls_connect(&open_one, pem("ca.pem"), NULL, NULL, false));
  /* A broken file: the old certificate stays. */
  FILE *f = fopen(cert, "w");
  fputs("not a certificate\n", f);
  fclose(f);
  kill(d.pid, SIGHUP);
  char log[160], cmd[256];
  snprintf(log, sizeof(log), "%s/kilnd.log", d.dir);
  snprintf(cmd, sizeof(cmd), "grep -q tls_reload_failed '%s'", log);
  int i = 0;
  while (system(cmd) != 0 && i++ < 200) usleep(50 * 1000);
  cr_assert_lt(i, 200, "no tls_reload_failed in the log");
  cr_assert(answers(pem("ca.pem")), "a failed reload dropped the working certificate");
  /* A new certificate from another CA: new connections get it. */
  copy_file(pem("other-server.pem"), cert);
  copy_file(pem("other-server.key"), key);
  kill(d.pid, SIGHUP);
  for (i = 0; !answers(pem("other-ca.pem")) && i < 200; i++) usleep(50 * 1000);
  cr_assert_lt(i, 200, "the new certificate is not served");
  cr_assert_not(answers(pem("ca.pem")), "the old certificate is still served");
  /* The connection opened before keeps working. */
  tls_request(&open_one, 5, "ping", NULL);
  expect_pong(&open_one, 5);
  tls_close(&open_one);
}

/* An upload in records of random sizes (1 byte to 16 KiB, padded to 512-byte blocks), its
 * ciphertext in sends of random sizes that cut records anywhere, then its download: every
 * byte where it belongs. */
Test(tls, records_of_random_sizes_cut_anywhere) {
  setenv("KILN_TLS_THREADS", "3", 1); /* padded records end the pool's runs */
  start_tls(NULL);
  tls_client_t t;
  cr_assert(tls_connect(&t, pem("ca.pem"), NULL, NULL, false), "handshake: %s", t.error);
  SSL_set_block_padding(t.ssl, 512);
  t.scatter = t.random_records = true;
  srand(11);
  round_trip(&t, 2u << 20);
  tls_close(&t);
}

/* KeyUpdate from the client, with and without asking for kilnd's: requests keep being
 * answered under the new keys. */
Test(tls, key_updates_from_the_client) {
  start_tls(NULL);
  tls_client_t t;
  cr_assert(tls_connect(&t, pem("ca.pem"), NULL, NULL, false), "handshake: %s", t.error);
  for (uint32_t i = 1; i <= 6; i++) {
    cr_assert(SSL_key_update(t.ssl, i % 2 ? SSL_KEY_UPDATE_REQUESTED : SSL_KEY_UPDATE_NOT_REQUESTED) == 1);
    tls_request(&t, i, "ping", NULL); /* the KeyUpdate goes first */
    expect_pong(&t, i);
  }
  tls_close(&t);
}

/* A ping record with byte `at` changed (the length, the ciphertext or the tag). */
static void send_forged(tls_client_t *t, size_t at) {
  const uint8_t ping[] = {0x94, 0x00, 0x05, 0xa4, 'p', 'i', 'n', 'g', 0x90};
  size_t done = 0;
  cr_assert(SSL_write_ex(t->ssl, ping, sizeof(ping), &done) == 1);
  uint8_t rec[512];
  int n = BIO_read(t->wbio, rec, sizeof(rec));
  cr_assert_gt(n, (int)at);
  rec[at] ^= 0x02; /* at 4: 26 bytes become 24, and the tag is read from the wrong place */
  cr_assert(send(t->fd, rec, (size_t)n, 0) == n);
}

/* A record changed in flight ends its own connection with a bad_record_mac alert; the other
 * connections of the daemon go on. */
Test(tls, a_forged_record_costs_only_its_connection) {
  start_tls(NULL);
  tls_client_t other;
  cr_assert(tls_connect(&other, pem("ca.pem"), NULL, NULL, false), "handshake: %s", other.error);
  size_t where[] = {4, 8, 24}; /* the length, the ciphertext, the tag (9 + 1 + 16 bytes) */
  for (size_t i = 0; i < 3; i++) {
    tls_client_t t;
    cr_assert(tls_connect(&t, pem("ca.pem"), NULL, NULL, false), "handshake: %s", t.error);
    send_forged(&t, where[i]);
    cr_assert_not(tls_recv(&t, 10000), "a forged record was answered");
    cr_assert(strstr(t.error, "bad record mac"), "byte %zu: %s", where[i], t.error);
    tls_close(&t);
  }
  tls_request(&other, 1, "ping", NULL);
  expect_pong(&other, 1);
  tls_close(&other);
}

/* Peers that stop inside a record and close, and records no peer may send: each costs its
 * own connection only. */
Test(tls, hostile_records_cost_only_their_connection) {
  start_tls(NULL);
  tls_client_t other;
  cr_assert(tls_connect(&other, pem("ca.pem"), NULL, NULL, false), "handshake: %s", other.error);
  const uint8_t big[] = {23, 3, 3, 0x41, 0x01};             /* longer than TLS allows */
  const uint8_t clear_alert[] = {21, 3, 3, 0, 2, 2, 40};    /* an unprotected alert */
  const uint8_t header_only[] = {23, 3, 3, 0x10, 0x00};     /* a record's start, then close */
  struct {
    const uint8_t *bytes;
    size_t n;
    const char *alert; /* what kilnd answers, or NULL: it just closes */
  } cases[] = {
      {big, sizeof(big), "record overflow"},
      {clear_alert, sizeof(clear_alert), "unexpected message"},
      {header_only, sizeof(header_only), NULL},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    tls_client_t t;
    cr_assert(tls_connect(&t, pem("ca.pem"), NULL, NULL, false), "handshake: %s", t.error);
    cr_assert(send(t.fd, cases[i].bytes, cases[i].n, 0) == (ssize_t)cases[i].n);
    if (cases[i].alert) {
      cr_assert_not(tls_recv(&t, 10000), "case %zu was answered", i);
      cr_assert(strstr(t.error, cases[i].alert), "case %zu: %s", i, t.error);
    }
    tls_close(&t);
  }
  /* Half of a large upload, cut inside a record, then the socket closed. */
  tls_client_t t;
  cr_assert(tls_connect(&t, pem("ca.pem"), NULL, NULL, false), "handshake: %s", t.error);
  const uint8_t head[] = {0x94, 0x00, 0x01, 0xa6, 'u', 'p', 'l', 'o', 'a', 'd', 0x91, 0x81, 0xa6,
                          't', 'e', 'n', 's', 'o', 'r', 0x83, 0xa5, 'd', 't', 'y', 'p', 'e', 0xa5,
                          'u', 'i', 'n', 't', '8', 0xa5, 's', 'h', 'a', 'p', 'e', 0x91, 0xce, 0x00,
                          0x40, 0x00, 0x00, 0xa4, 'd', 'a', 't', 'a', 0xc6, 0x00, 0x40, 0x00, 0x00};
  uint8_t *body = calloc(1, 1u << 21);
  size_t done;
  cr_assert(SSL_write_ex(t.ssl, head, sizeof(head), &done) == 1);
  cr_assert(SSL_write_ex(t.ssl, body, 1u << 21, &done) == 1);
  free(body);
  static uint8_t ct[1u << 22];
  int n = BIO_read(t.wbio, ct, sizeof(ct));
  cr_assert_gt(n, 1 << 21);
  cr_assert(send(t.fd, ct, (size_t)n - 7000, 0) == n - 7000);
  tls_close(&t);
  tls_request(&other, 1, "ping", NULL);
  expect_pong(&other, 1);
  tls_close(&other);
  tls_client_t fresh;
  cr_assert(tls_connect(&fresh, pem("ca.pem"), NULL, NULL, false), "handshake: %s", fresh.error);
  tls_request(&fresh, 2, "ping", NULL);
  expect_pong(&fresh, 2);
  tls_close(&fresh);
}

/* close_notify from the client: kilnd closes and says close_notify too. */
Test(tls, close_notify_both_ways) {
  start_tls(NULL);
  tls_client_t t;
  cr_assert(tls_connect(&t, pem("ca.pem"), NULL, NULL, false), "handshake: %s", t.error);
  tls_request(&t, 1, "ping", NULL);
  expect_pong(&t, 1);
  SSL_shutdown(t.ssl);
  out(&t);
  cr_assert_not(tls_recv(&t, 10000), "kilnd answered after close_notify");
  cr_assert(SSL_get_shutdown(t.ssl) & SSL_RECEIVED_SHUTDOWN, "no close_notify from kilnd: %s", t.error);
  tls_close(&t);
}

/* The partial-message timer sees a peer that stops inside a TLS record (no plaintext of the
 * message has arrived yet). */
Test(tls, a_peer_stalling_inside_a_record_is_dropped) {
  const char *more[] = {"--partial-timeout", "1", NULL};
  start_tls(more);
  tls_client_t t;
  cr_assert(tls_connect(&t, pem("ca.pem"), NULL, NULL, false), "handshake: %s", t.error);
  const uint8_t ping[] = {0x94, 0x00, 0x05, 0xa4, 'p', 'i', 'n', 'g', 0x90};
  size_t done = 0;
  cr_assert(SSL_write_ex(t.ssl, ping, sizeof(ping), &done) == 1);
  char rec[512];
  int n = BIO_read(t.wbio, rec, sizeof(rec));
  cr_assert_gt(n, 10);
  cr_assert(send(t.fd, rec, (size_t)n / 2, 0) == n / 2);
  cr_assert(tls_recv(&t, 20000), "no timeout notification: %s", t.error);
  cr_assert_eq(t.msg.type, KILN_RPC_NOTIFICATION);
  cr_assert_eq(kiln_params_find(t.msg.params, "code")->via.u64, 11);
  cr_assert_not(tls_recv(&t, 10000), "the connection stayed open");
  tls_close(&t);
}

/* Start-up rules: exit status 1 and a message naming what is missing. */
static int start_fails(const char *const *args, char *msg, size_t cap) {
  const char *kilnd = getenv("KILND");
  char log[160];
  snprintf(log, sizeof(log), "%s/start.log", pki);
  const char *argv[24] = {kilnd, "--cache-dir", pem("cache"), "--ready-fd", "9"};
  int n = 5;
  for (; *args && n < 23; args++) argv[n++] = *args;
  argv[n] = NULL;
  int p[2];
  cr_assert(pipe(p) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]); /* first: it may be fd 9 itself */
    dup2(p[1], 9);
    int lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(lf, 2);
    execv(kilnd, (char *const *)argv);
    _exit(127);
  }
  close(p[1]);
  char ready[512] = "";
  ssize_t r = read(p[0], ready, sizeof(ready) - 1);
  close(p[0]);
  int ws;
  if (r > 0) { /* it started: stop it */
    kill(pid, SIGTERM);
    waitpid(pid, &ws, 0);
    return 0;
  }
  waitpid(pid, &ws, 0);
  FILE *f = fopen(log, "r");
  size_t k = f ? fread(msg, 1, cap - 1, f) : 0;
  msg[k] = 0;
  if (f) fclose(f);
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

Test(tls, beyond_loopback_plain_tcp_needs_insecure_tcp) {
  char tokens[192], msg[4096];
  snprintf(tokens, sizeof(tokens), "%s/tokens", pki);
  FILE *f = fopen(tokens, "w");
  fprintf(f, "tls-test-token-0123456789 alpha\n");
  fclose(f);
  const char *plain[] = {"--listen", "tcp:0.0.0.0:0", "--tokens", tokens, NULL};
  cr_assert_eq(start_fails(plain, msg, sizeof(msg)), 1);
  cr_assert(strstr(msg, "--insecure-tcp"), "message: %s", msg);
  const char *insecure[] = {"--listen", "tcp:0.0.0.0:0", "--tokens", tokens, "--insecure-tcp", NULL};
  cr_assert_eq(start_fails(insecure, msg, sizeof(msg)), 0, "did not start: %s", msg);
  const char *tls[] = {"--listen", "tls:0.0.0.0:0", "--tokens", tokens, "--tls-cert",
                       pem("server.pem"), "--tls-key", pem("server.key"), NULL};
  cr_assert_eq(start_fails(tls, msg, sizeof(msg)), 0, "did not start: %s", msg);
  const char *no_auth[] = {"--listen", "tls:0.0.0.0:0", "--tls-cert", pem("server.pem"),
                           "--tls-key", pem("server.key"), NULL};
  cr_assert_eq(start_fails(no_auth, msg, sizeof(msg)), 1);
  cr_assert(strstr(msg, "--tls-client-ca"), "message: %s", msg);
  const char *mtls[] = {"--listen", "tls:0.0.0.0:0", "--tls-cert", pem("server.pem"),
                        "--tls-key", pem("server.key"), "--tls-client-ca", pem("ca.pem"), NULL};
  cr_assert_eq(start_fails(mtls, msg, sizeof(msg)), 0, "did not start: %s", msg);
  const char *no_cert[] = {"--listen", "tls:127.0.0.1:0", NULL};
  cr_assert_eq(start_fails(no_cert, msg, sizeof(msg)), 1);
  cr_assert(strstr(msg, "--tls-cert"), "message: %s", msg);
  const char *bad_key[] = {"--listen", "tls:127.0.0.1:0", "--tls-cert", pem("server.pem"),
                           "--tls-key", pem("client.key"), NULL};
  cr_assert_eq(start_fails(bad_key, msg, sizeof(msg)), 1);
  cr_assert(strstr(msg, "does not match"), "message: %s", msg);
}
