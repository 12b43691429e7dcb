// Causal multi-head attention of the CUDA backend, FlashAttention-2 style, on the tensor cores'
// documented register layouts (mma.sync m16n8k16 bf16 -> fp32, ldmatrix, cp.async: ptx.cuh).
// The contract is llmc/ops/ops.h (and ops_cuda.h for doc_start):
//   qkv (B, T, 3, NH, HS) bf16, read in place;  out (B, T, NH, HS) bf16;  lse (B, NH, T) fp32,
//   the natural-log log-sum-exp of each row of scaled scores; backward writes dqkv (+= with
//   accumulate). doc_start (optional, (B, T) int32): query q sees keys doc_start[q] <= k <= q.
// Head sizes: multiples of 16 up to 128 (templates); 64 (every GPT-2 size) is the tuned one.
//
// This file is the host side (launchers, scratch, the head-size dispatch); the kernels are the
// headers it includes, one concern each:
//   attention_traits.cuh   tile shapes (FaCfg), register layouts, swizzles, shared memory
//   attention_mask.cuh     which keys a query sees, which key tiles a block visits
//   attention_block.cuh    the order in which blocks start (fa_block)
//   attention_copy.cuh     tile copies into shared memory, row stores out of registers
//   attention_softmax.cuh  the forward's online softmax, the backward's P and dS
//   attention_fwd.cuh      the forward kernel
//   attention_bwd.cuh      the backward's shared arguments and dS^T tiles, its preprocess kernel
//   attention_dkv.cuh      the backward's dK/dV kernel
//   attention_dq.cuh       the backward's dQ kernel
// llmc/cuda/README.md ("Flash attention") is the long form: the kernels' figures, the reasoning,
// the predictions and what the next GPU run measures. test/check_attention_sass.sh holds the
// kernels' SASS to test/attention_sass_budget.txt in every `make test`.
#include "cuda/common.cuh"
#include "cuda/ptx.cuh"
#include "cuda/attention.cuh"
#include "base/check.h"
#include "cuda/ops_cuda.h"
#include "ops/sizes.h"
#include "cuda/attention_fwd.cuh"
#include "cuda/attention_dkv.cuh"
#include "cuda/attention_dq.cuh"

int attention_flash_supported(int HS) { return ops_cuda_flash_supported(HS); }

// ops_set_deterministic lives here, beside the op it would concern: every op of this backend is
// deterministic (the attention backward has one writer a gradient element), so the flag changes
// nothing.
extern "C" void cuda_ops_set_deterministic(int on) { (void)on; }

// Dynamic shared memory above the default 48 KB must be allowed per kernel, once.
template <typename K>
static void fa_allow_smem(K kernel, size_t bytes, int* done) {
    if (*done) return;
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = 1;
}

// The backward's dS^T tiles: one head needs nt (nt + 1) / 2 tiles of 8 KB (nt 64-row tiles);
// heads go in chunks so that the buffer stays within FA_DS_MAX_BYTES (one head at least) and a
// launch takes at most FA_MAX_GRID_Y heads (grid y). The arithmetic is llmc/ops/sizes.h's, which
// the memory plan uses too.
#define FA_DS_MAX_BYTES OPS_CUDA_FA_DS_MAX_BYTES
#define FA_MAX_GRID_Y OPS_CUDA_FA_MAX_GRID_Y
static_assert(FA_BN == OPS_CUDA_FA_BN && FA_MAX_HS == OPS_CUDA_ATTN_MAX_HS, "llmc/ops/sizes.h describes these kernels");
static size_t g_ds_max_bytes = FA_DS_MAX_BYTES;
extern "C" void attention_set_ds_limit(size_t bytes) { g_ds_max_bytes = bytes ? bytes : FA_DS_MAX_BYTES; }
static int fa_ds_chunk_heads(int BNH, int T) { return ops_cuda_fa_ds_chunk_heads(BNH, T, g_ds_max_bytes); }
size_t attention_backward_scratch_bytes(int B, int T, int C, int NH) {
    return ops_cuda_attention_backward_bytes(B, T, C, NH, g_ds_max_bytes); // (attention_simple.cu's D too)
}
// ops.h's query and reservation: the forward keeps nothing between calls, the backward its
// scratch (the same ops_scratch slot that cuda_attention_backward asks for, so a reserved slot is
// not grown again at the first backward of that shape).
extern "C" size_t cuda_attention_scratch_bytes(int B, int T, int C, int NH, int backward) {
    return backward ? attention_backward_scratch_bytes(B, T, C, NH) : 0;
}
extern "C" void cuda_attention_reserve(int B, int T, int C, int NH, int backward) {
    const size_t bytes = cuda_attention_scratch_bytes(B, T, C, NH, backward);
    if (bytes) (void)ops_scratch(OPS_SCRATCH_ATTN, bytes);
}

// Grids are (tiles, heads); fa_block (attention_block.cuh) gives each block its tile and head.
template <int HS, int CH>
static void fa_forward(floatX* out, float* lse, const floatX* qkv, const int* doc_start, int B, int T, int NH, int vec) {
    typedef FaCfg<HS> Cf;
    static int smem_ok = 0;
    fa_allow_smem(flash_attention_forward_kernel<HS, CH>, Cf::FWD_SMEM, &smem_ok);
    for (int bh0 = 0; bh0 < B * NH; bh0 += FA_MAX_GRID_Y) {
        dim3 grid(ceil_div(T, Cf::BM), min(FA_MAX_GRID_Y, B * NH - bh0));
        // (LAUNCH is a macro: a template argument list with a comma goes through a pointer, named
        // as the kernel for the harness' launch log)
        auto* const flash_attention_forward_kernel = ::flash_attention_forward_kernel<HS, CH>;
        LAUNCH(flash_attention_forward_kernel, grid, FA_THREADS, Cf::FWD_SMEM, 0, out, lse, qkv, doc_start, T, NH, bh0, vec);
        cudaCheck(cudaGetLastError());
    }
}

// The forward's softmax chunks a key tile (FA_CH): the other count (3 - FA_CH) exists for head
// size 64 only, for attention_bench to time both and for the test to check both (why both stay:
// FA_CH in attention_fwd.cuh).
static int g_fwd_chunks = FA_CH;
extern "C" void attention_set_forward_chunks(int chunks) { g_fwd_chunks = chunks == 1 || chunks == 2 ? chunks : FA_CH; }
template <int HS>
static void fa_forward_chunks(floatX* out, float* lse, const floatX* qkv, const int* doc_start, int B, int T, int NH, int vec) {
    if constexpr (HS == 64) {
        if (g_fwd_chunks != FA_CH) return fa_forward<HS, 3 - FA_CH>(out, lse, qkv, doc_start, B, T, NH, vec);
    }
    fa_forward<HS, FA_CH>(out, lse, qkv, doc_start, B, T, NH, vec);
}

// The dK/dV and dQ kernels, per chunk of heads (the dS^T tiles of one chunk at a time).
template <int HS>
static void fa_backward(FaBwdArgs a, int BNH) {
    typedef FaCfg<HS> Cf;
    static int ok_dkv = 0, ok_dq = 0;
    fa_allow_smem(flash_attention_backward_dkv_kernel<HS>, Cf::DKV_SMEM, &ok_dkv);
    fa_allow_smem(flash_attention_backward_dq_kernel<HS>, Cf::DQ_SMEM, &ok_dq);
    const int chunk = fa_ds_chunk_heads(BNH, a.T);
    if ((size_t)chunk * ops_cuda_fa_ds_head_bytes(a.T) / sizeof(bf16) > 0xffffffffu)
        fatal("use a shorter sequence (T up to ~46K)", "flash attention backward: T = %d is too long for the dS tiles' 32-bit offsets", a.T);
    for (a.bh0 = 0; a.bh0 < BNH; a.bh0 += chunk) {
        const int heads = min(chunk, BNH - a.bh0);
        LAUNCH(flash_attention_backward_dkv_kernel<HS>, dim3(ceil_div(a.T, Cf::BK), heads), FA_THREADS, Cf::DKV_SMEM, 0, a);
        cudaCheck(cudaGetLastError());
        LAUNCH(flash_attention_backward_dq_kernel<HS>, dim3(a.Tpad / FA_BN, heads), FA_THREADS, Cf::DQ_SMEM, 0, a);
        cudaCheck(cudaGetLastError());
    }
}

#define FA_DISPATCH(HS_, CALL)                                                                       \
    switch (HS_) {                                                                                   \
    case 16: CALL(16); break;  case 32: CALL(32); break;  case 48: CALL(48); break;                 \
    case 64: CALL(64); break;  case 80: CALL(80); break;  case 96: CALL(96); break;                 \
    case 112: CALL(112); break; case 128: CALL(128); break;                                         \
    default: fatal("use a head size that is a multiple of 16 up to 128", "flash attention: head size %d", HS_); \
    }

extern "C" void cuda_attention_forward(floatX* out, float* lse, const floatX* qkv, const int* doc_start, int B, int T,
                                       int C, int NH) {
    if (NH <= 0 || C % NH != 0)
        fatal("use a model whose n_embd is a multiple of n_head", "attention_forward (cuda): C = %d, NH = %d", C, NH);
    int HS = C / NH;
    if (!attention_flash_supported(HS)) { attention_forward_simple(out, lse, qkv, doc_start, B, T, C, NH); return; }
    if (B <= 0 || T <= 0) return;
    // cp.async and 4-byte stores: every row start is a multiple of 8 elements when HS is; the bases must be 16-byte aligned
    int vec = ops_aligned16(out) && ops_aligned16(qkv);
#define FA_FWD(hs) fa_forward_chunks<hs>(out, lse, qkv, doc_start, B, T, NH, vec)
    FA_DISPATCH(HS, FA_FWD)
#undef FA_FWD
}

extern "C" void cuda_attention_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                        const float* lse, const int* doc_start, int B, int T, int C, int NH,
                                        int accumulate) {
    if (NH <= 0 || C % NH != 0)
        fatal("use a model whose n_embd is a multiple of n_head", "attention_backward (cuda): C = %d, NH = %d", C, NH);
    int HS = C / NH;
    if (!attention_flash_supported(HS)) {
        attention_backward_simple(dqkv, dout, qkv, out, lse, doc_start, B, T, C, NH, accumulate);
        return;
    }
    if (B <= 0 || T <= 0) return;
    const int BNH = B * NH, Tpad = ceil_div(T, FA_BN) * FA_BN;
    const size_t rows = (size_t)BNH * Tpad;
    // scratch: Dp, L2p (rows each), then the dS^T tiles
    float* Dp = (float*)ops_scratch(OPS_SCRATCH_ATTN, attention_backward_scratch_bytes(B, T, C, NH));
    FaBwdArgs a = {dqkv, dout, qkv, Dp, Dp + rows, doc_start, (bf16*)(Dp + 2 * rows), T, Tpad, NH, 0, accumulate, 0};
    a.vec = ops_aligned16(dqkv) && ops_aligned16(dout) && ops_aligned16(qkv);
    LAUNCH(flash_attention_backward_preprocess_kernel, ops_blocks(rows, 16), 256, 0, 0, Dp, Dp + rows, dout, out, lse, BNH, T,
           Tpad, NH, HS, a.vec && ops_aligned16(out));
    cudaCheck(cudaGetLastError());
#define FA_BWD(hs) fa_backward<hs>(a, BNH)
    FA_DISPATCH(HS, FA_BWD)
#undef FA_BWD
}
