// Collective communication between the ranks of one training run.
//
// One interface, one mechanism: every call goes through a function table (CommOps,
// llmc/comm/comm_internal.h) of one of three implementations: a single process
// (llmc/comm/comm.c: world = 1, every collective a copy or a no-op, no MPI at build or run time),
// MPI for host memory (llmc/comm/comm_mpi.c, built when mk/config.mk finds mpicc, used when an MPI
// launcher started the process; LLMC_COMM=mpi forces an OpenMPI singleton), and NCCL for device
// memory (llmc/cuda/comm_nccl.cu, CUDA builds, bootstrapped over MPI). A Comm holds two table
// pointers: `ops` for host calls (comm_allreduce_sum_f32, ...: host memory), `dev` for device calls
// (comm_dev_*: the backend's device memory and a stream, on which NCCL enqueues them). Without NCCL
// (CPU backend, CUDA-on-CPU harness) `dev` is `ops`, and the calls run synchronously.
//
// Every floating-point sum of the single-process and MPI implementations adds the contributions
// of ranks 0, 1, ..., N-1 in that order in double precision and rounds once to the buffer's type,
// so results are bit-identical from run to run for the same N and on every rank. With world > 1 a
// fatal() on any rank ends every rank (MPI_Abort), and the watchdog (below) ends the job when a
// rank stops making progress. Determinism and failures in full: docs/MULTINODE.md ("Inside the
// comm layer").
//
// All collectives must be called by every rank in the same order with the same sizes (the MPI
// rule); sizes are element counts unless the name says bytes.
#ifndef LLMC_COMM_H
#define LLMC_COMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    COMM_F32 = 0,
    COMM_BF16 = 1, // stored as uint16 (upper half of an fp32); host sums in double, rounded to nearest even
    COMM_F64 = 2,
    COMM_I64 = 3,
    COMM_U8 = 4,   // raw bytes (a packed NF4 base): gathered and broadcast, never summed (fatal)
} CommDtype;

// Most non-blocking requests that may be in flight at once (ZeRO-3 prefetch needs two or three).
#define COMM_MAX_REQUESTS 8
// The MPI implementation's scratch for reductions, one per communicator (comm_split's too): a
// chunk of every peer's contribution lands there before it is summed; large messages go in chunks
// that fit, so this bounds memory, not message size (the memory plan counts it, llmc/plan/memplan.h).
#define COMM_MPI_SCRATCH_BYTES ((size_t)16 << 20)

// A non-blocking collective in flight; id < 0: none (comm_wait on it does nothing).
typedef struct {
    int id;
} CommRequest;

struct CommOps;
struct CommWatchdog;
struct CommReq;

typedef struct {
    int rank, world;             // this process and the number of processes
    int local_rank, local_world; // within this node (pick the GPU with local_rank)
    // implementation (opaque to users)
    const struct CommOps* ops;   // host calls: single process or MPI
    const struct CommOps* dev;   // device calls: ops, or NCCL after comm_nccl_attach
    void* host_state;            // state of the host implementation (MPI: communicator, scratch)
    void* dev_state;             // state of the NCCL implementation
    struct CommWatchdog* wd;     // NULL until comm_watchdog_start
    struct CommReq* reqs;        // COMM_MAX_REQUESTS request slots, allocated by comm_init
    int64_t coll_seq;            // collectives called so far (the watchdog reports it)
    const char* coll_name;       // the collective being called (a string literal)
} Comm;

// Starts the communication layer (call first thing in main; MPI may consume its arguments).
// Picks MPI when this build has MPI and the process was started by mpirun / a PMI launcher (or
// LLMC_COMM=mpi), else the single-process implementation. Fatal if the process was started as
// one of several ranks but this build has no MPI (every rank would think it is rank 0).
void comm_init(Comm* c, int* argc, char*** argv);
// Ends it (stops the watchdog, MPI_Finalize after a barrier). Call on the normal exit path of
// every rank.
void comm_finalize(Comm* c);
// Name of the implementation in use, for logs: "single", "mpi", "mpi+nccl", "single+cuda".
const char* comm_impl_name(const Comm* c);
// 1 if this build contains the MPI implementation.
int comm_have_mpi(void);

void comm_barrier(Comm* c);

// Sub-communicators (hybrid sharding: shard inside a group of ranks, replicate across groups).
// Every rank of c calls comm_split at the same point; the ranks that pass the same color (>= 0)
// form *out, ranked by key (ties by their rank in c). out takes host and device calls like c:
// host calls through c's host implementation (a separate MPI communicator, so its messages never
// match c's); device calls, when c has NCCL attached, through an NCCL communicator of out's ranks
// (llmc/cuda/comm_nccl.cu: ncclCommSplit, non-blocking like c's), else through out's host calls.
// c's watchdog watches out's waits and device collectives (no side channel of its own: start the
// watchdog on c, and attach NCCL, before splitting). comm_split_free (every rank of out) releases
// it; call it before comm_nccl_detach(c) and comm_finalize(c).
void comm_split(Comm* c, int color, int key, Comm* out);
void comm_split_free(Comm* out);

// In-place sums over all ranks; on return every rank holds the same sum.
void comm_allreduce_sum_f32(Comm* c, float* buf, size_t n);
void comm_allreduce_sum_f64(Comm* c, double* buf, size_t n);
void comm_allreduce_sum_i64(Comm* c, int64_t* buf, size_t n);
// Elementwise max over ranks (e.g. "did any rank see a non-finite value", timings).
void comm_allreduce_max_f64(Comm* c, double* buf, size_t n);

// send: world*shard elements (block r is destined for rank r); recv: shard elements, receiving the
// sum over ranks of block `rank`. In place is allowed: recv == send + rank*shard. (ZeRO-1.)
void comm_reduce_scatter_sum_f32(Comm* c, const float* send, float* recv, size_t shard);
// send_shard: shard elements; recv_full: world*shard elements, block r = rank r's send_shard.
// In place is allowed: send_shard == recv_full + rank*shard. (ZeRO-1/2 parameter all-gather.)
void comm_allgather_f32(Comm* c, const float* send_shard, float* recv_full, size_t shard);
// Sum over ranks of send[0..n) lands in recv on rank `root` only (recv is ignored elsewhere and may
// be NULL there). In place (recv == send) is allowed. (ZeRO-2: reduce a segment to its owner.)
void comm_reduce_sum_f32(Comm* c, const float* send, float* recv, size_t n, int root);
// Copies bytes from rank root to every rank.
void comm_broadcast(Comm* c, void* buf, size_t bytes, int root);
// Number of ranks whose buf (bytes long on every rank) differs from rank 0's; the same answer on
// every rank. For checks that all ranks agree (config, flags, data files, resume step): compares a
// 64-bit hash of the bytes, so a difference goes unnoticed only with probability ~2^-64.
int comm_count_differing(Comm* c, const void* buf, size_t bytes);

// ---------------------------------------------------------------------------------------------
// Device collectives. Same semantics as the host calls above, on device buffers of type dt
// (F32 or BF16; the host implementations also take F64; the all-gathers also U8), enqueued on
// `stream`. Between
// comm_dev_group_begin/end, NCCL calls are fused into one launch (use it for the per-owner reduces
// of a ZeRO-2 bucket); the host implementations run each call at once.
void comm_dev_allreduce_sum(Comm* c, void* buf, size_t n, CommDtype dt, void* stream);
void comm_dev_reduce_scatter_sum(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream);
void comm_dev_allgather(Comm* c, const void* send_shard, void* recv_full, size_t shard, CommDtype dt, void* stream);
void comm_dev_reduce_sum(Comm* c, const void* send, void* recv, size_t n, CommDtype dt, int root, void* stream);
void comm_dev_broadcast(Comm* c, void* buf, size_t bytes, int root, void* stream);
void comm_dev_group_begin(Comm* c);
void comm_dev_group_end(Comm* c);

// Non-blocking device collectives (ZeRO-3 prefetch: gather the next unit's parameters while this
// one computes). Same arguments, semantics and sums (bit for bit) as comm_dev_allgather /
// comm_dev_reduce_scatter_sum; they return at once. Until comm_wait returns, the caller must not
// touch recv, nor modify send. comm_wait(c, &req) completes the request: on the host
// implementations it returns when the data is in place; with NCCL the collective runs on a side
// stream and comm_wait makes `stream` (the one given when it started) wait for it, so work
// enqueued there afterwards sees the result. Every rank must start the requests in the same order;
// they may be waited for in any order. At most COMM_MAX_REQUESTS in flight (fatal beyond).
// MPI receive buffers for reduce-scatter requests grow to the largest request seen, then stay.
// Overlap on CPU ranks: OpenMPI moves a request's data only while some thread is inside MPI (no
// progress thread of its own over TCP / shared memory); the watchdog thread's polls (every 0.1 s)
// do that when it runs, and comm_wait finishes whatever is left.
CommRequest comm_dev_iallgather(Comm* c, const void* send_shard, void* recv_full, size_t shard, CommDtype dt, void* stream);
CommRequest comm_dev_ireduce_scatter_sum(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream);
void comm_wait(Comm* c, CommRequest* req);

// ---------------------------------------------------------------------------------------------
// Watchdog (llmc/comm/comm_watchdog.c). A helper thread per rank watches this rank's progress:
//   - a rank that has waited in a collective (host poll loop, or a device collective that has not
//     completed) for longer than the limit asks every peer for its status over a separate
//     channel that only the peers' watchdog threads serve (a duplicated MPI communicator); a
//     stopped or dead process answers nothing. It then ends the whole job with a message naming
//     the ranks that did not answer, or that answered but have been busy in a training step for
//     longer than their limit (and their current operation), or, when every rank waits, the
//     collectives they wait in;
//   - a rank whose own training step has run for longer than the limit without reaching a
//     collective or the next step mark ends the job naming itself and its operation (a stuck
//     kernel or loop);
//   - with NCCL: NCCL's asynchronous errors end the job, and a timed-out device collective aborts
//     the NCCL communicator (ncclCommAbort) before the job ends.
// limit = timeout_s + 3 x the slowest step seen so far (intervals between comm_watchdog_step
// calls, without the time spent in unbounded operations), so it adapts to the work and to a
// machine whose load changes: a step may take three times as long as the slowest one did, plus
// timeout_s. Work whose length the steps do not bound
// (evaluation, checkpoint writes, sampling, loading) is named with comm_watchdog_op_unbounded:
// a rank in it is ended only if it stops answering, and its peers wait for it.
// Start it on every rank at the same point (it duplicates the communicator); timeout_s <= 0
// leaves it off. It stops in comm_finalize. Needs MPI_THREAD_MULTIPLE when world > 1 (Debian's
// OpenMPI has it); without it the watchdog stays off and rank 0 says so.
#define COMM_WATCHDOG_DEFAULT_S 30.0
void comm_watchdog_start(Comm* c, double timeout_s);
// Marks the end of a training step (progress). Call it once when training starts and after every
// step: the intervals between calls are the steps the limit adapts to.
void comm_watchdog_step(Comm* c);
// Names what this rank is doing now, for the messages ("step 12"); printf format. Cheap: call
// it at every phase change. _op: a bounded operation (part of a training step);
// _op_unbounded: an operation of unbounded length ("checkpoint at step 12", "eval").
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void comm_watchdog_op(Comm* c, const char* fmt, ...);
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void comm_watchdog_op_unbounded(Comm* c, const char* fmt, ...);

// Implemented in llmc/cuda/comm_nccl.cu (CUDA builds only): creates the NCCL communicator for
// the ranks of c on the current CUDA device (ncclGetUniqueId on rank 0, broadcast over c,
// non-blocking ncclCommInitRankConfig) and makes it the table of the device calls. Call it after
// cudaSetDevice(c->local_rank), also with a single rank (the device calls then become
// device-to-device copies; the host path would touch device pointers). comm_nccl_detach destroys
// it (call before comm_finalize). The CUDA-on-CPU harness build does not attach: its device
// memory is host memory.
void comm_nccl_attach(Comm* c);
void comm_nccl_detach(Comm* c);
// A single process only (c->world == 1, no MPI needed): like comm_nccl_attach, but makes the NCCL
// unique id here and creates a real non-blocking communicator of nccl_ranks ranks with this
// process as rank 0. nccl_ranks = 1: the device calls go through NCCL (tracked by the watchdog)
// instead of becoming copies. nccl_ranks > 1: nobody else has the id, so the init waits for ranks
// that never join, until the watchdog ends the process naming nccl_init. For the GPU check
// (test/test_nccl_watchdog.cu), which covers the watchdog's NCCL path on one GPU this way.
void comm_nccl_attach_local(Comm* c, int nccl_ranks);

#ifdef __cplusplus
}
#endif
#endif // LLMC_COMM_H
