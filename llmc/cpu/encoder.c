// CPU backend: token + position embeddings, forward and a deterministic backward. Positions are
// t, or given per row (packed records restart at 0 with each record).
#include <stddef.h>
#include "cpu/ops_cpu.h"
#include "cpu/parallel.h"

void cpu_encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, const int* pos, int B, int T, int C) {
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float* we = wte + (size_t)inp[bt] * C;
        const float* pe = wpe + (size_t)(pos ? pos[bt] : bt % T) * C;
        float* o = out + (size_t)bt * C;
        #pragma omp simd
        for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
    }
}

// d[idx[n], :] += g[n, :] for the N rows in order. Several rows may share an index: a thread owns
// a column block of every row of d and adds the rows in order, so there is no race and no
// reordering.
static void add_rows_at(float* d, const int* idx, const float* g, int N, int C) {
    int nblk = (C + COLBLOCK - 1) / COLBLOCK;
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * COLBLOCK, c1 = c0 + COLBLOCK < C ? c0 + COLBLOCK : C;
        for (int n = 0; n < N; n++) {
            float* dr = d + (size_t)idx[n] * C;
            const float* gr = g + (size_t)n * C;
            #pragma omp simd
            for (int c = c0; c < c1; c++) dr[c] += gr[c];
        }
    }
}

void cpu_encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, const int* pos, int B, int T, int C) {
    if (dwte != NULL) add_rows_at(dwte, inp, dout, B * T, C);
    if (dwpe != NULL && pos != NULL) add_rows_at(dwpe, pos, dout, B * T, C);
    else if (dwpe != NULL) {
        // positions t: each row of dwpe has one writer, which adds the batch rows in order
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
