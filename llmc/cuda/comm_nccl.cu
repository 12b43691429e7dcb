// The NCCL implementation of the device calls of llmc/comm/comm.h (CUDA builds): a CommOps table
// that comm_nccl_attach installs as the device table. Thin on purpose: each call is one NCCL
// collective on the caller's stream. The communicator is bootstrapped over the host
// implementation (MPI): rank 0 makes the unique id, comm_broadcast sends it to everyone, every
// rank joins on its current CUDA device. With one rank no NCCL communicator is created; the calls
// become device-to-device copies. comm_nccl_attach_local (a single process, no MPI: the unique id
// is made here) creates one of 1 rank, or of more ranks that never join: how the GPU check
// (test/test_nccl_watchdog.cu) runs the watchdog's NCCL path on one GPU.
//
// For the watchdog (llmc/comm/comm_watchdog.c) the communicator is non-blocking: every call
// returns at once and this file polls ncclCommGetAsyncError until the call has settled, inside the
// watchdog's bracket of the collective; every collective records a CUDA event in a ring of
// NCCL_TRACK that the watchdog thread polls; wd_abort takes the communicator out of this file's
// state before it calls ncclCommAbort. Sub-communicators (comm_split) hang off the state of the
// top communicator, the one the watchdog polls. Non-blocking requests (comm_dev_iallgather,
// comm_dev_ireduce_scatter_sum) run on a side stream, ordered by events on the caller's stream.
//
// The call sequence, the abort path, sub-communicators and determinism in full: llmc/cuda/README.md
// ("NCCL collectives: comm_nccl.cu"). Compile check without a GPU: make cuda-check.
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include "comm/comm_internal.h"
#include "base/check.h"

#define NCCL_TRACK 64 // device collectives the watchdog can track at once (more: the host waits)
#define NCCL_MAX_SUBS 8 // sub-communicators (comm_split) alive at once per communicator

typedef struct NcclState {
    ncclComm_t comm;        // NULL with one rank (and until the init call returned)
    struct NcclState* top;  // the state of the communicator the watchdog polls: this one, or the
                            // one it was split from (whose ring tracks this one's collectives)
    struct NcclState* subs[NCCL_MAX_SUBS]; // (top only) its sub-communicators' states, for the
                                           // watchdog's error polls and abort
    int device;
    cudaStream_t side;      // non-blocking requests
    cudaEvent_t ready[COMM_MAX_REQUESTS], done[COMM_MAX_REQUESTS];
    int in_group;
    void* group_stream;     // the stream of the last call inside a group
    pthread_mutex_t mu;     // (top's) guards comm and aborted of the top and its subs (against
                            // wd_abort), subs, and the ring
    cudaEvent_t track[NCCL_TRACK];
    double track_t[NCCL_TRACK];
    const char* track_what[NCCL_TRACK];
    int64_t head, tail;     // events [tail, head) are recorded and not yet seen completed
    int aborted;            // the watchdog aborted comm (and set it to NULL)
} NcclState;

// Every communicator of a tree (the top and its subs) is guarded by the top's lock.
static void nccl_lock(NcclState* s) { pthread_mutex_lock(&s->top->mu); }
static void nccl_unlock(NcclState* s) { pthread_mutex_unlock(&s->top->mu); }

// A thread whose communicator the watchdog aborted waits here while the watchdog ends the process
// with its verdict (the message that matters, not the aborted call's error).
static void nccl_park(void) {
    for (;;) sleep(1);
}

static void nccl_failed(ncclResult_t r, ncclComm_t comm, const char* call, const char* file, int line) {
    const char* last = comm ? ncclGetLastError(comm) : "";
    llmc_fatal_at(file, line, "set NCCL_DEBUG=WARN for NCCL's own diagnostics; if another rank failed first, its message is above",
                  "NCCL call failed: %s: %s%s%s", call, ncclGetErrorString(r), last && last[0] ? ": " : "", last ? last : "");
}

// A call on a non-blocking communicator may return ncclInProgress: poll until it has settled.
// The polls hold the top's lock, and the communicator is the one of s: the watchdog thread may
// abort it at any moment (nccl_wd_abort), after which NCCL frees it; a call caught by that parks.
static ncclResult_t nccl_settle(NcclState* s, ncclComm_t comm, ncclResult_t r) {
    if (!comm) return r;
    CommBackoff b;
    comm_poll_begin(&b);
    for (;;) {
        nccl_lock(s);
        int aborted = s->comm != comm;
        if (!aborted && r == ncclInProgress) {
            ncclResult_t state = ncclSuccess;
            ncclResult_t q = ncclCommGetAsyncError(comm, &state);
            r = q != ncclSuccess ? q : state;
        }
        nccl_unlock(s);
        if (aborted) nccl_park();
        if (r != ncclInProgress) return r;
        comm_poll_sleep(&b);
    }
}
#define ncclCheckComm(s, comm, call) do { ncclComm_t c_ = (comm); ncclResult_t r_ = nccl_settle((s), c_, (call)); \
    if (r_ != ncclSuccess) nccl_failed(r_, c_, #call, __FILE__, __LINE__); } while (0)

static void cuda_failed(cudaError_t e, const char* call, const char* file, int line) {
    llmc_fatal_at(file, line, "check the GPU and driver (nvidia-smi)", "CUDA call failed: %s: %s", call, cudaGetErrorString(e));
}
#define cudaCheckComm(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) cuda_failed(e_, #call, __FILE__, __LINE__); } while (0)

static NcclState* ns(const Comm* c) { return (NcclState*)c->dev_state; }

// The communicator for a call: NULL with one rank and no NCCL communicator (the calls are copies);
// parks once the watchdog has aborted it.
static ncclComm_t nccl_comm(NcclState* s) {
    nccl_lock(s);
    ncclComm_t nc = s->comm;
    int aborted = s->aborted || s->top->aborted; // (a sub without a communicator of its own too)
    nccl_unlock(s);
    if (aborted) nccl_park();
    return nc;
}

static ncclDataType_t nccl_type(CommDtype dt) {
    switch (dt) {
        case COMM_F32: return ncclFloat32;
        case COMM_BF16: return ncclBfloat16;
        case COMM_F64: return ncclFloat64;
        case COMM_I64: return ncclInt64;
        case COMM_U8: return ncclUint8;
    }
    fatal(NULL, "unknown CommDtype %d", (int)dt);
}

static void copy_d2d(void* dst, const void* src, size_t bytes, void* stream) {
    if (dst != src && bytes) cudaCheckComm(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
}

// ---------------------------------------------------------------------------------------------
// tracking for the watchdog

static void track_pop_done(NcclState* s) { // (lock held)
    while (s->tail < s->head && cudaEventQuery(s->track[s->tail % NCCL_TRACK]) == cudaSuccess) s->tail++;
}

// After a collective on `stream` (outside groups): record its completion event (in the ring of
// the top communicator: the one the watchdog polls).
static void track(NcclState* s, void* stream, const char* what) {
    if (s->in_group) { s->group_stream = stream; return; } // recorded once, at the group's end
    s = s->top;
    CommBackoff b;
    comm_poll_begin(&b);
    pthread_mutex_lock(&s->mu);
    for (track_pop_done(s); s->head - s->tail == NCCL_TRACK; track_pop_done(s)) { // ring full: the GPU is far behind
        pthread_mutex_unlock(&s->mu);
        comm_poll_sleep(&b);
        pthread_mutex_lock(&s->mu);
    }
    int k = (int)(s->head % NCCL_TRACK);
    cudaCheckComm(cudaEventRecord(s->track[k], (cudaStream_t)stream));
    s->track_t[k] = comm_now();
    s->track_what[k] = what;
    s->head++;
    pthread_mutex_unlock(&s->mu);
}

// An asynchronous error on this communicator or one of its sub-communicators (lock held): the
// failed communicator, else NULL.
static ncclComm_t nccl_failed_comm(NcclState* s, ncclResult_t* state) {
    for (int k = -1; k < NCCL_MAX_SUBS; k++) {
        ncclComm_t nc = k < 0 ? s->comm : s->subs[k] ? s->subs[k]->comm : NULL;
        if (nc && ncclCommGetAsyncError(nc, state) == ncclSuccess && *state != ncclSuccess && *state != ncclInProgress) return nc;
    }
    return NULL;
}

static double nccl_wd_poll(Comm* c, const char** what, char* err, size_t err_cap) {
    NcclState* s = ns(c);
    pthread_mutex_lock(&s->mu);
    ncclResult_t state = ncclSuccess;
    ncclComm_t bad = nccl_failed_comm(s, &state);
    if (bad) {
        const char* last = ncclGetLastError(bad);
        snprintf(err, err_cap, "watchdog: NCCL reported an asynchronous error on rank %d%s: %s%s%s", c->rank,
                 bad != s->comm ? " (in a sub-communicator)" : "", ncclGetErrorString(state), last && last[0] ? ": " : "", last ? last : "");
    }
    track_pop_done(s);
    double age = 0.0;
    if (s->tail < s->head) {
        int k = (int)(s->tail % NCCL_TRACK);
        age = comm_now() - s->track_t[k];
        *what = s->track_what[k];
    }
    pthread_mutex_unlock(&s->mu);
    return age;
}

// Takes s's communicator out of s (lock held): the main thread stops polling it and parks at its
// next call on s.
static ncclComm_t nccl_take(NcclState* s) {
    ncclComm_t comm = s->comm;
    s->comm = NULL;
    s->aborted = comm != NULL;
    return comm;
}

// Called by the watchdog once its verdict is printed, on the top communicator. Its communicator
// and its sub-communicators' leave their states first, so that the main thread stops polling them
// (nccl_settle); ncclCommAbort itself runs outside the lock: it may wait for the device (its
// clean-up synchronizes NCCL's streams, which can sit behind a hung kernel), and the watchdog's
// backstop bounds that. The subs first: they were split from the top.
static void nccl_wd_abort(Comm* c) {
    NcclState* s = ns(c);
    if (!s) return;
    ncclComm_t comms[NCCL_MAX_SUBS + 1];
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int k = 0; k < NCCL_MAX_SUBS; k++)
        if (s->subs[k] && s->subs[k]->comm) comms[n++] = nccl_take(s->subs[k]);
    if (s->comm) comms[n++] = nccl_take(s);
    pthread_mutex_unlock(&s->mu);
    for (int k = 0; k < n; k++) ncclCommAbort(comms[k]);
}

// ---------------------------------------------------------------------------------------------
// collectives

static void nccl_allreduce(Comm* c, void* buf, size_t n, CommDtype dt, CommRedOp op, void* stream) {
    ncclComm_t nc = nccl_comm(ns(c));
    if (!nc) return;
    ncclCheckComm(ns(c), nc, ncclAllReduce(buf, buf, n, nccl_type(dt), op == COMM_OP_MAX ? ncclMax : ncclSum, nc, (cudaStream_t)stream));
    track(ns(c), stream, "dev_allreduce");
}

static void nccl_reduce_scatter(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream) {
    ncclComm_t nc = nccl_comm(ns(c));
    if (!nc) { copy_d2d(recv, send, shard * comm_dtype_size(dt), stream); return; }
    ncclCheckComm(ns(c), nc, ncclReduceScatter(send, recv, shard, nccl_type(dt), ncclSum, nc, (cudaStream_t)stream));
    track(ns(c), stream, "dev_reduce_scatter");
}

static void nccl_allgather(Comm* c, const void* send_shard, void* recv_full, size_t shard, CommDtype dt, void* stream) {
    ncclComm_t nc = nccl_comm(ns(c));
    if (!nc) { copy_d2d(recv_full, send_shard, shard * comm_dtype_size(dt), stream); return; }
    ncclCheckComm(ns(c), nc, ncclAllGather(send_shard, recv_full, shard, nccl_type(dt), nc, (cudaStream_t)stream));
    track(ns(c), stream, "dev_allgather");
}

static void nccl_reduce(Comm* c, const void* send, void* recv, size_t n, CommDtype dt, int root, void* stream) {
    ncclComm_t nc = nccl_comm(ns(c));
    if (!nc) { copy_d2d(recv, send, n * comm_dtype_size(dt), stream); return; }
    // recv is ignored by NCCL on non-root ranks; comm.h allows NULL there
    void* out = recv ? recv : const_cast<void*>(send);
    ncclCheckComm(ns(c), nc, ncclReduce(send, out, n, nccl_type(dt), ncclSum, root, nc, (cudaStream_t)stream));
    track(ns(c), stream, "dev_reduce");
}

static void nccl_broadcast(Comm* c, void* buf, size_t bytes, int root, void* stream) {
    ncclComm_t nc = nccl_comm(ns(c));
    if (!nc) return;
    ncclCheckComm(ns(c), nc, ncclBroadcast(buf, buf, bytes, ncclUint8, root, nc, (cudaStream_t)stream));
    track(ns(c), stream, "dev_broadcast");
}

static void nccl_group_begin(Comm* c) {
    NcclState* s = ns(c);
    ncclComm_t nc = nccl_comm(s);
    if (!nc) return;
    ncclCheckComm(s, nc, ncclGroupStart());
    s->in_group++;
}
static void nccl_group_end(Comm* c) {
    NcclState* s = ns(c);
    ncclComm_t nc = nccl_comm(s);
    if (!nc) return;
    ncclCheckComm(s, nc, ncclGroupEnd());
    if (--s->in_group == 0) track(s, s->group_stream, "dev_group");
}

static void nccl_istart(Comm* c, CommReq* q) {
    NcclState* s = ns(c);
    int k = (int)(q - c->reqs);
    cudaCheckComm(cudaEventRecord(s->ready[k], (cudaStream_t)q->stream));
    cudaCheckComm(cudaStreamWaitEvent(s->side, s->ready[k], 0));
    if (q->kind == COMM_REQ_ALLGATHER) nccl_allgather(c, q->send, q->recv, q->shard, q->dt, s->side);
    else nccl_reduce_scatter(c, q->send, q->recv, q->shard, q->dt, s->side);
    cudaCheckComm(cudaEventRecord(s->done[k], s->side));
}
static void nccl_wait(Comm* c, CommReq* q) {
    NcclState* s = ns(c);
    cudaCheckComm(cudaStreamWaitEvent((cudaStream_t)q->stream, s->done[q - c->reqs], 0));
}

static void nccl_split(Comm* c, int color, int key, Comm* out);
static void nccl_split_free(Comm* out);

// The device table: the collectives above; lifetime and the side channel stay with the host table.
static CommOps nccl_ops(const char* name) {
    CommOps o;
    memset(&o, 0, sizeof(o));
    o.name = name;
    o.allreduce = nccl_allreduce;
    o.reduce_scatter = nccl_reduce_scatter;
    o.allgather = nccl_allgather;
    o.reduce = nccl_reduce;
    o.broadcast = nccl_broadcast;
    o.group_begin = nccl_group_begin;
    o.group_end = nccl_group_end;
    o.istart = nccl_istart;
    o.wait = nccl_wait;
    o.wd_poll = nccl_wd_poll;
    o.wd_abort = nccl_wd_abort;
    o.split = nccl_split;
    o.split_free = nccl_split_free;
    return o;
}
static CommOps NCCL_OPS, CUDA_SINGLE_OPS, LOCAL_OPS;

// ---------------------------------------------------------------------------------------------
// lifetime

static NcclState* state_create(void) {
    NcclState* s = (NcclState*)callocCheck(1, sizeof(NcclState));
    cudaCheckComm(cudaGetDevice(&s->device));
    cudaCheckComm(cudaStreamCreateWithFlags(&s->side, cudaStreamNonBlocking));
    for (int k = 0; k < COMM_MAX_REQUESTS; k++) {
        cudaCheckComm(cudaEventCreateWithFlags(&s->ready[k], cudaEventDisableTiming));
        cudaCheckComm(cudaEventCreateWithFlags(&s->done[k], cudaEventDisableTiming));
    }
    for (int k = 0; k < NCCL_TRACK; k++) cudaCheckComm(cudaEventCreateWithFlags(&s->track[k], cudaEventDisableTiming));
    pthread_mutex_init(&s->mu, NULL);
    s->top = s;
    return s;
}

static void state_free(NcclState* s) {
    for (int k = 0; k < COMM_MAX_REQUESTS; k++) { cudaEventDestroy(s->ready[k]); cudaEventDestroy(s->done[k]); }
    for (int k = 0; k < NCCL_TRACK; k++) cudaEventDestroy(s->track[k]);
    cudaStreamDestroy(s->side);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

// Flushes and destroys s's communicator nc (every rank of it at once): the main thread's, taken
// out of the watchdog's reach (nothing else aborts it).
static void nccl_destroy(NcclState* s, ncclComm_t nc) {
    if (!nc) return;
    ncclCheckComm(s, nc, ncclCommFinalize(nc)); // flushes outstanding operations on every rank
    ncclCheckComm(s, nc, ncclCommDestroy(nc));
}

// Joins the communicator of nranks ranks named by id as `rank` (non-blocking init, polled inside
// the watchdog's bracket of a collective called "nccl_init", so a rank that never joins is named).
static void nccl_join(Comm* c, NcclState* s, ncclUniqueId id, int nranks, int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    c->coll_seq++;
    comm_wd_wait_begin(c, "nccl_init");
    ncclComm_t nc = NULL;
    pthread_mutex_lock(&s->mu);
    ncclResult_t r = ncclCommInitRankConfig(&nc, nranks, id, rank, &config);
    s->comm = nc;
    pthread_mutex_unlock(&s->mu);
    ncclCheckComm(s, nc, r);
    comm_wd_wait_end(c);
}

static NcclState* nccl_attach_state(Comm* c, const CommOps* ops) {
    if (c->dev != c->ops) fatal(NULL, "comm_nccl_attach called twice");
    NCCL_OPS = nccl_ops("mpi+nccl");
    CUDA_SINGLE_OPS = nccl_ops("single+cuda");
    LOCAL_OPS = nccl_ops("single+nccl");
    NcclState* s = state_create();
    // installed before the init, so that the watchdog can abort a communicator stuck in it
    comm_set_dev(c, ops ? ops : c->world > 1 ? &NCCL_OPS : &CUDA_SINGLE_OPS, s);
    return s;
}

extern "C" void comm_nccl_attach(Comm* c) {
    NcclState* s = nccl_attach_state(c, NULL);
    if (c->world == 1) return;
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (c->rank == 0) ncclCheckComm(s, nullptr, ncclGetUniqueId(&id));
    comm_broadcast(c, &id, sizeof(id), 0);
    nccl_join(c, s, id, c->world, c->rank);
}

extern "C" void comm_nccl_attach_local(Comm* c, int nccl_ranks) {
    if (c->world != 1) fatal(NULL, "comm_nccl_attach_local is for a single process; this one is rank %d of %d", c->rank, c->world);
    if (nccl_ranks < 1) fatal(NULL, "comm_nccl_attach_local: %d NCCL ranks", nccl_ranks);
    NcclState* s = nccl_attach_state(c, &LOCAL_OPS);
    ncclUniqueId id;
    ncclCheckComm(s, nullptr, ncclGetUniqueId(&id)); // made here: no other process can join
    nccl_join(c, s, id, nccl_ranks, 0);
}

extern "C" void comm_nccl_detach(Comm* c) {
    NcclState* s = ns(c);
    if (!s) return;
    for (int k = 0; k < NCCL_MAX_SUBS; k++)
        if (s->subs[k]) fatal("call comm_split_free on every sub-communicator first", "comm_nccl_detach: a sub-communicator is still alive");
    ncclComm_t nc = nccl_comm(s); // (parks if the watchdog aborted it)
    comm_set_dev(c, c->ops, NULL); // the watchdog stops polling it: nc is the main thread's alone
    nccl_destroy(s, nc);
    state_free(s);
}

// ---------------------------------------------------------------------------------------------
// sub-communicators (comm_split, hybrid sharding)

// Registers s as a sub-communicator of its top communicator (the watchdog's error polls and abort
// reach it from there; its collectives are tracked in the top's ring).
static void sub_register(NcclState* s, NcclState* top) {
    s->top = top;
    pthread_mutex_lock(&top->mu);
    int k = 0;
    while (k < NCCL_MAX_SUBS && top->subs[k]) k++;
    if (k < NCCL_MAX_SUBS) top->subs[k] = s;
    pthread_mutex_unlock(&top->mu);
    if (k == NCCL_MAX_SUBS) fatal("free sub-communicators that are no longer needed", "comm_split: more than %d NCCL sub-communicators", NCCL_MAX_SUBS);
}

// Starts the new communicator of s from parent communicator pc: ncclCommSplit (NCCL 2.18 and
// later), else a unique id made by out's rank 0 and sent to its ranks over out's host calls. Both
// non-blocking like comm_nccl_attach's, inside the watchdog's bracket "nccl_split" (begun here,
// ended by the caller once the call has settled), so a split stuck behind a dead peer is named.
static ncclResult_t sub_create(Comm* c, NcclState* s, ncclComm_t pc, int color, int key, Comm* out, ncclComm_t* nc) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    (void)s; (void)out;
    c->coll_seq++;
    comm_wd_wait_begin(c, "nccl_split");
    return ncclCommSplit(pc, color, key, nc, &config);
#else
    (void)pc; (void)color; (void)key;
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (out->rank == 0) ncclCheckComm(s, nullptr, ncclGetUniqueId(&id));
    comm_broadcast(out, &id, sizeof(id), 0);
    c->coll_seq++;
    comm_wd_wait_begin(c, "nccl_split");
    return ncclCommInitRankConfig(nc, out->world, id, out->rank, &config);
#endif
}

// comm_split's device side, on every rank of c: out gets an NCCL communicator of its ranks (with
// one rank and no NCCL communicator in c, its device calls are copies like c's). The split call
// runs outside the lock (were it to block, the watchdog must still be able to poll and judge);
// its communicator enters s under the lock right after, unless the watchdog has aborted the tree
// meanwhile (then the process is ending: this thread parks).
static void nccl_split(Comm* c, int color, int key, Comm* out) {
    NcclState* p = ns(c);
    ncclComm_t pc = nccl_comm(p);
    NcclState* s = state_create();
    sub_register(s, p->top);
    comm_set_dev(out, c->dev, s);
    if (!pc) return;
    ncclComm_t nc = NULL;
    ncclResult_t r = sub_create(c, s, pc, color, key, out, &nc);
    nccl_lock(s);
    int aborted = s->top->aborted;
    if (!aborted) s->comm = nc; // (the watchdog may abort it from here on)
    nccl_unlock(s);
    if (aborted) nccl_park();
    ncclCheckComm(s, nc, r);
    comm_wd_wait_end(c);
    int rank = -1, count = 0;
    ncclCheckComm(s, nc, ncclCommUserRank(nc, &rank));
    ncclCheckComm(s, nc, ncclCommCount(nc, &count));
    if (rank != out->rank || count != out->world) // (both order by key, then by the rank in c)
        fatal("this is a bug in llmc or NCCL", "comm_split: the NCCL sub-communicator has rank %d of %d, the host one %d of %d",
              rank, count, out->rank, out->world);
}

// Takes s out of its top's list under the lock (from then on the watchdog cannot reach it, and nc
// is the main thread's alone), then flushes and destroys its communicator.
static void nccl_split_free(Comm* out) {
    NcclState* s = ns(out);
    nccl_lock(s);
    for (int k = 0; k < NCCL_MAX_SUBS; k++)
        if (s->top->subs[k] == s) s->top->subs[k] = NULL;
    ncclComm_t nc = s->comm;
    int aborted = s->aborted || s->top->aborted;
    nccl_unlock(s);
    if (aborted) nccl_park();
    comm_set_dev(out, out->ops, NULL);
    nccl_destroy(s, nc);
    state_free(s);
}
