// CPU backend: element-wise ops: GELU forward/backward, residual add, add in place, scaled copy,
// and the LoRA branch's dropout (a counter-based mask, llmc/base/rand.h: the same elements as on the
// CUDA backend) and mask multiply; rows chosen by a list (the classifier's rows with a target).
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "cpu/ops_cpu.h"
#include "cpu/parallel.h"
#include "cpu/vecmath.h"
#include "base/rand.h"

void cpu_gelu_forward(float* out, const float* inp, size_t n) {
    #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) out[i] = vm_gelu(inp[i]);
}

void cpu_gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, int accumulate) {
    if (accumulate) {
        #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
        for (size_t i = 0; i < n; i++) dinp[i] += vm_gelu_grad(inp[i]) * dout[i];
    } else {
        #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
        for (size_t i = 0; i < n; i++) dinp[i] = vm_gelu_grad(inp[i]) * dout[i];
    }
}

void cpu_residual_forward(float* out, const float* a, const float* b, size_t n) {
    #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void cpu_add_inplace(float* dst, const float* src, size_t n) {
    #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

void cpu_scale_copy(float* dst, const float* src, float scale, size_t n) {
    #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) dst[i] = src[i] * scale;
}

void cpu_dropout_forward(float* out, const float* inp, size_t n, float p, uint64_t seed, uint64_t stream) {
    const float scale = 1.0f / (1.0f - p);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = rand_uniform(seed, stream, i) >= (double)p ? inp[i] * scale : 0.0f;
}

void cpu_mul_inplace(float* dst, const float* mask, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] *= mask[i];
}

// rows_gather (scatter 0) / rows_scatter (1): whole rows with memcpy, a row a thread
void cpu_rows_copy(void* dst, const void* src, const int* idx, int K, size_t row_bytes, int scatter) {
    #pragma omp parallel for schedule(static) if ((size_t)K * row_bytes > 65536)
    for (int k = 0; k < K; k++) {
        const size_t d = (size_t)(scatter ? idx[k] : k), s = (size_t)(scatter ? k : idx[k]);
        memcpy((char*)dst + d * row_bytes, (const char*)src + s * row_bytes, row_bytes);
    }
}
