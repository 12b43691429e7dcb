// Flash attention (attention.cu): the shapes every kernel is built from. FaCfg holds a head
// size's tiles and shared-memory sizes; below it, the tensor cores' register layouts and the
// shared-memory addressing (swizzles, ldmatrix lane offsets, the carving of the dK/dV kernel's
// dynamic shared memory).
//
// Registers follow the PTX ISA's fragment tables (README.md): lane l holds rows g = l / 4 and
// g + 8 of each 16-row accumulator, columns 2t, 2t + 1 (t = l % 4) of each n8 tile, so a row's
// max and sum are 2 shuffles over the 4 lanes of a quad, and the accumulators of two adjacent n8
// tiles, packed to bf16, are the A operand of the next product (fa_pack_a: P V, P^T dO, dS^T Q).
// Shared tiles are XOR-swizzled or padded (fa_swz) so that the 8 rows an ldmatrix reads hit 8
// different bank groups, and a lane's ldmatrix addresses are two offsets made once a kernel
// (fa_lane_off), so the loops do no swizzle arithmetic.
// llmc/cuda/README.md ("Flash attention") has the kernels' figures and the reasoning.
#ifndef LLMC_CUDA_ATTENTION_TRAITS_CUH
#define LLMC_CUDA_ATTENTION_TRAITS_CUH

#include "cuda/common.cuh"
#include "cuda/ptx.cuh"

#define FA_WARPS 4
#define FA_THREADS (FA_WARPS * 32)
#define FA_BN 64                   // keys of a forward key tile; queries of a backward query tile; a dS tile's side
#define FA_MAX_HS 128
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f
#if defined(__CUDACC__)
#define FA_UNROLL _Pragma("unroll")
#define FA_NO_UNROLL _Pragma("unroll 1")
#define FA_SMEM_ALIGN __align__(256)   // (fa_cols: swizzled tiles at multiples of 256 bytes)
#else
#define FA_UNROLL
#define FA_NO_UNROLL
#define FA_SMEM_ALIGN   // (the harness' dynamic shared memory is 256-byte aligned)
#endif

// Compile-time shapes of one head size.
template <int HS> struct FaCfg {
    static_assert(HS % 16 == 0 && HS >= 16 && HS <= FA_MAX_HS, "head size: a multiple of 16 up to 128");
    static constexpr int KT = HS / 16;                        // k16 steps over a head (16-column blocks)
    static constexpr int NT = HS / 8;                         // n8 tiles over a head
    static constexpr int MT = HS <= 64 ? 2 : 1;               // forward: m16 query tiles per warp
    static constexpr int BM = FA_WARPS * 16 * MT;             // forward: queries per block
    static constexpr int MK = HS <= 64 ? 2 : 1;               // dK/dV: m16 key tiles per warp
    static constexpr int BK = FA_WARPS * 16 * MK;             // dK/dV: keys per block
    static constexpr int QH = HS <= 64 ? 32 : 16;             // dK/dV: queries per sub-step (registers)
    static constexpr int LD = HS % 64 == 0 ? HS : HS + 8;     // shared row stride (elements)
    static constexpr int TILE = FA_BN * LD;                   // elements of a 64-row tile
    static constexpr int DS_TILE = FA_BN * FA_BN;             // elements of a dS tile
    static constexpr int DS_STAGE = 16 * MK * QH;             // dK/dV: one warp's dS^T of a sub-step (elements)
    // forward: Q (BM rows), then 2 stages of K, V
    static constexpr size_t FWD_SMEM = ((size_t)BM * LD + 4 * TILE) * 2;
    // dK/dV: K, V (BK rows each), 2 stages of Q, dO (bf16) and lse2, D (64 floats each), then each
    // warp's dS^T staging tile
    static constexpr size_t DKV_STAGE = (size_t)2 * TILE * 2 + 2 * FA_BN * 4;
    static constexpr size_t DKV_SMEM = (size_t)2 * BK * LD * 2 + 2 * DKV_STAGE + (size_t)FA_WARPS * DS_STAGE * 2;
    // dQ: 2 stages of (dS^T tile, K tile)
    static constexpr size_t DQ_SMEM = (size_t)2 * (DS_TILE + TILE) * 2;
    // fa_cols' XOR needs every swizzled tile to start at a multiple of 256 bytes (of the dynamic
    // shared memory, itself 256-byte aligned in the shared window and under the harness)
    static_assert(LD % 64 != 0 || ((size_t)BM * LD * 2 % 256 == 0 && (size_t)TILE * 2 % 256 == 0 &&
                                   (size_t)BK * LD * 2 % 256 == 0 && DKV_STAGE % 256 == 0 && DS_TILE * 2 % 256 == 0),
                  "swizzled tiles at multiples of 256 bytes");
};

// The accumulator (C/D) layout of mma.m16n8k16 (README.md's table): element e (0..3) of a lane's
// 16 x 8 fragment is at row fa_c_row(e), column fa_c_col(e); elements 2h and 2h + 1 share row half
// h (row g + 8h). g = lane / 4 (group), t = lane % 4 (thread in group).
__device__ __forceinline__ int fa_lane_g() { return (threadIdx.x % 32) / 4; }
__device__ __forceinline__ int fa_lane_t() { return threadIdx.x % 4; }
__device__ __forceinline__ int fa_c_half(int e) { return e >> 1; }
__device__ __forceinline__ int fa_c_row(int e) { return fa_lane_g() + 8 * fa_c_half(e); }
__device__ __forceinline__ int fa_c_col(int e) { return 2 * fa_lane_t() + (e & 1); }

// C fragments of two adjacent n8 tiles as the A operand of a k16 step (README.md: C/D to A).
__device__ __forceinline__ void fa_pack_a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = ptx_pack_bf16x2(c0[0], c0[1]);
    a[1] = ptx_pack_bf16x2(c0[2], c0[3]);
    a[2] = ptx_pack_bf16x2(c1[0], c1[1]);
    a[3] = ptx_pack_bf16x2(c1[2], c1[3]);
}

__device__ __forceinline__ void fa_zero(float (&acc)[4]) { acc[0] = acc[1] = acc[2] = acc[3] = 0.0f; }

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

// Element offset of 16-byte chunk c of row r in a shared tile of row stride LD (elements):
// XOR-swizzled (chunk c ^ (r % 8)) for 128- and 256-byte rows, so that 8 rows read or written
// together hit 8 different bank groups; other strides are padded by 16 bytes, which does the same.
template <int LD>
__device__ __forceinline__ int fa_swz(int r, int c) {
    if constexpr (LD % 64 == 0) return r * LD + ((c ^ (r & 7)) << 3);
    else return r * LD + (c << 3);
}
// The same for a narrow tile of W = 16 or 32 elements a row (the dK/dV kernel's dS^T staging):
// 128 / (2 W) rows share a 128-byte line, the chunks of line i are XORed with i % (W / 8).
template <int W>
__device__ __forceinline__ int fa_swz_narrow(int r, int c) {
    static_assert(W == 16 || W == 32 || W == 64, "staging rows of 32, 64 or 128 bytes");
    return r * W + ((c ^ ((r / (64 / W)) % (W / 8))) << 3);
}

// Shared addresses are ptx_saddr (ptx.cuh: 32-bit byte addresses under nvcc), tiles' row offsets
// in bytes (fa_row).
__device__ __forceinline__ ptx_saddr fa_sa(const void* p) { return ptx_saddr_of(p); }
template <int LD>
__device__ __forceinline__ constexpr int fa_row(int r) { return r * LD * 2; }

// This lane's ldmatrix.x4 row offsets (bytes) in a tile of row stride LD, computed once per
// kernel, for the 16 x 16 block at rows 0-15, columns 0-15: x read as an A operand (or, .trans,
// as two B n8 tiles of a k-major tile), y read as two B n8 tiles of an n-major tile. Adding
// fa_row(16 r) moves either down 16 r rows (the swizzle depends on the row modulo 8 only), and
// fa_cols moves it to column block j: in a swizzled tile chunk c ^ s becomes (c + 2j) ^ s =
// (c ^ s) ^ 2j (c is 0 or 1), an XOR of the address's bits 5-7 (tiles start at multiples of 256
// bytes; rows of 128 or 256), in a padded one + 32 j bytes. So every ldmatrix is one XOR or add
// and an immediate offset away from the lane's base: no per-use swizzle arithmetic, two registers.
struct FaLaneOff {
    uint32_t x, y;
};
template <int LD>
__device__ __forceinline__ FaLaneOff fa_lane_off() {
    const int l = threadIdx.x % 32;
    FaLaneOff o;
    o.x = 2 * fa_swz<LD>(l & 15, l >> 4);
    o.y = 2 * fa_swz<LD>((l & 7) | ((l >> 4) << 3), (l >> 3) & 1);
    return o;
}
template <int LD>
__device__ __forceinline__ ptx_saddr fa_cols(ptx_saddr a, int j) {
    if constexpr (LD % 64 == 0) return a ^ ((ptx_saddr)j << 5);
    else return a + 32 * j;
}

// ldmatrix.x4, named by what it loads (p: the tile + this lane's offset, README.md's recipes):
// A of a k16 step from a row-major tile (rows m, columns k; pattern x)
__device__ __forceinline__ void fa_ldsm_a(uint32_t a[4], ptx_saddr p) { ptx_ldmatrix_x4_at(a, p); }
// A of a k16 step from a tile stored transposed (rows k, columns m; pattern y, .trans)
__device__ __forceinline__ void fa_ldsm_a_trans(uint32_t a[4], ptx_saddr p) { ptx_ldmatrix_x4_trans_at(a, p); }
// B of two n8 tiles (b[0..1] columns n..n+7, b[2..3] n+8..) from an n-major tile (rows n,
// columns k: K for Q K^T; pattern y)
__device__ __forceinline__ void fa_ldsm_b_nmajor(uint32_t b[4], ptx_saddr p) { ptx_ldmatrix_x4_at(b, p); }
// B of two n8 tiles from a k-major tile (rows k, columns n: V for P V; pattern x, .trans)
__device__ __forceinline__ void fa_ldsm_b_kmajor(uint32_t b[4], ptx_saddr p) { ptx_ldmatrix_x4_trans_at(b, p); }

// The block's dynamic shared memory. (A non-template function: g++ -O3 drops the null check of
// the weak TLS init function when an extern thread_local, as the harness makes it, is declared
// in a template.)
__device__ inline unsigned char* fa_smem() {
    extern __shared__ FA_SMEM_ALIGN unsigned char smem[];
    return smem;
}

// The dK/dV kernel's shared memory: K, V of the block's BK keys, per stage the query tile's Q,
// dO, lse2, D, and this warp's dS^T staging tile. (Pointers of one stage, computed per stage: an
// array indexed by the stage would live in local memory.)
template <int HS> struct FaDkvSmem {
    bf16 *k, *v, *q, *dout, *stage;
    float *l2, *d;
};
template <int HS>
__device__ __forceinline__ FaDkvSmem<HS> fa_dkv_smem(int st) {
    typedef FaCfg<HS> Cf;
    FaDkvSmem<HS> m;
    unsigned char* p = fa_smem();
    m.k = reinterpret_cast<bf16*>(p);
    m.v = m.k + Cf::BK * Cf::LD;
    m.q = reinterpret_cast<bf16*>(p + (size_t)2 * Cf::BK * Cf::LD * 2 + st * Cf::DKV_STAGE);
    m.dout = m.q + Cf::TILE;
    m.l2 = reinterpret_cast<float*>(m.dout + Cf::TILE);
    m.d = m.l2 + FA_BN;
    m.stage = reinterpret_cast<bf16*>(p + (size_t)2 * Cf::BK * Cf::LD * 2 + 2 * Cf::DKV_STAGE) +
              (threadIdx.x / 32) * Cf::DS_STAGE;
    return m;
}

#endif // LLMC_CUDA_ATTENTION_TRAITS_CUH
