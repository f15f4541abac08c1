/* The cache's files: the entry format, reading with verification, durable writes, and the
 * scan at open. Internal to cache.c. Nothing here keeps state but the root's descriptors and
 * secret, which never change once open, so the write runs on a pool thread and the rest on
 * the loop thread.
 *
 * The directory is a trust boundary (docs/cache.md "Trust"): it must belong to this
 * process's user and be writable by nobody else; every file inside is reached from the
 * directory's descriptor one component at a time with O_NOFOLLOW, so no symbolic link
 * inside it is ever followed; and every entry carries a MAC keyed with the cache's secret.
 *
 * Layout: DIR/lock, DIR/secret, DIR/objects/XX/<64 hex of the key> where XX is the first
 * key byte. A write goes to <hex>.tmp beside its final name and is renamed over it when
 * complete, so a name without a suffix only ever holds a whole file. Every file starts with:
 *
 *   offset  size  field
 *        0     8  magic "KILNART1"
 *        8     4  format version (2), little-endian
 *       12     4  header size (88), little-endian
 *       16     8  payload length, little-endian
 *       24    32  key
 *       56    32  BLAKE2b-256 keyed with DIR/secret, over bytes 0..55 of the header, then
 *                 the payload
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
#define KILN_CACHE_FORMAT_VERSION 2u /* 1: the same layout with an unkeyed checksum */
#define KILN_CACHE_SECRET_BYTES 32u
#define KILN_CACHE_PATH_MAX 4096

struct kiln_cache_entry {
  atomic_uint refs;
  size_t len;
  void *user;                  /* what the entry's user attached (kiln_cache_entry_set_user) */
  void (*user_free)(void *);   /* called with `user` when the last reference goes */
  uint8_t *bytes;              /* the payload: `data` below, or inside `block` */
  void *block;                 /* NULL, or the malloc'd block it adopted (freed with it) */
  uint8_t key[KILN_CACHE_KEY_BYTES];
  _Alignas(16) uint8_t data[];
};

/* One reference, bytes uninitialised; NULL when malloc fails. */
kiln_cache_entry_t *kiln_cache_entry_alloc(const uint8_t key[KILN_CACHE_KEY_BYTES], size_t len);

/* The open directory: descriptors and the MAC key. */
typedef struct kiln_cache_root {
  char *dir;   /* the path, for messages */
  int dir_fd;  /* DIR itself */
  int lock_fd; /* DIR/lock, flock'ed while open */
  uint8_t secret[KILN_CACHE_SECRET_BYTES];
} kiln_cache_root_t;

/* Creates DIR (mode 0700, with parents) if missing, refuses it unless it is a directory of
 * this process's user that no one else can write, takes the lock (E_UNAVAILABLE when another
 * kilnd holds it), then reads DIR/secret, or creates it (32 random bytes, mode 0600) at the
 * first start. A symbolic link in place of the secret, the lock or objects/ is refused. The
 * path DIR itself is resolved as given (an operator may point it through a link). */
KILN_MUST_USE kiln_status_t kiln_cache_root_open(const char *dir, kiln_cache_root_t *out_root);
void kiln_cache_root_close(kiln_cache_root_t *root);

/* DIR/objects/XX/<hex><suffix>; suffix "" for the final name, ".tmp" for the temp file. For
 * messages and tests: the cache itself never opens by path. */
void kiln_cache_file_path(char out[KILN_CACHE_PATH_MAX], const char *dir,
                          const uint8_t key[KILN_CACHE_KEY_BYTES], const char *suffix);

/* Writes e durably under its final name: temp file, fsync, rename, fsync of the directory.
 * On failure the temp file is unlinked and the final name is untouched. fault_errno: see
 * kiln_cache_config_t.test_write_errno. Any thread. */
KILN_MUST_USE kiln_status_t kiln_cache_file_write(const kiln_cache_root_t *root, const kiln_cache_entry_t *e, int fault_errno);

/* Reads and verifies the entry of key (header, length, key, MAC). On success *out_entry is a
 * new entry (one reference) and the file's modification time is set to now, which carries
 * LRU recency across restarts. On failure *out_corrupt says whether the file is bad (the
 * caller deletes it) rather than unreadable; E_NOT_FOUND when the file is gone. */
KILN_MUST_USE kiln_status_t kiln_cache_file_read(const kiln_cache_root_t *root, const uint8_t key[KILN_CACHE_KEY_BYTES],
                                   kiln_cache_entry_t **out_entry, bool *out_corrupt);

/* Unlinks the entry of key (the name only, never through a link): 0 or an errno. */
int kiln_cache_file_unlink(const kiln_cache_root_t *root, const uint8_t key[KILN_CACHE_KEY_BYTES]);
/* Sets the entry's modification time to now (recency across restarts). */
void kiln_cache_file_touch(const kiln_cache_root_t *root, const uint8_t key[KILN_CACHE_KEY_BYTES]);

typedef void (*kiln_cache_scan_cb)(const uint8_t key[KILN_CACHE_KEY_BYTES], uint64_t file_bytes,
                                   int64_t mtime_ns, void *arg);

/* Creates DIR/objects, deletes temp files, foreign names and symbolic links in
 * DIR/objects/XX (a link in place of XX itself is removed, never followed), checks the
 * header of every entry (magic, version, key against its name, length against the file
 * size) and calls cb for each good one. Bad entries are deleted and counted in
 * *out_corrupt; leftovers in *out_leftovers. A subdirectory that another user owns or
 * others can write is refused. The MAC is checked on read, not here. */
KILN_MUST_USE kiln_status_t kiln_cache_file_scan(const kiln_cache_root_t *root, kiln_cache_scan_cb cb, void *arg,
                                   uint64_t *out_corrupt, uint64_t *out_leftovers);

/* mkdir -p with mode 0700 for the parts it creates. */
KILN_MUST_USE kiln_status_t kiln_cache_mkdirs(const char *path);

#endif
