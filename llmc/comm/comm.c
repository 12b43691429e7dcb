// Dispatch of llmc/comm/comm.h to the function tables (llmc/comm/comm_internal.h), the single-process
// implementation, and helpers shared by the implementations. Needs no MPI headers: the MPI
// implementation (llmc/comm/comm_mpi.c) exists only in builds with MPI, and this file refers to it in
// one place (comm_init).
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include "comm/comm_internal.h"
#include "base/check.h"

int comm_have_mpi(void) {
#ifdef LLMC_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

double comm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t comm_dtype_size(CommDtype dt) {
    switch (dt) {
        case COMM_F32: return 4;
        case COMM_BF16: return 2;
        case COMM_F64: return 8;
        case COMM_I64: return 8;
        case COMM_U8: return 1;
    }
    fatal(NULL, "unknown CommDtype %d", (int)dt);
}

// Bytes are moved, never summed: a sum over them is a caller's mistake.
static CommDtype summable(CommDtype dt, const char* what) {
    if (dt == COMM_U8) fatal("this is a bug in llmc", "%s: COMM_U8 buffers can be gathered, not summed", what);
    return dt;
}

void comm_check_root(const Comm* c, int root, const char* what) {
    if (root < 0 || root >= c->world) fatal(NULL, "%s: root %d is not a rank of this %d-rank run", what, root, c->world);
}

#define COMM_SPIN_S 50e-6
#define COMM_MIN_SLEEP_S 10e-6
#define COMM_MAX_SLEEP_S 1e-3

void comm_poll_begin(CommBackoff* b) { b->t0 = comm_now(); }

void comm_poll_sleep(CommBackoff* b) {
    double waited = comm_now() - b->t0;
    if (waited < COMM_SPIN_S) return;
    double s = waited / 16.0;
    if (s < COMM_MIN_SLEEP_S) s = COMM_MIN_SLEEP_S;
    if (s > COMM_MAX_SLEEP_S) s = COMM_MAX_SLEEP_S;
    struct timespec ts = { 0, (long)(s * 1e9) };
    nanosleep(&ts, NULL);
}

// ---------------------------------------------------------------------------------------------
// The single-process implementation: world = 1, so a sum is the own contribution and a gather
// or scatter is a copy (of device memory too: in the builds that use it, device memory is host
// memory).

static void copy_if(void* dst, const void* src, size_t bytes) { if (dst != src && bytes) memmove(dst, src, bytes); }

static void single_allreduce(Comm* c, void* buf, size_t n, CommDtype dt, CommRedOp op, void* stream) { (void)comm_dtype_size(dt); }
static void single_reduce_scatter(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream) {
    copy_if(recv, send, shard * comm_dtype_size(dt));
}
static void single_allgather(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream) {
    copy_if(recv, send, shard * comm_dtype_size(dt));
}
static void single_reduce(Comm* c, const void* send, void* recv, size_t n, CommDtype dt, int root, void* stream) {
    copy_if(recv, send, n * comm_dtype_size(dt));
}
static void single_nothing(Comm* c) { (void)c; }
static void single_broadcast(Comm* c, void* buf, size_t bytes, int root, void* stream) {}
// non-blocking: the copy happens at the start; there is nothing to wait for
static void single_istart(Comm* c, CommReq* r) { copy_if(r->recv, r->send, r->shard * comm_dtype_size(r->dt)); }
static void single_wait(Comm* c, CommReq* r) {}
static void single_abort(Comm* c, int code) {
    fflush(stdout); fflush(stderr);
    exit(code);
}

const CommOps comm_single_ops = {
    .name = "single",
    .allreduce = single_allreduce,
    .reduce_scatter = single_reduce_scatter,
    .allgather = single_allgather,
    .reduce = single_reduce,
    .broadcast = single_broadcast,
    .barrier = single_nothing,
    .group_begin = single_nothing,
    .group_end = single_nothing,
    .istart = single_istart,
    .wait = single_wait,
    .abort = single_abort,
};

// ---------------------------------------------------------------------------------------------
// lifetime

// Did an MPI launcher start this process? OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE; MPICH's
// hydra and Slurm's PMI set PMI_SIZE; PMIx launchers set PMIX_RANK. Returns the world size the
// launcher announced (0 when it did not say), or -1 when no launcher is detected.
static int launcher_world(void) {
    const char* vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE" };
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char* v = getenv(vars[i]);
        if (v && v[0]) return atoi(v);
    }
    if (getenv("PMIX_RANK")) return 0;
    return -1;
}

static int launcher_rank(void) {
    const char* v = getenv("OMPI_COMM_WORLD_RANK");
    if (!v) v = getenv("PMI_RANK");
    if (!v) v = getenv("PMIX_RANK");
    return v ? atoi(v) : 0;
}

// fatal() on any rank of a multi-rank run ends all of them (MPI_Abort: mpirun kills every process).
static Comm* g_fatal_comm;
static void comm_fatal_abort(void) {
    Comm* c = g_fatal_comm;
    if (c) c->ops->abort(c, 1);
}

void comm_init(Comm* c, int* argc, char*** argv) {
    memset(c, 0, sizeof(*c));
    c->rank = 0; c->world = 1; c->local_rank = 0; c->local_world = 1;
    c->ops = c->dev = &comm_single_ops;
    c->reqs = (CommReq*)callocCheck(COMM_MAX_REQUESTS, sizeof(CommReq));
    int lw = launcher_world();
    const char* force = getenv("LLMC_COMM");
    if (force && force[0] && strcmp(force, "mpi") != 0 && strcmp(force, "auto") != 0)
        fatal("LLMC_COMM may be 'auto' (default) or 'mpi'", "LLMC_COMM='%s' is not a known setting", force);
    int want_mpi = lw >= 0 || (force && strcmp(force, "mpi") == 0);
    if (want_mpi && comm_have_mpi()) {
#ifdef LLMC_HAVE_MPI
        comm_mpi_open(c, argc, argv);
#endif
    } else if (lw > 1 || (lw == 0 && launcher_rank() != 0)) {
        fatal("install MPI (Debian: apt-get install libopenmpi-dev openmpi-bin) and rebuild with `make clean && make`",
              "this process was started by an MPI launcher as one of %d ranks, but this build has no MPI support"
              " (every rank would run as rank 0 of 1)", lw > 0 ? lw : 2);
    } else if (force && strcmp(force, "mpi") == 0) {
        fatal("install MPI (Debian: apt-get install libopenmpi-dev openmpi-bin) and rebuild",
              "LLMC_COMM=mpi was set, but this build has no MPI support");
    }
    c->dev = c->ops;
    if (c->world > 1) {
        g_fatal_comm = c;
        llmc_set_fatal_hook(comm_fatal_abort);
    }
}

void comm_finalize(Comm* c) {
    for (int i = 0; i < COMM_MAX_REQUESTS; i++)
        if (c->reqs[i].busy) fatal("call comm_wait on every request", "comm_finalize: non-blocking request %d is still in flight", i);
    comm_barrier(c); // watched: a rank that never gets here is named
    comm_wd_stop(c);
    if (c->world > 1) { llmc_set_fatal_hook(NULL); g_fatal_comm = NULL; }
    if (c->ops->finalize) c->ops->finalize(c);
    free(c->reqs);
    memset(c, 0, sizeof(*c));
    c->world = 1; c->local_world = 1;
    c->ops = c->dev = &comm_single_ops;
}

void comm_split(Comm* c, int color, int key, Comm* out) {
    if (color < 0) fatal(NULL, "comm_split: color %d must be >= 0", color);
    memset(out, 0, sizeof(*out));
    out->rank = 0; out->world = 1; out->local_rank = 0; out->local_world = 1;
    out->ops = &comm_single_ops;
    out->reqs = (CommReq*)callocCheck(COMM_MAX_REQUESTS, sizeof(CommReq));
#ifdef LLMC_HAVE_MPI
    if (c->world > 1) comm_mpi_split(c, color, key, out); // (world > 1 is MPI)
#endif
    out->dev = out->ops;
    out->wd = c->wd;
    if (c->dev != c->ops) c->dev->split(c, color, key, out); // (NCCL: a communicator of out's ranks)
}

void comm_split_free(Comm* out) {
    for (int i = 0; i < COMM_MAX_REQUESTS; i++)
        if (out->reqs[i].busy) fatal("call comm_wait on every request", "comm_split_free: non-blocking request %d is still in flight", i);
    if (out->dev != out->ops) out->dev->split_free(out);
    if (out->ops != &comm_single_ops && out->ops->finalize) out->ops->finalize(out);
    free(out->reqs);
    memset(out, 0, sizeof(*out));
    out->world = 1; out->local_world = 1;
    out->ops = out->dev = &comm_single_ops;
}

const char* comm_impl_name(const Comm* c) { return c->dev != c->ops ? c->dev->name : c->ops->name; }

// ---------------------------------------------------------------------------------------------
// dispatch: every call counts as one collective for the watchdog, which sees this rank as
// waiting while it is inside one

static const CommOps* enter(Comm* c, const CommOps* ops, const char* what) {
    c->coll_seq++;
    c->coll_name = what;
    comm_wd_wait_begin(c, what);
    return ops;
}
static void leave(Comm* c) { comm_wd_wait_end(c); }

void comm_barrier(Comm* c) { enter(c, c->ops, "barrier")->barrier(c); leave(c); }

void comm_allreduce_sum_f32(Comm* c, float* buf, size_t n) {
    enter(c, c->ops, "allreduce_sum_f32")->allreduce(c, buf, n, COMM_F32, COMM_OP_SUM, NULL); leave(c);
}
void comm_allreduce_sum_f64(Comm* c, double* buf, size_t n) {
    enter(c, c->ops, "allreduce_sum_f64")->allreduce(c, buf, n, COMM_F64, COMM_OP_SUM, NULL); leave(c);
}
void comm_allreduce_sum_i64(Comm* c, int64_t* buf, size_t n) {
    enter(c, c->ops, "allreduce_sum_i64")->allreduce(c, buf, n, COMM_I64, COMM_OP_SUM, NULL); leave(c);
}
void comm_allreduce_max_f64(Comm* c, double* buf, size_t n) {
    enter(c, c->ops, "allreduce_max_f64")->allreduce(c, buf, n, COMM_F64, COMM_OP_MAX, NULL); leave(c);
}
void comm_reduce_scatter_sum_f32(Comm* c, const float* send, float* recv, size_t shard) {
    enter(c, c->ops, "reduce_scatter_sum_f32")->reduce_scatter(c, send, recv, shard, COMM_F32, NULL); leave(c);
}
void comm_allgather_f32(Comm* c, const float* send_shard, float* recv_full, size_t shard) {
    enter(c, c->ops, "allgather_f32")->allgather(c, send_shard, recv_full, shard, COMM_F32, NULL); leave(c);
}
void comm_reduce_sum_f32(Comm* c, const float* send, float* recv, size_t n, int root) {
    comm_check_root(c, root, "comm_reduce_sum_f32");
    enter(c, c->ops, "reduce_sum_f32")->reduce(c, send, recv, n, COMM_F32, root, NULL); leave(c);
}
void comm_broadcast(Comm* c, void* buf, size_t bytes, int root) {
    comm_check_root(c, root, "comm_broadcast");
    enter(c, c->ops, "broadcast")->broadcast(c, buf, bytes, root, NULL); leave(c);
}

int comm_count_differing(Comm* c, const void* buf, size_t bytes) {
    uint64_t h = 0xcbf29ce484222325ULL; // FNV-1a, 64 bit
    const unsigned char* p = (const unsigned char*)buf;
    for (size_t i = 0; i < bytes; i++) { h ^= p[i]; h *= 0x100000001b3ULL; }
    h ^= (uint64_t)bytes * 0x9e3779b97f4a7c15ULL;
    uint64_t h0 = h;
    comm_broadcast(c, &h0, sizeof(h0), 0);
    int64_t differs = h0 != h;
    comm_allreduce_sum_i64(c, &differs, 1);
    return (int)differs;
}

// ---------------------------------------------------------------------------------------------
// device calls: the same, through the device table

void comm_dev_allreduce_sum(Comm* c, void* buf, size_t n, CommDtype dt, void* stream) {
    enter(c, c->dev, "dev_allreduce_sum")->allreduce(c, buf, n, summable(dt, "comm_dev_allreduce_sum"), COMM_OP_SUM, stream); leave(c);
}
void comm_dev_reduce_scatter_sum(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream) {
    enter(c, c->dev, "dev_reduce_scatter_sum")->reduce_scatter(c, send, recv, shard, summable(dt, "comm_dev_reduce_scatter_sum"), stream); leave(c);
}
void comm_dev_allgather(Comm* c, const void* send_shard, void* recv_full, size_t shard, CommDtype dt, void* stream) {
    enter(c, c->dev, "dev_allgather")->allgather(c, send_shard, recv_full, shard, dt, stream); leave(c);
}
void comm_dev_reduce_sum(Comm* c, const void* send, void* recv, size_t n, CommDtype dt, int root, void* stream) {
    comm_check_root(c, root, "comm_dev_reduce_sum");
    enter(c, c->dev, "dev_reduce_sum")->reduce(c, send, recv, n, summable(dt, "comm_dev_reduce_sum"), root, stream); leave(c);
}
void comm_dev_broadcast(Comm* c, void* buf, size_t bytes, int root, void* stream) {
    comm_check_root(c, root, "comm_dev_broadcast");
    enter(c, c->dev, "dev_broadcast")->broadcast(c, buf, bytes, root, stream); leave(c);
}
void comm_dev_group_begin(Comm* c) { c->dev->group_begin(c); }
void comm_dev_group_end(Comm* c) { enter(c, c->dev, "dev_group_end")->group_end(c); leave(c); }

// ---------------------------------------------------------------------------------------------
// non-blocking device calls: a request is a slot of c->reqs

static CommRequest istart(Comm* c, CommReqKind kind, const char* what, const void* send, void* recv, size_t shard,
                          CommDtype dt, void* stream) {
    int id = 0;
    while (id < COMM_MAX_REQUESTS && c->reqs[id].busy) id++;
    if (id == COMM_MAX_REQUESTS)
        fatal("call comm_wait on finished requests before starting more", "%s: %d non-blocking requests are already in flight",
              what, COMM_MAX_REQUESTS);
    (void)comm_dtype_size(dt);
    CommReq* r = &c->reqs[id];
    void* impl = r->impl; // the implementation's slot state persists between requests
    memset(r, 0, sizeof(*r));
    r->busy = 1; r->kind = kind; r->name = what; r->ops = c->dev; r->impl = impl;
    r->send = send; r->recv = recv; r->shard = shard; r->dt = dt; r->stream = stream;
    enter(c, c->dev, what)->istart(c, r);
    leave(c);
    return (CommRequest){ id };
}

CommRequest comm_dev_iallgather(Comm* c, const void* send_shard, void* recv_full, size_t shard, CommDtype dt, void* stream) {
    return istart(c, COMM_REQ_ALLGATHER, "dev_iallgather", send_shard, recv_full, shard, dt, stream);
}
CommRequest comm_dev_ireduce_scatter_sum(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream) {
    return istart(c, COMM_REQ_REDUCE_SCATTER, "dev_ireduce_scatter_sum", send, recv, shard, summable(dt, "comm_dev_ireduce_scatter_sum"), stream);
}

void comm_wait(Comm* c, CommRequest* req) {
    if (!req || req->id < 0) return;
    if (req->id >= COMM_MAX_REQUESTS || !c->reqs[req->id].busy)
        fatal("wait for each request once", "comm_wait: request %d is not in flight", req->id);
    CommReq* r = &c->reqs[req->id];
    comm_wd_wait_begin(c, r->name); // (the same collective as its start: not counted again)
    r->ops->wait(c, r);
    comm_wd_wait_end(c);
    r->busy = 0;
    req->id = -1;
}
