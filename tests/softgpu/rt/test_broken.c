/* Every strictness rule against a client that breaks it (client.c), run as its own process:
 * the rule must catch it, with the status ROCr would give and a message that says what to fix. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spawn.h"

static sp_result_t run(const char *scenario) {
  sp_result_t r;
  sp_client(scenario, NULL, &r);
  cr_log_info("%s: exit %d signal %d\n--- stdout\n%s--- stderr\n%s", scenario, r.exit_code, r.signal, r.out, r.err);
  cr_assert(!r.timed_out, "%s timed out", scenario);
  return r;
}

#define HAS(text, what) cr_expect(strstr((text), (what)) != NULL, "expected \"%s\" in:\n%s", (what), (text))
#define LACKS(text, what) cr_expect(strstr((text), (what)) == NULL, "did not expect \"%s\" in:\n%s", (what), (text))

Test(broken, queue_size_not_a_power_of_two) {
  sp_result_t r = run("npot-queue");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "size 100: HSA_STATUS_ERROR_INVALID_ARGUMENT");
  HAS(r.out, "size 0: HSA_STATUS_ERROR_INVALID_ARGUMENT");
  HAS(r.out, "size 1<<20: HSA_STATUS_ERROR_OUT_OF_RESOURCES");
  HAS(r.out, "cpu agent: HSA_STATUS_ERROR_INVALID_QUEUE_CREATION");
  HAS(r.err, "size 100 is not a power of two");
  sp_free(&r);
}

Test(broken, doorbell_rung_before_the_header) {
  sp_result_t r = run("doorbell-before-header");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.err, "but its header is still INVALID after 100 ms");
  /* the packet processor waits, as hardware does, and the packet still runs once published */
  HAS(r.out, "completed: yes");
  sp_free(&r);
}

Test(broken, header_published_before_the_body) {
  sp_result_t r = run("header-before-body");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.err, "body changed after its header was already valid");
  HAS(r.out, "callback: HSA_STATUS_ERROR_INVALID_PACKET_FORMAT");
  HAS(r.out, "completed: no");
  sp_free(&r);
}

Test(broken, kernarg_misaligned) {
  sp_result_t r = run("kernarg-misaligned");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "callback: HSA_STATUS_ERROR_INVALID_ARGUMENT");
  HAS(r.err, "is not 16-byte aligned");
  HAS(r.out, "completed: no");
  sp_free(&r);
}

Test(broken, kernarg_shorter_than_the_kernels_arguments) {
  sp_result_t r = run("kernarg-short");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "callback: HSA_STATUS_ERROR_INVALID_ARGUMENT");
  HAS(r.err, "does not hold the kernel's 28 kernarg bytes");
  sp_free(&r);
}

Test(broken, kernarg_in_plain_host_memory) {
  sp_result_t r = run("kernarg-host-memory");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "callback: HSA_STATUS_ERROR_INVALID_ARGUMENT");
  HAS(r.err, "allocate it from the kernarg pool");
  sp_free(&r);
}

Test(broken, kernarg_not_gpu_accessible_raises_a_memory_fault) {
  sp_result_t r = run("kernarg-not-accessible");
  cr_assert_eq(r.exit_code, 0);
  char *at = strstr(r.out, "kernarg at ");
  cr_assert(at);
  unsigned long long ka = strtoull(at + strlen("kernarg at "), NULL, 16);
  char want[128];
  snprintf(want, sizeof want, "event: memory fault at 0x%llx reason 0x1 agent gpu", ka);
  HAS(r.out, want);
  HAS(r.err, "call hsa_amd_agents_allow_access for it");
  /* the faulted queue stays dead, as after KFD evicts it */
  HAS(r.out, "completed: no\nnext packet on the faulted queue: completed: no");
  LACKS(r.out, "callback:"); /* R: memory faults go to the system event handlers only */
  sp_free(&r);
}

Test(broken, memory_fault_without_a_handler_aborts_with_rocrs_text) {
  sp_result_t r = run("kernarg-not-accessible-nohandler");
  cr_assert_eq(r.signal, SIGABRT);
  HAS(r.err, "Memory access fault by GPU node-1 (Agent handle: 0x");
  HAS(r.err, "Reason: Page not present or supervisor privilege.");
  sp_free(&r);
}

Test(broken, kernel_object_of_an_unfrozen_executable) {
  sp_result_t r = run("not-frozen");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "callback: HSA_STATUS_ERROR_INVALID_CODE_OBJECT");
  HAS(r.err, "vadd.kd of an executable that is not frozen");
  sp_free(&r);
}

Test(broken, kernel_object_not_a_kernel_descriptor) {
  sp_result_t r = run("bogus-kernel-object");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "callback: HSA_STATUS_ERROR_INVALID_CODE_OBJECT");
  HAS(r.err, "is not the .kd address of a kernel in a loaded executable");
  sp_free(&r);
}

Test(broken, kernel_object_of_a_destroyed_executable) {
  sp_result_t r = run("destroyed-executable");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "callback: HSA_STATUS_ERROR_INVALID_CODE_OBJECT");
  sp_free(&r);
}

Test(broken, group_segment_smaller_than_the_kernels_lds) {
  sp_result_t r = run("group-too-small");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "kernel group segment: 4096");
  HAS(r.out, "callback: HSA_STATUS_ERROR_INVALID_ALLOCATION");
  HAS(r.err, "group_segment_size 0, the kernel needs at least 4096");
  sp_free(&r);
}

Test(broken, code_object_buffer_freed_before_load) {
  sp_result_t r = run("codeobject-freed-before-load");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "load: HSA_STATUS_ERROR_INVALID_CODE_OBJECT");
  HAS(r.err, "was changed or freed after hsa_code_object_reader_create_from_memory");
  sp_free(&r);
}

Test(broken, code_object_buffer_changed_before_load) {
  sp_result_t r = run("codeobject-changed-before-load");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "load: HSA_STATUS_ERROR_INVALID_CODE_OBJECT");
  sp_free(&r);
}

Test(broken, code_object_buffer_freed_before_executable_destroy) {
  sp_result_t r = run("codeobject-freed-before-destroy");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "destroy: HSA_STATUS_ERROR_INVALID_CODE_OBJECT");
  HAS(r.err, "was freed or changed before the executable was destroyed");
  sp_free(&r);
}

Test(broken, queue_destroyed_from_its_own_error_callback) {
  sp_result_t r = run("destroy-in-callback");
  cr_assert_eq(r.signal, SIGABRT, "exit %d signal %d", r.exit_code, r.signal);
  HAS(r.out, "callback: HSA_STATUS_ERROR_INVALID_PACKET_FORMAT; destroying the queue");
  HAS(r.err, "ROCr would deadlock here");
  LACKS(r.out, "returned inside the callback");
  sp_free(&r);
}

Test(broken, signal_destroyed_while_a_packet_uses_it) {
  sp_result_t r = run("signal-destroyed-in-flight");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "destroy dep: HSA_STATUS_ERROR_RESOURCE_FREE");
  HAS(r.out, "destroy completion: HSA_STATUS_ERROR_RESOURCE_FREE");
  HAS(r.out, "completed: yes"); /* both signals stayed valid, so the barrier still completes */
  sp_free(&r);
}

Test(broken, code_object_for_another_gpu) {
  sp_result_t r = run("wrong-target");
  cr_assert_eq(r.exit_code, 0);
  HAS(r.out, "load: HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS");
  HAS(r.err, "the agent is gfx942");
  sp_free(&r);
}

Test(broken, dispatch_packet_fields_out_of_their_rules) {
  struct {
    const char *scenario, *status, *why;
  } cases[] = {
      {"packet-reserved", "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT", "reserved fields or setup bits"},
      {"grid-smaller", "HSA_STATUS_ERROR_INVALID_ARGUMENT", "grid size 32 is smaller than work-group size 64"},
      {"no-dimensions", "HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS", "setup dimensions 0"},
      {"unused-dimension", "HSA_STATUS_ERROR_INVALID_ARGUMENT", "1 in unused dimensions"},
      {"fence-scope-3", "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT", "a fence scope of 3"},
      {"group-too-large", "HSA_STATUS_ERROR_INVALID_ALLOCATION", "the GPU has 65536"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sp_result_t r = run(cases[i].scenario);
    cr_expect_eq(r.exit_code, 0, "%s", cases[i].scenario);
    char want[128];
    snprintf(want, sizeof want, "callback: %s", cases[i].status);
    HAS(r.out, want);
    HAS(r.err, cases[i].why);
    HAS(r.out, "completed: no");
    sp_free(&r);
  }
}
