// Flash attention (attention.cu): the backward's dQ kernel, flash_attention_backward_dq_kernel.
// A block takes one 64-query tile (16 queries a warp) and sums dQ = dS K over its key tiles in
// order: the dS^T tiles the dK/dV kernel stored (read by ldmatrix .trans) and K, double-buffered
// like the forward. One writer an element and a fixed order: dQ is bitwise reproducible.
// llmc/cuda/README.md ("Flash attention") has the kernel's counts, registers and timings.
#ifndef LLMC_CUDA_ATTENTION_DQ_CUH
#define LLMC_CUDA_ATTENTION_DQ_CUH

#include "cuda/attention_traits.cuh"
#include "cuda/attention_mask.cuh"
#include "cuda/attention_block.cuh"
#include "cuda/attention_copy.cuh"
#include "cuda/attention_bwd.cuh"

// Key tile kt's dS^T tile (of query tile qt) and K rows into a dQ stage (one commit group).
template <int HS>
__device__ __forceinline__ void fa_dq_load(bf16* st, const FaBwdArgs& a, const FaHead& hd, int qt, int kt, const FaCopy& cs,
                                           const FaCopy& ck) {
    typedef FaCfg<HS> Cf;
    const int k0 = kt * FA_BN;
    fa_load_tile<FA_BN, FA_BN, FA_BN>(st, fa_ds_tile(a, hd.bh - a.bh0, qt, kt), FA_BN, FA_BN, 1, cs);
    fa_load_tile<FA_BN, HS, Cf::LD>(st + Cf::DS_TILE, hd.base + hd.C + (size_t)k0 * hd.stride, hd.stride, a.T - k0, a.vec, ck);
    ptx_cp_async_commit();
}

// Deterministic dQ of one 64-query tile (fa_block's rank from the last, longest; 16 queries a
// warp) of head bh0 + fa_block().head: dQ = sum over its key tiles, in order, of dS K, dS from the
// dK/dV kernel's tiles (ldmatrix .trans of the stored dS^T), K via ldmatrix .trans;
// double-buffered like the forward. Head sizes up to 48 ask for 5 blocks an SM, which their
// registers allow without a spill; larger ones for 3.
template <int HS>
__global__ void __launch_bounds__(FA_THREADS, HS <= 48 ? 5 : 3) flash_attention_backward_dq_kernel(FaBwdArgs a) {
    typedef FaCfg<HS> Cf;
    bf16* sm = reinterpret_cast<bf16*>(fa_smem());   // stage s at s (DS_TILE + TILE): dS^T, then K
    const FaBlock blk = fa_block();
    const FaHead hd = fa_head<HS>(a.qkv, a.T, a.NH, a.bh0 + blk.head);
    const int qt = (int)gridDim.x - 1 - blk.rank, q0 = qt * FA_BN, warp = threadIdx.x / 32, row0 = q0 + 16 * warp;
    // from the key tile of its first row's record start (attention_mask.cuh)
    const int kt0 = a.doc_start ? a.doc_start[(size_t)hd.b * a.T + q0] / FA_BN : 0, l = threadIdx.x % 32;
    constexpr int STAGE = Cf::DS_TILE + Cf::TILE;
    const FaLaneOff lo = fa_lane_off<Cf::LD>();
    const FaCopy cs = fa_copy_plan<FA_BN, FA_BN>(), ck = fa_copy_plan<HS, Cf::LD>();
    // this warp's 16 queries are columns 16 warp.. of the stored dS^T: pattern y of a 64-wide tile
    const int ds_off = 2 * fa_swz<FA_BN>((l & 7) | ((l >> 4) << 3), 2 * warp + ((l >> 3) & 1));
    float acc[Cf::NT][4];
FA_UNROLL
    for (int n = 0; n < Cf::NT; n++) fa_zero(acc[n]);
    fa_dq_load<HS>(sm, a, hd, qt, kt0, cs, ck);
    ptx_cp_async_wait<0>();
    __syncthreads();
    for (int kt = kt0; kt <= qt; kt++) {
        const ptx_saddr sds = fa_sa(sm + ((kt - kt0) & 1) * STAGE);
        if (kt > kt0) {
            ptx_cp_async_wait<0>();
            __syncthreads();   // tile kt in for every thread, kt - 1 done by every warp (MUTATION-TARGET dq-syncthreads)
        }
        if (kt < qt) fa_dq_load<HS>(sm + ((kt + 1 - kt0) & 1) * STAGE, a, hd, qt, kt + 1, cs, ck);
        if (row0 >= a.T) continue;   // warp-uniform: padding rows only
FA_UNROLL
        for (int kk = 0; kk < FA_BN / 16; kk++) {
            uint32_t da[4];
            fa_ldsm_a_trans(da, sds + ds_off + fa_row<FA_BN>(16 * kk));
FA_UNROLL
            for (int np = 0; np < Cf::NT / 2; np++) {
                uint32_t b[4];
                fa_ldsm_b_kmajor(b, fa_cols<Cf::LD>(sds + 2 * Cf::DS_TILE + lo.x, np) + fa_row<Cf::LD>(16 * kk));
                ptx_mma_bf16_16816(acc[2 * np], da, b);
                ptx_mma_bf16_16816(acc[2 * np + 1], da, b + 2);
            }
        }
    }
    fa_store_rows<HS>(a.dqkv + (size_t)hd.b * a.T * hd.stride + (size_t)hd.h * HS, hd.stride, acc, row0, a.T,
                      1.0f / sqrtf((float)HS), a.acc, a.vec);
}

#endif // LLMC_CUDA_ATTENTION_DQ_CUH
