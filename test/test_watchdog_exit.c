// How the watchdog ends a stuck process (llmc/comm/comm_watchdog.c, comm_wd_fail), in one process on
// the CPU: the backend-neutral half of what the GPU check's test/test_nccl_watchdog.cu relies on
// when a GPU is stuck. Each case runs in a child under a time limit (test_run_child_for) and must
// end by itself, non-zero, with the verdict:
//   - a single process stuck in a bounded operation: the verdict names rank 0 and the operation,
//     and the process is gone within the limit (timeout + slowest step) plus a tick or two;
//   - the same with an atexit handler that never returns (as a library's exit-time teardown may,
//     while another thread is stuck in it): the verdict leaves through _exit, so it does not run;
//   - the same with a fatal clean-up that never returns (as ncclCommAbort may behind a hung
//     kernel): the backstop ends the process 15 s after the verdict, with its own note;
//   - the supervision itself: a child that never ends is killed at its limit and reported.
#include <time.h>
#include <unistd.h>
#include "../llmc/comm/comm.h"
#include "../llmc/base/check.h"
#include "test.h"
#include "test_child.h"

#define TIMEOUT_S 0.5

static void sleep_s(double s) {
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    nanosleep(&ts, NULL);
}
static void hang_forever(void) { for (;;) sleep_s(1.0); }

// A single-process run that measures a few short steps, then stops making progress.
static void stuck_child(void* arg) {
    const char* extra = (const char*)arg;
    if (extra && strcmp(extra, "atexit") == 0) atexit(hang_forever);
    if (extra && strcmp(extra, "cleanup") == 0) llmc_on_fatal(hang_forever);
    Comm c;
    comm_init(&c, NULL, NULL);
    comm_watchdog_start(&c, TIMEOUT_S);
    comm_watchdog_step(&c);
    for (int i = 0; i < 3; i++) {
        comm_watchdog_op(&c, "step %d", i);
        float x = 1.0f;
        comm_allreduce_sum_f32(&c, &x, 1);
        sleep_s(0.01);
        comm_watchdog_step(&c);
    }
    comm_watchdog_op(&c, "stuck loop in step 3");
    hang_forever();
}

static void never_ends(void* arg) { (void)arg; hang_forever(); }

static void expect_verdict(const char* what, const char* extra, double min_s, double max_s, int want_backstop) {
    char out[8192];
    double secs = 0.0;
    const int failures = test_failures;
    int rc = test_run_child_for(stuck_child, (void*)extra, out, sizeof(out), 40.0, &secs);
    int backstop = strstr(out, "did not end within 15 s of the verdict") != NULL;
    TEST_CHECK(rc == 1, "%s: exit %d (want 1); stderr:\n%s", what, rc, out);
    TEST_CHECK(strstr(out, "error: watchdog: STUCK: rank 0 is busy outside collectives") &&
               strstr(out, "'stuck loop in step 3'"), "%s: the verdict does not name rank 0 and its operation:\n%s", what, out);
    TEST_CHECK(secs >= min_s && secs <= max_s, "%s: ended after %.2f s, want %.1f..%.1f s", what, secs, min_s, max_s);
    TEST_CHECK(backstop == want_backstop, "%s: the backstop %s, want it %s:\n%s", what, backstop ? "fired" : "did not fire",
               want_backstop ? "to" : "not to", out);
    if (test_failures == failures) printf("ok   %s: exit %d after %.2f s%s\n", what, rc, secs, backstop ? " (ended by the backstop)" : "");
}

int main(void) {
    // limit = 0.5 s + slowest step (~0.01 s); the watchdog ticks every 0.1 s
    expect_verdict("stuck single process", NULL, TIMEOUT_S, 5.0, 0);
    expect_verdict("stuck, with an atexit handler that hangs", "atexit", TIMEOUT_S, 5.0, 0);
    expect_verdict("stuck, with a fatal clean-up that hangs", "cleanup", 15.0, 25.0, 1);

    char out[256];
    double secs = 0.0;
    int rc = test_run_child_for(never_ends, NULL, out, sizeof(out), 1.0, &secs);
    TEST_CHECK(rc == TEST_CHILD_TIMED_OUT && secs >= 1.0 && secs < 3.0, "a child that never ends: %d after %.2f s", rc, secs);
    if (rc == TEST_CHILD_TIMED_OUT) printf("ok   a child that never ends is killed at its 1 s limit (%.2f s)\n", secs);
    return test_finish("test_watchdog_exit");
}
