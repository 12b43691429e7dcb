// Runs a piece of code that is expected to fail with fatal() in a forked child, and captures
// what it printed to stderr, so tests can check the exit status and the message of the fatal
// paths. The child leaves through _exit from the fatal hook, so the sanitizers' leak check (which
// would flag memory the aborted operation still held) does not run there.
#ifndef LLMC_TEST_CHILD_H
#define LLMC_TEST_CHILD_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <time.h>
#include <poll.h>
#include <sys/types.h>
#include <sys/wait.h>
#include "base/check.h"

static inline void test_child_exit_hook(void) {
    fflush(stdout);
    fflush(stderr);
    _exit(1);
}

typedef void (*TestChildFn)(void* arg);

// Forks a child that runs fn(arg) with its stderr into a pipe (with the test's fatal hook when
// hook is set) and leaves with _exit(0) if fn returns; *rd: the parent's end of the pipe.
static inline pid_t test_child_fork(TestChildFn fn, void* arg, int hook, int* rd) {
    int pipefd[2];
    if (pipe(pipefd) != 0) { perror("pipe"); exit(2); }
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(2); }
    if (pid == 0) {
        close(pipefd[0]);
        dup2(pipefd[1], 2);
        close(pipefd[1]);
        if (hook) llmc_set_fatal_hook(test_child_exit_hook);
        fn(arg);
        fflush(stdout); fflush(stderr);
        _exit(0);
    }
    close(pipefd[1]);
    *rd = pipefd[0];
    return pid;
}

// A child's exit status, or 128 + the signal that ended it.
static inline int test_child_status(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Runs fn(arg) in a child; returns its exit status (or 128 + signal) and its stderr in out.
static inline int test_run_child(TestChildFn fn, void* arg, char* out, size_t cap) {
    int pipefd[2];
    pid_t pid = test_child_fork(fn, arg, 1, &pipefd[0]);
    size_t n = 0;
    for (;;) {
        char tmp[4096];
        ssize_t r = read(pipefd[0], tmp, sizeof(tmp));
        if (r <= 0) break;
        for (ssize_t i = 0; i < r; i++) if (n + 1 < cap) out[n++] = tmp[i];
    }
    out[n] = '\0';
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return test_child_status(status);
}

// Checks that fn(arg) exits with status 1 and that its stderr contains every string in want
// (NULL-terminated list). Returns 1 if so; prints the captured output otherwise.
static inline int test_expect_fatal(const char* what, TestChildFn fn, void* arg, const char* const* want) {
    char out[8192];
    int rc = test_run_child(fn, arg, out, sizeof(out));
    int ok = rc == 1;
    for (const char* const* w = want; ok && *w; w++) if (!strstr(out, *w)) ok = 0;
    if (!ok) fprintf(stderr, "  [%s] exit %d, stderr:\n%s\n", what, rc, out);
    else printf("ok   %s -> %s", what, strstr(out, "error: ") ? strstr(out, "error: ") : out);
    if (ok && out[0] && out[strlen(out) - 1] != '\n') printf("\n");
    return ok;
}

// Like test_run_child, but with a time limit, and the child ends as a program does (no test hook:
// fatal() leaves through exit() or, for the watchdog, _exit()). A child still running limit_s
// seconds after the fork is killed (SIGKILL) and TEST_CHILD_TIMED_OUT is returned; *seconds: from
// the fork to the child's end. For paths that must end the process by themselves within a bound.
#define TEST_CHILD_TIMED_OUT 1124
static inline double test_child_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Appends what the pipe has (waiting up to ms); returns 0 at end of file.
static inline int test_child_read(int fd, int ms, char* out, size_t cap, size_t* n) {
    struct pollfd p = { fd, POLLIN, 0 };
    if (poll(&p, 1, ms) <= 0) return 1;
    char tmp[4096];
    ssize_t r = read(fd, tmp, sizeof(tmp));
    if (r <= 0) return 0;
    for (ssize_t i = 0; i < r; i++) if (*n + 1 < cap) out[(*n)++] = tmp[i];
    return 1;
}

static inline int test_run_child_for(TestChildFn fn, void* arg, char* out, size_t cap, double limit_s, double* seconds) {
    int pipefd[2];
    const double t0 = test_child_now();
    pid_t pid = test_child_fork(fn, arg, 0, &pipefd[0]);
    size_t n = 0;
    int status = 0, open_ = 1, killed = 0;
    for (;;) {
        double left = t0 + limit_s - test_child_now();
        if (left <= 0 && !killed) { kill(pid, SIGKILL); killed = 1; }
        if (open_) open_ = test_child_read(pipefd[0], 20, out, cap, &n);
        else { struct timespec ts = { 0, 20 * 1000 * 1000 }; nanosleep(&ts, NULL); }
        if (waitpid(pid, &status, WNOHANG) == pid) break;
    }
    *seconds = test_child_now() - t0;
    while (open_) open_ = test_child_read(pipefd[0], 1000, out, cap, &n); // what it wrote last (EOF: it is gone)
    out[n] = '\0';
    close(pipefd[0]);
    if (killed) return TEST_CHILD_TIMED_OUT;
    return test_child_status(status);
}

#endif // LLMC_TEST_CHILD_H
