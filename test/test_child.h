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
#include <sys/types.h>
#include <sys/wait.h>
#include "check.h"

static void test_child_exit_hook(void) {
    fflush(stdout);
    fflush(stderr);
    _exit(1);
}

typedef void (*TestChildFn)(void* arg);

// Runs fn(arg) in a child; returns its exit status (or 128 + signal) and its stderr in out.
static int test_run_child(TestChildFn fn, void* arg, char* out, size_t cap) {
    int pipefd[2];
    if (pipe(pipefd) != 0) { perror("pipe"); exit(2); }
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(2); }
    if (pid == 0) {
        close(pipefd[0]);
        dup2(pipefd[1], 2);
        close(pipefd[1]);
        llmc_set_fatal_hook(test_child_exit_hook);
        fn(arg);
        fflush(stdout); fflush(stderr);
        _exit(0);
    }
    close(pipefd[1]);
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
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Checks that fn(arg) exits with status 1 and that its stderr contains every string in want
// (NULL-terminated list). Returns 1 if so; prints the captured output otherwise.
static int test_expect_fatal(const char* what, TestChildFn fn, void* arg, const char* const* want) {
    char out[8192];
    int rc = test_run_child(fn, arg, out, sizeof(out));
    int ok = rc == 1;
    for (const char* const* w = want; ok && *w; w++) if (!strstr(out, *w)) ok = 0;
    if (!ok) fprintf(stderr, "  [%s] exit %d, stderr:\n%s\n", what, rc, out);
    else printf("ok   %s -> %s", what, strstr(out, "error: ") ? strstr(out, "error: ") : out);
    if (ok && out[0] && out[strlen(out) - 1] != '\n') printf("\n");
    return ok;
}

#endif // LLMC_TEST_CHILD_H
