// Sub-communicators with NCCL attached (comm_split's device side, llmc/cuda/comm_nccl.cu): the
// split of hybrid sharding (--zero 3 --shard-group K) on GPUs. Real GPUs only: the CUDA-on-CPU
// harness has no NCCL. Every rank splits its communicator twice, as llmc/dist/gradsync.c does: into
// groups of K consecutive ranks and into the replicas across groups (one rank of every group).
// Through each sub-communicator it runs every device collective on device buffers and checks the
// results exactly (small integers in fp32 and bf16: every order of additions gives the same sum):
// all-reduce, reduce-scatter, all-gather, reduce to the last rank, broadcast from it, and the
// non-blocking all-gather and reduce-scatter waited for on the caller's stream.
//   test_comm_split_gpu              one process (the GPU check): the split of one rank, K = 1
//   mpirun -np N test_comm_split_gpu [K]   N GPUs (a CUDA build with MPI), groups of K (default 2)
// With one rank comm_nccl_attach creates no NCCL communicator (the device calls are copies): this
// checks that the split works with NCCL attached and that its device table moves device memory.
// With N > 1 ranks the sub-communicators are NCCL communicators made by ncclCommSplit.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/bf16.h"
#include "base/check.h"
#include "comm/comm.h"
#include "test/test.h"

#define cudaOk(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) fatal(NULL, "%s: %s", #call, cudaGetErrorString(e_)); } while (0)

static Comm world;

// The value rank r of comm holds at element i: a small integer, so sums are exact in fp32 and bf16.
static float val(int r, size_t i) { return (float)((int)((i * 7 + (size_t)r * 3) % 13) - 6 + 16 * r); }

// Copies n host floats to the device as fp32 (es 4) or bf16 (es 2), and back.
static void* to_dev(const float* h, size_t n, size_t es) {
    void* d = NULL;
    cudaOk(cudaMalloc(&d, n * es + 4));
    void* tmp = mallocCheck(n * es + 4);
    for (size_t i = 0; i < n; i++) {
        if (es == 4) ((float*)tmp)[i] = h[i];
        else ((uint16_t*)tmp)[i] = bf16_from_f32(h[i]);
    }
    cudaOk(cudaMemcpy(d, tmp, n * es, cudaMemcpyHostToDevice));
    free(tmp);
    return d;
}
static void from_dev(float* h, const void* d, size_t n, size_t es) {
    void* tmp = mallocCheck(n * es + 4);
    cudaOk(cudaDeviceSynchronize());
    cudaOk(cudaMemcpy(tmp, d, n * es, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) h[i] = es == 4 ? ((float*)tmp)[i] : bf16_to_f32(((uint16_t*)tmp)[i]);
    free(tmp);
}

static int check(const char* what, const Comm* c, const float* got, const float* want, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) if (got[i] != want[i]) { if (!bad) first = i; bad++; }
    TEST_CHECK(bad == 0, "%s (rank %d of %d in the sub-communicator, world rank %d): %zu of %zu wrong, first at %zu: %g, want %g",
               what, c->rank, c->world, world.rank, bad, n, first, bad ? got[first] : 0.0f, bad ? want[first] : 0.0f);
    return bad == 0;
}

// The sum over the sub-communicator's ranks of val(world rank, i): rank r of c is world rank wr[r].
static float sum_at(const int* wr, int n, size_t i) {
    float s = 0.0f;
    for (int r = 0; r < n; r++) s += val(wr[r], i);
    return s;
}

static void test_sub(Comm* c, const int* wr, const char* name, CommDtype dt, cudaStream_t stream) {
    const size_t es = dt == COMM_F32 ? 4 : 2, shard = 1000, n = shard * (size_t)c->world;
    const int W = c->world, me = c->rank, last = W - 1;
    float* h = (float*)mallocCheck(n * sizeof(float));
    float* want = (float*)mallocCheck(n * sizeof(float));
    float* got = (float*)mallocCheck(n * sizeof(float));
    char what[96];
    for (size_t i = 0; i < n; i++) { h[i] = val(world.rank, i); want[i] = sum_at(wr, W, i); }
    void* a = to_dev(h, n, es);
    void* b = to_dev(h, n, es);
    void* g = to_dev(h, n, es);
    comm_dev_allreduce_sum(c, a, n, dt, stream);
    from_dev(got, a, n, es);
    snprintf(what, sizeof(what), "%s %s all-reduce", name, dt == COMM_F32 ? "f32" : "bf16");
    check(what, c, got, want, n);
    comm_dev_reduce_scatter_sum(c, b, (char*)b + (size_t)me * shard * es, shard, dt, stream); // in place
    comm_dev_allgather(c, (char*)b + (size_t)me * shard * es, b, shard, dt, stream);           // in place
    from_dev(got, b, n, es);
    snprintf(what, sizeof(what), "%s reduce-scatter + all-gather", name);
    check(what, c, got, want, n);
    void* r = to_dev(h, n, es);
    comm_dev_group_begin(c);
    comm_dev_reduce_sum(c, r, r, n, dt, last, stream);
    comm_dev_group_end(c);
    comm_dev_broadcast(c, r, n * es, last, stream);
    from_dev(got, r, n, es);
    snprintf(what, sizeof(what), "%s reduce to rank %d + broadcast", name, last);
    check(what, c, got, want, n);
    // non-blocking: reduce-scatter out of place into g's own block, then all-gather it
    void* o = to_dev(h, shard, es);
    CommRequest q = comm_dev_ireduce_scatter_sum(c, g, o, shard, dt, stream);
    comm_wait(c, &q);
    cudaOk(cudaMemcpyAsync((char*)g + (size_t)me * shard * es, o, shard * es, cudaMemcpyDeviceToDevice, stream));
    q = comm_dev_iallgather(c, (char*)g + (size_t)me * shard * es, g, shard, dt, stream);
    comm_wait(c, &q);
    from_dev(got, g, n, es);
    snprintf(what, sizeof(what), "%s non-blocking reduce-scatter + all-gather", name);
    check(what, c, got, want, n);
    cudaFree(a); cudaFree(b); cudaFree(g); cudaFree(r); cudaFree(o);
    free(h); free(want); free(got);
}

int main(int argc, char** argv) {
    comm_init(&world, &argc, &argv);
    if (world.world > 64) fatal("run it on at most 64 ranks", "%d ranks", world.world);
    int K = argc > 1 ? atoi(argv[1]) : (world.world > 1 ? 2 : 1);
    if (K < 1 || world.world % K) fatal("give a group size that divides the number of ranks", "group size %d, %d ranks", K, world.world);
    int ndev = 0;
    cudaOk(cudaGetDeviceCount(&ndev));
    cudaOk(cudaSetDevice(world.local_rank % ndev));
    comm_nccl_attach(&world);
    cudaStream_t stream;
    cudaOk(cudaStreamCreate(&stream));
    Comm group, replica;
    comm_split(&world, world.rank / K, world.rank, &group);   // consecutive ranks
    comm_split(&world, world.rank % K, world.rank, &replica); // one of every group
    TEST_CHECK(group.world == K && group.rank == world.rank % K, "group: rank %d of %d, want %d of %d", group.rank, group.world,
               world.rank % K, K);
    TEST_CHECK(replica.world == world.world / K && replica.rank == world.rank / K, "replica: rank %d of %d", replica.rank, replica.world);
    TEST_CHECK(group.dev != group.ops && replica.dev != replica.ops, "the sub-communicators have no device table of their own");
    printf("world rank %d of %d: group %d of %d, replica %d of %d, device calls %s\n", world.rank, world.world, group.rank, group.world,
           replica.rank, replica.world, comm_impl_name(&group));
    int gw[64], rw[64], ww[64]; // world ranks of the sub-communicators' ranks
    for (int r = 0; r < group.world; r++) gw[r] = world.rank / K * K + r;
    for (int r = 0; r < replica.world; r++) rw[r] = world.rank % K + r * K;
    for (int r = 0; r < world.world; r++) ww[r] = r;
    for (int t = 0; t < 2; t++) {
        const CommDtype dt = t ? COMM_BF16 : COMM_F32;
        test_sub(&group, gw, "group", dt, stream);
        test_sub(&replica, rw, "replica", dt, stream);
        test_sub(&world, ww, "world", dt, NULL);
    }
    comm_split_free(&replica);
    comm_split_free(&group);
    cudaOk(cudaStreamDestroy(stream));
    comm_nccl_detach(&world);
    int rc = test_finish("test_comm_split");
    comm_finalize(&world);
    return rc;
}
