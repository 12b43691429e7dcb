// Thin wrapper around every GEMM of the CUDA backend. The production build calls cuBLASLt
// (bf16 in/out, fp32 compute, bias / GELU epilogues); the emulated build (LLMC_CUDA_EMULATED,
// the CUDA-on-CPU test harness) converts to fp32 and calls cblas_sgemm instead, since library
// kernels cannot run there. Nothing else in the backend touches cuBLASLt.
#ifndef LLMC_CUDA_GEMM_CUH
#define LLMC_CUDA_GEMM_CUH

// Host declarations only (floatX from ops.h), so host C++ such as test/test_cuda_ops.cpp, compiled
// with g++ in the CUDA build, can include it; the kernels' helpers stay in common.cuh.
#include "ops/ops.h"

void gemm_init(void);      // idempotent; creates the cuBLASLt handle and workspace
void gemm_release(void);   // frees them and the cached plans (at exit)
// GEMM plans (descriptors, layouts, algorithm) built so far: one per distinct shape / epilogue,
// cached (gemm.cu), so a training loop stops building them after its first step.
long gemm_plans_built(void);

// What the epilogue does with the aux matrix (m x n, leading dimension ldd, like D).
typedef enum {
    GEMM_PLAIN = 0,     // no aux
    GEMM_GELU_AUX = 1,  // aux = the result (the pre-activation), D = gelu(result)
                        // (CUBLASLT_EPILOGUE_GELU_AUX[_BIAS])
    GEMM_DGELU = 2,     // D = result * gelu'(aux): aux is the forward's pre-activation, read
                        // (CUBLASLT_EPILOGUE_DGELU); no bias, no accumulate
} GemmEpilogue;

// Column-major (BLAS convention) D[m, n] = op(A)[m, k] @ op(B)[k, n], fp32 accumulation, with
//   bias != NULL:      + bias[m] on every column (CUBLASLT_EPILOGUE_BIAS);
//   epi, aux:          the GELU epilogues above (aux is written by GEMM_GELU_AUX, read by
//                      GEMM_DGELU; m must be a multiple of 8 for either);
//   accumulate:        D = result + D (beta = 1). D is bf16, so the sum is rounded to bf16 each
//                      time: accumulating many micro-steps in place loses low-order bits. That is
//                      the accepted cost of bf16 gradients (as in llm.c).
// op(X) = X^T when trans is set. A is stored (trans ? k x m : m x k) with leading dim lda, etc.
void gemm_bf16(int transa, int transb, int m, int n, int k,
               const floatX* A, int lda, const floatX* B, int ldb, floatX* D, int ldd,
               const floatX* bias, GemmEpilogue epi, floatX* aux, int accumulate);

#endif // LLMC_CUDA_GEMM_CUH
