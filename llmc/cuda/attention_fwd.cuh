// Flash attention (attention.cu): the forward kernel, flash_attention_forward_kernel<HS, CH>.
// 4 warps; a warp owns 16 MT query rows (MT 2 for HS <= 64: 128-row blocks; 1 above, 64 rows: the
// O and Q fragments of HS 128 would not fit twice). Q is loaded once into A fragments; per 64-key
// tile, double-buffered (the next tile's K and V copied under this one's math): S = Q K^T (K by
// ldmatrix), the online softmax (attention_softmax.cuh), P packed in registers, O += P V (V by
// ldmatrix .trans), in CH softmax chunks (FA_CH). Each B fragment of K and V serves the warp's MT
// query tiles. Key tiles above a warp's rows, and those wholly before its rows' record starts,
// are skipped; only tiles crossing the diagonal or a record start are masked
// (attention_mask.cuh). At the end out = O / l and lse = ln 2 (m + log2 l).
// llmc/cuda/README.md ("Flash attention") has the kernel's counts, registers and timings.
#ifndef LLMC_CUDA_ATTENTION_FWD_CUH
#define LLMC_CUDA_ATTENTION_FWD_CUH

#include "cuda/attention_traits.cuh"
#include "cuda/attention_mask.cuh"
#include "cuda/attention_block.cuh"
#include "cuda/attention_copy.cuh"
#include "cuda/attention_softmax.cuh"

// A key tile's softmax runs in CH chunks of 64 / CH keys (NC = 8 / CH n8 tiles each); with CH 2,
// chunk c + 1's product S = Q K^T is issued between chunk c's row max and its exponentials, in the
// same basic block, so that a warp's own MUFU.EX2 and FP32 work can overlap its tensor-core work
// (with CH 1 a key tile is three serial phases: QK^T, softmax, PV). Registers as one chunk (the S
// of both chunks, 64 a lane, live at most as the 64 of one step); a chunk costs one more row max
// and vote; every K and V fragment still serves the MT query tiles. CH 1 is the build's (FA_CH),
// and CH 2 stays beside it at head size 64 only because no GPU run has timed the two yet
// (attention_bench's A/B through attention_set_forward_chunks; the prediction, and the rule that
// the slower one goes, are in llmc/cuda/README.md).
#ifndef FA_CH
#define FA_CH 1
#endif

// S_c = Q K^T for this warp's rows against keys [8 NC c, 8 NC (c + 1)) of the tile sK: each B
// fragment (two n8 key tiles) serves the MT query tiles.
template <int HS, int NC>
__device__ __forceinline__ void fa_fwd_scores(float (&s)[FaCfg<HS>::MT][NC][4], const FaFwd<HS>& f,
                                              const FaLaneOff& lo, ptx_saddr sK, int c) {
    typedef FaCfg<HS> Cf;
FA_UNROLL
    for (int mt = 0; mt < Cf::MT; mt++)
FA_UNROLL
        for (int n = 0; n < NC; n++) fa_zero(s[mt][n]);
FA_UNROLL
    for (int k = 0; k < Cf::KT; k++)
FA_UNROLL
        for (int np = 0; np < NC / 2; np++) {
            uint32_t b[4];
            fa_ldsm_b_nmajor(b, fa_cols<Cf::LD>(sK + lo.y, k) + fa_row<Cf::LD>(16 * (NC / 2 * c + np)));
FA_UNROLL
            for (int mt = 0; mt < Cf::MT; mt++) {
                ptx_mma_bf16_16816(s[mt][2 * np], f.q[mt][k], b);
                ptx_mma_bf16_16816(s[mt][2 * np + 1], f.q[mt][k], b + 2);
            }
        }
}

// O += P_c V_c: the chunk's NC / 2 k16 steps of V's rows; each B fragment of V (two n8 column
// tiles) serves the MT query tiles.
template <int HS, int NC>
__device__ __forceinline__ void fa_fwd_pv(FaFwd<HS>& f, const uint32_t (&p)[FaCfg<HS>::MT][NC / 2][4],
                                          const FaLaneOff& lo, ptx_saddr sV, int c) {
    typedef FaCfg<HS> Cf;
FA_UNROLL
    for (int kk = 0; kk < NC / 2; kk++)
FA_UNROLL
        for (int np = 0; np < Cf::NT / 2; np++) {
            uint32_t b[4];
            fa_ldsm_b_kmajor(b, fa_cols<Cf::LD>(sV + lo.x, np) + fa_row<Cf::LD>(16 * (NC / 2 * c + kk)));
FA_UNROLL
            for (int mt = 0; mt < Cf::MT; mt++) {
                ptx_mma_bf16_16816(f.o[mt][2 * np], p[mt][kk], b);
                ptx_mma_bf16_16816(f.o[mt][2 * np + 1], p[mt][kk], b + 2);
            }
        }
}

// One key tile (k0) for this warp's rows (row0...), masked or not, in CH chunks: S_0; then per
// chunk c its row max (and rescale), S_{c+1}, its probabilities and O += P_c V_c. In program order
// O's rescale by chunk c + 1 comes after P_c V_c is added (the P of chunk c used the m before it).
template <int HS, int CH, bool MASK>
__device__ __forceinline__ void fa_fwd_tile(FaFwd<HS>& f, const FaLaneOff& lo, ptx_saddr sK, ptx_saddr sV,
                                            int row0, int k0, float sl2) {
    typedef FaCfg<HS> Cf;
    constexpr int NC = FA_BN / 8 / CH;
    float s[CH][Cf::MT][NC][4];
    uint32_t p[CH][Cf::MT][NC / 2][4];
    fa_fwd_scores<HS, NC>(s[0], f, lo, sK, 0);
FA_UNROLL
    for (int c = 0; c < CH; c++) {
        fa_fwd_max<HS, NC, MASK>(f, s[c], row0, k0 + 8 * NC * c, sl2);
        if (c + 1 < CH) fa_fwd_scores<HS, NC>(s[min(c + 1, CH - 1)], f, lo, sK, c + 1);   // (min: in bounds at CH 1)
        fa_fwd_probs<HS, NC>(f, s[c], p[c], sl2);
        fa_fwd_pv<HS, NC>(f, p[c], lo, sV, c);
    }
}

// out = O / l and lse = ln 2 (m + log2 l) for this warp's rows below T.
template <int HS>
__device__ __forceinline__ void fa_fwd_finish(FaFwd<HS>& f, const FaHead& hd, floatX* out, float* lse, int row0, int T,
                                              int vec) {
    typedef FaCfg<HS> Cf;
FA_UNROLL
    for (int mt = 0; mt < Cf::MT; mt++)
FA_UNROLL
        for (int h = 0; h < 2; h++) {
            float l = f.l[mt][h];
            l += __shfl_xor_sync(FULL_MASK, l, 1);
            l += __shfl_xor_sync(FULL_MASK, l, 2);
            const int q = row0 + 16 * mt + fa_c_row(2 * h);
            if (q >= T) continue;
            float inv = 1.0f / l;
            bf16* dst = out + ((size_t)hd.b * T + q) * hd.C + (size_t)hd.h * HS + fa_c_col(0);
FA_UNROLL
            for (int n = 0; n < Cf::NT; n++) fa_store2(dst + 8 * n, f.o[mt][n][2 * h] * inv, f.o[mt][n][2 * h + 1] * inv, 0, vec);
            if (fa_lane_t() == 0) lse[(size_t)hd.bh * T + q] = (f.m[mt][h] + log2f(l)) * FA_LN2;
        }
}

// This warp's rows: Q fragments from the shared Q tile, O, m, l zeroed, record starts loaded.
template <int HS>
__device__ __forceinline__ void fa_fwd_init(FaFwd<HS>& f, const FaLaneOff& lo, const bf16* sQ, const int* ds, int row0,
                                            int T) {
    typedef FaCfg<HS> Cf;
    const int warp = threadIdx.x / 32;
FA_UNROLL
    for (int mt = 0; mt < Cf::MT; mt++) {
FA_UNROLL
        for (int k = 0; k < Cf::KT; k++)
            fa_ldsm_a(f.q[mt][k], fa_cols<Cf::LD>(fa_sa(sQ) + lo.x, k) + fa_row<Cf::LD>(16 * (Cf::MT * warp + mt)));
FA_UNROLL
        for (int n = 0; n < Cf::NT; n++) fa_zero(f.o[mt][n]);
FA_UNROLL
        for (int h = 0; h < 2; h++) {
            f.m[mt][h] = -INFINITY;
            f.l[mt][h] = 0.0f;
            f.row_start[mt][h] = fa_record_start(ds, row0 + 16 * mt + fa_c_row(2 * h), T);
        }
    }
}

// K and V rows [k0, k0 + 64) into the stage at sK (V at sK + TILE).
template <int HS>
__device__ __forceinline__ void fa_fwd_load_kv(bf16* sK, const FaHead& hd, int k0, int T, int vec, const FaCopy& cp) {
    typedef FaCfg<HS> Cf;
    const bf16* k = hd.base + hd.C + (size_t)k0 * hd.stride;
    fa_load_tile<FA_BN, HS, Cf::LD>(sK, k, hd.stride, T - k0, vec, cp);
    fa_load_tile<FA_BN, HS, Cf::LD>(sK + Cf::TILE, k + hd.C, hd.stride, T - k0, vec, cp);
    ptx_cp_async_commit();
}

// Block = BM query rows of head bh0 + fa_block().head (its rank counts the query tiles from the
// last, longest), 4 warps of 16 MT rows. Key tiles kt0..kt1: from the one holding the tile's first
// record start (0 without doc_start) to the diagonal; tile kt + 1 is copied into the other stage
// while tile kt is multiplied.
template <int HS, int CH = FA_CH>
__global__ void __launch_bounds__(FA_THREADS, 2) flash_attention_forward_kernel(floatX* out, float* lse, const floatX* qkv,
                                                                                  const int* doc_start, int T, int NH,
                                                                                  int bh0, int vec) {
    typedef FaCfg<HS> Cf;
    bf16* sQ = reinterpret_cast<bf16*>(fa_smem());
    bf16* sKV = sQ + Cf::BM * Cf::LD;   // stage s: K at 2 s TILE, V at (2 s + 1) TILE
    const FaBlock blk = fa_block();
    const FaHead hd = fa_head<HS>(qkv, T, NH, bh0 + blk.head);
    const int q0 = ((int)gridDim.x - 1 - blk.rank) * Cf::BM, warp = threadIdx.x / 32;
    const int row0 = q0 + 16 * Cf::MT * warp, row_last = min(row0 + 16 * Cf::MT, T) - 1;
    const int* ds = fa_seq_starts(doc_start, hd.b, T);
    const int kt0 = fa_first_key_tile(ds, q0), kt1 = fa_last_key_tile(q0 + Cf::BM, T);
    // this warp's rows see keys from its first row's record start (starts never decrease) on
    const int warp_start = row0 < T && ds ? ds[row0] : 0, warp_start_last = row0 < T && ds ? ds[row_last] : 0;
    const FaLaneOff lo = fa_lane_off<Cf::LD>();
    const FaCopy cp = fa_copy_plan<HS, Cf::LD>();

    fa_load_tile<Cf::BM, HS, Cf::LD>(sQ, hd.base + (size_t)q0 * hd.stride, hd.stride, T - q0, vec, cp);
    fa_fwd_load_kv<HS>(sKV, hd, kt0 * FA_BN, T, vec, cp);
    ptx_cp_async_wait<0>();
    __syncthreads();
    FaFwd<HS> f;
    fa_fwd_init<HS>(f, lo, sQ, ds, row0, T);
    for (int kt = kt0; kt <= kt1; kt++) {
        const ptx_saddr sK = fa_sa(sKV + 2 * ((kt - kt0) & 1) * Cf::TILE);
        if (kt > kt0) {
            ptx_cp_async_wait<0>();
            __syncthreads();   // tile kt in for every thread, kt - 1 done by every warp (MUTATION-TARGET fwd-syncthreads)
        }
        if (kt < kt1) fa_fwd_load_kv<HS>(sKV + 2 * ((kt + 1 - kt0) & 1) * Cf::TILE, hd, (kt + 1) * FA_BN, T, vec, cp);
        const int k0 = kt * FA_BN;
        if (fa_rows_skip_tile(row0, row_last, warp_start, k0, T)) continue;
        // masked: the tile crosses the diagonal or a record start (attention_mask.cuh)
        if (k0 + FA_BN - 1 > row0 || k0 < warp_start_last) fa_fwd_tile<HS, CH, true>(f, lo, sK, sK + 2 * Cf::TILE, row0, k0, hd.sl2);
        else fa_fwd_tile<HS, CH, false>(f, lo, sK, sK + 2 * Cf::TILE, row0, k0, hd.sl2);
    }
    if (row0 < T) fa_fwd_finish<HS>(f, hd, out, lse, row0, T, vec);
}

#endif // LLMC_CUDA_ATTENTION_FWD_CUH
