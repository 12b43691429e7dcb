// CPU backend: GEMMs in bf16 with fp32 accumulation, through oneDNN (llmc/cpu/gemm.c). Internal
// to llmc/cpu/. The CPU ops linked as the CUDA op tests' reference (libcpu_ops.a, which travels
// to GPU machines without oneDNN) get llmc/cpu/gemm_refonly.c instead: those tests never switch
// the CPU backend to bf16.
#ifndef LLMC_CPU_GEMM_H
#define LLMC_CPU_GEMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Row-major C[M, N] = op(A)[M, K] op(B)[K, N] (+ C when accumulate), A and B bf16 bit
// patterns with leading dimensions lda / ldb (op = transpose when ta / tb), C fp32 with ldc = N.
void cpu_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t* A, int lda,
                   const uint16_t* B, int ldb, int accumulate, float* C);

#ifdef __cplusplus
}
#endif
#endif // LLMC_CPU_GEMM_H
