/* libFuzzer target: a TLS 1.3 record stream through kiln_tls13_open (protocol/tls13.c), as
 * kilnd and libkiln read it from a peer after the handshake.
 *
 * The input is a script: records sealed here with the peer's keys by an AEAD implementation
 * of this file's own (application data with any padding, alerts, handshake messages such as
 * KeyUpdate, empty or unknown content types), raw bytes spliced between them (headers, parts
 * of records, garbage), then the stream cut into pieces of the script's sizes and opened into
 * destinations of the script's sizes. Besides memory errors it checks that:
 *   - what is handed out is always a prefix of the application data sealed, in order: nothing
 *     unauthenticated, reordered or from another content type comes out;
 *   - after an error nothing more comes out, and the error names an alert to send;
 *   - a stream of only well-formed data records comes out whole, however it is cut. */
#include <openssl/evp.h>
#include <stdint.h>
#include <string.h>

#include "protocol/tls13.h"
#include "tests/fuzz/fuzz_check.h"

typedef struct script {
  const uint8_t *p;
  size_t n;
} script_t;

static unsigned take(script_t *s, unsigned max) {
  if (!s->n) return 0;
  unsigned v = *s->p++;
  s->n--;
  if (max > 255 && s->n) {
    v = (v << 8) | *s->p++;
    s->n--;
  }
  return max ? v % (max + 1) : v;
}

/* One record of content type `type` with `pad` zeros, sealed with the peer's sending keys. */
static size_t seal(EVP_CIPHER_CTX *c, const kiln_tls13_dir_t *d, uint64_t seq, uint8_t type,
                   const uint8_t *p, size_t n, size_t pad, uint8_t *out) {
  uint8_t iv[12], inner[KILN_TLS13_MAX_RECORD];
  memcpy(iv, d->iv, 12);
  for (int i = 0; i < 8; i++) iv[11 - i] ^= (uint8_t)(seq >> (8 * i));
  memcpy(inner, p, n);
  inner[n] = type;
  memset(inner + n + 1, 0, pad);
  size_t len = n + 1 + pad + 16;
  out[0] = 23;
  out[1] = out[2] = 3;
  out[3] = (uint8_t)(len >> 8);
  out[4] = (uint8_t)len;
  int k;
  CHECK(EVP_EncryptInit_ex(c, EVP_aes_128_gcm(), NULL, d->key, iv) == 1);
  CHECK(EVP_EncryptUpdate(c, NULL, &k, out, 5) == 1);
  CHECK(EVP_EncryptUpdate(c, out + 5, &k, inner, (int)(n + 1 + pad)) == 1);
  CHECK(EVP_EncryptFinal_ex(c, out + 5 + k, &k) == 1);
  CHECK(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, out + 5 + n + 1 + pad) == 1);
  return 5 + len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const uint8_t secret_a[32] = {1, 2, 3}, secret_b[32] = {4, 5, 6};
  kiln_tls13_t rx, peer;
  CHECK(kiln_tls13_init(&rx, 0x1301, secret_a, secret_b, 32) == KILN_OK);
  CHECK(kiln_tls13_init(&peer, 0x1301, secret_b, secret_a, 32) == KILN_OK);
  static EVP_CIPHER_CTX *c;
  if (!c) CHECK(c = EVP_CIPHER_CTX_new());
  script_t s = {data, size};
  enum { cap = 1u << 18 };
  static uint8_t stream[cap], sent[cap], got[cap];
  size_t len = 0, sent_len = 0;
  uint64_t seq = 0;
  bool clean = true; /* only data records, all authentic: everything must come out */
  uint8_t body[KILN_TLS13_MAX_PLAIN];
  for (int op = 0; s.n && op < 64 && len + KILN_TLS13_MAX_RECORD < cap; op++) {
    unsigned kind = take(&s, 7), n, pad;
    switch (kind) {
      case 0: case 1: case 2: /* application data, sometimes padded */
        n = take(&s, 65535) % (KILN_TLS13_MAX_PLAIN + 1);
        for (unsigned i = 0; i < n; i++) body[i] = (uint8_t)(i * 31 + op);
        pad = kind == 2 ? take(&s, 255) : 0;
        if (n + pad > KILN_TLS13_MAX_PLAIN) pad = KILN_TLS13_MAX_PLAIN - n; /* RFC 8446 §5.4 */
        len += seal(c, &peer.tx, seq++, 23, body, n, pad, stream + len);
        memcpy(sent + sent_len, body, n);
        sent_len += n;
        break;
      case 3: /* an alert */
        body[0] = (uint8_t)take(&s, 0);
        body[1] = (uint8_t)take(&s, 0);
        len += seal(c, &peer.tx, seq++, 21, body, take(&s, 3), 0, stream + len);
        clean = false;
        break;
      case 4: /* handshake messages (KeyUpdate: 24 0 0 1 x) */
        n = take(&s, 16);
        for (unsigned i = 0; i < n; i++) body[i] = (uint8_t)take(&s, 0);
        len += seal(c, &peer.tx, seq++, 22, body, n, 0, stream + len);
        clean = false;
        break;
      case 5: /* another content type, or none (all padding) */
        len += seal(c, &peer.tx, seq++, (uint8_t)take(&s, 0), body, 0, take(&s, 8), stream + len);
        clean = false;
        break;
      default: /* raw bytes */
        n = take(&s, 64);
        for (unsigned i = 0; i < n; i++) stream[len++] = (uint8_t)take(&s, 0);
        clean = false;
        break;
    }
  }
  /* Opened in pieces and into destinations of the script's sizes. */
  size_t off = 0, out = 0;
  kiln_tls13_result_t r = KILN_TLS13_AGAIN;
  while (off < len && r != KILN_TLS13_ERROR && r != KILN_TLS13_CLOSED) {
    size_t piece = s.n ? 1 + take(&s, 65535) : len - off; /* the script's end: the rest */
    if (piece > len - off) piece = len - off;
    const uint8_t *in = stream + off;
    size_t in_len = piece;
    off += piece;
    for (;;) {
      size_t room = s.n ? 1 + take(&s, 40000) : cap, k = 0;
      if (room > cap - out) room = cap - out;
      r = kiln_tls13_open(&rx, &in, &in_len, got + out, room, &k);
      CHECK(r == KILN_TLS13_DATA ? k > 0 && k <= room : k == 0);
      out += k;
      if (r != KILN_TLS13_DATA) break;
    }
    if (r == KILN_TLS13_AGAIN) CHECK(kiln_tls13_keep(&rx, in, in_len) == KILN_OK);
  }
  CHECK(out <= sent_len && memcmp(got, sent, out) == 0);
  if (r == KILN_TLS13_ERROR) {
    CHECK(rx.error[0]);
    size_t k = 0;
    const uint8_t *none = NULL;
    size_t none_len = 0;
    CHECK(kiln_tls13_open(&rx, &none, &none_len, got, 16, &k) == KILN_TLS13_ERROR && k == 0);
    uint8_t alert[KILN_TLS13_ALERT_BYTES];
    CHECK(kiln_tls13_seal_alert(&rx, alert) <= KILN_TLS13_ALERT_BYTES);
  }
  if (clean) CHECK(out == sent_len && r != KILN_TLS13_ERROR);
  kiln_tls13_deinit(&rx);
  kiln_tls13_deinit(&peer);
  return 0;
}
