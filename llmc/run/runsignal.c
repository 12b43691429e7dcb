#include "run/runsignal.h"
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_pending = 0;
static volatile sig_atomic_t g_console_may_stall = 0;
static void (*volatile g_startup_cleanup)(void) = NULL;
static pthread_t g_main; // the thread that runs the loop (runsignal_startup's caller)

// The signals a run treats alike (runsignal.h).
static const int SIGNALS[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
#define NSIGNALS ((int)(sizeof(SIGNALS) / sizeof(SIGNALS[0])))

// Async-signal-safe calls only. The loop's thread must see the signal: a write of its blocked on
// a console nobody reads (mpirun stops reading the ranks' output once Ctrl-C reached it) returns
// only when a signal interrupts it, and the kernel may have handed the signal to another thread
// (MPI's, the watchdog's); there the console is made non-blocking too, so that no later write
// holds the checkpoint up (what it cannot take is dropped: nobody reads it).
static void on_signal_noted(int sig) {
    g_pending = sig;
    if (g_console_may_stall)
        for (int fd = 1; fd <= 2; fd++) {
            const int fl = fcntl(fd, F_GETFL);
            if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        }
    if (!pthread_equal(pthread_self(), g_main)) pthread_kill(g_main, sig);
}

static void on_signal_startup(int sig) {
    static const char msg[] = "\ninterrupted while starting up: exiting (no checkpoint or output was written)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1); // (async-signal-safe, unlike stdio)
    (void)w;
    void (*cleanup)(void) = g_startup_cleanup;
    if (cleanup) cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void set_handler(void (*handler)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < NSIGNALS; i++) sigaddset(&sa.sa_mask, SIGNALS[i]); // one handler at a time
    for (int i = 0; i < NSIGNALS; i++) sigaction(SIGNALS[i], &sa, NULL);
}

void runsignal_startup(void) {
    g_main = pthread_self();
    set_handler(on_signal_startup);
}
void runsignal_deferred(int console_may_stall) {
    g_console_may_stall = console_may_stall;
    set_handler(on_signal_noted);
}
int runsignal_pending(void) { return g_pending; }
void runsignal_set_startup_cleanup(void (*fn)(void)) { g_startup_cleanup = fn; }

const char* runsignal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : sig == SIGPIPE ? "SIGPIPE" : "a signal";
}

int runsignal_exit(int sig) {
    fflush(stdout);
    fflush(stderr);
    signal(sig, SIG_DFL);
    raise(sig);
    return 128 + sig;
}
