/* The compiler object and one compile job from request to artifact: picks the path by
 * payload kind and target, owns the job's LLVM context, collects diagnostics. */
#include <llvm-c/Core.h>
#include <llvm-c/ErrorHandling.h>
#include <llvm-c/Target.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "compiler/internal.h"
#include "compiler/te/te.h"

/* ---- small shared helpers ---------------------------------------------------------- */

char *kc_strdup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static void buf_vprintf(kiln_buf_t *b, const char *fmt, va_list ap) {
  char line[2048];
  int n = vsnprintf(line, sizeof(line), fmt, ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
  kiln_status_t s = kiln_buf_append(b, line, len);
  if (!s) s = kiln_buf_append(b, "\n", 1);
  kiln_status_free(s);
}

void kc_log(kc_job_t *job, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  buf_vprintf(&job->log, fmt, ap);
  va_end(ap);
}

void kc_mark(kc_job_t *job, const char *stage) {
  if (!job->timing) return;
  uint64_t now = kiln_now_ns();
  size_t n = strlen(job->timing_text);
  snprintf(job->timing_text + n, sizeof(job->timing_text) - n, " %s=%.2f", stage, (double)(now - job->mark_ns) / 1e6);
  job->mark_ns = now;
}

kiln_status_t kc_check_diagnostics(kc_job_t *job, const char *stage) {
  if (!job->errors.len) return KILN_OK;
  /* Drop the trailing newline; the message is one block of text. */
  size_t n = job->errors.len;
  while (n && job->errors.data[n - 1] == '\n') n--;
  if (n > 8000) n = 8000;
  return KC_COMPILE_ERROR("%s failed for %s: %.*s", stage, job->target.id, (int)n,
                          (const char *)job->errors.data);
}

static void diagnostic_cb(LLVMDiagnosticInfoRef di, void *ud) {
  kc_job_t *job = ud;
  char *text = LLVMGetDiagInfoDescription(di);
  LLVMDiagnosticSeverity sev = LLVMGetDiagInfoSeverity(di);
  switch (sev) {
  case LLVMDSError: {
    kiln_status_t s = kiln_buf_append(&job->errors, text, strlen(text));
    if (!s) s = kiln_buf_append(&job->errors, "\n", 1);
    kiln_status_free(s);
    break;
  }
  case LLVMDSWarning: kc_log(job, "warning: %s", text); break;
  default: break; /* remarks and notes are noise for clients */
  }
  LLVMDisposeMessage(text);
}

/* LLVM calls this on report_fatal_error and then ends the process. Only async-signal-safe
 * calls here: the process may be in any state. */
static void fatal_error_cb(const char *reason) {
  static const char head[] = "kiln compile worker: LLVM fatal error, the process ends (the job "
                             "fails with E_COMPILER_CRASHED): ";
  ssize_t r = write(2, head, sizeof(head) - 1);
  r = write(2, reason, strlen(reason));
  r = write(2, "\n", 1);
  (void)r;
}

/* ---- kinds and options ------------------------------------------------------------- */

kiln_compile_options_t kiln_compile_options_default(void) {
  return (kiln_compile_options_t){.opt_level = 3, .max_block = 0, .fast_math = false};
}

kiln_status_t kiln_compile_opt_level_parse(const char *name, uint32_t *out_level) {
  const char *p = name && (name[0] == 'O' || name[0] == 'o') ? name + 1 : name;
  if (p && p[0] >= '0' && p[0] <= '3' && p[1] == 0) {
    *out_level = (uint32_t)(p[0] - '0');
    return KILN_OK;
  }
  return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "unknown optimisation level '%s': use \"O0\" to \"O3\"",
                     name ? name : "(null)");
}

/* ---- create / destroy -------------------------------------------------------------- */

static pthread_once_t llvm_once = PTHREAD_ONCE_INIT;

static void llvm_init(void) {
  LLVMInstallFatalErrorHandler(fatal_error_cb);
  LLVMInitializeAMDGPUTargetInfo();
  LLVMInitializeAMDGPUTarget();
  LLVMInitializeAMDGPUTargetMC();
  LLVMInitializeAMDGPUAsmPrinter();
  LLVMInitializeAMDGPUDisassembler();
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTarget();
  LLVMInitializeNVPTXTargetMC();
  LLVMInitializeNVPTXAsmPrinter();
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  LLVMInitializeNativeDisassembler();
}

kiln_status_t kiln_compiler_create(const kiln_compiler_config_t *config, kiln_compiler_t **out_compiler) {
  pthread_once(&llvm_once, llvm_init);
  kiln_compiler_t *c = calloc(1, sizeof(*c));
  if (!c) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory creating the compiler");
  const char *dir = config && config->device_libs_dir ? config->device_libs_dir : NULL;
  if (!dir) dir = getenv("KILN_DEVICE_LIBS");
  if (!dir) dir = kc_devlibs_default_dir();
  snprintf(c->devlibs_dir, sizeof(c->devlibs_dir), "%s", dir);
  *out_compiler = c;
  return KILN_OK;
}

void kiln_compiler_destroy(kiln_compiler_t *c) {
  if (!c) return;
  for (size_t i = 0; i < sizeof(c->tms) / sizeof(c->tms[0]); i++)
    if (c->tms[i].tm) LLVMDisposeTargetMachine(c->tms[i].tm);
  kc_devlibs_release(c);
  kc_link_cleanup(c);
  free(c);
}

/* ---- one job ----------------------------------------------------------------------- */

static kiln_status_t check_kind_fits_target(kiln_payload_kind_t kind, const kiln_target_t *t) {
  kiln_target_kind_t want = kind == KILN_PAYLOAD_HSACO ? KILN_TARGET_AMDGPU
                            : kind == KILN_PAYLOAD_PTX  ? KILN_TARGET_NVPTX
                                                        : KILN_TARGET_CPU;
  if (kind == KILN_PAYLOAD_LLVM || kind == KILN_PAYLOAD_TE || want == t->kind) return KILN_OK;
  return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                     "a %s code object cannot run on target %s: send it for %s, or send LLVM IR to "
                     "compile for %s",
                     kiln_payload_kind_name(kind), t->id,
                     want == KILN_TARGET_AMDGPU ? "a gfx target"
                     : want == KILN_TARGET_NVPTX ? "an sm_ target"
                                                 : "\"cpu\"",
                     t->id);
}

static kiln_status_t compile_module(kc_job_t *job, kiln_artifact_t *out);

static kiln_status_t compile_llvm(kc_job_t *job, kiln_artifact_t *out) {
  KILN_RETURN_IF_ERROR(kc_parse(job));
  KILN_RETURN_IF_ERROR(kc_verify(job, "the IR as received"));
  kc_mark(job, "parse");
  return compile_module(job, out);
}

/* A tensor-expression program lowered to the dialect, then the dialect's path; the launch
 * recipes join the kernel table. */
static kiln_status_t compile_te(kc_job_t *job, kiln_artifact_t *out) {
  kc_te_program_t *prog = NULL;
  kiln_status_t s = kc_te_build(job, &prog);
  job->ir_kind = KC_IR_DIALECT;
  if (!s) s = kc_verify(job, "the IR lowered from the te program");
  kc_mark(job, "te");
  if (!s) s = compile_module(job, out);
  if (!s) s = kc_te_attach_launch(prog, out);
  kc_te_free(prog);
  return s;
}

static kiln_status_t compile_module(kc_job_t *job, kiln_artifact_t *out) {
  KILN_RETURN_IF_ERROR(kc_target_machine(job));
  KILN_RETURN_IF_ERROR(kc_prepare(job));
  switch (job->target.kind) {
  case KILN_TARGET_AMDGPU:
    KILN_RETURN_IF_ERROR(kc_lower_gpu(job));
    return kc_amdgpu_build(job, out);
  case KILN_TARGET_NVPTX:
    KILN_RETURN_IF_ERROR(kc_lower_gpu(job));
    return kc_nvptx_build(job, out);
  case KILN_TARGET_CPU:
    KILN_RETURN_IF_ERROR(kc_lower_cpu(job));
    if (job->req->kind == KILN_PAYLOAD_TE) kc_te_tune_cpu(job);
    return kc_cpu_build(job, out);
  }
  return KILN_STATUS(KILN_E_INTERNAL, "unhandled target kind %d", (int)job->target.kind);
}

static kiln_status_t run_job(kc_job_t *job, kiln_artifact_t *out) {
  const kiln_compile_request_t *req = job->req;
  if (!req->payload || !req->payload_size)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "the payload is empty: send LLVM IR or a code object");
  if (req->options.opt_level > 3)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "optimisation level %u: use 0 to 3", req->options.opt_level);
  if (req->options.max_block > 1024)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "max_block %u: at most 1024 work-items per work-group",
                       req->options.max_block);
  KILN_RETURN_IF_ERROR(kiln_compiler_target_parse(req->target, &job->target));
  kiln_payload_kind_t kind = kiln_payload_resolve(req->kind, req->payload, req->payload_size);
  if ((unsigned)kind > KILN_PAYLOAD_TE)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "unknown payload kind %d", (int)kind);
  KILN_RETURN_IF_ERROR(check_kind_fits_target(kind, &job->target));

  snprintf(out->target, sizeof(out->target), "%s", job->target.id);
  switch (kind) {
  case KILN_PAYLOAD_HSACO: return kc_validate_hsaco(job, out);
  case KILN_PAYLOAD_PTX: return kc_validate_ptx(job, out);
  case KILN_PAYLOAD_CPU_SO: return kc_validate_cpu_so(job, out);
  default: break;
  }
  job->ctx = LLVMContextCreate();
  LLVMContextSetDiagnosticHandler(job->ctx, diagnostic_cb, job);
  kiln_status_t s = kind == KILN_PAYLOAD_TE ? compile_te(job, out) : compile_llvm(job, out);
  if (!s) s = kc_check_diagnostics(job, "compilation");
  return s;
}

kiln_status_t kiln_compiler_compile(kiln_compiler_t *c, const kiln_compile_request_t *req,
                                    kiln_artifact_t *out) {
  kc_job_t *job = calloc(1, sizeof(*job));
  if (!job) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory starting a compile job");
  job->c = c;
  job->req = req;
  job->values = malloc(KC_MAX_VALUES * sizeof(LLVMValueRef));
  if (!job->values) {
    free(job);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory starting a compile job");
  }
  const char *timing = getenv("KILN_COMPILE_TIMING");
  job->timing = timing && timing[0] == '1';
  job->mark_ns = kiln_now_ns();
  kiln_buf_init(&job->log);
  kiln_buf_init(&job->errors);
  kiln_buf_init(&job->param_names);
  kiln_artifact_t art;
  kiln_artifact_init(&art);

  kiln_status_t s = run_job(job, &art);
  if (!s && job->timing) kc_log(job, "timing (ms):%s", job->timing_text);
  if (!s && job->log.len) {
    kiln_status_t a = kiln_buf_append(&job->log, "", 1);
    if (!a) {
      free(art.log);
      art.log = (char *)kiln_buf_release(&job->log, &(size_t){0});
    }
    kiln_status_free(a);
  }
  if (job->mod) LLVMDisposeModule(job->mod);
  if (job->ctx) LLVMContextDispose(job->ctx);
  kiln_buf_deinit(&job->log);
  kiln_buf_deinit(&job->errors);
  kiln_buf_deinit(&job->param_names);
  free(job->values);
  free(job);
  if (s) {
    kiln_artifact_deinit(&art);
    return s;
  }
  *out = art;
  return KILN_OK;
}

/* ---- identity and keys ------------------------------------------------------------- */

static pthread_once_t identity_once = PTHREAD_ONCE_INIT;
static char identity[160];

static void identity_init(void) {
  char libs[2 * 8 + 1] = "none";
  uint8_t digest[KILN_HASH_BYTES];
  const char *dir = getenv("KILN_DEVICE_LIBS");
  if (kc_devlibs_fingerprint(dir ? dir : kc_devlibs_default_dir(), digest)) kiln_hex(digest, 8, libs);
  snprintf(identity, sizeof(identity), "kiln %s; llvm %s; device-libs %s", KILN_VERSION,
           KILN_LLVM_VERSION, libs);
}

const char *kiln_compiler_identity(void) {
  pthread_once(&identity_once, identity_init);
  return identity;
}
