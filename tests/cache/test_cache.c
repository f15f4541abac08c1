/* The artifact cache against real files in a temp dir and a real libuv loop: hits, restarts,
 * damaged files, leftovers, both evictions, failed writes, repeated keys, close. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "base/util.h"
#include "server/cache.h"
#include "server/cache_file.h"

static uv_loop_t loop;
static char dir[64];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  return remove(path);
}

static void setup(void) {
  cr_assert_eq(uv_loop_init(&loop), 0);
  strcpy(dir, "/tmp/kiln-cache-test-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
  /* a cache left open would keep work on the loop: every test closes what it opens */
  cr_expect_eq(uv_loop_close(&loop), 0, "loop still has handles or requests");
  nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(cache, .init = setup, .fini = teardown, .timeout = 60);

static void key_of(int i, uint8_t key[32]) {
  char s[32];
  snprintf(s, sizeof(s), "key-%d", i);
  kiln_hash(s, strlen(s), key);
}

static uint8_t *bytes_of(int i, size_t len) {
  uint8_t *b = malloc(len ? len : 1);
  for (size_t j = 0; j < len; j++) b[j] = (uint8_t)(i * 31 + j * 7);
  return b;
}

static kiln_cache_t *open_cache(uint64_t max_disk, uint64_t max_mem, int fail_errno) {
  kiln_cache_config_t cfg = {.dir = dir, .max_disk_bytes = max_disk, .max_mem_bytes = max_mem,
                             .test_write_errno = fail_errno};
  kiln_cache_t *c = NULL;
  kiln_status_t s = kiln_cache_open(&loop, &cfg, &c);
  cr_assert_null(s, "open: %s", kiln_status_message(s));
  return c;
}

static kiln_cache_stats_t stats(kiln_cache_t *c) {
  kiln_cache_stats_t st;
  kiln_cache_stats(c, &st);
  return st;
}

static void drain(kiln_cache_t *c) {
  while (stats(c).writes_pending) uv_run(&loop, UV_RUN_ONCE);
}

static void closed(void *arg) { ++*(int *)arg; }

static void close_cache(kiln_cache_t *c) {
  int done = 0;
  kiln_cache_close(c, closed, &done);
  cr_assert_eq(done, 0, "close callback ran inside kiln_cache_close");
  while (!done) uv_run(&loop, UV_RUN_ONCE);
  cr_assert_eq(done, 1);
}

static void put(kiln_cache_t *c, int i, size_t len) {
  uint8_t key[32];
  key_of(i, key);
  uint8_t *b = bytes_of(i, len);
  kiln_status_t s = kiln_cache_put(c, key, b, len);
  cr_assert_null(s, "put: %s", kiln_status_message(s));
  free(b);
}

/* Gets key i; returns whether it hit, and checks the bytes when it did. */
static bool get_ok(kiln_cache_t *c, int i, size_t len) {
  uint8_t key[32];
  key_of(i, key);
  kiln_cache_entry_t *e = kiln_cache_get(c, key);
  if (!e) return false;
  size_t n = 0;
  const uint8_t *d = kiln_cache_entry_data(e, &n);
  uint8_t *want = bytes_of(i, len);
  cr_assert_eq(n, len);
  cr_assert_eq(memcmp(d, want, len), 0, "bytes of key %d differ", i);
  cr_assert_eq(memcmp(kiln_cache_entry_key(e), key, 32), 0);
  free(want);
  kiln_cache_entry_release(e);
  return true;
}

static void path_of(int i, char out[KILN_CACHE_PATH_MAX], const char *suffix) {
  uint8_t key[32];
  key_of(i, key);
  kiln_cache_file_path(out, dir, key, suffix);
}

static bool file_exists(int i) {
  char p[KILN_CACHE_PATH_MAX];
  path_of(i, p, "");
  return access(p, F_OK) == 0;
}

/* Files (not directories) under DIR/objects. */
static int count_files(void) {
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "find %s/objects -type f | wc -l", dir);
  FILE *f = popen(cmd, "r");
  int n = -1;
  cr_assert_eq(fscanf(f, "%d", &n), 1);
  pclose(f);
  return n;
}

static int count_tmp(void) {
  char pattern[128];
  snprintf(pattern, sizeof(pattern), "%s/objects/*/*.tmp", dir);
  glob_t g;
  int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
  globfree(&g);
  return n;
}

static void flip_byte(int i, off_t off) {
  char p[KILN_CACHE_PATH_MAX];
  path_of(i, p, "");
  int fd = open(p, O_RDWR);
  cr_assert_geq(fd, 0);
  uint8_t b;
  cr_assert_eq(pread(fd, &b, 1, off), 1);
  b ^= 0x40;
  cr_assert_eq(pwrite(fd, &b, 1, off), 1);
  close(fd);
}

Test(cache, memory_hit_and_miss) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  put(c, 1, 1000);
  cr_assert(get_ok(c, 1, 1000));
  cr_assert_not(get_ok(c, 2, 10));
  kiln_cache_stats_t st = stats(c);
  cr_expect_eq(st.hits_mem, 1);
  cr_expect_eq(st.misses, 1);
  cr_expect_eq(st.entries_mem, 1);
  cr_expect_eq(st.bytes_mem, 1000);
  close_cache(c);
}

Test(cache, empty_payload) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  put(c, 1, 0);
  close_cache(c);
  c = open_cache(0, 0, 0);
  cr_assert(get_ok(c, 1, 0));
  cr_expect_eq(stats(c).hits_disk, 1);
  close_cache(c);
}

Test(cache, reopen_gives_disk_hit_then_memory_hit) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  for (int i = 0; i < 3; i++) put(c, i, 5000 + i);
  close_cache(c); /* close waits for the writes */
  c = open_cache(0, 0, 0);
  kiln_cache_stats_t st = stats(c);
  cr_expect_eq(st.entries_disk, 3);
  cr_expect_eq(st.bytes_disk, 3 * (5000 + 88) + 0 + 1 + 2);
  cr_expect_eq(st.entries_mem, 0);
  cr_assert(get_ok(c, 1, 5001));
  cr_assert(get_ok(c, 1, 5001));
  st = stats(c);
  cr_expect_eq(st.hits_disk, 1);
  cr_expect_eq(st.hits_mem, 1);
  cr_expect_eq(st.entries_mem, 1);
  close_cache(c);
}

Test(cache, large_entry_round_trip) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  put(c, 7, 24u << 20);
  close_cache(c);
  c = open_cache(0, 0, 0);
  cr_assert(get_ok(c, 7, 24u << 20));
  close_cache(c);
}

Test(cache, corrupt_payload_byte_is_a_miss_and_deleted) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  put(c, 1, 4096);
  put(c, 2, 4096);
  close_cache(c);
  flip_byte(1, 88 + 1234);
  flip_byte(2, 60); /* inside the stored checksum */
  c = open_cache(0, 0, 0);
  cr_expect_eq(stats(c).entries_disk, 2, "the header check at open cannot see these");
  cr_assert_not(get_ok(c, 1, 4096));
  cr_assert_not(get_ok(c, 2, 4096));
  kiln_cache_stats_t st = stats(c);
  cr_expect_eq(st.corrupt, 2);
  cr_expect_eq(st.misses, 2);
  cr_expect_eq(st.entries_disk, 0);
  cr_expect_eq(st.bytes_disk, 0);
  cr_expect_not(file_exists(1));
  cr_expect_not(file_exists(2));
  /* and the key can be stored again */
  put(c, 1, 4096);
  drain(c);
  cr_expect(file_exists(1));
  close_cache(c);
}

Test(cache, truncated_file_dropped_at_open_and_at_read) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  put(c, 1, 4096);
  put(c, 2, 4096);
  close_cache(c);
  char p[KILN_CACHE_PATH_MAX];
  path_of(1, p, "");
  cr_assert_eq(truncate(p, 88 + 100), 0);
  c = open_cache(0, 0, 0);
  kiln_cache_stats_t st = stats(c);
  cr_expect_eq(st.corrupt, 1);
  cr_expect_eq(st.entries_disk, 1);
  cr_expect_not(file_exists(1));
  cr_assert_not(get_ok(c, 1, 4096));
  /* truncated under a running cache: the header no longer matches the file size */
  path_of(2, p, "");
  cr_assert_eq(truncate(p, 40), 0);
  cr_assert_not(get_ok(c, 2, 4096));
  st = stats(c);
  cr_expect_eq(st.corrupt, 2);
  cr_expect_eq(st.misses, 2);
  cr_expect_not(file_exists(2));
  close_cache(c);
}

Test(cache, file_holding_another_key_is_rejected) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  put(c, 1, 3000);
  put(c, 2, 3000);
  close_cache(c);
  char p1[KILN_CACHE_PATH_MAX], p2[KILN_CACHE_PATH_MAX], p3[KILN_CACHE_PATH_MAX];
  path_of(1, p1, "");
  path_of(2, p2, "");
  path_of(3, p3, "");
  char cmd[4 * KILN_CACHE_PATH_MAX];
  snprintf(cmd, sizeof(cmd), "mkdir -p $(dirname %s) && cp %s %s", p3, p1, p3); /* named 3, holds 1 */
  cr_assert_eq(system(cmd), 0);
  c = open_cache(0, 0, 0);
  cr_expect_eq(stats(c).corrupt, 1);
  cr_expect_not(file_exists(3));
  cr_assert_not(get_ok(c, 3, 3000));
  /* while running: 2's file replaced by 1's, same size, valid checksum, wrong key */
  cr_assert_eq(rename(p1, p2), 0);
  cr_assert_not(get_ok(c, 2, 3000));
  cr_expect_eq(stats(c).corrupt, 2);
  cr_expect_not(file_exists(2));
  close_cache(c);
}

Test(cache, leftovers_removed_at_open) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  put(c, 1, 2000);
  close_cache(c);
  char p[KILN_CACHE_PATH_MAX], cmd[3 * KILN_CACHE_PATH_MAX + 256];
  path_of(2, p, ".tmp"); /* a write that a SIGKILL interrupted */
  snprintf(cmd, sizeof(cmd), "mkdir -p $(dirname %s) && head -c 777 /dev/urandom > %s", p, p);
  cr_assert_eq(system(cmd), 0);
  path_of(3, p, ""); /* a zero-length final name: damage, not ours to trust */
  snprintf(cmd, sizeof(cmd), "mkdir -p %s/objects/00 %s/objects/ff $(dirname %s) && touch %s "
           "%s/objects/00/junk %s/objects/ff/ABCDEF", dir, dir, p, p, dir, dir);
  cr_assert_eq(system(cmd), 0);
  cr_assert_eq(count_files(), 5);
  c = open_cache(0, 0, 0);
  cr_expect_eq(count_files(), 1);
  cr_expect(file_exists(1));
  kiln_cache_stats_t st = stats(c);
  cr_expect_eq(st.entries_disk, 1);
  cr_expect_eq(st.corrupt, 1);
  cr_assert(get_ok(c, 1, 2000));
  close_cache(c);
}

Test(cache, memory_eviction_keeps_retained_bytes) {
  kiln_cache_t *c = open_cache(0, 3000, 0);
  uint8_t key[32];
  key_of(0, key);
  put(c, 0, 1000);
  kiln_cache_entry_t *held = kiln_cache_get(c, key);
  cr_assert_not_null(held);
  for (int i = 1; i <= 5; i++) put(c, i, 1000);
  kiln_cache_stats_t st = stats(c);
  cr_expect_eq(st.entries_mem, 3);
  cr_expect_leq(st.bytes_mem, 3000);
  cr_expect_eq(st.evictions_mem, 3);
  size_t n;
  const uint8_t *d = kiln_cache_entry_data(held, &n);
  uint8_t *want = bytes_of(0, 1000);
  cr_assert_eq(n, 1000);
  cr_assert_eq(memcmp(d, want, n), 0, "an evicted entry's bytes changed while retained");
  free(want);
  kiln_cache_entry_release(held);
  drain(c);
  /* evicted from memory, still on disk */
  cr_assert(get_ok(c, 0, 1000));
  cr_expect_eq(stats(c).hits_disk, 1);
  close_cache(c);
}

static int user_freed;
static void count_user_free(void *p) {
  cr_expect_eq(p, (void *)&user_freed);
  user_freed++;
}

/* kiln_cache_put_entry keeps the caller's entry itself (the module table's bytes are the
 * cache's, not a copy), and an entry's user data goes with its last reference: after the
 * memory eviction, once the caller let go too. */
Test(cache, put_entry_keeps_the_entry_and_its_user) {
  kiln_cache_t *c = open_cache(0, 1500, 0);
  uint8_t key[32];
  key_of(7, key);
  kiln_cache_entry_t *e = kiln_cache_entry_new(key, 1000);
  cr_assert_not_null(e);
  uint8_t *want = bytes_of(7, 1000);
  memcpy(kiln_cache_entry_bytes(e), want, 1000);
  user_freed = 0;
  cr_assert(kiln_cache_entry_set_user(e, &user_freed, count_user_free));
  cr_expect(!kiln_cache_entry_set_user(e, e, NULL), "a second user replaced the first");
  cr_assert_null(kiln_cache_put_entry(c, e));
  kiln_cache_entry_t *got = kiln_cache_get(c, key);
  cr_assert_eq(got, e, "the cache holds a copy, not the entry put");
  cr_expect_eq(kiln_cache_entry_user(got), &user_freed);
  kiln_cache_entry_release(got);
  kiln_cache_entry_release(e);
  cr_expect_eq(user_freed, 0, "freed while the cache holds the entry");
  put(c, 8, 1000); /* evicts key 7 from memory */
  drain(c);
  cr_expect_eq(user_freed, 1, "the user data outlived the entry's last reference");
  cr_assert(get_ok(c, 7, 1000)); /* from disk, a new entry without user data */
  free(want);
  close_cache(c);
}

/* An adopted block (the remote tier's Redis reply, its payload 80 bytes in) is the entry's
 * bytes, no copy: written to disk and read back like any, freed with the last reference (the
 * ASan build sees a leak or a double free). */
Test(cache, an_adopted_block_is_the_entry_and_goes_with_it) {
  kiln_cache_t *c = open_cache(0, 1 << 20, 0);
  uint8_t key[32];
  key_of(9, key);
  uint8_t *want = bytes_of(9, 3000);
  uint8_t *block = malloc(80 + 3000 + 1);
  memset(block, 0xee, 80);
  memcpy(block + 80, want, 3000);
  kiln_cache_entry_t *e = kiln_cache_entry_adopt(key, block, block + 80, 3000);
  cr_assert_not_null(e);
  size_t n = 0;
  cr_expect_eq(kiln_cache_entry_data(e, &n), block + 80, "a copy, not the block");
  cr_expect_eq(n, 3000);
  cr_expect_eq(kiln_cache_entry_bytes(e), block + 80);
  cr_assert_null(kiln_cache_put_entry(c, e));
  kiln_cache_entry_release(e);
  drain(c); /* the disk write read the adopted bytes */
  close_cache(c);
  c = open_cache(0, 1 << 20, 0);
  cr_assert(get_ok(c, 9, 3000)); /* from disk: the bytes written were the block's payload */
  close_cache(c);
  free(want);
  /* Adopted and never put: released, the block goes too. */
  block = malloc(16);
  e = kiln_cache_entry_adopt(key, block, block, 16);
  cr_assert_not_null(e);
  kiln_cache_entry_release(e);
}

Test(cache, memory_lru_order_follows_gets) {
  kiln_cache_t *c = open_cache(0, 3000, 0);
  put(c, 1, 1000);
  put(c, 2, 1000);
  put(c, 3, 1000);
  cr_assert(get_ok(c, 1, 1000)); /* 2 becomes least recent */
  put(c, 4, 1000);
  drain(c);
  kiln_cache_stats_t before = stats(c);
  cr_assert(get_ok(c, 1, 1000));
  cr_assert(get_ok(c, 3, 1000));
  cr_assert(get_ok(c, 4, 1000));
  cr_expect_eq(stats(c).hits_mem, before.hits_mem + 3);
  cr_assert(get_ok(c, 2, 1000));
  cr_expect_eq(stats(c).hits_disk, before.hits_disk + 1);
  close_cache(c);
}

Test(cache, entry_evicted_while_its_write_runs_is_still_served) {
  kiln_cache_t *c = open_cache(0, 1000, 0);
  put(c, 1, 1000);
  put(c, 2, 1000); /* evicts 1 from memory before the loop ran any write completion */
  cr_expect_eq(stats(c).evictions_mem, 1);
  cr_assert(get_ok(c, 1, 1000));
  cr_expect_eq(stats(c).misses, 0);
  close_cache(c);
}

Test(cache, disk_eviction_in_lru_order) {
  const uint64_t file = 1000 + 88;
  kiln_cache_t *c = open_cache(3 * file, 1 << 20, 0);
  put(c, 1, 1000);
  put(c, 2, 1000);
  put(c, 3, 1000);
  drain(c);
  cr_assert(get_ok(c, 1, 1000)); /* a memory hit refreshes disk recency too */
  put(c, 4, 1000);
  drain(c);
  kiln_cache_stats_t st = stats(c);
  cr_expect_eq(st.evictions_disk, 1);
  cr_expect_eq(st.entries_disk, 3);
  cr_expect_eq(st.bytes_disk, 3 * file);
  cr_expect(file_exists(1));
  cr_expect_not(file_exists(2), "the least recently used file should have gone");
  cr_expect(file_exists(3));
  cr_expect(file_exists(4));
  close_cache(c);
}

Test(cache, disk_lru_order_survives_restart) {
  const uint64_t file = 500 + 88;
  kiln_cache_t *c = open_cache(0, 0, 0);
  for (int i = 1; i <= 3; i++) put(c, i, 500);
  close_cache(c);
  /* recency across a restart is the file's mtime: 2 oldest, then 3, then 1 */
  int order[3] = {2, 3, 1};
  for (int k = 0; k < 3; k++) {
    char p[KILN_CACHE_PATH_MAX];
    path_of(order[k], p, "");
    struct timespec t[2] = {{1000000 + k, 0}, {1000000 + k, 0}};
    cr_assert_eq(utimensat(AT_FDCWD, p, t, 0), 0);
  }
  c = open_cache(3 * file, 0, 0);
  put(c, 4, 500);
  drain(c);
  cr_expect_not(file_exists(2));
  cr_expect(file_exists(3));
  cr_expect(file_exists(1));
  /* a disk hit refreshes recency: 3 is now the oldest but is read, so 1 goes next */
  cr_assert(get_ok(c, 3, 500));
  put(c, 5, 500);
  drain(c);
  cr_expect_not(file_exists(1));
  cr_expect(file_exists(3));
  close_cache(c);
  /* and the smaller budget of a later run is applied at open */
  c = open_cache(file, 0, 0);
  cr_expect_eq(stats(c).entries_disk, 1);
  cr_expect_eq(count_files(), 1);
  close_cache(c);
}

Test(cache, failed_write_stays_in_memory_and_leaves_no_file) {
  kiln_cache_t *c = open_cache(0, 0, ENOSPC);
  put(c, 1, 100000);
  drain(c);
  kiln_cache_stats_t st = stats(c);
  cr_expect_eq(st.write_errors, 1);
  cr_expect_eq(st.entries_disk, 0);
  cr_expect_eq(st.bytes_disk, 0);
  cr_expect_eq(count_files(), 0, "a half-written temp file remained");
  cr_assert(get_ok(c, 1, 100000));
  close_cache(c);
  c = open_cache(0, 0, 0);
  cr_assert_not(get_ok(c, 1, 100000));
  close_cache(c);
}

Test(cache, write_into_a_broken_directory_fails_cleanly) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  uint8_t key[32];
  key_of(1, key);
  char sub[KILN_CACHE_PATH_MAX], cmd[2 * KILN_CACHE_PATH_MAX + 32];
  snprintf(sub, sizeof(sub), "%s/objects/%02x", dir, key[0]);
  /* root ignores modes, so break the directory itself: a file where it should be */
  snprintf(cmd, sizeof(cmd), "rm -rf %s && touch %s", sub, sub);
  cr_assert_eq(system(cmd), 0);
  put(c, 1, 1000);
  drain(c);
  cr_expect_eq(stats(c).write_errors, 1);
  cr_assert(get_ok(c, 1, 1000));
  close_cache(c);
  /* the next open repairs the directory */
  c = open_cache(0, 0, 0);
  put(c, 1, 1000);
  drain(c);
  cr_expect(file_exists(1));
  close_cache(c);
}

Test(cache, removed_directory_is_recreated_by_the_writer) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  char cmd[KILN_CACHE_PATH_MAX];
  snprintf(cmd, sizeof(cmd), "rm -rf %s/objects", dir);
  cr_assert_eq(system(cmd), 0);
  put(c, 1, 1000);
  drain(c);
  cr_expect_eq(stats(c).write_errors, 0);
  cr_expect(file_exists(1));
  close_cache(c);
}

Test(cache, same_key_put_twice_writes_once) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  put(c, 1, 2000);
  put(c, 1, 2000);
  cr_expect_eq(stats(c).writes_pending, 1);
  uint8_t key[32], small[10] = {0};
  key_of(1, key);
  kiln_status_t s = kiln_cache_put(c, key, small, sizeof(small));
  cr_expect_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
  kiln_status_free(s);
  drain(c);
  cr_expect_eq(count_files(), 1);
  cr_expect_eq(stats(c).entries_disk, 1);
  cr_expect_eq(stats(c).entries_mem, 1);
  /* present on disk only: a put restores memory without a new write */
  close_cache(c);
  c = open_cache(0, 0, 0);
  put(c, 1, 2000);
  cr_expect_eq(stats(c).writes_pending, 0);
  cr_expect_eq(stats(c).entries_mem, 1);
  cr_assert(get_ok(c, 1, 2000));
  cr_expect_eq(stats(c).hits_mem, 1);
  close_cache(c);
}

Test(cache, remove_while_writing_then_put_again) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  put(c, 1, 2000);
  uint8_t key[32];
  key_of(1, key);
  kiln_cache_remove(c, key);
  cr_assert_not(get_ok(c, 1, 2000));
  put(c, 2, 2000);
  kiln_cache_remove(c, key);
  drain(c);
  cr_expect_not(file_exists(1), "a removed key's write landed");
  cr_expect(file_exists(2));
  put(c, 1, 2000);
  kiln_cache_remove(c, key);
  put(c, 1, 2000); /* the second put wins over the remove */
  drain(c);
  cr_expect(file_exists(1));
  kiln_cache_remove(c, key);
  cr_expect_not(file_exists(1));
  cr_expect_eq(stats(c).entries_disk, 1);
  close_cache(c);
}

Test(cache, many_puts_queue_behind_the_write_limit) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  for (int i = 0; i < 40; i++) put(c, i, 3000 + i);
  cr_expect_eq(stats(c).writes_pending, 40);
  close_cache(c);
  c = open_cache(0, 0, 0);
  cr_expect_eq(stats(c).entries_disk, 40);
  for (int i = 0; i < 40; i++) cr_assert(get_ok(c, i, 3000 + i));
  close_cache(c);
}

Test(cache, second_open_of_a_dir_is_refused) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  kiln_cache_config_t cfg = {.dir = dir};
  kiln_cache_t *c2 = NULL;
  kiln_status_t s = kiln_cache_open(&loop, &cfg, &c2);
  cr_expect_eq(kiln_status_code(s), KILN_E_UNAVAILABLE);
  cr_expect_null(c2);
  kiln_status_free(s);
  close_cache(c);
}

Test(cache, open_creates_nested_dir_and_rejects_a_file) {
  char nested[128];
  snprintf(nested, sizeof(nested), "%s/a/b/c", dir);
  kiln_cache_config_t cfg = {.dir = nested};
  kiln_cache_t *c = NULL;
  kiln_status_t s = kiln_cache_open(&loop, &cfg, &c);
  cr_assert_null(s, "%s", kiln_status_message(s));
  struct stat st;
  cr_assert_eq(stat(nested, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0700);
  close_cache(c);
  snprintf(nested, sizeof(nested), "%s/plainfile", dir);
  close(open(nested, O_CREAT | O_WRONLY, 0600));
  s = kiln_cache_open(&loop, &cfg, &c);
  cr_expect_not_null(s);
  kiln_status_free(s);
}

Test(cache, close_with_nothing_pending_is_still_asynchronous) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  close_cache(c); /* asserts the callback did not run inside close */
}

/* A child puts entries without pause and is SIGKILLed as soon as the first ones are
 * durable, so that writes are cut at any step. The next open must find only whole,
 * verifiable entries and no temp files. */
Test(cache, survives_sigkill_mid_write) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    uv_loop_t child_loop;
    uv_loop_init(&child_loop);
    kiln_cache_config_t cfg = {.dir = dir, .max_mem_bytes = 1 << 20};
    kiln_cache_t *c = NULL;
    if (kiln_cache_open(&child_loop, &cfg, &c)) _exit(2);
    uint8_t *b = bytes_of(0, 256 << 10);
    bool signalled = false;
    for (int i = 0;; i++) {
      uint8_t key[32];
      key_of(i, key);
      b[0] = (uint8_t)i;
      if (kiln_cache_put(c, key, b, 256 << 10)) _exit(3);
      kiln_cache_stats_t st;
      do {
        uv_run(&child_loop, UV_RUN_NOWAIT);
        kiln_cache_stats(c, &st);
      } while (st.writes_pending > 4 && uv_run(&child_loop, UV_RUN_ONCE) >= 0);
      if (st.entries_disk >= 8 && !signalled) {
        if (write(fds[1], "r", 1) != 1) _exit(4);
        signalled = true;
      }
    }
  }
  close(fds[1]);
  char ready;
  cr_assert_eq(read(fds[0], &ready, 1), 1, "child died before its first writes landed");
  /* aim the kill at a write in progress: wait (bounded) until a temp file exists */
  for (uint64_t t0 = kiln_now_ns(); count_tmp() == 0 && kiln_now_ns() - t0 < 2000000000ull;) {
  }
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  cr_assert(WIFSIGNALED(status));
  close(fds[0]);
  int files_before = count_files(), tmp_before = count_tmp();

  kiln_cache_t *c = open_cache(0, 0, 0);
  kiln_cache_stats_t st = stats(c);
  cr_expect_eq(st.corrupt, 0);
  cr_expect_geq(st.entries_disk, 8);
  cr_expect_eq((uint64_t)count_files(), st.entries_disk, "temp files survived the open");
  uint64_t found = 0;
  cr_log_info("files after the kill: %d (temp: %d), entries at open: %llu", files_before,
              tmp_before, (unsigned long long)st.entries_disk);
  cr_expect_eq(count_tmp(), 0);
  for (int i = 0; i < 100000 && found < st.entries_disk; i++) {
    uint8_t key[32];
    key_of(i, key);
    kiln_cache_entry_t *e = kiln_cache_get(c, key);
    if (!e) continue;
    size_t n;
    const uint8_t *d = kiln_cache_entry_data(e, &n);
    cr_assert_eq(n, 256u << 10);
    cr_assert_eq(d[0], (uint8_t)i);
    found++;
    kiln_cache_entry_release(e);
  }
  cr_expect_eq(found, st.entries_disk);
  cr_expect_eq(stats(c).corrupt, 0);
  close_cache(c);
}

/* ---- the directory is a trust boundary (docs/cache.md "Trust") --------------------------- */

static kiln_status_t try_open(const char *d) {
  kiln_cache_config_t cfg = {.dir = d};
  kiln_cache_t *c = NULL;
  kiln_status_t s = kiln_cache_open(&loop, &cfg, &c);
  if (!s) close_cache(c);
  return s;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert(f, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

/* A link at objects/00 used to make the scan delete every file in the link's target. Now
 * the link itself goes, the target is untouched, and so is a file an entry name links to. */
Test(cache, symlinks_inside_the_dir_are_never_followed) {
  char outside[128], victim[192], keylike[256], target_file[192], link[KILN_CACHE_PATH_MAX];
  snprintf(outside, sizeof(outside), "%s/outside", dir);
  cr_assert_eq(mkdir(outside, 0700), 0);
  snprintf(victim, sizeof(victim), "%s/precious.txt", outside);
  write_file(victim, "do not delete\n");
  uint8_t key[32];
  key_of(1, key);
  char hex[65];
  kiln_hex(key, 32, hex);
  snprintf(keylike, sizeof(keylike), "%s/%s", outside, hex); /* a name the scan would check */
  write_file(keylike, "not an entry\n");
  snprintf(target_file, sizeof(target_file), "%s/secret-of-someone.txt", outside);
  write_file(target_file, "x\n");

  char cachedir[128], cmd[1024];
  snprintf(cachedir, sizeof(cachedir), "%s/c", dir);
  cr_assert_eq(mkdir(cachedir, 0700), 0);
  snprintf(cmd, sizeof(cmd), "mkdir -p %s/objects/%02x && ln -s %s %s/objects/00 && ln -s %s %s/objects/%02x/%s",
           cachedir, key[0], outside, cachedir, target_file, cachedir, key[0], hex);
  cr_assert_eq(system(cmd), 0);

  kiln_cache_config_t cfg = {.dir = cachedir};
  kiln_cache_t *c = NULL;
  kiln_status_t s = kiln_cache_open(&loop, &cfg, &c);
  cr_assert_null(s, "%s", kiln_status_message(s));
  cr_expect_eq(access(victim, F_OK), 0, "a file outside the cache was deleted through objects/00");
  cr_expect_eq(access(keylike, F_OK), 0);
  cr_expect_eq(access(target_file, F_OK), 0, "an entry's link target was deleted");
  struct stat st;
  snprintf(link, sizeof(link), "%s/objects/00", cachedir);
  cr_expect_neq(lstat(link, &st), 0, "the link at objects/00 is still there");
  cr_expect_eq(stats(c).entries_disk, 0);
  /* the cache works: writes recreate objects/00 as a directory */
  uint8_t k0[32] = {0};
  uint8_t bytes[100] = {1, 2, 3};
  cr_assert_null(kiln_cache_put(c, k0, bytes, sizeof(bytes)));
  drain(c);
  cr_expect_eq(lstat(link, &st), 0);
  cr_expect(S_ISDIR(st.st_mode));
  close_cache(c);

  /* objects/ itself as a link: refused, nothing followed */
  snprintf(cmd, sizeof(cmd), "rm -rf %s/objects && ln -s %s %s/objects", cachedir, outside, cachedir);
  cr_assert_eq(system(cmd), 0);
  s = try_open(cachedir);
  cr_assert(s);
  cr_expect_eq(kiln_status_code(s), KILN_E_PERMISSION);
  cr_expect(strstr(kiln_status_message(s), "symbolic link"), "%s", kiln_status_message(s));
  kiln_status_free(s);
  cr_expect_eq(access(victim, F_OK), 0);
}

/* A world-writable directory of another user was accepted, and a root kilnd deleted a
 * root-owned file through it. Now it is refused and nothing in it is touched. */
Test(cache, a_directory_others_can_write_is_refused) {
  char d2[128], inside[192], cmd[512];
  snprintf(d2, sizeof(d2), "%s/shared", dir);
  cr_assert_eq(mkdir(d2, 0700), 0);
  snprintf(cmd, sizeof(cmd), "mkdir -p %s/objects/00", d2);
  cr_assert_eq(system(cmd), 0);
  snprintf(inside, sizeof(inside), "%s/objects/00/important", d2);
  write_file(inside, "a file the scan would delete as a leftover\n");

  cr_assert_eq(chmod(d2, 0777), 0);
  kiln_status_t s = try_open(d2);
  cr_assert(s, "a world-writable cache dir was accepted");
  cr_expect_eq(kiln_status_code(s), KILN_E_PERMISSION);
  cr_expect(strstr(kiln_status_message(s), "mode 0777"), "%s", kiln_status_message(s));
  kiln_status_free(s);
  cr_assert_eq(chmod(d2, 0770), 0); /* group-writable too */
  s = try_open(d2);
  cr_assert(s && kiln_status_code(s) == KILN_E_PERMISSION);
  kiln_status_free(s);
  cr_expect_eq(access(inside, F_OK), 0);

  if (geteuid() != 0) {
    cr_assert_eq(chmod(d2, 0700), 0);
    cr_skip_test("another user's directory needs root to make (chown); the mode case above ran");
  }
  /* made by another user (nobody), even with a private mode */
  cr_assert_eq(chmod(d2, 0700), 0);
  cr_assert_eq(chown(d2, 65534, 65534), 0);
  s = try_open(d2);
  cr_assert(s, "another user's cache dir was accepted");
  cr_expect_eq(kiln_status_code(s), KILN_E_PERMISSION);
  cr_expect(strstr(kiln_status_message(s), "owned by uid 65534"), "%s", kiln_status_message(s));
  kiln_status_free(s);
  cr_expect_eq(access(inside, F_OK), 0);
  /* ours, but objects/00 inside is another user's */
  cr_assert_eq(chown(d2, 0, 0), 0);
  snprintf(cmd, sizeof(cmd), "%s/objects/00", d2);
  cr_assert_eq(chown(cmd, 65534, 65534), 0);
  s = try_open(d2);
  cr_assert(s && kiln_status_code(s) == KILN_E_PERMISSION, "%s", s ? kiln_status_message(s) : "accepted");
  cr_expect(strstr(kiln_status_message(s), "objects/00"), "%s", kiln_status_message(s));
  kiln_status_free(s);
  cr_expect_eq(access(inside, F_OK), 0);
}

Test(cache, the_secret_is_made_once_private_and_checked) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  put(c, 1, 500);
  close_cache(c);
  char secret[128];
  snprintf(secret, sizeof(secret), "%s/secret", dir);
  struct stat st;
  cr_assert_eq(stat(secret, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0600);
  cr_expect_eq(st.st_size, 32);
  uint8_t before[32], after[32];
  FILE *f = fopen(secret, "rb");
  cr_assert(f && fread(before, 1, 32, f) == 32);
  fclose(f);
  c = open_cache(0, 0, 0);
  cr_assert(get_ok(c, 1, 500), "an entry did not survive a restart under the same secret");
  close_cache(c);
  f = fopen(secret, "rb");
  cr_assert(f && fread(after, 1, 32, f) == 32);
  fclose(f);
  cr_expect_eq(memcmp(before, after, 32), 0, "the secret changed across a restart");

  cr_assert_eq(chmod(secret, 0644), 0);
  kiln_status_t s = try_open(dir);
  cr_assert(s && kiln_status_code(s) == KILN_E_PERMISSION, "a readable secret was accepted");
  cr_expect(strstr(kiln_status_message(s), "0600"), "%s", kiln_status_message(s));
  kiln_status_free(s);
  char other[128];
  snprintf(other, sizeof(other), "%s/elsewhere", dir);
  write_file(other, "0123456789abcdef0123456789abcdef");
  cr_assert_eq(chmod(other, 0600), 0);
  cr_assert_eq(unlink(secret), 0);
  cr_assert_eq(symlink(other, secret), 0);
  s = try_open(dir);
  cr_assert(s && kiln_status_code(s) == KILN_E_PERMISSION, "a symlinked secret was accepted");
  kiln_status_free(s);

  /* a new secret (the old one removed): entries written under the old one are dropped */
  cr_assert_eq(unlink(secret), 0);
  c = open_cache(0, 0, 0);
  cr_assert_not(get_ok(c, 1, 500));
  cr_expect_eq(stats(c).corrupt, 1);
  cr_expect_not(file_exists(1));
  close_cache(c);
}

/* An entry forged by someone who can write the directory but not read the secret: the
 * right name, a valid header for the key, another payload and its checksum recomputed the
 * way format 1 computed it (BLAKE2b without a key). It used to be served. */
Test(cache, a_forged_entry_with_a_recomputed_checksum_is_never_served) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  put(c, 1, 3000);
  put(c, 2, 3000);
  close_cache(c);
  char p1[KILN_CACHE_PATH_MAX], p2[KILN_CACHE_PATH_MAX];
  path_of(1, p1, "");
  path_of(2, p2, "");
  uint8_t file[88 + 3000];
  FILE *f = fopen(p2, "rb");
  cr_assert(f && fread(file, 1, sizeof(file), f) == sizeof(file));
  fclose(f);
  uint8_t key1[32];
  key_of(1, key1);
  memcpy(file + 24, key1, 32); /* 2's payload under 1's key */
  kiln_hasher_t h;
  kiln_hasher_init(&h);
  kiln_hasher_update(&h, file, 56);
  kiln_hasher_update(&h, file + 88, 3000);
  kiln_hasher_final(&h, file + 56);
  f = fopen(p1, "wb");
  cr_assert(f && fwrite(file, 1, sizeof(file), f) == sizeof(file));
  fclose(f);

  c = open_cache(0, 0, 0);
  cr_expect_eq(stats(c).entries_disk, 2, "the header is well-formed: only the MAC tells");
  cr_assert_not(get_ok(c, 1, 3000), "the forged entry was served");
  cr_expect_eq(stats(c).corrupt, 1);
  cr_expect_not(file_exists(1));
  cr_assert(get_ok(c, 2, 3000));
  put(c, 1, 3000); /* rebuilt by the caller */
  close_cache(c);
  c = open_cache(0, 0, 0);
  cr_assert(get_ok(c, 1, 3000));
  close_cache(c);
}

/* Files of format 1 (an unkeyed checksum) are dropped at open and rebuilt on demand. */
Test(cache, entries_of_format_1_are_dropped_at_open) {
  kiln_cache_t *c = open_cache(0, 0, 0);
  put(c, 1, 1000);
  put(c, 2, 1000);
  close_cache(c);
  char p[KILN_CACHE_PATH_MAX];
  path_of(1, p, "");
  int fd = open(p, O_RDWR);
  cr_assert_geq(fd, 0);
  uint8_t v1[4] = {1, 0, 0, 0};
  cr_assert_eq(pwrite(fd, v1, 4, 8), 4);
  close(fd);
  c = open_cache(0, 0, 0);
  cr_expect_eq(stats(c).entries_disk, 1);
  cr_expect_eq(stats(c).corrupt, 1);
  cr_expect_not(file_exists(1));
  cr_assert(get_ok(c, 2, 1000));
  close_cache(c);
}
