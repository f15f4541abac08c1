/* Shared between the compiler's own files; never included outside compiler/. */
#ifndef KILN_COMPILER_INTERNAL_H
#define KILN_COMPILER_INTERNAL_H

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>
#include <llvm/Config/llvm-config.h>
#include <stdbool.h>

#include "base/buf.h"
#include "compiler/compiler.h"

#define KC_KERNEL_SECTION "kiln.kernel"
#define KC_MAX_KERNELS 256
#define KC_MAX_PARAMS 128
#define KC_MAX_VALUES 65536 /* calls of one builtin, users of one global */

/* One device library, read once per process, parsed lazily per job. */
typedef struct kc_devlib {
  char name[48]; /* file name without ".bc" */
  uint8_t *bytes;
  size_t len;
} kc_devlib_t;

typedef struct kc_tm_entry {
  char key[256];
  LLVMTargetMachineRef tm;
  uint64_t last_used;
} kc_tm_entry_t;

struct kiln_compiler {
  char devlibs_dir[512];
  kc_devlib_t devlibs[64];
  size_t num_devlibs;
  kc_tm_entry_t tms[8];
  uint64_t tick;
  char tmpdir[256]; /* per compiler, for the linker's files; made on first link */
};

/* A kernel found in the payload, with its explicit parameters. */
typedef struct kc_kernel {
  char name[128];
  LLVMValueRef fn; /* valid while the module lives; replaced by lowering passes */
  uint32_t num_params;
  kiln_arg_type_t params[KC_MAX_PARAMS];
  uint32_t names;                 /* offset in the job's param_names: the IR's parameter names */
  uint32_t group_segment_size;   /* cpu: bytes of static work-group memory */
  uint32_t private_segment_size; /* cpu: per-work-item bytes kept across barriers */
} kc_kernel_t;

typedef enum kc_ir_kind {
  KC_IR_DIALECT = 1, /* kernels in section "kiln.kernel", any or no triple */
  KC_IR_AMDGPU,      /* target IR for amdgcn-amd-amdhsa */
  KC_IR_NVPTX,       /* target IR for nvptx64-nvidia-cuda */
} kc_ir_kind_t;

/* Everything one compile job holds. Owned by kiln_compiler_compile; one LLVM context per
 * job so that nothing a payload creates outlives it. */
typedef struct kc_job {
  kiln_compiler_t *c;
  const kiln_compile_request_t *req;
  kiln_target_t target;
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMTargetMachineRef tm; /* borrowed from the compiler's cache */
  kc_ir_kind_t ir_kind;
  kiln_buf_t log;          /* warnings, one per line */
  kiln_buf_t errors;       /* error diagnostics reported through the handler */
  kiln_buf_t param_names;  /* each kernel's parameter names, NUL-terminated, in order */
  uint32_t num_kernels;
  kc_kernel_t kernels[KC_MAX_KERNELS];
  LLVMValueRef *values; /* KC_MAX_VALUES entries of scratch for call and user lists */
  /* KILN_COMPILE_TIMING=1: per-stage milliseconds go into the log. */
  bool timing;
  uint64_t mark_ns;
  char timing_text[512];
} kc_job_t;

#define KC_COMPILE_ERROR(...) KILN_STATUS(KILN_E_COMPILE, __VA_ARGS__)

/* compiler.c */
void kc_log(kc_job_t *job, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Ends a stage for the timing line (a no-op unless job->timing). */
void kc_mark(kc_job_t *job, const char *stage);
/* E_COMPILE with the diagnostics collected so far, if any error was reported; else OK. */
KILN_MUST_USE kiln_status_t kc_check_diagnostics(kc_job_t *job, const char *stage);
char *kc_strdup_or_null(const char *s);

/* target.c */
bool kc_target_is_known_gfx(const char *gfx, uint32_t *out_default_wave);

/* emit.c */
KILN_MUST_USE kiln_status_t kc_target_machine(kc_job_t *job);
KILN_MUST_USE kiln_status_t kc_run_passes(kc_job_t *job, const char *pipeline);
/* The pipeline string for the job's opt level ("default<O3>"). */
const char *kc_default_pipeline(kc_job_t *job);
KILN_MUST_USE kiln_status_t kc_emit(kc_job_t *job, LLVMCodeGenFileType type, uint8_t **out, size_t *out_len);
KILN_MUST_USE kiln_status_t kc_print_module(kc_job_t *job, char **out_text);
KILN_MUST_USE kiln_status_t kc_optimize(kc_job_t *job, const char *stage, char **out_ir);
KILN_MUST_USE kiln_status_t kc_emit_object_and_assembly(kc_job_t *job, uint8_t **out_obj, size_t *out_len, char **out_asm);

/* disasm.c: a listing of the executable sections of an emitted object. */
KILN_MUST_USE kiln_status_t kc_disassemble(kc_job_t *job, const uint8_t *obj, size_t len, char **out_text);

/* parse.c */
KILN_MUST_USE kiln_status_t kc_parse(kc_job_t *job);
KILN_MUST_USE kiln_status_t kc_verify(kc_job_t *job, const char *stage);

/* dialect.c: target-independent preparation of a parsed module. */
KILN_MUST_USE kiln_status_t kc_prepare(kc_job_t *job);
KILN_MUST_USE kiln_status_t kc_param_type(kc_job_t *job, LLVMTypeRef t, const char *kernel, uint32_t index,
                            kiln_arg_type_t *out);
void kc_strip_target_attributes(LLVMModuleRef m);
void kc_internalize(kc_job_t *job, bool (*is_entry)(LLVMValueRef fn));
void kc_set_fast_math(LLVMModuleRef m);
LLVMValueRef kc_get_function(LLVMModuleRef m, const char *name, LLVMTypeRef fn_type);
/* Calls to `name` in the module, collected (the caller rewrites them). Returns the count. */
size_t kc_collect_calls(LLVMModuleRef m, const char *name, LLVMValueRef *out, size_t cap);

/* imports.c: what a kernel may reach outside its module. On the IR as received, every
 * target: undefined functions and globals, intrinsics, assembly, load-time code; turns
 * available_externally bodies into the definition. */
KILN_MUST_USE kiln_status_t kc_check_imports(kc_job_t *job);
/* On a linked cpu shared object: undefined symbols, load-time code, needed libraries. */
KILN_MUST_USE kiln_status_t kc_cpu_check_imports(const uint8_t *so, size_t len);

/* lower_gpu.c: builtins, calling convention, address spaces for AMDGPU and NVPTX. */
KILN_MUST_USE kiln_status_t kc_lower_gpu(kc_job_t *job);

/* mathnames.c */
/* 1 if `name` is a math function of docs/kernels.md §3 with the C library's signature,
 * -1 if it is one with another signature, 0 if it is not a math name. */
int kc_math_name(LLVMContextRef ctx, const char *name, LLVMTypeRef fn_type);
/* Whether a libm symbol is one the cpu code of the math set may import. */
bool kc_math_libm_symbol(const char *name);
KILN_MUST_USE kiln_status_t kc_map_math(kc_job_t *job);
void kc_math_pure_cpu(kc_job_t *job);
/* cpu: kc_math_pure_cpu, then kiln's own vectorisable functions (tanhf) linked in. */
KILN_MUST_USE kiln_status_t kc_map_math_cpu(kc_job_t *job);

/* nvptx_math.c: kiln's own math functions for NVPTX (bitcode built from mathlib/). */
KILN_MUST_USE kiln_status_t kc_link_nvptx_math(kc_job_t *job);
KILN_MUST_USE kiln_status_t kc_link_cpu_math(kc_job_t *job);

/* lower_cpu.c */
KILN_MUST_USE kiln_status_t kc_lower_cpu(kc_job_t *job);

/* ir_clone.c: copies the body of `src` into the empty function `dst`, which has the same
 * parameter types. `vmap` (src value -> dst value, keyed by pointer; blocks by
 * LLVMBasicBlockAsValue) may be pre-seeded and is filled. */
struct kiln_map;
KILN_MUST_USE kiln_status_t kc_clone_body(LLVMValueRef src, LLVMValueRef dst, struct kiln_map *vmap);

/* devlibs.c */
KILN_MUST_USE kiln_status_t kc_devlibs_link(kc_job_t *job);
void kc_devlibs_release(kiln_compiler_t *c);
const char *kc_devlibs_default_dir(void);
/* BLAKE2b over the names and bytes of the device-library files; false if none are there. */
bool kc_devlibs_fingerprint(const char *dir, uint8_t out[KILN_HASH_BYTES]);

/* amdgpu.c, nvptx.c, cpu.c: back ends from a lowered module to an artifact. */
KILN_MUST_USE kiln_status_t kc_amdgpu_build(kc_job_t *job, kiln_artifact_t *out);
KILN_MUST_USE kiln_status_t kc_nvptx_build(kc_job_t *job, kiln_artifact_t *out);
KILN_MUST_USE kiln_status_t kc_cpu_build(kc_job_t *job, kiln_artifact_t *out);

/* amdgpu_metadata.c: the NT_AMDGPU_METADATA note into the kernel table. */
KILN_MUST_USE kiln_status_t kc_amdgpu_metadata_parse(const uint8_t *elf, size_t len, const kc_job_t *job_or_null,
                                       kiln_artifact_t *art, char *out_target, size_t target_cap);

/* elf.c: just enough ELF64 for our own checks. */
typedef struct kc_elf {
  const uint8_t *data;
  size_t len;
  uint16_t type, machine;
  uint32_t flags;
  uint64_t shoff;
  uint16_t shnum, shentsize;
  uint64_t phoff;
  uint16_t phnum, phentsize;
} kc_elf_t;
KILN_MUST_USE kiln_status_t kc_elf_open(const uint8_t *data, size_t len, kc_elf_t *out);
/* Calls cb for each note in PT_NOTE segments and SHT_NOTE sections; cb returns true to stop. */
void kc_elf_notes(const kc_elf_t *e,
                  bool (*cb)(void *ud, const char *name, uint32_t name_len, uint32_t type,
                             const uint8_t *desc, uint32_t desc_len),
                  void *ud);
/* Finds a defined symbol in .dynsym (then .symtab); returns its bytes in the file if it lies
 * in a PROGBITS section. */
bool kc_elf_symbol(const kc_elf_t *e, const char *name, const uint8_t **out_bytes, uint64_t *out_size);
typedef struct kc_elf_section {
  uint32_t index, type;
  uint64_t flags, addr, offset, size;
  const char *name;
} kc_elf_section_t;
/* Sections whose bytes lie inside the file (or are NOBITS); cb returns true to stop. */
void kc_elf_sections(const kc_elf_t *e, bool (*cb)(void *ud, const kc_elf_section_t *s), void *ud);
/* Symbols of .symtab with their section index and value; cb returns true to stop. */
void kc_elf_symbols(const kc_elf_t *e,
                    bool (*cb)(void *ud, const char *name, uint8_t info, uint16_t shndx, uint64_t value), void *ud);
/* Iterates defined global function symbols of .dynsym. */
void kc_elf_dynsyms(const kc_elf_t *e, bool (*cb)(void *ud, const char *name, uint8_t info), void *ud);
/* Undefined symbols of .dynsym: what the dynamic loader binds from other objects. */
void kc_elf_undefined(const kc_elf_t *e, bool (*cb)(void *ud, const char *name, uint8_t info), void *ud);
/* Entries of the dynamic section up to DT_NULL; `str` is the value read as an offset into the
 * dynamic string table (NULL where it is not a string there). cb returns true to stop. */
void kc_elf_dynamic(const kc_elf_t *e, bool (*cb)(void *ud, uint64_t tag, uint64_t value, const char *str),
                    void *ud);

void kc_link_cleanup(kiln_compiler_t *c);

/* lld_link.cpp */
#ifdef __cplusplus
extern "C" {
#endif
/* Runs ld.lld in-process with argv (argv[0] = "ld.lld"). Returns 0 on success; diagnostics
 * are written to `err` (NUL-terminated, truncated to cap). Serialised by a mutex. */
int kc_lld_link(const char *const *argv, int argc, char *err, size_t cap);
#ifdef __cplusplus
}
#endif
/* link.c: object bytes -> shared object bytes with in-process lld. */
KILN_MUST_USE kiln_status_t kc_link_shared(kc_job_t *job, const uint8_t *obj, size_t obj_len,
                             const char *const *extra_args, size_t n_extra, uint8_t **out,
                             size_t *out_len);

/* validate.c */
KILN_MUST_USE kiln_status_t kc_validate_hsaco(kc_job_t *job, kiln_artifact_t *out);
KILN_MUST_USE kiln_status_t kc_validate_ptx(kc_job_t *job, kiln_artifact_t *out);
KILN_MUST_USE kiln_status_t kc_validate_cpu_so(kc_job_t *job, kiln_artifact_t *out);

/* kernel_table.c */
KILN_MUST_USE kiln_status_t kc_kernel_table_from_signatures(kc_job_t *job, kiln_artifact_t *out);
/* cpu: the text of the `__kiln_kernels` descriptor, and its parser. */
char *kc_cpu_descriptor(const kc_job_t *job);
KILN_MUST_USE kiln_status_t kc_cpu_descriptor_parse(const char *text, size_t len, kiln_artifact_t *out);
/* ptx: `.entry` lines into the kernel table. */
KILN_MUST_USE kiln_status_t kc_ptx_kernel_table(const char *ptx, size_t len, kiln_artifact_t *out);

#endif
