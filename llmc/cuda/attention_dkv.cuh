// Flash attention (attention.cu): the backward's dK/dV kernel, flash_attention_backward_dkv_kernel.
// A block holds BK keys (16 MK a warp: MK 2 for HS <= 64, BK 128; 1 above) with their K and V in
// shared memory and accumulates dK and dV in registers over the 64-query tiles from the diagonal
// on that see them (double-buffered), each in sub-steps of QH queries (32 for HS <= 64, 16 above:
// registers): S^T = K Q^T; P^T = exp2(S^T sl2 - lse2) packed to bf16, the A operand of
// dV += P^T dO and the P of dS^T = P^T (dP^T - D), held packed across the dP^T product;
// dP^T = V dO^T; dK += dS^T Q. Every Q and dO fragment (B operands) serves the warp's MK key
// tiles. dS^T leaves through the warp's staging tile in shared memory (4-byte stores in the
// fragments' layout, a __syncwarp, 16-byte loads and 16-byte global stores, conflict-free) into
// the dS^T tiles the dQ kernel reads.
// llmc/cuda/README.md ("Flash attention") has the kernel's counts, registers and timings.
#ifndef LLMC_CUDA_ATTENTION_DKV_CUH
#define LLMC_CUDA_ATTENTION_DKV_CUH

#include "cuda/attention_traits.cuh"
#include "cuda/attention_mask.cuh"
#include "cuda/attention_block.cuh"
#include "cuda/attention_copy.cuh"
#include "cuda/attention_softmax.cuh"
#include "cuda/attention_bwd.cuh"

// Query tile qt's Q, dO rows and lse2, D into the stage of m (one commit group).
template <int HS>
__device__ __forceinline__ void fa_dkv_load_q(const FaDkvSmem<HS>& m, const FaBwdArgs& a, const FaHead& hd, int qt,
                                              const FaCopy& cp) {
    typedef FaCfg<HS> Cf;
    int q0 = qt * FA_BN;
    const bf16* dbase = a.dout + ((size_t)hd.b * a.T + q0) * hd.C + (size_t)hd.h * HS;
    fa_load_tile<FA_BN, HS, Cf::LD>(m.q, hd.base + (size_t)q0 * hd.stride, hd.stride, a.T - q0, a.vec, cp);
    fa_load_tile<FA_BN, HS, Cf::LD>(m.dout, dbase, (size_t)hd.C, a.T - q0, a.vec, cp);
    fa_load_floats<FA_BN>(m.l2, a.L2p + (size_t)hd.bh * a.Tpad + q0);
    fa_load_floats<FA_BN>(m.d, a.Dp + (size_t)hd.bh * a.Tpad + q0);
    ptx_cp_async_commit();
}

// acc[mk] (16 x 8 QN tiles) = this warp's key tile mk (rows 16 (MK warp + mk)) of the row-major
// tile A (K or V) times the QN x 8 queries from row qs of the n-major tile Bt (Q or dO),
// transposed: S^T = K Q^T, dP^T = V dO^T. Each B fragment (two n8 query tiles) serves the MK key
// tiles.
template <int HS, int QN>
__device__ __forceinline__ void fa_mma_keys_queries(float (&acc)[FaCfg<HS>::MK][QN][4], const FaLaneOff& lo,
                                                    ptx_saddr A, ptx_saddr Bt, int qs) {
    typedef FaCfg<HS> Cf;
    const ptx_saddr a0 = A + lo.x + fa_row<Cf::LD>(16 * Cf::MK * (threadIdx.x / 32)), b0 = Bt + lo.y + fa_row<Cf::LD>(qs);
FA_UNROLL
    for (int mk = 0; mk < Cf::MK; mk++)
FA_UNROLL
        for (int n = 0; n < QN; n++) fa_zero(acc[mk][n]);
FA_UNROLL
    for (int k = 0; k < Cf::KT; k++) {
        uint32_t b[QN / 2][4];
FA_UNROLL
        for (int np = 0; np < QN / 2; np++) fa_ldsm_b_nmajor(b[np], fa_cols<Cf::LD>(b0, k) + fa_row<Cf::LD>(16 * np));
FA_UNROLL
        for (int mk = 0; mk < Cf::MK; mk++) {
            uint32_t a[4];
            fa_ldsm_a(a, fa_cols<Cf::LD>(a0, k) + fa_row<Cf::LD>(16 * mk));
FA_UNROLL
            for (int np = 0; np < QN / 2; np++) {
                ptx_mma_bf16_16816(acc[mk][2 * np], a, b[np]);
                ptx_mma_bf16_16816(acc[mk][2 * np + 1], a, b[np] + 2);
            }
        }
    }
}

// This warp's dS^T A fragments (key tile mk, k16 step kk of the sub-step) into its staging tile
// (16 MK rows x QH queries, fa_swz_narrow; stg: the tile + this lane's offset fa_dkv_stage_off):
// 4-byte stores, one wavefront each (the 8 rows g of a store fall in 8 different 4-bank sets,
// the 4 lanes t of a row in one). Rows 8 and 16 apart share the swizzle, chunks differ by an XOR.
template <int HS>
__device__ __forceinline__ void fa_dkv_stage(ptx_saddr stg, const uint32_t da[4], int mk, int kk) {
    constexpr int QH = FaCfg<HS>::QH;
    const ptx_saddr c0 = (stg ^ ((ptx_saddr)(2 * kk) << 4)) + 32 * mk * QH;       // chunk 2 kk (columns 16 kk + 2t)
    const ptx_saddr c1 = (stg ^ ((ptx_saddr)(2 * kk + 1) << 4)) + 32 * mk * QH;   // chunk 2 kk + 1 (+ 8)
    ptx_st_shared_b32(c0, da[0]);             // (g, 2t), (g, 2t + 1)
    ptx_st_shared_b32(c0 + 16 * QH, da[1]);   // rows g + 8
    ptx_st_shared_b32(c1, da[2]);             // columns + 8
    ptx_st_shared_b32(c1 + 16 * QH, da[3]);
}
// This lane's byte offset in the staging tile: row g, chunk 0, word t.
template <int HS>
__device__ __forceinline__ int fa_dkv_stage_off() {
    return 2 * (fa_swz_narrow<FaCfg<HS>::QH>(fa_lane_g(), 0) + 2 * fa_lane_t());
}

// The warp's staged dS^T (16 MK rows x QH queries) to its rows of the dS^T tile at dst (row
// stride 64): 16-byte loads (one wavefront per quarter-warp: its 8 lanes read 8 chunks of one
// 128-byte line, each line's chunks permuted) and 16-byte stores, whole 32-byte sectors. Lane l
// takes chunk l % CPR of rows l / CPR + RS j: the same swizzle for every j.
template <int HS>
__device__ __forceinline__ void fa_dkv_write_ds(bf16* dst, ptx_saddr stg) {
    constexpr int QH = FaCfg<HS>::QH, CPR = QH / 8, RS = 32 / CPR, N = 16 * FaCfg<HS>::MK / RS;
    const int lane = threadIdx.x % 32, r = lane / CPR, c = lane % CPR;
    const ptx_saddr src = stg + 2 * fa_swz_narrow<QH>(r, c);
    bf16* d = dst + r * FA_BN + 8 * c;
FA_UNROLL
    for (int j = 0; j < N; j++) {
        uint32_t v[4];
        ptx_ld_shared_v4(v, src + 2 * j * RS * QH);
        __stcg(reinterpret_cast<int4*>(d + j * RS * FA_BN), make_int4((int)v[0], (int)v[1], (int)v[2], (int)v[3]));
    }
}

// One sub-step: queries [qs, qs + QH) of the stage against this warp's keys kw.. (MK m16 tiles):
// dV += P^T dO, dK += dS^T Q (each B fragment serving the MK key tiles), dS^T (bf16) staged in
// shared memory and written to the scratch tile at dst (row 0, column 0 of the warp's rows).
template <int HS>
__device__ __forceinline__ void fa_dkv_step(float (&dk)[FaCfg<HS>::MK][HS / 8][4], float (&dv)[FaCfg<HS>::MK][HS / 8][4],
                                            const FaDkvSmem<HS>& m, const FaLaneOff& lo, int qs, int q0, int kw,
                                            bool mask, const FaBwdArgs& a, const int* ds, float sl2, bf16* dst) {
    typedef FaCfg<HS> Cf;
    constexpr int QN = Cf::QH / 8, MK = Cf::MK;
    const ptx_saddr stg = fa_sa(m.stage) + fa_dkv_stage_off<HS>();
    const ptx_saddr dout_b = fa_sa(m.dout) + lo.x + fa_row<Cf::LD>(qs), q_b = fa_sa(m.q) + lo.x + fa_row<Cf::LD>(qs);
    float s[MK][QN][4], dp[MK][QN][4];
    uint32_t pa[MK][QN / 2][4];
    fa_mma_keys_queries<HS, QN>(s, lo, fa_sa(m.k), fa_sa(m.q), qs);      // S^T
    if (mask) fa_dkv_probs<MK, QN, true>(pa, s, m.l2, qs, q0, kw, ds, a.T, sl2);
    else fa_dkv_probs<MK, QN, false>(pa, s, m.l2, qs, q0, kw, ds, a.T, sl2);
    fa_mma_keys_queries<HS, QN>(dp, lo, fa_sa(m.v), fa_sa(m.dout), qs);  // dP^T
    fa_dkv_dsoft<MK, QN>(dp, pa, m.d, qs);
    uint32_t da[MK][QN / 2][4];   // dS^T as A fragments (and into the staging tile)
FA_UNROLL
    for (int mk = 0; mk < MK; mk++)
FA_UNROLL
        for (int kk = 0; kk < QN / 2; kk++) {
            fa_pack_a(da[mk][kk], dp[mk][2 * kk], dp[mk][2 * kk + 1]);
            fa_dkv_stage<HS>(stg, da[mk][kk], mk, kk);
        }
FA_UNROLL
    for (int kk = 0; kk < QN / 2; kk++)
FA_UNROLL
        for (int np = 0; np < Cf::NT / 2; np++) {
            uint32_t b[4];
            fa_ldsm_b_kmajor(b, fa_cols<Cf::LD>(dout_b, np) + fa_row<Cf::LD>(16 * kk));
FA_UNROLL
            for (int mk = 0; mk < MK; mk++) {
                ptx_mma_bf16_16816(dv[mk][2 * np], pa[mk][kk], b);
                ptx_mma_bf16_16816(dv[mk][2 * np + 1], pa[mk][kk], b + 2);
            }
            fa_ldsm_b_kmajor(b, fa_cols<Cf::LD>(q_b, np) + fa_row<Cf::LD>(16 * kk));
FA_UNROLL
            for (int mk = 0; mk < MK; mk++) {
                ptx_mma_bf16_16816(dk[mk][2 * np], da[mk][kk], b);
                ptx_mma_bf16_16816(dk[mk][2 * np + 1], da[mk][kk], b + 2);
            }
        }
    __syncwarp();   // the warp's dS^T in its staging tile (MUTATION-TARGET dkv-ds-syncwarp)
    fa_dkv_write_ds<HS>(dst + qs, fa_sa(m.stage));
    __syncwarp();   // read by every lane before the next sub-step overwrites it
}

// dK, dV of the block's BK keys (fa_block's rank; 16 MK a warp) of head bh0 + fa_block().head,
// over the query tiles from the diagonal on that its keys are visible to, the next one copied
// into the other stage under the current one's math; dS^T tiles to a.dS for the dQ kernel.
template <int HS>
__global__ void __launch_bounds__(FA_THREADS, 2) flash_attention_backward_dkv_kernel(FaBwdArgs a) {
    typedef FaCfg<HS> Cf;
    const FaBlock blk = fa_block();   // rank 0: keys 0.., the most query tiles
    const FaHead hd = fa_head<HS>(a.qkv, a.T, a.NH, a.bh0 + blk.head);
    const int k0 = blk.rank * Cf::BK, kw = k0 + 16 * Cf::MK * (threadIdx.x / 32), nqt = a.Tpad / FA_BN;
    const int qt0 = k0 / FA_BN;
    const int* ds = fa_seq_starts(a.doc_start, hd.b, a.T);
    float dk[Cf::MK][Cf::NT][4], dv[Cf::MK][Cf::NT][4];
FA_UNROLL
    for (int mk = 0; mk < Cf::MK; mk++)
FA_UNROLL
        for (int n = 0; n < Cf::NT; n++) { fa_zero(dk[mk][n]); fa_zero(dv[mk][n]); }
    const FaLaneOff lo = fa_lane_off<Cf::LD>();
    const FaCopy cp = fa_copy_plan<HS, Cf::LD>();
    const FaDkvSmem<HS> m0 = fa_dkv_smem<HS>(0);
    fa_load_tile<Cf::BK, HS, Cf::LD>(m0.k, hd.base + hd.C + (size_t)k0 * hd.stride, hd.stride, a.T - k0, a.vec, cp);
    fa_load_tile<Cf::BK, HS, Cf::LD>(m0.v, hd.base + 2 * hd.C + (size_t)k0 * hd.stride, hd.stride, a.T - k0, a.vec, cp);
    fa_dkv_load_q<HS>(m0, a, hd, qt0, cp);   // (the same commit group as K and V)
    ptx_cp_async_wait<0>();
    __syncthreads();
    for (int qt = qt0;; qt++) {
        const int q0 = qt * FA_BN;
        const FaDkvSmem<HS> m = fa_dkv_smem<HS>((qt - qt0) & 1);
        if (qt > qt0) {
            ptx_cp_async_wait<0>();
            __syncthreads();   // tile qt in for every thread, qt - 1 done by every warp (MUTATION-TARGET dkv-syncthreads)
        }
        // a query tile whose first row's record starts after these keys sees none of them, nor
        // does any later one (attention_mask.cuh)
        const bool next = qt + 1 < nqt && (!ds || ds[(qt + 1) * FA_BN] < k0 + Cf::BK);
        if (next) fa_dkv_load_q<HS>(fa_dkv_smem<HS>((qt + 1 - qt0) & 1), a, hd, qt + 1, cp);
        if (kw < q0 + FA_BN) {   // warp-uniform: keys above the tile's diagonal have no dS tile here
            bf16* dst = fa_ds_tile(a, hd.bh - a.bh0, qt, kw / FA_BN) + (kw % FA_BN) * FA_BN;
FA_NO_UNROLL
            for (int qs = 0; qs < FA_BN; qs += Cf::QH) {   // (not unrolled: the sub-steps would share registers)
                const bool mask = fa_queries_mask_keys(ds, q0 + qs, q0 + qs + Cf::QH, kw, kw + 16 * Cf::MK - 1, a.T);
                fa_dkv_step<HS>(dk, dv, m, lo, qs, q0, kw, mask, a, ds, hd.sl2, dst);
            }
        }
        if (!next) break;
    }
    bf16* krow = a.dqkv + (hd.base - a.qkv) + hd.C;   // (dqkv has qkv's layout)
FA_UNROLL
    for (int mk = 0; mk < Cf::MK; mk++) {
        fa_store_rows<HS>(krow, hd.stride, dk[mk], kw + 16 * mk, a.T, 1.0f / sqrtf((float)HS), a.acc, a.vec);
        fa_store_rows<HS>(krow + hd.C, hd.stride, dv[mk], kw + 16 * mk, a.T, 1.0f, a.acc, a.vec);
    }
}

#endif // LLMC_CUDA_ATTENTION_DKV_CUH
