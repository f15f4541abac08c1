/* System event handlers and the "async events" thread that calls them.
 *
 * R runtime.cpp (VMFaultHandler): on a GPU memory fault ROCr calls every registered system event
 * handler with HSA_AMD_GPU_MEMORY_FAULT_EVENT on its async-events thread; if none returns
 * HSA_STATUS_SUCCESS (or none is registered) it prints "Memory access fault by GPU node-N ..."
 * and aborts the process. The faulting queue never runs again: KFD evicted it. */
#include <stdio.h>
#include <stdlib.h>

#include "rt.h"

typedef struct handler {
  hsa_amd_system_event_callback_t cb;
  void *data;
} handler_t;

typedef struct fault {
  uint64_t address;
  uint32_t reason;
  struct fault *next;
} fault_t;

static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cond = PTHREAD_COND_INITIALIZER;
static handler_t *handlers;
static size_t nhandlers;
static fault_t *pending;
static bool thread_up, stopping;
static pthread_t ev_thread;

bool rt_event_in_async_thread(void) {
  pthread_mutex_lock(&ev_lock);
  bool in = thread_up && pthread_equal(pthread_self(), ev_thread);
  pthread_mutex_unlock(&ev_lock);
  return in;
}

static const char *reason_text(uint32_t mask) {
  /* R runtime.cpp: the first matching reason, in this order */
  if (mask & HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT) return "Page not present or supervisor privilege";
  if (mask & HSA_AMD_MEMORY_FAULT_READ_ONLY) return "Write access to a read-only page";
  if (mask & HSA_AMD_MEMORY_FAULT_NX) return "Execute access to a page marked NX";
  if (mask & HSA_AMD_MEMORY_FAULT_HOST_ONLY) return "Host access only";
  return "Unknown";
}

static void deliver(const fault_t *f) {
  hsa_amd_event_t ev = {.event_type = HSA_AMD_GPU_MEMORY_FAULT_EVENT};
  ev.memory_fault.agent = rt_agent_handle(&rt_gpu_agent);
  ev.memory_fault.virtual_address = f->address;
  ev.memory_fault.fault_reason_mask = f->reason;
  pthread_mutex_lock(&ev_lock);
  size_t n = nhandlers;
  handler_t *copy = n ? malloc(n * sizeof *copy) : NULL;
  for (size_t i = 0; i < n && copy; i++) copy[i] = handlers[i];
  pthread_mutex_unlock(&ev_lock);
  bool handled = false;
  for (size_t i = 0; i < n && copy; i++)
    if (copy[i].cb(&ev, copy[i].data) == HSA_STATUS_SUCCESS) handled = true; /* R: every handler runs */
  free(copy);
  if (!handled) {
    fprintf(stderr, "Memory access fault by GPU node-%u (Agent handle: %p) on address %p. Reason: %s.\n",
            rt_gpu_agent.node, (void *)&rt_gpu_agent, (void *)(uintptr_t)f->address, reason_text(f->reason));
    fflush(stderr);
    abort();
  }
}

static void *async_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&ev_lock);
  for (;;) {
    while (!pending && !stopping) pthread_cond_wait(&ev_cond, &ev_lock);
    if (!pending && stopping) break;
    fault_t *f = pending;
    pending = f->next;
    pthread_mutex_unlock(&ev_lock);
    deliver(f);
    free(f);
    pthread_mutex_lock(&ev_lock);
  }
  pthread_mutex_unlock(&ev_lock);
  return NULL;
}

void rt_event_memory_fault(uint64_t address, uint32_t reason_mask) {
  fault_t *f = calloc(1, sizeof *f);
  if (!f) abort();
  f->address = address;
  f->reason = reason_mask;
  pthread_mutex_lock(&ev_lock);
  if (!thread_up) {
    stopping = false;
    if (pthread_create(&ev_thread, NULL, async_main, NULL) != 0) {
      pthread_mutex_unlock(&ev_lock);
      rt_log("could not start the async-events thread to report a memory fault");
      abort();
    }
    thread_up = true;
  }
  fault_t **tail = &pending;
  while (*tail) tail = &(*tail)->next;
  *tail = f;
  pthread_cond_signal(&ev_cond);
  pthread_mutex_unlock(&ev_lock);
}

/* Stops the thread (after delivering what is pending) and drops every handler: after the last
 * hsa_shut_down a new hsa_init starts with none (R: the runtime object is rebuilt). */
void rt_event_release_all(void) {
  pthread_mutex_lock(&ev_lock);
  bool up = thread_up;
  stopping = true;
  pthread_cond_broadcast(&ev_cond);
  pthread_mutex_unlock(&ev_lock);
  if (up && !pthread_equal(pthread_self(), ev_thread)) pthread_join(ev_thread, NULL);
  pthread_mutex_lock(&ev_lock);
  thread_up = false;
  free(handlers);
  handlers = NULL;
  nhandlers = 0;
  pthread_mutex_unlock(&ev_lock);
}

RT_EXPORT hsa_status_t hsa_amd_register_system_event_handler(hsa_amd_system_event_callback_t callback,
                                                             void *data) {
  RT_REQUIRE_OPEN();
  if (!callback) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  pthread_mutex_lock(&ev_lock);
  handler_t *n = realloc(handlers, (nhandlers + 1) * sizeof *n);
  if (!n) {
    pthread_mutex_unlock(&ev_lock);
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  handlers = n;
  handlers[nhandlers++] = (handler_t){callback, data};
  pthread_mutex_unlock(&ev_lock);
  return HSA_STATUS_SUCCESS;
}
