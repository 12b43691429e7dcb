// LayerNorm forward (plain and fused with the residual add) and backward. One warp per row,
// fp32 statistics; each lane handles 8-channel chunks (128-bit loads when the rows allow).
// Backward: dinp per row, then dweight/dbias as deterministic two-pass column sums.
#include "cuda/common.cuh"
#include "cuda/ops_cuda.h"

#define LN_EPS 1e-5f
#define LN_ROWS_PER_BLOCK 8   // 256 threads = 8 warps = 8 rows

// Normalises the row x (already in global memory as bf16) and writes out; returns via mean/rstd.
__device__ inline void ln_row(floatX* out, float* mean_out, float* rstd_out, const floatX* x,
                              const floatX* w, const floatX* b, int C, int vec, int lane) {
    float v[8];
    float s = 0.0f;
    for (int c = lane * 8; c < C; c += WARP_SIZE * 8) {
        load8f(v, x, c, C, vec);
        for (int k = 0; k < 8; k++) s += v[k];
    }
    float mean = warp_reduce_sum(s) / C;
    float ss = 0.0f;
    for (int c = lane * 8; c < C; c += WARP_SIZE * 8) {
        load8f(v, x, c, C, vec);
        for (int k = 0; k < 8; k++) if (c + k < C) { float d = v[k] - mean; ss += d * d; }
    }
    float rstd = 1.0f / sqrtf(warp_reduce_sum(ss) / C + LN_EPS);
    for (int c = lane * 8; c < C; c += WARP_SIZE * 8) {
        float wv[8], bv[8];
        load8f(v, x, c, C, vec);
        load8f(wv, w, c, C, vec);
        load8f(bv, b, c, C, vec);
        for (int k = 0; k < 8; k++) v[k] = (v[k] - mean) * rstd * wv[k] + bv[k];
        store8f(out, v, c, C, vec);
    }
    if (lane == 0) { *mean_out = mean; *rstd_out = rstd; }
}

__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                         const floatX* weight, const floatX* bias, int N, int C, int vec) {
    int lane = threadIdx.x % WARP_SIZE;
    int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / WARP_SIZE;
    if (row >= N) return;   // whole warp leaves together; no block barrier in this kernel
    ln_row(out + (size_t)row * C, mean + row, rstd + row, inp + (size_t)row * C, weight, bias, C, vec, lane);
}

// residual = a + b (rounded to bf16, as a separate residual_forward would), then layernorm of it
__global__ void fused_residual_layernorm_forward_kernel(floatX* residual, floatX* out, float* mean, float* rstd,
                                                        const floatX* a, const floatX* b, const floatX* weight,
                                                        const floatX* bias, int N, int C, int vec) {
    int lane = threadIdx.x % WARP_SIZE;
    int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / WARP_SIZE;
    if (row >= N) return;
    size_t off = (size_t)row * C;
    for (int c = lane * 8; c < C; c += WARP_SIZE * 8) {
        float x[8], y[8];
        load8f(x, a + off, c, C, vec);
        load8f(y, b + off, c, C, vec);
        for (int k = 0; k < 8; k++) x[k] += y[k];
        store8f(residual + off, x, c, C, vec);
    }
    // ln_row gives each lane the same chunks as above, so every lane re-reads only what it
    // wrote itself: no barrier needed.
    ln_row(out + off, mean + row, rstd + row, residual + off, weight, bias, C, vec, lane);
}

extern "C" void cuda_layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                                       const floatX* weight, const floatX* bias, int N, int C) {
    if (N <= 0) return;
    int vec = C % 8 == 0 && ops_aligned16(out) && ops_aligned16(inp) && ops_aligned16(weight) && ops_aligned16(bias);
    LAUNCH(layernorm_forward_kernel, ops_blocks(N, LN_ROWS_PER_BLOCK), LN_ROWS_PER_BLOCK * WARP_SIZE, 0, 0,
           out, mean, rstd, inp, weight, bias, N, C, vec);
    cudaCheck(cudaGetLastError());
}

extern "C" void cuda_fused_residual_layernorm_forward(floatX* residual_out, floatX* ln_out, float* mean, float* rstd,
                                                      const floatX* a, const floatX* b, const floatX* weight,
                                                      const floatX* bias, int N, int C) {
    if (N <= 0) return;
    int vec = C % 8 == 0 && ops_aligned16(residual_out) && ops_aligned16(ln_out) && ops_aligned16(a) &&
              ops_aligned16(b) && ops_aligned16(weight) && ops_aligned16(bias);
    LAUNCH(fused_residual_layernorm_forward_kernel, ops_blocks(N, LN_ROWS_PER_BLOCK), LN_ROWS_PER_BLOCK * WARP_SIZE,
           0, 0, residual_out, ln_out, mean, rstd, a, b, weight, bias, N, C, vec);
    cudaCheck(cudaGetLastError());
}

// dinp (+)= rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = weight * dout
// (acc: added to dinp's old value, else written)
__global__ void layernorm_backward_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                               const floatX* weight, const float* mean, const float* rstd,
                                               int N, int C, int acc, int vec) {
    int lane = threadIdx.x % WARP_SIZE;
    int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / WARP_SIZE;
    if (row >= N) return;
    size_t off = (size_t)row * C;
    float mu = mean[row], rs = rstd[row];
    float s1 = 0.0f, s2 = 0.0f;
    for (int c = lane * 8; c < C; c += WARP_SIZE * 8) {
        float x[8], g[8], w[8];
        load8f(x, inp + off, c, C, vec);
        load8f(g, dout + off, c, C, vec);
        load8f(w, weight, c, C, vec);
        for (int k = 0; k < 8; k++) {
            float dn = w[k] * g[k];   // zero past C (loads pad with zeros)
            s1 += dn;
            s2 += dn * (x[k] - mu) * rs;
        }
    }
    float dn_mean = warp_reduce_sum(s1) / C, dnn_mean = warp_reduce_sum(s2) / C;
    for (int c = lane * 8; c < C; c += WARP_SIZE * 8) {
        float x[8], g[8], w[8], d[8];
        load8f(x, inp + off, c, C, vec);
        load8f(g, dout + off, c, C, vec);
        load8f(w, weight, c, C, vec);
        if (acc) load8f(d, dinp + off, c, C, vec);
        else for (int k = 0; k < 8; k++) d[k] = 0.0f;
        for (int k = 0; k < 8; k++) {
            float norm = (x[k] - mu) * rs;
            d[k] += (w[k] * g[k] - dn_mean - norm * dnn_mean) * rs;
        }
        store8f(dinp + off, d, c, C, vec);
    }
}

// Partial column sums over chunks of OPS_COLSUM_ROWS rows (same scheme as bias_grad_partial_kernel):
// pw[chunk][c] = sum dout * norm, pb[chunk][c] = sum dout.
__global__ void layernorm_backward_params_partial_kernel(float* pw, float* pb, const floatX* dout, const floatX* inp,
                                                         const float* mean, const float* rstd, int N, int C, int vec) {
    __shared__ float sw[8][OPS_COLSUM_COLS];
    __shared__ float sb[8][OPS_COLSUM_COLS];
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    int c0 = blockIdx.x * OPS_COLSUM_COLS + lane * 8;
    float aw[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    float ab[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (c0 < C) {
        // this block's row chunks: blockIdx.y, then every gridDim.y-th (ops_colsum_chunks)
        for (int r0 = blockIdx.y * OPS_COLSUM_ROWS; r0 < N; r0 += gridDim.y * OPS_COLSUM_ROWS) {
            int r1 = min(r0 + OPS_COLSUM_ROWS, N);
            for (int r = r0 + warp; r < r1; r += 8) {
                float g[8], x[8];
                load8f(g, dout + (size_t)r * C, c0, C, vec);
                load8f(x, inp + (size_t)r * C, c0, C, vec);
                float mu = mean[r], rs = rstd[r];
                for (int k = 0; k < 8; k++) {
                    aw[k] += g[k] * (x[k] - mu) * rs;
                    ab[k] += g[k];
                }
            }
        }
    }
    for (int k = 0; k < 8; k++) { sw[warp][lane * 8 + k] = aw[k]; sb[warp][lane * 8 + k] = ab[k]; }
    __syncthreads();
    int c = blockIdx.x * OPS_COLSUM_COLS + threadIdx.x;   // one column per thread
    if (c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int w = 0; w < 8; w++) { tw += sw[w][threadIdx.x]; tb += sb[w][threadIdx.x]; }
        pw[(size_t)blockIdx.y * C + c] = tw;
        pb[(size_t)blockIdx.y * C + c] = tb;
    }
}

extern "C" void cuda_layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout,
                                        const floatX* inp, const floatX* weight, const float* mean, const float* rstd,
                                        int N, int C, int accumulate) {
    if (N <= 0) return;
    if (dinp) {
        int vec = C % 8 == 0 && ops_aligned16(dinp) && ops_aligned16(dout) && ops_aligned16(inp) && ops_aligned16(weight);
        LAUNCH(layernorm_backward_dinp_kernel, ops_blocks(N, LN_ROWS_PER_BLOCK), LN_ROWS_PER_BLOCK * WARP_SIZE, 0, 0,
               dinp, dout, inp, weight, mean, rstd, N, C, accumulate, vec);
        cudaCheck(cudaGetLastError());
    }
    if (dweight || dbias) {
        int nchunks = ops_colsum_chunks(N, C);
        float* pw = (float*)ops_scratch(OPS_SCRATCH_COLSUM, 2 * (size_t)nchunks * C * sizeof(float));
        float* pb = pw + (size_t)nchunks * C;
        dim3 grid(ops_blocks(C, OPS_COLSUM_COLS), nchunks);
        int vec = C % 8 == 0 && ops_aligned16(dout) && ops_aligned16(inp);
        LAUNCH(layernorm_backward_params_partial_kernel, grid, 256, 0, 0, pw, pb, dout, inp, mean, rstd, N, C, vec);
        cudaCheck(cudaGetLastError());
        if (dweight) ops_colsum_finalize(dweight, pw, nchunks, C);
        if (dbias) ops_colsum_finalize(dbias, pb, nchunks, C);
    }
}
