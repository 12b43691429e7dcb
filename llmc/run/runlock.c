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
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ')) out[--n] = '\0';
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
        if (fcntl(fd, F_SETLK, &fl) != 0) {
            const int e = errno;
            if (e == EAGAIN || e == EACCES) { lock_holder(fd, holder, cap); close(fd); return -1; }
            // a file system without locks (some network ones): go on, and say so
            printf("warning: cannot lock '%s' (%s): nothing stops a second program from writing this --out meanwhile\n",
                   g_lock.path, strerror(e));
            g_lock.fd = fd; g_lock.made_file = made;
            return 0;
        }
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(g_lock.path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
            g_lock.fd = fd; g_lock.made_file = made; g_lock.locked = 1;
            return 0;
        }
        close(fd);
    }
    fatal("try again", "'%s' keeps being replaced while this run tries to lock it", g_lock.path);
}

// Rank 0 holds the lock: a note when the text of a run that did not end cleanly is there, then
// this run's pid, host and command in the file, and the lock narrowed to byte 0.
static void lock_claim(int argc, char** argv) {
    char old[RUNLOCK_TEXT_MAX], text[RUNLOCK_TEXT_MAX], host[256] = "?";
    read_fd_text(g_lock.fd, old, sizeof(old));
    if (old[0]) printf("note: '%s' names a run that did not end cleanly (killed?); it is gone, so this run takes its place: %s\n", g_lock.path, old);
    gethostname(host, sizeof(host) - 1);
    int n = snprintf(text, sizeof(text), "process %d on %s (", (int)getpid(), host);
    for (int i = 0; i < argc && n < (int)sizeof(text) - 4; i++) n += snprintf(text + n, sizeof(text) - (size_t)n, "%s%s", i ? " " : "", argv[i]);
    if (n > (int)sizeof(text) - 3) n = (int)sizeof(text) - 3;
    n += snprintf(text + n, sizeof(text) - (size_t)n, ")\n");
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
