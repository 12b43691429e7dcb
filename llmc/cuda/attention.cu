// Causal multi-head attention of the CUDA backend, FlashAttention-2 style, on tensor cores
// through the WMMA API (bf16 16x16x16 tiles, fp32 accumulation). The contract is llmc/ops/ops.h:
//   qkv (B, T, 3, NH, HS) bf16, read in place (no permute);  out (B, T, NH, HS) = (B, T, C) bf16;
//   lse (B, NH, T) fp32: natural-log log-sum-exp of each row of scaled scores (the only thing
//   kept besides out: the T x T matrices are never stored);  backward writes dqkv (adds to it with accumulate).
//
// Tiles: a block is 4 warps; a query tile is 64 rows, 16 per warp; key tiles are 64 keys. Every
// 16-row slice of a tile that a warp multiplies is a wmma fragment loaded from shared memory.
// The WMMA API leaves the element-to-lane mapping of fragments unspecified, so anything done per
// row (softmax, masks, rescaling by the running max) goes through a per-warp fp32 scratch in
// shared memory: the warp stores the score fragments there, lane pairs own one row each (lane l:
// row l/2, columns of parity l%2), and the bf16 probabilities go back through shared memory as
// the A operand of the next product. Only layout-free elementwise ops touch fragments directly
// (scaling dK, dQ by 1/sqrt(HS)). Head size HS is a template parameter (multiples of 16 up to
// 128), so every register array has a compile-time size.
//
// Forward (flash_attention_forward_kernel): block = one query tile of one (b, h), walking the key
// tiles up to the diagonal (tiles above it are never loaded); per tile S = Q K^T (fp32), online
// softmax in base 2 (running max m, running fp32 sum l of the probabilities: lse is exact to fp32,
// as backward needs), O = O * alpha + P V (P rounded to bf16 for the tensor cores) with O in
// registers (lane-owned row halves). Out = O / l, lse = ln 2 * (m + log2 l). Query tiles are taken longest first.
//
// Backward, deterministic, no atomics (each output element has exactly one writer):
//   preprocess: D_t = dO_t . O_t (fp32 per row);
//   dK/dV kernel: block = one key tile (16 keys per warp) walking the query tiles from the
//     diagonal on: S^T = K Q^T, dP^T = V dO^T, P^T = exp2(S^T scale log2e - lse log2e),
//     dS^T = P^T (dP^T - D); dV += P^T dO, dK += dS^T Q with dK/dV accumulated in fragments;
//   dQ kernel: block = one query tile walking the key tiles up to the diagonal, recomputing S and
//     dP (two more products than a dQ-by-atomics scheme: the price of determinism); dQ += dS K.
//   dK and dQ get the 1/sqrt(HS) factor at the end; results are added to dqkv in fp32 and rounded
//   to bf16 once.
// Non-deterministic backward (attention_set_deterministic(0), head sizes <= 64): the dK/dV kernel
// also forms dQ = dS K for each query tile it visits (all four warps' dS^T, read column-major, after
// a block barrier) and adds it with fp32 atomics to a (B, T, C) accumulator; a small kernel adds
// that to dqkv. Saves the dQ kernel's recomputation of S and dP (5 instead of 7 products).
#include <mma.h>
#include "cuda/common.cuh"
#include "cuda/attention.cuh"
#include "base/check.h"
#include "cuda/ops_cuda.h"

using namespace nvcuda;

#define FA_ROWS 64                 // query rows (or keys) per block tile
#define FA_COLS 64                 // keys (or queries) per streamed tile
#define FA_WARPS (FA_ROWS / 16)    // 4 warps, 16 rows each
#define FA_THREADS (FA_WARPS * 32)
#define FA_MAX_HS 128
#define FA_ATOMIC_MAX_HS 64        // largest head size with the atomic-dQ backward (registers)
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f
#if defined(__CUDACC__)
#define FA_UNROLL _Pragma("unroll")
#else
#define FA_UNROLL
#endif
// (under the harness no alignment attribute: its dynamic smem buffer is 256-byte aligned)
#if defined(__CUDACC__)
#define FA_SMEM_ALIGN __align__(128)
#else
#define FA_SMEM_ALIGN
#endif

// Row strides (elements) of the shared-memory tiles. bf16 rows are padded by 8 (16 bytes) and
// fp32 rows by 4 (16 bytes): WMMA needs ldm to be a multiple of 16 bytes, and the pad moves
// consecutive rows to other banks.
template <int HS> struct FaDims {
    static constexpr int LDH = HS + 8;                                  // bf16 q/k/v/dO rows
    static constexpr int LDS = (HS > FA_COLS ? HS : FA_COLS) + 4;       // fp32 scratch rows
    static constexpr int LDP = FA_COLS + 8;                             // bf16 probability rows
    static constexpr int KT = HS / 16;                                  // 16-wide slices of a head
    // forward: sQ, sK, sV | per warp: fp32 scratch 16 x LDS | per warp: P 16 x LDP
    static constexpr size_t FWD_SMEM = (size_t)(FA_ROWS + 2 * FA_COLS) * LDH * 2 +
                                       (size_t)FA_WARPS * 16 * LDS * 4 + (size_t)FA_WARPS * 16 * LDP * 2;
    // backward: four bf16 tiles | per warp: two fp32 16 x (FA_COLS + 4) scratches (S, dP; the
    // epilogue reuses them as one 16 x (HS + 4)) | per warp: two bf16 16 x LDP (P, dS) | lse, D
    static constexpr int LDB = FA_COLS + 4;
    static constexpr size_t BWD_SMEM = (size_t)4 * FA_ROWS * LDH * 2 + (size_t)FA_WARPS * 2 * 16 * LDB * 4 +
                                       (size_t)FA_WARPS * 2 * 16 * LDP * 2 + 2 * FA_ROWS * 4;
    static_assert(HS % 16 == 0 && HS >= 16 && HS <= FA_MAX_HS, "head size: a multiple of 16 up to 128");
    static_assert(16 * (HS + 4) <= 2 * 16 * LDB, "backward epilogue scratch must fit the S/dP scratch");
};

// The block's dynamic shared memory. (A non-template function: g++ -O3 drops the null check of
// the weak TLS init function when an extern thread_local, as the harness makes it, is declared
// in a template.)
__device__ inline unsigned char* fa_smem() {
    extern __shared__ FA_SMEM_ALIGN unsigned char smem[];
    return smem;
}

// The head a block works on: (b, h) of blockIdx.y = b * NH + h, that head's q section in qkv
// (k at + C, v at + 2C; rows `stride` = 3C apart), and the factor taking scores to base-2
// exponents (log2(e) / sqrt(HS)).
struct FaHead {
    int bh, b, h, C;
    size_t stride;
    const bf16* base;
    float sl2;
};
template <int HS>
__device__ __forceinline__ FaHead fa_head(const bf16* qkv, int T, int NH) {
    FaHead a;
    a.bh = blockIdx.y;
    a.b = a.bh / NH;
    a.h = a.bh % NH;
    a.C = NH * HS;
    a.stride = 3 * (size_t)a.C;
    a.base = qkv + (size_t)a.b * T * a.stride + (size_t)a.h * HS;
    a.sl2 = FA_LOG2E / sqrtf((float)HS);
    return a;
}

// The backward kernels' shared memory (FaDims::BWD_SMEM): four bf16 tiles of FA_ROWS x LDH (the
// block's own two, then the two streamed past them), this warp's two fp32 scratches of 16 x LDB
// (S and dP), its two bf16 scratches of 16 x LDP (dK/dV kernel: P and dS; dQ kernel: dS), and the
// streamed tile's lse and D (FA_ROWS floats each).
struct FaBwdSmem {
    bf16* tile[4];
    float* s;
    float* dp;
    bf16* p[2];
    float* lse;
    float* d;
};
template <int HS>
__device__ __forceinline__ FaBwdSmem fa_bwd_smem(int warp) {
    typedef FaDims<HS> Dm;
    FaBwdSmem m;
    bf16* tiles = reinterpret_cast<bf16*>(fa_smem());
    for (int i = 0; i < 4; i++) m.tile[i] = tiles + i * FA_ROWS * Dm::LDH;
    float* f32 = reinterpret_cast<float*>(tiles + 4 * FA_ROWS * Dm::LDH);
    m.s = f32 + warp * 2 * 16 * Dm::LDB;
    m.dp = m.s + 16 * Dm::LDB;
    bf16* b16 = reinterpret_cast<bf16*>(f32 + FA_WARPS * 2 * 16 * Dm::LDB);
    m.p[0] = b16 + warp * 2 * 16 * Dm::LDP;
    m.p[1] = m.p[0] + 16 * Dm::LDP;
    m.lse = reinterpret_cast<float*>(b16 + FA_WARPS * 2 * 16 * Dm::LDP);
    m.d = m.lse + FA_ROWS;
    return m;
}

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> FragAT;    // A[m][k] at p[k ldm + m]
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> FragB;     // B[k][n] at p[k ldm + n]
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> FragBT;    // B[k][n] at p[n ldm + k]
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

// Rows [r0, r0 + FA_ROWS) of one head's section into dst (row stride LDH); rows at or past T
// become zeros. src points at row 0 of the section; rows are `stride` elements apart. vec: the
// rows are 16-byte aligned (128-bit copies), else element by element. All threads of the block.
template <int HS>
__device__ inline void fa_load_rows(bf16* dst, const bf16* src, int r0, int T, size_t stride, int vec) {
    constexpr int LDH = FaDims<HS>::LDH, CH = HS / 8;
    for (int i = threadIdx.x; i < FA_ROWS * CH; i += FA_THREADS) {
        int r = i / CH, c = (i % CH) * 8, t = r0 + r;
        bf16* d = dst + r * LDH + c;
        if (t >= T) {
            store128(d, x128::zeros());
        } else if (vec) {
            store128(d, load128(src + (size_t)t * stride + c));
        } else {
            x128 v;
            for (int k = 0; k < 8; k++) v[k] = src[(size_t)t * stride + c + k];
            store128(d, v);
        }
    }
}

// acc (16 x 16 per n) = A (16 x 16 KT, row-major at a, stride lda) times B^T where B is stored
// as rows (16 n + j) of b (stride ldb): scores of 16 rows against 16 * nblocks rows of b.
// Results go to the fp32 scratch s (stride lds), block n at column 16 n.
template <int KT>
__device__ inline void fa_rows_dot_rows(float* s, int lds, const bf16* a, int lda, const bf16* b, int ldb, int nblocks) {
    for (int n = 0; n < nblocks; n++) {
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
FA_UNROLL
        for (int k = 0; k < KT; k++) {
            FragA fa;
            FragBT fb;
            wmma::load_matrix_sync(fa, a + 16 * k, lda);
            wmma::load_matrix_sync(fb, b + (16 * n) * ldb + 16 * k, ldb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(s + 16 * n, acc, lds, wmma::mem_row_major);
    }
}

// acc[n] += P (16 x 16 kblocks, row-major bf16 at p, stride ldp) times X (rows of x, stride ldx)
// for the 16-column slices n of a head.
template <int KT>
__device__ inline void fa_probs_times_rows(FragC* acc, const bf16* p, int ldp, const bf16* x, int ldx, int kblocks) {
FA_UNROLL
    for (int n = 0; n < KT; n++) {
        for (int k = 0; k < kblocks; k++) {
            FragA fa;
            FragB fb;
            wmma::load_matrix_sync(fa, p + 16 * k, ldp);
            wmma::load_matrix_sync(fb, x + (16 * k) * ldx + 16 * n, ldx);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

// dst row (16 lane-pair rows of a warp) += the warp's fp32 scratch rows (stride lds), for rows
// t < T: lane l adds columns [HS/2 (l%2), HS/2 (l%2 + 1)) of row l/2. Rounds to bf16 once.
// Without acc the rows are written (dst's old values are not read).
template <int HS>
__device__ inline void fa_add_rows(bf16* dst_row0, size_t stride, const float* s, int lds, int t0, int T, int acc, int vec) {
    int lane = threadIdx.x % 32, r = lane / 2, c0 = (lane % 2) * (HS / 2);
    if (t0 + r >= T) return;
    bf16* d = dst_row0 + (size_t)r * stride + c0;
    const float* src = s + r * lds + c0;
FA_UNROLL
    for (int c = 0; c < HS / 2; c += 8) {
        if (vec) {
            x128 v;
            if (acc) v = load128(d + c);
            for (int k = 0; k < 8; k++) v[k] = __float2bfloat16((acc ? __bfloat162float(v[k]) : 0.0f) + src[c + k]);
            store128(d + c, v);
        } else {
            for (int k = 0; k < 8; k++) d[c + k] = __float2bfloat16((acc ? __bfloat162float(d[c + k]) : 0.0f) + src[c + k]);
        }
    }
}

// A warp's 16 rows of gradient fragments f (times 1/sqrt(HS) when SCALED) added to the rows of
// dst (written over without acc) through the warp's fp32 scratch s: 16 x (HS + 4), over its S/dP
// area (FaDims' static_assert says it fits).
template <int HS, bool SCALED>
__device__ __forceinline__ void fa_grad_rows_out(FragC* f, float* s, bf16* dst_row0, size_t stride, int t0, int T,
                                                 int acc, int vec) {
    constexpr int LDE = HS + 4;
    const float scale = 1.0f / sqrtf((float)HS);
    __syncwarp();
FA_UNROLL
    for (int n = 0; n < HS / 16; n++) {
        if (SCALED) for (int i = 0; i < f[n].num_elements; i++) f[n].x[i] *= scale;
        wmma::store_matrix_sync(s + 16 * n, f[n], LDE, wmma::mem_row_major);
    }
    __syncwarp();
    fa_add_rows<HS>(dst_row0, stride, s, LDE, t0, T, acc, vec);
}

// ---------------------------------------------------------------------------------------------
// forward

// (One function on purpose: one tile loop whose shared-memory tiles, fragments and running
// max / sum stay in registers across its stages; split into functions, the stages would
// pass them by reference and leave register allocation across calls to inlining, where a spill
// (which cuda-check refuses) is easy to cause. The stages are marked by comments.)
template <int HS>
__global__ void flash_attention_forward_kernel(floatX* out, float* lse, const floatX* qkv, int T, int NH, int vec) {
    typedef FaDims<HS> Dm;
    constexpr int LDH = Dm::LDH, LDS = Dm::LDS, LDP = Dm::LDP, KT = Dm::KT;
    unsigned char* smem = fa_smem();
    bf16* sQ = reinterpret_cast<bf16*>(smem);
    bf16* sK = sQ + FA_ROWS * LDH;
    bf16* sV = sK + FA_COLS * LDH;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* sS = reinterpret_cast<float*>(sV + FA_COLS * LDH) + warp * 16 * LDS;
    bf16* sP = reinterpret_cast<bf16*>(reinterpret_cast<float*>(sV + FA_COLS * LDH) + FA_WARPS * 16 * LDS) + warp * 16 * LDP;

    int q0 = (gridDim.x - 1 - blockIdx.x) * FA_ROWS;   // the longest (last) query tiles first
    const FaHead hd = fa_head<HS>(qkv, T, NH);

    int w0 = q0 + 16 * warp;        // this warp's first query
    int r = lane / 2, par = lane % 2;
    int t = w0 + r;                 // this lane's query row
    float o[HS / 2];                // this lane's half of the output row: columns HS/2 par + i
FA_UNROLL
    for (int i = 0; i < HS / 2; i++) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    fa_load_rows<HS>(sQ, hd.base, q0, T, hd.stride, vec);
    int last_key = min(q0 + FA_ROWS, T) - 1;
    for (int k0 = 0; k0 <= last_key; k0 += FA_COLS) {
        __syncthreads();   // previous tiles consumed (first time: nothing)
        fa_load_rows<HS>(sK, hd.base + hd.C, k0, T, hd.stride, vec);
        fa_load_rows<HS>(sV, hd.base + 2 * hd.C, k0, T, hd.stride, vec);
        __syncthreads();   // (MUTATION-TARGET fwd-syncthreads)
        if (w0 >= T || k0 > w0 + 15) continue;   // warp-uniform: no row of this warp sees this tile
        // key blocks of 16 with at least one key visible to some row of the warp
        int nkb = min(FA_COLS / 16, (w0 + 15 - k0) / 16 + 1);
        fa_rows_dot_rows<KT>(sS, LDS, sQ + 16 * warp * LDH, LDH, sK, LDH, nkb);
        __syncwarp();
        // online softmax of row t over this tile's visible keys (every row sees key 0 in the
        // first tile, so m is finite from then on and alpha is never exp2(-inf - -inf))
        const float* srow = sS + r * LDS;
        float mx = m;
        for (int c = par; c < 16 * nkb; c += 2) {
            int s = k0 + c;
            if (s <= t && s < T) mx = fmaxf(mx, srow[c] * hd.sl2);
        }
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
        float alpha = exp2f(m - mx), sum = 0.0f;
        for (int c = par; c < 16 * nkb; c += 2) {
            int s = k0 + c;
            float p = s <= t && s < T ? exp2f(srow[c] * hd.sl2 - mx) : 0.0f;
            sP[r * LDP + c] = __float2bfloat16(p);
            sum += p;
        }
        sum += __shfl_xor_sync(FULL_MASK, sum, 1);
        l = l * alpha + sum;
        m = mx;
FA_UNROLL
        for (int i = 0; i < HS / 2; i++) o[i] *= alpha;
        __syncwarp();   // sP complete, sS read by every lane
        FragC pv[KT];
FA_UNROLL
        for (int n = 0; n < KT; n++) wmma::fill_fragment(pv[n], 0.0f);
        fa_probs_times_rows<KT>(pv, sP, LDP, sV, LDH, nkb);
FA_UNROLL
        for (int n = 0; n < KT; n++) wmma::store_matrix_sync(sS + 16 * n, pv[n], LDS, wmma::mem_row_major);
        __syncwarp();
FA_UNROLL
        for (int i = 0; i < HS / 2; i++) o[i] += srow[par * (HS / 2) + i];
    }
    if (t < T) {
        float inv = 1.0f / l;
        bf16* dst = out + ((size_t)hd.b * T + t) * hd.C + (size_t)hd.h * HS + par * (HS / 2);
FA_UNROLL
        for (int c = 0; c < HS / 2; c += 8) {
            x128 v;
            for (int k = 0; k < 8; k++) v[k] = __float2bfloat16(o[c + k] * inv);
            if (vec) store128(dst + c, v);
            else for (int k = 0; k < 8; k++) dst[c + k] = v[k];
        }
        if (par == 0) lse[(size_t)hd.bh * T + t] = (m + log2f(l)) * FA_LN2;
    }
}

// ---------------------------------------------------------------------------------------------
// backward

// D[bh, t] = sum_d dout[b, t, h, d] out[b, t, h, d]; one warp per (b, h, t)
__global__ void flash_attention_backward_preprocess_kernel(float* D, const floatX* dout, const floatX* out,
                                                           int B, int T, int NH, int HS) {
    int lane = threadIdx.x % 32;
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;   // = (b NH + h) T + t
    if (row >= (size_t)B * NH * T) return;   // whole warps
    int t = (int)(row % T), bh = (int)(row / T), b = bh / NH, h = bh % NH;
    size_t off = ((size_t)b * T + t) * NH * HS + (size_t)h * HS;
    float s = 0.0f;
    for (int d = lane; d < HS; d += 32) s += __bfloat162float(dout[off + d]) * __bfloat162float(out[off + d]);
    s = warp_reduce_sum(s);
    if (lane == 0) D[row] = s;
}

// Per (query, key) pair of a lane's row: p = exp2(S sl2 - lse2), ds = p (dP - D); masked pairs 0.
__device__ inline void fa_probs_grads(float p_and_ds[2], float sc, float dp, float lse2, float Dq, float sl2, bool valid) {
    float p = valid ? exp2f(sc * sl2 - lse2) : 0.0f;
    p_and_ds[0] = p;
    p_and_ds[1] = p * (dp - Dq);
}

// dK, dV of one key tile (16 keys per warp), over the query tiles from the diagonal to T.
// (Longer than a screen for the forward kernel's reason: one pipeline over query tiles whose
// accumulator fragments must stay in registers between its stages.)
// ATOMIC_DQ (non-deterministic mode): also dQ of each query tile from this key tile, dQ += dS K,
// added with fp32 atomics to dq_acc (B, T, NH, HS) (unscaled).
template <int HS, bool ATOMIC_DQ>
__device__ __forceinline__ void fa_backward_dkv(floatX* dqkv, float* dq_acc, const floatX* dout, const floatX* qkv,
                                                const float* lse, const float* D, int T, int NH, int acc, int vec) {
    typedef FaDims<HS> Dm;
    constexpr int LDH = Dm::LDH, LDB = Dm::LDB, LDP = Dm::LDP, KT = Dm::KT;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const FaBwdSmem sm = fa_bwd_smem<HS>(warp);
    bf16 *sK = sm.tile[0], *sV = sm.tile[1], *sQ = sm.tile[2], *sdO = sm.tile[3], *sP = sm.p[0], *sdS = sm.p[1];
    float *sS = sm.s, *sdP = sm.dp, *sLse = sm.lse, *sD = sm.d;

    int k0 = blockIdx.x * FA_ROWS;   // key tile 0 sees the most queries: launched first
    const FaHead hd = fa_head<HS>(qkv, T, NH);
    const bf16* dbase = dout + (size_t)hd.b * T * hd.C + (size_t)hd.h * HS;
    int kw = k0 + 16 * warp;        // this warp's first key
    int r = lane / 2, par = lane % 2, s = kw + r;   // this lane's key

    FragC dk[KT], dv[KT];
FA_UNROLL
    for (int n = 0; n < KT; n++) { wmma::fill_fragment(dk[n], 0.0f); wmma::fill_fragment(dv[n], 0.0f); }
    fa_load_rows<HS>(sK, hd.base + hd.C, k0, T, hd.stride, vec);
    fa_load_rows<HS>(sV, hd.base + 2 * hd.C, k0, T, hd.stride, vec);
    for (int q0 = k0; q0 < T; q0 += FA_COLS) {
        __syncthreads();   // previous query tile consumed (first time: nothing)
        fa_load_rows<HS>(sQ, hd.base, q0, T, hd.stride, vec);
        fa_load_rows<HS>(sdO, dbase, q0, T, (size_t)hd.C, vec);
        for (int i = threadIdx.x; i < FA_COLS; i += FA_THREADS) {
            int q = q0 + i;
            sLse[i] = q < T ? lse[(size_t)hd.bh * T + q] * FA_LOG2E : 0.0f;
            sD[i] = q < T ? D[(size_t)hd.bh * T + q] : 0.0f;
        }
        __syncthreads();   // (MUTATION-TARGET dkv-syncthreads)
        if (kw < T) {   // warp-uniform: else this warp's keys are all padding
            fa_rows_dot_rows<KT>(sS, LDB, sK + 16 * warp * LDH, LDH, sQ, LDH, FA_COLS / 16);    // S^T
            fa_rows_dot_rows<KT>(sdP, LDB, sV + 16 * warp * LDH, LDH, sdO, LDH, FA_COLS / 16);  // dP^T
            __syncwarp();
            for (int c = par; c < FA_COLS; c += 2) {
                int q = q0 + c;
                float pd[2];
                fa_probs_grads(pd, sS[r * LDB + c], sdP[r * LDB + c], sLse[c], sD[c], hd.sl2, s <= q && q < T && s < T);
                sP[r * LDP + c] = __float2bfloat16(pd[0]);
                sdS[r * LDP + c] = __float2bfloat16(pd[1]);
            }
            __syncwarp();
            fa_probs_times_rows<KT>(dv, sP, LDP, sdO, LDH, FA_COLS / 16);   // dV += P^T dO
            fa_probs_times_rows<KT>(dk, sdS, LDP, sQ, LDH, FA_COLS / 16);   // dK += dS^T Q
        }
        if (ATOMIC_DQ) {
            __syncthreads();   // every warp's dS^T is in shared memory
            int qw = q0 + 16 * warp;   // this warp's 16 queries of the tile
            if (qw < T) {
                // dQ (16 x HS) = dS (16 queries x the tile's real keys) K: A[q][key] = dS^T[key][q] of
                // the warp owning the key block, read column-major; one fragment at a time (registers)
                int nkb = min(FA_ROWS / 16, (T - k0 + 15) / 16);
                const bf16* sdS0 = sP + 16 * LDP - warp * 2 * 16 * LDP;   // warp 0's dS^T
                constexpr int LDE = HS + 4;
FA_UNROLL
                for (int n = 0; n < KT; n++) {
                    FragC acc;
                    wmma::fill_fragment(acc, 0.0f);
                    for (int kb = 0; kb < nkb; kb++) {
                        FragAT fa;
                        FragB fb;
                        wmma::load_matrix_sync(fa, sdS0 + kb * 2 * 16 * LDP + 16 * warp, LDP);
                        wmma::load_matrix_sync(fb, sK + (16 * kb) * LDH + 16 * n, LDH);
                        wmma::mma_sync(acc, fa, fb, acc);
                    }
                    wmma::store_matrix_sync(sS + 16 * n, acc, LDE, wmma::mem_row_major);
                }
                __syncwarp();
                int t = qw + r;
                if (t < T) {
                    float* dst = dq_acc + (((size_t)hd.b * T + t) * NH + hd.h) * HS;
                    for (int c = par * (HS / 2); c < (par + 1) * (HS / 2); c++) atomicAdd(dst + c, sS[r * LDE + c]);
                }
            }
        }
    }
    if (kw >= T) return;
    bf16* dk_row0 = dqkv + ((size_t)hd.b * T + kw) * hd.stride + hd.C + (size_t)hd.h * HS;
    fa_grad_rows_out<HS, true>(dk, sS, dk_row0, hd.stride, kw, T, acc, vec);
    fa_grad_rows_out<HS, false>(dv, sS, dk_row0 + hd.C, hd.stride, kw, T, acc, vec);
}

template <int HS>
__global__ void flash_attention_backward_dkv_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv,
                                                    const float* lse, const float* D, int T, int NH, int acc, int vec) {
    fa_backward_dkv<HS, false>(dqkv, NULL, dout, qkv, lse, D, T, NH, acc, vec);
}
// (instantiated for HS <= 64 only: with HS 128 the extra dQ product would not fit the registers)
template <int HS>
__global__ void flash_attention_backward_dkv_atomic_kernel(floatX* dqkv, float* dq_acc, const floatX* dout, const floatX* qkv,
                                                           const float* lse, const float* D, int T, int NH, int acc, int vec) {
    fa_backward_dkv<HS, true>(dqkv, dq_acc, dout, qkv, lse, D, T, NH, acc, vec);
}

// Non-deterministic mode: dqkv's q section (+)= scale * dq_acc, (B, T, NH, HS) fp32.
__global__ void flash_attention_dq_accumulate_kernel(floatX* dqkv, const float* dq_acc, int B, int T, int C, float scale,
                                                     int acc) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    bf16* p = dqkv + (i / C) * 3 * C + i % C;
    *p = __float2bfloat16((acc ? __bfloat162float(*p) : 0.0f) + scale * dq_acc[i]);
}

// dQ of one query tile (16 queries per warp), over the key tiles up to the diagonal.
template <int HS>
__global__ void flash_attention_backward_dq_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv,
                                                   const float* lse, const float* D, int T, int NH, int acc, int vec) {
    typedef FaDims<HS> Dm;
    constexpr int LDH = Dm::LDH, LDB = Dm::LDB, LDP = Dm::LDP, KT = Dm::KT;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const FaBwdSmem sm = fa_bwd_smem<HS>(warp);
    bf16 *sQ = sm.tile[0], *sdO = sm.tile[1], *sK = sm.tile[2], *sV = sm.tile[3], *sdS = sm.p[0];
    float *sS = sm.s, *sdP = sm.dp;

    int q0 = (gridDim.x - 1 - blockIdx.x) * FA_ROWS;   // longest first
    const FaHead hd = fa_head<HS>(qkv, T, NH);
    int w0 = q0 + 16 * warp;
    int r = lane / 2, par = lane % 2, t = w0 + r;
    float lse2 = t < T ? lse[(size_t)hd.bh * T + t] * FA_LOG2E : 0.0f;
    float Dt = t < T ? D[(size_t)hd.bh * T + t] : 0.0f;

    FragC dq[KT];
FA_UNROLL
    for (int n = 0; n < KT; n++) wmma::fill_fragment(dq[n], 0.0f);
    fa_load_rows<HS>(sQ, hd.base, q0, T, hd.stride, vec);
    fa_load_rows<HS>(sdO, dout + (size_t)hd.b * T * hd.C + (size_t)hd.h * HS, q0, T, (size_t)hd.C, vec);
    int last_key = min(q0 + FA_ROWS, T) - 1;
    for (int k0 = 0; k0 <= last_key; k0 += FA_COLS) {
        __syncthreads();
        fa_load_rows<HS>(sK, hd.base + hd.C, k0, T, hd.stride, vec);
        fa_load_rows<HS>(sV, hd.base + 2 * hd.C, k0, T, hd.stride, vec);
        __syncthreads();
        if (w0 >= T || k0 > w0 + 15) continue;   // warp-uniform
        int nkb = min(FA_COLS / 16, (w0 + 15 - k0) / 16 + 1);
        fa_rows_dot_rows<KT>(sS, LDB, sQ + 16 * warp * LDH, LDH, sK, LDH, nkb);    // S
        fa_rows_dot_rows<KT>(sdP, LDB, sdO + 16 * warp * LDH, LDH, sV, LDH, nkb);  // dP
        __syncwarp();
        for (int c = par; c < 16 * nkb; c += 2) {
            int s = k0 + c;
            float pd[2];
            fa_probs_grads(pd, sS[r * LDB + c], sdP[r * LDB + c], lse2, Dt, hd.sl2, s <= t && s < T && t < T);
            sdS[r * LDP + c] = __float2bfloat16(pd[1]);
        }
        __syncwarp();
        fa_probs_times_rows<KT>(dq, sdS, LDP, sK, LDH, nkb);   // dQ += dS K
    }
    if (w0 >= T) return;
    fa_grad_rows_out<HS, true>(dq, sS, dqkv + ((size_t)hd.b * T + w0) * hd.stride + (size_t)hd.h * HS, hd.stride, w0, T,
                               acc, vec);
}

// ---------------------------------------------------------------------------------------------
// host side

int attention_flash_supported(int HS) { return HS % 16 == 0 && HS >= 16 && HS <= FA_MAX_HS; }

static int g_deterministic = 1;
extern "C" void attention_set_deterministic(int on) { g_deterministic = on != 0; }
// ops_set_deterministic lives here, not in backend.cu: attention backward is the only op with a
// faster non-deterministic variant (and a program that never runs attention need not link it)
extern "C" void cuda_ops_set_deterministic(int on) { attention_set_deterministic(on); }
extern "C" int attention_get_deterministic(void) { return g_deterministic; }

// Dynamic shared memory above the default 48 KB must be allowed per kernel, once.
template <typename K>
static void fa_allow_smem(K kernel, size_t bytes, int* done) {
    if (*done) return;
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = 1;
}

template <int HS>
static void fa_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int vec) {
    static int smem_ok = 0;
    size_t smem = FaDims<HS>::FWD_SMEM;
    fa_allow_smem(flash_attention_forward_kernel<HS>, smem, &smem_ok);
    dim3 grid(ops_blocks(T, FA_ROWS), B * NH);
    LAUNCH(flash_attention_forward_kernel<HS>, grid, FA_THREADS, smem, 0, out, lse, qkv, T, NH, vec);
    cudaCheck(cudaGetLastError());
}

template <int HS>
static void fa_backward(floatX* dqkv, float* dq_acc, const floatX* dout, const floatX* qkv, const float* lse, const float* D,
                        int B, int T, int NH, int acc, int vec) {
    static int smem_ok_kv = 0, smem_ok_q = 0;
    size_t smem = FaDims<HS>::BWD_SMEM;
    dim3 grid(ops_blocks(T, FA_ROWS), B * NH);
    if constexpr (HS <= FA_ATOMIC_MAX_HS) {
        if (dq_acc) {
            static int smem_ok_atomic = 0;
            fa_allow_smem(flash_attention_backward_dkv_atomic_kernel<HS>, smem, &smem_ok_atomic);
            LAUNCH(flash_attention_backward_dkv_atomic_kernel<HS>, grid, FA_THREADS, smem, 0, dqkv, dq_acc, dout, qkv, lse, D, T, NH, acc, vec);
            cudaCheck(cudaGetLastError());
            size_t n = (size_t)B * T * NH * HS;
            LAUNCH(flash_attention_dq_accumulate_kernel, ops_blocks(n, 256), 256, 0, 0, dqkv, dq_acc, B, T, NH * HS,
                   1.0f / sqrtf((float)HS), acc);
            cudaCheck(cudaGetLastError());
            return;
        }
    }
    fa_allow_smem(flash_attention_backward_dkv_kernel<HS>, smem, &smem_ok_kv);
    fa_allow_smem(flash_attention_backward_dq_kernel<HS>, smem, &smem_ok_q);
    LAUNCH(flash_attention_backward_dkv_kernel<HS>, grid, FA_THREADS, smem, 0, dqkv, dout, qkv, lse, D, T, NH, acc, vec);
    cudaCheck(cudaGetLastError());
    LAUNCH(flash_attention_backward_dq_kernel<HS>, grid, FA_THREADS, smem, 0, dqkv, dout, qkv, lse, D, T, NH, acc, vec);
    cudaCheck(cudaGetLastError());
}

#define FA_DISPATCH(HS_, CALL)                                                                       \
    switch (HS_) {                                                                                   \
    case 16: CALL(16); break;  case 32: CALL(32); break;  case 48: CALL(48); break;                 \
    case 64: CALL(64); break;  case 80: CALL(80); break;  case 96: CALL(96); break;                 \
    case 112: CALL(112); break; case 128: CALL(128); break;                                         \
    default: fatal("use a head size that is a multiple of 16 up to 128", "flash attention: head size %d", HS_); \
    }

extern "C" void cuda_attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    if (NH <= 0 || C % NH != 0)
        fatal("use a model whose n_embd is a multiple of n_head", "attention_forward (cuda): C = %d, NH = %d", C, NH);
    int HS = C / NH;
    if (!attention_flash_supported(HS)) { attention_forward_simple(out, lse, qkv, B, T, C, NH); return; }
    if (B <= 0 || T <= 0) return;
    // 128-bit paths: every row start is a multiple of 8 elements when HS is; the bases must be 16-byte aligned
    int vec = ops_aligned16(out) && ops_aligned16(qkv);
#define FA_FWD(hs) fa_forward<hs>(out, lse, qkv, B, T, NH, vec)
    FA_DISPATCH(HS, FA_FWD)
#undef FA_FWD
}

extern "C" void cuda_attention_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                        const float* lse, int B, int T, int C, int NH, int accumulate) {
    if (NH <= 0 || C % NH != 0)
        fatal("use a model whose n_embd is a multiple of n_head", "attention_backward (cuda): C = %d, NH = %d", C, NH);
    int HS = C / NH;
    if (!attention_flash_supported(HS)) { attention_backward_simple(dqkv, dout, qkv, out, lse, B, T, C, NH, accumulate); return; }
    if (B <= 0 || T <= 0) return;
    size_t rows = (size_t)B * NH * T;
    // scratch: D (rows), then in non-deterministic mode the fp32 dQ accumulator (B, T, C)
    size_t nacc = g_deterministic || HS > FA_ATOMIC_MAX_HS ? 0 : (size_t)B * T * C;
    float* D = (float*)ops_scratch(OPS_SCRATCH_ATTN, (rows + nacc) * sizeof(float));
    float* dq_acc = nacc ? D + rows : NULL;
    if (dq_acc) cudaCheck(cudaMemsetAsync(dq_acc, 0, nacc * sizeof(float), 0));
    LAUNCH(flash_attention_backward_preprocess_kernel, ops_blocks(rows, 8), 256, 0, 0, D, dout, out, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
    int vec = ops_aligned16(dqkv) && ops_aligned16(dout) && ops_aligned16(qkv);
#define FA_BWD(hs) fa_backward<hs>(dqkv, dq_acc, dout, qkv, lse, D, B, T, NH, accumulate, vec)
    FA_DISPATCH(HS, FA_BWD)
#undef FA_BWD
}
