// CUDA backend: element-wise ops: GELU forward/backward, residual add, add in place, scaled copy,
// and the LoRA branch's dropout and mask multiply; rows chosen by a list (the classifier's rows
// with a target).
#include "cuda/common.cuh"
#include "cuda/ops_cuda.h"
#include "base/rand.h"

// ----------------------------------------------------------------------------
// elementwise ops: each thread handles 8 consecutive elements, with one 128-bit load/store per
// operand when every pointer is 16-byte aligned (vec), else (and for the ragged tail) one by one.
// In-place use (out aliasing an input) is fine: each element is read before it is written by
// the same thread.

__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t n, int vec) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    if (vec && i + 8 <= n) {
        x128 x = load128(inp + i), o;
        for (int k = 0; k < 8; k++) o[k] = __float2bfloat16(ops_gelu(__bfloat162float(x[k])));
        store128(out + i, o);
    } else {
        for (size_t k = i; k < i + 8 && k < n; k++) out[k] = __float2bfloat16(ops_gelu(__bfloat162float(inp[k])));
    }
}

// dinp = gelu'(inp) * dout, plus dinp's old value with acc (dinp may alias dout: each thread
// reads its elements before writing them)
__global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t n, int acc, int vec) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    if (vec && i + 8 <= n) {
        x128 x = load128(inp + i), g = load128(dout + i), d;
        if (acc) d = load128(dinp + i);
        for (int k = 0; k < 8; k++) {
            float v = ops_gelu_grad(__bfloat162float(x[k])) * __bfloat162float(g[k]);
            d[k] = __float2bfloat16(acc ? __bfloat162float(d[k]) + v : v);
        }
        store128(dinp + i, d);
    } else {
        for (size_t k = i; k < i + 8 && k < n; k++) {
            float v = ops_gelu_grad(__bfloat162float(inp[k])) * __bfloat162float(dout[k]);
            dinp[k] = __float2bfloat16(acc ? __bfloat162float(dinp[k]) + v : v);
        }
    }
}

__global__ void residual_forward_kernel(floatX* out, const floatX* a, const floatX* b, size_t n, int vec) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    if (vec && i + 8 <= n) {
        x128 x = load128(a + i), y = load128(b + i), o;
        for (int k = 0; k < 8; k++) o[k] = __float2bfloat16(__bfloat162float(x[k]) + __bfloat162float(y[k]));
        store128(out + i, o);
    } else {
        for (size_t k = i; k < i + 8 && k < n; k++) out[k] = __float2bfloat16(__bfloat162float(a[k]) + __bfloat162float(b[k]));
    }
}

__global__ void scale_copy_kernel(floatX* dst, const floatX* src, float scale, size_t n, int vec) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    if (vec && i + 8 <= n) {
        x128 x = load128(src + i), o;
        for (int k = 0; k < 8; k++) o[k] = __float2bfloat16(__bfloat162float(x[k]) * scale);
        store128(dst + i, o);
    } else {
        for (size_t k = i; k < i + 8 && k < n; k++) dst[k] = __float2bfloat16(__bfloat162float(src[k]) * scale);
    }
}

extern "C" void cuda_gelu_forward(floatX* out, const floatX* inp, size_t n) {
    if (!n) return;
    int vec = ops_aligned16(out) && ops_aligned16(inp);
    LAUNCH(gelu_forward_kernel, ops_blocks(n, EW_BLOCK * 8), EW_BLOCK, 0, 0, out, inp, n, vec);
    cudaCheck(cudaGetLastError());
}
extern "C" void cuda_gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n, int accumulate) {
    if (!n) return;
    int vec = ops_aligned16(dinp) && ops_aligned16(inp) && ops_aligned16(dout);
    LAUNCH(gelu_backward_kernel, ops_blocks(n, EW_BLOCK * 8), EW_BLOCK, 0, 0, dinp, inp, dout, n, accumulate, vec);
    cudaCheck(cudaGetLastError());
}
extern "C" void cuda_residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n) {
    if (!n) return;
    int vec = ops_aligned16(out) && ops_aligned16(a) && ops_aligned16(b);
    LAUNCH(residual_forward_kernel, ops_blocks(n, EW_BLOCK * 8), EW_BLOCK, 0, 0, out, a, b, n, vec);
    cudaCheck(cudaGetLastError());
}
extern "C" void cuda_add_inplace(floatX* dst, const floatX* src, size_t n) {
    cuda_residual_forward(dst, dst, src, n);
}
extern "C" void cuda_scale_copy(floatX* dst, const floatX* src, float scale, size_t n) {
    if (!n) return;
    int vec = ops_aligned16(dst) && ops_aligned16(src);
    LAUNCH(scale_copy_kernel, ops_blocks(n, EW_BLOCK * 8), EW_BLOCK, 0, 0, dst, src, scale, n, vec);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// LoRA: dropout with a counter-based mask (the same pure function of (seed, stream, index) as on
// the CPU backend, llmc/base/rand.h, so both backends drop the same elements and a resumed run draws
// the same masks) and the mask multiply; one element per thread


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

extern "C" void cuda_dropout_forward(floatX* out, const floatX* inp, size_t n, float p, uint64_t seed, uint64_t stream) {
    if (!n) return;
    LAUNCH(dropout_forward_kernel, (unsigned)((n + EW_BLOCK - 1) / EW_BLOCK), EW_BLOCK, 0, 0,
           out, inp, n, p, 1.0f / (1.0f - p), seed, stream);
    cudaCheck(cudaGetLastError());
}

extern "C" void cuda_mul_inplace(floatX* dst, const floatX* mask, size_t n) {
    if (!n) return;
    LAUNCH(mul_inplace_kernel, (unsigned)((n + EW_BLOCK - 1) / EW_BLOCK), EW_BLOCK, 0, 0, dst, mask, n);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// rows_gather / rows_scatter: one thread a unit of a row (16 bytes when every row and both
// pointers allow it, else 4), units of one row on consecutive threads: a warp moves 512
// contiguous bytes of a 1536-byte bf16 row of GPT-2 small. Pure data movement: K rows of
// row_bytes read and written once.
__global__ void rows_copy_kernel(char* dst, const char* src, const int* idx, size_t units, int per_row,
                                 int unit, int scatter) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= units) return;
    const size_t k = i / per_row, u = i % per_row;
    const size_t d = scatter ? (size_t)idx[k] : k, s = scatter ? k : (size_t)idx[k];
    const size_t row_bytes = (size_t)per_row * unit;
    if (unit == 16) *(uint4*)(dst + d * row_bytes + u * 16) = *(const uint4*)(src + s * row_bytes + u * 16);
    else *(uint32_t*)(dst + d * row_bytes + u * 4) = *(const uint32_t*)(src + s * row_bytes + u * 4);
}

extern "C" void cuda_rows_copy(void* dst, const void* src, const int* idx, int K, size_t row_bytes, int scatter) {
    if (K <= 0) return;
    if (row_bytes % 4) fatal("this is a bug in llmc", "rows_copy: rows of %zu bytes, not a multiple of 4", row_bytes);
    const int unit = row_bytes % 16 == 0 && ops_aligned16(dst) && ops_aligned16(src) ? 16 : 4;
    const int per_row = (int)(row_bytes / unit);
    const size_t units = (size_t)K * per_row;
    LAUNCH(rows_copy_kernel, ops_blocks(units, EW_BLOCK), EW_BLOCK, 0, 0,
           (char*)dst, (const char*)src, idx, units, per_row, unit, scatter);
    cudaCheck(cudaGetLastError());
}
