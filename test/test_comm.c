// Collectives of llmc/comm/comm.h checked bit-exactly against serial sums. Run alone (single process,
// by `make test`) and under `mpirun -np 1/2/4` by test/test_comm.sh. Every rank generates every
// rank's input from a hash, so each rank can compute the serial reference itself: contributions of
// ranks 0..N-1 added in rank order in double and rounded once (the order comm.h promises).
//
//   test_comm                 run the collective checks (blocking and non-blocking)
//   test_comm --has-mpi       print "mpi" or "none" (whether this build contains MPI)
//   test_comm --fatal-rank R  rank R calls fatal() while the others wait in a collective
//   test_comm --kill-rank R   rank R is SIGKILLed by a helper thread while all ranks are in a loop
//                             of collectives
// Watchdog (comm_watchdog_start with TIMEOUT seconds; every rank loops over collectives, marking a
// step per iteration):
//   test_comm --hang-rank R TIMEOUT    rank R stops itself (SIGSTOP) after a few steps
//   test_comm --stuck-rank R TIMEOUT   rank R spins outside collectives forever after a few steps
//   test_comm --deadlock TIMEOUT       every rank waits for a message no rank sends
//   test_comm --slow-rank R SECS [unbounded] TIMEOUT
//                             rank R computes for SECS (< TIMEOUT; unbounded: in an unbounded
//                             operation, for any SECS) once; the others
//                             wait, and check that waiting used under 10% of a core (OpenMPI's
//                             blocking MPI_Barrier, which spins, took 17-36% of a core on a 2-core
//                             machine at load 9, all of one on an idle machine; our back-off
//                             sleeps ~1 ms at a time, and each of those ~900 wake-ups a second
//                             costs a context switch: 3.4-4.9% of a core on an idle 2-core VM,
//                             plain or ASan, 5.1% in a loaded ASan CI pass); all finish
//   test_comm --load-swing SECS TIMEOUT  a step of SECS, then one of 2.8 SECS (more than SECS +
//                             TIMEOUT, within 3 x SECS + TIMEOUT): a machine whose load rises;
//                             nobody is ended
//   test_comm --big-allreduce N TIMEOUT  an all-reduce of N floats, checked; over a slow network
//                             (test_multihost.sh) it takes longer than TIMEOUT, but it progresses
//                             chunk by chunk, so the watchdog lets it finish
#include <stdint.h>
#include <signal.h>
#include <unistd.h>
#include <pthread.h>
#include <time.h>
#include <sys/resource.h>
#include "../llmc/comm/comm.h"
#include "../llmc/comm/comm_internal.h"
#include "../llmc/base/bf16.h"
#include "../llmc/base/check.h"
#include "../llmc/dist/zero.h"
#include "../llmc/model/params.h"
#include "../llmc/base/timer.h"
#include "test.h"

static Comm comm;

#ifdef LLMC_HAVE_MPI
#include <mpi.h>
// The MPI calls of llmc/comm/comm_mpi.c pass through here (the MPI profiling interface: these
// definitions take the place of the library's, which stay reachable as PMPI_*): the largest
// message it handed to MPI, in bytes. Every message must be cut into pieces of at most
// COMM_PIECE_BYTES (a large one crawls while a waiting rank sleeps between polls).
static size_t g_max_msg;
static void note_msg(int count, MPI_Datatype t) {
    int sz = 0;
    PMPI_Type_size(t, &sz);
    size_t b = (size_t)count * (size_t)sz, cur = __atomic_load_n(&g_max_msg, __ATOMIC_RELAXED);
    while (b > cur && !__atomic_compare_exchange_n(&g_max_msg, &cur, b, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}
int MPI_Isend(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c, MPI_Request* r) {
    note_msg(count, t);
    return PMPI_Isend(buf, count, t, dest, tag, c, r);
}
int MPI_Irecv(void* buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Request* r) {
    note_msg(count, t);
    return PMPI_Irecv(buf, count, t, src, tag, c, r);
}
int MPI_Iallgather(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt, MPI_Comm c, MPI_Request* r) {
    note_msg(rc, rt);
    return PMPI_Iallgather(sb, sc, st, rb, rc, rt, c, r);
}
int MPI_Iallgatherv(const void* sb, int sc, MPI_Datatype st, void* rb, const int* rcs, const int* displs, MPI_Datatype rt,
                    MPI_Comm c, MPI_Request* r) {
    int size = 0;
    PMPI_Comm_size(c, &size);
    for (int i = 0; i < size; i++) note_msg(rcs[i], rt);
    return PMPI_Iallgatherv(sb, sc, st, rb, rcs, displs, rt, c, r);
}
int MPI_Ibcast(void* buf, int count, MPI_Datatype t, int root, MPI_Comm c, MPI_Request* r) {
    note_msg(count, t);
    return PMPI_Ibcast(buf, count, t, root, c, r);
}
static size_t max_msg_bytes(void) { return __atomic_load_n(&g_max_msg, __ATOMIC_RELAXED); }
#else
static size_t max_msg_bytes(void) { return 0; }
#endif

static uint64_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}
// Values spread over 2^-12..2^12 with both signs, so the order of additions changes the result.
static double gen(uint64_t seed, int rank, size_t i) {
    uint64_t h = mix(seed * 0x9e3779b97f4a7c15ULL ^ mix((uint64_t)rank * 0x632be59bd9b4e019ULL + i + 1));
    double u = (double)(h >> 11) / 9007199254740992.0 - 0.5;
    int e = (int)((h & 31) % 25) - 12;
    return ldexp(u, e);
}
static float genf(uint64_t seed, int rank, size_t i) { return (float)gen(seed, rank, i); }

static double ref_sum_f32(uint64_t seed, size_t i) {
    double s = genf(seed, 0, i);
    for (int r = 1; r < comm.world; r++) s += genf(seed, r, i);
    return s;
}

static size_t count_bit_mismatch(const void* a, const void* b, size_t n, size_t es, size_t* first) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char*)a + i * es, (const char*)b + i * es, es) != 0) { if (!bad) *first = i; bad++; }
    return bad;
}

#define CHECK_BITS(what, got, want, n, es) do { size_t first_ = 0; \
    size_t bad_ = count_bit_mismatch(got, want, n, es, &first_); \
    TEST_CHECK(bad_ == 0, "%s (n=%zu, rank %d/%d): %zu elements differ, first at %zu", what, (size_t)(n), comm.rank, comm.world, bad_, first_); \
} while (0)

static void test_allreduce_f32(size_t n, uint64_t seed) {
    float* buf = (float*)mallocCheck(n * sizeof(float));
    float* want = (float*)mallocCheck(n * sizeof(float));
    float* again = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { buf[i] = genf(seed, comm.rank, i); want[i] = (float)ref_sum_f32(seed, i); }
    memcpy(again, buf, n * sizeof(float));
    comm_allreduce_sum_f32(&comm, buf, n);
    CHECK_BITS("allreduce_f32", buf, want, n, sizeof(float));
    comm_allreduce_sum_f32(&comm, again, n); // run to run: bit-identical
    CHECK_BITS("allreduce_f32 repeated", again, buf, n, sizeof(float));
    free(buf); free(want); free(again);
}

static void test_allreduce_f64(size_t n, uint64_t seed) {
    double* buf = (double*)mallocCheck(n * sizeof(double));
    double* want = (double*)mallocCheck(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        buf[i] = gen(seed, comm.rank, i);
        double s = gen(seed, 0, i);
        for (int r = 1; r < comm.world; r++) s += gen(seed, r, i);
        want[i] = s;
    }
    comm_allreduce_sum_f64(&comm, buf, n);
    CHECK_BITS("allreduce_f64", buf, want, n, sizeof(double));
    free(buf); free(want);
}

static void test_allreduce_i64_max(size_t n) {
    int64_t* buf = (int64_t*)mallocCheck(n * sizeof(int64_t));
    double* mx = (double*)mallocCheck(n * sizeof(double));
    for (size_t i = 0; i < n; i++) { buf[i] = ((int64_t)1 << 40) * (comm.rank + 1) + (int64_t)i; mx[i] = gen(7, comm.rank, i); }
    comm_allreduce_sum_i64(&comm, buf, n);
    comm_allreduce_max_f64(&comm, mx, n);
    size_t bad = 0, badmax = 0;
    int64_t w = comm.world;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] != ((int64_t)1 << 40) * (w * (w + 1) / 2) + w * (int64_t)i) bad++;
        double m = gen(7, 0, i);
        for (int r = 1; r < comm.world; r++) if (gen(7, r, i) > m) m = gen(7, r, i);
        if (mx[i] != m) badmax++;
    }
    TEST_CHECK(bad == 0, "allreduce_i64 n=%zu: %zu wrong", n, bad);
    TEST_CHECK(badmax == 0, "allreduce_max_f64 n=%zu: %zu wrong", n, badmax);
    free(buf); free(mx);
}

static void test_reduce_scatter(size_t shard, uint64_t seed, int in_place) {
    size_t W = (size_t)comm.world, me = (size_t)comm.rank;
    float* send = (float*)mallocCheck(W * shard * sizeof(float));
    float* recv = (float*)mallocCheck(shard * sizeof(float));
    float* want = (float*)mallocCheck(shard * sizeof(float));
    for (size_t i = 0; i < W * shard; i++) send[i] = genf(seed, comm.rank, i);
    for (size_t i = 0; i < shard; i++) want[i] = (float)ref_sum_f32(seed, me * shard + i);
    float* out = in_place ? send + me * shard : recv;
    comm_reduce_scatter_sum_f32(&comm, send, out, shard);
    CHECK_BITS(in_place ? "reduce_scatter in place" : "reduce_scatter", out, want, shard, sizeof(float));
    free(send); free(recv); free(want);
}

static void test_allgather(size_t shard, uint64_t seed, int in_place) {
    size_t W = (size_t)comm.world, me = (size_t)comm.rank;
    float* mine = (float*)mallocCheck(shard * sizeof(float));
    float* full = (float*)mallocCheck(W * shard * sizeof(float));
    float* want = (float*)mallocCheck(W * shard * sizeof(float));
    for (size_t i = 0; i < W * shard; i++) { full[i] = -1.0f; want[i] = genf(seed, (int)(i / (shard ? shard : 1)), i % (shard ? shard : 1)); }
    for (size_t i = 0; i < shard; i++) mine[i] = genf(seed, comm.rank, i);
    if (in_place) {
        memcpy(full + me * shard, mine, shard * sizeof(float));
        comm_allgather_f32(&comm, full + me * shard, full, shard);
    } else {
        comm_allgather_f32(&comm, mine, full, shard);
    }
    CHECK_BITS(in_place ? "allgather in place" : "allgather", full, want, W * shard, sizeof(float));
    free(mine); free(full); free(want);
}

static void test_reduce(size_t n, uint64_t seed, int root, int in_place) {
    float* send = (float*)mallocCheck(n * sizeof(float));
    float* recv = (float*)mallocCheck(n * sizeof(float));
    float* want = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { send[i] = genf(seed, comm.rank, i); want[i] = (float)ref_sum_f32(seed, i); recv[i] = 0.0f; }
    float* out = in_place ? send : recv;
    comm_reduce_sum_f32(&comm, send, out, n, root);
    if (comm.rank == root) CHECK_BITS("reduce to root", out, want, n, sizeof(float));
    free(send); free(recv); free(want);
}

static void test_broadcast(size_t bytes, int root) {
    unsigned char* buf = (unsigned char*)mallocCheck(bytes);
    for (size_t i = 0; i < bytes; i++) buf[i] = (unsigned char)(comm.rank == root ? mix(i + 11 * (size_t)root) : 0xAB);
    comm_broadcast(&comm, buf, bytes, root);
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++) if (buf[i] != (unsigned char)mix(i + 11 * (size_t)root)) bad++;
    TEST_CHECK(bad == 0, "broadcast %zu bytes from root %d: %zu bytes wrong on rank %d", bytes, root, bad, comm.rank);
    free(buf);
}

// The host path of the bf16 device calls: widened to f32, summed like f32, rounded to bf16.
static uint16_t genb(uint64_t seed, int rank, size_t i) { return bf16_from_f32(genf(seed, rank, i)); }
static uint16_t ref_bf16(uint64_t seed, size_t i) {
    double s = bf16_to_f32(genb(seed, 0, i));
    for (int r = 1; r < comm.world; r++) s += bf16_to_f32(genb(seed, r, i));
    return bf16_from_f32((float)s);
}

static void test_dev_bf16(size_t shard, uint64_t seed) {
    size_t W = (size_t)comm.world, me = (size_t)comm.rank, n = W * shard;
    uint16_t* a = (uint16_t*)mallocCheck(n * 2);
    uint16_t* want = (uint16_t*)mallocCheck(n * 2);
    uint16_t* rs = (uint16_t*)mallocCheck(shard * 2 + 2);
    for (size_t i = 0; i < n; i++) { a[i] = genb(seed, comm.rank, i); want[i] = ref_bf16(seed, i); }
    comm_dev_reduce_scatter_sum(&comm, a, rs, shard, COMM_BF16, NULL);
    CHECK_BITS("dev reduce_scatter bf16", rs, want + me * shard, shard, 2);
    comm_dev_allgather(&comm, rs, a, shard, COMM_BF16, NULL);
    CHECK_BITS("dev allgather bf16", a, want, n, 2);
    for (size_t i = 0; i < n; i++) a[i] = genb(seed, comm.rank, i);
    comm_dev_allreduce_sum(&comm, a, n, COMM_BF16, NULL);
    CHECK_BITS("dev allreduce bf16", a, want, n, 2);
    for (size_t i = 0; i < n; i++) a[i] = genb(seed, comm.rank, i);
    int root = comm.world - 1;
    comm_dev_group_begin(&comm);
    comm_dev_reduce_sum(&comm, a, a, n, COMM_BF16, root, NULL);
    comm_dev_group_end(&comm);
    if (comm.rank == root) CHECK_BITS("dev reduce bf16", a, want, n, 2);
    // f32 device calls are the host calls
    float* f = (float*)mallocCheck(n * sizeof(float) + 4);
    float* fw = (float*)mallocCheck(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) { f[i] = genf(seed, comm.rank, i); fw[i] = (float)ref_sum_f32(seed, i); }
    comm_dev_allreduce_sum(&comm, f, n, COMM_F32, NULL);
    CHECK_BITS("dev allreduce f32", f, fw, n, 4);
    free(a); free(want); free(rs); free(f); free(fw);
}

// Non-blocking reduce-scatter and all-gather: three requests in flight at once, waited for in
// reverse order; results bit-identical to the serial reference (and so to the blocking calls).
static void fill(CommDtype dt, void* buf, uint64_t seed, int rank, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (dt == COMM_F32) ((float*)buf)[i] = genf(seed, rank, i);
        else ((uint16_t*)buf)[i] = genb(seed, rank, i);
    }
}
static void ref_sums(CommDtype dt, void* out, uint64_t seed, size_t first, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (dt == COMM_F32) ((float*)out)[i] = (float)ref_sum_f32(seed, first + i);
        else ((uint16_t*)out)[i] = ref_bf16(seed, first + i);
    }
}

static void test_nonblocking(size_t shard, uint64_t seed, CommDtype dt) {
    const size_t W = (size_t)comm.world, me = (size_t)comm.rank, n = W * shard, es = dt == COMM_F32 ? 4 : 2;
    char* a = (char*)mallocCheck(n * es + es);       // reduce-scatter, out of place
    char* a_out = (char*)mallocCheck(shard * es + es);
    char* b = (char*)mallocCheck(n * es + es);       // reduce-scatter, in place
    char* g = (char*)mallocCheck(n * es + es);       // all-gather, in place
    char* want = (char*)mallocCheck(n * es + es);
    char* gwant = (char*)mallocCheck(n * es + es);
    fill(dt, a, seed, comm.rank, n);
    fill(dt, b, seed, comm.rank, n);
    for (size_t r = 0; r < W; r++) fill(dt, gwant + r * shard * es, seed + 1, (int)r, shard);
    memset(g, 0xEE, n * es);
    memcpy(g + me * shard * es, gwant + me * shard * es, shard * es);
    ref_sums(dt, want, seed, me * shard, shard);
    CommRequest ra = comm_dev_ireduce_scatter_sum(&comm, a, a_out, shard, dt, NULL);
    CommRequest rb = comm_dev_ireduce_scatter_sum(&comm, b, b + me * shard * es, shard, dt, NULL);
    CommRequest rg = comm_dev_iallgather(&comm, g + me * shard * es, g, shard, dt, NULL);
    comm_wait(&comm, &rg);
    comm_wait(&comm, &rb);
    comm_wait(&comm, &ra);
    TEST_CHECK(ra.id < 0 && rb.id < 0 && rg.id < 0, "comm_wait leaves the requests empty");
    comm_wait(&comm, &ra); // waiting on an empty request does nothing
    const char* t = dt == COMM_F32 ? "f32" : "bf16";
    char what[64];
    snprintf(what, sizeof(what), "ireduce_scatter %s", t);
    CHECK_BITS(what, a_out, want, shard, es);
    snprintf(what, sizeof(what), "ireduce_scatter %s in place", t);
    CHECK_BITS(what, b + me * shard * es, want, shard, es);
    snprintf(what, sizeof(what), "iallgather %s", t);
    CHECK_BITS(what, g, gwant, n, es);
    free(a); free(a_out); free(b); free(g); free(want); free(gwant);
}


// Byte all-gathers (COMM_U8: the packed NF4 base at ZeRO 3), blocking and non-blocking, at odd
// sizes: every rank ends with every rank's bytes in rank order, bit for bit.
static void test_bytes(size_t shard, uint64_t seed) {
    const size_t W = (size_t)comm.world, me = (size_t)comm.rank, n = W * shard;
    uint8_t* want = (uint8_t*)mallocCheck(n + 1);
    uint8_t* g = (uint8_t*)mallocCheck(n + 1);
    uint8_t* h = (uint8_t*)mallocCheck(n + 1);
    for (size_t r = 0; r < W; r++)
        for (size_t i = 0; i < shard; i++) want[r * shard + i] = (uint8_t)mix(seed * 0x9e3779b97f4a7c15ULL + r * 0x10001 + i);
    memset(g, 0xEE, n); memset(h, 0xEE, n);
    comm_dev_allgather(&comm, want + me * shard, g, shard, COMM_U8, NULL);
    memcpy(h + me * shard, want + me * shard, shard);
    CommRequest r = comm_dev_iallgather(&comm, h + me * shard, h, shard, COMM_U8, NULL);
    comm_wait(&comm, &r);
    CHECK_BITS("allgather u8", g, want, n, 1);
    CHECK_BITS("iallgather u8 in place", h, want, n, 1);
    free(want); free(g); free(h);
}

// One optimizer step of a tiny GPT-2 parameter table at ZeRO stages 0, 1 and 2, the way the
// trainer does it (see llmc/dist/zero.h). Every rank has its own gradient; the update is
// p -= lr * (g + wd * p) with wd only on weight-decayed tensors (per tensor via zero_intersect).
// All three stages must give bit-identical parameters on every rank, equal to a serial reference
// (every stage sums each element over ranks in the same order), and the same gradient norm.
static void update_range(const ParamTable* pt, const ZeroLayout* z, int rank, float* p_shard, const float* g_shard) {
    const float lr = 0.01f, wd = 0.1f;
    size_t base = zero_shard_begin(z, rank);
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        ZeroRange r = zero_intersect(z, rank, pt->t[id].offset, pt->t[id].numel);
        float decay = pt->t[id].weight_decay ? wd : 0.0f;
        for (size_t i = r.begin; i < r.end; i++)
            p_shard[i - base] -= lr * (g_shard[i - base] + decay * p_shard[i - base]);
    }
}

static void test_zero_stages(void) {
    GPT2Config cfg = { 16, 100, 128, 3, 2, 8 }; // maxT, V, Vp, L, NH, C: small, with odd tensor sizes
    ParamTable pt;
    params_build(&pt, &cfg);
    ZeroLayout z;
    zero_layout_init(&z, pt.total, comm.world, 4);
    size_t P = z.padded, S = z.shard, me = (size_t)comm.rank;
    float* p0 = (float*)callocCheck(P, sizeof(float));
    float* g = (float*)callocCheck(P, sizeof(float));
    float* want = (float*)callocCheck(P, sizeof(float));
    float* got[3];
    double norm[3];
    for (size_t i = 0; i < pt.total; i++) p0[i] = genf(900, 0, i);
    // serial reference: gradient summed in rank order in double, then the update on every element
    memcpy(want, p0, P * sizeof(float));
    double wnorm = 0.0;
    for (size_t i = 0; i < pt.total; i++) { g[i] = (float)ref_sum_f32(901, i); wnorm += (double)g[i] * g[i]; }
    for (int r = 0; r < comm.world; r++) update_range(&pt, &z, r, want + (size_t)r * S, g + (size_t)r * S);
    for (int stage = 0; stage < 3; stage++) {
        float* p = got[stage] = (float*)mallocCheck(P * sizeof(float));
        memcpy(p, p0, P * sizeof(float));
        memset(g, 0, P * sizeof(float));
        for (size_t i = 0; i < pt.total; i++) g[i] = genf(901, comm.rank, i); // this rank's backward
        double sq = 0.0;
        if (stage == 0) {
            comm_allreduce_sum_f32(&comm, g, P);
            for (size_t i = 0; i < P; i++) sq += (double)g[i] * g[i];
            for (int r = 0; r < comm.world; r++) update_range(&pt, &z, r, p + (size_t)r * S, g + (size_t)r * S);
        } else {
            if (stage == 1) {
                comm_reduce_scatter_sum_f32(&comm, g, g + me * S, S);
            } else { // buckets in backward order, each segment reduced to its owner
                ZeroRange rs[ZERO_GPT2_MAX_RANGES];
                ZeroSegment seg[ZERO_GPT2_MAX_RANGES * 8];
                for (int b = 0; b < zero_gpt2_num_buckets(&pt); b++) {
                    int nr = zero_gpt2_bucket(&pt, b, rs);
                    int ns = zero_segments(&z, rs, nr, seg, (int)(sizeof(seg) / sizeof(seg[0])));
                    TEST_CHECK(ns <= (int)(sizeof(seg) / sizeof(seg[0])), "bucket %d: %d segments", b, ns);
                    comm_dev_group_begin(&comm);
                    for (int k = 0; k < ns; k++)
                        comm_reduce_sum_f32(&comm, g + seg[k].begin, g + seg[k].begin, seg[k].end - seg[k].begin, seg[k].owner);
                    comm_dev_group_end(&comm);
                }
            }
            for (size_t i = 0; i < S; i++) sq += (double)g[me * S + i] * g[me * S + i];
            comm_allreduce_sum_f64(&comm, &sq, 1);
            update_range(&pt, &z, comm.rank, p + me * S, g + me * S);
            comm_allgather_f32(&comm, p + me * S, p, S);
        }
        norm[stage] = sq;
        char what[64];
        snprintf(what, sizeof(what), "ZeRO stage %d step", stage);
        CHECK_BITS(what, p, want, P, sizeof(float));
        TEST_CHECK(fabs(norm[stage] - wnorm) <= 1e-12 * wnorm, "stage %d grad norm^2 %.17g vs %.17g", stage, norm[stage], wnorm);
    }
    free(p0); free(g); free(want);
    for (int s2 = 0; s2 < 3; s2++) free(got[s2]);
}

// Every rank must end with the same bytes: compare a checksum with rank 0's.
static void check_same_everywhere(void) {
    double mine = (double)test_failures;
    double max = mine;
    comm_allreduce_max_f64(&comm, &max, 1);
    TEST_CHECK(max == 0.0, "some rank reported %g failures", max);
}

static int64_t g_kill_rank = -1;
static void* killer(void* arg) {
    (void)arg;
    struct timespec ts = { 0, 300 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    fprintf(stderr, "rank %d: killing myself with SIGKILL in the middle of collectives\n", comm.rank);
    fflush(stderr);
    kill(getpid(), SIGKILL);
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// watchdog modes

static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u); // the whole process: main thread, watchdog, MPI's threads
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

// A few "steps" of collectives with step marks, so the watchdog has measured its slowest step.
static void wd_steps(int n) {
    for (int it = 0; it < n; it++) {
        comm_watchdog_op(&comm, "watchdog test step %d", it);
        float x[64] = { 0 };
        comm_allreduce_sum_f32(&comm, x, 64);
        comm_watchdog_step(&comm);
    }
}

// Returns only when the watchdog did not end the job (a failure for every mode but --slow-rank).
static int watchdog_mode(const char* mode, int argc, char** argv) {
    int R = argc >= 3 ? atoi(argv[2]) : 0;
    double timeout = atof(argv[argc - 1]);
    comm_watchdog_start(&comm, timeout);
    comm_watchdog_step(&comm); // training starts
    wd_steps(5);
    fprintf(stderr, "rank %d pid %d: steps done, mode %s\n", comm.rank, (int)getpid(), mode);
    if (strcmp(mode, "--hang-rank") == 0 && comm.rank == R) {
        comm_watchdog_op(&comm, "about to stop");
        kill(getpid(), SIGSTOP);
    } else if (strcmp(mode, "--stuck-rank") == 0 && comm.rank == R) {
        comm_watchdog_op(&comm, "spinning forever");
        for (volatile unsigned long k = 0;; k++) {}
    } else if (strcmp(mode, "--deadlock") == 0) {
        comm_watchdog_op(&comm, "deadlock test");
        float x = 1.0f;
        comm_reduce_sum_f32(&comm, &x, &x, 1, comm.rank); // every rank waits to receive, nobody sends
    } else if (strcmp(mode, "--big-allreduce") == 0) {
        size_t n = (size_t)atol(argv[2]);
        comm_watchdog_op(&comm, "big allreduce");
        double w0 = timer_now_s();
        test_allreduce_f32(n, 900);
        printf("rank %d: allreduce of %zu floats (twice) took %.1f s with a %.1f s watchdog timeout\n", comm.rank, n,
               timer_now_s() - w0, timeout);
        wd_steps(2);
        return 1;
    } else if (strcmp(mode, "--load-swing") == 0) {
        // the machine's load rises: a step of SECS, then one of 2.8 SECS (> SECS + TIMEOUT)
        const double secs = atof(argv[2]);
        for (int i = 0; i < 2; i++) {
            comm_watchdog_op(&comm, "step under load %d", i);
            const double t = i == 0 ? secs : 2.8 * secs;
            struct timespec ts = { (time_t)t, (long)((t - (double)(time_t)t) * 1e9) };
            nanosleep(&ts, NULL);
            comm_barrier(&comm);
            comm_watchdog_step(&comm);
        }
        printf("rank %d: steps of %.1f s and %.1f s with a %.1f s watchdog timeout: not ended\n", comm.rank, secs, 2.8 * secs, timeout);
        return 1;
    } else if (strcmp(mode, "--slow-rank") == 0) {
        double secs = atof(argv[3]);
        double c0 = cpu_seconds(), w0 = timer_now_s();
        if (comm.rank == R && argc >= 6 && strcmp(argv[4], "unbounded") == 0) {
            comm_watchdog_op_unbounded(&comm, "slow checkpoint write");
            struct timespec ts = { (time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9) };
            nanosleep(&ts, NULL);
        } else if (comm.rank == R) {
            comm_watchdog_op(&comm, "slow compute");
            struct timespec ts = { (time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9) };
            nanosleep(&ts, NULL);
        }
        comm_barrier(&comm);
        double cpu = cpu_seconds() - c0, wall = timer_now_s() - w0;
        if (comm.rank != R) {
            TEST_CHECK(wall > 0.8 * secs, "rank %d waited only %.2f s", comm.rank, wall);
            TEST_CHECK(cpu < 0.10 * wall, "rank %d used %.3f s of CPU while waiting %.2f s for rank %d (%.0f%% of a core)", comm.rank,
                       cpu, wall, R, 100.0 * cpu / wall);
            printf("rank %d waited %.2f s for rank %d using %.3f s of CPU (%.1f%% of a core)\n", comm.rank, wall, R, cpu, 100.0 * cpu / wall);
        }
        wd_steps(3);
        return 1;
    }
    wd_steps(1000000);
    fprintf(stderr, "rank %d: collectives kept completing, the watchdog did not end the job\n", comm.rank);
    return 0;
}

// Sub-communicators (hybrid sharding): ranks split by parity, ordered by descending rank; a sum
// and a non-blocking all-gather inside each see only that color's ranks, in the new order.
static void test_split(void) {
    Comm sub;
    const int color = comm.rank % 2;
    comm_split(&comm, color, -comm.rank, &sub);
    int want_world = 0, want_rank = 0;
    for (int r = 0; r < comm.world; r++) if (r % 2 == color) { want_world++; if (r > comm.rank) want_rank++; }
    TEST_CHECK(sub.world == want_world && sub.rank == want_rank, "split: rank %d of %d, want %d of %d", sub.rank, sub.world, want_rank, want_world);
    double x = (double)comm.rank, want = 0.0;
    for (int r = 0; r < comm.world; r++) if (r % 2 == color) want += r;
    comm_allreduce_sum_f64(&sub, &x, 1);
    TEST_CHECK(x == want, "split: sum over color %d is %g, want %g", color, x, want);
    float mine[3] = { (float)comm.rank, (float)comm.rank + 0.5f, -1.0f }, all[3 * 8];
    CommRequest rq = comm_dev_iallgather(&sub, mine, all, 3, COMM_F32, NULL);
    comm_wait(&sub, &rq);
    for (int k = 0; k < sub.world && k < 8; k++) { // sub rank k is the k-th largest rank of the color
        int r = -1, seen = 0;
        for (int q = comm.world - 1; q >= 0; q--) if (q % 2 == color && seen++ == k) { r = q; break; }
        TEST_CHECK(all[3 * k] == (float)r && all[3 * k + 1] == (float)r + 0.5f, "split: all-gather block %d holds %g, want rank %d", k, all[3 * k], r);
    }
    comm_split_free(&sub);
}

int main(int argc, char** argv) {
    if (argc >= 2 && strcmp(argv[1], "--has-mpi") == 0) { printf("%s\n", comm_have_mpi() ? "mpi" : "none"); return 0; }
    comm_init(&comm, &argc, &argv);
    printf("rank %d of %d (local %d of %d), impl %s\n", comm.rank, comm.world, comm.local_rank, comm.local_world, comm_impl_name(&comm));
    const char* ws = getenv("OMPI_COMM_WORLD_SIZE");
    TEST_CHECK(comm.world == (ws ? atoi(ws) : 1), "world %d, launcher says %s", comm.world, ws ? ws : "(none)");

    if (argc >= 3 && strcmp(argv[1], "--fatal-rank") == 0) {
        int r = atoi(argv[2]);
        comm_barrier(&comm);
        if (comm.rank == r) fatal("this is the failure test of test/test_comm.sh", "rank %d fails on purpose", r);
        float x = 1.0f;
        comm_allreduce_sum_f32(&comm, &x, 1); // never completes: rank r is gone
        fprintf(stderr, "rank %d: collective returned although rank %d failed\n", comm.rank, r);
        return 3;
    }
    if (argc >= 2 && (strcmp(argv[1], "--hang-rank") == 0 || strcmp(argv[1], "--stuck-rank") == 0 ||
                      strcmp(argv[1], "--deadlock") == 0 || strcmp(argv[1], "--slow-rank") == 0 ||
                      strcmp(argv[1], "--big-allreduce") == 0 || strcmp(argv[1], "--load-swing") == 0)) {
        if (!watchdog_mode(argv[1], argc, argv)) return 3;
        check_same_everywhere();
        int rc = test_finish(argv[1]);
        comm_finalize(&comm);
        return rc;
    }
    if (argc >= 3 && strcmp(argv[1], "--kill-rank") == 0) {
        g_kill_rank = atoi(argv[2]);
        comm_barrier(&comm);
        pthread_t th;
        if (comm.rank == g_kill_rank && pthread_create(&th, NULL, killer, NULL) != 0) { perror("pthread_create"); return 2; }
        size_t n = (size_t)1 << 20;
        float* buf = (float*)callocCheck(n, sizeof(float));
        for (int it = 0; it < 1000000; it++) comm_allreduce_sum_f32(&comm, buf, n);
        fprintf(stderr, "rank %d: collectives kept completing although rank %lld was killed\n", comm.rank, (long long)g_kill_rank);
        return 3;
    }

    // sizes around the small-message threshold (1024) and, with a small LLMC_COMM_TEST_SCRATCH,
    // across many chunks; odd sizes leave ranks with empty pieces; the largest messages go in
    // several COMM_PIECE_BYTES pieces
    // With tiny scratch buffers a chunk holds a few elements: the largest sizes would take tens
    // of thousands of chunk round trips, each waiting for a time slice when the ranks are
    // oversubscribed on a loaded machine (over a minute); sizes up to 4099 cross hundreds of chunks.
    const size_t most = getenv("LLMC_COMM_TEST_SCRATCH") ? 4099 : (size_t)-1;
    const size_t sizes[] = { 0, 1, 2, 3, 5, 64, 1000, 1024, 1025, 4099, 70001, 400003 };
    const size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
    for (size_t k = 0; k < nsizes && sizes[k] <= most; k++) {
        test_allreduce_f32(sizes[k], 100 + k);
        test_allreduce_f64(sizes[k], 200 + k);
        test_allreduce_i64_max(sizes[k]);
    }
    const size_t shards[] = { 0, 1, 7, 64, 1000, 33333, 200001 };
    for (size_t k = 0; k < sizeof(shards) / sizeof(shards[0]) && shards[k] <= most; k++) {
        for (int ip = 0; ip < 2; ip++) {
            test_reduce_scatter(shards[k], 300 + k, ip);
            test_allgather(shards[k], 400 + k, ip);
        }
        test_dev_bf16(shards[k], 500 + k);
        test_nonblocking(shards[k], 700 + k, COMM_F32);
        test_nonblocking(shards[k], 800 + k, COMM_BF16);
        test_bytes(shards[k] + 3, 900 + k);
    }
    for (int root = 0; root < comm.world; root++) {
        test_reduce(3, 600, root, 0);
        test_reduce(20000, 601, root, 1);
        test_broadcast(0, root);
        test_broadcast(3, root);
        test_broadcast(100000, root);
        test_broadcast(700001, root);
    }
    if (300001 <= most) test_reduce(300001, 602, comm.world - 1, 0);
    test_zero_stages();
    test_split();
    {   // agreement check: same bytes everywhere, then rank 1 (if any) different
        char cfg[40]; memset(cfg, 7, sizeof(cfg));
        TEST_CHECK(comm_count_differing(&comm, cfg, sizeof(cfg)) == 0, "identical buffers reported different");
        if (comm.rank == 1) cfg[39] = 8;
        int want_diff = comm.world > 1 ? 1 : 0;
        int got_diff = comm_count_differing(&comm, cfg, sizeof(cfg));
        TEST_CHECK(got_diff == want_diff, "count_differing %d, want %d", got_diff, want_diff);
    }
    // every message above went to MPI in pieces (checked where there are messages: MPI, 2+ ranks)
    TEST_CHECK(max_msg_bytes() <= COMM_PIECE_BYTES, "the largest MPI message was %zu bytes, more than a piece (%zu)",
               max_msg_bytes(), COMM_PIECE_BYTES);
    if (comm.world > 1 && comm.rank == 0) printf("largest MPI message: %zu bytes\n", max_msg_bytes());
    comm_barrier(&comm);
    check_same_everywhere();
    char name[64];
    snprintf(name, sizeof(name), "test_comm rank %d/%d", comm.rank, comm.world);
    int rc = test_finish(name);
    comm_finalize(&comm);
    return rc;
}
