/* The kiln compile library: kernel payloads in, artifacts (protocol/artifact.h) out.
 *
 * One kiln_compiler_t per compile worker process: it initialises LLVM once and keeps target
 * machines and the AMDGPU device-library bitcode warm between jobs. It is not thread-safe:
 * one thread (the worker's) calls it, one job at a time. LLVM may still end the process on
 * input it cannot handle (report_fatal_error); the worker is respawned by design (DESIGN §1),
 * and the handler installed by kiln_compiler_create says so on stderr before dying.
 *
 * kiln_compiler_target_parse and kiln_compiler_identity are cheap, compile nothing and may be
 * called from any thread. Payload kinds, the sniffer of "auto" and the build key are
 * protocol/payload.h's, shared with kilnd.
 * docs/kernels.md is the reference for what the payloads may contain. */
#ifndef KILN_COMPILER_COMPILER_H
#define KILN_COMPILER_COMPILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "base/util.h"
#include "protocol/artifact.h"
#include "protocol/payload.h"

typedef enum kiln_target_kind {
  KILN_TARGET_CPU = 1,
  KILN_TARGET_AMDGPU = 2,
  KILN_TARGET_NVPTX = 3,
} kiln_target_kind_t;

/* A canonical compile target. Value type: copy it freely. */
typedef struct kiln_target {
  kiln_target_kind_t kind;
  char id[96];        /* canonical id, the artifact's target: "cpu", "gfx90a:sramecc+:xnack-", "sm_90" */
  char triple[64];    /* "x86_64-pc-linux-gnu", "amdgcn-amd-amdhsa", "nvptx64-nvidia-cuda" */
  char cpu[64];       /* LLVM CPU: host CPU name, "gfx90a", "sm_90" */
  char features[4096]; /* LLVM feature string: host features, "+sramecc,-xnack", "+ptx80" */
  uint32_t wave_size; /* 64 or 32 on AMDGPU, 32 on NVPTX, 1 on cpu */
  uint32_t ptx_version; /* NVPTX: PTX ISA version times 10 (80 = 8.0); else 0 */
} kiln_target_t;

/* Canonicalises a target name: "cpu" (or "host"); AMD "gfx90a", "gfx942", "gfx1100", any gfx
 * processor LLVM knows, with feature suffixes "gfx90a:sramecc+:xnack-"; NVIDIA "sm_80",
 * "sm_90", "sm_90a". Device ids ("hsa:0") are resolved by the caller, who knows the devices.
 * Unknown names: E_INVALID_ARGUMENT listing examples. */
KILN_MUST_USE kiln_status_t kiln_compiler_target_parse(const char *name, kiln_target_t *out_target);

typedef struct kiln_compile_options {
  uint32_t opt_level; /* 0..3 ("O0".."O3"); kiln_compile_options_default() gives 3 */
  uint32_t max_block; /* max work-items per work-group the kernels are launched with; 0: target default */
  bool fast_math;     /* fast-math flags on all FP operations; finite/unsafe device libraries */
} kiln_compile_options_t;

kiln_compile_options_t kiln_compile_options_default(void);
/* "O0".."O3" (also "0".."3") -> 0..3; E_INVALID_ARGUMENT otherwise. */
KILN_MUST_USE kiln_status_t kiln_compile_opt_level_parse(const char *name, uint32_t *out_level);

typedef struct kiln_compile_request {
  const uint8_t *payload; /* borrowed for the duration of the call */
  size_t payload_size;
  kiln_payload_kind_t kind;
  const char *target; /* a name kiln_compiler_target_parse accepts */
  kiln_compile_options_t options;
} kiln_compile_request_t;

typedef struct kiln_compiler_config {
  const char *device_libs_dir; /* NULL: $KILN_DEVICE_LIBS, else /usr/lib/x86_64-linux-gnu/amdgcn/bitcode */
} kiln_compiler_config_t;

typedef struct kiln_compiler kiln_compiler_t;

/* Initialises LLVM's targets (once per process) and creates a compiler. `config` may be NULL.
 * Missing device libraries are not an error here: AMDGPU compiles that need them fail later
 * with E_COMPILE naming the directory. */
KILN_MUST_USE kiln_status_t kiln_compiler_create(const kiln_compiler_config_t *config, kiln_compiler_t **out_compiler);
void kiln_compiler_destroy(kiln_compiler_t *c);

/* Compiles (or validates, for code objects) one payload into `out`, which the caller has
 * NOT initialised and owns on success (kiln_artifact_deinit). Errors: E_INVALID_ARGUMENT
 * (bad target, kind or options), E_COMPILE (the payload: message carries the diagnostics,
 * with line:column for IR syntax errors), E_RESOURCE_EXHAUSTED, E_INTERNAL. */
KILN_MUST_USE kiln_status_t kiln_compiler_compile(kiln_compiler_t *c, const kiln_compile_request_t *req,
                                    kiln_artifact_t *out);

/* "kiln 0.1.0; llvm 22.1.8; device-libs <16 hex of BLAKE2b over the bitcode files>".
 * Computed once; a static string. */
const char *kiln_compiler_identity(void);

#endif
