// Times NF4 quantization (double quantization, as QLoRA uses it) and dequantization of the
// matmul weights of GPT-2 124M (12 layers of qkv 2304x768, attn proj 768x768, fc 3072x768,
// mlp proj 768x3072: 84.9M weights; embeddings stay unquantized). Not a test.
//   make bench-cpu && OMP_NUM_THREADS=2 build/cpu/dev/bench_nf4
#include "ops/nf4.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    const int64_t shapes[4][2] = {{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}};
    const int64_t max_n = 3072 * 768;
    float* w = (float*)malloc((size_t)max_n * sizeof(float));
    float* y = (float*)malloc((size_t)max_n * sizeof(float));
    if (!w || !y) { fprintf(stderr, "out of memory\n"); return 1; }
    uint32_t s = 1;
    for (int64_t i = 0; i < max_n; i++) {  // roughly N(0, 0.02)-sized values
        s = s * 1664525u + 1013904223u;
        w[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.07f;
    }
    double tq = 0.0, td = 0.0;
    size_t bytes = 0;
    int64_t n = 0;
    for (int layer = 0; layer < 12; layer++) {
        for (int k = 0; k < 4; k++) {
            NF4Tensor t;
            double t0 = omp_get_wtime();
            nf4_quantize(&t, w, 2, shapes[k], 1);
            double t1 = omp_get_wtime();
            nf4_dequantize(&t, y);
            double t2 = omp_get_wtime();
            tq += t1 - t0;
            td += t2 - t1;
            bytes += nf4_bytes(&t);
            n += t.n;
            nf4_free(&t);
        }
    }
    printf("GPT-2 124M matmul weights: %.1fM params, %d OpenMP threads\n", (double)n / 1e6, omp_get_max_threads());
    printf("  quantize (double quant): %.3f s, %.0f M params/s\n", tq, (double)n / tq / 1e6);
    printf("  dequantize to fp32:      %.3f s, %.0f M params/s\n", td, (double)n / td / 1e6);
    printf("  size: %.1f MiB (%.4f bits/param) instead of %.1f MiB fp32\n", (double)bytes / 1048576.0,
           8.0 * (double)bytes / (double)n, (double)n * 4.0 / 1048576.0);
    free(w);
    free(y);
    return 0;
}
