// Causal self-attention, flash-style (O(T) memory: out + lse only), simple version: CUDA cores,
// fp32 math, online softmax. The backend's attention_forward / attention_backward use the
// tensor-core kernels of attention.cu; these serve head sizes those do not (not a multiple
// of 16), see attention.cuh.
//
// Layout: qkv (B, T, 3, NH, HS); out (B, T, NH*HS); lse (B, NH, T) natural-log log-sum-exp of
// the scaled scores of each query row. With doc_start (packed sequences, ops_cuda.h), query t
// sees keys doc_start[t] <= s <= t only: a mask, the same loops.
//
// Forward: block = 8 warps = 8 consecutive queries of one (b, h); keys stream through shared
// memory in tiles of 32, lane j of a warp scores key j of the tile, then every lane updates the
// output dims it owns (d = lane + 32 i). Backward recomputes probabilities from lse:
//   p = exp(scale q.k - lse), dp = dout.v, ds = p (dp - D) with D = dout.out per query,
//   dq = scale sum_s ds k, dk = scale sum_t ds q, dv = sum_t p dout,
// in two kernels (one over queries for dq, one over keys for dk/dv) so every output element has
// exactly one writer: deterministic, no atomics.
#include "cuda/common.cuh"
#include "base/check.h"
#include "cuda/attention.cuh"

#define ATT_MAX_HS 128              // head sizes up to 128 (GPT-2 uses 64)
#define ATT_DPL (ATT_MAX_HS / 32)   // head dims per lane
#define ATT_ROWS 8                  // queries (or keys) per block: one per warp
#define ATT_TILE 32                 // keys (or queries) per shared-memory tile: one per lane
#define ATT_THREADS (ATT_ROWS * WARP_SIZE)

// rows [r0, r0 + ROWS) of one head's q/k/v (or dout) section into a [ROWS][W] shared array: W is
// ATT_MAX_HS for the rows a block owns (one per warp), ATT_MAX_HS + 1 for the tiles streamed past
// them (the pad keeps lane-per-row reads free of bank conflicts); rows past T become zeros
template <int ROWS, int W>
__device__ inline void att_load(float (*dst)[W], const floatX* src, int r0, int T, size_t row_stride, int HS) {
    for (int i = threadIdx.x; i < ROWS * HS; i += blockDim.x) {
        int r = i / HS, d = i % HS;
        dst[r][d] = r0 + r < T ? __bfloat162float(src[(size_t)(r0 + r) * row_stride + d]) : 0.0f;
    }
}

// What a block works on: its lane and warp; its rows (queries or keys) r0 .. last, this warp's
// row; the (b, h) of blockIdx.y = b * NH + h and where that head's q section starts in qkv / dqkv
// (k at + C, v at + 2C; row stride 3C) and in out / dout (row stride C); the score scale.
struct AttHead {
    int lane, warp, r0, row, last, bh, C;
    size_t stride, qkv_off, out_off;
    const floatX* base;   // qkv + qkv_off
    float scale;
};
__device__ inline AttHead att_head(const floatX* qkv, int T, int NH, int HS) {
    AttHead a;
    a.lane = threadIdx.x % WARP_SIZE;
    a.warp = threadIdx.x / WARP_SIZE;
    a.r0 = blockIdx.x * ATT_ROWS;
    a.row = a.r0 + a.warp;
    a.last = min(a.r0 + ATT_ROWS, T) - 1;
    a.bh = blockIdx.y;
    const int b = a.bh / NH, h = a.bh % NH;
    a.C = NH * HS;
    a.stride = 3 * (size_t)a.C;
    a.qkv_off = (size_t)b * T * a.stride + (size_t)h * HS;
    a.out_off = (size_t)b * T * a.C + (size_t)h * HS;
    a.base = qkv + a.qkv_off;
    a.scale = 1.0f / sqrtf((float)HS);
    return a;
}

// The first key this warp's query may see: its record's start (doc_start, (B, T)), else 0.
__device__ inline int att_first_key(const int* doc_start, const AttHead& a, int T, int NH) {
    return doc_start && a.row < T ? doc_start[(size_t)(a.bh / NH) * T + a.row] : 0;
}

// This lane's head dims (d = lane + 32 i) of a gradient row: dst[d] = (accumulate ? dst[d] : 0) + scale acc[i].
__device__ inline void att_store_grad(floatX* dst, const float* acc, float scale, int accumulate, int lane, int HS) {
    for (int i = 0; i < ATT_DPL; i++) {
        int d = lane + 32 * i;
        if (d < HS) dst[d] = __float2bfloat16((accumulate ? __bfloat162float(dst[d]) : 0.0f) + scale * acc[i]);
    }
}

__global__ void attention_forward_kernel(floatX* out, float* lse, const floatX* qkv, const int* doc_start, int T, int NH,
                                         int HS) {
    __shared__ float sQ[ATT_ROWS][ATT_MAX_HS];
    __shared__ float sK[ATT_TILE][ATT_MAX_HS + 1];
    __shared__ float sV[ATT_TILE][ATT_MAX_HS + 1];
    const AttHead a = att_head(qkv, T, NH, HS);
    const int lane = a.lane, warp = a.warp, C = a.C, t = a.row;
    const int first = att_first_key(doc_start, a, T, NH);
    att_load<ATT_ROWS>(sQ, a.base, a.r0, T, a.stride, HS);
    float m = -FLT_MAX, l = 0.0f, acc[ATT_DPL];
    for (int i = 0; i < ATT_DPL; i++) acc[i] = 0.0f;
    for (int s0 = 0; s0 <= a.last; s0 += ATT_TILE) {
        __syncthreads();   // previous tile fully consumed (first time: sQ complete)
        att_load<ATT_TILE>(sK, a.base + C, s0, T, a.stride, HS);
        att_load<ATT_TILE>(sV, a.base + 2 * C, s0, T, a.stride, HS);
        __syncthreads();
        if (t < T) {   // warp-uniform
            int s = s0 + lane;
            float sc = -FLT_MAX;
            bool seen = s <= t && s >= first;
            if (seen) {
                sc = 0.0f;
                for (int d = 0; d < HS; d++) sc += sQ[warp][d] * sK[lane][d];
                sc *= a.scale;
            }
            float mn = fmaxf(m, warp_reduce_max(sc));
            float p = seen ? expf(sc - mn) : 0.0f;
            float corr = expf(m - mn);
            l = l * corr + warp_reduce_sum(p);
            for (int i = 0; i < ATT_DPL; i++) acc[i] *= corr;
            for (int j = 0; j < ATT_TILE; j++) {
                float pj = __shfl_sync(FULL_MASK, p, j);
                for (int i = 0; i < ATT_DPL; i++) {
                    int d = lane + 32 * i;
                    if (d < HS) acc[i] += pj * sV[j][d];
                }
            }
            m = mn;
        }
    }
    if (t < T) {
        floatX* o = out + a.out_off + (size_t)t * C;
        for (int i = 0; i < ATT_DPL; i++) {
            int d = lane + 32 * i;
            if (d < HS) o[d] = __float2bfloat16(acc[i] / l);
        }
        if (lane == 0) lse[(size_t)a.bh * T + t] = m + logf(l);
    }
}

void attention_forward_simple(floatX* out, float* lse, const floatX* qkv, const int* doc_start, int B, int T, int C,
                              int NH) {
    int HS = C / NH;
    if (NH <= 0 || C % NH != 0 || HS > ATT_MAX_HS)
        fatal("use a model whose head size is at most 128", "attention_forward (cuda): head size C/NH = %d/%d must divide and be <= %d", C, NH, ATT_MAX_HS);
    if (B <= 0 || T <= 0) return;
    dim3 grid(ops_blocks(T, ATT_ROWS), B * NH);
    LAUNCH(attention_forward_kernel, grid, ATT_THREADS, 0, 0, out, lse, qkv, doc_start, T, NH, HS);
    cudaCheck(cudaGetLastError());
}

// D[bh, t] = sum_d dout[b, t, h, d] * out[b, t, h, d]; one warp per (b, h, t)
__global__ void attention_backward_preprocess_kernel(float* D, const floatX* dout, const floatX* out,
                                                     int B, int T, int NH, int HS) {
    int lane = threadIdx.x % WARP_SIZE;
    size_t row = (size_t)blockIdx.x * ATT_ROWS + threadIdx.x / WARP_SIZE;   // = (b*NH + h)*T + t
    if (row >= (size_t)B * NH * T) return;
    int t = (int)(row % T), bh = (int)(row / T), b = bh / NH, h = bh % NH;
    size_t off = ((size_t)b * T + t) * NH * HS + (size_t)h * HS;
    float s = 0.0f;
    for (int d = lane; d < HS; d += WARP_SIZE) s += __bfloat162float(dout[off + d]) * __bfloat162float(out[off + d]);
    s = warp_reduce_sum(s);
    if (lane == 0) D[row] = s;
}

// dq: block = 8 queries of one (b, h), key tiles streamed as in the forward pass
__global__ void attention_backward_dq_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                                             const float* D, const int* doc_start, int T, int NH, int HS, int accumulate) {
    __shared__ float sQ[ATT_ROWS][ATT_MAX_HS];
    __shared__ float sdO[ATT_ROWS][ATT_MAX_HS];
    __shared__ float sK[ATT_TILE][ATT_MAX_HS + 1];
    __shared__ float sV[ATT_TILE][ATT_MAX_HS + 1];
    const AttHead a = att_head(qkv, T, NH, HS);
    const int lane = a.lane, warp = a.warp, C = a.C, t = a.row;
    const int first = att_first_key(doc_start, a, T, NH);
    att_load<ATT_ROWS>(sQ, a.base, a.r0, T, a.stride, HS);
    att_load<ATT_ROWS>(sdO, dout + a.out_off, a.r0, T, C, HS);
    float lse_t = t < T ? lse[(size_t)a.bh * T + t] : 0.0f, D_t = t < T ? D[(size_t)a.bh * T + t] : 0.0f;
    float acc[ATT_DPL];
    for (int i = 0; i < ATT_DPL; i++) acc[i] = 0.0f;
    for (int s0 = 0; s0 <= a.last; s0 += ATT_TILE) {
        __syncthreads();
        att_load<ATT_TILE>(sK, a.base + C, s0, T, a.stride, HS);
        att_load<ATT_TILE>(sV, a.base + 2 * C, s0, T, a.stride, HS);
        __syncthreads();
        if (t < T) {
            int s = s0 + lane;
            float ds = 0.0f;
            if (s <= t && s >= first) {
                float sc = 0.0f, dp = 0.0f;
                for (int d = 0; d < HS; d++) { sc += sQ[warp][d] * sK[lane][d]; dp += sdO[warp][d] * sV[lane][d]; }
                float p = expf(sc * a.scale - lse_t);
                ds = p * (dp - D_t);
            }
            for (int j = 0; j < ATT_TILE; j++) {
                float dsj = __shfl_sync(FULL_MASK, ds, j);
                for (int i = 0; i < ATT_DPL; i++) {
                    int d = lane + 32 * i;
                    if (d < HS) acc[i] += dsj * sK[j][d];
                }
            }
        }
    }
    if (t < T) att_store_grad(dqkv + a.qkv_off + (size_t)t * a.stride, acc, a.scale, accumulate, lane, HS);
}

// dk, dv: block = 8 keys of one (b, h); query tiles (with their dout, lse, D) streamed from the
// tile holding the first key to the end
__global__ void attention_backward_dkv_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                                              const float* D, const int* doc_start, int T, int NH, int HS, int accumulate) {
    __shared__ float sK[ATT_ROWS][ATT_MAX_HS];
    __shared__ float sV[ATT_ROWS][ATT_MAX_HS];
    __shared__ float sQ[ATT_TILE][ATT_MAX_HS + 1];
    __shared__ float sdO[ATT_TILE][ATT_MAX_HS + 1];
    __shared__ float slse[ATT_TILE], sD[ATT_TILE];
    __shared__ int sfirst[ATT_TILE];
    const AttHead a = att_head(qkv, T, NH, HS);
    const int lane = a.lane, warp = a.warp, C = a.C, k0 = a.r0, s = a.row;
    att_load<ATT_ROWS>(sK, a.base + C, k0, T, a.stride, HS);
    att_load<ATT_ROWS>(sV, a.base + 2 * C, k0, T, a.stride, HS);
    float dk[ATT_DPL], dv[ATT_DPL];
    for (int i = 0; i < ATT_DPL; i++) { dk[i] = 0.0f; dv[i] = 0.0f; }
    for (int q0 = k0 / ATT_TILE * ATT_TILE; q0 < T; q0 += ATT_TILE) {
        __syncthreads();
        att_load<ATT_TILE>(sQ, a.base, q0, T, a.stride, HS);
        att_load<ATT_TILE>(sdO, dout + a.out_off, q0, T, C, HS);
        if (threadIdx.x < ATT_TILE) {
            int q = q0 + threadIdx.x;
            slse[threadIdx.x] = q < T ? lse[(size_t)a.bh * T + q] : 0.0f;
            sD[threadIdx.x] = q < T ? D[(size_t)a.bh * T + q] : 0.0f;
            sfirst[threadIdx.x] = q < T && doc_start ? doc_start[(size_t)(a.bh / NH) * T + q] : 0;
        }
        __syncthreads();
        if (s < T) {
            int q = q0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (q >= s && q < T && s >= sfirst[lane]) {
                float sc = 0.0f, dp = 0.0f;
                for (int d = 0; d < HS; d++) { sc += sQ[lane][d] * sK[warp][d]; dp += sdO[lane][d] * sV[warp][d]; }
                p = expf(sc * a.scale - slse[lane]);
                ds = p * (dp - sD[lane]);
            }
            for (int j = 0; j < ATT_TILE; j++) {
                float pj = __shfl_sync(FULL_MASK, p, j), dsj = __shfl_sync(FULL_MASK, ds, j);
                for (int i = 0; i < ATT_DPL; i++) {
                    int d = lane + 32 * i;
                    if (d < HS) { dv[i] += pj * sdO[j][d]; dk[i] += dsj * sQ[j][d]; }
                }
            }
        }
    }
    if (s < T) {
        floatX* dkp = dqkv + a.qkv_off + (size_t)s * a.stride + C;
        att_store_grad(dkp, dk, a.scale, accumulate, lane, HS);
        att_store_grad(dkp + C, dv, 1.0f, accumulate, lane, HS);
    }
}

void attention_backward_simple(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                               const float* lse, const int* doc_start, int B, int T, int C, int NH, int accumulate) {
    int HS = C / NH;
    if (NH <= 0 || C % NH != 0 || HS > ATT_MAX_HS)
        fatal("use a model whose head size is at most 128", "attention_backward (cuda): head size C/NH = %d/%d must divide and be <= %d", C, NH, ATT_MAX_HS);
    if (B <= 0 || T <= 0) return;
    size_t rows = (size_t)B * NH * T;
    float* D = (float*)ops_scratch(OPS_SCRATCH_ATTN, rows * sizeof(float));
    LAUNCH(attention_backward_preprocess_kernel, ops_blocks(rows, ATT_ROWS), ATT_THREADS, 0, 0, D, dout, out, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
    dim3 grid(ops_blocks(T, ATT_ROWS), B * NH);
    LAUNCH(attention_backward_dq_kernel, grid, ATT_THREADS, 0, 0, dqkv, dout, qkv, lse, D, doc_start, T, NH, HS, accumulate);
    cudaCheck(cudaGetLastError());
    LAUNCH(attention_backward_dkv_kernel, grid, ATT_THREADS, 0, 0, dqkv, dout, qkv, lse, D, doc_start, T, NH, HS, accumulate);
    cudaCheck(cudaGetLastError());
}
