// CPU backend: GEMMs in bf16 or fp16 with fp32 accumulation, through oneDNN, or widened to fp32
// where oneDNN has no matmul for them (llmc/cpu/gemm.c). Internal to llmc/cpu/. The CPU ops linked as the
// CUDA op tests' reference (libcpu_ops.a, which travels to GPU machines without oneDNN) get
// llmc/cpu/gemm_refonly.c instead: those tests never switch the CPU backend to bf16.
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

// The same with fp16 operands (IEEE binary16 bit patterns; f16 = 1) or bf16 ones (f16 = 0). fp16
// GEMMs are always widened (oneDNN's fp16 matmul needs AVX512-FP16; --dtype fp16 on the CPU is
// the emulation of a GPU's fp16 training: its numerics, not its speed), and their product is
// rounded to fp16 before it is written or added to C, as torch.autocast's fp16 GEMMs return
// fp16 (the accumulating ones through a scratch of M x N floats, grown to the largest and kept;
// the memory plan's "fp16 product scratch").
void cpu_gemm_16(int f16, int ta, int tb, int M, int N, int K, const uint16_t* A, int lda,
                 const uint16_t* B, int ldb, int accumulate, float* C);

// Whether this CPU's oneDNN lacks a bf16 matmul (probed once; gemm_refonly.c: no), so that
// cpu_gemm_bf16 goes through cpu_gemm_widen with a buffer of CPU_GEMM_WIDEN_BYTES.
int cpu_gemm_bf16_widened(void);
#define CPU_GEMM_WIDEN_BYTES ((size_t)16 << 20)
// The GEMM with its 16-bit operands (fp16 when f16, else bf16) widened to fp32 in panels held in
// buf (buf_floats floats, at least 512; none when K = 0) and multiplied by sgemm.
void cpu_gemm_widen(int f16, int ta, int tb, int M, int N, int K, const uint16_t* A, int lda,
                    const uint16_t* B, int ldb, int accumulate, float* C, float* buf, size_t buf_floats);

#ifdef __cplusplus
}
#endif
#endif // LLMC_CPU_GEMM_H
