/* sgrt-client SCENARIO: deliberately broken HSA clients, one rule broken per scenario, run as
 * their own processes against the stand-in by test_broken.c. Each prints what it observed
 * (queue callbacks, system events, return statuses) on stdout; the runtime's explanations go to
 * stderr. Exit 0 after the scenario ran, 3 when the harness itself failed; a runtime that
 * aborts (as ROCr would) shows as SIGABRT. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static h_env_t env;
static atomic_int callbacks;
static _Atomic hsa_status_t last_callback;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void on_queue_error(hsa_status_t status, hsa_queue_t *q, void *data) {
  last_callback = status;
  printf("callback: %s\n", h_status_name(status));
  fflush(stdout);
  atomic_fetch_add(&callbacks, 1);
}

static void on_error_destroy(hsa_status_t status, hsa_queue_t *q, void *data) {
  printf("callback: %s; destroying the queue from inside the callback\n", h_status_name(status));
  fflush(stdout);
  hsa_queue_destroy(q);
  printf("hsa_queue_destroy returned inside the callback\n");
  fflush(stdout);
}

static atomic_int events;
static hsa_status_t on_event(const hsa_amd_event_t *ev, void *data) {
  if (ev->event_type == HSA_AMD_GPU_MEMORY_FAULT_EVENT)
    printf("event: memory fault at 0x%llx reason 0x%x agent %s\n", (unsigned long long)ev->memory_fault.virtual_address,
           ev->memory_fault.fault_reason_mask, ev->memory_fault.agent.handle == env.gpu.handle ? "gpu" : "other");
  fflush(stdout);
  atomic_fetch_add(&events, 1);
  return HSA_STATUS_SUCCESS;
}

static bool wait_flag(atomic_int *flag, int ms) {
  for (int i = 0; i < ms && !atomic_load(flag); i++) sleep_ms(1);
  return atomic_load(flag) != 0;
}

static hsa_queue_t *queue(void (*cb)(hsa_status_t, hsa_queue_t *, void *)) {
  hsa_queue_t *q;
  H_CHECK(hsa_queue_create(env.gpu, 64, HSA_QUEUE_TYPE_MULTI, cb, NULL, UINT32_MAX, UINT32_MAX, &q));
  return q;
}

static void report_completion(hsa_signal_t done, int ms) {
  printf("completed: %s\n", h_wait_zero(done, (uint32_t)ms) ? "yes" : "no");
}

/* A vadd dispatch whose kernarg is `ka`; reports the callback or the completion. */
static void dispatch_vadd(h_kernel_t *k, void *ka, hsa_queue_t *q) {
  hsa_signal_t done;
  H_CHECK(hsa_signal_create(1, 0, NULL, &done));
  void *slot;
  uint64_t i = h_reserve(q, &slot);
  h_dispatch_body(slot, k, 1, ka, done, 0);
  h_publish(slot, HSA_PACKET_TYPE_KERNEL_DISPATCH, 1);
  h_ring(q, i);
  wait_flag(&callbacks, 3000);
  report_completion(done, 200);
}

/* A vadd packet with one field broken by `breaker`. */
static void dispatch_broken(void (*breaker)(hsa_kernel_dispatch_packet_t *, uint16_t *setup, uint16_t *header)) {
  h_program_t p;
  h_read_kernels(&p);
  H_CHECK(h_load(&env, &p, true));
  h_kernel_t k = h_kernel(&env, &p, "vadd");
  hsa_queue_t *q = queue(on_queue_error);
  hsa_signal_t done;
  H_CHECK(hsa_signal_create(1, 0, NULL, &done));
  void *slot;
  uint64_t i = h_reserve(q, &slot);
  h_dispatch_body(slot, &k, 1, h_alloc(env.kernarg, 4096, &env.gpu), done, 0);
  uint16_t setup = 1;
  uint16_t header = HSA_PACKET_TYPE_KERNEL_DISPATCH | HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE |
                    HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE;
  breaker(slot, &setup, &header);
  __atomic_store_n((uint32_t *)slot, (uint32_t)header | (uint32_t)setup << 16, __ATOMIC_RELEASE);
  h_ring(q, i);
  wait_flag(&callbacks, 3000);
  report_completion(done, 200);
}

static void reserved_nonzero(hsa_kernel_dispatch_packet_t *p, uint16_t *setup, uint16_t *h) { p->reserved2 = 1; }
static void grid_smaller(hsa_kernel_dispatch_packet_t *p, uint16_t *setup, uint16_t *h) { p->grid_size_x = 32; }
static void no_dimensions(hsa_kernel_dispatch_packet_t *p, uint16_t *setup, uint16_t *h) { *setup = 0; }
static void unused_dimension(hsa_kernel_dispatch_packet_t *p, uint16_t *setup, uint16_t *h) { p->grid_size_y = 2; }
static void fence_scope_3(hsa_kernel_dispatch_packet_t *p, uint16_t *setup, uint16_t *h) {
  *h |= 3 << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE;
}
static void group_too_large(hsa_kernel_dispatch_packet_t *p, uint16_t *setup, uint16_t *h) {
  p->group_segment_size = 65536 + 4;
}

static void load_kernels(h_program_t *p, bool freeze) {
  h_read_kernels(p);
  H_CHECK(h_load(&env, p, freeze));
}

/* --- scenarios --------------------------------------------------------------------------------- */

static void npot_queue(void) {
  hsa_queue_t *q;
  printf("size 100: %s\n", h_status_name(hsa_queue_create(env.gpu, 100, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX, &q)));
  printf("size 0: %s\n", h_status_name(hsa_queue_create(env.gpu, 0, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX, &q)));
  printf("size 1<<20: %s\n", h_status_name(hsa_queue_create(env.gpu, 1u << 20, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX, &q)));
  printf("cpu agent: %s\n", h_status_name(hsa_queue_create(env.cpu, 64, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX, &q)));
}

static void doorbell_before_header(void) {
  hsa_queue_t *q = queue(on_queue_error);
  hsa_signal_t done;
  H_CHECK(hsa_signal_create(1, 0, NULL, &done));
  void *slot;
  uint64_t i = h_reserve(q, &slot);
  hsa_barrier_and_packet_t *b = slot;
  memset((uint8_t *)b + 4, 0, sizeof *b - 4);
  b->completion_signal = done;
  h_ring(q, i); /* broken: the doorbell before the header */
  sleep_ms(400);
  h_publish(slot, HSA_PACKET_TYPE_BARRIER_AND, 0);
  report_completion(done, 3000);
}

static void header_before_body(void) {
  hsa_queue_t *q = queue(on_queue_error);
  hsa_signal_t first, done;
  H_CHECK(hsa_signal_create(1, 0, NULL, &first));
  H_CHECK(hsa_signal_create(1, 0, NULL, &done));
  /* a correct packet first, so the processor is awake and looking at the next slot */
  h_barrier(q, HSA_PACKET_TYPE_BARRIER_AND, (hsa_signal_t){0}, (hsa_signal_t){0}, first);
  report_completion(first, 3000);
  /* broken: header published, then the body */
  void *slot;
  uint64_t i = h_reserve(q, &slot);
  memset((uint8_t *)slot + 4, 0, 60);
  h_publish(slot, HSA_PACKET_TYPE_BARRIER_AND, 0);
  sleep_ms(100);
  ((hsa_barrier_and_packet_t *)slot)->completion_signal = done;
  h_ring(q, i);
  wait_flag(&callbacks, 3000);
  report_completion(done, 200);
}

static void kernarg_misaligned(void) {
  h_program_t p;
  load_kernels(&p, true);
  h_kernel_t k = h_kernel(&env, &p, "vadd");
  uint8_t *ka = h_alloc(env.kernarg, 4096, &env.gpu);
  dispatch_vadd(&k, ka + 8, queue(on_queue_error));
}

static void kernarg_short(void) {
  h_program_t p;
  load_kernels(&p, true);
  h_kernel_t k = h_kernel(&env, &p, "vadd");
  uint8_t *ka = h_alloc(env.kernarg, 4096, &env.gpu);
  /* 16 bytes before the end of the allocation: the kernel's arguments do not fit */
  dispatch_vadd(&k, ka + 4096 - 16, queue(on_queue_error));
}

static void kernarg_host_memory(void) {
  h_program_t p;
  load_kernels(&p, true);
  h_kernel_t k = h_kernel(&env, &p, "vadd");
  static _Alignas(64) uint8_t ka[256]; /* broken: not runtime-allocated */
  dispatch_vadd(&k, ka, queue(on_queue_error));
}

static void kernarg_not_accessible(bool handler) {
  if (handler) H_CHECK(hsa_amd_register_system_event_handler(on_event, NULL));
  h_program_t p;
  load_kernels(&p, true);
  h_kernel_t k = h_kernel(&env, &p, "vadd");
  void *ka = h_alloc(env.kernarg, 4096, NULL); /* broken: no hsa_amd_agents_allow_access */
  printf("kernarg at %p\n", ka);
  fflush(stdout);
  hsa_queue_t *q = queue(on_queue_error);
  hsa_signal_t done;
  H_CHECK(hsa_signal_create(1, 0, NULL, &done));
  void *slot;
  uint64_t i = h_reserve(q, &slot);
  h_dispatch_body(slot, &k, 1, ka, done, 0);
  h_publish(slot, HSA_PACKET_TYPE_KERNEL_DISPATCH, 1);
  h_ring(q, i);
  wait_flag(&events, 3000);
  report_completion(done, 300);
  /* the queue stays dead: a second, correct packet never runs */
  H_CHECK(hsa_amd_agents_allow_access(1, &env.gpu, NULL, ka));
  hsa_signal_t again;
  H_CHECK(hsa_signal_create(1, 0, NULL, &again));
  h_barrier(q, HSA_PACKET_TYPE_BARRIER_AND, (hsa_signal_t){0}, (hsa_signal_t){0}, again);
  printf("next packet on the faulted queue: ");
  report_completion(again, 300);
}

static void not_frozen(void) {
  h_program_t p;
  load_kernels(&p, false); /* broken: never frozen */
  h_kernel_t k = h_kernel(&env, &p, "vadd");
  dispatch_vadd(&k, h_alloc(env.kernarg, 4096, &env.gpu), queue(on_queue_error));
}

static void bogus_kernel_object(void) {
  h_kernel_t k = {0};
  k.object = (uint64_t)(uintptr_t)h_alloc(env.vram, 4096, NULL); /* broken: not a .kd */
  dispatch_vadd(&k, h_alloc(env.kernarg, 4096, &env.gpu), queue(on_queue_error));
}

static void destroyed_executable(void) {
  h_program_t p;
  load_kernels(&p, true);
  h_kernel_t k = h_kernel(&env, &p, "vadd");
  H_CHECK(hsa_executable_destroy(p.exec)); /* broken: its kernel is dispatched afterwards */
  dispatch_vadd(&k, h_alloc(env.kernarg, 4096, &env.gpu), queue(on_queue_error));
}

static void group_too_small(void) {
  h_program_t p;
  load_kernels(&p, true);
  h_kernel_t k = h_kernel(&env, &p, "uses_lds");
  printf("kernel group segment: %u\n", k.group_size);
  k.group_size = 0; /* broken: the packet asks for no LDS */
  dispatch_vadd(&k, h_alloc(env.kernarg, 4096, &env.gpu), queue(on_queue_error));
}

static void codeobject_changed(bool unmap) {
  h_program_t p;
  h_read_kernels(&p);
  H_CHECK(hsa_code_object_reader_create_from_memory(p.buf, p.size, &p.reader));
  if (unmap) munmap(p.buf, p.size); /* broken: freed while the reader holds it */
  else ((uint8_t *)p.buf)[p.size / 2] ^= 0xff; /* broken: reused */
  H_CHECK(hsa_executable_create_alt(HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, NULL, &p.exec));
  printf("load: %s\n", h_status_name(hsa_executable_load_agent_code_object(p.exec, env.gpu, p.reader, NULL, NULL)));
}

static void codeobject_freed_before_destroy(void) {
  h_program_t p;
  load_kernels(&p, true);
  H_CHECK(hsa_code_object_reader_destroy(p.reader));
  munmap(p.buf, p.size); /* broken: the executable still refers to it */
  printf("destroy: %s\n", h_status_name(hsa_executable_destroy(p.exec)));
}

static void destroy_in_callback(void) {
  hsa_queue_t *q = queue(on_error_destroy);
  void *slot;
  uint64_t i = h_reserve(q, &slot);
  memset((uint8_t *)slot + 4, 0, 60);
  h_publish(slot, HSA_PACKET_TYPE_AGENT_DISPATCH, 0); /* not processed by a kernel agent: an error */
  h_ring(q, i);
  sleep_ms(3000);
  printf("no abort\n");
}

static void signal_destroyed_in_flight(void) {
  hsa_queue_t *q = queue(on_queue_error);
  hsa_signal_t dep, done;
  H_CHECK(hsa_signal_create(1, 0, NULL, &dep));
  H_CHECK(hsa_signal_create(1, 0, NULL, &done));
  h_barrier(q, HSA_PACKET_TYPE_BARRIER_AND, dep, (hsa_signal_t){0}, done);
  sleep_ms(100);
  printf("destroy dep: %s\n", h_status_name(hsa_signal_destroy(dep)));
  printf("destroy completion: %s\n", h_status_name(hsa_signal_destroy(done)));
  hsa_signal_store_screlease(dep, 0);
  report_completion(done, 3000);
}

static void wrong_target(void) {
  const char *t = getenv("SOFTGPU_TARGET");
  setenv("SOFTGPU_TARGET", t && strcmp(t, "gfx90a") == 0 ? "gfx942" : "gfx90a", 1);
  h_program_t p;
  h_read_kernels(&p); /* the other target's code object */
  printf("load: %s\n", h_status_name(h_load(&env, &p, true)));
}

/* --- scenarios that need the interpreter: a kernel runs while the client breaks a rule ------- */

typedef struct spinner {
  h_program_t p;
  h_kernel_t k;
  hsa_queue_t *q;
  volatile int *flag;
  int *out;
  uint64_t *ka;
  hsa_signal_t done;
} spinner_t;

/* Starts the spin kernel (one wave) and waits until it runs. */
static void spin_start(spinner_t *s) {
  load_kernels(&s->p, true);
  s->k = h_kernel(&env, &s->p, "spin");
  s->q = queue(on_queue_error);
  s->flag = h_alloc(env.fine, 4096, &env.gpu);
  s->out = h_alloc(env.fine, 4096, &env.gpu);
  s->ka = h_alloc(env.kernarg, 4096, &env.gpu);
  s->ka[0] = (uint64_t)(uintptr_t)s->flag;
  s->ka[1] = (uint64_t)(uintptr_t)s->out;
  H_CHECK(hsa_signal_create(1, 0, NULL, &s->done));
  void *slot;
  uint64_t i = h_reserve(s->q, &slot);
  h_dispatch_body(slot, &s->k, 1, s->ka, s->done, 0);
  h_publish(slot, HSA_PACKET_TYPE_KERNEL_DISPATCH, 1);
  h_ring(s->q, i);
  sleep_ms(200); /* the wave has read its arguments and spins */
}

static void spin_stop(spinner_t *s) {
  *s->flag = 1;
  report_completion(s->done, 5000);
  printf("work-items counted: %d\n", *s->out);
}

static void kernarg_changed(void) {
  spinner_t s;
  spin_start(&s);
  int *other = h_alloc(env.fine, 4096, &env.gpu);
  s.ka[1] = (uint64_t)(uintptr_t)other; /* broken: the arguments change under the running kernel */
  spin_stop(&s);
  wait_flag(&callbacks, 2000);
}

static void free_in_flight(void) {
  spinner_t s;
  spin_start(&s);
  printf("free while running: %s\n", h_status_name(hsa_amd_memory_pool_free(s.out))); /* broken */
  printf("destroy executable while running: %s\n", h_status_name(hsa_executable_destroy(s.p.exec))); /* broken */
  printf("destroy completion signal while running: %s\n", h_status_name(hsa_signal_destroy(s.done)));
  spin_stop(&s);
  printf("free after completion: %s\n", h_status_name(hsa_amd_memory_pool_free(s.out)));
  printf("destroy executable after completion: %s\n", h_status_name(hsa_executable_destroy(s.p.exec)));
}

/* The client writes the slot of a packet the processor is still running. */
static void slot_rewritten(void) {
  spinner_t s;
  spin_start(&s);
  hsa_kernel_dispatch_packet_t *slot = (hsa_kernel_dispatch_packet_t *)s.q->base_address; /* packet 0 */
  slot->grid_size_x = 128; /* broken: the read index has not passed this slot */
  spin_stop(&s);
  wait_flag(&callbacks, 2000);
}

static void lds_beyond(void) {
  h_program_t p;
  load_kernels(&p, true);
  h_kernel_t k = h_kernel(&env, &p, "lds");
  int *out = h_alloc(env.fine, 4096, &env.gpu);
  uint32_t *ka = h_alloc(env.kernarg, 4096, &env.gpu);
  ka[0] = k.group_size; /* the dynamic LDS starts after the static part */
  ka[1] = 0;
  memcpy(&ka[2], &out, 8);
  ka[4] = 1000; /* index 1000: 4000 bytes in, but the packet asks for 16 bytes of dynamic LDS */
  printf("static LDS %u\n", k.group_size);
  /* kernarg layout of lds(__local int *, __global int *, uint): 4-byte LDS pointer, padding,
   * 8-byte global pointer, 4-byte index */
  hsa_queue_t *q = queue(on_queue_error);
  hsa_signal_t done;
  H_CHECK(hsa_signal_create(1, 0, NULL, &done));
  void *slot;
  uint64_t i = h_reserve(q, &slot);
  h_dispatch_body(slot, &k, 1, ka, done, 16);
  h_publish(slot, HSA_PACKET_TYPE_KERNEL_DISPATCH, 1);
  h_ring(q, i);
  wait_flag(&callbacks, 5000);
  report_completion(done, 200);
}

static void kernel_fault(bool handler, bool to_code) {
  if (handler) H_CHECK(hsa_amd_register_system_event_handler(on_event, NULL));
  h_program_t p;
  load_kernels(&p, true);
  h_kernel_t k = h_kernel(&env, &p, "poke");
  uint64_t *ka = h_alloc(env.kernarg, 4096, &env.gpu);
  ka[0] = to_code ? k.object : 0x1000; /* broken: nothing is mapped at 0x1000; code is read-only */
  printf("poking 0x%llx\n", (unsigned long long)ka[0]);
  fflush(stdout);
  hsa_queue_t *q = queue(on_queue_error);
  hsa_signal_t done;
  H_CHECK(hsa_signal_create(1, 0, NULL, &done));
  void *slot;
  uint64_t i = h_reserve(q, &slot);
  h_dispatch_body(slot, &k, 1, ka, done, 0);
  h_publish(slot, HSA_PACKET_TYPE_KERNEL_DISPATCH, 1);
  h_ring(q, i);
  wait_flag(&events, 5000);
  report_completion(done, 300);
}

/* SOFTGPU_CHECK=uninit: vadd reads `a`, copied from the host, and `b`, never written. */
static void uninit_read(void) {
  h_program_t p;
  load_kernels(&p, true);
  h_kernel_t k = h_kernel(&env, &p, "vadd");
  float host[64];
  for (int i = 0; i < 64; i++) host[i] = (float)i;
  float *a = h_alloc(env.vram, sizeof host, NULL), *b = h_alloc(env.vram, sizeof host, NULL);
  float *c = h_alloc(env.vram, sizeof host, NULL);
  H_CHECK(hsa_memory_copy(a, host, sizeof host));
  printf("a at %p, b at %p\n", (void *)a, (void *)b);
  fflush(stdout);
  uint64_t *ka = h_alloc(env.kernarg, 4096, &env.gpu);
  ka[0] = (uint64_t)(uintptr_t)a, ka[1] = (uint64_t)(uintptr_t)b, ka[2] = (uint64_t)(uintptr_t)c;
  ((uint32_t *)ka)[6] = 64;
  printf("completed: %s\n", h_run(queue(on_queue_error), &k, 1, ka, 0, 5000) ? "yes" : "no");
}

int main(int argc, char **argv) {
  if (argc != 2) h_die("usage: sgrt-client SCENARIO");
  setvbuf(stdout, NULL, _IOLBF, 0);
  h_open(&env);
  const char *s = argv[1];
  if (!strcmp(s, "npot-queue")) npot_queue();
  else if (!strcmp(s, "doorbell-before-header")) doorbell_before_header();
  else if (!strcmp(s, "header-before-body")) header_before_body();
  else if (!strcmp(s, "kernarg-misaligned")) kernarg_misaligned();
  else if (!strcmp(s, "kernarg-short")) kernarg_short();
  else if (!strcmp(s, "kernarg-host-memory")) kernarg_host_memory();
  else if (!strcmp(s, "kernarg-not-accessible")) kernarg_not_accessible(true);
  else if (!strcmp(s, "kernarg-not-accessible-nohandler")) kernarg_not_accessible(false);
  else if (!strcmp(s, "not-frozen")) not_frozen();
  else if (!strcmp(s, "bogus-kernel-object")) bogus_kernel_object();
  else if (!strcmp(s, "destroyed-executable")) destroyed_executable();
  else if (!strcmp(s, "group-too-small")) group_too_small();
  else if (!strcmp(s, "codeobject-freed-before-load")) codeobject_changed(true);
  else if (!strcmp(s, "codeobject-changed-before-load")) codeobject_changed(false);
  else if (!strcmp(s, "codeobject-freed-before-destroy")) codeobject_freed_before_destroy();
  else if (!strcmp(s, "destroy-in-callback")) destroy_in_callback();
  else if (!strcmp(s, "signal-destroyed-in-flight")) signal_destroyed_in_flight();
  else if (!strcmp(s, "wrong-target")) wrong_target();
  else if (!strcmp(s, "kernarg-changed")) kernarg_changed();
  else if (!strcmp(s, "free-in-flight")) free_in_flight();
  else if (!strcmp(s, "lds-beyond")) lds_beyond();
  else if (!strcmp(s, "kernel-fault")) kernel_fault(true, false);
  else if (!strcmp(s, "kernel-fault-nohandler")) kernel_fault(false, false);
  else if (!strcmp(s, "kernel-writes-code")) kernel_fault(true, true);
  else if (!strcmp(s, "uninit-read")) uninit_read();
  else if (!strcmp(s, "packet-reserved")) dispatch_broken(reserved_nonzero);
  else if (!strcmp(s, "grid-smaller")) dispatch_broken(grid_smaller);
  else if (!strcmp(s, "no-dimensions")) dispatch_broken(no_dimensions);
  else if (!strcmp(s, "unused-dimension")) dispatch_broken(unused_dimension);
  else if (!strcmp(s, "fence-scope-3")) dispatch_broken(fence_scope_3);
  else if (!strcmp(s, "group-too-large")) dispatch_broken(group_too_large);
  else if (!strcmp(s, "slot-rewritten-in-flight")) slot_rewritten();
  else h_die("unknown scenario %s", s);
  fflush(stdout);
  _exit(0); /* leave queues and threads as they are: the scenario is over */
}
