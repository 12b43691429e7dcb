// CPU backend: token + position embeddings, forward and a deterministic backward.
#include <stddef.h>
#include "cpu/ops_cpu.h"
#include "cpu/parallel.h"

void cpu_encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float* we = wte + (size_t)inp[bt] * C;
        const float* pe = wpe + (size_t)(bt % T) * C;
        float* o = out + (size_t)bt * C;
        #pragma omp simd
        for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
    }
}

void cpu_encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C) {
    int nblk = (C + COLBLOCK - 1) / COLBLOCK;
    if (dwte != NULL) {
        // Several positions may hold the same token: a thread owns a column block of every
        // row of dwte and adds positions in order, so there is no race and no reordering.
        #pragma omp parallel for schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * COLBLOCK, c1 = c0 + COLBLOCK < C ? c0 + COLBLOCK : C;
            for (int bt = 0; bt < B * T; bt++) {
                float* d = dwte + (size_t)inp[bt] * C;
                const float* g = dout + (size_t)bt * C;
                #pragma omp simd
                for (int c = c0; c < c1; c++) d[c] += g[c];
            }
        }
    }
    if (dwpe != NULL) {
        #pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++) {
            float* d = dwpe + (size_t)t * C;
            for (int b = 0; b < B; b++) {
                const float* g = dout + ((size_t)b * T + t) * C;
                #pragma omp simd
                for (int c = 0; c < C; c++) d[c] += g[c];
            }
        }
    }
}
