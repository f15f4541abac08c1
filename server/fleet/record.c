/* Signed registry records (record.h). */
#include "server/fleet/record.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "base/util.h"
#include "server/fleet/redis_conf.h"

kiln_status_t kiln_record_key_read(const char *path, uint8_t out_seed[32]) {
  uint8_t buf[33];
  size_t n = 0;
  kiln_status_t st = kiln_fleet_private_read(path, "the fleet key", buf, sizeof(buf), &n);
  if (!st && n != 32)
    st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "the fleet key %s must hold exactly 32 bytes, an Ed25519 seed "
                     "(`kiln fleet-key %s` makes one)", path, path);
  if (!st) memcpy(out_seed, buf, 32);
  sodium_memzero(buf, sizeof(buf));
  return st;
}

void kiln_record_key_public(const uint8_t seed[32], uint8_t out_pub[32], char *out_text) {
  uint8_t sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_seed_keypair(out_pub, sk, seed);
  sodium_memzero(sk, sizeof(sk));
  memcpy(out_text, "ed25519:", 8);
  kiln_hex(out_pub, 32, out_text + 8);
}

/* Plain Ed25519 (not Ed25519ph: Python's cryptography verifies plain signatures) over
 * KILN_RECORD_CONTEXT || record, assembled in one buffer; false when out of memory. */
static uint8_t *message(const uint8_t *record, size_t len, size_t *out_n) {
  size_t c = strlen(KILN_RECORD_CONTEXT);
  uint8_t *m = malloc(c + len);
  if (!m) return NULL;
  memcpy(m, KILN_RECORD_CONTEXT, c);
  memcpy(m + c, record, len);
  *out_n = c + len;
  return m;
}

bool kiln_record_seal(const uint8_t seed[32], const uint8_t *record, size_t len, uint8_t *out) {
  uint8_t pk[32], sk[crypto_sign_SECRETKEYBYTES];
  size_t mn;
  uint8_t *m = message(record, len, &mn);
  if (!m) return false;
  crypto_sign_seed_keypair(pk, sk, seed);
  memcpy(out, KILN_RECORD_MAGIC, 8);
  memcpy(out + 8, pk, 32);
  crypto_sign_detached(out + 40, NULL, m, mn, sk);
  memcpy(out + KILN_RECORD_HEAD, record, len);
  sodium_memzero(sk, sizeof(sk));
  free(m);
  return true;
}

static bool hex32(const char *s, size_t n, uint8_t out[32]) {
  size_t got = 0;
  return n == 64 && sodium_hex2bin(out, 32, s, n, NULL, &got, NULL) == 0 && got == 32;
}

kiln_status_t kiln_record_keys_read(const char *path, kiln_record_key_t **out, size_t *out_n) {
  FILE *f = fopen(path, "re");
  if (!f)
    return KILN_STATUS(errno == ENOENT ? KILN_E_NOT_FOUND : KILN_E_PERMISSION, "%s: %s", path, strerror(errno));
  /* the trust file decides whose records are believed: refuse one others could have written
   * (as ssh's StrictModes for authorized_keys) */
  struct stat sb;
  const char *bad = fstat(fileno(f), &sb) ? strerror(errno)
                    : !S_ISREG(sb.st_mode) ? "not a regular file"
                    : (sb.st_mode & 022) ? "writable by group or others (chmod go-w it)"
                    : (sb.st_uid != geteuid() && sb.st_uid != 0) ? "owned by another user (not you or root)"
                    : NULL;
  if (bad) {
    fclose(f);
    return KILN_STATUS(KILN_E_PERMISSION, "trusted keys %s: %s", path, bad);
  }
  kiln_record_key_t *keys = calloc(KILN_RECORD_MAX_KEYS, sizeof(*keys));
  size_t n = 0;
  char line[1024];
  int lineno = 0;
  kiln_status_t st = keys ? KILN_OK : KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  while (!st && fgets(line, sizeof(line), f)) {
    lineno++;
    size_t len = strlen(line);
    if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s:%d: a line longer than %zu bytes", path, lineno, len);
      break;
    }
    line[strcspn(line, "\r\n")] = 0;
    char *p = line + strspn(line, " \t");
    if (!*p || *p == '#') continue;
    char *sp = strpbrk(p, " \t");
    char *addr = sp ? sp + strspn(sp, " \t") : NULL;
    size_t alen = addr ? strcspn(addr, " \t") : 0;
    if (n == KILN_RECORD_MAX_KEYS)
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: more than %d keys", path, KILN_RECORD_MAX_KEYS);
    else if (strncmp(p, "ed25519:", 8) != 0 || !sp || !hex32(p + 8, (size_t)(sp - p - 8), keys[n].pub) ||
             alen == 0 || alen > 255 || addr[alen + strspn(addr + alen, " \t")] != 0)
      st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s:%d: not `ed25519:<64 hex digits> ADDR` (ADDR: an advertised "
                       "address or *)", path, lineno);
    else {
      memcpy(keys[n].addr, addr, alen);
      keys[n].addr[alen] = 0;
      n++;
    }
  }
  if (!st && ferror(f)) st = KILN_STATUS(KILN_E_PERMISSION, "%s: read error", path);
  fclose(f);
  if (st) {
    free(keys);
    return st;
  }
  *out = keys;
  *out_n = n;
  return KILN_OK;
}

const char *kiln_record_open(const uint8_t *v, size_t len, const char *addr, const kiln_record_key_t *keys,
                             size_t n, const uint8_t **out_record, size_t *out_len, bool *out_signed) {
  bool sealed = len >= 8 && memcmp(v, KILN_RECORD_MAGIC, 8) == 0;
  if (!sealed) {
    if (n) return "unsigned, and a trusted-keys file is in use";
    *out_record = v;
    *out_len = len;
    *out_signed = false;
    return NULL;
  }
  if (len <= KILN_RECORD_HEAD) return "signed, but shorter than its signature and a record";
  if (n) {
    bool trusted = false;
    for (size_t i = 0; i < n && !trusted; i++)
      trusted = memcmp(keys[i].pub, v + 8, 32) == 0 && (!strcmp(keys[i].addr, "*") || !strcmp(keys[i].addr, addr));
    if (!trusted) return "signed by a key not trusted for this address";
    size_t mn;
    uint8_t *m = message(v + KILN_RECORD_HEAD, len - KILN_RECORD_HEAD, &mn);
    if (!m) return "out of memory to check its signature";
    int bad = crypto_sign_verify_detached(v + 40, m, mn, v + 8);
    free(m);
    if (bad) return "its signature does not verify (forged or damaged)";
  }
  *out_record = v + KILN_RECORD_HEAD;
  *out_len = len - KILN_RECORD_HEAD;
  *out_signed = n > 0; /* true only for a signature checked against the trust file */
  return NULL;
}
