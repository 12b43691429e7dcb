// CUDA backend: the element-wise ops the LoRA branch needs (llmc/ops.h). The dropout mask is the
// same pure function of (seed, stream, index) as on the CPU backend (llmc/rand.h), so both
// backends drop the same elements and a resumed run draws the same masks.
#include "cuda/ops_common.cuh"
#include "rand.h"

#define LORA_EW_BLOCK 256

__global__ void dropout_forward_kernel(floatX* out, const floatX* inp, size_t n, float p, float scale,
                                       uint64_t seed, uint64_t stream) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = __bfloat162float(inp[i]);
    out[i] = __float2bfloat16(rand_uniform(seed, stream, i) >= (double)p ? x * scale : 0.0f);
}

__global__ void mul_inplace_kernel(floatX* dst, const floatX* mask, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    dst[i] = __float2bfloat16(__bfloat162float(dst[i]) * __bfloat162float(mask[i]));
}

extern "C" void dropout_forward(floatX* out, const floatX* inp, size_t n, float p, uint64_t seed, uint64_t stream) {
    if (!n) return;
    LAUNCH(dropout_forward_kernel, (unsigned)((n + LORA_EW_BLOCK - 1) / LORA_EW_BLOCK), LORA_EW_BLOCK, 0, 0,
           out, inp, n, p, 1.0f / (1.0f - p), seed, stream);
    cudaCheck(cudaGetLastError());
}

extern "C" void mul_inplace(floatX* dst, const floatX* mask, size_t n) {
    if (!n) return;
    LAUNCH(mul_inplace_kernel, (unsigned)((n + LORA_EW_BLOCK - 1) / LORA_EW_BLOCK), LORA_EW_BLOCK, 0, 0, dst, mask, n);
    cudaCheck(cudaGetLastError());
}
