/* The cache's files (format in cache_file.h): the checked root, durable writes, verified
 * reads, the scan. Every path inside the directory is walked from its descriptor with
 * openat and O_NOFOLLOW, one component at a time (objects, XX, the entry): the same
 * guarantee as openat2's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, on every kernel. */
#include "server/cache_file.h"

#include <dirent.h>
#include <sodium.h>
#include <sys/file.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

static const char kMagic[8] = {'K', 'I', 'L', 'N', 'A', 'R', 'T', '1'};
enum { kCheckedBytes = 56 }; /* the header bytes the checksum covers: all but itself */

/* errno converted once, with the step and the file: a full disk is a resource limit, a
 * vanished file is "not found", anything else means the store is unusable for now. */
static kiln_status_t errno_status(int err, const char *step, const char *path, const char *file,
                                  int line) {
  kiln_code_t code = KILN_E_UNAVAILABLE;
  if (err == ENOENT) code = KILN_E_NOT_FOUND;
  if (err == ENOSPC || err == EDQUOT || err == ENOMEM) code = KILN_E_RESOURCE_EXHAUSTED;
  return kiln_status_make(code, file, line, "cache %s %s: %s", step, path, strerror(err));
}
#define ERRNO_STATUS(err, step, path) errno_status((err), (step), (path), __FILE__, __LINE__)
#define CORRUPT(path, why) KILN_STATUS(KILN_E_INTERNAL, "corrupt cache entry %s: %s", (path), (why))

kiln_cache_entry_t *kiln_cache_entry_alloc(const uint8_t key[KILN_CACHE_KEY_BYTES], size_t len) {
  if (len > SIZE_MAX - sizeof(kiln_cache_entry_t)) return NULL;
  kiln_cache_entry_t *e = malloc(sizeof(*e) + len);
  if (!e) return NULL;
  atomic_init(&e->refs, 1);
  e->len = len;
  e->user = NULL;
  e->user_free = NULL;
  e->bytes = e->data;
  e->block = NULL;
  memcpy(e->key, key, KILN_CACHE_KEY_BYTES);
  return e;
}

void kiln_cache_file_path(char out[KILN_CACHE_PATH_MAX], const char *dir,
                          const uint8_t key[KILN_CACHE_KEY_BYTES], const char *suffix) {
  char hex[2 * KILN_CACHE_KEY_BYTES + 1];
  kiln_hex(key, KILN_CACHE_KEY_BYTES, hex);
  snprintf(out, KILN_CACHE_PATH_MAX, "%s/objects/%02x/%s%s", dir, key[0], hex, suffix);
}

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* The entry's MAC: BLAKE2b-256 keyed with the cache's secret. Without the secret nobody can
 * make an entry kilnd accepts, whatever checksum they compute. */
static void entry_mac(const kiln_cache_root_t *r, const uint8_t *header, const uint8_t *payload, size_t len,
                      uint8_t out[32]) {
  crypto_generichash_state st;
  crypto_generichash_init(&st, r->secret, sizeof(r->secret), 32);
  crypto_generichash_update(&st, header, kCheckedBytes);
  crypto_generichash_update(&st, payload, len);
  crypto_generichash_final(&st, out, 32);
}

/* Returns why the header cannot belong to `key` in a file of file_bytes, or NULL. The
 * checksum is checked separately: it needs the payload. */
static const char *header_problem(const uint8_t h[KILN_CACHE_HEADER_BYTES],
                                  const uint8_t key[KILN_CACHE_KEY_BYTES], uint64_t file_bytes) {
  if (file_bytes < KILN_CACHE_HEADER_BYTES) return "shorter than its header";
  if (memcmp(h, kMagic, sizeof(kMagic)) != 0) return "bad magic";
  if (get_le(h + 8, 4) == 1) return "format version 1 (an unkeyed checksum): rebuilt in the keyed format";
  if (get_le(h + 8, 4) != KILN_CACHE_FORMAT_VERSION) return "unknown format version";
  if (get_le(h + 12, 4) != KILN_CACHE_HEADER_BYTES) return "unknown header size";
  if (get_le(h + 16, 8) != file_bytes - KILN_CACHE_HEADER_BYTES) return "length does not match file size";
  if (memcmp(h + 24, key, KILN_CACHE_KEY_BYTES) != 0) return "header holds another key";
  return NULL;
}

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* 0, an errno, or -1 at an early end of file. */
static int read_all(int fd, uint8_t *p, size_t n, off_t off) {
  while (n > 0) {
    ssize_t r = pread(fd, p, n, off);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) return -1;
    p += r;
    n -= (size_t)r;
    off += r;
  }
  return 0;
}

/* ---- the root: DIR, its lock and its secret -------------------------------------------- */

/* Why a directory or file this kilnd keeps is not private to it, or NULL. Another user's
 * directory, or one others can write, lets them swap names under kilnd (a root kilnd
 * deleting a root-owned file through a link); a secret others can read is no secret. */
static const char *not_private(const struct stat *st, bool is_dir, char *buf, size_t cap) {
  if (is_dir ? !S_ISDIR(st->st_mode) : !S_ISREG(st->st_mode)) return is_dir ? "not a directory" : "not a regular file";
  if (st->st_uid != geteuid()) {
    snprintf(buf, cap, "owned by uid %u, not by kilnd's uid %u", (unsigned)st->st_uid, (unsigned)geteuid());
    return buf;
  }
  mode_t forbidden = is_dir ? (S_IWGRP | S_IWOTH) : (S_IRWXG | S_IRWXO);
  if (st->st_mode & forbidden) {
    snprintf(buf, cap, "mode %04o lets %s", (unsigned)(st->st_mode & 07777),
             is_dir ? "other users write in it" : "other users read it");
    return buf;
  }
  return NULL;
}

static kiln_status_t refuse(const char *path, const char *why) {
  return KILN_STATUS(KILN_E_PERMISSION,
                     "cache %s is %s: a cache directory must belong to kilnd's user and be writable by no one "
                     "else (choose another --cache-dir, or fix its owner and mode)",
                     path, why);
}

/* A rename or a new name is durable only once its directory is synced. */
static int fsync_fd(int fd) { return fsync(fd) ? errno : 0; }

/* openat of a subdirectory, never through a link: the descriptor, or -errno (-ELOOP for a
 * link, -ENOTDIR for something else). mkdir first when create is set. */
static int open_dir_at(int at, const char *name, bool create, bool *out_created) {
  if (out_created) *out_created = false;
  int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    if (mkdirat(at, name, 0700) && errno != EEXIST) return -errno;
    if (out_created) *out_created = true;
    fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0) {
    /* O_DIRECTORY|O_NOFOLLOW on a link reports ENOTDIR on some kernels: ask lstat */
    int err = errno;
    struct stat st;
    if (err == ENOTDIR && !fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) && S_ISLNK(st.st_mode)) err = ELOOP;
    return -err;
  }
  return fd;
}

/* DIR/objects/XX, made (with objects/) when create is set and they are missing, the new
 * names made durable; the descriptor or -errno. */
static int open_sub(const kiln_cache_root_t *r, unsigned byte, bool create) {
  bool made_objects = false, made_sub = false;
  int objects = open_dir_at(r->dir_fd, "objects", create, &made_objects);
  if (objects < 0) return objects;
  char name[3];
  snprintf(name, sizeof(name), "%02x", byte);
  int sub = open_dir_at(objects, name, create, &made_sub);
  int err = 0;
  if (sub >= 0 && made_sub) err = fsync_fd(objects);
  if (sub >= 0 && !err && made_objects) err = fsync_fd(r->dir_fd);
  close(objects);
  if (err) {
    close(sub);
    return -err;
  }
  return sub;
}

static void hex_name(const uint8_t key[KILN_CACHE_KEY_BYTES], const char *suffix, char out[80]) {
  char hex[2 * KILN_CACHE_KEY_BYTES + 1];
  kiln_hex(key, KILN_CACHE_KEY_BYTES, hex);
  snprintf(out, 80, "%s%s", hex, suffix);
}

/* Reads DIR/secret, or makes it: 32 random bytes written to a temp name, synced, renamed. */
static kiln_status_t load_secret(kiln_cache_root_t *r) {
  char path[KILN_CACHE_PATH_MAX], why_buf[96];
  snprintf(path, sizeof(path), "%s/secret", r->dir);
  int fd = openat(r->dir_fd, "secret", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ELOOP) return refuse(path, "a symbolic link");
  if (fd < 0 && errno == ENOENT) {
    randombytes_buf(r->secret, sizeof(r->secret));
    (void)unlinkat(r->dir_fd, "secret.tmp", 0); /* a crash's leftover; we hold the lock */
    int w = openat(r->dir_fd, "secret.tmp", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (w < 0) return ERRNO_STATUS(errno, "create", path);
    int err = write_all(w, r->secret, sizeof(r->secret));
    if (!err) err = fsync_fd(w);
    if (close(w) && !err) err = errno;
    if (!err && renameat(r->dir_fd, "secret.tmp", r->dir_fd, "secret")) err = errno;
    if (!err) err = fsync_fd(r->dir_fd);
    if (err) {
      (void)unlinkat(r->dir_fd, "secret.tmp", 0);
      return ERRNO_STATUS(err, "write", path);
    }
    KILN_LOG_INFO("cache_secret_created", "path=%s", path);
    return KILN_OK;
  }
  if (fd < 0) return ERRNO_STATUS(errno, "open", path);
  struct stat st;
  const char *why = fstat(fd, &st) ? "unreadable" : not_private(&st, false, why_buf, sizeof(why_buf));
  if (!why && st.st_size != (off_t)sizeof(r->secret)) why = "not 32 bytes long";
  if (!why && read_all(fd, r->secret, sizeof(r->secret), 0)) why = "unreadable";
  close(fd);
  if (why)
    return KILN_STATUS(KILN_E_PERMISSION,
                       "cache secret %s is %s: it must be a 32-byte file of mode 0600 owned by kilnd's user. "
                       "Remove it and kilnd makes a new one (the cached builds are then rebuilt)",
                       path, why);
  return KILN_OK;
}

/* Takes the directory's lock: two kilnds on one dir would delete each other's temp files
 * at open and keep indexes that disagree. flock is released by the kernel when the
 * process dies, so a SIGKILLed kilnd leaves no stale lock. */
static kiln_status_t lock_root(kiln_cache_root_t *r) {
  char path[KILN_CACHE_PATH_MAX];
  snprintf(path, sizeof(path), "%s/lock", r->dir);
  r->lock_fd = openat(r->dir_fd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (r->lock_fd < 0 && errno == ELOOP) return refuse(path, "a symbolic link");
  if (r->lock_fd < 0) return KILN_STATUS(KILN_E_UNAVAILABLE, "cache lock %s: %s", path, strerror(errno));
  if (flock(r->lock_fd, LOCK_EX | LOCK_NB)) {
    int err = errno;
    if (err == EWOULDBLOCK)
      return KILN_STATUS(KILN_E_UNAVAILABLE, "cache dir %s is in use by another kilnd", r->dir);
    return KILN_STATUS(KILN_E_UNAVAILABLE, "cache lock %s: %s", path, strerror(err));
  }
  return KILN_OK;
}

kiln_status_t kiln_cache_root_open(const char *dir, kiln_cache_root_t *out) {
  kiln_cache_root_t r = {.dir_fd = -1, .lock_fd = -1};
  KILN_RETURN_IF_ERROR(kiln_crypto_init());
  KILN_RETURN_IF_ERROR(kiln_cache_mkdirs(dir));
  r.dir = strdup(dir);
  if (!r.dir) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cache: out of memory");
  kiln_status_t s = KILN_OK;
  r.dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (r.dir_fd < 0) s = ERRNO_STATUS(errno, "open", dir);
  struct stat st;
  char why_buf[96];
  if (!s && fstat(r.dir_fd, &st)) s = ERRNO_STATUS(errno, "stat", dir);
  const char *why = s ? NULL : not_private(&st, true, why_buf, sizeof(why_buf));
  if (why) s = refuse(dir, why);
  if (!s) s = lock_root(&r);
  if (!s) s = load_secret(&r);
  if (s) {
    kiln_cache_root_close(&r);
    return s;
  }
  *out = r;
  return KILN_OK;
}

void kiln_cache_root_close(kiln_cache_root_t *r) {
  if (r->lock_fd >= 0) close(r->lock_fd);
  if (r->dir_fd >= 0) close(r->dir_fd);
  sodium_memzero(r->secret, sizeof(r->secret));
  free(r->dir);
  r->dir = NULL;
  r->dir_fd = r->lock_fd = -1;
}

/* ---- entries ---------------------------------------------------------------------------- */

kiln_status_t kiln_cache_file_write(const kiln_cache_root_t *r, const kiln_cache_entry_t *e, int fault_errno) {
  char tmp[80], final[80], path[KILN_CACHE_PATH_MAX];
  hex_name(e->key, ".tmp", tmp);
  hex_name(e->key, "", final);
  kiln_cache_file_path(path, r->dir, e->key, ".tmp");

  uint8_t h[KILN_CACHE_HEADER_BYTES];
  memcpy(h, kMagic, sizeof(kMagic));
  put_le(h + 8, KILN_CACHE_FORMAT_VERSION, 4);
  put_le(h + 12, KILN_CACHE_HEADER_BYTES, 4);
  put_le(h + 16, e->len, 8);
  memcpy(h + 24, e->key, KILN_CACHE_KEY_BYTES);
  entry_mac(r, h, e->bytes, e->len, h + kCheckedBytes);

  /* the first write into this subdirectory, or someone removed the tree under a running
   * kilnd: create what is missing rather than fail forever */
  int sub = open_sub(r, e->key[0], true);
  if (sub < 0) return ERRNO_STATUS(-sub, "open the directory of", path);
  /* O_TRUNC, not O_EXCL: only one write per key runs at a time (cache.c), so an existing
   * temp file is a leftover of a crash that the scan has not met. */
  int fd = openat(sub, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    close(sub);
    return ERRNO_STATUS(err, "create", path);
  }
  const char *step = "write";
  int err = write_all(fd, h, sizeof(h));
  if (!err && fault_errno) err = fault_errno;
  if (!err) err = write_all(fd, e->bytes, e->len);
  if (!err && fsync(fd)) step = "fsync", err = errno;
  if (close(fd) && !err) step = "close", err = errno;
  if (!err && renameat(sub, tmp, sub, final)) step = "rename", err = errno;
  if (err) {
    unlinkat(sub, tmp, 0);
    close(sub);
    return ERRNO_STATUS(err, step, path);
  }
  err = fsync_fd(sub);
  if (err) {
    /* the file is complete but may not survive a power loss; the caller will treat the
     * entry as memory-only, so leave no file that its index does not know */
    unlinkat(sub, final, 0);
    close(sub);
    return ERRNO_STATUS(err, "fsync the directory of", path);
  }
  close(sub);
  return KILN_OK;
}

kiln_status_t kiln_cache_file_read(const kiln_cache_root_t *r, const uint8_t key[KILN_CACHE_KEY_BYTES],
                                   kiln_cache_entry_t **out_entry, bool *out_corrupt) {
  *out_corrupt = false;
  char name[80], path[KILN_CACHE_PATH_MAX];
  hex_name(key, "", name);
  kiln_cache_file_path(path, r->dir, key, "");
  int sub = open_sub(r, key[0], false);
  if (sub < 0) {
    if (sub != -ELOOP && sub != -ENOTDIR) return ERRNO_STATUS(-sub, "open", path);
    *out_corrupt = true;
    return CORRUPT(path, "its directory is a symbolic link or not a directory");
  }
  int fd = openat(sub, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  int open_err = errno;
  close(sub);
  if (fd < 0) {
    if (open_err != ELOOP) return ERRNO_STATUS(open_err, "open", path);
    *out_corrupt = true;
    return CORRUPT(path, "a symbolic link");
  }
  kiln_status_t s = KILN_OK;
  kiln_cache_entry_t *e = NULL;
  uint8_t h[KILN_CACHE_HEADER_BYTES];
  struct stat st;
  const char *why = NULL;
  int err = 0;
  if (fstat(fd, &st)) {
    s = ERRNO_STATUS(errno, "stat", path);
    goto done;
  }
  uint64_t size = (uint64_t)st.st_size;
  if (!S_ISREG(st.st_mode)) why = "not a regular file";
  if (!why && size < KILN_CACHE_HEADER_BYTES) why = "shorter than its header";
  if (!why && (err = read_all(fd, h, sizeof(h), 0)) > 0) {
    s = ERRNO_STATUS(err, "read", path);
    goto done;
  }
  if (!why && err < 0) why = "truncated while read";
  if (!why) why = header_problem(h, key, size);
  if (!why) {
    e = kiln_cache_entry_alloc(key, (size_t)(size - KILN_CACHE_HEADER_BYTES));
    if (!e) {
      s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cache read %s: out of memory", path);
      goto done;
    }
    err = read_all(fd, e->bytes, e->len, KILN_CACHE_HEADER_BYTES);
    if (err > 0) {
      s = ERRNO_STATUS(err, "read", path);
      goto done;
    }
    if (err < 0) why = "truncated while read";
  }
  if (!why) {
    uint8_t mac[32];
    entry_mac(r, h, e->bytes, e->len, mac);
    if (sodium_memcmp(mac, h + kCheckedBytes, sizeof(mac)) != 0)
      why = "MAC mismatch (damaged, forged, or written under another secret)";
  }
  if (why) {
    *out_corrupt = true;
    s = CORRUPT(path, why);
    goto done;
  }
  /* mtime is the recency that survives a restart (atime is often off: noatime, relatime) */
  (void)futimens(fd, NULL);
  *out_entry = e;
  e = NULL;
done:
  free(e);
  close(fd);
  return s;
}

int kiln_cache_file_unlink(const kiln_cache_root_t *r, const uint8_t key[KILN_CACHE_KEY_BYTES]) {
  char name[80];
  hex_name(key, "", name);
  int sub = open_sub(r, key[0], false);
  if (sub < 0) return -sub;
  int err = unlinkat(sub, name, 0) ? errno : 0;
  close(sub);
  return err;
}

void kiln_cache_file_touch(const kiln_cache_root_t *r, const uint8_t key[KILN_CACHE_KEY_BYTES]) {
  char name[80];
  hex_name(key, "", name);
  int sub = open_sub(r, key[0], false);
  if (sub < 0) return;
  (void)utimensat(sub, name, NULL, AT_SYMLINK_NOFOLLOW);
  close(sub);
}

/* ---- the scan at open ------------------------------------------------------------------- */

static bool parse_hex_key(const char *name, uint8_t key[KILN_CACHE_KEY_BYTES]) {
  if (strlen(name) != 2 * KILN_CACHE_KEY_BYTES) return false;
  for (size_t i = 0; i < 2 * KILN_CACHE_KEY_BYTES; i++) {
    char c = name[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return false; /* upper case too: kiln_hex writes lower case only */
    if (i % 2 == 0) key[i / 2] = (uint8_t)(v << 4);
    else key[i / 2] |= (uint8_t)v;
  }
  return true;
}

/* Checks one candidate entry by its header; returns NULL and fills size/mtime when good. */
static const char *check_entry(int dfd, const char *name, const uint8_t key[KILN_CACHE_KEY_BYTES],
                               uint64_t *out_size, int64_t *out_mtime_ns) {
  int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return errno == ELOOP ? "a symbolic link" : "cannot be opened";
  struct stat st;
  uint8_t h[KILN_CACHE_HEADER_BYTES];
  const char *why = NULL;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) why = "not a regular file";
  if (!why && (uint64_t)st.st_size < sizeof(h)) why = "shorter than its header";
  if (!why && read_all(fd, h, sizeof(h), 0)) why = "header unreadable";
  if (!why) why = header_problem(h, key, (uint64_t)st.st_size);
  close(fd);
  if (!why) {
    *out_size = (uint64_t)st.st_size;
    *out_mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
  }
  return why;
}

/* Opens DIR/objects/XX for the scan: NULL with no status when it does not exist yet
 * (writers create subdirectories when they first need them, which keeps the first open
 * cheap). A link or a non-directory in its place is removed, never followed (through a
 * link, the scan would delete whatever the link points at), so that writes can recreate
 * it; a directory of another user, or one others can write, is refused. */
static DIR *open_scan_subdir(const kiln_cache_root_t *r, int objects, unsigned byte, uint64_t *leftovers,
                             kiln_status_t *out_status) {
  char name[3], path[KILN_CACHE_PATH_MAX], why_buf[96];
  snprintf(name, sizeof(name), "%02x", byte);
  snprintf(path, sizeof(path), "%s/objects/%s", r->dir, name);
  int fd = open_dir_at(objects, name, false, NULL);
  if (fd == -ELOOP || fd == -ENOTDIR) {
    KILN_LOG_WARN("cache_not_a_directory", "path=%s link=%d", path, fd == -ELOOP);
    if (!unlinkat(objects, name, 0)) ++*leftovers;
    return NULL;
  }
  if (fd < 0) {
    if (fd != -ENOENT) *out_status = ERRNO_STATUS(-fd, "open", path);
    return NULL;
  }
  struct stat st;
  const char *why = fstat(fd, &st) ? "unreadable" : not_private(&st, true, why_buf, sizeof(why_buf));
  DIR *d = why ? NULL : fdopendir(fd);
  if (why) *out_status = refuse(path, why);
  else if (!d) *out_status = ERRNO_STATUS(errno, "opendir", path);
  if (!d) close(fd);
  return d;
}

kiln_status_t kiln_cache_file_scan(const kiln_cache_root_t *r, kiln_cache_scan_cb cb, void *arg,
                                   uint64_t *out_corrupt, uint64_t *out_leftovers) {
  char path[KILN_CACHE_PATH_MAX], why_buf[96];
  snprintf(path, sizeof(path), "%s/objects", r->dir);
  bool made = false;
  int objects = open_dir_at(r->dir_fd, "objects", true, &made);
  if (objects == -ELOOP) return refuse(path, "a symbolic link");
  if (objects < 0) return ERRNO_STATUS(-objects, "open", path);
  struct stat st;
  const char *bad = fstat(objects, &st) ? "unreadable" : not_private(&st, true, why_buf, sizeof(why_buf));
  if (bad) {
    close(objects);
    return refuse(path, bad);
  }
  if (made && fsync_fd(r->dir_fd)) {
    close(objects);
    return ERRNO_STATUS(errno, "fsync", r->dir);
  }
  uint64_t corrupt = 0, leftovers = 0;
  kiln_status_t s = KILN_OK;
  for (unsigned b = 0; b < 256 && !s; b++) {
    DIR *d = open_scan_subdir(r, objects, b, &leftovers, &s);
    if (!d) continue;
    int dfd = dirfd(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
      const char *name = de->d_name;
      if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
      uint8_t key[KILN_CACHE_KEY_BYTES];
      if (!parse_hex_key(name, key) || key[0] != b) {
        /* temp files of interrupted writes and names that are not ours (links included:
         * unlinkat removes the link itself); a directory here is not ours either, but
         * deleting trees is not a cache's business */
        if (!fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) && S_ISDIR(st.st_mode)) continue;
        if (!unlinkat(dfd, name, 0)) leftovers++;
        continue;
      }
      uint64_t size = 0;
      int64_t mtime = 0;
      const char *why = check_entry(dfd, name, key, &size, &mtime);
      if (why) {
        char q[160];
        KILN_LOG_WARN("cache_corrupt", "dir=%s/objects/%02x file=%s reason=%s", r->dir, b, name,
                      kiln_log_quote(q, sizeof(q), why));
        unlinkat(dfd, name, 0);
        corrupt++;
        continue;
      }
      cb(key, size, mtime, arg);
    }
    closedir(d);
  }
  close(objects);
  if (s) return s;
  *out_corrupt = corrupt;
  *out_leftovers = leftovers;
  return KILN_OK;
}

kiln_status_t kiln_cache_mkdirs(const char *path) {
  char p[KILN_CACHE_PATH_MAX];
  if (strlen(path) >= sizeof(p) || !path[0])
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "cache dir path empty or too long");
  strcpy(p, path);
  for (char *c = p + 1;; c++) {
    if (*c != '/' && *c != '\0') continue;
    char saved = *c;
    *c = '\0';
    if (mkdir(p, 0700) && errno != EEXIST) return ERRNO_STATUS(errno, "mkdir", p);
    *c = saved;
    if (!saved) break;
  }
  struct stat st;
  if (stat(p, &st)) return ERRNO_STATUS(errno, "stat", p);
  if (!S_ISDIR(st.st_mode)) return ERRNO_STATUS(ENOTDIR, "mkdir", p);
  return KILN_OK;
}
