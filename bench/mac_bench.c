/* kiln-mac-bench: the candidate MACs of the remote tier's entries (server/fleet/remote.c,
 * docs/cache.md "The remote tier") over one entry of --bytes (default 1 MiB + 80), each as the
 * tier computes it (a context set up per entry, fed in --chunk pieces as a reply arrives,
 * then finished), on this CPU. Prints one line per MAC: median and best µs per entry and GB/s
 * (1e9 bytes) of the median, over --rounds runs each, interleaved round by round.
 *
 *   kiln-mac-bench [--bytes N] [--chunk N] [--rounds N] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/params.h>
#include <sodium.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint8_t secret[32], master[32], nonce[16], out[64];

/* EVP_MAC over msg in chunks: params as each MAC needs them. */
static int evp(EVP_MAC *m, const uint8_t *key, size_t klen, const OSSL_PARAM *params, const uint8_t *msg, size_t n,
               size_t chunk) {
  EVP_MAC_CTX *c = EVP_MAC_CTX_new(m);
  int ok = c && EVP_MAC_init(c, key, klen, params);
  for (size_t at = 0; ok && at < n; at += chunk) ok = EVP_MAC_update(c, msg + at, n - at < chunk ? n - at : chunk);
  size_t olen = 0;
  ok = ok && EVP_MAC_final(c, out, &olen, sizeof(out));
  EVP_MAC_CTX_free(c);
  return ok;
}

static EVP_MAC *hmac, *gmac, *poly;

static int run_hmac(const uint8_t *msg, size_t n, size_t chunk) {
  char d[] = "SHA256";
  OSSL_PARAM p[] = {OSSL_PARAM_construct_utf8_string("digest", d, 0), OSSL_PARAM_construct_end()};
  return evp(hmac, secret, sizeof(secret), p, msg, n, chunk);
}

/* AES-256-GCM with no plaintext: GHASH over the message as AAD; a random 96-bit IV. */
static int run_gmac(const uint8_t *msg, size_t n, size_t chunk) {
  char ci[] = "AES-256-GCM";
  OSSL_PARAM p[] = {OSSL_PARAM_construct_utf8_string("cipher", ci, 0),
                    OSSL_PARAM_construct_octet_string("iv", nonce, 12), OSSL_PARAM_construct_end()};
  return evp(gmac, master, 32, p, msg, n, chunk);
}

/* The one-time key: keyed BLAKE2b of the entry's head (build key, nonce), then Poly1305. */
static void one_time_key(const uint8_t *head, uint8_t k[32]) {
  crypto_generichash(k, 32, head, 64, master, sizeof(master));
}

static int run_poly_evp(const uint8_t *msg, size_t n, size_t chunk) {
  uint8_t k[32];
  one_time_key(msg, k);
  return evp(poly, k, 32, NULL, msg, n, chunk);
}

static int run_poly_sodium(const uint8_t *msg, size_t n, size_t chunk) {
  uint8_t k[32];
  one_time_key(msg, k);
  crypto_onetimeauth_state st;
  crypto_onetimeauth_init(&st, k);
  for (size_t at = 0; at < n; at += chunk) crypto_onetimeauth_update(&st, msg + at, n - at < chunk ? n - at : chunk);
  crypto_onetimeauth_final(&st, out);
  return 1;
}

static int run_blake2b(const uint8_t *msg, size_t n, size_t chunk) {
  crypto_generichash_state st;
  crypto_generichash_init(&st, master, 32, 32);
  for (size_t at = 0; at < n; at += chunk) crypto_generichash_update(&st, msg + at, n - at < chunk ? n - at : chunk);
  crypto_generichash_final(&st, out, 32);
  return 1;
}

static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  size_t bytes = (1u << 20) + 80, chunk = 1u << 20;
  int rounds = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--bytes")) bytes = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--chunk")) chunk = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
  }
  if (sodium_init() < 0 || !bytes || !chunk || rounds < 1) return 1;
  hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  gmac = EVP_MAC_fetch(NULL, "GMAC", NULL);
  poly = EVP_MAC_fetch(NULL, "POLY1305", NULL);
  if (!hmac || !gmac || !poly) {
    fprintf(stderr, "kiln-mac-bench: libcrypto lacks HMAC, GMAC or POLY1305\n");
    return 1;
  }
  uint8_t *msg = malloc(bytes);
  randombytes_buf(msg, bytes);
  randombytes_buf(secret, sizeof(secret));
  randombytes_buf(master, sizeof(master));
  randombytes_buf(nonce, sizeof(nonce));
  struct {
    const char *name;
    int (*fn)(const uint8_t *, size_t, size_t);
    uint64_t *ns;
  } m[] = {{"hmac-sha256 (openssl)", run_hmac, NULL},
           {"gmac aes-256-gcm (openssl)", run_gmac, NULL},
           {"poly1305 one-time key (openssl)", run_poly_evp, NULL},
           {"poly1305 one-time key (libsodium)", run_poly_sodium, NULL},
           {"blake2b-256 keyed (libsodium)", run_blake2b, NULL}};
  size_t nm = sizeof(m) / sizeof(m[0]);
  for (size_t j = 0; j < nm; j++) m[j].ns = calloc((size_t)rounds, sizeof(uint64_t));
  for (size_t j = 0; j < nm; j++) m[j].fn(msg, bytes, chunk); /* warm */
  for (int r = 0; r < rounds; r++)
    for (size_t j = 0; j < nm; j++) {
      uint64_t t0 = now_ns();
      if (!m[j].fn(msg, bytes, chunk)) return 1;
      m[j].ns[r] = now_ns() - t0;
    }
  printf("bytes=%zu chunk=%zu rounds=%d\n", bytes, chunk, rounds);
  for (size_t j = 0; j < nm; j++) {
    qsort(m[j].ns, (size_t)rounds, sizeof(uint64_t), cmp);
    double med = (double)m[j].ns[rounds / 2];
    printf("%-36s p50_us=%8.1f best_us=%8.1f GB/s=%.2f\n", m[j].name, med / 1e3, (double)m[j].ns[0] / 1e3,
           (double)bytes / med);
    free(m[j].ns);
  }
  free(msg);
  return 0;
}
