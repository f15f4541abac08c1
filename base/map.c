#include "base/map.h"

#include <stdlib.h>
#include <string.h>

#define TOMB UINT64_MAX

static inline uint64_t mix(uint64_t x) {
  /* splitmix64 finaliser: keys may be sequential or random; spread them either way. */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

void kiln_map_init(kiln_map_t *m) { memset(m, 0, sizeof(*m)); }

void kiln_map_deinit(kiln_map_t *m) {
  free(m->slots);
  memset(m, 0, sizeof(*m));
}

static kiln_status_t grow(kiln_map_t *m) {
  size_t cap = m->cap ? m->cap : 16;
  while ((m->count + 1) * 2 > cap) cap *= 2;
  kiln_map_slot_t *slots = calloc(cap, sizeof(*slots));
  if (!slots) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory growing a map");
  for (size_t i = 0; i < m->cap; i++) {
    uint64_t k = m->slots[i].key;
    if (k == 0 || k == TOMB) continue;
    size_t j = mix(k) & (cap - 1);
    while (slots[j].key) j = (j + 1) & (cap - 1);
    slots[j] = m->slots[i];
  }
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  m->used = m->count;
  return KILN_OK;
}

kiln_status_t kiln_map_put(kiln_map_t *m, uint64_t key, void *value) {
  if (key == 0 || key == TOMB) return KILN_STATUS(KILN_E_INTERNAL, "reserved map key");
  if ((m->used + 1) * 4 > m->cap * 3) KILN_RETURN_IF_ERROR(grow(m));
  size_t mask = m->cap - 1, j = mix(key) & mask;
  kiln_map_slot_t *tomb = NULL;
  for (;; j = (j + 1) & mask) {
    kiln_map_slot_t *s = &m->slots[j];
    if (s->key == key) {
      s->value = value;
      return KILN_OK;
    }
    if (s->key == TOMB && !tomb) tomb = s;
    if (s->key == 0) {
      if (tomb) s = tomb;
      else m->used++;
      s->key = key;
      s->value = value;
      m->count++;
      return KILN_OK;
    }
  }
}

static kiln_map_slot_t *find(const kiln_map_t *m, uint64_t key) {
  if (!m->cap || key == 0 || key == TOMB) return NULL;
  size_t mask = m->cap - 1, j = mix(key) & mask;
  for (;; j = (j + 1) & mask) {
    kiln_map_slot_t *s = &m->slots[j];
    if (s->key == key) return s;
    if (s->key == 0) return NULL;
  }
}

void *kiln_map_get(const kiln_map_t *m, uint64_t key) {
  kiln_map_slot_t *s = find(m, key);
  return s ? s->value : NULL;
}

void *kiln_map_remove(kiln_map_t *m, uint64_t key) {
  kiln_map_slot_t *s = find(m, key);
  if (!s) return NULL;
  void *v = s->value;
  s->key = TOMB;
  s->value = NULL;
  m->count--;
  return v;
}

int kiln_map_next(const kiln_map_t *m, size_t *iter, uint64_t *out_key, void **out_value) {
  for (size_t i = *iter; i < m->cap; i++) {
    uint64_t k = m->slots[i].key;
    if (k == 0 || k == TOMB) continue;
    *iter = i + 1;
    if (out_key) *out_key = k;
    if (out_value) *out_value = m->slots[i].value;
    return 1;
  }
  *iter = m->cap;
  return 0;
}

uint64_t kiln_hash_bytes64(const void *p, size_t n) {
  const uint8_t *b = p;
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}
