/* An open-addressing hash map from uint64_t keys to pointers (caller-owned storage).
 * Key 0 is reserved (never stored). Not thread-safe: one owner thread. */
#ifndef KILN_BASE_MAP_H
#define KILN_BASE_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct kiln_map_slot {
  uint64_t key; /* 0: empty; UINT64_MAX: deleted (tombstone) */
  void *value;
} kiln_map_slot_t;

typedef struct kiln_map {
  kiln_map_slot_t *slots;
  size_t cap;   /* power of two, or 0 */
  size_t count; /* live entries */
  size_t used;  /* live + tombstones */
} kiln_map_t;

void kiln_map_init(kiln_map_t *m);
void kiln_map_deinit(kiln_map_t *m);
/* Inserts or replaces. key must not be 0 or UINT64_MAX. */
KILN_MUST_USE kiln_status_t kiln_map_put(kiln_map_t *m, uint64_t key, void *value);
void *kiln_map_get(const kiln_map_t *m, uint64_t key);
/* Removes and returns the value, or NULL if absent. */
void *kiln_map_remove(kiln_map_t *m, uint64_t key);

/* Iteration: for (size_t i = 0; kiln_map_next(m, &i, &k, &v);) ... Removing the entry just
 * returned is allowed; inserting during iteration is not. */
int kiln_map_next(const kiln_map_t *m, size_t *iter, uint64_t *out_key, void **out_value);

/* FNV-1a over bytes, for maps keyed by strings (callers must handle collisions). */
uint64_t kiln_hash_bytes64(const void *p, size_t n);

#endif
