#define _GNU_SOURCE
#include "run/runlock.h"
#include "run/runsignal.h"
#include "base/check.h"
#include "base/fileio.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RUNLOCK_MAX_DIRS 16
#define RUNLOCK_TEXT_MAX 1024

// What this process holds and made. Plain arrays: the start-up signal handler reads them.
static struct {
    int fd;                                        // OUT/.lock, kept open for the whole run; -1
    int locked;                                    // rank 0 holds the lock (0: none, or not supported)
    int made_file;                                 // this process made OUT/.lock ...
    int ndirs;                                     // ... and these directories, outermost first
    char dirs[RUNLOCK_MAX_DIRS][LLMC_PATH_MAX];
    char path[LLMC_PATH_MAX];
    volatile sig_atomic_t started;                 // the run wrote its first file
} g_lock = {.fd = -1};

// A start-up that ends early (fatal error, signal) takes back what it made: async-signal-safe
// calls only (runsignal.h).
static void runlock_abandon(void) {
    if (g_lock.started) return;
    if (g_lock.made_file) unlink(g_lock.path);
    else if (g_lock.locked) { int r = ftruncate(g_lock.fd, 0); (void)r; }
    for (int i = g_lock.ndirs - 1; i >= 0; i--) rmdir(g_lock.dirs[i]); // (only while empty)
}

static void runlock_on_fatal(void) {
    if (!g_lock.started) runlock_abandon();
    else runlock_release();
}

void runlock_started(void) { g_lock.started = 1; }

void runlock_release(void) {
    if (g_lock.locked) { int r = ftruncate(g_lock.fd, 0); (void)r; }
}

// mkdir -p dir, remembering the directories made.
static void lock_make_dir(const char* dir) {
    char buf[LLMC_PATH_MAX];
    if (strlen(dir) >= sizeof(buf)) fatal(NULL, "path too long: '%s'", dir);
    snprintf(buf, sizeof(buf), "%s", dir);
    for (char* p = buf + 1;; p++) {
        if (*p != '/' && *p) continue;
        const char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) == 0) {
            if (g_lock.ndirs < RUNLOCK_MAX_DIRS) snprintf(g_lock.dirs[g_lock.ndirs++], LLMC_PATH_MAX, "%s", buf);
        } else if (errno != EEXIST) {
            const int e = errno;
            fatal("check the path and the permissions of --out", "cannot create directory '%s': %s", buf, strerror(e));
        }
        *p = c;
        if (!c) break;
    }
    if (!dir_exists(dir)) fatal("choose another --out", "--out '%s' exists and is not a directory", dir);
}

// The text of an open file (at most cap - 1 bytes, NUL-terminated, trailing newlines cut); "" if
// none. By the descriptor: closing any other descriptor of the lock file would drop the lock.
static void read_fd_text(int fd, char* out, size_t cap) {
    ssize_t got = fd >= 0 ? pread(fd, out, cap - 1, 0) : -1;
    size_t n = got > 0 ? (size_t)got : 0;
    out[n] = '\0';
    for (size_t i = 0; i < n; i++) if (out[i] == '\0') out[i] = ' '; // (/proc/PID/cmdline: NUL between words)
    char* nl = strchr(out, '\n'); // (the holder is the first line: a writer's marker line follows it)
    if (nl) { *nl = '\0'; n = (size_t)(nl - out); }
    while (n > 0 && out[n - 1] == ' ') out[--n] = '\0';
}

// 1 when fd no longer is the file at path (removed or replaced since it was opened).
static int lock_replaced(int fd, const char* path) {
    struct stat a, b;
    return fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev;
}

// F_SETLK, tried again for a moment when another process holds it: a writer that ends removes the
// lock file while it holds it whole (runlock_writer_release), for the microseconds of an unlink.
// 0, or -1 with errno (EAGAIN / EACCES: held; *gone: the file was removed or replaced meanwhile).
static int lock_set(int fd, const char* path, struct flock fl, int* gone) {
    *gone = 0;
    for (int attempt = 0;; attempt++) {
        if (fcntl(fd, F_SETLK, &fl) == 0) return 0;
        const int e = errno;
        if (e != EAGAIN && e != EACCES) return -1;
        if (lock_replaced(fd, path)) { *gone = 1; errno = e; return -1; }
        if (attempt == 4) { errno = e; return -1; }
        const struct timespec ms10 = {0, 10 * 1000 * 1000};
        nanosleep(&ms10, NULL);
    }
}

// Who holds the lock on fd's file: "process PID (COMMAND)", from the kernel's lock table and the
// holder's command line (/proc where it runs here, else the text it wrote into the file).
static void lock_holder(int fd, char* out, size_t cap) {
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    const pid_t pid = fcntl(fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK ? q.l_pid : 0;
    char cmd[RUNLOCK_TEXT_MAX] = "", proc[64];
    if (pid > 0) {
        snprintf(proc, sizeof(proc), "/proc/%d/cmdline", (int)pid);
        const int pfd = open(proc, O_RDONLY | O_CLOEXEC);
        read_fd_text(pfd, cmd, sizeof(cmd));
        if (pfd >= 0) close(pfd);
    }
    if (cmd[0] && pid > 0) { snprintf(out, cap, "process %d (%s)", (int)pid, cmd); return; }
    read_fd_text(fd, cmd, sizeof(cmd)); // another host: its own words
    if (cmd[0]) snprintf(out, cap, "%s", cmd);
    else if (pid > 0) snprintf(out, cap, "process %d", (int)pid);
    else snprintf(out, cap, "another process (on another host?)");
}

// Opens OUT/.lock and takes the whole file; returns 0, or -1 with the holder in `holder`. A lock
// file removed meanwhile by a start-up that gave up (runlock_abandon) is opened again.
static int lock_take(char* holder, size_t cap) {
    for (int attempt = 0; attempt < 8; attempt++) {
        int made = 1;
        int fd = open(g_lock.path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) { made = 0; fd = open(g_lock.path, O_RDWR | O_CLOEXEC); }
        if (fd < 0) {
            const int e = errno;
            fatal("check that --out is writable", "cannot open the lock file '%s': %s", g_lock.path, strerror(e));
        }
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        int gone;
        if (lock_set(fd, g_lock.path, fl, &gone) != 0) {
            const int e = errno;
            if (gone) { close(fd); continue; }
            if (e == EAGAIN || e == EACCES) { lock_holder(fd, holder, cap); close(fd); return -1; }
            // a file system without locks (some network ones): go on, and say so
            printf("warning: cannot lock '%s' (%s): nothing stops a second program from writing this --out meanwhile\n",
                   g_lock.path, strerror(e));
            g_lock.fd = fd; g_lock.made_file = made;
            return 0;
        }
        if (!lock_replaced(fd, g_lock.path)) {
            g_lock.fd = fd; g_lock.made_file = made; g_lock.locked = 1;
            return 0;
        }
        close(fd);
    }
    fatal("try again", "'%s' keeps being replaced while this run tries to lock it", g_lock.path);
}

// "process PID on HOST (COMMAND)\n" into text (RUNLOCK_TEXT_MAX bytes); returns its length.
static int lock_text(char* text, int argc, char** argv) {
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    int n = snprintf(text, RUNLOCK_TEXT_MAX, "process %d on %s (", (int)getpid(), host);
    for (int i = 0; i < argc && n < RUNLOCK_TEXT_MAX - 4; i++) n += snprintf(text + n, RUNLOCK_TEXT_MAX - (size_t)n, "%s%s", i ? " " : "", argv[i]);
    if (n > RUNLOCK_TEXT_MAX - 3) n = RUNLOCK_TEXT_MAX - 3;
    return n + snprintf(text + n, RUNLOCK_TEXT_MAX - (size_t)n, ")\n");
}

// Rank 0 holds the lock: a note when the text of a run that did not end cleanly is there, then
// this run's pid, host and command in the file, and the lock narrowed to byte 0.
static void lock_claim(int argc, char** argv) {
    char old[RUNLOCK_TEXT_MAX], text[RUNLOCK_TEXT_MAX];
    read_fd_text(g_lock.fd, old, sizeof(old));
    if (old[0]) printf("note: '%s' names a run that did not end cleanly (killed?); it is gone, so this run takes its place: %s\n", g_lock.path, old);
    const int n = lock_text(text, argc, argv);
    if (ftruncate(g_lock.fd, 0) != 0 || pwrite(g_lock.fd, text, (size_t)n, 0) != (ssize_t)n) {
        const int e = errno;
        fatal("check that --out is writable and not full", "cannot write the lock file '%s': %s", g_lock.path, strerror(e));
    }
    struct flock rest = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 1, .l_len = 0};
    if (fcntl(g_lock.fd, F_SETLK, &rest) != 0) fatal("this is a bug in llmc", "cannot narrow the lock on '%s': %s", g_lock.path, strerror(errno));
}

void runlock_acquire(Comm* comm, const char* dir, int argc, char** argv) {
    path_join(g_lock.path, sizeof(g_lock.path), dir, RUNLOCK_FILE);
    if (comm->rank == 0) {
        llmc_on_fatal(runlock_on_fatal);
        runsignal_set_startup_cleanup(runlock_abandon);
        lock_make_dir(dir);
        char holder[RUNLOCK_TEXT_MAX + 64];
        if (lock_take(holder, sizeof(holder)) != 0)
            fatal("wait until it ends, stop it, or choose another --out",
                  "--out %s is in use by %s: one program at a time may write a run directory", dir, holder);
        if (g_lock.locked) lock_claim(argc, argv);
    }
    int ok = 1;
    comm_broadcast(comm, &ok, sizeof(ok), 0); // (a refusal ended every rank with rank 0's message)
    if (comm->rank == 0) return;
    // the other ranks hold their own byte where they see the file (a shared file system)
    const int fd = open(g_lock.path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return;
    struct flock mine = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = comm->rank, .l_len = 1};
    if (fcntl(fd, F_SETLK, &mine) != 0) { close(fd); return; }
    g_lock.fd = fd;
}

// ----------------------------------------------------------------------------
// programs that write files into a directory (runlock.h: runlock_writer_acquire)

#define RUNLOCK_KEY_BASE (1LL << 30) // the trainers' bytes lie below (rank r: byte r), the writers' keys above
#define RUNLOCK_WRITER_MARK "(the lock file of a program writing files here: removed when no program holds it)"

static struct {
    int fd;                       // DIR/.lock while held; -1
    int tried;                    // runlock_writer_acquire ran (once a process)
    int result;                   // what it returned
    char path[LLMC_PATH_MAX];
} g_writer = {.fd = -1};

// The byte of a name: FNV-1a, folded into [RUNLOCK_KEY_BASE, 2 RUNLOCK_KEY_BASE).
static off_t writer_key(const char* name) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char* p = (const unsigned char*)name; *p; p++) h = (h ^ *p) * 1099511628211ull;
    return (off_t)(RUNLOCK_KEY_BASE + (long long)(h % (uint64_t)RUNLOCK_KEY_BASE));
}

// 1 when the lock file says nothing a later run needs: its text carries the writers' marker (a
// writer made it), or it is empty (a writer killed before its text was in, or a run that ended
// cleanly: a new run makes it again). A killed trainer's text, which its next run reports, stays.
static int writer_removable(int fd) {
    char text[RUNLOCK_TEXT_MAX + sizeof(RUNLOCK_WRITER_MARK) + 8];
    const ssize_t got = pread(fd, text, sizeof(text) - 1, 0);
    text[got > 0 ? got : 0] = '\0';
    return got == 0 || strstr(text, "\n" RUNLOCK_WRITER_MARK) != NULL;
}

void runlock_writer_release(void) {
    if (g_writer.fd < 0) return;
    // nobody else holds any part of it (the whole file is ours): a file that says nothing goes
    struct flock all = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(g_writer.fd, F_SETLK, &all) == 0 && writer_removable(g_writer.fd) && !lock_replaced(g_writer.fd, g_writer.path))
        unlink(g_writer.path);
    close(g_writer.fd); // (drops every lock this process holds on the file)
    g_writer.fd = -1;
}

// The shared lock over the trainers' bytes, then one byte per name; 0, 1 when the file went
// meanwhile (open it again), or -1 with the holder in `holder`.
static int writer_take(int fd, int rdonly, const char* const* names, int nnames, char* holder, size_t cap) {
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = RUNLOCK_KEY_BASE};
    int gone;
    for (int i = -1; i < (rdonly ? 0 : nnames); i++) {
        if (i >= 0) fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = writer_key(names[i]), .l_len = 1};
        if (lock_set(fd, g_writer.path, fl, &gone) == 0) continue;
        if (gone) return 1;
        if (errno != EAGAIN && errno != EACCES) return -2; // (no locks on this file system)
        lock_holder(fd, holder, cap);
        return -1;
    }
    return lock_replaced(fd, g_writer.path);
}

// Opens DIR/.lock, made (with this process's text and the writers' marker) when missing; -1 when
// it cannot be opened (a directory that is missing or not writable: the program's own write then
// says so). *rdonly: opened for reading only (another user's file), so no name can be locked.
static int writer_open(int argc, char** argv, int* made, int* rdonly) {
    *made = 1; *rdonly = 0;
    int fd = open(g_writer.path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) { *made = 0; fd = open(g_writer.path, O_RDWR | O_CLOEXEC); }
    if (fd < 0 && errno == EACCES && !*made) { *rdonly = 1; fd = open(g_writer.path, O_RDONLY | O_CLOEXEC); }
    if (fd >= 0 && *made) {
        char text[RUNLOCK_TEXT_MAX + sizeof(RUNLOCK_WRITER_MARK) + 2];
        int n = lock_text(text, argc, argv);
        n += snprintf(text + n, sizeof(text) - (size_t)n, "%s\n", RUNLOCK_WRITER_MARK);
        if (pwrite(fd, text, (size_t)n, 0) != (ssize_t)n) { close(fd); unlink(g_writer.path); return -1; }
    }
    return fd;
}

int runlock_writer_acquire(const char* dir, const char* flag, const char* const* names, int nnames, int argc, char** argv) {
    if (g_writer.tried) return g_writer.result;
    if (!dir_exists(dir)) return 0;
    g_writer.tried = 1;
    path_join(g_writer.path, sizeof(g_writer.path), dir, RUNLOCK_FILE);
    char holder[RUNLOCK_TEXT_MAX + 64];
    for (int attempt = 0; attempt < 8; attempt++) {
        int made, rdonly;
        const int fd = writer_open(argc, argv, &made, &rdonly);
        if (fd < 0) return 0;
        const int r = writer_take(fd, rdonly, names, nnames, holder, sizeof(holder));
        if (r == 1) { close(fd); continue; }
        if (r == -1) {
            close(fd); // (a file made here stays: the holder opened it)
            char hint[64 + LLMC_PATH_MAX];
            snprintf(hint, sizeof(hint), "wait until it ends, stop it, or choose another %s", flag);
            fatal(hint, "%s %s is in use by %s: a trainer's run directory is written by it alone, a file by one program at a time", flag, dir, holder);
        }
        if (r == -2) { // (a lock file is of no use here: one made goes again)
            fprintf(stderr, "warning: cannot lock '%s' (%s): nothing keeps a trainer from starting in %s meanwhile\n", g_writer.path, strerror(errno), dir);
            if (made) unlink(g_writer.path);
            close(fd);
            return 0;
        }
        g_writer.fd = fd;
        g_writer.result = !rdonly;
        llmc_on_fatal(runlock_writer_release);
        return g_writer.result;
    }
    fatal("try again", "'%s' keeps being replaced while this program tries to lock it", g_writer.path);
}

int runlock_writer_clean(FILE* say, const char* dir, int (*ours)(const char* name, void* ctx), void* ctx) {
    uint64_t bytes = 0;
    char names[512] = "";
    const int n = atomic_remove_stale(dir, ours, ctx, &bytes, names, sizeof(names));
    if (n > 0 && say)
        fprintf(say, "cleanup: removed %d temporary file%s of writes that did not finish (a killed run) in '%s' (%.1f MiB): %s\n",
               n, n == 1 ? "" : "s", dir, (double)bytes / (1024.0 * 1024.0), names);
    return n;
}
