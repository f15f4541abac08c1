/* A growable byte buffer (caller-owned storage: _init/_deinit). Not thread-safe. */
#ifndef KILN_BASE_BUF_H
#define KILN_BASE_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct kiln_buf {
  uint8_t *data;
  size_t len;
  size_t cap;
} kiln_buf_t;

void kiln_buf_init(kiln_buf_t *b);
void kiln_buf_deinit(kiln_buf_t *b);
/* Makes room for `extra` more bytes past len. */
KILN_MUST_USE kiln_status_t kiln_buf_reserve(kiln_buf_t *b, size_t extra);
KILN_MUST_USE kiln_status_t kiln_buf_append(kiln_buf_t *b, const void *p, size_t n);
/* Hands the bytes to the caller (free() them); the buffer is empty afterwards. */
uint8_t *kiln_buf_release(kiln_buf_t *b, size_t *out_len);

#endif
