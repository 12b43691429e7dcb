// Shared plumbing of the libFuzzer harnesses (test/fuzz/README.md).
//
// The library stops with fatal() on bad input (llmc/base/check.h): message, exit(1). Under the fuzzer a
// clean refusal is the expected outcome, not a finding, so FUZZ_RUN installs a fatal hook that
// jumps back into the harness instead of exiting. What the refused parse had allocated or opened
// is then lost: the harness closes the file descriptors it leaked (else the process runs out of
// them after ~1000 refusals), and the long runs restart the fuzzer every 50,000 to 1,000,000
// inputs to bound the memory (test/fuzz/run.sh). Harnesses whose parsers never call fatal() keep
// LeakSanitizer on.
//
// Inputs reach file-based parsers through files in a private temporary directory (on /dev/shm
// when it exists): fuzz_write(name, data, n) puts bytes there, fuzz_path(name) names them.
#ifndef LLMC_FUZZ_H
#define LLMC_FUZZ_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <dirent.h>
#include "base/check.h"

#define FUZZ_MAX_FD 256

static jmp_buf g_fuzz_jmp;
static char g_fuzz_dir[256];
static unsigned char g_fuzz_fd_open[FUZZ_MAX_FD]; // descriptors open before the first input
static int g_fuzz_ready;
static int g_fuzz_refused; // fatal() refusals so far (for the harness' own statistics)

static void fuzz_fatal_hook(void) { longjmp(g_fuzz_jmp, 1); }

static void fuzz_rm_dir(void) {
    DIR* d = opendir(g_fuzz_dir);
    if (!d) return;
    struct dirent* e;
    char p[600];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof(p), "%s/%s", g_fuzz_dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(g_fuzz_dir);
}

static void fuzz_setup(void) {
    if (g_fuzz_ready) return;
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(g_fuzz_dir, sizeof(g_fuzz_dir), "%s/llmc-fuzz.XXXXXX", base);
    if (!mkdtemp(g_fuzz_dir)) { perror("mkdtemp"); abort(); }
    atexit(fuzz_rm_dir);
    for (int fd = 0; fd < FUZZ_MAX_FD; fd++) g_fuzz_fd_open[fd] = fcntl(fd, F_GETFD) != -1;
    g_fuzz_ready = 1;
}

// After a refusal: close what the aborted parse left open. New descriptors take the lowest free
// numbers, so the scan stops after a few free ones in a row.
static void fuzz_close_leaked_fds(void) {
    int free_run = 0;
    for (int fd = 0; fd < FUZZ_MAX_FD && free_run < 4; fd++) {
        if (g_fuzz_fd_open[fd]) continue;
        if (fcntl(fd, F_GETFD) != -1) { close(fd); free_run = 0; }
        else free_run++;
    }
}

static const char* fuzz_path(const char* name) {
    static char p[4][600];
    static int k;
    k = (k + 1) & 3;
    snprintf(p[k], sizeof(p[k]), "%s/%s", g_fuzz_dir, name);
    return p[k];
}

static void fuzz_write(const char* name, const void* data, size_t n) {
    FILE* fp = fopen(fuzz_path(name), "wb");
    if (!fp) { perror("fuzz_write"); abort(); }
    if (n && fwrite(data, 1, n, fp) != n) { perror("fuzz_write"); abort(); }
    fclose(fp);
}

static void fuzz_remove(const char* name) { unlink(fuzz_path(name)); }

// FUZZ_RUN(stmt): runs stmt; a fatal() inside it returns here (counted in g_fuzz_refused).
#define FUZZ_RUN(stmt) do { \
        llmc_set_fatal_hook(fuzz_fatal_hook); \
        if (setjmp(g_fuzz_jmp) == 0) { stmt; } \
        else { g_fuzz_refused++; fuzz_close_leaked_fds(); } \
        llmc_set_fatal_hook(NULL); \
    } while (0)

// Splits data at the first occurrence of sep (a byte sequence unlikely in real files): the part
// before and after it; without sep, everything is the first part and the second is empty.
// Candidates are found with memchr: a memcmp at every offset cost an intercepted call per input
// byte (4% of fuzz_state's time); the memcmp that remain still show libFuzzer the separator.
static void fuzz_split(const uint8_t* data, size_t n, const char* sep, const uint8_t** a, size_t* na,
                       const uint8_t** b, size_t* nb) {
    size_t ls = strlen(sep);
    *a = data; *na = n; *b = data + n; *nb = 0;
    const uint8_t* end = data + n;
    for (const uint8_t* p = data; (size_t)(end - p) >= ls; p++) {
        p = (const uint8_t*)memchr(p, sep[0], (size_t)(end - p) - ls + 1);
        if (!p) return;
        if (memcmp(p, sep, ls) == 0) { *na = (size_t)(p - data); *b = p + ls; *nb = (size_t)(end - p) - ls; return; }
    }
}

// The input as two files: the part before sep goes to file a; the part after it to file b when
// sep occurs, else b is removed (a missing second file is a case of its own for the parsers).
static void fuzz_write_pair(const uint8_t* data, size_t n, const char* sep, const char* a, const char* b) {
    const uint8_t *pa, *pb;
    size_t na, nb;
    fuzz_split(data, n, sep, &pa, &na, &pb, &nb);
    fuzz_write(a, pa, na);
    if (na < n) fuzz_write(b, pb, nb);
    else fuzz_remove(b);
}

#endif // LLMC_FUZZ_H
