// The watchdog of llmc/comm/comm.h: a helper thread per rank that ends the whole job when a rank
// stops making progress, with a message naming the stuck rank and what it was doing.
//
// Every collective is bracketed (comm.c: enter/leave), so this thread knows whether the main
// thread is waiting in one, since when, and which. limit = timeout + WD_STEP_FACTOR x the slowest
// step (comm_watchdog_step intervals). Each tick (WD_TICK_S) it checks:
//   1. waiting in a collective for longer than the limit: this rank is the victim, not the culprit.
//      It asks every peer for its status over the implementation's side channel, and wd_judge
//      names a peer that does not answer, one busy in a bounded operation past its own limit, one
//      whose device collective is pending past its limit, or a deadlock (every rank waiting). A
//      peer that answers and is within its limit, still starting up or in an unbounded operation
//      (comm_watchdog_op_unbounded) is alive: this rank asks again later.
//   2. computing in a bounded operation (comm_watchdog_op) for longer than the limit since the last
//      progress, once a step has been measured: this rank itself is stuck.
// A verdict prints one message, aborts the device communicator (NCCL: ncclCommAbort) and ends
// every rank (the fatal hook: MPI_Abort with world > 1), leaving through _exit; a backstop thread
// ends the process WD_EXIT_S later should any of that hang (comm_wd_fail). The thread sleeps
// between ticks; serving a query is a non-blocking test. The rules in full: docs/MULTINODE.md
// ("Inside the comm layer").
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "comm/comm_internal.h"
#include "base/check.h"

#define WD_TICK_S 0.1
#define WD_STEP_FACTOR 3.0
#define WD_QUERY_S 5.0
#define WD_SUSPENDED_S 2.0 // a tick this late means this process was not running
// After a verdict, the process ends within this many seconds even if what runs before the exit
// hangs (ncclCommAbort behind a stuck kernel, MPI_Abort, a clean-up).
#define WD_EXIT_S 15
#define WD_STR_(x) #x
#define WD_STR(x) WD_STR_(x)

struct CommWatchdog {
    Comm* c;
    pthread_t thread;
    pthread_mutex_t mu;      // guards everything below, and c->dev / c->dev_state for this thread
    pthread_cond_t cv;
    int stop;
    int channel;             // the side channel is open (world > 1)
    double timeout, slowest; // slowest: longest interval between step marks; 0 until one is measured
    double last_mark;        // last comm_watchdog_step (0: none yet)
    double last_progress;    // last step mark, end of a collective, or end of an unbounded operation
    int unbounded;           // in an operation named by comm_watchdog_op_unbounded, since unbounded_since
    double unbounded_since;
    double excluded;         // unbounded time since the last step mark (not part of the step)
    int64_t steps;
    int waiting;             // in a collective since wait_since
    double wait_since;
    int64_t wait_seq, last_seq;
    const char* wait_what;
    const char* last_what;
    char op[64];
    double next_query;       // rate limit of status queries while peers are alive but busy
    CommWdStatus* peers;     // world entries, for queries
    int* answered;
};

static void wd_lock(CommWatchdog* w) { pthread_mutex_lock(&w->mu); }
static void wd_unlock(CommWatchdog* w) { pthread_mutex_unlock(&w->mu); }

void comm_wd_wait_begin(Comm* c, const char* what) {
    CommWatchdog* w = c->wd;
    if (!w) return;
    wd_lock(w);
    w->waiting = 1;
    w->wait_since = comm_now();
    w->wait_seq = c->coll_seq;
    w->wait_what = what;
    wd_unlock(w);
}

void comm_wd_wait_end(Comm* c) {
    CommWatchdog* w = c->wd;
    if (!w) return;
    wd_lock(w);
    w->waiting = 0;
    w->last_progress = comm_now();
    w->last_seq = w->wait_seq;
    w->last_what = w->wait_what;
    wd_unlock(w);
}

void comm_wd_progress(Comm* c) {
    CommWatchdog* w = c->wd;
    if (!w) return;
    wd_lock(w);
    if (w->waiting) w->wait_since = comm_now();
    wd_unlock(w);
}

void comm_set_dev(Comm* c, const CommOps* dev, void* dev_state) {
    CommWatchdog* w = c->wd;
    if (w) wd_lock(w);
    c->dev = dev;
    c->dev_state = dev_state;
    if (w) wd_unlock(w);
}

// Time spent in an unbounded operation up to now moves out of the step being measured.
static void wd_exclude_unbounded(CommWatchdog* w, double now) {
    if (!w->unbounded) return;
    w->excluded += now - w->unbounded_since;
    w->unbounded_since = now;
}

void comm_watchdog_step(Comm* c) {
    CommWatchdog* w = c->wd;
    if (!w) return;
    wd_lock(w);
    double now = comm_now();
    wd_exclude_unbounded(w, now);
    double step = now - w->last_mark - w->excluded;
    if (w->last_mark > 0 && step > w->slowest) w->slowest = step;
    w->last_mark = w->last_progress = now;
    w->excluded = 0;
    w->steps++;
    wd_unlock(w);
}

static void wd_name_op(Comm* c, int unbounded, const char* fmt, va_list ap) {
    CommWatchdog* w = c->wd;
    char buf[sizeof(w->op)];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    wd_lock(w);
    memcpy(w->op, buf, sizeof(buf));
    double now = comm_now();
    if (w->unbounded && !unbounded) { // back to bounded work: the clock starts now
        wd_exclude_unbounded(w, now);
        w->last_progress = now;
    }
    if (!w->unbounded && unbounded) w->unbounded_since = now;
    w->unbounded = unbounded;
    wd_unlock(w);
}

void comm_watchdog_op(Comm* c, const char* fmt, ...) {
    if (!c->wd) return;
    va_list ap;
    va_start(ap, fmt);
    wd_name_op(c, 0, fmt, ap);
    va_end(ap);
}

void comm_watchdog_op_unbounded(Comm* c, const char* fmt, ...) {
    if (!c->wd) return;
    va_list ap;
    va_start(ap, fmt);
    wd_name_op(c, 1, fmt, ap);
    va_end(ap);
}

// ---------------------------------------------------------------------------------------------
// the thread

static void copy_str(char* dst, size_t cap, const char* src) { snprintf(dst, cap, "%s", src ? src : ""); }

// This rank's status (called with the lock held). dev_age/dev_what: the oldest pending device
// collective, polled by this thread.
static CommWdStatus wd_status(const CommWatchdog* w, double now, double dev_age, const char* dev_what) {
    CommWdStatus s;
    memset(&s, 0, sizeof(s));
    s.rank = w->c->rank;
    s.steps = w->steps;
    s.armed = w->slowest > 0 && !w->unbounded;
    s.limit = w->timeout + WD_STEP_FACTOR * w->slowest;
    copy_str(s.op, sizeof(s.op), w->op);
    if (w->waiting) {
        s.state = COMM_WD_WAITING; s.seconds = now - w->wait_since; s.coll_seq = w->wait_seq;
        copy_str(s.coll, sizeof(s.coll), w->wait_what);
    } else if (dev_age > 0) {
        s.state = COMM_WD_DEVICE; s.seconds = dev_age; s.coll_seq = w->last_seq;
        copy_str(s.coll, sizeof(s.coll), dev_what);
    } else {
        s.state = COMM_WD_COMPUTING; s.seconds = now - w->last_progress; s.coll_seq = w->last_seq;
        copy_str(s.coll, sizeof(s.coll), w->last_what ? w->last_what : "none yet");
    }
    return s;
}

// The backstop of a verdict: a detached thread that ends the process with _exit(1) WD_EXIT_S
// seconds after it started, if nothing else has ended it by then.
static void* wd_backstop_main(void* arg) {
    (void)arg;
    struct timespec ts = { WD_EXIT_S, 0 };
    while (nanosleep(&ts, &ts) != 0) {}
    static const char note[] = "error: watchdog: the process did not end within " WD_STR(WD_EXIT_S) " s of the verdict above (aborting the "
                               "device communicator or the exit path hung); ending it now\n";
    if (write(2, note, sizeof(note) - 1) < 0) {} // (nothing better to do if stderr is gone)
    _exit(1);
}

// Ends the job with msg (does not return): the message first (so that it is out whatever hangs
// next), then the device communicator's abort, the clean-ups and the hook (MPI_Abort with
// world > 1), then _exit: the main thread may be blocked inside the CUDA runtime or NCCL, whose
// exit-time teardown could wait for it.
void comm_wd_fail(Comm* c, const char* hint, const char* msg) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int backstop = pthread_create(&t, &attr, wd_backstop_main, NULL) == 0;
    pthread_attr_destroy(&attr);
    llmc_fatal_print_at(__FILE__, __LINE__, hint, "%s", msg);
    if (!backstop) fprintf(stderr, "warning: watchdog: no backstop thread; if the exit hangs, kill the process\n");
    CommWatchdog* w = c->wd;
    if (w) wd_lock(w);
    const CommOps* dev = c->dev;
    if (w) wd_unlock(w);
    if (dev->wd_abort) dev->wd_abort(c); // NCCL: ncclCommAbort, so that its kernels stop waiting for peers
    llmc_fatal_end(1);
}

#if defined(__GNUC__)
__attribute__((noreturn))
#endif
static void wd_fail(CommWatchdog* w, const char* msg) {
    comm_wd_fail(w->c, "if a training step may legitimately take longer than three times the slowest one so far plus the timeout, raise "
                 "--watchdog-timeout; 0 turns the watchdog off", msg);
}

static void describe(const CommWdStatus* s, char* out, size_t cap) {
    const char* op = s->op[0] ? s->op : "(no operation named)";
    if (s->state == COMM_WD_WAITING)
        snprintf(out, cap, "rank %d has waited %.1f s without progress in %s (collective #%lld) during '%s'", s->rank, s->seconds, s->coll,
                 (long long)s->coll_seq, op);
    else if (s->state == COMM_WD_DEVICE)
        snprintf(out, cap, "rank %d has a device collective %s pending for %.1f s during '%s'", s->rank, s->coll, s->seconds, op);
    else
        snprintf(out, cap, "rank %d is busy outside collectives for %.1f s in '%s' (last collective #%lld %s)", s->rank,
                 s->seconds, op, (long long)s->coll_seq, s->coll);
}

// Appends to msg (cap bytes) with snprintf semantics, never overflowing.
static void append(char* msg, size_t cap, const char* fmt, ...) {
    size_t len = strlen(msg);
    if (len + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + len, cap - len, fmt, ap);
    va_end(ap);
}

// The peers' statuses are in w->peers / w->answered. Returns 1 and fills msg if a verdict is
// reached; 0 if every peer is alive and some are still legitimately busy.
static int wd_judge(CommWatchdog* w, const CommWdStatus* mine, char* msg, size_t cap) {
    const int W = w->c->world;
    int silent = 0, stuck = 0, busy = 0;
    char line[256];
    describe(mine, line, sizeof(line));
    snprintf(msg, cap, "watchdog: %s (limit %.1f s = --watchdog-timeout %.1f s + 3 x %.2f s, the slowest step); ", line,
             mine->limit, w->timeout, w->slowest);
    for (int r = 0; r < W; r++) {
        const CommWdStatus* s = &w->peers[r];
        if (r == mine->rank) continue;
        if (!w->answered[r]) {
            append(msg, cap, "%sSTUCK: rank %d did not answer a status query within %.0f s (stopped, hung, or its host is "
                   "unreachable)", silent + stuck ? "; " : "", r, WD_QUERY_S);
            silent++;
        } else if (s->state != COMM_WD_WAITING && s->armed && s->seconds > s->limit) {
            describe(s, line, sizeof(line));
            append(msg, cap, "%sSTUCK: %s, over its limit of %.1f s", silent + stuck ? "; " : "", line, s->limit);
            stuck++;
        } else if (s->state != COMM_WD_WAITING || s->seconds <= s->limit / 2) {
            busy++; // alive and working, or it has just joined the collective: give it time
        }
    }
    if (silent + stuck) return 1;
    if (busy) return 0;
    append(msg, cap, "DEADLOCK: every rank waits in a collective (called in a different order on different ranks, or the "
           "network hangs):");
    for (int r = 0; r < W; r++) {
        if (r == mine->rank) continue;
        describe(&w->peers[r], line, sizeof(line));
        append(msg, cap, " %s;", line);
    }
    return 1;
}

// One message per job: a lower rank that answered and waits too reaches the same verdict and
// reports it; this one asks again later (and reports then, if that rank did not end the job).
static int wd_lower_reporter(const CommWatchdog* w) {
    for (int r = 0; r < w->c->rank; r++)
        if (w->answered[r] && w->peers[r].state == COMM_WD_WAITING && w->peers[r].seconds > w->peers[r].limit) return 1;
    return 0;
}

static void wd_check(CommWatchdog* w) {
    Comm* c = w->c;
    const char* dev_what = NULL;
    char msg[2048];
    msg[0] = '\0';
    wd_lock(w);
    double dev_age = c->dev->wd_poll ? c->dev->wd_poll(c, &dev_what, msg, sizeof(msg)) : 0.0;
    double now = comm_now();
    CommWdStatus mine = wd_status(w, now, dev_age, dev_what);
    wd_unlock(w);
    if (msg[0]) comm_wd_fail(c, "set NCCL_DEBUG=WARN for NCCL's own diagnostics; the other ranks' messages may name the cause", msg);
    if (w->channel) c->ops->wd_serve(c, &mine);
    if (mine.state == COMM_WD_COMPUTING) {
        if (mine.armed && mine.seconds > mine.limit) {
            char line[256];
            describe(&mine, line, sizeof(line));
            snprintf(msg, sizeof(msg), "watchdog: STUCK: %s, over the limit of %.1f s (--watchdog-timeout %.1f s + 3 x %.2f s, the "
                     "slowest step): a hung kernel, device or loop on this rank", line, mine.limit, w->timeout, w->slowest);
            wd_fail(w, msg);
        }
        return;
    }
    if (mine.seconds <= mine.limit || now < w->next_query) return;
    if (!w->channel) { // one rank: nobody else to blame
        char line[256];
        describe(&mine, line, sizeof(line));
        snprintf(msg, sizeof(msg), "watchdog: STUCK: %s, over the limit of %.1f s", line, mine.limit);
        wd_fail(w, msg);
    }
    c->ops->wd_query(c, &mine, w->peers, w->answered, WD_QUERY_S);
    if (wd_judge(w, &mine, msg, sizeof(msg)) && !wd_lower_reporter(w)) wd_fail(w, msg);
    w->next_query = comm_now() + (w->timeout > 4.0 ? w->timeout / 4.0 : 1.0); // alive: ask again later
}

// The whole process was suspended (SIGSTOP + SIGCONT, a job scheduler's suspend) for `gap`
// seconds: that time is nobody's lack of progress, so every clock moves forward by it. (Without
// this a job suspended and resumed as a whole would accuse itself on resume.)
static void wd_skip(CommWatchdog* w, double gap) {
    w->wait_since += gap;
    w->last_progress += gap;
    w->unbounded_since += gap;
    if (w->last_mark > 0) w->last_mark += gap;
}

static void* wd_main(void* arg) {
    CommWatchdog* w = (CommWatchdog*)arg;
    wd_lock(w);
    double prev = comm_now();
    while (!w->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(WD_TICK_S * 1e9);
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (w->stop) break;
        double now = comm_now();
        if (now - prev > WD_SUSPENDED_S) wd_skip(w, now - prev - WD_TICK_S);
        prev = now;
        wd_unlock(w);
        wd_check(w);
        wd_lock(w);
    }
    wd_unlock(w);
    return NULL;
}

void comm_watchdog_start(Comm* c, double timeout_s) {
    if (timeout_s <= 0) return;
    if (c->wd) fatal(NULL, "comm_watchdog_start called twice");
    int channel = 0;
    if (c->world > 1) {
        channel = c->ops->wd_open && c->ops->wd_open(c);
        if (!channel) {
            if (c->rank == 0)
                fprintf(stderr, "warning: watchdog off: this MPI library does not provide MPI_THREAD_MULTIPLE, which the "
                        "watchdog's status queries need (a hung rank would stall the job)\n");
            return;
        }
    }
    CommWatchdog* w = (CommWatchdog*)callocCheck(1, sizeof(CommWatchdog));
    w->c = c;
    w->timeout = timeout_s;
    w->channel = channel;
    w->last_progress = comm_now();
    w->peers = (CommWdStatus*)callocCheck((size_t)c->world, sizeof(CommWdStatus));
    w->answered = (int*)callocCheck((size_t)c->world, sizeof(int));
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    c->wd = w;
    if (pthread_create(&w->thread, NULL, wd_main, w) != 0) fatal(NULL, "cannot start the watchdog thread");
}

void comm_wd_stop(Comm* c) {
    CommWatchdog* w = c->wd;
    if (!w) return;
    wd_lock(w);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    wd_unlock(w);
    pthread_join(w->thread, NULL);
    c->wd = NULL;
    if (w->channel) c->ops->wd_close(c);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->peers); free(w->answered); free(w);
}
