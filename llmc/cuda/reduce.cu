// CUDA backend: reductions (sum of squares for the gradient norm, sum of the per-token losses, the
// per-sequence log-probabilities of the preference objectives) and
// the second pass of the deterministic column sums that layernorm and matmul backward share.
#include "cuda/common.cuh"
#include "cuda/ops_cuda.h"

// ----------------------------------------------------------------------------
// reductions: a fixed grid of blocks writes one fp32 partial each (grid-stride loop, then a block
// tree), then one thread adds the partials in double, in order, into the accumulator. The grid
// does not depend on the device, so the result is bit-identical from run to run and GPU to GPU.
// Nothing is read back: sum_squares_acc / sum_f32_acc leave the sum on the device (the training
// step reads its loss and gradient norm once); sum_squares / sum_f32 read one double.

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
// one thread: at most RED_BLOCKS additions, in a fixed order
__global__ void sum_partials_kernel(double* acc, const float* partial, unsigned nblocks) {
    double s = 0.0;
    for (unsigned i = 0; i < nblocks; i++) s += partial[i];
    *acc += s;
}

// the scratch: RED_BLOCKS partials, then one double for the reading variants
#define RED_SCRATCH_BYTES (RED_BLOCKS * sizeof(float) + sizeof(double))

static void reduce_acc(double* acc, const floatX* xb, const float* xf, size_t n) {
    if (!n) return;
    unsigned nb = ops_blocks(n, RED_THREADS);
    if (nb > RED_BLOCKS) nb = RED_BLOCKS;
    float* partial = (float*)ops_scratch(OPS_SCRATCH_REDUCE, RED_SCRATCH_BYTES);
    if (xb) LAUNCH(sum_squares_partial_kernel, nb, RED_THREADS, 0, 0, partial, xb, n);
    else LAUNCH(sum_f32_partial_kernel, nb, RED_THREADS, 0, 0, partial, xf, n);
    LAUNCH(sum_partials_kernel, 1, 1, 0, 0, acc, (const float*)partial, nb);
    cudaCheck(cudaGetLastError());
}

extern "C" void cuda_sum_squares_acc(double* acc, const floatX* x, size_t n) { if (n) reduce_acc(acc, x, NULL, n); }
extern "C" void cuda_sum_f32_acc(double* acc, const float* x, size_t n) { if (n) reduce_acc(acc, NULL, x, n); }

static double reduce_read(const floatX* xb, const float* xf, size_t n) {
    if (!n) return 0.0;
    double* acc = (double*)((char*)ops_scratch(OPS_SCRATCH_REDUCE, RED_SCRATCH_BYTES) + RED_BLOCKS * sizeof(float));
    cudaCheck(cudaMemset(acc, 0, sizeof(double)));
    reduce_acc(acc, xb, xf, n);
    double s = 0.0;
    cuda_ops_to_host(&s, acc, sizeof(double));
    return s;
}
extern "C" double cuda_sum_squares(const floatX* x, size_t n) { return reduce_read(x, NULL, n); }
extern "C" double cuda_sum_f32(const float* x, size_t n) { return reduce_read(NULL, x, n); }

// ----------------------------------------------------------------------------
// per-sequence log-probabilities (preference objectives): one block per sequence, each thread
// adds its strided share of the range in double, then a tree over the block's threads in shared
// memory, in a fixed order: the result does not depend on timing.

#define SEQ_THREADS 128

__global__ void seq_logp_sums_kernel(double* out, const float* losses, const int* ranges) {
    __shared__ double part[SEQ_THREADS];
    const int s = blockIdx.x, a = ranges[2 * s], b = ranges[2 * s + 1];
    double acc = 0.0;
    for (int i = a + (int)threadIdx.x; i < b; i += SEQ_THREADS) acc += (double)losses[i];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = SEQ_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[s] = -part[0];
}

extern "C" void cuda_seq_logp_sums(double* out, const float* losses, const int* ranges, int S) {
    if (S <= 0) return;
    LAUNCH(seq_logp_sums_kernel, S, SEQ_THREADS, 0, 0, out, losses, ranges);
    cudaCheck(cudaGetLastError());
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

int ops_sm_count(void) {
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        if (sms < 1) sms = 1;
    }
    return sms;
}

int ops_colsum_chunks(int N, int C) {
    const int need = (int)ops_blocks(N, OPS_COLSUM_ROWS), colblocks = (int)ops_blocks(C, OPS_COLSUM_COLS);
    int cap = 2 * ops_sm_count() / (colblocks > 0 ? colblocks : 1);
    if (cap < 1) cap = 1;
    return need < cap ? need : cap;
}

void ops_colsum_finalize(floatX* out, const float* partial, int nchunks, int C) {
    LAUNCH(colsum_finalize_kernel, ops_blocks(C, 256), 256, 0, 0, out, partial, nchunks, C);
    cudaCheck(cudaGetLastError());
}
