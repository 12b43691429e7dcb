// cpu_gemm_bf16 for the CPU ops linked only as the CUDA op tests' reference (libcpu_ops.a, see
// llmc/cpu/gemm.h): those programs go to GPU machines that have no oneDNN, and they never switch
// the CPU backend to bf16 GEMMs, so reaching this is a bug.
#include "cpu/gemm.h"
#include "base/check.h"

void cpu_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t* A, int lda,
                   const uint16_t* B, int ldb, int accumulate, float* C) {
    (void)ta; (void)tb; (void)A; (void)lda; (void)B; (void)ldb; (void)accumulate; (void)C;
    fatal("this is a bug in llmc", "a bf16 GEMM (%d x %d x %d) in a program linked with the CPU "
          "ops as a reference only (no oneDNN)", M, N, K);
}

int cpu_gemm_bf16_widened(void) { return 0; }

void cpu_gemm_16(int f16, int ta, int tb, int M, int N, int K, const uint16_t* A, int lda,
                 const uint16_t* B, int ldb, int accumulate, float* C) {
    (void)f16;
    cpu_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C);
}

