// sgemm throughput on the GPT-2 124M training shapes (B*T = 1024 rows), through the same CBLAS
// calls the CPU backend makes (forward, dinp and dweight orientations). Not a test: a measuring
// tool for choosing/tuning the BLAS. Build: make bench-cpu (rule in mk/bench.mk).
//   build/cpu/dev/bench_gemm [threads] [reps] [split]   (split=1: OpenMP splits rows, 1-thread sgemm each)
//   OPENBLAS_CORETYPE=Haswell build/cpu/dev/bench_gemm   (force a kernel set to compare)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cblas.h>
#include <omp.h>
#include "ops.h"
#include "../llmc/timer.h"

// CPU time of all threads: on a shared (loaded) machine wall time says little, while GFLOP per
// CPU-second still shows the kernels' efficiency (spin-waiting threads count against it).
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double best_cpu = 1e30;

static float* rand_buf(size_t n) {
    float* p = (float*)ops_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = (float)((double)rand() / RAND_MAX - 0.5);
    return p;
}

// kind 0: out[N,OC] = inp[N,C] W[OC,C]^T   (forward)
// kind 1: dinp[N,C] += dout[N,OC] W[OC,C]  (backward, input grad)
// kind 2: dW[OC,C] += dout[N,OC]^T inp[N,C] (backward, weight grad)
static int split = 0;   // 1: OpenMP splits the rows, OpenBLAS runs single-threaded per slice

static double bench(int kind, int N, int C, int OC, int reps) {
    float* inp = rand_buf((size_t)N * C);
    float* w = rand_buf((size_t)OC * C);
    float* out = rand_buf((size_t)N * OC);
    double best = 1e30;
    best_cpu = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = timer_now_s(), c0 = cpu_s();
        if (split) {
            // one single-threaded sgemm per OpenMP thread on a slice of the output rows
            #pragma omp parallel
            {
                int nt = omp_get_num_threads(), id = omp_get_thread_num();
                int M = kind == 2 ? OC : N;
                int r0 = (int)((long)M * id / nt), r1 = (int)((long)M * (id + 1) / nt);
                if (kind == 0)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, OC, C, 1.0f, inp + (size_t)r0 * C, C,
                                w, C, 0.0f, out + (size_t)r0 * OC, OC);
                else if (kind == 1)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, C, OC, 1.0f, out + (size_t)r0 * OC, OC,
                                w, C, 1.0f, inp + (size_t)r0 * C, C);
                else
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, C, N, 1.0f, out + r0, OC, inp, C,
                                1.0f, w + (size_t)r0 * C, C);
            }
        } else if (kind == 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, 0.0f, out, OC);
        else if (kind == 1)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, out, OC, w, C, 1.0f, inp, C);
        else
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, out, OC, inp, C, 1.0f, w, C);
        double dt = timer_now_s() - t0, dc = cpu_s() - c0;
        if (r > 0 && dt < best) best = dt; // first call warms caches / thread pool
        if (r > 0 && dc < best_cpu) best_cpu = dc;
    }
    ops_free(inp); ops_free(w); ops_free(out);
    return 2.0 * N * C * OC / best * 1e-9;
}

int main(int argc, char** argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    split = argc > 3 ? atoi(argv[3]) : 0;
    ops_init(threads);
    if (split) openblas_set_num_threads(1);
    printf("backend: %s%s\n", ops_backend_name(), split ? " [rows split by OpenMP, 1-thread sgemm per slice]" : "");
    const char* ct = getenv("OPENBLAS_CORETYPE");
    printf("OPENBLAS_CORETYPE=%s\n", ct ? ct : "(unset)");
    static const struct { const char* name; int C, OC; } shapes[] = {
        {"c_attn  768->2304", 768, 2304}, {"c_proj  768->768 ", 768, 768},
        {"c_fc    768->3072", 768, 3072}, {"mlp_prj 3072->768", 3072, 768},
        {"lm_head 768->50304", 768, 50304},
    };
    const int N = 1024;
    double tot_flop = 0, tot_time = 0, tot_cpu = 0;
    printf("%-20s %10s %10s %10s   wall GFLOP/s (per CPU-second), N=%d\n", "shape", "fwd", "bwd dinp", "bwd dW", N);
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        double g[3], gc[3];
        for (int k = 0; k < 3; k++) {
            g[k] = bench(k, N, shapes[s].C, shapes[s].OC, reps);
            double flop = 2.0 * N * shapes[s].C * shapes[s].OC;
            gc[k] = flop / best_cpu * 1e-9;
            // weight the per-step mix: 12 layers for the block matmuls, 1 for the lm head
            double mult = s == 4 ? 1.0 : 12.0;
            tot_flop += mult * flop; tot_time += mult * flop / (g[k] * 1e9); tot_cpu += mult * best_cpu;
        }
        printf("%-20s %5.0f (%3.0f) %5.0f (%3.0f) %5.0f (%3.0f)\n", shapes[s].name, g[0], gc[0], g[1], gc[1], g[2], gc[2]);
    }
    printf("GPT-2 124M step matmuls (B*T=1024): %.0f GFLOP in %.2f s -> %.1f GFLOP/s (%.1f per CPU-second)\n",
           tot_flop * 1e-9, tot_time, tot_flop / tot_time * 1e-9, tot_flop / tot_cpu * 1e-9);
    return 0;
}
