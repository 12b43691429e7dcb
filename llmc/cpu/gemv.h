// CPU backend: the one-row bf16 GEMM of generation (llmc/cpu/gemv.c). Internal to llmc/cpu/.
#ifndef LLMC_CPU_GEMV_H
#define LLMC_CPU_GEMV_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
// Whether this CPU (and OS) runs AVX512-BF16 instructions.
int cpu_has_avx512bf16(void);
// y[N] = x[K] . w[N, K]^T (w rows ldw apart; bf16 bit patterns, fp32 accumulation, y written).
// Returns 0 without touching y where the CPU has no AVX512-BF16 (the caller uses oneDNN).
int cpu_gemv_bf16(int N, int K, const uint16_t* x, const uint16_t* w, int ldw, float* y);
#ifdef __cplusplus
}
#endif
#endif // LLMC_CPU_GEMV_H
