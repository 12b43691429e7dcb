// CUDA backend: reductions (sum of squares for the gradient norm, sum of the per-token losses) and
// the second pass of the deterministic column sums that layernorm and matmul backward share.
#include "cuda/common.cuh"
#include "cuda/ops_cuda.h"

// ----------------------------------------------------------------------------
// reductions: a fixed grid of blocks writes one fp32 partial each (grid-stride loop, then a block
// tree), the host adds the partials in double in order. The grid does not depend on the device,
// so the result is bit-identical from run to run and GPU to GPU.

#define RED_THREADS 256
#define RED_BLOCKS 512

__global__ void sum_squares_partial_kernel(float* partial, const floatX* x, size_t n) {
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = __bfloat162float(x[i]);
        acc += v * v;
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
__global__ void sum_f32_partial_kernel(float* partial, const float* x, size_t n) {
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc += x[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

static double sum_partials(const float* partial_dev, unsigned nblocks) {
    float host[RED_BLOCKS];
    cudaCheck(cudaMemcpy(host, partial_dev, nblocks * sizeof(float), cudaMemcpyDeviceToHost));
    double s = 0.0;
    for (unsigned i = 0; i < nblocks; i++) s += host[i];
    return s;
}

extern "C" double cuda_sum_squares(const floatX* x, size_t n) {
    if (!n) return 0.0;
    unsigned nb = ops_blocks(n, RED_THREADS);
    if (nb > RED_BLOCKS) nb = RED_BLOCKS;
    float* partial = (float*)ops_scratch(OPS_SCRATCH_REDUCE, RED_BLOCKS * sizeof(float));
    LAUNCH(sum_squares_partial_kernel, nb, RED_THREADS, 0, 0, partial, x, n);
    cudaCheck(cudaGetLastError());
    return sum_partials(partial, nb);
}
extern "C" double cuda_sum_f32(const float* x, size_t n) {
    if (!n) return 0.0;
    unsigned nb = ops_blocks(n, RED_THREADS);
    if (nb > RED_BLOCKS) nb = RED_BLOCKS;
    float* partial = (float*)ops_scratch(OPS_SCRATCH_REDUCE, RED_BLOCKS * sizeof(float));
    LAUNCH(sum_f32_partial_kernel, nb, RED_THREADS, 0, 0, partial, x, n);
    cudaCheck(cudaGetLastError());
    return sum_partials(partial, nb);
}

// ----------------------------------------------------------------------------
// deterministic column sums, second pass: out[c] += sum over chunks of partial[chunk][c]

__global__ void colsum_finalize_kernel(floatX* out, const float* partial, int nchunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int k = 0; k < nchunks; k++) acc += partial[(size_t)k * C + c];
    out[c] = __float2bfloat16(__bfloat162float(out[c]) + acc);
}

void ops_colsum_finalize(floatX* out, const float* partial, int nchunks, int C) {
    LAUNCH(colsum_finalize_kernel, ops_blocks(C, 256), 256, 0, 0, out, partial, nchunks, C);
    cudaCheck(cudaGetLastError());
}
