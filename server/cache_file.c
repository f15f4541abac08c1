/* The cache's files (format in cache_file.h): durable writes, verified reads, the scan. */
#include "server/cache_file.h"

#include <dirent.h>
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
  memcpy(e->key, key, KILN_CACHE_KEY_BYTES);
  return e;
}

static void subdir_path(char out[KILN_CACHE_PATH_MAX], const char *dir, unsigned first_byte) {
  snprintf(out, KILN_CACHE_PATH_MAX, "%s/objects/%02x", dir, first_byte);
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

static void checksum(const uint8_t *header, const uint8_t *payload, size_t len, uint8_t out[32]) {
  kiln_hasher_t h;
  kiln_hasher_init(&h);
  kiln_hasher_update(&h, header, kCheckedBytes);
  kiln_hasher_update(&h, payload, len);
  kiln_hasher_final(&h, out);
}

/* Returns why the header cannot belong to `key` in a file of file_bytes, or NULL. The
 * checksum is checked separately: it needs the payload. */
static const char *header_problem(const uint8_t h[KILN_CACHE_HEADER_BYTES],
                                  const uint8_t key[KILN_CACHE_KEY_BYTES], uint64_t file_bytes) {
  if (file_bytes < KILN_CACHE_HEADER_BYTES) return "shorter than its header";
  if (memcmp(h, kMagic, sizeof(kMagic)) != 0) return "bad magic";
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

/* A rename is durable only once its directory is synced. */
static int fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = fsync(fd) ? errno : 0;
  close(fd);
  return err;
}

/* The new directory's own name must be durable before a file in it can be. */
static kiln_status_t make_subdir(const char *dir, const char *sub) {
  KILN_RETURN_IF_ERROR(kiln_cache_mkdirs(sub));
  char objects[KILN_CACHE_PATH_MAX];
  snprintf(objects, sizeof(objects), "%s/objects", dir);
  int err = fsync_dir(objects);
  if (!err) err = fsync_dir(dir);
  return err ? ERRNO_STATUS(err, "fsync", objects) : KILN_OK;
}

kiln_status_t kiln_cache_file_write(const char *dir, const kiln_cache_entry_t *e, int fault_errno) {
  char sub[KILN_CACHE_PATH_MAX], tmp[KILN_CACHE_PATH_MAX], final[KILN_CACHE_PATH_MAX];
  subdir_path(sub, dir, e->key[0]);
  kiln_cache_file_path(tmp, dir, e->key, ".tmp");
  kiln_cache_file_path(final, dir, e->key, "");

  uint8_t h[KILN_CACHE_HEADER_BYTES];
  memcpy(h, kMagic, sizeof(kMagic));
  put_le(h + 8, KILN_CACHE_FORMAT_VERSION, 4);
  put_le(h + 12, KILN_CACHE_HEADER_BYTES, 4);
  put_le(h + 16, e->len, 8);
  memcpy(h + 24, e->key, KILN_CACHE_KEY_BYTES);
  checksum(h, e->data, e->len, h + kCheckedBytes);

  /* O_TRUNC, not O_EXCL: only one write per key runs at a time (cache.c), so an existing
   * temp file is a leftover of a crash that the scan has not met. */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 && errno == ENOENT) {
    /* the first write into this subdirectory, or someone removed the tree under a running
     * kilnd: create what is missing rather than fail forever */
    KILN_RETURN_IF_ERROR(make_subdir(dir, sub));
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  }
  if (fd < 0) return ERRNO_STATUS(errno, "create", tmp);

  const char *step = "write";
  int err = write_all(fd, h, sizeof(h));
  if (!err && fault_errno) err = fault_errno;
  if (!err) err = write_all(fd, e->data, e->len);
  if (!err && fsync(fd)) step = "fsync", err = errno;
  if (close(fd) && !err) step = "close", err = errno;
  if (!err && rename(tmp, final)) step = "rename", err = errno;
  if (err) {
    unlink(tmp);
    return ERRNO_STATUS(err, step, tmp);
  }
  err = fsync_dir(sub);
  if (err) {
    /* the file is complete but may not survive a power loss; the caller will treat the
     * entry as memory-only, so leave no file that its index does not know */
    unlink(final);
    return ERRNO_STATUS(err, "fsync", sub);
  }
  return KILN_OK;
}

kiln_status_t kiln_cache_file_read(const char *path, const uint8_t key[KILN_CACHE_KEY_BYTES],
                                   kiln_cache_entry_t **out_entry, bool *out_corrupt) {
  *out_corrupt = false;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno != ELOOP) return ERRNO_STATUS(errno, "open", path);
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
    err = read_all(fd, e->data, e->len, KILN_CACHE_HEADER_BYTES);
    if (err > 0) {
      s = ERRNO_STATUS(err, "read", path);
      goto done;
    }
    if (err < 0) why = "truncated while read";
  }
  if (!why) {
    uint8_t sum[32];
    checksum(h, e->data, e->len, sum);
    if (memcmp(sum, h + kCheckedBytes, sizeof(sum)) != 0) why = "checksum mismatch";
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

/* Opens DIR/objects/XX; NULL with no status when it does not exist yet (writers create
 * subdirectories when they first need them, which keeps the first open cheap). A
 * non-directory in its place is removed so that writes can recreate it. */
static DIR *open_subdir(const char *sub, kiln_status_t *out_status) {
  DIR *d = opendir(sub);
  if (!d && errno == ENOTDIR) {
    unlink(sub);
    errno = ENOENT;
  }
  if (!d && errno != ENOENT) *out_status = ERRNO_STATUS(errno, "opendir", sub);
  return d;
}

kiln_status_t kiln_cache_file_scan(const char *dir, kiln_cache_scan_cb cb, void *arg,
                                   uint64_t *out_corrupt, uint64_t *out_leftovers) {
  char sub[KILN_CACHE_PATH_MAX];
  snprintf(sub, sizeof(sub), "%s/objects", dir);
  KILN_RETURN_IF_ERROR(kiln_cache_mkdirs(sub));
  uint64_t corrupt = 0, leftovers = 0;
  for (unsigned b = 0; b < 256; b++) {
    subdir_path(sub, dir, b);
    kiln_status_t s = KILN_OK;
    DIR *d = open_subdir(sub, &s);
    if (s) return s;
    if (!d) continue;
    int dfd = dirfd(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
      const char *name = de->d_name;
      if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
      uint8_t key[KILN_CACHE_KEY_BYTES];
      if (!parse_hex_key(name, key) || key[0] != b) {
        /* temp files of interrupted writes and names that are not ours; a directory
         * here is not ours either, but deleting trees is not a cache's business */
        struct stat st;
        if (!fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) && S_ISDIR(st.st_mode)) continue;
        if (!unlinkat(dfd, name, 0)) leftovers++;
        continue;
      }
      uint64_t size = 0;
      int64_t mtime = 0;
      const char *why = check_entry(dfd, name, key, &size, &mtime);
      if (why) {
        char q[160];
        KILN_LOG_WARN("cache_corrupt", "dir=%s file=%s reason=%s", sub, name,
                      kiln_log_quote(q, sizeof(q), why));
        unlinkat(dfd, name, 0);
        corrupt++;
        continue;
      }
      cb(key, size, mtime, arg);
    }
    closedir(d);
  }
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
