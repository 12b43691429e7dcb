// CPU backend: matmul forward (with bias and GELU epilogues) and backward, GEMMs through CBLAS
// (OpenBLAS), the bias gradient as deterministic column-block sums.
#include <stddef.h>
#include <cblas.h>
#include "cpu/ops_cpu.h"
#include "cpu/parallel.h"
#include "cpu/vecmath.h"

void cpu_matmul_forward(float* out, float* gelu_out, const float* inp, const float* weight,
                        const float* bias, int N, int C, int OC) {
    // out[N,OC] = inp[N,C] * weight[OC,C]^T. One row (token-by-token generation with the KV
    // cache) is a GEMV: sgemm would first pack the whole weight matrix, 2-3x the cost here.
    if (N == 1) cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.0f, weight, C, inp, 1, 0.0f, out, 1);
    else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C,
                     0.0f, out, OC);
    if (bias == NULL && gelu_out == NULL) return;
    // epilogue: one pass over the output while it is still warm in L2/L3
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* o = out + (size_t)n * OC;
        if (bias != NULL) {
            #pragma omp simd
            for (int j = 0; j < OC; j++) o[j] += bias[j];
        }
        if (gelu_out != NULL) {
            float* g = gelu_out + (size_t)n * OC;
            #pragma omp simd
            for (int j = 0; j < OC; j++) g[j] = vm_gelu(o[j]);
        }
    }
}

void cpu_matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, int N, int C, int OC, int accumulate) {
    if (dinp != NULL) // dinp[N,C] (+)= dout[N,OC] * weight[OC,C]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                    accumulate ? 1.0f : 0.0f, dinp, C);
    if (dweight != NULL) // dweight[OC,C] += dout[N,OC]^T * inp[N,C]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C,
                    1.0f, dweight, C);
    if (dbias != NULL) {
        int nblk = (OC + COLBLOCK - 1) / COLBLOCK;
        #pragma omp parallel for schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int o0 = blk * COLBLOCK, o1 = o0 + COLBLOCK < OC ? o0 + COLBLOCK : OC;
            float acc[COLBLOCK];
            for (int j = 0; j < COLBLOCK; j++) acc[j] = 0.0f;
            for (int n = 0; n < N; n++) {
                const float* g = dout + (size_t)n * OC;
                #pragma omp simd
                for (int j = o0; j < o1; j++) acc[j - o0] += g[j];
            }
            for (int j = o0; j < o1; j++) dbias[j] += acc[j - o0];
        }
    }
}

void cpu_matmul_backward_gelu(float* dpre, float* dweight, float* dbias, const float* dout,
                              const float* inp, const float* pre, const float* weight, int N, int C,
                              int OC) {
    cpu_matmul_backward(dpre, dweight, dbias, dout, inp, weight, N, C, OC, 0);
    // the GELU derivative in place (the same product as gelu_backward into a zeroed buffer)
    cpu_gelu_backward(dpre, pre, dpre, (size_t)N * C, 0);
}
