/* Launch sequences' shared bookkeeping (device/seq.h): where the marks fall, the progress a run
 * reports, and where a fault or a hang is placed. The backends' own runs are in the
 * conformance suite (launch_sequence_*). */
#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

#include "device/seq.h"

static kiln_kernel_t kernels[] = {{.name = "a"}, {.name = "b"}, {.name = "c"}, {.name = "d"}, {.name = "e"}};
static kiln_launch_t launches[5];
static kiln_seq_item_t items[5];

/* Five items, the second and the fourth marked (the last is marked anyway). */
static void setup(void) {
  for (int i = 0; i < 5; i++) {
    launches[i] = (kiln_launch_t){.kernel = &kernels[i]};
    items[i] = (kiln_seq_item_t){.launch = &launches[i], .mark = i == 1 || i == 3};
  }
}

TestSuite(seq, .init = setup);

typedef struct progress_log {
  uint32_t calls, last[8];
} progress_log_t;

static void log_progress(void *ctx, uint32_t done) {
  progress_log_t *p = ctx;
  if (p->calls < 8) p->last[p->calls] = done;
  p->calls++;
}

Test(seq, marks_fall_after_marked_items_and_the_last) {
  kiln_seq_marks_t m;
  cr_assert_eq(kiln_seq_marks_init(&m, items, 5), KILN_OK);
  cr_assert_eq(m.count, 3);
  cr_expect_eq(m.ends[0], 2);
  cr_expect_eq(m.ends[1], 4);
  cr_expect_eq(m.ends[2], 5);
  cr_expect_str_eq(kiln_seq_marks_kernel(&m, 0), "a");
  cr_expect_str_eq(kiln_seq_marks_kernel(&m, 4), "e");
  cr_expect_str_eq(kiln_seq_marks_kernel(&m, 5), "e", "past the end: the last item's");
  cr_expect_str_eq(kiln_seq_marks_kernel(&m, UINT32_MAX), "e");
  kiln_seq_marks_deinit(&m);
  cr_expect_null(m.ends);
  kiln_seq_marks_deinit(&m); /* twice is harmless */
}

Test(seq, one_item_is_marked_and_none_is_refused) {
  kiln_seq_marks_t m;
  items[0].mark = false;
  cr_assert_eq(kiln_seq_marks_init(&m, items, 1), KILN_OK);
  cr_expect_eq(m.count, 1);
  cr_expect_eq(m.ends[0], 1);
  kiln_seq_marks_deinit(&m);
  kiln_status_t st = kiln_seq_marks_init(&m, items, 0);
  cr_assert_eq(kiln_status_code(st), KILN_E_INVALID_ARGUMENT);
  kiln_status_free(st);
  cr_expect_null(m.ends);
  kiln_seq_marks_deinit(&m);
}

Test(seq, progress_moves_forward_only_and_ends_at_the_whole_sequence) {
  kiln_seq_marks_t m;
  cr_assert_eq(kiln_seq_marks_init(&m, items, 5), KILN_OK);
  progress_log_t log = {0};
  kiln_seq_watch_t w;
  kiln_seq_watch_init(&w, &m, 0, log_progress, &log);
  cr_expect_eq(kiln_seq_watch_open(&w), 0);
  cr_expect_str_eq(kiln_seq_watch_kernel(&w), "a");
  cr_expect_not(kiln_seq_watch_seen(&w, 0));
  cr_expect_eq(log.calls, 0, "nothing moved, nothing told");
  cr_expect_not(kiln_seq_watch_seen(&w, 1));
  cr_expect_eq(kiln_seq_watch_open(&w), 2);
  cr_expect_str_eq(kiln_seq_watch_kernel(&w), "c");
  cr_expect_not(kiln_seq_watch_seen(&w, 0), "a smaller count changes nothing");
  cr_expect_eq(kiln_seq_watch_open(&w), 2);
  cr_expect(kiln_seq_watch_seen(&w, 99), "more marks than there are: all");
  cr_expect_eq(kiln_seq_watch_open(&w), 5);
  cr_expect(kiln_seq_watch_seen(&w, 3));
  cr_assert_eq(log.calls, 2);
  cr_expect_eq(log.last[0], 2);
  cr_expect_eq(log.last[1], 5);
  kiln_seq_watch_init(&w, &m, 0, NULL, NULL); /* no callback: still counts */
  cr_expect_not(kiln_seq_watch_seen(&w, 2));
  cr_expect_eq(kiln_seq_watch_open(&w), 4);
  kiln_seq_marks_deinit(&m);
}

Test(seq, a_failure_is_placed_at_the_first_item_not_seen_complete) {
  kiln_seq_marks_t m;
  cr_assert_eq(kiln_seq_marks_init(&m, items, 5), KILN_OK);
  kiln_seq_watch_t w;
  kiln_seq_watch_init(&w, &m, 0, NULL, NULL);
  uint32_t at = 777;
  cr_expect_eq(kiln_seq_watch_place(&w, KILN_OK, &at), KILN_OK);
  cr_expect_eq(at, 777, "out_at is set on failure only");
  kiln_seq_watch_seen(&w, 2);
  kiln_status_t st = kiln_seq_watch_place(&w, KILN_STATUS(KILN_E_DEVICE_FAULT, "boom"), &at);
  cr_expect_eq(kiln_status_code(st), KILN_E_DEVICE_FAULT);
  cr_expect_eq(at, 4);
  kiln_status_free(st);
  kiln_seq_marks_deinit(&m);
}

Test(seq, the_deadline_names_the_kernel_it_stopped_at) {
  kiln_seq_marks_t m;
  cr_assert_eq(kiln_seq_marks_init(&m, items, 5), KILN_OK);
  kiln_seq_watch_t w;
  uint32_t at = 777;
  kiln_seq_watch_init(&w, &m, 0, NULL, NULL);
  struct timespec ts = {0, 2000000};
  nanosleep(&ts, NULL);
  cr_expect_eq(kiln_seq_watch_deadline(&w, &at), KILN_OK, "0: no deadline");
  kiln_seq_watch_init(&w, &m, 60ull * 1000000000ull, NULL, NULL);
  cr_expect_eq(kiln_seq_watch_deadline(&w, &at), KILN_OK, "a minute has not passed");
  cr_expect_eq(at, 777);
  kiln_seq_watch_init(&w, &m, 1000000, NULL, NULL);
  kiln_seq_watch_seen(&w, 1);
  nanosleep(&ts, NULL);
  kiln_status_t st = kiln_seq_watch_deadline(&w, &at);
  cr_assert_eq(kiln_status_code(st), KILN_E_TIMEOUT);
  cr_expect_eq(at, 2);
  cr_expect(strstr(kiln_status_message(st), "kernel \"c\" (or one after it)"), "%s", kiln_status_message(st));
  cr_expect(strstr(kiln_status_message(st), "1.000 ms"), "%s", kiln_status_message(st));
  kiln_status_free(st);
  kiln_seq_marks_deinit(&m);
}
