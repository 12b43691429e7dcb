#define _GNU_SOURCE
#include "base/fileio.h"
#include "base/check.h"
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <dirent.h>
#include <libgen.h>

// Open atomic files, so that a fatal error can remove their temporaries.
#define MAX_OPEN_ATOMIC 64
static AtomicFile* g_open_atomic[MAX_OPEN_ATOMIC];

static void atomic_register(AtomicFile* af) {
    for (int i = 0; i < MAX_OPEN_ATOMIC; i++) if (!g_open_atomic[i]) { g_open_atomic[i] = af; return; }
    fatal("this is a bug in llmc", "too many files open for atomic writing");
}
static void atomic_abort_all(void);
static void atomic_unregister(AtomicFile* af) {
    for (int i = 0; i < MAX_OPEN_ATOMIC; i++) if (g_open_atomic[i] == af) g_open_atomic[i] = NULL;
}

FILE* atomic_open(AtomicFile* af, const char* path) {
    if (strlen(path) >= sizeof(af->path)) fatal(NULL, "output path too long: '%s'", path);
    snprintf(af->path, sizeof(af->path), "%s", path);
    snprintf(af->tmp_path, sizeof(af->tmp_path), "%s.tmp.%d", path, (int)getpid());
    af->fp = fopen(af->tmp_path, "wb");
    if (!af->fp) {
        int e = errno;
        fatal("check that the output directory exists and is writable",
              "cannot create '%s': %s", af->tmp_path, strerror(e));
    }
    atomic_register(af);
    llmc_on_fatal(atomic_abort_all); // a fatal error leaves nothing half-written behind
    return af->fp;
}

static void fsync_dir_of(const char* path) {
    char buf[LLMC_PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path);
    const char* dir = dirname(buf);
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) { fsync(fd); close(fd); }
}

void atomic_commit(AtomicFile* af) {
    int bad = fflush(af->fp) != 0;
    bad |= fsync(fileno(af->fp)) != 0;
    bad |= fclose(af->fp) != 0;
    af->fp = NULL;
    if (bad) {
        int e = errno;
        unlink(af->tmp_path);
        atomic_unregister(af);
        fatal("is the disk full?", "writing '%s' failed: %s", af->path, strerror(e));
    }
    if (rename(af->tmp_path, af->path) != 0) {
        int e = errno;
        unlink(af->tmp_path);
        atomic_unregister(af);
        fatal(NULL, "cannot rename '%s' to '%s': %s", af->tmp_path, af->path, strerror(e));
    }
    atomic_unregister(af);
    fsync_dir_of(af->path);
}

// Abort every atomic file still open (a clean-up of fatal errors: llmc_on_fatal).
static void atomic_abort_all(void) {
    for (int i = 0; i < MAX_OPEN_ATOMIC; i++) {
        AtomicFile* af = g_open_atomic[i];
        if (af) {
            if (af->fp) { fclose(af->fp); af->fp = NULL; }
            unlink(af->tmp_path);
            g_open_atomic[i] = NULL;
        }
    }
}

void atomic_write_file(const char* path, const void* data, size_t n) {
    AtomicFile af;
    FILE* fp = atomic_open(&af, path);
    fwriteCheck(data, 1, n, fp, af.tmp_path);
    atomic_commit(&af);
}

size_t atomic_tmp_base_len(const char* entry) {
    const char* t = NULL;
    for (const char* q = strstr(entry, ".tmp."); q; q = strstr(q + 1, ".tmp.")) t = q;
    if (!t || t == entry || !t[5]) return 0;
    for (const char* p = t + 5; *p; p++) if (*p < '0' || *p > '9') return 0;
    return (size_t)(t - entry);
}

int atomic_remove_stale(const char* dir, int (*ours)(const char* name, void* ctx), void* ctx, uint64_t* bytes,
                        char* names, size_t cap) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    int n = 0, cut = 0;
    size_t len = cap ? strlen(names) : 0;
    char base[256], p[LLMC_PATH_MAX];
    for (struct dirent* e; (e = readdir(d)) != NULL;) {
        const size_t bl = atomic_tmp_base_len(e->d_name);
        if (!bl || bl >= sizeof(base)) continue;
        snprintf(base, sizeof(base), "%.*s", (int)bl, e->d_name);
        if (!ours(base, ctx)) continue;
        path_join(p, sizeof(p), dir, e->d_name);
        const int64_t sz = file_size(p);
        if (!file_exists(p) || unlink(p) != 0) continue;
        *bytes += sz > 0 ? (uint64_t)sz : 0;
        n++;
        if (!cap || cut) continue;
        if (len + strlen(e->d_name) + 2 + 5 < cap) len += (size_t)snprintf(names + len, cap - len, "%s%s", len ? ", " : "", e->d_name);
        else if (len + 5 < cap) { snprintf(names + len, cap - len, "%s...", len ? ", " : ""); cut = 1; }
    }
    closedir(d);
    return n;
}

int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int dir_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int64_t file_size(const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    return (int64_t)st.st_size;
}

char* read_file_all(const char* path, size_t* out_len) {
    FILE* fp = fopenCheck(path, "rb");
    fseekCheck(fp, 0, SEEK_END, path);
    long n = ftell(fp);
    if (n < 0) fatal(NULL, "'%s': cannot determine file size", path);
    fseekCheck(fp, 0, SEEK_SET, path);
    char* buf = (char*)mallocCheck((size_t)n + 1);
    if (n > 0) freadCheck(buf, 1, (size_t)n, fp, path);
    buf[n] = '\0';
    fclose(fp);
    if (out_len) *out_len = (size_t)n;
    return buf;
}

void mkdir_p(const char* path) {
    char buf[LLMC_PATH_MAX];
    if (strlen(path) >= sizeof(buf)) fatal(NULL, "path too long: '%s'", path);
    snprintf(buf, sizeof(buf), "%s", path);
    for (char* p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                int e = errno;
                fatal("check permissions of the parent directory", "cannot create directory '%s': %s", buf, strerror(e));
            }
            *p = '/';
        }
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        fatal("check permissions of the parent directory", "cannot create directory '%s': %s", buf, strerror(e));
    }
    if (!dir_exists(buf)) fatal(NULL, "'%s' exists and is not a directory", buf);
}

void path_join(char* out, size_t cap, const char* dir, const char* name) {
    int n = snprintf(out, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap) fatal(NULL, "path too long: '%s/%s'", dir, name);
}

int path_fail(char* err, size_t errcap, const char* path, const char* fmt, ...) {
    if (err && errcap) {
        int n = snprintf(err, errcap, "'%s': ", path);
        if (n >= 0 && (size_t)n < errcap) {
            va_list ap; va_start(ap, fmt);
            vsnprintf(err + n, errcap - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}
