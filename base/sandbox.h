/* Confinement of a worker process by the kernel, once its initialisation is done (drivers
 * opened, device found, libraries loaded): the layers of docs/operations.md "Security model",
 * each of which holds on its own.
 *
 *   uid        when the process is root: switch to cfg->uid/gid (no supplementary groups)
 *   cwd        an empty directory that no longer exists (made, entered, removed)
 *   rlimits    CORE 0, NOFILE, NPROC, AS
 *   prctl      PR_SET_DUMPABLE 0 (no core, no /proc/PID/mem or ptrace by the same uid),
 *              PR_SET_NO_NEW_PRIVS 1
 *   Landlock   the file system denied except the profile's paths; TCP bind/connect denied;
 *              signals and abstract unix sockets scoped to the process (per kernel ABI;
 *              absent kernels are reported, not refused)
 *   seccomp    an allow-list per profile (libseccomp); anything else traps into a SIGSYS
 *              handler that reports the system call on the channel (kiln_sandbox_violation
 *              notification) and ends the process
 *
 * One worker calls kiln_sandbox_enter once, from its main thread, with no other thread
 * creating threads at the time; every thread that exists then is confined. */
#ifndef KILN_BASE_SANDBOX_H
#define KILN_BASE_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/status.h"

typedef enum kiln_sandbox_profile {
  /* Runs tenants' native code: no files at all (a module is dlopen'ed from a descriptor the
   * worker holds), no new threads or processes, no sockets beyond the channel. */
  KILN_SANDBOX_CPU_DEVICE = 1,
  /* A GPU driver (ROCr, libcuda) in the process: its device files, libraries and threads;
   * tenants' code runs on the GPU, not here. */
  KILN_SANDBOX_GPU_DEVICE = 2,
  /* LLVM and in-process lld: the device libraries, libc/libm as link inputs, and the
   * worker's private temporary directory; threads (lld's pool). */
  KILN_SANDBOX_COMPILER = 3,
} kiln_sandbox_profile_t;

#define KILN_SANDBOX_MAX_PATHS 24

typedef struct kiln_sandbox_config {
  kiln_sandbox_profile_t profile;
  int channel_fd;   /* where a violation is reported */
  uid_t uid;        /* when running as root: switch to uid/gid first (both required) */
  gid_t gid;
  uint64_t max_address_space; /* RLIMIT_AS in bytes; 0 leaves it */
  uint64_t max_files;         /* RLIMIT_NOFILE; 0 leaves it */
  /* Landlock rules (paths that do not exist are skipped): read beneath; read and execute
   * beneath (libraries a driver may load late); everything beneath; device files (read,
   * write, ioctl). NULL-terminated. */
  const char *read[KILN_SANDBOX_MAX_PATHS];
  const char *exec[KILN_SANDBOX_MAX_PATHS];
  const char *write[KILN_SANDBOX_MAX_PATHS];
  const char *devices[KILN_SANDBOX_MAX_PATHS];
  /* Layers left out (KILN_SANDBOX_OMIT_*): workers leave none out; tests use it to show
   * that each layer holds on its own. */
  unsigned omit;
} kiln_sandbox_config_t;

#define KILN_SANDBOX_OMIT_SECCOMP 1u
#define KILN_SANDBOX_OMIT_LANDLOCK 2u

/* What was put in force, for the worker's log line. */
typedef struct kiln_sandbox_report {
  int landlock_abi;        /* 0: this kernel has no Landlock: the file system layer is absent */
  unsigned threads;        /* threads of the process when it was confined */
  unsigned landlock_threads; /* threads Landlock confines (all of them unless a driver thread
                              * blocked the signal that applies it) */
  bool cwd_removed;        /* the working directory is an empty, removed directory */
  uid_t uid;               /* uid the worker runs as */
} kiln_sandbox_report_t;

/* Closes every descriptor above 2 except `keep` (call first in main, before anything opens
 * files): nothing inherited from kilnd beyond the channel. */
void kiln_sandbox_close_inherited(int keep);

/* Confines the calling process as described above. On error the process is partly confined
 * and must exit. */
KILN_MUST_USE kiln_status_t kiln_sandbox_enter(const kiln_sandbox_config_t *cfg, kiln_sandbox_report_t *out_report);

/* The notification a confined worker sends before it ends on a forbidden system call:
 *   [2, "sandbox_violation", [{"syscall": NR, "arch": AUDIT_ARCH}]]
 * The worker then exits with KILN_SANDBOX_EXIT_STATUS. */
#define KILN_SANDBOX_VIOLATION "sandbox_violation"
#define KILN_SANDBOX_EXIT_STATUS 159 /* 128 + SIGSYS, as a shell shows a SIGSYS death */

/* "openat" for (arch, nr) as libseccomp knows it; "syscall NR" when it does not, and
 * "NAME (i386)" for another architecture's table. */
void kiln_sandbox_syscall_name(uint32_t arch, int nr, char *out, size_t cap);

/* The Landlock ABI of this kernel (0 when absent or disabled). */
int kiln_sandbox_landlock_abi(void);

#endif
