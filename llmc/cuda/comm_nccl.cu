// The NCCL implementation of the device calls of llmc/comm.h (CUDA builds): a CommOps table that
// comm_nccl_attach installs as the device table. Thin on purpose: each call is one NCCL
// collective on the caller's stream. The communicator is bootstrapped over the host
// implementation (MPI): rank 0 makes the unique id, comm_broadcast sends it to everyone, every
// rank joins on its current CUDA device.
//
// Usage (trainer, CUDA build; llmc/device.h wraps the attach):
//   comm_init(&comm, &argc, &argv);
//   cudaSetDevice(comm.local_rank);     // one GPU per rank
//   comm_nccl_attach(&comm);            // from here on comm_dev_* take device buffers
//   ... comm_dev_reduce_scatter_sum(&comm, grads, grads + rank*shard, shard, COMM_F32, stream) ...
//   comm_nccl_detach(&comm);
//   comm_finalize(&comm);
// With one rank no NCCL communicator is created; the calls become device-to-device copies.
//
// Hangs and errors (the watchdog, llmc/comm_watchdog.c), as PyTorch's ProcessGroupNCCL does:
//   - the communicator is non-blocking (ncclConfig_t.blocking = 0): its init and every call
//     return at once, possibly with ncclInProgress, and this file polls ncclCommGetAsyncError
//     (with comm_poll_sleep) until the call has settled; the poll runs inside the watchdog's
//     bracket of the collective, so a rank that never joins the init is found like any other;
//   - every collective records a CUDA event after it on its stream (a ring of NCCL_TRACK events);
//     the watchdog thread polls them (wd_poll: the age of the oldest one not yet completed) and
//     ncclCommGetAsyncError (an asynchronous error ends the job with NCCL's message);
//   - when a device collective has been pending for longer than the limit, the watchdog asks the
//     peers (over MPI) who is stuck, calls wd_abort (ncclCommAbort, which also releases a main
//     thread blocked in a CUDA synchronization behind the collective) and ends the job.
//
// Non-blocking requests (comm_dev_iallgather / comm_dev_ireduce_scatter_sum) run on a side
// stream: an event on the caller's stream orders them after the work already enqueued there, and
// comm_wait makes the caller's stream wait for their completion event (the host does not block).
//
// Determinism: NCCL reduces in a fixed order for a given rank count, topology, NCCL version,
// message size and algorithm/protocol choice, so runs repeat bit for bit on the same machine; pin
// NCCL_ALGO / NCCL_PROTO in the environment to make it independent of NCCL's tuning. bf16 buffers
// are summed by NCCL in bf16 steps (rounded at every hop); reduce gradients in fp32 where accuracy
// matters more than bandwidth. The non-blocking calls are the same NCCL collectives.
//
// Compile check without a GPU: make cuda-check (nvcc, warnings as errors, every GPU architecture).
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "../comm_internal.h"
#include "../check.h"

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
    pthread_mutex_t mu;     // guards comm (against wd_abort) and the ring
    cudaEvent_t track[NCCL_TRACK];
    double track_t[NCCL_TRACK];
    const char* track_what[NCCL_TRACK];
    int64_t head, tail;     // events [tail, head) are recorded and not yet seen completed
} NcclState;

static void nccl_failed(ncclResult_t r, ncclComm_t comm, const char* call, const char* file, int line) {
    const char* last = comm ? ncclGetLastError(comm) : "";
    llmc_fatal_at(file, line, "set NCCL_DEBUG=WARN for NCCL's own diagnostics; if another rank failed first, its message is above",
                  "NCCL call failed: %s: %s%s%s", call, ncclGetErrorString(r), last && last[0] ? ": " : "", last ? last : "");
}

// A call on a non-blocking communicator may return ncclInProgress: poll until it has settled.
static ncclResult_t nccl_settle(ncclComm_t comm, ncclResult_t r) {
    if (r != ncclInProgress || !comm) return r;
    CommBackoff b;
    comm_poll_begin(&b);
    for (;;) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(comm, &state);
        if (q != ncclSuccess) return q;
        if (state != ncclInProgress) return state;
        comm_poll_sleep(&b);
    }
}
#define ncclCheckComm(comm, call) do { ncclComm_t c_ = (comm); ncclResult_t r_ = nccl_settle(c_, (call)); \
    if (r_ != ncclSuccess) nccl_failed(r_, c_, #call, __FILE__, __LINE__); } while (0)

static void cuda_failed(cudaError_t e, const char* call, const char* file, int line) {
    llmc_fatal_at(file, line, "check the GPU and driver (nvidia-smi)", "CUDA call failed: %s: %s", call, cudaGetErrorString(e));
}
#define cudaCheckComm(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) cuda_failed(e_, #call, __FILE__, __LINE__); } while (0)

static NcclState* ns(const Comm* c) { return (NcclState*)c->dev_state; }

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

// Aborts this communicator and its sub-communicators (lock held).
static void nccl_abort_all(NcclState* s) {
    for (int k = 0; k < NCCL_MAX_SUBS; k++)
        if (s->subs[k] && s->subs[k]->comm) { ncclCommAbort(s->subs[k]->comm); s->subs[k]->comm = NULL; }
    if (s->comm) ncclCommAbort(s->comm);
    s->comm = NULL;
}

static double nccl_wd_poll(Comm* c, const char** what) {
    NcclState* s = ns(c);
    pthread_mutex_lock(&s->mu);
    ncclResult_t state = ncclSuccess;
    ncclComm_t bad = nccl_failed_comm(s, &state);
    if (bad) {
        const char* last = ncclGetLastError(bad);
        nccl_abort_all(s);
        pthread_mutex_unlock(&s->mu);
        fatal("set NCCL_DEBUG=WARN for NCCL's own diagnostics; the other ranks' messages may name the cause",
              "watchdog: NCCL reported an asynchronous error on rank %d: %s%s%s", c->rank, ncclGetErrorString(state),
              last && last[0] ? ": " : "", last ? last : "");
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

static void nccl_wd_abort(Comm* c) {
    NcclState* s = ns(c);
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    nccl_abort_all(s);
    pthread_mutex_unlock(&s->mu);
}

// ---------------------------------------------------------------------------------------------
// collectives

static void nccl_allreduce(Comm* c, void* buf, size_t n, CommDtype dt, CommRedOp op, void* stream) {
    ncclComm_t nc = ns(c)->comm;
    if (!nc) return;
    ncclCheckComm(nc, ncclAllReduce(buf, buf, n, nccl_type(dt), op == COMM_OP_MAX ? ncclMax : ncclSum, nc, (cudaStream_t)stream));
    track(ns(c), stream, "dev_allreduce");
}

static void nccl_reduce_scatter(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream) {
    ncclComm_t nc = ns(c)->comm;
    if (!nc) { copy_d2d(recv, send, shard * comm_dtype_size(dt), stream); return; }
    ncclCheckComm(nc, ncclReduceScatter(send, recv, shard, nccl_type(dt), ncclSum, nc, (cudaStream_t)stream));
    track(ns(c), stream, "dev_reduce_scatter");
}

static void nccl_allgather(Comm* c, const void* send_shard, void* recv_full, size_t shard, CommDtype dt, void* stream) {
    ncclComm_t nc = ns(c)->comm;
    if (!nc) { copy_d2d(recv_full, send_shard, shard * comm_dtype_size(dt), stream); return; }
    ncclCheckComm(nc, ncclAllGather(send_shard, recv_full, shard, nccl_type(dt), nc, (cudaStream_t)stream));
    track(ns(c), stream, "dev_allgather");
}

static void nccl_reduce(Comm* c, const void* send, void* recv, size_t n, CommDtype dt, int root, void* stream) {
    ncclComm_t nc = ns(c)->comm;
    if (!nc) { copy_d2d(recv, send, n * comm_dtype_size(dt), stream); return; }
    // recv is ignored by NCCL on non-root ranks; comm.h allows NULL there
    void* out = recv ? recv : const_cast<void*>(send);
    ncclCheckComm(nc, ncclReduce(send, out, n, nccl_type(dt), ncclSum, root, nc, (cudaStream_t)stream));
    track(ns(c), stream, "dev_reduce");
}

static void nccl_broadcast(Comm* c, void* buf, size_t bytes, int root, void* stream) {
    ncclComm_t nc = ns(c)->comm;
    if (!nc) return;
    ncclCheckComm(nc, ncclBroadcast(buf, buf, bytes, ncclUint8, root, nc, (cudaStream_t)stream));
    track(ns(c), stream, "dev_broadcast");
}

static void nccl_group_begin(Comm* c) {
    NcclState* s = ns(c);
    if (!s->comm) return;
    ncclCheckComm(s->comm, ncclGroupStart());
    s->in_group++;
}
static void nccl_group_end(Comm* c) {
    NcclState* s = ns(c);
    if (!s->comm) return;
    ncclCheckComm(s->comm, ncclGroupEnd());
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
static CommOps NCCL_OPS, CUDA_SINGLE_OPS;

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

// Flushes and destroys a communicator (every rank of it at once).
static void nccl_destroy(ncclComm_t nc) {
    if (!nc) return;
    ncclCheckComm(nc, ncclCommFinalize(nc)); // flushes outstanding operations on every rank
    ncclCheckComm(nc, ncclCommDestroy(nc));
}

extern "C" void comm_nccl_attach(Comm* c) {
    if (c->dev != c->ops) fatal(NULL, "comm_nccl_attach called twice");
    NCCL_OPS = nccl_ops("mpi+nccl");
    CUDA_SINGLE_OPS = nccl_ops("single+cuda");
    NcclState* s = state_create();
    // installed before the init, so that the watchdog can abort a communicator stuck in it
    comm_set_dev(c, c->world > 1 ? &NCCL_OPS : &CUDA_SINGLE_OPS, s);
    if (c->world == 1) return;
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (c->rank == 0) ncclCheckComm(nullptr, ncclGetUniqueId(&id));
    comm_broadcast(c, &id, sizeof(id), 0);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    c->coll_seq++;
    comm_wd_wait_begin(c, "nccl_init");
    ncclComm_t nc = NULL;
    pthread_mutex_lock(&s->mu);
    ncclResult_t r = ncclCommInitRankConfig(&nc, c->world, id, c->rank, &config);
    s->comm = nc;
    pthread_mutex_unlock(&s->mu);
    ncclCheckComm(nc, r);
    comm_wd_wait_end(c);
}

extern "C" void comm_nccl_detach(Comm* c) {
    NcclState* s = ns(c);
    if (!s) return;
    for (int k = 0; k < NCCL_MAX_SUBS; k++)
        if (s->subs[k]) fatal("call comm_split_free on every sub-communicator first", "comm_nccl_detach: a sub-communicator is still alive");
    comm_set_dev(c, c->ops, NULL); // the watchdog stops polling it
    nccl_destroy(s->comm);
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

// The new communicator: ncclCommSplit (NCCL 2.18 and later), else a unique id made by out's rank 0
// and sent to its ranks over out's host calls. Both non-blocking, like comm_nccl_attach's.
static ncclResult_t sub_create(Comm* c, NcclState* p, int color, int key, Comm* out, ncclComm_t* nc) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    (void)out;
    c->coll_seq++;
    comm_wd_wait_begin(c, "nccl_split");
    return ncclCommSplit(p->comm, color, key, nc, &config);
#else
    (void)p; (void)color; (void)key;
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (out->rank == 0) ncclCheckComm(nullptr, ncclGetUniqueId(&id));
    comm_broadcast(out, &id, sizeof(id), 0);
    c->coll_seq++;
    comm_wd_wait_begin(c, "nccl_split");
    return ncclCommInitRankConfig(nc, out->world, id, out->rank, &config);
#endif
}

// comm_split's device side, on every rank of c: out gets an NCCL communicator of its ranks (with
// one rank and no NCCL communicator in c, its device calls are copies like c's).
static void nccl_split(Comm* c, int color, int key, Comm* out) {
    NcclState* p = ns(c);
    NcclState* s = state_create();
    sub_register(s, p->top);
    comm_set_dev(out, c->dev, s);
    if (!p->comm) return;
    ncclComm_t nc = NULL;
    ncclResult_t r = sub_create(c, p, color, key, out, &nc);
    pthread_mutex_lock(&s->top->mu); // (the watchdog may abort it from here on)
    s->comm = nc;
    pthread_mutex_unlock(&s->top->mu);
    ncclCheckComm(nc, r);
    comm_wd_wait_end(c);
    int rank = -1, count = 0;
    ncclCheckComm(nc, ncclCommUserRank(nc, &rank));
    ncclCheckComm(nc, ncclCommCount(nc, &count));
    if (rank != out->rank || count != out->world) // (both order by key, then by the rank in c)
        fatal("this is a bug in llmc or NCCL", "comm_split: the NCCL sub-communicator has rank %d of %d, the host one %d of %d",
              rank, count, out->rank, out->world);
}

static void nccl_split_free(Comm* out) {
    NcclState* s = ns(out);
    pthread_mutex_lock(&s->top->mu);
    for (int k = 0; k < NCCL_MAX_SUBS; k++)
        if (s->top->subs[k] == s) s->top->subs[k] = NULL;
    ncclComm_t nc = s->comm; // (NULL if the watchdog aborted it)
    pthread_mutex_unlock(&s->top->mu);
    comm_set_dev(out, out->ops, NULL);
    nccl_destroy(nc);
    state_free(s);
}
