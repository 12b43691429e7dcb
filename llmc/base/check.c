#include "base/check.h"
#include <unistd.h>

static llmc_fatal_hook_fn g_fatal_hook = NULL;
#define MAX_FATAL_CLEANUPS 8
static llmc_fatal_hook_fn g_cleanups[MAX_FATAL_CLEANUPS];
static int g_n_cleanups = 0;

void llmc_on_fatal(llmc_fatal_hook_fn fn) {
    for (int i = 0; i < g_n_cleanups; i++) if (g_cleanups[i] == fn) return;
    assertCheck(g_n_cleanups < MAX_FATAL_CLEANUPS);
    g_cleanups[g_n_cleanups++] = fn;
}

void llmc_set_fatal_hook(llmc_fatal_hook_fn fn) { g_fatal_hook = fn; }
static void llmc_run_fatal_hook(void) {
    llmc_fatal_hook_fn fn = g_fatal_hook;
    g_fatal_hook = NULL; // a failure inside the hook must not recurse
    if (fn) fn();
}

static void llmc_fatal_vprint(const char* file, int line, const char* hint, const char* fmt, va_list ap) {
    fflush(stdout);
    // the whole message formatted first and written at once: stderr is unbuffered, and separate
    // writes let another process's output (mpirun's abort banner) land inside the message
    char msg[4096];
    int n = snprintf(msg, sizeof(msg), "error: ");
    n += vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    if (n > (int)sizeof(msg) - 1) n = (int)sizeof(msg) - 1;
    if (hint && hint[0]) n += snprintf(msg + n, sizeof(msg) - (size_t)n, "\n  hint: %s", hint);
    if (n > (int)sizeof(msg) - 1) n = (int)sizeof(msg) - 1;
    snprintf(msg + n, sizeof(msg) - (size_t)n, "\n  (at %s:%d)\n", file, line);
    fputs(msg, stderr);
    fflush(stderr);
}

void llmc_fatal_print_at(const char* file, int line, const char* hint, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    llmc_fatal_vprint(file, line, hint, fmt, ap);
    va_end(ap);
}

void llmc_fatal_end(int now) {
    const int nc = g_n_cleanups;
    g_n_cleanups = 0; // a failure inside a clean-up must not run them again
    for (int i = 0; i < nc; i++) g_cleanups[i]();
    llmc_run_fatal_hook();
    if (now) {
        fflush(NULL); // (what _exit skips: the buffers of open files, e.g. the run log)
        _exit(1);
    }
    exit(1);
}

void llmc_fatal_at(const char* file, int line, const char* hint, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    llmc_fatal_vprint(file, line, hint, fmt, ap);
    va_end(ap);
    llmc_fatal_end(0);
}

FILE* fopen_check(const char* path, const char* mode, const char* file, int line) {
    FILE* fp = fopen(path, mode);
    if (!fp) {
        int e = errno;
        llmc_fatal_at(file, line,
            mode[0] == 'r' ? "check that the path exists and is readable" : "check that the directory exists and is writable",
            "cannot open '%s' (mode %s): %s", path, mode, strerror(e));
    }
    return fp;
}

void fread_check(void* ptr, size_t size, size_t nmemb, FILE* fp, const char* path, const char* file, int line) {
    size_t got = fread(ptr, size, nmemb, fp);
    if (got != nmemb) {
        llmc_fatal_at(file, line, "the file is truncated or corrupt; re-download or re-create it",
            "'%s': short read (%s): wanted %zu items of %zu bytes, got %zu",
            path, feof(fp) ? "unexpected end of file" : "read error", nmemb, size, got);
    }
}

void fwrite_check(const void* ptr, size_t size, size_t nmemb, FILE* fp, const char* path, const char* file, int line) {
    size_t put = fwrite(ptr, size, nmemb, fp);
    if (put != nmemb) {
        int e = errno;
        llmc_fatal_at(file, line, "is the disk full?", "'%s': write failed: %s", path, strerror(e));
    }
}

void fseek_check(FILE* fp, long off, int whence, const char* path, const char* file, int line) {
    if (fseek(fp, off, whence) != 0) {
        int e = errno;
        llmc_fatal_at(file, line, "the file is truncated or not seekable", "'%s': seek failed: %s", path, strerror(e));
    }
}

void* malloc_check(size_t size, const char* file, int line) {
    void* p = malloc(size ? size : 1);
    if (!p) llmc_fatal_at(file, line, "use a smaller --batch-size / --seq-len or a smaller model",
                          "out of memory allocating %zu bytes", size);
    return p;
}

void* calloc_check(size_t n, size_t size, const char* file, int line) {
    void* p = calloc(n ? n : 1, size ? size : 1);
    if (!p) llmc_fatal_at(file, line, "use a smaller --batch-size / --seq-len or a smaller model",
                          "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}
