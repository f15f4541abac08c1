/* Runs a program as its own process with extra environment, capturing stdout and stderr, with a
 * time limit (the broken clients and rocminfo). */
#ifndef KILN_TESTS_SOFTGPU_RT_SPAWN_H
#define KILN_TESTS_SOFTGPU_RT_SPAWN_H

#include <stdbool.h>

typedef struct sp_result {
  char *out, *err; /* NUL-terminated, caller frees */
  int exit_code;   /* -1 when killed by a signal */
  int signal;      /* 0 when it exited */
  bool timed_out;
} sp_result_t;

/* argv[0] is a path; env_extra is NULL-terminated "K=V" strings added to the current env. */
void sp_run(char *const argv[], const char *const env_extra[], int timeout_s, sp_result_t *out);
void sp_free(sp_result_t *r);
/* Runs $SGRT_CLIENT SCENARIO with env_extra. */
void sp_client(const char *scenario, const char *const env_extra[], sp_result_t *out);

#endif
