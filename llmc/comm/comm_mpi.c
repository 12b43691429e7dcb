// The MPI implementation of llmc/comm/comm.h (host memory). Its code exists only when the build
// found MPI (mk/config.mk adds -DLLMC_HAVE_MPI and mpicc's include path; without them this file is
// an empty unit, so the generic rules for the library's sources need no exception);
// llmc/comm/comm.c calls comm_mpi_open when an MPI launcher started the process.
//
// Floating-point sums do not use MPI_Allreduce / MPI_Reduce_scatter, whose order of additions
// follows the MPI library's choice of algorithm: every sum is a reduce-scatter of point-to-point
// messages, where the owner of each element adds ranks 0, 1, ..., N-1 in order in double precision
// and rounds once (comm.h). Every MPI operation is non-blocking, completed by comm_poll_sleep-paced
// MPI_Testsome (mpi_wait), so a waiting rank sleeps instead of spinning, and the watchdog thread
// (MPI_THREAD_MULTIPLE) serves status queries meanwhile on its own duplicated communicator (the
// wd_* functions at the end). The data travels in pieces of at most COMM_PIECE_BYTES, each its own
// request: OpenMPI moves a message only inside an MPI call, so a completed piece restarts the
// wait's back-off, and the wait sleeps only when nothing arrives. Both sides cut a message into the
// same pieces (MPI's non-overtaking rule), so they need no tags of their own. Why, with the
// measurements: docs/MULTINODE.md ("Inside the comm layer").
#ifdef LLMC_HAVE_MPI

#include <mpi.h>
#include <limits.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include "comm/comm_internal.h"
#include "base/check.h"
#include "base/bf16.h"

// Scratch for reductions: COMM_MPI_SCRATCH_BYTES (llmc/comm/comm.h).
#define COMM_SCRATCH_BYTES COMM_MPI_SCRATCH_BYTES
// Below this many elements an all-reduce gathers every rank's whole buffer (one latency-bound
// collective) instead of reduce-scatter + all-gather. Both sum in the same order.
#define COMM_SMALL_ALLREDUCE 1024
#define COMM_TAG 0x11c            // blocking point-to-point phases; request slot k uses COMM_TAG + 1 + k
#define WD_TAG_QUERY 1
#define WD_TAG_REPLY 2

// Requests of one wait: the pieces of every message of a collective (or a chunk of one).
// Grows to the most a collective has needed, then stays.
typedef struct {
    MPI_Request* r;
    int* done;            // MPI_Testsome's indices
    int n, cap;
} ReqList;

// A non-blocking request's MPI state (one per slot of Comm.reqs, allocated in comm_mpi_open).
typedef struct {
    ReqList l;
    void* buf;            // reduce-scatter: the peers' blocks; grows to the largest request
    size_t cap;
} MpiReq;

typedef struct {
    MPI_Comm comm;        // our duplicate of MPI_COMM_WORLD: our messages never match anyone else's
    int thread_multiple;  // the library gave MPI_THREAD_MULTIPLE (the watchdog needs it)
    ReqList blk;          // the blocking collectives' requests
    int* counts;          // world
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

static void* grow(void* p, size_t bytes) {
    void* q = realloc(p, bytes);
    if (!q) fatal("free memory or use fewer ranks per node", "comm: out of memory for %zu bytes of MPI requests", bytes);
    return q;
}
static void reqs_reserve(ReqList* l, int more) {
    if (l->n + more <= l->cap) return;
    int cap = l->cap * 2 > l->n + more ? l->cap * 2 : l->n + more;
    l->r = (MPI_Request*)grow(l->r, (size_t)cap * sizeof(MPI_Request));
    l->done = (int*)grow(l->done, (size_t)cap * sizeof(int));
    l->cap = cap;
}
static void reqs_free(ReqList* l) { free(l->r); free(l->done); memset(l, 0, sizeof(*l)); }

// Posts the send (or receive) of count elements to (from) peer as pieces of at most
// COMM_PIECE_BYTES, appended to l.
static void post(MpiState* s, ReqList* l, int send, const void* buf, size_t count, MPI_Datatype T, size_t es, int peer, int tag) {
    const size_t pe = COMM_PIECE_BYTES / es;
    reqs_reserve(l, (int)((count + pe - 1) / pe));
    for (size_t off = 0; off < count; off += pe) {
        const int len = (int)(count - off < pe ? count - off : pe);
        char* p = (char*)buf + off * es;
        if (send) mpiCheck(MPI_Isend(p, len, T, peer, tag, s->comm, &l->r[l->n++]));
        else mpiCheck(MPI_Irecv(p, len, T, peer, tag, s->comm, &l->r[l->n++]));
    }
}
#define post_send(s, l, buf, count, dt, peer, tag) post(s, l, 1, buf, count, mpi_type(dt), comm_dtype_size(dt), peer, tag)
#define post_recv(s, l, buf, count, dt, peer, tag) post(s, l, 0, buf, count, mpi_type(dt), comm_dtype_size(dt), peer, tag)

// Completes the requests of l and empties it. Between tests it sleeps (comm.c: comm_poll_sleep),
// but a completed piece restarts the back-off: while data moves, the wait keeps the MPI library
// moving it. Each completion is also progress for the watchdog, so a slow network that keeps
// moving data is not mistaken for a hung one.
static void mpi_wait(Comm* c, ReqList* l) {
    CommBackoff b;
    comm_poll_begin(&b);
    for (;;) {
        int got = 0;
        mpiCheck(MPI_Testsome(l->n, l->r, &got, l->done, MPI_STATUSES_IGNORE));
        if (got == MPI_UNDEFINED) break; // none left
        if (got > 0) { comm_wd_progress(c); comm_poll_begin(&b); continue; }
        comm_poll_sleep(&b);
    }
    l->n = 0;
}
// One request that is not a list's (small collectives of the MPI library).
static void mpi_wait1(Comm* c, MPI_Request* r) {
    ReqList l = { r, NULL, 1, 1 };
    int done = 0;
    l.done = &done;
    mpi_wait(c, &l);
}

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
    const int W = c->world, me = c->rank;
    const size_t p = (m + (size_t)W - 1) / (size_t)W;
    char* scratch = (char*)s->scratch;
    for (int r = 0; r < W; r++) {
        size_t b = (size_t)r * p;
        s->counts[r] = (int)(b >= m ? 0 : (m - b < p ? m - b : p));
    }
    const int mine = s->counts[me];
    for (int r = 0; r < W; r++) {
        if (r == me) continue;
        post_recv(s, &s->blk, scratch + (size_t)r * p * es, (size_t)mine, dt, r, COMM_TAG);
        post_send(s, &s->blk, base + (size_t)r * p * es, (size_t)s->counts[r], dt, r, COMM_TAG);
    }
    mpi_wait(c, &s->blk);
    char* my = base + (size_t)me * p * es;
    sum_block(dt, my, my, scratch, p, (size_t)mine, W, me);
    for (int r = 0; r < W; r++) { // every rank's sums to everyone
        if (r == me) continue;
        post_recv(s, &s->blk, base + (size_t)r * p * es, (size_t)s->counts[r], dt, r, COMM_TAG);
        post_send(s, &s->blk, my, (size_t)mine, dt, r, COMM_TAG);
    }
    mpi_wait(c, &s->blk);
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
        for (int r = 0; r < W; r++) {
            if (r == me) continue;
            post_recv(s, &s->blk, scratch + (size_t)r * len * es, len, dt, r, COMM_TAG);
            post_send(s, &s->blk, snd + ((size_t)r * shard + off) * es, len, dt, r, COMM_TAG);
        }
        mpi_wait(c, &s->blk);
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
        if (me != root) {
            post_send(s, &s->blk, mine, len, dt, root, COMM_TAG);
        } else {
            for (int r = 0; r < W; r++)
                if (r != me) post_recv(s, &s->blk, scratch + (size_t)r * len * es, len, dt, r, COMM_TAG);
        }
        mpi_wait(c, &s->blk);
        if (me == root) sum_block(dt, (char*)recv + off * es, mine, scratch, len, len, W, me);
    }
}

// All-gather as point-to-point pieces: this rank's shard to every peer, theirs into recv (and the
// own block copied unless in place); posted into l, completed by the caller's mpi_wait.
static void allgather_post(Comm* c, ReqList* l, const void* send, void* recv, size_t shard, CommDtype dt, int tag) {
    MpiState* s = st(c);
    const size_t bytes = shard * comm_dtype_size(dt);
    char* mine = (char*)recv + (size_t)c->rank * bytes;
    if (mine != (const char*)send && bytes) memmove(mine, send, bytes);
    for (int r = 0; r < c->world; r++) {
        if (r == c->rank) continue;
        post_recv(s, l, (char*)recv + (size_t)r * bytes, shard, dt, r, tag);
        post_send(s, l, mine, shard, dt, r, tag);
    }
}

static void mpi_allgather(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream) {
    allgather_post(c, &st(c)->blk, send, recv, shard, dt, COMM_TAG);
    mpi_wait(c, &st(c)->blk);
}

// Linear: the root sends the whole buffer to every peer (fine at the rank counts of one or a few
// nodes; the ranks' other collectives dominate the traffic).
static void mpi_broadcast(Comm* c, void* buf, size_t bytes, int root, void* stream) {
    MpiState* s = st(c);
    if (c->rank != root) post(s, &s->blk, 0, buf, bytes, MPI_BYTE, 1, root, COMM_TAG);
    else for (int r = 0; r < c->world; r++) if (r != root) post(s, &s->blk, 1, buf, bytes, MPI_BYTE, 1, r, COMM_TAG);
    mpi_wait(c, &s->blk);
}

static void mpi_barrier(Comm* c) {
    MPI_Request r;
    mpiCheck(MPI_Ibarrier(st(c)->comm, &r));
    mpi_wait1(c, &r);
}

static void mpi_nothing(Comm* c) { (void)c; }

// ---------------------------------------------------------------------------------------------
// non-blocking requests: the start posts the point-to-point pieces; the wait completes them and,
// for a reduce-scatter, sums in rank order

static void mpi_istart(Comm* c, CommReq* q) {
    MpiState* s = st(c);
    MpiReq* m = &s->slot[q - c->reqs];
    const int W = c->world, me = c->rank, tag = COMM_TAG + 1 + (int)(q - c->reqs);
    const size_t es = comm_dtype_size(q->dt);
    q->impl = m;
    m->l.n = 0;
    if (q->kind == COMM_REQ_ALLGATHER) { allgather_post(c, &m->l, q->send, q->recv, q->shard, q->dt, tag); return; }
    size_t need = (size_t)W * q->shard * es;
    if (need > m->cap) { free(m->buf); m->buf = mallocCheck(need); m->cap = need; }
    for (int r = 0; r < W; r++) {
        if (r == me) continue;
        post_recv(s, &m->l, (char*)m->buf + (size_t)r * q->shard * es, q->shard, q->dt, r, tag);
        post_send(s, &m->l, (const char*)q->send + (size_t)r * q->shard * es, q->shard, q->dt, r, tag);
    }
}

static void mpi_wait_req(Comm* c, CommReq* q) {
    MpiReq* m = (MpiReq*)q->impl;
    mpi_wait(c, &m->l);
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
    s->counts = (int*)mallocCheck(W * sizeof(int));
    s->scratch_bytes = scratch_bytes(c->world);
    // the blocking collectives stage at most scratch_bytes per wait (each way): their pieces
    reqs_reserve(&s->blk, (int)(2 * (s->scratch_bytes / COMM_PIECE_BYTES + 2 * W)));
    s->scratch = mallocCheck(s->scratch_bytes);
    s->wd = MPI_COMM_NULL;
    c->host_state = s;
}

static void mpi_state_free(Comm* c) {
    MpiState* s = st(c);
    mpiCheck(MPI_Comm_free(&s->comm));
    for (int k = 0; k < COMM_MAX_REQUESTS; k++) { reqs_free(&s->slot[k].l); free(s->slot[k].buf); }
    reqs_free(&s->blk);
    free(s->counts); free(s->scratch); free(s);
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
