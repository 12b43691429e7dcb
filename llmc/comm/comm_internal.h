// Internal interface between the parts of the communication layer: llmc/comm/comm.c (dispatch and the
// single-process implementation), llmc/comm/comm_mpi.c (MPI), llmc/cuda/comm_nccl.cu (NCCL) and
// llmc/comm/comm_watchdog.c. Users include llmc/comm/comm.h only.
#ifndef LLMC_COMM_INTERNAL_H
#define LLMC_COMM_INTERNAL_H

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { COMM_OP_SUM = 0, COMM_OP_MAX = 1 } CommRedOp;
// The MPI implementation sends every message as pieces of at most this many bytes, each its own
// request (llmc/comm/comm_mpi.c: why; test/test_comm.c checks it).
#define COMM_PIECE_BYTES ((size_t)256 << 10)
typedef struct CommWatchdog CommWatchdog; // llmc/comm/comm_watchdog.c
typedef enum { COMM_REQ_ALLGATHER = 1, COMM_REQ_REDUCE_SCATTER = 2 } CommReqKind;

// One slot of Comm.reqs: a non-blocking collective between its start and comm_wait.
typedef struct CommReq {
    int busy;
    CommReqKind kind;
    const char* name;          // for the watchdog
    const struct CommOps* ops; // the table that started it (and completes it)
    const void* send;
    void* recv;
    size_t shard;
    CommDtype dt;
    void* stream;
    void* impl;                // the implementation's per-slot state
} CommReq;

// Status of one rank as the watchdog sends it to a peer that asks (plain bytes on the wire).
typedef enum { COMM_WD_COMPUTING = 0, COMM_WD_WAITING = 1, COMM_WD_DEVICE = 2 } CommWdState;
typedef struct {
    int32_t rank;
    int32_t state;     // CommWdState
    int32_t armed;     // the slowest step is known and the current operation is a bounded one:
                       // computing for longer than the limit means stuck
    int32_t pad;
    int64_t coll_seq;  // WAITING/DEVICE: the collective waited in; COMPUTING: the last one finished
    int64_t steps;     // comm_watchdog_step calls so far
    double seconds;    // in this state: waiting for so long, or computing since the last progress
    double limit;      // this rank's limit: timeout + 3 x the slowest step
    char coll[32];     // name of that collective
    char op[64];       // comm_watchdog_op
} CommWdStatus;

// One implementation. Buffers are in the memory the implementation moves (host or device).
// Host implementations ignore `stream`. NULL entries: not provided (see each).
typedef struct CommOps {
    const char* name; // for comm_impl_name
    // collectives, semantics as in comm.h; allreduce also does COMM_OP_MAX on F64/I64
    void (*allreduce)(Comm*, void* buf, size_t n, CommDtype, CommRedOp, void* stream);
    void (*reduce_scatter)(Comm*, const void* send, void* recv, size_t shard, CommDtype, void* stream);
    void (*allgather)(Comm*, const void* send, void* recv, size_t shard, CommDtype, void* stream);
    void (*reduce)(Comm*, const void* send, void* recv, size_t n, CommDtype, int root, void* stream);
    void (*broadcast)(Comm*, void* buf, size_t bytes, int root, void* stream);
    void (*barrier)(Comm*);
    void (*group_begin)(Comm*);
    void (*group_end)(Comm*);
    // non-blocking: start fills the slot's impl state; wait completes it (the slot stays busy
    // until comm.c frees it)
    void (*istart)(Comm*, CommReq*);
    void (*wait)(Comm*, CommReq*);
    // lifetime and failure: finalize (NULL: nothing to do); abort ends every rank, not returning
    void (*finalize)(Comm*);
    void (*abort)(Comm*, int code);
    // watchdog side channel (host implementations with world > 1; NULL otherwise):
    //   wd_open   (main thread, every rank at once) sets up the channel; returns 0 if it cannot
    //   wd_serve  answers pending status queries with `mine` (watchdog thread)
    //   wd_query  asks every peer; fills out[r] and answered[r] (1/0) within timeout_s, serving
    //             queries meanwhile (watchdog thread)
    //   wd_close  (main thread, every rank at once) after the watchdog thread has stopped
    int (*wd_open)(Comm*);
    void (*wd_serve)(Comm*, const CommWdStatus* mine);
    void (*wd_query)(Comm*, const CommWdStatus* mine, CommWdStatus* out, int* answered, double timeout_s);
    void (*wd_close)(Comm*);
    // device progress (NCCL; NULL otherwise), polled by the watchdog thread:
    //   wd_poll   returns the age in seconds of the oldest device collective not yet completed
    //             (0 if none) and its name in *what; on an asynchronous NCCL error it writes the
    //             watchdog's message to err (err_cap bytes; left empty otherwise), and the watchdog
    //             ends the job with it. Called with the watchdog's lock held: it must not end the
    //             process itself.
    //   wd_abort  aborts the device communicator (after the verdict is printed, before the job
    //             ends; it may hang behind a stuck kernel: the watchdog bounds it)
    double (*wd_poll)(Comm*, const char** what, char* err, size_t err_cap);
    void (*wd_abort)(Comm*);
    // sub-communicators of a device table of its own (NCCL; NULL for the host implementations,
    // whose device calls are their host calls):
    //   split       every rank of c, after comm_split has set up out's host side: gives out a
    //               device communicator of the same ranks (out's dev and dev_state)
    //   split_free  every rank of out, before its host side is freed
    void (*split)(Comm* c, int color, int key, Comm* out);
    void (*split_free)(Comm* out);
} CommOps;

extern const CommOps comm_single_ops;
// The MPI implementation (llmc/comm/comm_mpi.c, compiled only with MPI): MPI_Init(_thread) and the
// communicator; sets c->ops, c->host_state, rank and world.
void comm_mpi_open(Comm* c, int* argc, char*** argv);
// out: the ranks of c (MPI, world > 1) with the same color (comm_split); sets out's ops,
// host_state, rank, world, local_rank, local_world. Its finalize frees it (no MPI_Finalize).
void comm_mpi_split(Comm* c, int color, int key, Comm* out);

// Shared helpers (llmc/comm/comm.c).
double comm_now(void);          // monotonic clock, seconds
size_t comm_dtype_size(CommDtype dt);
void comm_check_root(const Comm* c, int root, const char* what);
// Back-off for poll loops: comm_poll_sleep(&b) after each unsuccessful test. The first ~50 us
// spin (a collective between ranks in step completes there), then the sleep grows with the
// time waited (1/16 of it, at most 1 ms): the overshoot stays small against the wait, and a
// rank waiting for a slow peer uses a few percent of a core (docs/MULTINODE.md, "Inside the comm
// layer") where a spinning wait takes all of one.
typedef struct { double t0; } CommBackoff;
void comm_poll_begin(CommBackoff* b);
void comm_poll_sleep(CommBackoff* b);

// Watchdog hooks for the implementations (llmc/comm/comm_watchdog.c); no-ops when it is off.
// wait_begin/end bracket a host wait (the poll loop of a collective); what: the collective.
void comm_wd_wait_begin(Comm* c, const char* what);
void comm_wd_wait_end(Comm* c);
// A part of the collective being waited in has completed (data is moving): restarts its clock.
void comm_wd_progress(Comm* c);
void comm_wd_stop(Comm* c);      // joins the thread and closes the channel (comm_finalize)
// The watchdog's way of ending the job (from its thread): prints "error: msg" (+ hint), aborts the
// device communicator, runs the fatal clean-ups and hook, and _exits with status 1; a backstop
// thread ends the process 15 s later if any of that hangs. Does not return.
#if defined(__GNUC__)
__attribute__((noreturn))
#endif
void comm_wd_fail(Comm* c, const char* hint, const char* msg);
// Installs a device table (NCCL attach / detach) safely against the watchdog thread, which reads
// c->dev and c->dev_state.
void comm_set_dev(Comm* c, const CommOps* dev, void* dev_state);

#ifdef __cplusplus
}
#endif
#endif // LLMC_COMM_INTERNAL_H
