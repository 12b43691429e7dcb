#include "run/runsignal.h"
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_pending = 0;

static void on_signal_noted(int sig) { g_pending = sig; }

static void on_signal_startup(int sig) {
    static const char msg[] = "\ninterrupted while starting up: exiting (no checkpoint or output was written)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1); // (async-signal-safe, unlike stdio)
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void set_handler(void (*handler)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void runsignal_startup(void) { set_handler(on_signal_startup); }
void runsignal_deferred(void) { set_handler(on_signal_noted); }
int runsignal_pending(void) { return g_pending; }

int runsignal_exit(int sig) {
    fflush(stdout);
    fflush(stderr);
    signal(sig, SIG_DFL);
    raise(sig);
    return 128 + sig;
}
