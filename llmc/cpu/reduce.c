// CPU backend: reductions in double (sum of squares for the gradient norm, sum of the per-token
// losses, the per-sequence log-probabilities of the preference objectives).
#include "cpu/ops_cpu.h"
#include "cpu/parallel.h"

double cpu_sum_squares(const float* x, size_t n) {
    double s = 0.0;
    #pragma omp parallel for simd reduction(+:s) schedule(static) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

double cpu_sum_f32(const float* x, size_t n) {
    double s = 0.0;
    #pragma omp parallel for simd reduction(+:s) schedule(static) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) s += (double)x[i];
    return s;
}

void cpu_sum_squares_acc(double* acc, const float* x, size_t n) { *acc += cpu_sum_squares(x, n); }
void cpu_sum_f32_acc(double* acc, const float* x, size_t n) { *acc += cpu_sum_f32(x, n); }

// One sequence per iteration, its tokens in order: deterministic whatever the threads.
void cpu_seq_logp_sums(double* out, const float* losses, const int* ranges, int S) {
    #pragma omp parallel for schedule(static) if (S > 64)
    for (int s = 0; s < S; s++) {
        double acc = 0.0;
        for (int i = ranges[2 * s]; i < ranges[2 * s + 1]; i++) acc += (double)losses[i];
        out[s] = -acc;
    }
}
