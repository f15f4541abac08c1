#include "base/buf.h"

#include <stdlib.h>
#include <string.h>

void kiln_buf_init(kiln_buf_t *b) { memset(b, 0, sizeof(*b)); }

void kiln_buf_deinit(kiln_buf_t *b) {
  free(b->data);
  memset(b, 0, sizeof(*b));
}

kiln_status_t kiln_buf_reserve(kiln_buf_t *b, size_t extra) {
  if (b->cap - b->len >= extra) return KILN_OK;
  if (extra > SIZE_MAX / 2 - b->len)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "buffer of %zu bytes is too large", extra);
  size_t cap = b->cap ? b->cap : 256;
  while (cap - b->len < extra) cap *= 2;
  uint8_t *p = realloc(b->data, cap);
  if (!p) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for %zu bytes", cap);
  b->data = p;
  b->cap = cap;
  return KILN_OK;
}

kiln_status_t kiln_buf_append(kiln_buf_t *b, const void *p, size_t n) {
  KILN_RETURN_IF_ERROR(kiln_buf_reserve(b, n));
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  return KILN_OK;
}

uint8_t *kiln_buf_release(kiln_buf_t *b, size_t *out_len) {
  uint8_t *p = b->data;
  *out_len = b->len;
  memset(b, 0, sizeof(*b));
  return p;
}
