// The host collectives of llmc/comm/comm.h alone, without training around them: what each ZeRO stage's
// communication costs per step on CPU ranks (stage 0: one all-reduce; stages 1/2: a reduce of
// every rank's piece to its owner and a broadcast back; stage 3: reduce-scatter + all-gathers).
//   make bench-cpu && mpirun -np 2 build/cpu/dev/bench_comm [N] [REPS]
// N floats (default 31 M, a quarter of GPT-2 124M), REPS timed repetitions after one warm-up
// (default 3); prints the median milliseconds of each pattern (rank 0). Run it on a quiet machine:
// ranks oversubscribing the cores measure the scheduler as much as the library.
#include <stdio.h>
#include <stdlib.h>
#include "base/check.h"
#include "comm/comm.h"
#include "base/timer.h"

#define MAX_REPS 64

static double median(double* x, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[j - 1] > x[j]; j--) { double t = x[j]; x[j] = x[j - 1]; x[j - 1] = t; }
    return x[n / 2];
}

int main(int argc, char** argv) {
    Comm c;
    comm_init(&c, &argc, &argv);
    const size_t n = argc > 1 ? (size_t)atol(argv[1]) : 31000000;
    const int reps = argc > 2 ? atoi(argv[2]) : 3;
    if (reps < 1 || reps > MAX_REPS) fatal("give 1 to 64 repetitions", "REPS %d", reps);
    const size_t shard = n / (size_t)c.world, W = (size_t)c.world;
    float* a = (float*)mallocCheck(W * shard * sizeof(float) + 4);
    for (size_t i = 0; i < W * shard; i++) a[i] = (float)(i % 7);
    double t[4][MAX_REPS];
    for (int it = -1; it < reps; it++) {
        double ms[4];
        comm_barrier(&c);
        double t0 = timer_now_s();
        comm_allreduce_sum_f32(&c, a, W * shard);
        double t1 = timer_now_s();
        for (int r = 0; r < c.world; r++) comm_reduce_sum_f32(&c, a + r * shard, a + r * shard, shard, r);
        for (int r = 0; r < c.world; r++) comm_broadcast(&c, a + r * shard, shard * sizeof(float), r);
        double t2 = timer_now_s();
        comm_reduce_scatter_sum_f32(&c, a, a + c.rank * shard, shard);
        double t3 = timer_now_s();
        comm_allgather_f32(&c, a + c.rank * shard, a, shard);
        double t4 = timer_now_s();
        ms[0] = t1 - t0; ms[1] = t2 - t1; ms[2] = t3 - t2; ms[3] = t4 - t3;
        comm_allreduce_max_f64(&c, ms, 4); // the slowest rank's
        for (int k = 0; k < 4 && it >= 0; k++) t[k][it] = 1e3 * ms[k];
    }
    if (c.rank == 0)
        printf("%d ranks, %zu floats: all-reduce %.0f ms | reduce to owners + broadcast from them %.0f ms | "
               "reduce-scatter %.0f ms | all-gather %.0f ms (median of %d)\n", c.world, W * shard, median(t[0], reps),
               median(t[1], reps), median(t[2], reps), median(t[3], reps), reps);
    free(a);
    comm_finalize(&c);
    return 0;
}
