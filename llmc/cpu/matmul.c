// CPU backend: matmul forward (with bias and GELU epilogues) and backward. GEMMs in fp32 through
// CBLAS (OpenBLAS), or, with the GEMM dtype set to bf16 or fp16 (--dtype), in that format with
// fp32 accumulation (gemm.c): the operands are rounded to it right before the GEMM (fp32 weights,
// activations and gradients stay fp32 in memory), as torch.autocast("cpu", bfloat16 / float16)
// does. A weight already held in bf16 (the frozen base of LoRA, *_w16) is used as is.
// The bias gradient is a deterministic column-block sum.
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include "cpu/gemm.h"
#include "cpu/gemv.h"
#include "cpu/ops_cpu.h"
#include "cpu/parallel.h"
#include "cpu/vecmath.h"
#include "base/bf16.h"
#include "base/check.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

static OpsDtype gemm_dtype = OPS_F32;

void cpu_ops_set_gemm_dtype(OpsDtype d) { gemm_dtype = d; }
OpsDtype cpu_ops_gemm_dtype(void) { return gemm_dtype; }

// AMX-BF16 is CPUID leaf 7 sub-leaf 0 EDX bit 22 (read directly: not every compiler's
// __builtin_cpu_supports knows it); AVX-512 itself must be on, which __builtin_cpu_supports
// checks with the OS's saved register state. AVX512-BF16: llmc/cpu/gemv.c.
int cpu_ops_bf16_hw(const char** why) {
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a0 = 0, b0 = 0, c0 = 0, d0 = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 0, &a0, &b0, &c0, &d0) && (d0 >> 22 & 1u)) {
        *why = "the CPU has AMX-BF16";
        return 1;
    }
    if (cpu_has_avx512bf16()) {
        *why = "the CPU has AVX512-BF16";
        return 1;
    }
    *why = "the CPU has neither AVX512-BF16 nor AMX-BF16";
#else
    *why = "bf16 GEMMs are only fast on x86-64 CPUs with AVX512-BF16 or AMX-BF16";
#endif
    return 0;
}

int cpu_ops_bf16_off(const char* value) {
    if (!value || !value[0] || !strcmp(value, "1")) return 0;
    if (!strcmp(value, "0")) return 1;
    fatal("set it to 0 (--dtype auto computes in fp32, as on a CPU without bf16) or 1 (the hardware decides), or unset it",
          "LLMC_CPU_BF16='%s' in the environment", value);
}

int cpu_ops_bf16_native(const char** why) {
    static char off[128];
    const char* hw;
    const int native = cpu_ops_bf16_hw(&hw);
    if (!cpu_ops_bf16_off(getenv("LLMC_CPU_BF16"))) { *why = hw; return native; }
    snprintf(off, sizeof(off), "LLMC_CPU_BF16=0 in the environment; %s", hw);
    *why = off;
    return 0;
}

// The bf16 operands of the GEMMs: scratch buffers that grow to the largest operand (during the
// first step) and stay. Slot 0: the activation or output gradient, 1: the weight, 2: the input of
// a weight gradient.
#define BF16_SLOTS 3
static uint16_t* scratch[BF16_SLOTS];
static size_t scratch_n[BF16_SLOTS];

size_t cpu_ops_gemm_scratch_bytes(void) {
    size_t n = 0;
    for (int i = 0; i < BF16_SLOTS; i++) n += scratch_n[i];
    return n * sizeof(uint16_t);
}

// 16-bit copy of an fp32 operand of n elements in scratch slot `slot`, fp16 (f16) or bf16, rounded
// to nearest even (what torch's .to() and autocast do; fp16 overflows to inf past 65504, as there)
static const uint16_t* rounded(int slot, const float* x, size_t n, int f16) {
    if (scratch_n[slot] < n) {
        cpu_ops_free(scratch[slot]);
        scratch[slot] = (uint16_t*)cpu_ops_alloc(n * sizeof(uint16_t));
        scratch_n[slot] = n;
    }
    uint16_t* y = scratch[slot];
    if (f16) {
        #pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) y[i] = fp16_from_f32(x[i]);
    } else {
        #pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) y[i] = bf16_from_f32(x[i]);
    }
    return y;
}

// one pass over the output while it is still warm in L2/L3
void cpu_matmul_epilogue(float* out, float* gelu_out, const float* bias, int N, int OC) {
    if (bias == NULL && gelu_out == NULL) return;
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

static void bias_backward(float* dbias, const float* dout, int N, int OC) {
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
        // (fp16: the column sum as fp16 holds it, as torch.autocast's fp16 bias gradient)
        if (gemm_dtype == OPS_F16) for (int j = o0; j < o1; j++) dbias[j] += fp16_to_f32(fp16_from_f32(acc[j - o0]));
        else for (int j = o0; j < o1; j++) dbias[j] += acc[j - o0];
    }
}

// out[N,OC] (+)= r16(inp)[N,C] * w16[OC,C]^T, fp32 accumulation (r16: rounded to w16's format,
// fp16 when f16, else bf16)
static void forward_16(int f16, float* out, const float* inp, const uint16_t* w16, int N, int C, int OC, int accumulate) {
    const uint16_t* x16 = rounded(0, inp, (size_t)N * C, f16);
    cpu_gemm_16(f16, 0, 1, N, OC, C, x16, C, w16, C, accumulate, out);
}

// out[N,OC] (+)= inp[N,C] * weight[OC,C]^T in the GEMM precision in force. One row (token-by-token
// generation with the KV cache) is a GEMV: sgemm would first pack the whole weight matrix, 2-3x
// the cost here.
static void forward_product(float* out, const float* inp, const float* weight, int N, int C, int OC, int accumulate) {
    const float beta = accumulate ? 1.0f : 0.0f;
    const int f16 = gemm_dtype == OPS_F16;
    if (gemm_dtype != OPS_F32) forward_16(f16, out, inp, rounded(1, weight, (size_t)OC * C, f16), N, C, OC, accumulate);
    else if (N == 1) cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.0f, weight, C, inp, 1, beta, out, 1);
    else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

void cpu_matmul_forward(float* out, float* gelu_out, const float* inp, const float* weight,
                        const float* bias, int N, int C, int OC) {
    forward_product(out, inp, weight, N, C, OC, 0);
    cpu_matmul_epilogue(out, gelu_out, bias, N, OC);
}

void cpu_matmul_forward_acc(float* out, const float* inp, const float* weight, int N, int C, int OC) {
    forward_product(out, inp, weight, N, C, OC, 1);
}

void cpu_matmul_forward_w16(float* out, float* gelu_out, const float* inp, const uint16_t* weight,
                            const float* bias, int N, int C, int OC) {
    forward_16(0, out, inp, weight, N, C, OC, 0);
    cpu_matmul_epilogue(out, gelu_out, bias, N, OC);
}

// dinp (+)= r16(dout) w16, dweight += r16(dout)^T r16(inp); either may be NULL
static void backward_16(int f16, float* dinp, float* dweight, const float* dout, const float* inp,
                        const uint16_t* w16, int N, int C, int OC, int accumulate) {
    const uint16_t* g16 = rounded(0, dout, (size_t)N * OC, f16);
    if (dinp != NULL) cpu_gemm_16(f16, 0, 0, N, C, OC, g16, OC, w16, C, accumulate, dinp);
    if (dweight != NULL) cpu_gemm_16(f16, 1, 0, OC, C, N, g16, OC, rounded(2, inp, (size_t)N * C, f16), C, 1, dweight);
}

void cpu_matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, int N, int C, int OC, int accumulate) {
    if (gemm_dtype != OPS_F32) {
        const int f16 = gemm_dtype == OPS_F16;
        if (dinp != NULL || dweight != NULL)
            backward_16(f16, dinp, dweight, dout, inp, dinp ? rounded(1, weight, (size_t)OC * C, f16) : NULL, N, C, OC,
                          accumulate);
    } else {
        if (dinp != NULL) // dinp[N,C] (+)= dout[N,OC] * weight[OC,C]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                        accumulate ? 1.0f : 0.0f, dinp, C);
        if (dweight != NULL) // dweight[OC,C] += dout[N,OC]^T * inp[N,C]
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C,
                        1.0f, dweight, C);
    }
    if (dbias != NULL) bias_backward(dbias, dout, N, OC);
}

void cpu_matmul_backward_w16(float* dinp, float* dbias, const float* dout, const uint16_t* weight,
                             int N, int C, int OC, int accumulate) {
    if (dinp != NULL) backward_16(0, dinp, NULL, dout, NULL, weight, N, C, OC, accumulate);
    if (dbias != NULL) bias_backward(dbias, dout, N, OC);
}

void cpu_matmul_backward_gelu(float* dpre, float* dweight, float* dbias, const float* dout,
                              const float* inp, const float* pre, const float* weight, int N, int C,
                              int OC) {
    cpu_matmul_backward(dpre, dweight, dbias, dout, inp, weight, N, C, OC, 0);
    // the GELU derivative in place (the same product as gelu_backward into a zeroed buffer)
    cpu_gelu_backward(dpre, pre, dpre, (size_t)N * C, 0);
}
