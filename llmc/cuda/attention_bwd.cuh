// Flash attention (attention.cu): what the backward's kernels share, and its first kernel. The
// backward is one pass per key block: the preprocess (here) makes each row's D = rowsum(dO o O)
// and lse log2(e); the dK/dV kernel (attention_dkv.cuh) accumulates a key block's dK and dV in
// registers over the query tiles that see it and stores each dS^T tile (fa_ds_tile); the dQ
// kernel (attention_dq.cuh) sums dS K over a query tile's key tiles in a fixed order. Every
// gradient element has one writer, so the backward is bitwise reproducible. dK and dQ get
// 1 / sqrt(HS) at the end; results are added to dqkv in fp32 and rounded once.
// llmc/cuda/README.md ("Flash attention") has the kernels' figures and the scratch's sizes.
#ifndef LLMC_CUDA_ATTENTION_BWD_CUH
#define LLMC_CUDA_ATTENTION_BWD_CUH

#include "cuda/attention_traits.cuh"

// Per row t of head bh (row = bh Tpad + t): Dp = dout . out, L2p = lse log2(e); rows in [T, Tpad)
// get 0 (the kernels cp.async whole 64-row tiles of both). Half a warp per row, each lane one
// 16-byte chunk of dout and out (HS / 8 <= 16 chunks; element loads when vec is 0): one pass over
// both at full width. Rows come in multiples of 64, so every warp is whole.
__global__ void flash_attention_backward_preprocess_kernel(float* Dp, float* L2p, const floatX* dout, const floatX* out,
                                                           const float* lse, int BNH, int T, int Tpad, int NH, int HS,
                                                           int vec) {
    const int sub = threadIdx.x % 16;
    const size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 16;
    if (row >= (size_t)BNH * Tpad) return;   // whole warps
    const int t = (int)(row % Tpad), bh = (int)(row / Tpad), b = bh / NH, h = bh % NH;
    float s = 0.0f;
    if (t < T && sub < HS / 8) {
        const size_t off = ((size_t)b * T + t) * NH * HS + (size_t)h * HS + 8 * sub;
        if (vec) {
            const x128 d = load128(dout + off), o = load128(out + off);
            for (int k = 0; k < 8; k++) s += __bfloat162float(d[k]) * __bfloat162float(o[k]);
        } else {
            for (int k = 0; k < 8; k++) s += __bfloat162float(dout[off + k]) * __bfloat162float(out[off + k]);
        }
    }
FA_UNROLL
    for (int w = 8; w > 0; w /= 2) s += __shfl_xor_sync(FULL_MASK, s, w);
    if (sub == 0) {
        Dp[row] = s;
        L2p[row] = t < T ? lse[(size_t)bh * T + t] * FA_LOG2E : 0.0f;
    }
}

// What the backward kernels share: the tensors, the preprocessed rows, the dS^T tiles of heads
// bh0.., the head offset of this launch, and the 128-bit / accumulate flags.
struct FaBwdArgs {
    floatX* dqkv;
    const floatX* dout;
    const floatX* qkv;
    const float* Dp;
    const float* L2p;
    const int* doc_start;
    bf16* dS;
    int T, Tpad, NH, bh0, acc, vec;
};

// The dS^T tile of (query tile qt, key tile kt <= qt) of this block's head: tiles on or below the
// diagonal, row by row of query tiles, 64 x 64 bf16 each (row = key, column = query). head: the
// launch's head (fa_block), its place in the buffer. The offset is 32-bit (the launch's tiles are
// under 2^32 elements: fa_backward checks), which keeps the dK/dV kernel within its registers.
__device__ __forceinline__ bf16* fa_ds_tile(const FaBwdArgs& a, int head, int qt, int kt) {
    const unsigned nt = a.Tpad / FA_BN, pairs = nt * (nt + 1) / 2;
    return a.dS + ((unsigned)head * pairs + (unsigned)(qt * (qt + 1) / 2 + kt)) * (unsigned)(FA_BN * FA_BN);
}

#endif // LLMC_CUDA_ATTENTION_BWD_CUH
