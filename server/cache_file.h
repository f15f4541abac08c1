/* The cache's files: the entry format, reading with verification, durable writes, and the
 * scan at open. Internal to cache.c. Nothing here keeps state, so the write runs on a pool
 * thread and the rest on the loop thread.
 *
 * Layout: DIR/lock, DIR/objects/XX/<64 hex of the key> where XX is the first key byte.
 * A write goes to <hex>.tmp beside its final name and is renamed over it when complete,
 * so a name without a suffix only ever holds a whole file. Every file starts with:
 *
 *   offset  size  field
 *        0     8  magic "KILNART1"
 *        8     4  format version (1), little-endian
 *       12     4  header size (88), little-endian
 *       16     8  payload length, little-endian
 *       24    32  key
 *       56    32  BLAKE2b-256 over bytes 0..55 of the header, then the payload
 *       88     -  payload */
#ifndef KILN_SERVER_CACHE_FILE_H
#define KILN_SERVER_CACHE_FILE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "server/cache.h"

#define KILN_CACHE_HEADER_BYTES 88u
#define KILN_CACHE_FORMAT_VERSION 1u
#define KILN_CACHE_PATH_MAX 4096

struct kiln_cache_entry {
  atomic_uint refs;
  size_t len;
  uint8_t key[KILN_CACHE_KEY_BYTES];
  _Alignas(16) uint8_t data[];
};

/* One reference, bytes uninitialised; NULL when malloc fails. */
kiln_cache_entry_t *kiln_cache_entry_alloc(const uint8_t key[KILN_CACHE_KEY_BYTES], size_t len);

/* DIR/objects/XX/<hex><suffix>; suffix "" for the final name, ".tmp" for the temp file. */
void kiln_cache_file_path(char out[KILN_CACHE_PATH_MAX], const char *dir,
                          const uint8_t key[KILN_CACHE_KEY_BYTES], const char *suffix);

/* Writes e durably under its final name: temp file, fsync, rename, fsync of the directory.
 * On failure the temp file is unlinked and the final name is untouched. fault_errno: see
 * kiln_cache_config_t.test_write_errno. Any thread. */
kiln_status_t kiln_cache_file_write(const char *dir, const kiln_cache_entry_t *e, int fault_errno);

/* Reads and verifies the file at path against key. On success *out_entry is a new entry
 * (one reference) and the file's modification time is set to now, which carries LRU
 * recency across restarts. On failure *out_corrupt says whether the file is bad (the
 * caller deletes it) rather than unreadable; E_NOT_FOUND when the file is gone. */
kiln_status_t kiln_cache_file_read(const char *path, const uint8_t key[KILN_CACHE_KEY_BYTES],
                                   kiln_cache_entry_t **out_entry, bool *out_corrupt);

typedef void (*kiln_cache_scan_cb)(const uint8_t key[KILN_CACHE_KEY_BYTES], uint64_t file_bytes,
                                   int64_t mtime_ns, void *arg);

/* Creates DIR/objects, deletes temp files and foreign names in DIR/objects/XX, checks the
 * header of every entry (magic, version, key against its name, length against the file
 * size) and calls cb for each good one. Bad entries are deleted and counted in
 * *out_corrupt; leftovers in *out_leftovers. */
kiln_status_t kiln_cache_file_scan(const char *dir, kiln_cache_scan_cb cb, void *arg,
                                   uint64_t *out_corrupt, uint64_t *out_leftovers);

/* mkdir -p with mode 0700 for the parts it creates. */
kiln_status_t kiln_cache_mkdirs(const char *path);

#endif
