// Double-precision references of ops, written from their definitions (not from either backend's
// code), for the op tests of both backends: test/test_ops.c (CPU) and test/test_cuda_ops.cpp
// (the CUDA kernels). C and C++.
#ifndef LLMC_TEST_REF_OPS_H
#define LLMC_TEST_REF_OPS_H

#include <math.h>
#include <stddef.h>

#define REF_GELU_K sqrt(2.0 / M_PI)

// tanh-approximation GELU ("gelu_new") and its derivative
static inline double ref_gelu(double x) { return 0.5 * x * (1.0 + tanh(REF_GELU_K * (x + 0.044715 * x * x * x))); }
static inline double ref_gelu_grad(double x) {
    double t = tanh(REF_GELU_K * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * REF_GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
}

// The matmul backward, accumulated into gi, gw, gb: gi += g W, gw += g^T x, gb += the column sums
// of g (g: N x OC, x: N x C, W: OC x C; the float inputs are exact in double).
static inline void ref_matmul_backward(double* gi, double* gw, double* gb, const float* g, const float* x,
                                       const float* w, int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double go = g[(size_t)n * OC + o];
            gb[o] += go;
            for (int c = 0; c < C; c++) {
                gi[(size_t)n * C + c] += go * w[(size_t)o * C + c];
                gw[(size_t)o * C + c] += go * x[(size_t)n * C + c];
            }
        }
}

#endif // LLMC_TEST_REF_OPS_H
