/* What needs kernels to run (built only with the interpreter, device/softgpu/isa): correct
 * results through a correct client, and the rules a client can only break while a dispatch is in
 * flight or a kernel misbehaves. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "spawn.h"

static sp_result_t run(const char *scenario) {
  sp_result_t r;
  sp_client(scenario, NULL, &r);
  cr_log_info("%s: exit %d signal %d\n--- stdout\n%s--- stderr\n%s", scenario, r.exit_code, r.signal, r.out, r.err);
  cr_assert(!r.timed_out, "%s timed out", scenario);
  return r;
}

#define HAS(text, what) cr_expect(strstr((text), (what)) != NULL, "expected \"%s\" in:\n%s", (what), (text))

Test(exec, vadd_through_a_correct_client) {
  h_env_t e;
  h_open(&e);
  h_program_t p;
  h_read_kernels(&p);
  cr_assert_eq(h_load(&e, &p, true), HSA_STATUS_SUCCESS);
  h_kernel_t k = h_kernel(&e, &p, "vadd");
  enum { N = 1000 };
  float a[N], b[N], c[N];
  for (int i = 0; i < N; i++) a[i] = (float)i * 0.5f, b[i] = 1000.0f - (float)i;
  float *da = h_alloc(e.vram, sizeof a, NULL), *db = h_alloc(e.vram, sizeof b, NULL), *dc = h_alloc(e.vram, sizeof c, NULL);
  cr_assert_eq(hsa_memory_copy(da, a, sizeof a), HSA_STATUS_SUCCESS);
  cr_assert_eq(hsa_memory_copy(db, b, sizeof b), HSA_STATUS_SUCCESS);
  uint64_t *ka = h_alloc(e.kernarg, 4096, &e.gpu);
  ka[0] = (uint64_t)(uintptr_t)da, ka[1] = (uint64_t)(uintptr_t)db, ka[2] = (uint64_t)(uintptr_t)dc;
  ((uint32_t *)ka)[6] = N;
  hsa_queue_t *q;
  cr_assert_eq(hsa_queue_create(e.gpu, 64, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX, &q), HSA_STATUS_SUCCESS);
  cr_assert(h_run(q, &k, (N + 63) / 64, ka, 0, 10000), "vadd did not complete");
  cr_assert_eq(hsa_memory_copy(c, dc, sizeof c), HSA_STATUS_SUCCESS);
  for (int i = 0; i < N; i++) cr_assert_eq(c[i], a[i] + b[i], "c[%d] = %g", i, c[i]);
  cr_assert_eq(hsa_queue_load_read_index_scacquire(q), 1);
  hsa_queue_destroy(q);
  hsa_shut_down();
}

Test(exec, kernarg_changed_while_the_dispatch_runs) {
  sp_result_t r = run("kernarg-changed");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.err, "changed while the dispatch was in flight");
  HAS(r.out, "callback: HSA_STATUS_ERROR_INVALID_ARGUMENT");
  HAS(r.out, "completed: no");
  sp_free(&r);
}

Test(exec, a_slot_rewritten_while_its_packet_runs) {
  sp_result_t r = run("slot-rewritten-in-flight");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.err, "the packet's slot changed while it was being processed");
  HAS(r.out, "callback: HSA_STATUS_ERROR_INVALID_PACKET_FORMAT");
  HAS(r.out, "completed: no");
  sp_free(&r);
}

Test(exec, memory_signal_and_executable_in_use_are_not_released) {
  sp_result_t r = run("free-in-flight");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "free while running: HSA_STATUS_ERROR_INVALID_ARGUMENT");
  HAS(r.err, "is in use by dispatch 0, which has not completed");
  HAS(r.out, "destroy executable while running: HSA_STATUS_ERROR_RESOURCE_FREE");
  HAS(r.out, "destroy completion signal while running: HSA_STATUS_ERROR_RESOURCE_FREE");
  HAS(r.out, "completed: yes");
  HAS(r.out, "work-items counted: 64"); /* the kernel still wrote where it was told */
  HAS(r.out, "free after completion: HSA_STATUS_SUCCESS");
  HAS(r.out, "destroy executable after completion: HSA_STATUS_SUCCESS");
  sp_free(&r);
}

Test(exec, lds_beyond_the_packets_group_segment) {
  sp_result_t r = run("lds-beyond");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "callback: HSA_STATUS_ERROR_INVALID_ALLOCATION");
  HAS(r.out, "completed: no");
  sp_free(&r);
}

Test(exec, a_kernels_memory_fault_reaches_the_event_handler) {
  sp_result_t r = run("kernel-fault");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "event: memory fault at 0x1000 reason 0x1 agent gpu");
  HAS(r.out, "completed: no");
  sp_free(&r);
}

Test(exec, a_kernel_writing_its_code_faults_read_only) {
  sp_result_t r = run("kernel-writes-code");
  cr_assert_eq(r.exit_code, 0);
  char *at = strstr(r.out, "poking ");
  cr_assert(at);
  char want[96];
  snprintf(want, sizeof want, "event: memory fault at 0x%llx reason 0x2 agent gpu",
           strtoull(at + strlen("poking "), NULL, 16));
  HAS(r.out, want);
  sp_free(&r);
}

Test(exec, a_kernels_memory_fault_without_handler_aborts_with_rocrs_text) {
  sp_result_t r = run("kernel-fault-nohandler");
  cr_assert_eq(r.signal, SIGABRT);
  HAS(r.err, "Memory access fault by GPU node-1 (Agent handle: 0x");
  HAS(r.err, "on address 0x1000. Reason: Page not present or supervisor privilege.");
  sp_free(&r);
}

/* SOFTGPU_CHECK=uninit: the stand-in marks VRAM bytes the host copies or fills; the interpreter
 * reports a kernel's read of bytes nothing wrote. */
Test(exec, reads_of_vram_nothing_wrote_are_reported) {
  sp_result_t r;
  const char *env[] = {"SOFTGPU_CHECK=uninit", NULL};
  sp_client("uninit-read", env, &r);
  cr_log_info("exit %d\n%s\n%s", r.exit_code, r.out, r.err);
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "completed: yes");
  unsigned long long a = 0, b = 0;
  cr_assert_eq(sscanf(strstr(r.out, "a at "), "a at %llx, b at %llx", &a, &b), 2);
  const char *rep = strstr(r.err, "uninitialised read");
  cr_assert(rep, "no uninitialised-read report:\n%s", r.err);
  const char *at = strstr(rep, "reads 0x");
  cr_assert(at, "%s", rep);
  unsigned long long addr = strtoull(at + strlen("reads "), NULL, 16);
  cr_expect(addr >= b && addr < b + 256, "the report names 0x%llx, not b [0x%llx, +256)", addr, b);
  cr_expect(!(addr >= a && addr < a + 256), "a was copied from the host: it is initialised");
  sp_free(&r);
}
