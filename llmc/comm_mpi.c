// The MPI implementation of llmc/comm.h (host memory). Compiled to an empty unit unless the build
// found MPI (mk/config.mk adds -DLLMC_HAVE_MPI and mpicc's include path to CFLAGS).
//
// Floating-point sums do not use MPI_Allreduce / MPI_Reduce_scatter: the MPI library chooses its
// reduction algorithm (and with it the order of the additions) by message size and process count,
// and some algorithms differ between ranks. Instead every sum here is a reduce-scatter built from
// point-to-point messages, where the owner of each element adds the contributions of ranks
// 0, 1, ..., N-1 in that order in double precision and rounds once (see comm.h). The traffic is
// that of a ring reduce-scatter / all-gather (each rank sends and receives (N-1)/N of the data per
// phase); only the message count grows with N, which is fine at the rank counts we run.
#ifdef LLMC_HAVE_MPI

#include <mpi.h>
#include <limits.h>
#include <string.h>
#include <stdlib.h>
#include "comm_internal.h"
#include "check.h"

// Scratch for reductions: a chunk of every peer's contribution lands here before it is summed.
// Large messages are processed in chunks that fit, so this bounds memory, not message size.
#define COMM_SCRATCH_BYTES ((size_t)16 << 20)
// f32 staging for the host path of bf16 device calls (comm.c).
#define COMM_CONV_BYTES ((size_t)4 << 20)
// Below this many elements an all-reduce gathers every rank's whole buffer (one latency-bound
// collective) instead of reduce-scatter + all-gather. Both sum in the same order.
#define COMM_SMALL_ALLREDUCE 1024
#define COMM_TAG 0x11c

typedef struct {
    MPI_Comm comm;          // our duplicate of MPI_COMM_WORLD: our messages never match anyone else's
    MPI_Request* reqs;      // 2 * world
    int* counts;            // world
    int* displs;            // world
} MpiState;

static void mpi_failed(int err, const char* call, const char* file, int line) {
    char msg[MPI_MAX_ERROR_STRING]; int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof(msg), "MPI error code %d", err);
    llmc_fatal_at(file, line, "if another rank failed first, its message is above",
                  "MPI call failed: %s: %s", call, msg);
}
#define mpiCheck(call) do { int err_ = (call); if (err_ != MPI_SUCCESS) mpi_failed(err_, #call, __FILE__, __LINE__); } while (0)

static MpiState* st(const Comm* c) { return (MpiState*)c->mpi; }

// fatal() on any rank ends all of them: MPI_Abort makes mpirun kill every process of the job.
void comm_mpi_fatal_hook(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 1);
}

void comm_mpi_init(Comm* c, int* argc, char*** argv) {
    int init = 0;
    MPI_Initialized(&init);
    // No thread support needed: only the main thread calls MPI (OpenMP threads never do).
    if (!init) mpiCheck(MPI_Init(argc, argv));
    MpiState* s = (MpiState*)callocCheck(1, sizeof(MpiState));
    mpiCheck(MPI_Comm_dup(MPI_COMM_WORLD, &s->comm));
    // Errors come back to mpiCheck, which prints which call failed and aborts every rank.
    mpiCheck(MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN));
    mpiCheck(MPI_Comm_rank(s->comm, &c->rank));
    mpiCheck(MPI_Comm_size(s->comm, &c->world));
    MPI_Comm node;
    mpiCheck(MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Comm_rank(node, &c->local_rank));
    mpiCheck(MPI_Comm_size(node, &c->local_world));
    mpiCheck(MPI_Comm_free(&node));
    s->reqs = (MPI_Request*)mallocCheck(2 * (size_t)c->world * sizeof(MPI_Request));
    s->counts = (int*)mallocCheck((size_t)c->world * sizeof(int));
    s->displs = (int*)mallocCheck((size_t)c->world * sizeof(int));
    c->mpi = s;
    c->impl = COMM_MPI;
    if (c->world > 1) {
        c->scratch_bytes = COMM_SCRATCH_BYTES;
        c->conv_bytes = COMM_CONV_BYTES;
        // Test knob: tiny buffers make the tests cover the chunked paths with small messages.
        // It must be the same on every rank (mpirun passes the environment on).
        const char* t = getenv("LLMC_COMM_TEST_SCRATCH");
        if (t && t[0]) {
            long v = atol(t);
            if (v < 64) fatal("use a value of at least 64 (bytes)", "LLMC_COMM_TEST_SCRATCH=%s is too small", t);
            c->scratch_bytes = c->conv_bytes = (size_t)v;
        }
        // need room for one element per rank (and the bf16 staging needs world + 1 floats)
        size_t need = (size_t)(c->world + 1) * sizeof(double);
        if (c->scratch_bytes < need) c->scratch_bytes = need;
        if (c->conv_bytes < need) c->conv_bytes = need;
        c->scratch = mallocCheck(c->scratch_bytes);
        c->conv = mallocCheck(c->conv_bytes);
        llmc_set_fatal_hook(comm_mpi_fatal_hook);
    }
}

void comm_mpi_finalize(Comm* c) {
    MpiState* s = st(c);
    if (c->world > 1) llmc_set_fatal_hook(NULL);
    mpiCheck(MPI_Barrier(s->comm));
    mpiCheck(MPI_Comm_free(&s->comm));
    free(s->reqs); free(s->counts); free(s->displs); free(s);
    free(c->scratch); free(c->conv);
    c->mpi = NULL; c->scratch = NULL; c->conv = NULL; c->scratch_bytes = c->conv_bytes = 0;
    MPI_Finalize();
}

void comm_mpi_abort(Comm* c, int code) {
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code); // not reached
}

void comm_mpi_barrier(Comm* c) { mpiCheck(MPI_Barrier(st(c)->comm)); }

// out[i] = own-or-peer contributions of ranks 0..world-1 added in rank order in double, rounded
// once. Rank r's contribution is own[i] for r == me, else scratch[r*stride + i]. out may alias own.
static void sum_f32(float* out, const float* own, const float* scratch, size_t stride, size_t n, int world, int me) {
    for (size_t i = 0; i < n; i++) {
        double s = me == 0 ? (double)own[i] : (double)scratch[i];
        for (int r = 1; r < world; r++) s += r == me ? (double)own[i] : (double)scratch[(size_t)r * stride + i];
        out[i] = (float)s;
    }
}
static void sum_f64(double* out, const double* own, const double* scratch, size_t stride, size_t n, int world, int me) {
    for (size_t i = 0; i < n; i++) {
        double s = me == 0 ? own[i] : scratch[i];
        for (int r = 1; r < world; r++) s += r == me ? own[i] : scratch[(size_t)r * stride + i];
        out[i] = s;
    }
}
static void sum_any(int f64, void* out, const void* own, const void* scratch, size_t stride, size_t n, int world, int me) {
    if (f64) sum_f64((double*)out, (const double*)own, (const double*)scratch, stride, n, world, me);
    else sum_f32((float*)out, (const float*)own, (const float*)scratch, stride, n, world, me);
}

static void allreduce_sum(Comm* c, void* buf, size_t n, int f64) {
    MpiState* s = st(c);
    const size_t es = f64 ? sizeof(double) : sizeof(float);
    MPI_Datatype T = f64 ? MPI_DOUBLE : MPI_FLOAT;
    const int W = c->world, me = c->rank;
    const size_t cap = c->scratch_bytes / es;
    char* scratch = (char*)c->scratch;
    if (n == 0) return;
    if (n <= COMM_SMALL_ALLREDUCE && n * (size_t)W <= cap) {
        mpiCheck(MPI_Allgather(buf, (int)n, T, scratch, (int)n, T, s->comm));
        sum_any(f64, buf, scratch + (size_t)me * n * es, scratch, n, n, W, me);
        return;
    }
    // Chunks of at most W*pmax elements; chunk piece r ([r*p, r*p+len_r)) is summed by rank r.
    const size_t pmax = cap / (size_t)W;
    for (size_t off = 0; off < n; off += pmax * (size_t)W) {
        size_t m = n - off < pmax * (size_t)W ? n - off : pmax * (size_t)W;
        size_t p = (m + (size_t)W - 1) / (size_t)W;
        char* base = (char*)buf + off * es;
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
        mpiCheck(MPI_Waitall(nreq, s->reqs, MPI_STATUSES_IGNORE));
        char* my = base + (size_t)me * p * es;
        sum_any(f64, my, my, scratch, p, (size_t)mine, W, me);
        mpiCheck(MPI_Allgatherv(MPI_IN_PLACE, 0, T, base, s->counts, s->displs, T, s->comm));
    }
}

void comm_mpi_allreduce_sum_f32(Comm* c, float* buf, size_t n) { allreduce_sum(c, buf, n, 0); }
void comm_mpi_allreduce_sum_f64(Comm* c, double* buf, size_t n) { allreduce_sum(c, buf, n, 1); }

// Integer sums and maxima are exact in any order: MPI's own collectives are fine.
static void allreduce_plain(Comm* c, void* buf, size_t n, size_t es, MPI_Datatype T, MPI_Op op) {
    const size_t piece = (size_t)INT_MAX / 2;
    for (size_t off = 0; off < n; off += piece) {
        size_t len = n - off < piece ? n - off : piece;
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, (char*)buf + off * es, (int)len, T, op, st(c)->comm));
    }
}
void comm_mpi_allreduce_sum_i64(Comm* c, int64_t* buf, size_t n) { allreduce_plain(c, buf, n, sizeof(int64_t), MPI_INT64_T, MPI_SUM); }
void comm_mpi_allreduce_max_f64(Comm* c, double* buf, size_t n) { allreduce_plain(c, buf, n, sizeof(double), MPI_DOUBLE, MPI_MAX); }

void comm_mpi_reduce_scatter_sum_f32(Comm* c, const float* send, float* recv, size_t shard) {
    MpiState* s = st(c);
    const int W = c->world, me = c->rank;
    float* scratch = (float*)c->scratch;
    const size_t cmax = c->scratch_bytes / sizeof(float) / (size_t)W;
    for (size_t off = 0; off < shard; off += cmax) {
        size_t len = shard - off < cmax ? shard - off : cmax;
        int nreq = 0;
        for (int r = 0; r < W; r++) {
            if (r == me) continue;
            mpiCheck(MPI_Irecv(scratch + (size_t)r * len, (int)len, MPI_FLOAT, r, COMM_TAG, s->comm, &s->reqs[nreq++]));
            mpiCheck(MPI_Isend(send + (size_t)r * shard + off, (int)len, MPI_FLOAT, r, COMM_TAG, s->comm, &s->reqs[nreq++]));
        }
        mpiCheck(MPI_Waitall(nreq, s->reqs, MPI_STATUSES_IGNORE));
        // in place (recv == send + me*shard) is fine: element i is read before it is written
        sum_f32(recv + off, send + (size_t)me * shard + off, scratch, len, len, W, me);
    }
}

void comm_mpi_reduce_sum_f32(Comm* c, const float* send, float* recv, size_t n, int root) {
    MpiState* s = st(c);
    const int W = c->world, me = c->rank;
    float* scratch = (float*)c->scratch;
    const size_t cmax = c->scratch_bytes / sizeof(float) / (size_t)W;
    for (size_t off = 0; off < n; off += cmax) {
        size_t len = n - off < cmax ? n - off : cmax;
        if (me != root) {
            mpiCheck(MPI_Send(send + off, (int)len, MPI_FLOAT, root, COMM_TAG, s->comm));
            continue;
        }
        int nreq = 0;
        for (int r = 0; r < W; r++)
            if (r != me) mpiCheck(MPI_Irecv(scratch + (size_t)r * len, (int)len, MPI_FLOAT, r, COMM_TAG, s->comm, &s->reqs[nreq++]));
        mpiCheck(MPI_Waitall(nreq, s->reqs, MPI_STATUSES_IGNORE));
        sum_f32(recv + off, send + off, scratch, len, len, W, me);
    }
}

void comm_mpi_allgather_bytes(Comm* c, const void* send_shard, void* recv_full, size_t shard_bytes) {
    MpiState* s = st(c);
    if (shard_bytes == 0) return;
    // MPI counts are int: send in units of 2^k bytes (ZeRO shards are 64-element aligned) so that
    // shards beyond 2 GiB still go in one call.
    size_t unit = 1;
    while (shard_bytes / unit > (size_t)INT_MAX && unit < ((size_t)1 << 20) && shard_bytes % (unit * 2) == 0) unit *= 2;
    if (shard_bytes / unit > (size_t)INT_MAX)
        fatal("use more ranks or pad shards to a multiple of 1 KiB", "comm_allgather: shard of %zu bytes is too large for one MPI message", shard_bytes);
    MPI_Datatype T = MPI_BYTE;
    if (unit > 1) {
        mpiCheck(MPI_Type_contiguous((int)unit, MPI_BYTE, &T));
        mpiCheck(MPI_Type_commit(&T));
    }
    int count = (int)(shard_bytes / unit);
    const void* sendp = (const char*)recv_full + (size_t)c->rank * shard_bytes == (const char*)send_shard ? MPI_IN_PLACE : send_shard;
    mpiCheck(MPI_Allgather(sendp, count, T, recv_full, count, T, s->comm));
    if (unit > 1) mpiCheck(MPI_Type_free(&T));
}

void comm_mpi_broadcast(Comm* c, void* buf, size_t bytes, int root) {
    const size_t piece = (size_t)1 << 30;
    for (size_t off = 0; off < bytes; off += piece) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        mpiCheck(MPI_Bcast((char*)buf + off, (int)len, MPI_BYTE, root, st(c)->comm));
    }
}

#else
// Built without MPI: nothing here (ISO C wants at least one declaration per unit).
typedef int comm_mpi_not_built;
#endif // LLMC_HAVE_MPI
