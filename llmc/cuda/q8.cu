// CUDA backend: matmul_forward_q8 (llmc/ops/ops.h), the product with a weight in Q8_0 blocks.
// A warp takes one weight row (one output column) and reads it once for Q8_ROWS input rows at a
// time: eight lanes share a block, four values each, so a warp step covers four blocks (128
// values); each lane scales its int8 values by the block's fp16 d (exact in fp32), multiplies
// them into Q8_ROWS fp32 sums, and a warp reduction (a fixed tree) ends each sum, so the result
// is the same on every run. Sampling's one row a sequence is bound by reading the blocks: 34
// bytes per 32 weights, half of bf16's.
#include <cuda_fp16.h>
#include "cuda/common.cuh"
#include "cuda/ops_cuda.h"

#define Q8_ROWS 4            // input rows a pass over the weight row
#define Q8_WARPS 4           // weight rows a block
#define Q8_LANES_BLOCK 8     // lanes a Q8_0 block (four values each)

__global__ void matmul_q8_kernel(floatX* out, floatX* gelu_out, const floatX* inp, const uint8_t* w,
                                 const floatX* bias, int N, int C, int OC) {
    const int lane = threadIdx.x % WARP_SIZE, o = blockIdx.x * Q8_WARPS + threadIdx.x / WARP_SIZE;
    if (o >= OC) return;
    const int nb = C / OPS_Q8_BLOCK, sub = lane % Q8_LANES_BLOCK;
    const uint8_t* row = w + (size_t)o * nb * OPS_Q8_BLOCK_BYTES;
    for (int n0 = 0; n0 < N; n0 += Q8_ROWS) {
        const int rows = min(Q8_ROWS, N - n0);
        float acc[Q8_ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int b = lane / Q8_LANES_BLOCK; b < nb; b += WARP_SIZE / Q8_LANES_BLOCK) {
            const uint8_t* blk = row + (size_t)b * OPS_Q8_BLOCK_BYTES;
            __half_raw dh;
            dh.x = (unsigned short)(blk[0] | blk[1] << 8);
            const float d = __half2float(__half(dh));
            float v[4];
            for (int k = 0; k < 4; k++) v[k] = (float)(int8_t)blk[2 + sub * 4 + k] * d;
            const int c = b * OPS_Q8_BLOCK + sub * 4;
            for (int r = 0; r < rows; r++) {
                const floatX* x = inp + (size_t)(n0 + r) * C + c;
                for (int k = 0; k < 4; k++) acc[r] += v[k] * __bfloat162float(x[k]);
            }
        }
        for (int r = 0; r < rows; r++) {
            const float s = warp_reduce_sum(acc[r]) + (bias ? __bfloat162float(bias[o]) : 0.0f);
            if (lane != 0) continue;
            out[(size_t)(n0 + r) * OC + o] = __float2bfloat16(s);
            if (gelu_out) gelu_out[(size_t)(n0 + r) * OC + o] = __float2bfloat16(ops_gelu(s));
        }
    }
}

extern "C" void cuda_matmul_forward_q8(floatX* out, floatX* gelu_out, const floatX* inp, const uint8_t* w,
                                       const floatX* bias, int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    LAUNCH(matmul_q8_kernel, ops_blocks(OC, Q8_WARPS), Q8_WARPS * WARP_SIZE, 0, 0, out, gelu_out, inp, w, bias, N, C, OC);
    cudaCheck(cudaGetLastError());
}
