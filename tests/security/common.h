/* Helpers shared by the security suite (tests/security/README.md): calls to the real kilnd
 * through tests/server/harness.c, compiles, stats and metrics. */
#ifndef KILN_TESTS_SECURITY_COMMON_H
#define KILN_TESTS_SECURITY_COMMON_H

#include "tests/server/harness.h"

enum {
  E_PERMISSION = 4,
  E_NOT_FOUND = 5,
  E_RESOURCE_EXHAUSTED = 6,
  E_COMPILE = 7,
  E_COMPILER_CRASHED = 8,
  E_DEVICE_FAULT = 10,
  E_UNAVAILABLE = 13,
};

#define call client_call
#define field obj_path

const char *err_text(const client_t *c);
/* Sends `compile` of `payload` (size bytes, bin) for target with an optional format. */
void send_compile(client_t *c, uint32_t msgid, const void *payload, size_t size, const char *target,
                  const char *format);
/* Compiles and returns the reply's code; the module id goes to out (64 hex + NUL) on success. */
uint64_t compile(client_t *c, const void *payload, size_t size, const char *format, char out[65]);
/* A small portable-dialect kernel, unique by salt: inc(ptr a) sets a[i] = 2 a[i] + 1 for
 * i = local_id. */
char *inc_ir(const char *salt);
/* Uploads n float32 values to cpu:0; returns the id. */
uint64_t upload_f32(client_t *c, const float *v, uint32_t n);
/* Downloads a float32 tensor into out (n values). */
void download_f32(client_t *c, uint64_t id, float *out, uint32_t n);
/* launch of kernel(tensor) on cpu:0 with one work-group of `block` items; returns the code. */
uint64_t launch1(client_t *c, const char *module, const char *kernel, uint64_t tensor, uint32_t block);
/* A stats value at a dotted path (an unsigned integer). */
uint64_t stat_u64(client_t *c, const char *path);
/* One series of GET /metrics (kilnd started with --metrics), written as kilnd writes it
 * (name{labels}); -1 when absent. */
double metric(const daemon_t *d, const char *series);
/* The build folder (from $KILND: BUILD/server/kilnd). */
const char *build_dir(void);
/* A fresh folder with copies of both worker binaries (for --worker-dir); malloc'ed. */
char *copy_workers(void);
/* The pid of the running device worker of (device, tenant) as stats shows it; 0 if none. */
int device_worker_pid(client_t *c);

/* Builds tests/security/attacks.c.in ($KILN_ATTACKS_SRC) with the system cc into dir, with
 * TOKENS naming the tokens file (and its constructor when ctor); returns the shared object's
 * bytes (malloc'ed). */
uint8_t *build_attacks(const char *dir, const char *tokens, bool ctor, size_t *out_len);

#endif
