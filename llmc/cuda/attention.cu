// Causal multi-head attention of the CUDA backend, FlashAttention-2 style, on the tensor cores'
// documented register layouts (mma.sync m16n8k16 bf16 -> fp32, ldmatrix, cp.async: ptx.cuh).
// The contract is llmc/ops/ops.h (and ops_cuda.h for doc_start):
//   qkv (B, T, 3, NH, HS) bf16, read in place;  out (B, T, NH, HS) bf16;  lse (B, NH, T) fp32,
//   the natural-log log-sum-exp of each row of scaled scores; backward writes dqkv (+= with
//   accumulate). doc_start (optional, (B, T) int32): query q sees keys doc_start[q] <= k <= q.
// Head sizes: multiples of 16 up to 128 (templates); 64 (every GPT-2 size) is the tuned one.
//
// Everything per row lives in registers, on the PTX ISA's fragment tables (ptx.cuh): lane l holds
// rows g = l/4 and g + 8 of each 16-row accumulator, columns 2t, 2t+1 (t = l%4) of each n8 tile,
// so a row's max and sum are 2 shuffles over the 4 lanes of a quad, and the score accumulators
// of two adjacent n8 tiles, packed to bf16, are the A operand of the next product (P V, dS K...).
// Shared-memory tiles are filled by cp.async (16 bytes a thread; rows past T zero-filled, nothing
// read past T), double-buffered so the next tile's copy runs under the current tile's math, and
// XOR-swizzled (16-byte chunk c of row r at c ^ (r % 8)) when a row is 128 or 256 bytes (HS 64,
// 128, and the 64-wide dS tiles): the 8 rows an ldmatrix reads then hit 8 different bank groups.
// Other head sizes pad each row by 16 bytes, which does the same. Grids put the heads in x and
// the tiles in y, so the longest tiles of every head start first (blocks are issued x fastest).
//
// Forward (flash_attention_forward_kernel<HS>): 4 warps; a warp owns 16 MT query rows, MT = 2 for
// HS <= 64 (128-row tiles) and 1 above (64 rows: the O and Q fragments of HS 128 would not fit
// twice). Q is loaded once into A fragments; per 64-key tile: S = Q K^T (K via ldmatrix), online
// softmax in base 2 (running max per row, per-lane partial sums, reduced once at the end), P
// packed in registers, O += P V (V via ldmatrix .trans). Key tiles above a warp's rows are never
// touched, nor those wholly before its rows' record starts; only diagonal / straddling tiles are
// masked (a template flag). lse = ln 2 (m + log2 l). Every exponential of the softmax (and of
// the backward's P) is ex2.approx.ftz (ptx.cuh): one MUFU.EX2 instead of exp2f's four
// instructions; a probability below 2^-126 becomes 0 instead of a subnormal.
//   HS 64, MT 2: per 128 x 64 tile 512 mma (2.1 MFLOP), 8192 exp2, 16 KB of K and V by cp.async
//   (L2-resident: a head's K and V are 256 KB at T 1024), 64 KB of ldmatrix. Shared memory 48 KB
//   (Q 16, 2 stages of K and V 32). Registers: Q 32 + O 64 + S 64 + P 32 + row state: 230
//   (ptxas), so 2 blocks / 8 warps an SM. B fragments serve both m16 tiles: an mma costs 128
//   bytes of ldmatrix, the SM's 128 B/clk, so shared memory (512 clk a tile) stays under the
//   tensor cores (~760 clk at mma.sync's ~660 TFLOP/s on an H100).
// Backward, in one pass per key tile:
//   preprocess: D = rowsum(dO o O) and lse log2(e), into (B NH, Tpad) arrays padded with zeros to
//     a multiple of 64 (16-byte aligned rows that the kernels cp.async);
//   dK/dV kernel: block = 64 keys (16 a warp), K and V in shared memory, dK and dV accumulated in
//     registers over the 64-query tiles from the diagonal on (those whose records see the tile):
//     S^T = K Q^T, P^T = exp2(S^T sl2 - lse2), dP^T = V dO^T, dS^T = P^T (dP^T - D), dV += P^T dO,
//     dK += dS^T Q: 4 products, P^T and dS^T go from accumulators to A operands in registers.
//     HS 64: per tile pair 512 mma (2.1 MFLOP), 16.5 KB read, 144 KB of ldmatrix (the bound:
//     ~1150 clk against the tensor cores' ~760), 49 KB of shared memory, 224-230 registers, 2
//     blocks an SM. HS > 64 takes each query tile in sub-steps of 16 queries (registers).
//   dQ, deterministic (the default): the dK/dV kernel stores each dS^T tile (64 x 64 bf16, 8 KB,
//     only tiles on or below the diagonal) to a scratch buffer; a dQ kernel per 64-query tile
//     sums dS K over its key tiles in a fixed order (cp.async double-buffered): 5 products in all,
//     like the atomic variant, and the same bf16 dS, so both give the same numbers up to fp32
//     summation order. Extra traffic per tile pair at HS 64: 8 KB written + 8 KB read (+ K, L2);
//     the dQ kernel (128 mma a pair, 32 KB of shared memory, 120 registers) is DRAM-bound.
//   dQ, non-deterministic (attention_set_deterministic(0)): after a block barrier each warp
//     multiplies 16 queries of the block's dS (read back with ldmatrix .trans) by K and adds them
//     with fp32 atomics (red.global.add) to a (B, T, C) accumulator: 16 KB of atomics per tile
//     pair; a small kernel scales it into dqkv.
//   dK and dQ get 1/sqrt(HS) at the end; results are added to dqkv in fp32 and rounded once.
// Predicted on an H100 at B 16, NH 12, T 1024, HS 64: forward ~230 TFLOP/s, backward ~170 (both
// modes within 15%); the reasoning, scratch memory and what to measure: llmc/cuda/README.md
// ("Flash attention"); dev/cuda/attention_bench measures them.
#include "cuda/common.cuh"
#include "cuda/ptx.cuh"
#include "cuda/attention.cuh"
#include "base/check.h"
#include "cuda/ops_cuda.h"
#include "ops/sizes.h"

#define FA_WARPS 4
#define FA_THREADS (FA_WARPS * 32)
#define FA_BN 64                   // keys of a forward key tile; keys of a backward block; queries of a backward step
#define FA_MAX_HS 128
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f
#if defined(__CUDACC__)
#define FA_UNROLL _Pragma("unroll")
#define FA_SMEM_ALIGN __align__(128)
#else
#define FA_UNROLL
#define FA_SMEM_ALIGN   // (the harness' dynamic shared memory is 256-byte aligned)
#endif

// Compile-time shapes of one head size.
template <int HS> struct FaCfg {
    static_assert(HS % 16 == 0 && HS >= 16 && HS <= FA_MAX_HS, "head size: a multiple of 16 up to 128");
    static constexpr int KT = HS / 16;                        // k16 steps over a head
    static constexpr int NT = HS / 8;                         // n8 tiles over a head
    static constexpr int MT = HS <= 64 ? 2 : 1;               // forward: m16 row tiles per warp
    static constexpr int BM = FA_WARPS * 16 * MT;             // forward: query rows per block
    static constexpr int QH = HS <= 64 ? FA_BN : 16;           // backward: queries per sub-step (registers)
    static constexpr int LD = HS % 64 == 0 ? HS : HS + 8;     // shared row stride (elements)
    static constexpr int TILE = FA_BN * LD;                   // elements of a 64-row tile
    static constexpr int DS_TILE = FA_BN * FA_BN;             // elements of a dS tile
    // forward: Q (BM rows), then 2 stages of K, V
    static constexpr size_t FWD_SMEM = ((size_t)BM * LD + 4 * TILE) * 2;
    // dK/dV: K, V, then 2 stages of Q, dO (bf16) and lse2, D (64 floats each), then the atomic
    // variant's dS^T tile
    static constexpr size_t DKV_STAGE = (size_t)2 * TILE * 2 + 2 * FA_BN * 4;
    static constexpr size_t DKV_SMEM = (size_t)2 * TILE * 2 + 2 * DKV_STAGE;
    static constexpr size_t DKV_ATOMIC_SMEM = DKV_SMEM + (size_t)DS_TILE * 2;
    // dQ: 2 stages of (dS^T tile, K tile)
    static constexpr size_t DQ_SMEM = (size_t)2 * (DS_TILE + TILE) * 2;
};

// Element offset of 16-byte chunk c of row r in a shared tile of row stride LD (elements).
template <int LD>
__device__ __forceinline__ int fa_swz(int r, int c) {
    if constexpr (LD % 64 == 0) return r * LD + ((c ^ (r & 7)) << 3);
    else return r * LD + (c << 3);
}
// ldmatrix.x4 row addresses (ptx.cuh): pattern X serves an A operand from a row-major tile and
// two B n8 tiles from a k-major tile (.trans); pattern Y two B n8 tiles from an n-major tile and
// an A operand from a k-major tile (.trans). (row0, chunk0): the 16 x 16 block's corner.
template <int LD>
__device__ __forceinline__ const bf16* fa_ldsm_x(const bf16* tile, int row0, int chunk0) {
    int l = threadIdx.x % 32;
    return tile + fa_swz<LD>(row0 + (l & 15), chunk0 + (l >> 4));
}
template <int LD>
__device__ __forceinline__ const bf16* fa_ldsm_y(const bf16* tile, int row0, int chunk0) {
    int l = threadIdx.x % 32;
    return tile + fa_swz<LD>(row0 + ((l & 7) | ((l >> 4) << 3)), chunk0 + ((l >> 3) & 1));
}

// The block's dynamic shared memory. (A non-template function: g++ -O3 drops the null check of
// the weak TLS init function when an extern thread_local, as the harness makes it, is declared
// in a template.)
__device__ inline unsigned char* fa_smem() {
    extern __shared__ FA_SMEM_ALIGN unsigned char smem[];
    return smem;
}

// ROWS rows of W bf16 (row i at src + i stride) into a shared tile of row stride LD; rows at or
// past nvalid become zeros and are not read. vec: cp.async (the caller commits and waits); else
// element loads and plain shared stores (misaligned rows). All threads of the block.
template <int ROWS, int W, int LD>
__device__ __forceinline__ void fa_load_tile(bf16* dst, const bf16* src, size_t stride, int nvalid, int vec) {
    constexpr int CH = W / 8;
FA_UNROLL
    for (int i = threadIdx.x; i < ROWS * CH; i += FA_THREADS) {
        int r = i / CH, c = i % CH;
        bf16* d = dst + fa_swz<LD>(r, c);
        const bf16* s = src + (size_t)r * stride + 8 * c;
        if (vec) {
            ptx_cp_async_16(d, r < nvalid ? s : src, r < nvalid ? 16 : 0);
        } else {
            x128 v = x128::zeros();
            if (r < nvalid) for (int k = 0; k < 8; k++) v[k] = s[k];
            store128(d, v);
        }
    }
}
// n floats (a multiple of 4, 16-byte aligned) into shared memory by cp.async.
__device__ __forceinline__ void fa_load_floats(float* dst, const float* src, int n) {
    for (int i = threadIdx.x; i < n / 4; i += FA_THREADS) ptx_cp_async_16(dst + 4 * i, src + 4 * i);
}

// Two adjacent elements of a bf16 row (+)= (a, b), rounded once; 4-byte access when vec.
__device__ __forceinline__ void fa_store2(bf16* p, float a, float b, int acc, int vec) {
    if (vec) {
        __nv_bfloat162* p2 = reinterpret_cast<__nv_bfloat162*>(p);
        if (acc) { __nv_bfloat162 o = *p2; a += __low2float(o); b += __high2float(o); }
        *p2 = __floats2bfloat162_rn(a, b);
    } else {
        if (acc) { a += __bfloat162float(p[0]); b += __bfloat162float(p[1]); }
        p[0] = __float2bfloat16(a);
        p[1] = __float2bfloat16(b);
    }
}

// C fragments of two adjacent n8 tiles as the A operand of a k16 step (ptx.cuh's last rule).
__device__ __forceinline__ void fa_pack_a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = ptx_pack_bf16x2(c0[0], c0[1]);
    a[1] = ptx_pack_bf16x2(c0[2], c0[3]);
    a[2] = ptx_pack_bf16x2(c1[0], c1[1]);
    a[3] = ptx_pack_bf16x2(c1[2], c1[3]);
}

// acc[n] (16 x 8 n8 tiles, n < 2 NP) += A (this warp's 16 x 16 k-step) times B, for the 2 NP n8
// tiles of B from column chunk chunk0 whose 16-row (k) block starts at row k0 of a k-major tile
// (ldmatrix .trans): O += P V, and dV += P^T dO, dK += dS^T Q, dQ += dS K.
template <int LD, int NP>
__device__ __forceinline__ void fa_mma_kmajor(float (*acc)[4], const uint32_t a[4], const bf16* tile, int k0, int chunk0) {
FA_UNROLL
    for (int np = 0; np < NP; np++) {
        uint32_t b[4];
        ptx_ldmatrix_x4_trans(b, fa_ldsm_x<LD>(tile, k0, chunk0 + 2 * np));
        ptx_mma_bf16_16816(acc[2 * np], a, b);
        ptx_mma_bf16_16816(acc[2 * np + 1], a, b + 2);
    }
}

// The head a block works on: (b, h) of bh0 + blockIdx.x = b NH + h, its q section in qkv (k at + C,
// v at + 2C; rows `stride` = 3C apart) and the factor taking scores to base-2 exponents.
struct FaHead {
    int bh, b, h, C;
    size_t stride;
    const bf16* base;
    float sl2;
};
template <int HS>
__device__ __forceinline__ FaHead fa_head(const bf16* qkv, int T, int NH, int bh0) {
    FaHead a;
    a.bh = bh0 + blockIdx.x;
    a.b = a.bh / NH;
    a.h = a.bh % NH;
    a.C = NH * HS;
    a.stride = 3 * (size_t)a.C;
    a.base = qkv + (size_t)a.b * T * a.stride + (size_t)a.h * HS;
    a.sl2 = FA_LOG2E / sqrtf((float)HS);
    return a;
}

// ---------------------------------------------------------------------------------------------
// forward

// One warp's registers across the key tiles: Q as A fragments, O accumulators, and per row (r:
// m16 tile mt, half h = rows g / g + 8) the running max m (base-2 units), this lane's partial
// sum l and the row's record start (masking).
template <int HS> struct FaFwd {
    typedef FaCfg<HS> Cf;
    uint32_t q[Cf::MT][Cf::KT][4];
    float o[Cf::MT][Cf::NT][4];
    float m[Cf::MT][2], l[Cf::MT][2];
    int row_start[Cf::MT][2];
};

// S = Q K^T for this warp's rows against the 64 keys of the tile sK.
template <int HS>
__device__ __forceinline__ void fa_fwd_scores(float (&s)[FaCfg<HS>::MT][8][4], const FaFwd<HS>& f, const bf16* sK) {
    typedef FaCfg<HS> Cf;
FA_UNROLL
    for (int mt = 0; mt < Cf::MT; mt++)
FA_UNROLL
        for (int n = 0; n < 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
FA_UNROLL
    for (int k = 0; k < Cf::KT; k++)
FA_UNROLL
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            ptx_ldmatrix_x4(b, fa_ldsm_y<Cf::LD>(sK, 16 * np, 2 * k));
FA_UNROLL
            for (int mt = 0; mt < Cf::MT; mt++) {
                ptx_mma_bf16_16816(s[mt][2 * np], f.q[mt][k], b);
                ptx_mma_bf16_16816(s[mt][2 * np + 1], f.q[mt][k], b + 2);
            }
        }
}

// Online softmax of one key tile: masks (MASK: keys past the row or before its record start get
// -inf), new row max over the quad, rescales O and l by exp2(m_old - m_new), turns s into the
// probabilities and packs them as A fragments p (4 k16 steps over the tile's keys). A row that
// sees no key yet keeps m = -inf and subtracts 0 instead, so no inf - inf is formed.
template <int HS, bool MASK>
__device__ __forceinline__ void fa_fwd_softmax(FaFwd<HS>& f, float (&s)[FaCfg<HS>::MT][8][4],
                                               uint32_t (&p)[FaCfg<HS>::MT][4][4], int row0, int k0, float sl2) {
    typedef FaCfg<HS> Cf;
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
FA_UNROLL
    for (int mt = 0; mt < Cf::MT; mt++) {
        float mx[2] = {-INFINITY, -INFINITY}, base[2];
FA_UNROLL
        for (int n = 0; n < 8; n++)
FA_UNROLL
            for (int e = 0; e < 4; e++) {
                if (MASK) {
                    int q = row0 + 16 * mt + g + 8 * (e >> 1), k = k0 + 8 * n + 2 * t + (e & 1);
                    if (k > q || k < f.row_start[mt][e >> 1]) s[mt][n][e] = -INFINITY;
                }
                mx[e >> 1] = fmaxf(mx[e >> 1], s[mt][n][e]);
            }
FA_UNROLL
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL_MASK, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL_MASK, mx[h], 2));
            float mnew = fmaxf(f.m[mt][h], mx[h] * sl2);
            base[h] = mnew == -INFINITY ? 0.0f : mnew;
            float alpha = ptx_ex2_approx_ftz(f.m[mt][h] - base[h]);
            f.m[mt][h] = mnew;
            f.l[mt][h] *= alpha;
FA_UNROLL
            for (int n = 0; n < Cf::NT; n++) { f.o[mt][n][2 * h] *= alpha; f.o[mt][n][2 * h + 1] *= alpha; }
        }
FA_UNROLL
        for (int n = 0; n < 8; n++)
FA_UNROLL
            for (int e = 0; e < 4; e++) {
                s[mt][n][e] = ptx_ex2_approx_ftz(fmaf(s[mt][n][e], sl2, -base[e >> 1]));
                f.l[mt][e >> 1] += s[mt][n][e];
            }
FA_UNROLL
        for (int kk = 0; kk < 4; kk++) fa_pack_a(p[mt][kk], s[mt][2 * kk], s[mt][2 * kk + 1]);
    }
}

// One key tile (k0) for this warp's rows (row0...): S, softmax (masked or not), O += P V.
template <int HS>
__device__ __forceinline__ void fa_fwd_tile(FaFwd<HS>& f, const bf16* sK, const bf16* sV, int row0, int k0, bool mask,
                                            float sl2) {
    typedef FaCfg<HS> Cf;
    float s[Cf::MT][8][4];
    uint32_t p[Cf::MT][4][4];
    fa_fwd_scores<HS>(s, f, sK);
    if (mask) fa_fwd_softmax<HS, true>(f, s, p, row0, k0, sl2);
    else fa_fwd_softmax<HS, false>(f, s, p, row0, k0, sl2);
FA_UNROLL
    for (int kk = 0; kk < 4; kk++)
FA_UNROLL
        for (int mt = 0; mt < Cf::MT; mt++) fa_mma_kmajor<Cf::LD, Cf::NT / 2>(f.o[mt], p[mt][kk], sV, 16 * kk, 0);
}

// out = O / l and lse = ln 2 (m + log2 l) for this warp's rows below T.
template <int HS>
__device__ __forceinline__ void fa_fwd_finish(FaFwd<HS>& f, const FaHead& hd, floatX* out, float* lse, int row0, int T,
                                              int vec) {
    typedef FaCfg<HS> Cf;
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
FA_UNROLL
    for (int mt = 0; mt < Cf::MT; mt++)
FA_UNROLL
        for (int h = 0; h < 2; h++) {
            float l = f.l[mt][h];
            l += __shfl_xor_sync(FULL_MASK, l, 1);
            l += __shfl_xor_sync(FULL_MASK, l, 2);
            int q = row0 + 16 * mt + g + 8 * h;
            if (q >= T) continue;
            float inv = 1.0f / l;
            bf16* dst = out + ((size_t)hd.b * T + q) * hd.C + (size_t)hd.h * HS + 2 * t;
FA_UNROLL
            for (int n = 0; n < Cf::NT; n++) fa_store2(dst + 8 * n, f.o[mt][n][2 * h] * inv, f.o[mt][n][2 * h + 1] * inv, 0, vec);
            if (t == 0) lse[(size_t)hd.bh * T + q] = (f.m[mt][h] + log2f(l)) * FA_LN2;
        }
}

// This warp's rows: Q fragments from the shared Q tile, O, m, l zeroed, record starts loaded.
template <int HS>
__device__ __forceinline__ void fa_fwd_init(FaFwd<HS>& f, const bf16* sQ, const int* ds, int row0, int T) {
    typedef FaCfg<HS> Cf;
    const int g = (threadIdx.x % 32) / 4, warp = threadIdx.x / 32;
FA_UNROLL
    for (int mt = 0; mt < Cf::MT; mt++) {
FA_UNROLL
        for (int k = 0; k < Cf::KT; k++) ptx_ldmatrix_x4(f.q[mt][k], fa_ldsm_x<Cf::LD>(sQ, 16 * (Cf::MT * warp + mt), 2 * k));
FA_UNROLL
        for (int n = 0; n < Cf::NT; n++) f.o[mt][n][0] = f.o[mt][n][1] = f.o[mt][n][2] = f.o[mt][n][3] = 0.0f;
FA_UNROLL
        for (int h = 0; h < 2; h++) {
            int q = row0 + 16 * mt + g + 8 * h;
            f.m[mt][h] = -INFINITY;
            f.l[mt][h] = 0.0f;
            f.row_start[mt][h] = ds && q < T ? ds[q] : 0;
        }
    }
}

// K and V rows [k0, k0 + 64) into the stage at sK (V at sK + TILE).
template <int HS>
__device__ __forceinline__ void fa_fwd_load_kv(bf16* sK, const FaHead& hd, int k0, int T, int vec) {
    typedef FaCfg<HS> Cf;
    const bf16* k = hd.base + hd.C + (size_t)k0 * hd.stride;
    fa_load_tile<FA_BN, HS, Cf::LD>(sK, k, hd.stride, T - k0, vec);
    fa_load_tile<FA_BN, HS, Cf::LD>(sK + Cf::TILE, k + hd.C, hd.stride, T - k0, vec);
    ptx_cp_async_commit();
}

// Block = BM query rows of one head (blockIdx.x = b NH + h; blockIdx.y counts from the last,
// longest, tile), 4 warps of 16 MT rows. Key tiles kt0..kt1: from the one holding the tile's
// first record start (0 without doc_start) to the diagonal; tile kt + 1 is copied into the
// other stage while tile kt is multiplied.
template <int HS>
__global__ void __launch_bounds__(FA_THREADS, 2) flash_attention_forward_kernel(floatX* out, float* lse, const floatX* qkv,
                                                                                  const int* doc_start, int T, int NH, int vec) {
    typedef FaCfg<HS> Cf;
    bf16* sQ = reinterpret_cast<bf16*>(fa_smem());
    bf16* sKV = sQ + Cf::BM * Cf::LD;   // stage s: K at 2 s TILE, V at (2 s + 1) TILE
    const FaHead hd = fa_head<HS>(qkv, T, NH, 0);
    const int q0 = (gridDim.y - 1 - blockIdx.y) * Cf::BM, warp = threadIdx.x / 32;
    const int row0 = q0 + 16 * Cf::MT * warp, row_last = min(row0 + 16 * Cf::MT, T) - 1;
    const int* ds = doc_start ? doc_start + (size_t)hd.b * T : NULL;
    const int kt0 = ds ? ds[q0] / FA_BN : 0, kt1 = (min(q0 + Cf::BM, T) - 1) / FA_BN;
    // this warp's rows see keys from its first row's record start (starts never decrease) on
    const int warp_start = row0 < T && ds ? ds[row0] : 0, warp_start_last = row0 < T && ds ? ds[row_last] : 0;

    fa_load_tile<Cf::BM, HS, Cf::LD>(sQ, hd.base + (size_t)q0 * hd.stride, hd.stride, T - q0, vec);
    fa_fwd_load_kv<HS>(sKV, hd, kt0 * FA_BN, T, vec);
    ptx_cp_async_wait<0>();
    __syncthreads();
    FaFwd<HS> f;
    fa_fwd_init<HS>(f, sQ, ds, row0, T);
    for (int kt = kt0; kt <= kt1; kt++) {
        const bf16* sK = sKV + 2 * ((kt - kt0) & 1) * Cf::TILE;
        if (kt > kt0) {
            ptx_cp_async_wait<0>();
            __syncthreads();   // tile kt in for every thread, kt - 1 done by every warp (MUTATION-TARGET fwd-syncthreads)
        }
        if (kt < kt1) fa_fwd_load_kv<HS>(sKV + 2 * ((kt + 1 - kt0) & 1) * Cf::TILE, hd, (kt + 1) * FA_BN, T, vec);
        const int k0 = kt * FA_BN;
        // warp-uniform: padding rows only, a tile above the diagonal, or one wholly before the records
        if (row0 >= T || k0 > row_last || k0 + FA_BN <= warp_start) continue;
        fa_fwd_tile<HS>(f, sK, sK + Cf::TILE, row0, k0, k0 + FA_BN - 1 > row0 || k0 < warp_start_last, hd.sl2);
    }
    if (row0 < T) fa_fwd_finish<HS>(f, hd, out, lse, row0, T, vec);
}

// ---------------------------------------------------------------------------------------------
// backward

// Per row t of head bh (row = bh Tpad + t): Dp = dout . out, L2p = lse log2(e); rows in [T, Tpad)
// get 0 (the kernels cp.async whole 64-row tiles of both). One warp per row.
__global__ void flash_attention_backward_preprocess_kernel(float* Dp, float* L2p, const floatX* dout, const floatX* out,
                                                           const float* lse, int BNH, int T, int Tpad, int NH, int HS) {
    int lane = threadIdx.x % 32;
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= (size_t)BNH * Tpad) return;   // whole warps
    int t = (int)(row % Tpad), bh = (int)(row / Tpad), b = bh / NH, h = bh % NH;
    float s = 0.0f;
    if (t < T) {
        size_t off = ((size_t)b * T + t) * NH * HS + (size_t)h * HS;
        for (int d = lane; d < HS; d += 32) s += __bfloat162float(dout[off + d]) * __bfloat162float(out[off + d]);
    }
    s = warp_reduce_sum(s);
    if (lane == 0) {
        Dp[row] = s;
        L2p[row] = t < T ? lse[(size_t)bh * T + t] * FA_LOG2E : 0.0f;
    }
}

// What the backward kernels share: the tensors, the preprocessed rows, the dQ path's buffer
// (deterministic: the dS^T tiles of heads bh0..; atomic: the fp32 dQ accumulator), the head
// offset of this launch, and the 128-bit / accumulate flags.
struct FaBwdArgs {
    floatX* dqkv;
    const floatX* dout;
    const floatX* qkv;
    const float* Dp;
    const float* L2p;
    const int* doc_start;
    bf16* dS;
    float* dq_acc;
    int T, Tpad, NH, bh0, acc, vec;
};

// The dS^T tile of (query tile qt, key tile kt <= qt) of head bh: tiles on or below the diagonal,
// row by row of query tiles, 64 x 64 bf16 each (row = key, column = query).
__device__ __forceinline__ bf16* fa_ds_tile(const FaBwdArgs& a, int bh, int qt, int kt) {
    int nt = a.Tpad / FA_BN;
    size_t pairs = (size_t)nt * (nt + 1) / 2;
    return a.dS + ((size_t)(bh - a.bh0) * pairs + (size_t)qt * (qt + 1) / 2 + kt) * (FA_BN * FA_BN);
}

// A warp's 16-row accumulator (rows r0 + g, r0 + g + 8; HS columns) times scale, (+)= into the
// rows of dst (row r at dst + r stride) below T.
template <int HS>
__device__ __forceinline__ void fa_store_rows(bf16* dst, size_t stride, const float (&acc)[HS / 8][4], int r0, int T,
                                              float scale, int accum, int vec) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
FA_UNROLL
    for (int h = 0; h < 2; h++) {
        int r = r0 + g + 8 * h;
        if (r >= T) continue;
        bf16* d = dst + (size_t)r * stride + 2 * t;
FA_UNROLL
        for (int n = 0; n < HS / 8; n++) fa_store2(d + 8 * n, acc[n][2 * h] * scale, acc[n][2 * h + 1] * scale, accum, vec);
    }
}

// The dK/dV kernel's shared memory: K, V of the block's keys, then per stage the query tile's
// Q, dO, lse2, D, then (atomic variant) the block's dS^T tile. (Pointers of one stage, computed
// per stage: an array indexed by the stage would live in local memory.)
template <int HS> struct FaDkvSmem {
    bf16 *k, *v, *q, *dout, *ds;
    float *l2, *d;
};
template <int HS>
__device__ __forceinline__ FaDkvSmem<HS> fa_dkv_smem(int stage) {
    typedef FaCfg<HS> Cf;
    FaDkvSmem<HS> m;
    unsigned char* p = fa_smem();
    m.k = reinterpret_cast<bf16*>(p);
    m.v = m.k + Cf::TILE;
    m.q = reinterpret_cast<bf16*>(p + (size_t)2 * Cf::TILE * 2 + stage * Cf::DKV_STAGE);
    m.dout = m.q + Cf::TILE;
    m.l2 = reinterpret_cast<float*>(m.dout + Cf::TILE);
    m.d = m.l2 + FA_BN;
    m.ds = reinterpret_cast<bf16*>(p + Cf::DKV_SMEM);
    return m;
}

// Query tile qt's Q, dO rows and lse2, D into the stage of m (one commit group).
template <int HS>
__device__ __forceinline__ void fa_dkv_load_q(const FaDkvSmem<HS>& m, const FaBwdArgs& a, const FaHead& hd, int qt) {
    typedef FaCfg<HS> Cf;
    int q0 = qt * FA_BN;
    const bf16* dbase = a.dout + ((size_t)hd.b * a.T + q0) * hd.C + (size_t)hd.h * HS;
    fa_load_tile<FA_BN, HS, Cf::LD>(m.q, hd.base + (size_t)q0 * hd.stride, hd.stride, a.T - q0, a.vec);
    fa_load_tile<FA_BN, HS, Cf::LD>(m.dout, dbase, (size_t)hd.C, a.T - q0, a.vec);
    fa_load_floats(m.l2, a.L2p + (size_t)hd.bh * a.Tpad + q0, FA_BN);
    fa_load_floats(m.d, a.Dp + (size_t)hd.bh * a.Tpad + q0, FA_BN);
    ptx_cp_async_commit();
}

// acc (16 x 8 QN tiles) = this warp's 16 rows of the row-major tile A (HS columns) times the QN
// x 8 rows from row n0 of the n-major tile Bt, transposed: S^T = K Q^T and dP^T = V dO^T.
template <int HS, int QN>
__device__ __forceinline__ void fa_mma_nmajor(float (&acc)[QN][4], const bf16* A, const bf16* Bt, int n0) {
    typedef FaCfg<HS> Cf;
    const int warp = threadIdx.x / 32;
FA_UNROLL
    for (int n = 0; n < QN; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
FA_UNROLL
    for (int k = 0; k < Cf::KT; k++) {
        uint32_t a[4];
        ptx_ldmatrix_x4(a, fa_ldsm_x<Cf::LD>(A, 16 * warp, 2 * k));
FA_UNROLL
        for (int np = 0; np < QN / 2; np++) {
            uint32_t b[4];
            ptx_ldmatrix_x4(b, fa_ldsm_y<Cf::LD>(Bt, n0 + 16 * np, 2 * k));
            ptx_mma_bf16_16816(acc[2 * np], a, b);
            ptx_mma_bf16_16816(acc[2 * np + 1], a, b + 2);
        }
    }
}

// P^T and dS^T of this warp's 16 keys (rows) and queries qs.. of the stage (columns), in place:
// s (scores) becomes P^T = exp2(S^T sl2 - lse2), dp becomes dS^T = P^T (dP^T - D). MASK: pairs
// a query must not see (key after it, query past T, key before its record start) get P = 0.
template <int QN, bool MASK>
__device__ __forceinline__ void fa_dkv_probs(float (&s)[QN][4], float (&dp)[QN][4], const float* sl2v, const float* sd,
                                             int qs, int q0, int kw, const int* ds, int T, float sl2) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
FA_UNROLL
    for (int n = 0; n < QN; n++)
FA_UNROLL
        for (int e = 0; e < 4; e++) {
            int c = qs + 8 * n + 2 * t + (e & 1);
            float p = ptx_ex2_approx_ftz(fmaf(s[n][e], sl2, -sl2v[c]));
            if (MASK) {
                int q = q0 + c, key = kw + g + 8 * (e >> 1);
                if (!(key <= q && q < T && (!ds || key >= ds[q]))) p = 0.0f;
            }
            s[n][e] = p;
            dp[n][e] = p * (dp[n][e] - sd[c]);
        }
}

// One sub-step: queries [qs, qs + QH) of the stage against this warp's 16 keys kw... dV += P^T dO,
// dK += dS^T Q, and dS^T (bf16) to the atomic variant's shared tile or to the scratch tile dst.
template <int HS, bool ATOMIC>
__device__ __forceinline__ void fa_dkv_step(float (&dk)[HS / 8][4], float (&dv)[HS / 8][4], const FaDkvSmem<HS>& m, int qs, int q0, int kw, bool mask, const FaBwdArgs& a, const int* ds, float sl2,
                                            bf16* dst) {
    typedef FaCfg<HS> Cf;
    constexpr int QN = Cf::QH / 8;
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4, warp = threadIdx.x / 32;
    float s[QN][4], dp[QN][4];
    fa_mma_nmajor<HS, QN>(s, m.k, m.q, qs);      // S^T
    fa_mma_nmajor<HS, QN>(dp, m.v, m.dout, qs);  // dP^T
    if (mask) fa_dkv_probs<QN, true>(s, dp, m.l2, m.d, qs, q0, kw, ds, a.T, sl2);
    else fa_dkv_probs<QN, false>(s, dp, m.l2, m.d, qs, q0, kw, ds, a.T, sl2);
FA_UNROLL
    for (int kk = 0; kk < QN / 2; kk++) {
        uint32_t pa[4], da[4];
        fa_pack_a(pa, s[2 * kk], s[2 * kk + 1]);
        fa_pack_a(da, dp[2 * kk], dp[2 * kk + 1]);
        fa_mma_kmajor<Cf::LD, Cf::NT / 2>(dv, pa, m.dout, qs + 16 * kk, 0);
        fa_mma_kmajor<Cf::LD, Cf::NT / 2>(dk, da, m.q, qs + 16 * kk, 0);
        // da: (key g, queries c, c + 1), (key g + 8, c ...), then the same at c + 8
        int r = 16 * warp + g, c = qs + 16 * kk + 2 * t;
        if (ATOMIC) {
            bf16* sds = m.ds;
            *reinterpret_cast<uint32_t*>(sds + fa_swz<FA_BN>(r, c / 8) + c % 8) = da[0];
            *reinterpret_cast<uint32_t*>(sds + fa_swz<FA_BN>(r + 8, c / 8) + c % 8) = da[1];
            *reinterpret_cast<uint32_t*>(sds + fa_swz<FA_BN>(r, c / 8 + 1) + c % 8) = da[2];
            *reinterpret_cast<uint32_t*>(sds + fa_swz<FA_BN>(r + 8, c / 8 + 1) + c % 8) = da[3];
        } else {
            *reinterpret_cast<uint32_t*>(dst + r * FA_BN + c) = da[0];
            *reinterpret_cast<uint32_t*>(dst + (r + 8) * FA_BN + c) = da[1];
            *reinterpret_cast<uint32_t*>(dst + r * FA_BN + c + 8) = da[2];
            *reinterpret_cast<uint32_t*>(dst + (r + 8) * FA_BN + c + 8) = da[3];
        }
    }
}

// Atomic variant: dQ of this warp's 16 queries of tile q0 from the block's 64 keys, dQ = dS K
// (dS read from the shared dS^T tile with ldmatrix .trans), 64 columns at a time, added with
// fp32 atomics to dq_acc (B, T, NH, HS). DN: a multiple of 16 that divides HS, at most 64.
template <int HS>
__device__ __forceinline__ void fa_dkv_dq_atomic(const FaDkvSmem<HS>& m, const FaBwdArgs& a, const FaHead& hd, int q0) {
    typedef FaCfg<HS> Cf;
    constexpr int DN = HS <= 64 ? HS : HS % 64 == 0 ? 64 : HS % 32 == 0 ? 32 : 16;
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4, warp = threadIdx.x / 32;
FA_UNROLL
    for (int c0 = 0; c0 < HS; c0 += DN) {
        float acc[DN / 8][4];
FA_UNROLL
        for (int n = 0; n < DN / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
FA_UNROLL
        for (int kk = 0; kk < FA_BN / 16; kk++) {
            uint32_t da[4];
            ptx_ldmatrix_x4_trans(da, fa_ldsm_y<FA_BN>(m.ds, 16 * kk, 2 * warp));
            fa_mma_kmajor<Cf::LD, DN / 16>(acc, da, m.k, 16 * kk, c0 / 8);
        }
FA_UNROLL
        for (int h = 0; h < 2; h++) {
            int q = q0 + 16 * warp + g + 8 * h;
            if (q >= a.T) continue;
            float* dst = a.dq_acc + (((size_t)hd.b * a.T + q) * a.NH + hd.h) * HS + c0 + 2 * t;
FA_UNROLL
            for (int n = 0; n < DN / 8; n++) {
                atomicAdd(dst + 8 * n, acc[n][2 * h]);
                atomicAdd(dst + 8 * n + 1, acc[n][2 * h + 1]);
            }
        }
    }
}

// dK, dV of one key tile (blockIdx.y; 16 keys a warp) of head bh0 + blockIdx.x, over the query
// tiles from the diagonal on that its keys are visible to, the next one copied into the other
// stage under the current one's math. ATOMIC: dQ by fp32 atomics; else dS^T tiles to a.dS.
template <int HS, bool ATOMIC>
__global__ void __launch_bounds__(FA_THREADS, 2) flash_attention_backward_dkv_kernel(FaBwdArgs a) {
    typedef FaCfg<HS> Cf;
    const FaHead hd = fa_head<HS>(a.qkv, a.T, a.NH, a.bh0);
    const int kt = blockIdx.y, k0 = kt * FA_BN, kw = k0 + 16 * (threadIdx.x / 32), nqt = a.Tpad / FA_BN;
    const int* ds = a.doc_start ? a.doc_start + (size_t)hd.b * a.T : NULL;
    float dk[Cf::NT][4], dv[Cf::NT][4];
FA_UNROLL
    for (int n = 0; n < Cf::NT; n++)
FA_UNROLL
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    const FaDkvSmem<HS> m0 = fa_dkv_smem<HS>(0);
    fa_load_tile<FA_BN, HS, Cf::LD>(m0.k, hd.base + hd.C + (size_t)k0 * hd.stride, hd.stride, a.T - k0, a.vec);
    fa_load_tile<FA_BN, HS, Cf::LD>(m0.v, hd.base + 2 * hd.C + (size_t)k0 * hd.stride, hd.stride, a.T - k0, a.vec);
    fa_dkv_load_q<HS>(m0, a, hd, kt);   // (the same commit group as K and V)
    ptx_cp_async_wait<0>();
    __syncthreads();
    for (int qt = kt;; qt++) {
        const int st = (qt - kt) & 1, q0 = qt * FA_BN;
        const FaDkvSmem<HS> m = fa_dkv_smem<HS>(st);
        if (qt > kt) {
            ptx_cp_async_wait<0>();
            __syncthreads();   // tile qt in for every thread, qt - 1 done by every warp (MUTATION-TARGET dkv-syncthreads)
        }
        // a query tile whose first row's record starts after these keys sees none of them (starts never decrease)
        const bool next = qt + 1 < nqt && (!ds || ds[(qt + 1) * FA_BN] < k0 + FA_BN);
        if (next) fa_dkv_load_q<HS>(fa_dkv_smem<HS>(st ^ 1), a, hd, qt + 1);
        bf16* dst = ATOMIC ? NULL : fa_ds_tile(a, hd.bh, qt, kt);
#if defined(__CUDACC__)
#pragma unroll 1
#endif
        for (int qs = 0; qs < FA_BN; qs += Cf::QH) {   // (not unrolled: the sub-steps would share registers)
            // masked: the diagonal, queries past T, or a record start after some of these keys
            const int qe = q0 + qs + Cf::QH;
            const bool mask = q0 + qs < kw + 15 || qe > a.T || (ds && ds[min(qe, a.T) - 1] > kw);
            fa_dkv_step<HS, ATOMIC>(dk, dv, m, qs, q0, kw, mask, a, ds, hd.sl2, dst);
        }
        if (ATOMIC) {
            __syncthreads();   // every warp's dS^T rows are in (MUTATION-TARGET dkv-ds-syncthreads)
            fa_dkv_dq_atomic<HS>(m, a, hd, q0);
        }
        if (!next) break;
    }
    bf16* krow = a.dqkv + (size_t)hd.b * a.T * hd.stride + hd.C + (size_t)hd.h * HS;
    fa_store_rows<HS>(krow, hd.stride, dk, kw, a.T, 1.0f / sqrtf((float)HS), a.acc, a.vec);
    fa_store_rows<HS>(krow + hd.C, hd.stride, dv, kw, a.T, 1.0f, a.acc, a.vec);
}

// Key tile kt's dS^T tile (of query tile qt) and K rows into a dQ stage (one commit group).
template <int HS>
__device__ __forceinline__ void fa_dq_load(bf16* st, const FaBwdArgs& a, const FaHead& hd, int qt, int kt) {
    typedef FaCfg<HS> Cf;
    const int k0 = kt * FA_BN;
    fa_load_tile<FA_BN, FA_BN, FA_BN>(st, fa_ds_tile(a, hd.bh, qt, kt), FA_BN, FA_BN, 1);
    fa_load_tile<FA_BN, HS, Cf::LD>(st + Cf::DS_TILE, hd.base + hd.C + (size_t)k0 * hd.stride, hd.stride, a.T - k0, a.vec);
    ptx_cp_async_commit();
}

// Deterministic dQ of one 64-query tile (blockIdx.y from the last, longest; 16 queries a warp):
// dQ = sum over its key tiles, in order, of dS K, dS from the dK/dV kernel's tiles (ldmatrix
// .trans of the stored dS^T), K via ldmatrix .trans; double-buffered like the forward.
template <int HS>
__global__ void __launch_bounds__(FA_THREADS, 3) flash_attention_backward_dq_kernel(FaBwdArgs a) {
    typedef FaCfg<HS> Cf;
    bf16* sm = reinterpret_cast<bf16*>(fa_smem());   // stage s at s (DS_TILE + TILE): dS^T, then K
    const FaHead hd = fa_head<HS>(a.qkv, a.T, a.NH, a.bh0);
    const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * FA_BN, warp = threadIdx.x / 32, row0 = q0 + 16 * warp;
    const int kt0 = a.doc_start ? a.doc_start[(size_t)hd.b * a.T + q0] / FA_BN : 0;
    constexpr int STAGE = Cf::DS_TILE + Cf::TILE;
    float acc[Cf::NT][4];
FA_UNROLL
    for (int n = 0; n < Cf::NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    fa_dq_load<HS>(sm, a, hd, qt, kt0);
    ptx_cp_async_wait<0>();
    __syncthreads();
    for (int kt = kt0; kt <= qt; kt++) {
        const bf16* sds = sm + ((kt - kt0) & 1) * STAGE;
        if (kt > kt0) {
            ptx_cp_async_wait<0>();
            __syncthreads();   // tile kt in for every thread, kt - 1 done by every warp (MUTATION-TARGET dq-syncthreads)
        }
        if (kt < qt) fa_dq_load<HS>(sm + ((kt + 1 - kt0) & 1) * STAGE, a, hd, qt, kt + 1);
        if (row0 >= a.T) continue;   // warp-uniform: padding rows only
FA_UNROLL
        for (int kk = 0; kk < FA_BN / 16; kk++) {
            uint32_t da[4];
            ptx_ldmatrix_x4_trans(da, fa_ldsm_y<FA_BN>(sds, 16 * kk, 2 * warp));
            fa_mma_kmajor<Cf::LD, Cf::NT / 2>(acc, da, sds + Cf::DS_TILE, 16 * kk, 0);
        }
    }
    fa_store_rows<HS>(a.dqkv + (size_t)hd.b * a.T * hd.stride + (size_t)hd.h * HS, hd.stride, acc, row0, a.T,
                      1.0f / sqrtf((float)HS), a.acc, a.vec);
}

// Atomic variant: dqkv's q section (+)= scale dq_acc, (B, T, NH, HS) fp32.
__global__ void flash_attention_dq_accumulate_kernel(floatX* dqkv, const float* dq_acc, int B, int T, int C, float scale,
                                                     int acc) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    bf16* p = dqkv + (i / C) * 3 * C + i % C;
    *p = __float2bfloat16((acc ? __bfloat162float(*p) : 0.0f) + scale * dq_acc[i]);
}

// ---------------------------------------------------------------------------------------------
// host side

int attention_flash_supported(int HS) { return ops_cuda_flash_supported(HS); }

static int g_deterministic = 1;
extern "C" void attention_set_deterministic(int on) { g_deterministic = on != 0; }
// ops_set_deterministic lives here, not in backend.cu: attention backward is the only op with a
// non-deterministic variant (and a program that never runs attention need not link it)
extern "C" void cuda_ops_set_deterministic(int on) { attention_set_deterministic(on); }
extern "C" int attention_get_deterministic(void) { return g_deterministic; }

// Dynamic shared memory above the default 48 KB must be allowed per kernel, once.
template <typename K>
static void fa_allow_smem(K kernel, size_t bytes, int* done) {
    if (*done) return;
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = 1;
}

// The deterministic backward's dS^T tiles: one head needs nt (nt + 1) / 2 tiles of 8 KB (nt
// 64-row tiles); heads go in chunks so that the buffer stays within FA_DS_MAX_BYTES (one head at
// least). B 16, NH 12, T 1024: 136 tiles a head, 192 heads, 214 MB, one chunk. The arithmetic is
// llmc/ops/sizes.h's, which the memory plan uses too.
#define FA_DS_MAX_BYTES OPS_CUDA_FA_DS_MAX_BYTES
static_assert(FA_BN == OPS_CUDA_FA_BN && FA_MAX_HS == OPS_CUDA_ATTN_MAX_HS, "llmc/ops/sizes.h describes these kernels");
static size_t g_ds_max_bytes = FA_DS_MAX_BYTES;
extern "C" void attention_set_ds_limit(size_t bytes) { g_ds_max_bytes = bytes ? bytes : FA_DS_MAX_BYTES; }
static int fa_ds_chunk_heads(int BNH, int T) { return ops_cuda_fa_ds_chunk_heads(BNH, T, g_ds_max_bytes); }
size_t attention_backward_scratch_bytes(int B, int T, int C, int NH) {
    return ops_cuda_attention_backward_bytes(B, T, C, NH, g_deterministic, g_ds_max_bytes); // (attention_simple.cu's D too)
}
// ops.h's query and reservation: the forward keeps nothing between calls, the backward its
// scratch (the same ops_scratch slot that cuda_attention_backward asks for, so a reserved slot is
// not grown again at the first backward of that shape and mode).
extern "C" size_t cuda_attention_scratch_bytes(int B, int T, int C, int NH, int backward) {
    return backward ? attention_backward_scratch_bytes(B, T, C, NH) : 0;
}
extern "C" void cuda_attention_reserve(int B, int T, int C, int NH, int backward) {
    const size_t bytes = cuda_attention_scratch_bytes(B, T, C, NH, backward);
    if (bytes) (void)ops_scratch(OPS_SCRATCH_ATTN, bytes);
}

template <int HS>
static void fa_forward(floatX* out, float* lse, const floatX* qkv, const int* doc_start, int B, int T, int NH, int vec) {
    typedef FaCfg<HS> Cf;
    static int smem_ok = 0;
    fa_allow_smem(flash_attention_forward_kernel<HS>, Cf::FWD_SMEM, &smem_ok);
    dim3 grid(B * NH, ceil_div(T, Cf::BM));
    LAUNCH(flash_attention_forward_kernel<HS>, grid, FA_THREADS, Cf::FWD_SMEM, 0, out, lse, qkv, doc_start, T, NH, vec);
    cudaCheck(cudaGetLastError());
}

// The dK/dV and dQ kernels (deterministic: per chunk of heads) or the atomic dK/dV kernel.
template <int HS>
static void fa_backward(FaBwdArgs a, int BNH, int det) {
    typedef FaCfg<HS> Cf;
    static int ok_atomic = 0, ok_dkv = 0, ok_dq = 0;
    const int nt = a.Tpad / FA_BN;
    if (!det) {
        fa_allow_smem(flash_attention_backward_dkv_kernel<HS, true>, Cf::DKV_ATOMIC_SMEM, &ok_atomic);
        LAUNCH((flash_attention_backward_dkv_kernel<HS, true>), dim3(BNH, nt), FA_THREADS, Cf::DKV_ATOMIC_SMEM, 0, a);
        cudaCheck(cudaGetLastError());
        return;
    }
    fa_allow_smem(flash_attention_backward_dkv_kernel<HS, false>, Cf::DKV_SMEM, &ok_dkv);
    fa_allow_smem(flash_attention_backward_dq_kernel<HS>, Cf::DQ_SMEM, &ok_dq);
    const int chunk = fa_ds_chunk_heads(BNH, a.T);
    for (a.bh0 = 0; a.bh0 < BNH; a.bh0 += chunk) {
        dim3 grid(min(chunk, BNH - a.bh0), nt);
        LAUNCH((flash_attention_backward_dkv_kernel<HS, false>), grid, FA_THREADS, Cf::DKV_SMEM, 0, a);
        cudaCheck(cudaGetLastError());
        LAUNCH(flash_attention_backward_dq_kernel<HS>, grid, FA_THREADS, Cf::DQ_SMEM, 0, a);
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
#define FA_FWD(hs) fa_forward<hs>(out, lse, qkv, doc_start, B, T, NH, vec)
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
    const int BNH = B * NH, Tpad = ceil_div(T, FA_BN) * FA_BN, det = g_deterministic;
    const size_t rows = (size_t)BNH * Tpad;
    // scratch: Dp, L2p (rows each), then the dS^T tiles (deterministic) or the fp32 dQ accumulator
    float* Dp = (float*)ops_scratch(OPS_SCRATCH_ATTN, attention_backward_scratch_bytes(B, T, C, NH));
    FaBwdArgs a = {dqkv, dout, qkv, Dp, Dp + rows, doc_start, NULL, NULL, T, Tpad, NH, 0, accumulate, 0};
    a.vec = ops_aligned16(dqkv) && ops_aligned16(dout) && ops_aligned16(qkv);
    if (det) a.dS = (bf16*)(Dp + 2 * rows);
    else a.dq_acc = Dp + 2 * rows;
    if (!det) cudaCheck(cudaMemsetAsync(a.dq_acc, 0, (size_t)B * T * C * sizeof(float), 0));
    LAUNCH(flash_attention_backward_preprocess_kernel, ops_blocks(rows, 8), 256, 0, 0, Dp, Dp + rows, dout, out, lse, BNH, T,
           Tpad, NH, HS);
    cudaCheck(cudaGetLastError());
#define FA_BWD(hs) fa_backward<hs>(a, BNH, det)
    FA_DISPATCH(HS, FA_BWD)
#undef FA_BWD
    if (!det) {
        size_t n = (size_t)B * T * C;
        LAUNCH(flash_attention_dq_accumulate_kernel, ops_blocks(n, 256), 256, 0, 0, dqkv, a.dq_acc, B, T, C,
               1.0f / sqrtf((float)HS), accumulate);
        cudaCheck(cudaGetLastError());
    }
}
