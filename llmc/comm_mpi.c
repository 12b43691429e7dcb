// The MPI implementation of llmc/comm.h (host memory). Its code exists only when the build found
// MPI (mk/config.mk adds -DLLMC_HAVE_MPI and mpicc's include path; without them this file is an
// empty unit, so the generic llmc/*.c rules need no exception); llmc/comm.c calls comm_mpi_open
// when an MPI launcher started the process.
//
// Floating-point sums do not use MPI_Allreduce / MPI_Reduce_scatter: the MPI library chooses its
// reduction algorithm (and with it the order of the additions) by message size and process count,
// and some algorithms differ between ranks. Instead every sum here is a reduce-scatter built from
// point-to-point messages, where the owner of each element adds the contributions of ranks
// 0, 1, ..., N-1 in that order in double precision and rounds once (see comm.h). The traffic is
// that of a ring reduce-scatter / all-gather (each rank sends and receives (N-1)/N of the data per
// phase); only the message count grows with N, which is fine at the rank counts we run.
//
// Waiting: every MPI operation is non-blocking, completed by comm_poll_sleep-paced MPI_Testall
// (mpi_wait), so a rank waiting for a slow or stopped peer sleeps instead of spinning in the MPI
// library, and the watchdog thread (MPI_THREAD_MULTIPLE) can serve status queries meanwhile on
// its own duplicated communicator (the wd_* functions at the end).
#ifdef LLMC_HAVE_MPI

#include <mpi.h>
#include <limits.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include "comm_internal.h"
#include "check.h"
#include "bf16.h"

// Scratch for reductions: a chunk of every peer's contribution lands here before it is summed.
// Large messages are processed in chunks that fit, so this bounds memory, not message size.
#define COMM_SCRATCH_BYTES ((size_t)16 << 20)
// Below this many elements an all-reduce gathers every rank's whole buffer (one latency-bound
// collective) instead of reduce-scatter + all-gather. Both sum in the same order.
#define COMM_SMALL_ALLREDUCE 1024
#define COMM_TAG 0x11c            // blocking point-to-point phases; request slot k uses COMM_TAG + 1 + k
#define WD_TAG_QUERY 1
#define WD_TAG_REPLY 2

// A non-blocking request's MPI state (one per slot of Comm.reqs, allocated in comm_mpi_open).
typedef struct {
    MPI_Request* r;       // 2 * world
    int n;
    MPI_Datatype type;    // MPI_DATATYPE_NULL unless this request committed one
    void* buf;            // reduce-scatter: the peers' blocks; grows to the largest request
    size_t cap;
} MpiReq;

typedef struct {
    MPI_Comm comm;        // our duplicate of MPI_COMM_WORLD: our messages never match anyone else's
    int thread_multiple;  // the library gave MPI_THREAD_MULTIPLE (the watchdog needs it)
    MPI_Request* reqs;    // 2 * world
    int* counts;          // world
    int* displs;          // world
    void* scratch;
    size_t scratch_bytes;
    MpiReq slot[COMM_MAX_REQUESTS];
    // watchdog channel
    MPI_Comm wd;
    MPI_Request wd_query; // pending receive of a peer's query
    int wd_query_buf;
    MPI_Request* wd_reply_req;   // per peer: our reply in flight
    CommWdStatus* wd_reply_buf;
    MPI_Request* wd_ask_req;     // per peer: our query in flight
    MPI_Request* wd_answer_req;  // per peer: its answer
} MpiState;

static void mpi_failed(int err, const char* call, const char* file, int line) {
    char msg[MPI_MAX_ERROR_STRING]; int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof(msg), "MPI error code %d", err);
    llmc_fatal_at(file, line, "if another rank failed first, its message is above", "MPI call failed: %s: %s", call, msg);
}
#define mpiCheck(call) do { int err_ = (call); if (err_ != MPI_SUCCESS) mpi_failed(err_, #call, __FILE__, __LINE__); } while (0)

static MpiState* st(const Comm* c) { return (MpiState*)c->host_state; }

static MPI_Datatype mpi_type(CommDtype dt) {
    switch (dt) {
        case COMM_F32: return MPI_FLOAT;
        case COMM_BF16: return MPI_UINT16_T;
        case COMM_F64: return MPI_DOUBLE;
        case COMM_I64: return MPI_INT64_T;
        case COMM_U8: return MPI_UINT8_T;
    }
    fatal(NULL, "unknown CommDtype %d", (int)dt);
}

// Completes n requests, sleeping between tests (comm.c: comm_poll_sleep). Each completed wait is
// progress for the watchdog: a large collective moves in chunks, so a slow network that keeps
// moving data is not mistaken for a hung one.
static void mpi_wait(Comm* c, int n, MPI_Request* reqs) {
    CommBackoff b;
    comm_poll_begin(&b);
    for (;;) {
        int done = 0;
        mpiCheck(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE));
        if (done) break;
        comm_poll_sleep(&b);
    }
    comm_wd_progress(c);
}
static void mpi_wait1(Comm* c, MPI_Request* r) { mpi_wait(c, 1, r); }

// out[i] = contributions of ranks 0..world-1 added in rank order in double, rounded once.
// Rank r's contribution is own[i] for r == me, else scratch[r*stride + i]. out may alias own.
#define SUM_BLOCK(T, LOAD, STORE) do { \
    T* o_ = (T*)out; const T* a_ = (const T*)own; const T* s_ = (const T*)scratch; \
    for (size_t i = 0; i < n; i++) { \
        double acc = me == 0 ? LOAD(a_[i]) : LOAD(s_[i]); \
        for (int r = 1; r < world; r++) acc += r == me ? LOAD(a_[i]) : LOAD(s_[(size_t)r * stride + i]); \
        o_[i] = STORE(acc); \
    } } while (0)
#define LOAD_F(x) ((double)(x))
#define STORE_F32(x) ((float)(x))
#define STORE_F64(x) (x)
#define LOAD_BF16(x) ((double)bf16_to_f32(x))
#define STORE_BF16(x) bf16_from_f32((float)(x))

static void sum_block(CommDtype dt, void* out, const void* own, const void* scratch, size_t stride, size_t n, int world, int me) {
    switch (dt) {
        case COMM_F32: SUM_BLOCK(float, LOAD_F, STORE_F32); return;
        case COMM_F64: SUM_BLOCK(double, LOAD_F, STORE_F64); return;
        case COMM_BF16: SUM_BLOCK(uint16_t, LOAD_BF16, STORE_BF16); return;
        case COMM_I64: case COMM_U8: break;
    }
    fatal(NULL, "internal: no ordered sum for CommDtype %d", (int)dt);
}

// ---------------------------------------------------------------------------------------------
// collectives

// Exact reductions (integer sums, maxima) in any order: MPI's own all-reduce is fine.
static void allreduce_exact(Comm* c, void* buf, size_t n, CommDtype dt, CommRedOp op) {
    if (dt == COMM_BF16) fatal(NULL, "internal: no bf16 max over MPI");
    const size_t es = comm_dtype_size(dt), piece = (size_t)INT_MAX / 2;
    for (size_t off = 0; off < n; off += piece) {
        size_t len = n - off < piece ? n - off : piece;
        MPI_Request r;
        mpiCheck(MPI_Iallreduce(MPI_IN_PLACE, (char*)buf + off * es, (int)len, mpi_type(dt), op == COMM_OP_MAX ? MPI_MAX : MPI_SUM,
                                st(c)->comm, &r));
        mpi_wait1(c, &r);
    }
}

// One chunk of m elements at base: piece r ([r*p, r*p+len_r)) is summed by rank r, then gathered.
static void allreduce_chunk(Comm* c, char* base, size_t m, CommDtype dt) {
    MpiState* s = st(c);
    const size_t es = comm_dtype_size(dt);
    const MPI_Datatype T = mpi_type(dt);
    const int W = c->world, me = c->rank;
    const size_t p = (m + (size_t)W - 1) / (size_t)W;
    char* scratch = (char*)s->scratch;
    int nreq = 0;
    for (int r = 0; r < W; r++) {
        size_t b = (size_t)r * p;
        s->counts[r] = (int)(b >= m ? 0 : (m - b < p ? m - b : p));
        s->displs[r] = (int)b;
    }
    const int mine = s->counts[me];
    for (int r = 0; r < W; r++) {
        if (r == me) continue;
        if (mine) mpiCheck(MPI_Irecv(scratch + (size_t)r * p * es, mine, T, r, COMM_TAG, s->comm, &s->reqs[nreq++]));
        if (s->counts[r]) mpiCheck(MPI_Isend(base + (size_t)r * p * es, s->counts[r], T, r, COMM_TAG, s->comm, &s->reqs[nreq++]));
    }
    mpi_wait(c, nreq, s->reqs);
    char* my = base + (size_t)me * p * es;
    sum_block(dt, my, my, scratch, p, (size_t)mine, W, me);
    MPI_Request r;
    mpiCheck(MPI_Iallgatherv(MPI_IN_PLACE, 0, T, base, s->counts, s->displs, T, s->comm, &r));
    mpi_wait1(c, &r);
}

static void mpi_allreduce(Comm* c, void* buf, size_t n, CommDtype dt, CommRedOp op, void* stream) {
    if (op != COMM_OP_SUM || dt == COMM_I64) { allreduce_exact(c, buf, n, dt, op); return; }
    MpiState* s = st(c);
    const size_t es = comm_dtype_size(dt), cap = s->scratch_bytes / es;
    const int W = c->world;
    if (n == 0) return;
    if (n <= COMM_SMALL_ALLREDUCE && n * (size_t)W <= cap) {
        MPI_Request r;
        mpiCheck(MPI_Iallgather(buf, (int)n, mpi_type(dt), s->scratch, (int)n, mpi_type(dt), s->comm, &r));
        mpi_wait1(c, &r);
        sum_block(dt, buf, (char*)s->scratch + (size_t)c->rank * n * es, s->scratch, n, n, W, c->rank);
        return;
    }
    const size_t chunk = cap / (size_t)W * (size_t)W; // every rank sums at most cap / W of it
    for (size_t off = 0; off < n; off += chunk)
        allreduce_chunk(c, (char*)buf + off * es, n - off < chunk ? n - off : chunk, dt);
}

static void mpi_reduce_scatter(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream) {
    MpiState* s = st(c);
    const int W = c->world, me = c->rank;
    const size_t es = comm_dtype_size(dt), cmax = s->scratch_bytes / es / (size_t)W;
    const char* snd = (const char*)send;
    char* scratch = (char*)s->scratch;
    for (size_t off = 0; off < shard; off += cmax) {
        size_t len = shard - off < cmax ? shard - off : cmax;
        int nreq = 0;
        for (int r = 0; r < W; r++) {
            if (r == me) continue;
            mpiCheck(MPI_Irecv(scratch + (size_t)r * len * es, (int)len, mpi_type(dt), r, COMM_TAG, s->comm, &s->reqs[nreq++]));
            mpiCheck(MPI_Isend(snd + ((size_t)r * shard + off) * es, (int)len, mpi_type(dt), r, COMM_TAG, s->comm, &s->reqs[nreq++]));
        }
        mpi_wait(c, nreq, s->reqs);
        // in place (recv == send + me*shard) is fine: element i is read before it is written
        sum_block(dt, (char*)recv + off * es, snd + ((size_t)me * shard + off) * es, scratch, len, len, W, me);
    }
}

static void mpi_reduce(Comm* c, const void* send, void* recv, size_t n, CommDtype dt, int root, void* stream) {
    MpiState* s = st(c);
    const int W = c->world, me = c->rank;
    const size_t es = comm_dtype_size(dt), cmax = s->scratch_bytes / es / (size_t)W;
    char* scratch = (char*)s->scratch;
    for (size_t off = 0; off < n; off += cmax) {
        size_t len = n - off < cmax ? n - off : cmax;
        const char* mine = (const char*)send + off * es;
        int nreq = 0;
        if (me != root) {
            mpiCheck(MPI_Isend(mine, (int)len, mpi_type(dt), root, COMM_TAG, s->comm, &s->reqs[nreq++]));
        } else {
            for (int r = 0; r < W; r++)
                if (r != me) mpiCheck(MPI_Irecv(scratch + (size_t)r * len * es, (int)len, mpi_type(dt), r, COMM_TAG, s->comm, &s->reqs[nreq++]));
        }
        mpi_wait(c, nreq, s->reqs);
        if (me == root) sum_block(dt, (char*)recv + off * es, mine, scratch, len, len, W, me);
    }
}

// MPI counts are int: a shard of `bytes` goes in units of 2^k bytes (ZeRO shards are 64-element
// aligned) so that shards beyond 2 GiB still go in one message. Returns the count; *type is
// MPI_BYTE or a committed contiguous type the caller frees.
static int byte_units(size_t bytes, MPI_Datatype* type) {
    size_t unit = 1;
    while (bytes / unit > (size_t)INT_MAX && unit < ((size_t)1 << 20) && bytes % (unit * 2) == 0) unit *= 2;
    if (bytes / unit > (size_t)INT_MAX)
        fatal("use more ranks or pad shards to a multiple of 1 KiB", "comm: a shard of %zu bytes is too large for one MPI message", bytes);
    *type = MPI_BYTE;
    if (unit > 1) {
        mpiCheck(MPI_Type_contiguous((int)unit, MPI_BYTE, type));
        mpiCheck(MPI_Type_commit(type));
    }
    return (int)(bytes / unit);
}

static void iallgather_start(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, MPI_Request* r, MPI_Datatype* type) {
    const size_t bytes = shard * comm_dtype_size(dt);
    const int count = byte_units(bytes, type);
    const void* sendp = (const char*)recv + (size_t)c->rank * bytes == (const char*)send ? MPI_IN_PLACE : send;
    mpiCheck(MPI_Iallgather(sendp, count, *type, recv, count, *type, st(c)->comm, r));
}

static void mpi_allgather(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream) {
    if (shard == 0) return;
    MPI_Request r;
    MPI_Datatype type;
    iallgather_start(c, send, recv, shard, dt, &r, &type);
    mpi_wait1(c, &r);
    if (type != MPI_BYTE) mpiCheck(MPI_Type_free(&type));
}

static void mpi_broadcast(Comm* c, void* buf, size_t bytes, int root, void* stream) {
    const size_t piece = (size_t)1 << 30;
    for (size_t off = 0; off < bytes; off += piece) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        MPI_Request r;
        mpiCheck(MPI_Ibcast((char*)buf + off, (int)len, MPI_BYTE, root, st(c)->comm, &r));
        mpi_wait1(c, &r);
    }
}

static void mpi_barrier(Comm* c) {
    MPI_Request r;
    mpiCheck(MPI_Ibarrier(st(c)->comm, &r));
    mpi_wait1(c, &r);
}

static void mpi_nothing(Comm* c) { (void)c; }

// ---------------------------------------------------------------------------------------------
// non-blocking requests: all-gather is MPI_Iallgather; reduce-scatter posts the point-to-point
// messages at the start and sums in rank order when they have arrived (comm_wait)

static void mpi_istart(Comm* c, CommReq* q) {
    MpiState* s = st(c);
    MpiReq* m = &s->slot[q - c->reqs];
    const int W = c->world, me = c->rank, tag = COMM_TAG + 1 + (int)(q - c->reqs);
    const size_t es = comm_dtype_size(q->dt);
    q->impl = m;
    m->n = 0;
    m->type = MPI_DATATYPE_NULL;
    if (q->shard == 0) return;
    if (q->kind == COMM_REQ_ALLGATHER) {
        iallgather_start(c, q->send, q->recv, q->shard, q->dt, &m->r[0], &m->type);
        m->n = 1;
        return;
    }
    if (q->shard > (size_t)INT_MAX)
        fatal("split the reduce-scatter into pieces below 2^31 elements", "comm_dev_ireduce_scatter_sum: shard of %zu elements "
              "is too large for one MPI message", q->shard);
    size_t need = (size_t)W * q->shard * es;
    if (need > m->cap) { free(m->buf); m->buf = mallocCheck(need); m->cap = need; }
    for (int r = 0; r < W; r++) {
        if (r == me) continue;
        mpiCheck(MPI_Irecv((char*)m->buf + (size_t)r * q->shard * es, (int)q->shard, mpi_type(q->dt), r, tag, s->comm, &m->r[m->n++]));
        mpiCheck(MPI_Isend((const char*)q->send + (size_t)r * q->shard * es, (int)q->shard, mpi_type(q->dt), r, tag, s->comm,
                           &m->r[m->n++]));
    }
}

static void mpi_wait_req(Comm* c, CommReq* q) {
    MpiReq* m = (MpiReq*)q->impl;
    mpi_wait(c, m->n, m->r);
    if (m->type != MPI_DATATYPE_NULL && m->type != MPI_BYTE) mpiCheck(MPI_Type_free(&m->type));
    if (q->kind == COMM_REQ_REDUCE_SCATTER && q->shard) {
        const size_t es = comm_dtype_size(q->dt);
        sum_block(q->dt, q->recv, (const char*)q->send + (size_t)c->rank * q->shard * es, m->buf, q->shard, q->shard, c->world, c->rank);
    }
}

// ---------------------------------------------------------------------------------------------
// lifetime

static void mpi_abort(Comm* c, int code) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    fflush(stdout); fflush(stderr);
    if (init && !fin) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code); // not reached when MPI_Abort ran
}

static void mpi_state_free(Comm* c);
static void mpi_finalize(Comm* c) {
    mpi_state_free(c);
    MPI_Finalize();
}

static int mpi_wd_open(Comm* c);
static void mpi_wd_serve(Comm* c, const CommWdStatus* mine);
static void mpi_wd_query(Comm* c, const CommWdStatus* mine, CommWdStatus* out, int* answered, double timeout_s);
static void mpi_wd_close(Comm* c);

static const CommOps comm_mpi_ops = {
    .name = "mpi",
    .allreduce = mpi_allreduce,
    .reduce_scatter = mpi_reduce_scatter,
    .allgather = mpi_allgather,
    .reduce = mpi_reduce,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .group_begin = mpi_nothing,
    .group_end = mpi_nothing,
    .istart = mpi_istart,
    .wait = mpi_wait_req,
    .finalize = mpi_finalize,
    .abort = mpi_abort,
    .wd_open = mpi_wd_open,
    .wd_serve = mpi_wd_serve,
    .wd_query = mpi_wd_query,
    .wd_close = mpi_wd_close,
};
// One rank under MPI (mpirun -np 1, or a singleton): the single-process collectives, MPI's lifetime.
static CommOps comm_mpi1_ops;

// Scratch size: COMM_SCRATCH_BYTES, or the test knob LLMC_COMM_TEST_SCRATCH (tiny buffers make the
// tests cover the chunked paths with small messages; it must be the same on every rank, which
// mpirun's environment passing ensures), at least one element per rank.
static size_t scratch_bytes(int world) {
    size_t b = COMM_SCRATCH_BYTES;
    const char* t = getenv("LLMC_COMM_TEST_SCRATCH");
    if (t && t[0]) {
        long v = atol(t);
        if (v < 64) fatal("use a value of at least 64 (bytes)", "LLMC_COMM_TEST_SCRATCH=%s is too small", t);
        b = (size_t)v;
    }
    size_t need = (size_t)(world + 1) * sizeof(double);
    return b < need ? need : b;
}

// The buffers of a state whose communicator is set: per-peer requests, counts, request slots, scratch.
static void mpi_state_alloc(Comm* c, MpiState* s) {
    mpiCheck(MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN));
    mpiCheck(MPI_Comm_rank(s->comm, &c->rank));
    mpiCheck(MPI_Comm_size(s->comm, &c->world));
    MPI_Comm node;
    mpiCheck(MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Comm_rank(node, &c->local_rank));
    mpiCheck(MPI_Comm_size(node, &c->local_world));
    mpiCheck(MPI_Comm_free(&node));
    const size_t W = (size_t)c->world;
    s->reqs = (MPI_Request*)mallocCheck(2 * W * sizeof(MPI_Request));
    s->counts = (int*)mallocCheck(W * sizeof(int));
    s->displs = (int*)mallocCheck(W * sizeof(int));
    for (int k = 0; k < COMM_MAX_REQUESTS; k++) s->slot[k].r = (MPI_Request*)mallocCheck(2 * W * sizeof(MPI_Request));
    s->scratch_bytes = scratch_bytes(c->world);
    s->scratch = mallocCheck(s->scratch_bytes);
    s->wd = MPI_COMM_NULL;
    c->host_state = s;
}

static void mpi_state_free(Comm* c) {
    MpiState* s = st(c);
    mpiCheck(MPI_Comm_free(&s->comm));
    for (int k = 0; k < COMM_MAX_REQUESTS; k++) { free(s->slot[k].r); free(s->slot[k].buf); }
    free(s->reqs); free(s->counts); free(s->displs); free(s->scratch); free(s);
    c->host_state = NULL;
}

// Sub-communicators: MPI's collectives, no side channel, freed without ending MPI.
static CommOps comm_mpi_sub_ops, comm_mpi1_sub_ops;

void comm_mpi_split(Comm* c, int color, int key, Comm* out) {
    MpiState* s = (MpiState*)callocCheck(1, sizeof(MpiState));
    s->thread_multiple = st(c)->thread_multiple;
    mpiCheck(MPI_Comm_split(st(c)->comm, color, key, &s->comm));
    mpi_state_alloc(out, s);
    comm_mpi_sub_ops = comm_mpi_ops;
    comm_mpi_sub_ops.name = "mpi (sub-communicator)";
    comm_mpi_sub_ops.finalize = mpi_state_free;
    comm_mpi_sub_ops.wd_open = NULL; comm_mpi_sub_ops.wd_serve = NULL;
    comm_mpi_sub_ops.wd_query = NULL; comm_mpi_sub_ops.wd_close = NULL;
    comm_mpi1_sub_ops = comm_single_ops;
    comm_mpi1_sub_ops.name = "mpi (sub-communicator of one rank)";
    comm_mpi1_sub_ops.finalize = mpi_state_free;
    comm_mpi1_sub_ops.abort = mpi_abort;
    out->ops = out->world > 1 ? &comm_mpi_sub_ops : &comm_mpi1_sub_ops;
}

void comm_mpi_open(Comm* c, int* argc, char*** argv) {
    int init = 0, provided = MPI_THREAD_SINGLE;
    MPI_Initialized(&init);
    // MPI_THREAD_MULTIPLE: the watchdog thread serves status queries while the main thread waits
    if (!init) mpiCheck(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    else mpiCheck(MPI_Query_thread(&provided));
    MpiState* s = (MpiState*)callocCheck(1, sizeof(MpiState));
    s->thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    mpiCheck(MPI_Comm_dup(MPI_COMM_WORLD, &s->comm));
    // Errors come back to mpiCheck, which prints which call failed and aborts every rank.
    mpi_state_alloc(c, s);
    comm_mpi1_ops = comm_single_ops;
    comm_mpi1_ops.name = "mpi";
    comm_mpi1_ops.finalize = mpi_finalize;
    comm_mpi1_ops.abort = mpi_abort;
    c->ops = c->world > 1 ? &comm_mpi_ops : &comm_mpi1_ops;
}

// ---------------------------------------------------------------------------------------------
// watchdog side channel: a duplicated communicator on which the watchdog threads ask each other
// for their status. Errors here are not fatal (a dead peer simply does not answer).

static void request_forget(MPI_Request* r) { if (*r != MPI_REQUEST_NULL) MPI_Request_free(r); }

static int mpi_wd_open(Comm* c) {
    MpiState* s = st(c);
    if (!s->thread_multiple) return 0;
    MPI_Request r;
    mpiCheck(MPI_Comm_idup(s->comm, &s->wd, &r));
    mpi_wait1(c, &r);
    mpiCheck(MPI_Comm_set_errhandler(s->wd, MPI_ERRORS_RETURN));
    const size_t W = (size_t)c->world;
    s->wd_reply_req = (MPI_Request*)mallocCheck(W * sizeof(MPI_Request));
    s->wd_ask_req = (MPI_Request*)mallocCheck(W * sizeof(MPI_Request));
    s->wd_answer_req = (MPI_Request*)mallocCheck(W * sizeof(MPI_Request));
    s->wd_reply_buf = (CommWdStatus*)callocCheck(W, sizeof(CommWdStatus));
    for (size_t r = 0; r < W; r++) s->wd_reply_req[r] = s->wd_ask_req[r] = s->wd_answer_req[r] = MPI_REQUEST_NULL;
    mpiCheck(MPI_Irecv(&s->wd_query_buf, 1, MPI_INT, MPI_ANY_SOURCE, WD_TAG_QUERY, s->wd, &s->wd_query));
    return 1;
}

static void mpi_wd_serve(Comm* c, const CommWdStatus* mine) {
    MpiState* s = st(c);
    for (;;) {
        int flag = 0;
        MPI_Status status;
        if (MPI_Test(&s->wd_query, &flag, &status) != MPI_SUCCESS || !flag) return;
        int src = status.MPI_SOURCE, sent = 0;
        if (s->wd_reply_req[src] != MPI_REQUEST_NULL) MPI_Test(&s->wd_reply_req[src], &sent, MPI_STATUS_IGNORE);
        if (s->wd_reply_req[src] == MPI_REQUEST_NULL) { // (else the previous answer is still on its way: it will do)
            s->wd_reply_buf[src] = *mine;
            MPI_Isend(&s->wd_reply_buf[src], (int)sizeof(CommWdStatus), MPI_BYTE, src, WD_TAG_REPLY, s->wd, &s->wd_reply_req[src]);
        }
        if (MPI_Irecv(&s->wd_query_buf, 1, MPI_INT, MPI_ANY_SOURCE, WD_TAG_QUERY, s->wd, &s->wd_query) != MPI_SUCCESS) return;
    }
}

static void mpi_wd_query(Comm* c, const CommWdStatus* mine, CommWdStatus* out, int* answered, double timeout_s) {
    MpiState* s = st(c);
    static const int token = 1;
    int missing = 0;
    for (int r = 0; r < c->world; r++) {
        answered[r] = r == c->rank;
        if (r == c->rank) { out[r] = *mine; continue; }
        request_forget(&s->wd_ask_req[r]);
        request_forget(&s->wd_answer_req[r]);
        MPI_Isend(&token, 1, MPI_INT, r, WD_TAG_QUERY, s->wd, &s->wd_ask_req[r]);
        if (MPI_Irecv(&out[r], (int)sizeof(CommWdStatus), MPI_BYTE, r, WD_TAG_REPLY, s->wd, &s->wd_answer_req[r]) == MPI_SUCCESS) missing++;
    }
    double t0 = comm_now();
    while (missing > 0 && comm_now() - t0 < timeout_s) {
        for (int r = 0; r < c->world; r++) {
            int flag = 0;
            if (answered[r] || s->wd_answer_req[r] == MPI_REQUEST_NULL) continue;
            if (MPI_Test(&s->wd_answer_req[r], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) { answered[r] = 1; missing--; }
        }
        mpi_wd_serve(c, mine); // the other waiting ranks are asking us at the same time
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

static void mpi_wd_close(Comm* c) {
    MpiState* s = st(c);
    MPI_Cancel(&s->wd_query);
    MPI_Wait(&s->wd_query, MPI_STATUS_IGNORE);
    for (int r = 0; r < c->world; r++) {
        request_forget(&s->wd_reply_req[r]);
        request_forget(&s->wd_ask_req[r]);
        if (s->wd_answer_req[r] != MPI_REQUEST_NULL) { MPI_Cancel(&s->wd_answer_req[r]); MPI_Wait(&s->wd_answer_req[r], MPI_STATUS_IGNORE); }
    }
    MPI_Comm_free(&s->wd);
    free(s->wd_reply_req); free(s->wd_ask_req); free(s->wd_answer_req); free(s->wd_reply_buf);
}

#else
typedef int comm_mpi_not_built; // (ISO C wants at least one declaration per unit)
#endif // LLMC_HAVE_MPI
