// Error checking helpers in the llm.c style: every failure prints where it happened,
// what went wrong and a hint on how to fix it, then exits non-zero. Nothing in the
// library returns error codes for conditions the user has to fix; it stops with a message.
#ifndef LLMC_CHECK_H
#define LLMC_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <errno.h>

#ifdef __cplusplus
extern "C" {
#endif

// Called before exiting on a fatal error (e.g. to abort MPI). One at a time: whoever installs one
// decides how the process ends; the default does nothing.
typedef void (*llmc_fatal_hook_fn)(void);
void llmc_set_fatal_hook(llmc_fatal_hook_fn fn);
// Clean-ups that run on every fatal error, before the hook, in the order registered (e.g. the
// atomic writers of llmc/base/fileio.h remove their temporary files). Registering a function twice
// runs it once.
void llmc_on_fatal(llmc_fatal_hook_fn fn);

// Print "error: <message>" (+ optional hint) and exit(1).
#if defined(__GNUC__)
__attribute__((noreturn, format(printf, 4, 5)))
#endif
void llmc_fatal_at(const char* file, int line, const char* hint, const char* fmt, ...);

// The two halves of llmc_fatal_at, for a caller with work between the message and the end (the
// watchdog aborts the device communicator once its verdict is printed, because the abort itself
// may hang behind a stuck kernel). llmc_fatal_end runs the clean-ups and the hook, then exits
// with status 1: through exit(), or with now != 0 through _exit() after flushing every stdio
// stream, skipping atexit handlers and static destructors (a library's teardown, e.g. the CUDA
// runtime's, may wait for the thread or device that is stuck).
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
void llmc_fatal_print_at(const char* file, int line, const char* hint, const char* fmt, ...);
#if defined(__GNUC__)
__attribute__((noreturn))
#endif
void llmc_fatal_end(int now);

// fatal("hint or NULL", "fmt", ...): a user-facing error. The file:line is printed too,
// which is what developers want and costs users nothing.
#define fatal(hint, ...) llmc_fatal_at(__FILE__, __LINE__, hint, __VA_ARGS__)

// Checked wrappers around libc. They name the file involved.
FILE* fopen_check(const char* path, const char* mode, const char* file, int line);
void fread_check(void* ptr, size_t size, size_t nmemb, FILE* fp, const char* path, const char* file, int line);
void fwrite_check(const void* ptr, size_t size, size_t nmemb, FILE* fp, const char* path, const char* file, int line);
void fseek_check(FILE* fp, long off, int whence, const char* path, const char* file, int line);
void* malloc_check(size_t size, const char* file, int line);
void* calloc_check(size_t n, size_t size, const char* file, int line);
#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)
#define freadCheck(ptr, size, nmemb, fp, path) fread_check(ptr, size, nmemb, fp, path, __FILE__, __LINE__)
#define fwriteCheck(ptr, size, nmemb, fp, path) fwrite_check(ptr, size, nmemb, fp, path, __FILE__, __LINE__)
#define fseekCheck(fp, off, whence, path) fseek_check(fp, off, whence, path, __FILE__, __LINE__)
#define mallocCheck(size) malloc_check(size, __FILE__, __LINE__)
#define callocCheck(n, size) calloc_check(n, size, __FILE__, __LINE__)

// Internal invariant (a bug in this program, not the user's input).
#define assertCheck(cond) do { if (!(cond)) llmc_fatal_at(__FILE__, __LINE__, \
    "this is a bug in llmc; please report it with the command line you ran", \
    "internal check failed: %s", #cond); } while (0)

#ifdef __cplusplus
}
#endif
#endif // LLMC_CHECK_H
