// matmul_forward / matmul_backward (llm.c weight orientation [OC, C]) on top of gemm_bf16, and
// the deterministic bias-gradient reduction.
//
// A row-major [R, K] buffer is the column-major K x R matrix (leading dim K). So out[N, OC] =
// inp[N, C] @ W[OC, C]^T is, column-major, out (OC x N) = W^T (stored C x OC, transposed)
// @ inp (C x N): gemm(transa=1, m=OC, n=N, k=C).
#include "cuda/common.cuh"
#include "cuda/gemm.cuh"
#include "cuda/ops_cuda.h"

extern "C" void cuda_matmul_forward(floatX* out, floatX* gelu_out, const floatX* inp, const floatX* weight,
                                    const floatX* bias, int N, int C, int OC) {
    if (gelu_out && OC % 8 == 0) {
        // fused: gelu_out = gelu(pre), out = pre (cuBLASLt's aux output needs ld % 8 == 0)
        gemm_bf16(1, 0, OC, N, C, weight, C, inp, C, gelu_out, OC, bias, GEMM_GELU_AUX, out, 0);
    } else {
        gemm_bf16(1, 0, OC, N, C, weight, C, inp, C, out, OC, bias, GEMM_PLAIN, NULL, 0);
        if (gelu_out) cuda_gelu_forward(gelu_out, out, (size_t)N * OC);
    }
}

// out += inp weight^T: cuBLASLt's beta = 1 with out as C and D (one bf16 rounding of the sum)
extern "C" void cuda_matmul_forward_acc(floatX* out, const floatX* inp, const floatX* weight, int N, int C, int OC) {
    gemm_bf16(1, 0, OC, N, C, weight, C, inp, C, out, OC, NULL, GEMM_PLAIN, NULL, 1);
}

// Partial column sums of dout[N, OC] over chunks of OPS_COLSUM_ROWS rows: block (bx, by) sums
// (over row chunks by, by + gridDim.y, ...)
// columns [256 bx, 256 bx + 256) over row chunk by into partial[by][c] (see common.cuh).
__global__ void bias_grad_partial_kernel(float* partial, const floatX* dout, int N, int OC, int vec) {
    __shared__ float sums[8][OPS_COLSUM_COLS];
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    int c0 = blockIdx.x * OPS_COLSUM_COLS + lane * 8;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (c0 < OC) {
        // this block's row chunks: blockIdx.y, then every gridDim.y-th (ops_colsum_chunks)
        for (int r0 = blockIdx.y * OPS_COLSUM_ROWS; r0 < N; r0 += gridDim.y * OPS_COLSUM_ROWS) {
            int r1 = min(r0 + OPS_COLSUM_ROWS, N);
            for (int r = r0 + warp; r < r1; r += 8) {
                float g[8];
                load8f(g, dout + (size_t)r * OC, c0, OC, vec);
                for (int k = 0; k < 8; k++) acc[k] += g[k];
            }
        }
    }
    for (int k = 0; k < 8; k++) sums[warp][lane * 8 + k] = acc[k];
    __syncthreads();
    int c = blockIdx.x * OPS_COLSUM_COLS + threadIdx.x;   // one column per thread
    if (c < OC) {
        float s = 0.0f;
        for (int w = 0; w < 8; w++) s += sums[w][threadIdx.x];
        partial[(size_t)blockIdx.y * OC + c] = s;
    }
}

// The parameter gradients of matmul_backward (always accumulated).
static void matmul_backward_params(floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                                   int N, int C, int OC) {
    // dweight[OC, C] += dout^T @ inp          (column-major: C x OC = (C x N) @ (N x OC))
    if (dweight) gemm_bf16(0, 1, C, OC, N, inp, C, dout, OC, dweight, C, NULL, GEMM_PLAIN, NULL, 1);
    if (dbias) {
        int nchunks = ops_colsum_chunks(N, OC);
        float* partial = (float*)ops_scratch(OPS_SCRATCH_COLSUM, (size_t)nchunks * OC * sizeof(float));
        dim3 grid(ops_blocks(OC, OPS_COLSUM_COLS), nchunks);
        int vec = OC % 8 == 0 && ops_aligned16(dout);
        LAUNCH(bias_grad_partial_kernel, grid, 256, 0, 0, partial, dout, N, OC, vec);
        cudaCheck(cudaGetLastError());
        ops_colsum_finalize(dbias, partial, nchunks, OC);
    }
}

extern "C" void cuda_matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout,
                                     const floatX* inp, const floatX* weight, int N, int C, int OC,
                                     int accumulate) {
    // dinp[N, C] (+)= dout[N, OC] @ W[OC, C]  (column-major: C x N = (C x OC) @ (OC x N))
    if (dinp) gemm_bf16(0, 0, C, N, OC, weight, C, dout, OC, dinp, C, NULL, GEMM_PLAIN, NULL, accumulate);
    matmul_backward_params(dweight, dbias, dout, inp, N, C, OC);
}

extern "C" void cuda_matmul_backward_gelu(floatX* dpre, floatX* dweight, floatX* dbias, const floatX* dout,
                                          const floatX* inp, const floatX* pre, const floatX* weight,
                                          int N, int C, int OC) {
    if (C % 8 == 0) {
        // fused: dpre = (dout @ W) * gelu'(pre) in the GEMM's epilogue, rounded to bf16 once
        // (cuBLASLt reads pre as the aux input; its leading dimension must be a multiple of 8)
        gemm_bf16(0, 0, C, N, OC, weight, C, dout, OC, dpre, C, NULL, GEMM_DGELU, (floatX*)pre, 0);
    } else {
        gemm_bf16(0, 0, C, N, OC, weight, C, dout, OC, dpre, C, NULL, GEMM_PLAIN, NULL, 0);
        cuda_gelu_backward(dpre, pre, dpre, (size_t)N * C, 0);
    }
    matmul_backward_params(dweight, dbias, dout, inp, N, C, OC);
}
