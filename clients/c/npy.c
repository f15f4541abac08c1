/* .npy reading and writing (numpy's NEP 1 format). */
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static kiln_status_t bad(const char *why) {
  return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "not a .npy file kiln can read: %s", why);
}

/* --- Reading the header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } */

typedef struct cursor {
  const char *p, *end;
} cursor_t;

static void skip_ws(cursor_t *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static bool eat(cursor_t *c, char ch) {
  skip_ws(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return true;
  }
  return false;
}

/* A quoted Python string literal without escapes (numpy never writes any in these keys). */
static bool string(cursor_t *c, const char **out, size_t *out_n) {
  skip_ws(c);
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return false;
  char q = *c->p++;
  const char *start = c->p;
  while (c->p < c->end && *c->p != q) c->p++;
  if (c->p >= c->end) return false;
  *out = start;
  *out_n = (size_t)(c->p - start);
  c->p++;
  return true;
}

static bool word(cursor_t *c, const char *w) {
  skip_ws(c);
  size_t n = strlen(w);
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return false;
  c->p += n;
  return true;
}

static kiln_status_t parse_descr(const char *s, size_t n, kiln_dtype_t *out) {
  static const struct {
    const char *code;
    kiln_dtype_t dtype;
  } table[] = {
      {"f2", KILN_FLOAT16}, {"f4", KILN_FLOAT32}, {"f8", KILN_FLOAT64}, {"i1", KILN_INT8},
      {"i2", KILN_INT16},   {"i4", KILN_INT32},   {"i8", KILN_INT64},   {"u1", KILN_UINT8},
      {"u2", KILN_UINT16},  {"u4", KILN_UINT32},  {"u8", KILN_UINT64},  {"b1", KILN_BOOL},
  };
  if (n < 2) goto unsupported;
  char order = s[0];
  const char *code = s + 1;
  size_t cn = n - 1;
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
    if (strlen(table[i].code) != cn || memcmp(table[i].code, code, cn) != 0) continue;
    size_t size = kiln_dtype_size(table[i].dtype);
    if (order == '>' && size > 1)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "the array is big-endian ('%.*s'); kiln tensors are little-endian: save "
                         "arr.astype(arr.dtype.newbyteorder('<')) instead",
                         (int)n, s);
    if (order != '<' && order != '|' && order != '=' && order != '>') goto unsupported;
    *out = table[i].dtype;
    return KILN_OK;
  }
  if (n >= 2 && s[1] == 'O')
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "object arrays (dtype=object) hold Python objects, not numbers; kiln "
                       "cannot store them");
unsupported:
  return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                     "dtype '%.*s' is not a kiln dtype; use one of float16 float32 float64 int8 "
                     "int16 int32 int64 uint8 uint16 uint32 uint64 bool",
                     (int)(n < 32 ? n : 32), s);
}

static kiln_status_t parse_shape(cursor_t *c, kiln_tensor_desc_t *d) {
  if (!eat(c, '(')) return bad("'shape' is not a tuple");
  d->ndim = 0;
  for (;;) {
    if (eat(c, ')')) return KILN_OK;
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return bad("'shape' holds a non-integer");
    uint64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
      if (v > (UINT64_MAX - 9) / 10) return bad("a dimension of 'shape' is too large");
      v = v * 10 + (uint64_t)(*c->p++ - '0');
    }
    if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2 long */
    if (d->ndim == KILN_MAX_DIMS)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "the array has more than %d dimensions",
                         KILN_MAX_DIMS);
    d->shape[d->ndim++] = v;
    if (!eat(c, ',')) {
      if (!eat(c, ')')) return bad("'shape' is not a tuple of integers");
      return KILN_OK;
    }
  }
}

static kiln_status_t parse_dict(const char *p, size_t n, kiln_tensor_desc_t *d) {
  cursor_t c = {p, p + n};
  bool have_descr = false, have_order = false, have_shape = false;
  if (!eat(&c, '{')) return bad("the header is not a dict");
  while (!eat(&c, '}')) {
    const char *key;
    size_t kn;
    if (!string(&c, &key, &kn) || !eat(&c, ':')) return bad("malformed header dict");
    if (kn == 5 && memcmp(key, "descr", 5) == 0) {
      const char *s;
      size_t sn;
      skip_ws(&c);
      if (c.p < c.end && *c.p == '[')
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                           "structured dtypes (records) are not kiln tensors; save each field "
                           "as its own array");
      if (!string(&c, &s, &sn)) return bad("'descr' is not a string");
      KILN_RETURN_IF_ERROR(parse_descr(s, sn, &d->dtype));
      have_descr = true;
    } else if (kn == 13 && memcmp(key, "fortran_order", 13) == 0) {
      if (word(&c, "True"))
        return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                           "the array is in Fortran (column-major) order; kiln tensors are "
                           "C-contiguous: save np.ascontiguousarray(arr) instead");
      if (!word(&c, "False")) return bad("'fortran_order' is not True or False");
      have_order = true;
    } else if (kn == 5 && memcmp(key, "shape", 5) == 0) {
      KILN_RETURN_IF_ERROR(parse_shape(&c, d));
      have_shape = true;
    } else {
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "unknown key '%.*s' in the .npy header",
                         (int)(kn < 32 ? kn : 32), key);
    }
    if (!eat(&c, ',')) {
      if (!eat(&c, '}')) return bad("malformed header dict");
      break;
    }
  }
  if (!have_descr || !have_order || !have_shape)
    return bad("the header lacks one of 'descr', 'fortran_order', 'shape'");
  return KILN_OK;
}

kiln_status_t kiln_npy_parse(const uint8_t *p, size_t len, kiln_tensor_desc_t *out_desc,
                             size_t *out_data_offset) {
  if (len < 10 || memcmp(p, MAGIC, 6) != 0) return bad("it does not start with \\x93NUMPY");
  uint8_t major = p[6];
  size_t hlen, start;
  if (major == 1) {
    hlen = (size_t)p[8] | (size_t)p[9] << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (len < 12) return bad("truncated header");
    hlen = (size_t)p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
    start = 12;
  } else {
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, ".npy format version %u.%u is not supported "
                       "(1.0, 2.0 and 3.0 are)", major, p[7]);
  }
  if (hlen > len - start) return bad("truncated header");
  kiln_tensor_desc_t d = {0};
  KILN_RETURN_IF_ERROR(parse_dict((const char *)p + start, hlen, &d));
  uint64_t nbytes = kiln_dtype_size(d.dtype);
  for (uint32_t i = 0; i < d.ndim; i++) {
    if (d.shape[i] == 0) {
      nbytes = 0;
      break;
    }
    if (nbytes > KILN_TENSOR_MAX_BYTES / d.shape[i])
      return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "the array is larger than kiln's 2^46 bytes");
    nbytes *= d.shape[i];
  }
  d.nbytes = nbytes;
  size_t off = start + hlen;
  if (nbytes > len - off)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "the file is truncated: the header announces %llu data bytes, %zu follow",
                       (unsigned long long)nbytes, len - off);
  *out_desc = d;
  *out_data_offset = off;
  return KILN_OK;
}

kiln_status_t kiln_npy_open(const char *path, kiln_npy_t *out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return KILN_STATUS(KILN_E_NOT_FOUND, "cannot open %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s is not a regular file", path);
  }
  size_t len = (size_t)st.st_size;
  void *m = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  int err = errno;
  close(fd);
  if (m == MAP_FAILED)
    return len ? KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cannot map %s: %s", path, strerror(err))
               : KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s is empty, not a .npy file", path);
  kiln_npy_t n = {.map = m, .map_len = len};
  size_t off;
  kiln_status_t s = kiln_npy_parse(m, len, &n.desc, &off);
  if (s) {
    munmap(m, len);
    return kiln_status_annotate(s, "%s", path);
  }
  n.data = (const uint8_t *)m + off;
  *out = n;
  return KILN_OK;
}

void kiln_npy_close(kiln_npy_t *n) {
  if (n->map) munmap(n->map, n->map_len);
  n->map = NULL;
}

/* --- Writing ---------------------------------------------------------------------------- */

static const char *descr_of(kiln_dtype_t d) {
  switch (d) {
    case KILN_FLOAT16: return "<f2";
    case KILN_BFLOAT16: return "<u2"; /* no numpy dtype: the raw bits */
    case KILN_FLOAT32: return "<f4";
    case KILN_FLOAT64: return "<f8";
    case KILN_INT8: return "|i1";
    case KILN_INT16: return "<i2";
    case KILN_INT32: return "<i4";
    case KILN_INT64: return "<i8";
    case KILN_UINT8: return "|u1";
    case KILN_UINT16: return "<u2";
    case KILN_UINT32: return "<u4";
    case KILN_UINT64: return "<u8";
    case KILN_BOOL: return "|b1";
    default: return NULL;
  }
}

size_t kiln_npy_header(const kiln_tensor_desc_t *desc, char *out, size_t cap) {
  const char *descr = descr_of(desc->dtype);
  if (!descr) return 0;
  char dict[64 + KILN_MAX_DIMS * 22];
  int n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (",
                   descr);
  for (uint32_t i = 0; i < desc->ndim; i++)
    n += snprintf(dict + n, sizeof(dict) - (size_t)n, "%s%llu", i ? ", " : "",
                  (unsigned long long)desc->shape[i]);
  n += snprintf(dict + n, sizeof(dict) - (size_t)n, "%s), }", desc->ndim == 1 ? "," : "");
  /* numpy pads with spaces and a final newline so that the data starts 64-byte aligned. */
  size_t pre = 10;
  size_t total = (pre + (size_t)n + 1 + 63) / 64 * 64;
  if (total - pre > 65535) { /* version 2.0: a 4-byte header length */
    pre = 12;
    total = (pre + (size_t)n + 1 + 63) / 64 * 64;
  }
  if (total > cap) return 0;
  size_t hlen = total - pre;
  memcpy(out, MAGIC, 6);
  out[6] = pre == 10 ? 1 : 2;
  out[7] = 0;
  out[8] = (char)(hlen & 0xff);
  out[9] = (char)(hlen >> 8 & 0xff);
  if (pre == 12) {
    out[10] = (char)(hlen >> 16 & 0xff);
    out[11] = (char)(hlen >> 24 & 0xff);
  }
  memcpy(out + pre, dict, (size_t)n);
  memset(out + pre + n, ' ', hlen - (size_t)n - 1);
  out[total - 1] = '\n';
  return total;
}

static bool write_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    b += w;
    n -= (size_t)w;
  }
  return true;
}

kiln_status_t kiln_npy_write(const char *path, const kiln_tensor_desc_t *desc, const void *data) {
  char header[2048];
  size_t hn = kiln_npy_header(desc, header, sizeof(header));
  if (!hn)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "dtype %s cannot be written to .npy",
                       kiln_dtype_name(desc->dtype));
  size_t pn = strlen(path);
  char *tmp = malloc(pn + 8);
  if (!tmp) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(tmp, path, pn);
  memcpy(tmp + pn, ".XXXXXX", 8);
  /* A reader of path sees the old file or the whole new one, never half of it. */
  int fd = mkstemp(tmp);
  if (fd < 0) {
    kiln_status_t s = KILN_STATUS(KILN_E_PERMISSION, "cannot create %s: %s", tmp, strerror(errno));
    free(tmp);
    return s;
  }
  mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask); /* mkstemp makes 0600; a saved array is an ordinary file */
  bool ok = write_all(fd, header, hn) && write_all(fd, data, (size_t)desc->nbytes);
  int err = errno;
  if (close(fd) < 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && rename(tmp, path) < 0) {
    ok = false;
    err = errno;
  }
  kiln_status_t s = KILN_OK;
  if (!ok) {
    unlink(tmp);
    s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cannot write %s: %s", path, strerror(err));
  }
  free(tmp);
  return s;
}
