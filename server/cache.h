/* The artifact cache of kilnd: a memory LRU in front of a content-addressed disk store
 * (DESIGN §5, docs/cache.md).
 *
 * Key: a 32-byte BLAKE2b hash computed by the caller over everything that determines the
 * build; value: opaque bytes (an encoded artifact). The store never interprets the bytes
 * and trusts nothing it reads back: every disk read is checked against a MAC keyed with the
 * directory's secret, the key and the length in the file's header, and an entry that fails
 * is deleted and reported as a miss. The directory must be private to kilnd's user, and no
 * link inside it is followed (docs/cache.md "Trust").
 *
 * Threads: everything here is called on the loop thread that opened the cache, except
 * kiln_cache_entry_retain/_release/_data/_user, which any thread may call (the refcount is
 * atomic), so that an entry can be handed to another thread. Disk writes run on libuv's
 * thread pool (uv_queue_work); the index, both LRU lists and the counters belong to the
 * loop thread alone. */
#ifndef KILN_SERVER_CACHE_H
#define KILN_SERVER_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/status.h"

#define KILN_CACHE_KEY_BYTES 32
#define KILN_CACHE_DEFAULT_MAX_DISK_BYTES (4ull << 30)
#define KILN_CACHE_DEFAULT_MAX_MEM_BYTES (256ull << 20)

typedef struct kiln_cache kiln_cache_t;
typedef struct kiln_cache_entry kiln_cache_entry_t;

typedef struct kiln_cache_config {
  const char *dir;         /* required; created with its parents (0700) if missing */
  uint64_t max_disk_bytes; /* 0: KILN_CACHE_DEFAULT_MAX_DISK_BYTES; counts whole files */
  uint64_t max_mem_bytes;  /* 0: KILN_CACHE_DEFAULT_MAX_MEM_BYTES; counts payload bytes */
  /* Test only: when nonzero, every disk write fails with this errno after the header has
   * reached the temp file, as a full disk would (ENOSPC). Production leaves it 0. */
  int test_write_errno;
} kiln_cache_config_t;

typedef struct kiln_cache_stats {
  uint64_t hits_mem, hits_disk, misses;
  uint64_t corrupt;      /* entries found bad (at open or on a read) and deleted */
  uint64_t write_errors; /* disk writes that failed; their entries stayed memory-only */
  uint64_t evictions_mem, evictions_disk;
  uint64_t entries_mem, bytes_mem;   /* in the memory LRU (payload bytes) */
  uint64_t entries_disk, bytes_disk; /* complete files on disk (header included) */
  uint64_t writes_pending;           /* queued or running on the thread pool */
} kiln_cache_stats_t;

typedef void (*kiln_cache_close_cb)(void *arg);

/* Opens the store in cfg->dir: creates it, refuses it with E_PERMISSION unless this
 * process's user owns it and no one else can write it, takes an exclusive lock on DIR/lock
 * (a second kilnd on the same dir is refused with E_UNAVAILABLE), reads or makes
 * DIR/secret, deletes links inside it (never following them), deletes temp files left by writes
 * that a crash interrupted, reads the header of every entry (dropping the ones that are
 * truncated, misnamed or not ours) and indexes the rest, oldest modification time first
 * for disk LRU. Synchronous: call it before the loop serves requests. On success the
 * caller owns *out_cache and ends it with kiln_cache_close. */
KILN_MUST_USE kiln_status_t kiln_cache_open(uv_loop_t *loop, const kiln_cache_config_t *cfg,
                              kiln_cache_t **out_cache);

/* Asynchronous, like uv_close: stops the cache, lets queued and running disk writes finish
 * (they are durable when cb runs), then frees the cache and calls cb(arg) on the loop
 * thread (cb may be NULL). cb always runs from the loop, never inside this call. No cache
 * call may follow; the loop must keep running until cb (uv_run does: the pending work
 * keeps it alive). Entries still retained by callers stay valid after the cache is gone. */
void kiln_cache_close(kiln_cache_t *cache, kiln_cache_close_cb cb, void *arg);

/* Looks the key up in memory, then on disk. A disk hit is read and verified synchronously
 * on the loop thread (about 20 us for a few KiB; 1 to 2 ms per MiB, mostly the MAC,
 * so a 16 MiB artifact holds the loop for tens of ms) and promoted into memory. Returns a new reference, which the caller
 * releases, or NULL on a miss (a bad entry found on the way is deleted and counted). */
kiln_cache_entry_t *kiln_cache_get(kiln_cache_t *cache, const uint8_t key[KILN_CACHE_KEY_BYTES]);

/* Copies bytes into memory now and queues the disk write (temp file, fsync, rename, fsync
 * of the directory) on the thread pool. A key already present is not written again (its
 * recency is refreshed); the same key with a different length is E_INVALID_ARGUMENT. A
 * failed write (full disk) is logged and counted, leaves no file behind, and the entry
 * stays memory-only. E_RESOURCE_EXHAUSTED when the copy cannot be allocated or the bytes
 * exceed both budgets (then nothing is stored). */
KILN_MUST_USE kiln_status_t kiln_cache_put(kiln_cache_t *cache, const uint8_t key[KILN_CACHE_KEY_BYTES],
                             const uint8_t *bytes, size_t len);

/* As kiln_cache_put, with an entry the caller made (kiln_cache_entry_new) and filled: the
 * cache keeps a reference to it, no copy (when the key is present already the cache keeps
 * what it has). The caller keeps its own reference. */
KILN_MUST_USE kiln_status_t kiln_cache_put_entry(kiln_cache_t *cache, kiln_cache_entry_t *entry);

/* Drops the key from memory and disk (a caller that found the bytes unusable). A write in
 * flight for it is deleted when it lands. Absent keys are fine. */
void kiln_cache_remove(kiln_cache_t *cache, const uint8_t key[KILN_CACHE_KEY_BYTES]);

void kiln_cache_stats(const kiln_cache_t *cache, kiln_cache_stats_t *out_stats);

/* One entry as kiln_cache_items reports it. */
typedef struct kiln_cache_item {
  uint8_t key[KILN_CACHE_KEY_BYTES];
  uint64_t file_bytes; /* header + payload on disk or being written; 0 for memory only */
  uint64_t mem_bytes;  /* payload bytes in the memory LRU; 0 when not there */
  int64_t used_ns;     /* wall clock (CLOCK_REALTIME) of its last use as the file's mtime
                        * records it: a put, a disk hit, a memory hit at most once a minute */
  bool on_disk;        /* a complete file */
  bool writing;        /* its write is queued or running */
} kiln_cache_item_t;

/* Every entry the cache holds (memory, disk, writes in flight), in no particular order, into
 * a new array the caller frees with free(). E_RESOURCE_EXHAUSTED when it cannot be
 * allocated. Loop thread. */
KILN_MUST_USE kiln_status_t kiln_cache_items(const kiln_cache_t *cache, kiln_cache_item_t **out_items,
                                             size_t *out_count);

/* Entries: immutable bytes, shared by reference. Memory eviction drops the cache's own
 * reference only, so bytes a caller retains stay valid until its last release. */
const uint8_t *kiln_cache_entry_data(const kiln_cache_entry_t *entry, size_t *out_len);
const uint8_t *kiln_cache_entry_key(const kiln_cache_entry_t *entry);
kiln_cache_entry_t *kiln_cache_entry_retain(kiln_cache_entry_t *entry);
void kiln_cache_entry_release(kiln_cache_entry_t *entry);
/* A new entry of len bytes for key, outside the cache, with one reference: the caller fills
 * its bytes and puts it (kiln_cache_put_entry) or releases it. NULL when out of memory. */
kiln_cache_entry_t *kiln_cache_entry_new(const uint8_t key[KILN_CACHE_KEY_BYTES], size_t len);
uint8_t *kiln_cache_entry_bytes(kiln_cache_entry_t *entry); /* before it is put */
/* As kiln_cache_entry_new, for bytes the caller has already: the entry takes over `block` (a
 * malloc'd block holding the len bytes at `bytes`, freed with the entry's last reference)
 * instead of a copy (the remote tier's reply buffer, server/fleet/remote.h). NULL when out
 * of memory: block is then still the caller's. */
kiln_cache_entry_t *kiln_cache_entry_adopt(const uint8_t key[KILN_CACHE_KEY_BYTES], void *block, uint8_t *bytes,
                                           size_t len);
/* What a user of the entry keeps with it (kilnd's decoded kernel table, server/modules.h):
 * set once, on the loop thread (false when one is set already); free_fn(user) runs when the
 * last reference goes, on whichever thread releases it. */
bool kiln_cache_entry_set_user(kiln_cache_entry_t *entry, void *user, void (*free_fn)(void *));
void *kiln_cache_entry_user(const kiln_cache_entry_t *entry);

#endif
