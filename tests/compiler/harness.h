/* Helpers for the compiler tests: kernels compiled from C with clang at test time, compile
 * calls that report the status on failure, a cpu runner for work-group functions, and a
 * few file and process helpers. */
#ifndef KILN_TESTS_COMPILER_HARNESS_H
#define KILN_TESTS_COMPILER_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler/compiler.h"
#include "protocol/cpu_abi.h"

/* clang -O2 -emit-llvm -c on an example (clients/include/kiln/examples/NAME.c) or on C
 * source text; returns malloc'ed bitcode. Asserts on failure. */
uint8_t *th_example_bc(const char *name, size_t *out_len);
uint8_t *th_source_bc(const char *source, size_t *out_len);
/* The same as LLVM IR text: the text parser builds use lists in reverse program order,
 * bitcode keeps them in program order. */
char *th_source_ll(const char *source);
/* The same as text IR (-S). */
char *th_example_ll(const char *name);

/* Compiles and asserts success, printing the status otherwise. */
void th_compile(const uint8_t *payload, size_t len, const char *target, const kiln_compile_options_t *opts,
                kiln_artifact_t *out);
/* Compiles and expects failure: returns the status (caller frees). */
KILN_MUST_USE kiln_status_t th_compile_status(const uint8_t *payload, size_t len, kiln_payload_kind_t kind, const char *target);

/* A loaded cpu artifact. */
typedef struct th_cpu_module {
  void *handle;
  char path[256];
} th_cpu_module_t;
void th_cpu_load(const kiln_artifact_t *a, th_cpu_module_t *out);
void th_cpu_unload(th_cpu_module_t *m);
/* Runs kernel `name` over the grid like the cpu device would: one call per work-group. */
void th_cpu_run(const th_cpu_module_t *m, const kiln_artifact_t *a, const char *name, const uint32_t grid[3],
                const uint32_t block[3], uint32_t dynamic_shared, void *const *args);

/* Writes bytes to a fresh temporary file; returns its path (static storage per call site). */
void th_write_temp(const void *p, size_t n, const char *suffix, char *out_path, size_t cap);
/* Runs a shell command; returns its exit status and (if out) its output, truncated. */
int th_run(const char *cmd, char *out, size_t cap);
const char *th_llvm_tool(const char *name);

#endif
