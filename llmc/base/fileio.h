// File helpers: atomic writes (temp file, fsync, rename, fsync dir) so that a crash or a
// fatal error at any moment leaves the previous file intact, plus small read utilities.
#ifndef LLMC_FILEIO_H
#define LLMC_FILEIO_H

#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Room for a path the user gave plus a file name joined to it (path_join checks it fits).
#define LLMC_PATH_MAX 4200

typedef struct {
    FILE* fp;
    char path[LLMC_PATH_MAX];          // final destination
    char tmp_path[LLMC_PATH_MAX + 32]; // where we write until commit: path + ".tmp.<pid>"
} AtomicFile;

// Opens "<path>.tmp.<pid>" for writing. Registered so that a fatal error removes it.
FILE* atomic_open(AtomicFile* af, const char* path);
// Flush, fsync, close, rename onto path, fsync the directory.
void atomic_commit(AtomicFile* af);

// Write a whole buffer atomically.
void atomic_write_file(const char* path, const void* data, size_t n);
// If entry (a file name) is the temporary of an atomic write, "NAME.tmp.<digits>": the length of
// NAME; else 0.
size_t atomic_tmp_base_len(const char* entry);
// Removes dir's temporaries of atomic writes whose NAME ours(NAME, ctx) accepts (regular files
// only), whoever wrote them: call it only where nobody else can be writing them (a lock held,
// llmc/run/runlock.h). Returns how many; adds their bytes to *bytes and appends their names,
// comma-separated, to the string names (cap bytes; "..." where they do not fit).
int atomic_remove_stale(const char* dir, int (*ours)(const char* name, void* ctx), void* ctx, uint64_t* bytes,
                        char* names, size_t cap);

int file_exists(const char* path);
int dir_exists(const char* path);
// Size of a regular file in bytes, or -1 if it cannot be stat'ed.
int64_t file_size(const char* path);
// Read a whole file into a malloc'd, NUL-terminated buffer (fatal on error).
char* read_file_all(const char* path, size_t* out_len);
// mkdir -p (fatal on error).
void mkdir_p(const char* path);
// Join dir and name into out (fatal if it does not fit).
void path_join(char* out, size_t cap, const char* dir, const char* name);
// The readers' error form: err = "'PATH': " + the formatted message (cut to errcap); returns -1.
int path_fail(char* err, size_t errcap, const char* path, const char* fmt, ...) __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif
#endif // LLMC_FILEIO_H
