// Causal multi-head attention of the CUDA backend, FlashAttention-2 style, on the tensor cores'
// documented register layouts (mma.sync m16n8k16 bf16 -> fp32, ldmatrix, cp.async: ptx.cuh).
// The contract is llmc/ops/ops.h (and ops_cuda.h for doc_start):
//   qkv (B, T, 3, NH, HS) bf16, read in place;  out (B, T, NH, HS) bf16;  lse (B, NH, T) fp32,
//   the natural-log log-sum-exp of each row of scaled scores; backward writes dqkv (+= with
//   accumulate). doc_start (optional, (B, T) int32): query q sees keys doc_start[q] <= k <= q.
// Head sizes: multiples of 16 up to 128 (templates); 64 (every GPT-2 size) is the tuned one.
//
// Everything per row lives in registers, on the PTX ISA's fragment tables (ptx.cuh; fa_c_row /
// fa_c_col name element e's place): lane l holds rows g = l/4 and g + 8 of each 16-row
// accumulator, columns 2t, 2t+1 (t = l%4) of each n8 tile, so a row's max and sum are 2 shuffles
// over the 4 lanes of a quad, and the accumulators of two adjacent n8 tiles, packed to bf16, are
// the A operand of the next product (P V, P^T dO, dS^T Q). Shared-memory tiles are filled by
// cp.async (16 bytes a thread; rows past T zero-filled, nothing read past T), double-buffered so
// the next tile's copy runs under the current tile's math, and XOR-swizzled (16-byte chunk c of
// row r at c ^ (r % 8)) when a row is 128 or 256 bytes (HS 64, 128, the 64-wide dS tiles): the 8
// rows an ldmatrix reads hit 8 different bank groups; other head sizes pad each row by 16 bytes.
// Addressing costs almost nothing in the loops: a thread's tile copy is a plan made once
// (fa_copy_plan: its chunks share a column and step by a fixed number of rows, so each is one
// IMAD.WIDE and an LDGSTS), a lane's ldmatrix rows are two offsets made once (fa_lane_off; other
// 16-column blocks by an XOR of the address, fa_cols). Grids are (tiles, heads); fa_block maps the
// start order to (tile, head) longest tiles first over groups of up to 64 heads (a group's K and V,
// or Q and dO, stay in L2), so the last wave is not left to a few long blocks. The masking rule is fa_sees, in one place.
//
// Forward (flash_attention_forward_kernel<HS, CH>): 4 warps; a warp owns 16 MT query rows, MT = 2
// for HS <= 64 (128-row tiles) and 1 above (64 rows: the O and Q fragments of HS 128 would not fit
// twice). Q is loaded once into A fragments; per 64-key tile: S = Q K^T (K via ldmatrix), online
// softmax in base 2 (running max per row, per-lane partial sums, reduced once at the end; the
// tile's max and sum as trees), P packed in registers, O += P V (V via ldmatrix .trans); in CH =
// FA_CH = 1 softmax step (2 of 32 keys at head size 64 for attention_bench's A/B: the comment
// above FA_CH). Each B fragment of K and V serves the MT query tiles. The running max moves lazily: only
// when a tile (chunk) passes it by more than 2^8 (FA_SLACK's comment), so O is rarely rescaled.
// Key tiles above a warp's rows are never touched, nor those wholly before its rows' record
// starts; only diagonal / straddling tiles are masked (a template flag). lse = ln 2 (m + log2 l).
// Every exponential is ex2.approx.ftz (ptx.cuh): one MUFU.EX2; a probability below 2^-126 becomes
// 0 instead of a subnormal (ex2.approx.f16x2 / bf16x2 would not halve them: on sm_90 each is two
// MUFU.EX2.F16 / .BF16).
//   HS 64 (sm_90, per warp and key tile, test/check_attention_sass.sh): 128 HMMA, 32 LDSM, 64
//   MUFU (+4 when the tile moves the max), 8 LDGSTS, 575 instructions (4.49 a HMMA; 978 masked and
//   rescaling; the steady path skips the rescale, 92 instructions, 64 of them FMUL of O, which
//   were in every tile); the copy of K and V is ~40 of them. CH 2 (the A/B): 597 (4.66). Before
//   lazy rescaling: 658 (5.14) and 68 MUFU; before the copy plan: ~970. Shared memory 48 KB (Q 16,
//   2 stages of K and V 32); 243-254 registers, 2 blocks (8 warps) an SM.
// Backward, in one pass per key block:
//   preprocess: D = rowsum(dO o O) and lse log2(e), into (B NH, Tpad) arrays padded with zeros to
//     a multiple of 64 (16-byte aligned rows that the kernels cp.async); 16-byte loads.
//   dK/dV kernel: block = BK keys, a warp 16 MK of them (MK = 2 for HS <= 64: BK 128; 1 above),
//     K and V in shared memory, dK and dV accumulated in registers over the 64-query tiles from
//     the diagonal on (those whose records see the block), each in sub-steps of QH queries (32
//     for HS <= 64, 16 above: registers): S^T = K Q^T, P^T = exp2(S^T sl2 - lse2) packed to bf16
//     (the A operand of dV += P^T dO, and the P of dS^T = P^T (dP^T - D): held packed across the
//     dP^T product, 16 registers fewer), dP^T = V dO^T, dK += dS^T Q. Every Q and dO fragment
//     (B operands) serves the warp's MK key tiles: HS 64, per sub-step 128 HMMA and 48 LDSM
//     (0.375 a HMMA; it was 72 per 128 with one key tile a warp), 484 instructions (3.78 a HMMA;
//     4.26 over a query tile with its copy and barrier; 7.4 before). dS^T leaves through the warp's staging tile in shared memory: 16 4-byte stores
//     (the fragments' layout), a __syncwarp, 4 16-byte loads and 4 16-byte global stores a lane
//     (before: 16 4-byte global stores, each touching 8 sectors half-written), all conflict-free
//     (the harness counts it). Shared memory 73 KB; 255 registers (sm_80 and sm_90), 2
//     blocks an SM. Holding the warp's K fragments of two k16 steps in registers (16 of them)
//     would take LDSM to 44 per 128 HMMA (0.344), but spills on sm_90 (tried: 12-16 bytes with
//     every arrangement of the rest): the kernel is at the register file's limit for 2 blocks an
//     SM.
//   dQ kernel: the dK/dV kernel stores each dS^T tile (64 x 64 bf16, 8 KB, tiles on or below the
//     diagonal) to a scratch buffer; a dQ kernel per 64-query tile sums dS K over its key tiles
//     in a fixed order (cp.async double-buffered). Every gradient element has one writer: the
//     backward is bitwise reproducible (an atomic-dQ variant was 31% slower on an H100 and would
//     add its dQ product to the dK/dV kernel's bound data path; it is gone).
//   dK and dQ get 1/sqrt(HS) at the end; results are added to dqkv in fp32 and rounded once.
// Measured on an H200 at B 16, NH 12, T 1024, HS 64 before fa_block's start order: forward 208.7
// TFLOP/s, backward 176.8 (predicted from these counts 255, 205: the counts were reached, the
// kernels are latency-bound at 8 warps an SM and ended on a tail of long blocks); predicted with
// fa_block's order and lazy rescaling, on the H200: forward 260-305 (dev/fa_cycle_model.py: its
// two warps a scheduler run in phase), backward 194-202. The reasoning, the tables and what to measure:
// llmc/cuda/README.md ("Flash attention"); dev/cuda/attention_bench measures them, scripts/gpu_check.sh's ncu_attention reads
// each kernel's counters.
#include "cuda/common.cuh"
#include "cuda/ptx.cuh"
#include "cuda/attention.cuh"
#include "base/check.h"
#include "cuda/ops_cuda.h"
#include "ops/sizes.h"

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

// ---------------------------------------------------------------------------------------------
// register layouts, shared-memory addressing and the masking rule

// The accumulator (C/D) layout of mma.m16n8k16 (ptx.cuh's table): element e (0..3) of a lane's
// 16 x 8 fragment is at row fa_c_row(e), column fa_c_col(e); elements 2h and 2h + 1 share row half
// h (row g + 8h). g = lane / 4 (group), t = lane % 4 (thread in group).
__device__ __forceinline__ int fa_lane_g() { return (threadIdx.x % 32) / 4; }
__device__ __forceinline__ int fa_lane_t() { return threadIdx.x % 4; }
__device__ __forceinline__ int fa_c_half(int e) { return e >> 1; }
__device__ __forceinline__ int fa_c_row(int e) { return fa_lane_g() + 8 * fa_c_half(e); }
__device__ __forceinline__ int fa_c_col(int e) { return 2 * fa_lane_t() + (e & 1); }

// The masking rule of every kernel: query q sees key k when k <= q (causal) and k is at or after
// the start of q's record (packed sequences: doc_start; 0 without). Rows at or past T see nothing
// (only the backward reads them: they lie in its query tiles).
__device__ __forceinline__ int fa_record_start(const int* ds, int q, int T) { return ds && q < T ? ds[q] : 0; }
__device__ __forceinline__ bool fa_sees(int q, int k, int start) { return k <= q && k >= start; }

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

// The block's place in its launch, in the order the GPU starts blocks (linear id, x fastest): its
// tile's rank (0: the longest, the most key or query tiles to visit) and its head (0 .. gridDim.y -
// 1). Heads go in balanced groups of at most FA_HEAD_GROUP, and within a group rank-major: every
// head's longest tile, then every head's next one. Issued head by head (the order before), the
// causal tiles' unequal lengths leave the last wave to a few long blocks: at B 16, NH 12, T 1024
// (192 heads, 8 or 16 tiles each, 264 or 528 resident blocks on 132 SMs) a greedy model of the
// start order (dev/attention_schedule.py) keeps the SMs busy 84% of the kernel's span
// (forward and dK/dV; dQ 82%) against 97% rank-major by groups of 64 heads (the longest-first
// rule over all heads; 16 MB of K and V a group, in L2 as before). Any order gives the same
// results: every output element has one writer.
#define FA_HEAD_GROUP 64
struct FaBlock {
    int rank, head;
};
__device__ __forceinline__ FaBlock fa_block() {
    const unsigned nt = gridDim.x, nh = gridDim.y, L = blockIdx.x + nt * blockIdx.y;
    const unsigned ng = (nh + FA_HEAD_GROUP - 1) / FA_HEAD_GROUP, gh = (nh + ng - 1) / ng;   // groups, heads a group
    const unsigned g0 = L / (nt * gh) * gh, gs = min(gh, nh - g0), r = L - g0 * nt;           // first head, heads, rank
    FaBlock f;
    f.rank = (int)(r / gs);
    f.head = (int)(g0 + r % gs);
    return f;
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

// ldmatrix.x4, named by what it loads (p: the tile + this lane's offset, ptx.cuh's recipes):
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

// One 16-byte chunk of a tile: from s if ok, else zeros (reading src, not s: nothing past the
// rows); cp.async when vec, else element loads and a plain shared store.
__device__ __forceinline__ void fa_load_chunk(bf16* d, const bf16* s, const bf16* src, bool ok, int vec) {
    if (vec) {
        ptx_cp_async_16(d, ok ? s : src, ok ? 16 : 0);
    } else {
        x128 v = x128::zeros();
        if (ok) for (int k = 0; k < 8; k++) v[k] = s[k];
        store128(d, v);
    }
}

// A thread's part of a tile copy (fa_load_tile) of W-element rows into a tile of row stride LD:
// the row r0 and column chunk c of its first 16-byte chunk and that chunk's byte offset in the
// tile. Computed once per kernel.
struct FaCopy {
    int r0, c;
    uint32_t dst;
};
template <int W, int LD>
__device__ __forceinline__ FaCopy fa_copy_plan() {
    constexpr int CH = W / 8;
    FaCopy p;
    p.r0 = threadIdx.x / CH;
    p.c = threadIdx.x % CH;
    p.dst = 2 * fa_swz<LD>(p.r0, p.c);
    return p;
}

// ROWS rows of W bf16 (row i at src + i stride) into a shared tile of row stride LD, by the
// block's FA_THREADS threads; rows at or past nvalid become zeros and are not read. vec: cp.async
// (the caller commits and waits); else element loads and plain shared stores (misaligned rows).
// Each thread copies N 16-byte chunks, a count fixed at compile time, so the copy unrolls: chunk
// i = tid + FA_THREADS j is row i / CH, chunk column i % CH. Where CH divides FA_THREADS (W 16,
// 32, 64, 128) a thread's chunks share a column and lie RSTEP rows apart (a multiple of 8: the
// same swizzle), so the thread's plan (cp: its first chunk) and a source pointer stepped by RSTEP
// rows address them all: per chunk one IMAD.WIDE and the LDGSTS with an immediate shared offset,
// and whole tiles (every tile but the last) copy without the zero-fill test.
template <int ROWS, int W, int LD>
__device__ __forceinline__ void fa_load_tile(bf16* dst, const bf16* src, size_t stride, int nvalid, int vec, const FaCopy& cp) {
    constexpr int CH = W / 8, N = ROWS * CH / FA_THREADS;
    static_assert(ROWS * CH % FA_THREADS == 0, "a tile is a whole number of chunks per thread");
    if constexpr (FA_THREADS % CH == 0) {
        constexpr int RSTEP = FA_THREADS / CH;
        static_assert(RSTEP % 8 == 0, "rows RSTEP apart share the swizzle");
        const bf16* s = src + (size_t)cp.r0 * stride + 8 * cp.c;
        const ptx_saddr d = fa_sa(dst) + cp.dst;
        if (vec && nvalid >= ROWS) {
FA_UNROLL
            for (int j = 0; j < N; j++) ptx_cp_async_16_at(d + fa_row<LD>(j * RSTEP), s + j * RSTEP * stride);
        } else {
FA_UNROLL
            for (int j = 0; j < N; j++) fa_load_chunk(dst + (cp.dst / 2 + j * RSTEP * LD), s + j * RSTEP * stride, src,
                                                      cp.r0 + j * RSTEP < nvalid, vec);
        }
    } else {
FA_UNROLL
        for (int j = 0; j < N; j++) {
            const int i = threadIdx.x + FA_THREADS * j, r = i / CH, c = i % CH;
            fa_load_chunk(dst + fa_swz<LD>(r, c), src + (size_t)r * stride + 8 * c, src, r < nvalid, vec);
        }
    }
}
// N floats (a multiple of 4, 16-byte aligned) into shared memory by cp.async: one 16-byte copy
// from each of the first N / 4 threads (no loop: a loop over a thread-dependent count compiles to
// ~70 instructions of unrolling and remainder handling).
template <int N>
__device__ __forceinline__ void fa_load_floats(float* dst, const float* src) {
    static_assert(N % 4 == 0 && N / 4 <= FA_THREADS, "one copy a thread");
    if (threadIdx.x < N / 4) ptx_cp_async_16(dst + 4 * threadIdx.x, src + 4 * threadIdx.x);
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

__device__ __forceinline__ void fa_zero(float (&acc)[4]) { acc[0] = acc[1] = acc[2] = acc[3] = 0.0f; }

// The head a block works on: (b, h) of bh = b NH + h, its q section in qkv (k at + C, v at + 2C;
// rows `stride` = 3C apart) and the factor taking scores to base-2 exponents.
struct FaHead {
    int bh, b, h, C;
    size_t stride;
    const bf16* base;
    float sl2;
};
template <int HS>
__device__ __forceinline__ FaHead fa_head(const bf16* qkv, int T, int NH, int bh) {
    FaHead a;
    a.bh = bh;
    a.b = bh / NH;
    a.h = bh % NH;
    a.C = NH * HS;
    a.stride = 3 * (size_t)a.C;
    a.base = qkv + (size_t)a.b * T * a.stride + (size_t)a.h * HS;
    a.sl2 = FA_LOG2E / sqrtf((float)HS);
    return a;
}

// A warp's 16-row accumulator (rows r0 + g, r0 + g + 8; HS columns) times scale, (+)= into the
// rows of dst (row r at dst + r stride) below T.
template <int HS>
__device__ __forceinline__ void fa_store_rows(bf16* dst, size_t stride, const float (&acc)[HS / 8][4], int r0, int T,
                                              float scale, int accum, int vec) {
FA_UNROLL
    for (int h = 0; h < 2; h++) {
        const int r = r0 + fa_c_row(2 * h);
        if (r >= T) continue;
        bf16* d = dst + (size_t)r * stride + fa_c_col(0);
FA_UNROLL
        for (int n = 0; n < HS / 8; n++) fa_store2(d + 8 * n, acc[n][2 * h] * scale, acc[n][2 * h + 1] * scale, accum, vec);
    }
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

// A key tile's softmax runs in CH chunks of 64 / CH keys (NC = 8 / CH n8 tiles each); with CH 2,
// chunk c + 1's product S = Q K^T is issued between chunk c's row max and its exponentials, in the
// same basic block, so that a warp's own MUFU.EX2 and FP32 work could overlap its tensor-core work
// (with CH 1 a key tile is three serial phases: QK^T, softmax, PV). Registers as one chunk (the S
// of both chunks, 64 a lane, live at most as the 64 of one step); a chunk costs one more row max
// and vote; every K and V fragment still serves the MT query tiles. The build uses FA_CH = 1:
// dev/fa_cycle_model.py, calibrated on the H200 run, finds the in-warp overlap does not pay at 2
// warps a scheduler (<64, 2> x1.15-1.25 over the measured kernel, <64, 1> x1.22-1.27: what limits
// is the two warps' phases, not one warp's chain) and CH 2 has 5% more instructions (more code is
// the model's other suspect, the instruction cache). attention_bench times both at head size 64
// (attention_set_forward_chunks): the next GPU run decides, and the loser goes.
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

// The max / sum of row half h (row g or g + 8) of NC n8 accumulator tiles: a lane's 2 NC values,
// as a tree (depth log2(2 NC) instead of a chain: with 2 warps a scheduler, the softmax's latency
// is what the tensor cores wait for).
template <int NC>
__device__ __forceinline__ float fa_half_max(const float (&s)[NC][4], int h) {
    float m[NC];
FA_UNROLL
    for (int n = 0; n < NC; n++) m[n] = fmaxf(s[n][2 * h], s[n][2 * h + 1]);
FA_UNROLL
    for (int w = NC / 2; w > 0; w /= 2)
FA_UNROLL
        for (int i = 0; i < w; i++) m[i] = fmaxf(m[i], m[i + w]);
    return m[0];
}
template <int NC>
__device__ __forceinline__ float fa_half_sum(const float (&s)[NC][4], int h) {
    float m[NC];
FA_UNROLL
    for (int n = 0; n < NC; n++) m[n] = s[n][2 * h] + s[n][2 * h + 1];
FA_UNROLL
    for (int w = NC / 2; w > 0; w /= 2)
FA_UNROLL
        for (int i = 0; i < w; i++) m[i] += m[i + w];
    return m[0];
}

// Rescaling is lazy (as FlashAttention-4 does it): a row's reference max m moves only when a
// chunk's max exceeds it by more than FA_SLACK (base 2), so a probability 2^(s sl2 - m) stays <= 2^8
// between moves, which the fp32 O and l and the bf16 P hold as well as values <= 1 (floating point:
// the same relative rounding). O, l and lse = m + log2 l all use the same m, so the result is the
// exact softmax either way. The test is warp-uniform (__any_sync): a warp whose rows' maxima stay
// within the slack skips O's 16 MT FMUL a row half, l's and the 2 MT MUFU of the factors, and PV
// no longer waits on them. A row's first visible chunk always moves m (from -inf).
#define FA_SLACK 8.0f

// Every row of this warp: m to max(m, mx) (mx: the chunk's row max, base-2 units), O and l scaled
// by 2^(m_old - m_new). A row that sees no key yet keeps m = -inf (O, l stay 0).
template <int HS>
__device__ __forceinline__ void fa_fwd_rescale(FaFwd<HS>& f, const float (&mx)[FaCfg<HS>::MT][2]) {
    typedef FaCfg<HS> Cf;
FA_UNROLL
    for (int mt = 0; mt < Cf::MT; mt++)
FA_UNROLL
        for (int h = 0; h < 2; h++) {
            const float mnew = fmaxf(f.m[mt][h], mx[mt][h]);
            const float alpha = ptx_ex2_approx_ftz(f.m[mt][h] - (mnew == -INFINITY ? 0.0f : mnew));
            f.m[mt][h] = mnew;
            f.l[mt][h] *= alpha;
FA_UNROLL
            for (int n = 0; n < Cf::NT; n++) { f.o[mt][n][2 * h] *= alpha; f.o[mt][n][2 * h + 1] *= alpha; }
        }
}

// The first half of a chunk's online softmax: masks (MASK: keys the row does not see get -inf; kc
// the chunk's first key), the chunk's row maxima over the quads, m moved (O, l rescaled) if a
// row's max passed m + FA_SLACK.
template <int HS, int NC, bool MASK>
__device__ __forceinline__ void fa_fwd_max(FaFwd<HS>& f, float (&s)[FaCfg<HS>::MT][NC][4], int row0, int kc, float sl2) {
    typedef FaCfg<HS> Cf;
    float mx[Cf::MT][2];
    bool grow = false;
    // masking: fa_sees in coordinates moved by kc + 2t (the rule only compares), so each element
    // compares its compile-time column 8n + (e & 1) with two values a row half
    const int shift = kc + fa_c_col(0);
FA_UNROLL
    for (int mt = 0; mt < Cf::MT; mt++) {
        if (MASK)
FA_UNROLL
            for (int n = 0; n < NC; n++)
FA_UNROLL
                for (int e = 0; e < 4; e++)
                    if (!fa_sees(row0 + 16 * mt + fa_c_row(e) - shift, 8 * n + (e & 1), f.row_start[mt][fa_c_half(e)] - shift))
                        s[mt][n][e] = -INFINITY;
FA_UNROLL
        for (int h = 0; h < 2; h++) {
            float m = fa_half_max<NC>(s[mt], h);
            m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, 1));
            m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, 2));
            mx[mt][h] = m * sl2;
            grow |= mx[mt][h] > f.m[mt][h] + FA_SLACK;
        }
    }
    if (__any_sync(FULL_MASK, grow)) fa_fwd_rescale<HS>(f, mx);
}

// The second half: s into the probabilities 2^(s sl2 - m), summed into l and packed as A fragments
// p (NC / 2 k16 steps over the chunk's keys). A row with m = -inf subtracts 0 instead, so no
// inf - inf is formed.
template <int HS, int NC>
__device__ __forceinline__ void fa_fwd_probs(FaFwd<HS>& f, float (&s)[FaCfg<HS>::MT][NC][4],
                                             uint32_t (&p)[FaCfg<HS>::MT][NC / 2][4], float sl2) {
    typedef FaCfg<HS> Cf;
FA_UNROLL
    for (int mt = 0; mt < Cf::MT; mt++) {
        const float base[2] = {f.m[mt][0] == -INFINITY ? 0.0f : f.m[mt][0], f.m[mt][1] == -INFINITY ? 0.0f : f.m[mt][1]};
FA_UNROLL
        for (int n = 0; n < NC; n++)
FA_UNROLL
            for (int e = 0; e < 4; e++) s[mt][n][e] = ptx_ex2_approx_ftz(fmaf(s[mt][n][e], sl2, -base[fa_c_half(e)]));
FA_UNROLL
        for (int h = 0; h < 2; h++) f.l[mt][h] += fa_half_sum<NC>(s[mt], h);
FA_UNROLL
        for (int kk = 0; kk < NC / 2; kk++) fa_pack_a(p[mt][kk], s[mt][2 * kk], s[mt][2 * kk + 1]);
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
// last, longest), 4 warps of 16 MT rows. Key tiles kt0..kt1: from the one holding the tile's first record
// start (0 without doc_start) to the diagonal; tile kt + 1 is copied into the other stage while
// tile kt is multiplied.
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
    const int* ds = doc_start ? doc_start + (size_t)hd.b * T : NULL;
    const int kt0 = ds ? ds[q0] / FA_BN : 0, kt1 = (min(q0 + Cf::BM, T) - 1) / FA_BN;
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
        // warp-uniform: padding rows only, a tile above the diagonal, or one wholly before the records
        if (row0 >= T || k0 > row_last || k0 + FA_BN <= warp_start) continue;
        if (k0 + FA_BN - 1 > row0 || k0 < warp_start_last) fa_fwd_tile<HS, CH, true>(f, lo, sK, sK + 2 * Cf::TILE, row0, k0, hd.sl2);
        else fa_fwd_tile<HS, CH, false>(f, lo, sK, sK + 2 * Cf::TILE, row0, k0, hd.sl2);
    }
    if (row0 < T) fa_fwd_finish<HS>(f, hd, out, lse, row0, T, vec);
}

// ---------------------------------------------------------------------------------------------
// backward

// Per row t of head bh (row = bh Tpad + t): Dp = dout . out, L2p = lse log2(e); rows in [T, Tpad)
// get 0 (the kernels cp.async whole 64-row tiles of both). Half a warp per row, each lane one
// 16-byte chunk of dout and out (HS / 8 <= 16 chunks; element loads when vec is 0): one pass over
// both at full width (a lane per element pair read them 2 bytes at a time). Rows come in
// multiples of 64, so every warp is whole.
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

// The dS^T tile of (query tile qt, key tile kt <= qt; 64 x 64 each) of this block's head: tiles on or below
// the diagonal, row by row of query tiles, 64 x 64 bf16 each (row = key, column = query).
// head: the launch's head (fa_block), its place in the buffer; the offset is
// 32-bit (the launch's tiles are under 2^32 elements: fa_backward checks), which keeps the
// dK/dV kernel within its registers.
__device__ __forceinline__ bf16* fa_ds_tile(const FaBwdArgs& a, int head, int qt, int kt) {
    const unsigned nt = a.Tpad / FA_BN, pairs = nt * (nt + 1) / 2;
    return a.dS + ((unsigned)head * pairs + (unsigned)(qt * (qt + 1) / 2 + kt)) * (unsigned)(FA_BN * FA_BN);
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

// P^T = exp2(S^T sl2 - lse2) of this warp's keys kw.. (rows) and queries qs.. of the stage
// (columns), as the bf16 A fragments pa[mk][kk] of dV += P^T dO (k16 step kk over the queries).
// MASK: pairs the query does not see (fa_sees; queries past T) get P = 0.
template <int MK, int QN, bool MASK>
__device__ __forceinline__ void fa_dkv_probs(uint32_t (&pa)[MK][QN / 2][4], float (&s)[MK][QN][4], const float* sl2v,
                                             int qs, int q0, int kw, const int* ds, int T, float sl2) {
FA_UNROLL
    for (int mk = 0; mk < MK; mk++) {
FA_UNROLL
        for (int n = 0; n < QN; n++)
FA_UNROLL
            for (int e = 0; e < 4; e++) {
                const int c = qs + 8 * n + fa_c_col(e), q = q0 + c;
                float p = ptx_ex2_approx_ftz(fmaf(s[mk][n][e], sl2, -sl2v[c]));
                if (MASK && !(q < T && fa_sees(q, kw + 16 * mk + fa_c_row(e), fa_record_start(ds, q, T)))) p = 0.0f;
                s[mk][n][e] = p;
            }
FA_UNROLL
        for (int kk = 0; kk < QN / 2; kk++) fa_pack_a(pa[mk][kk], s[mk][2 * kk], s[mk][2 * kk + 1]);
    }
}

// Element e of n8 tile n of a fragment packed by fa_pack_a (tiles 2kk, 2kk + 1 into a[kk]), back
// in fp32 (exact: a bf16 is the top half of its fp32).
__device__ __forceinline__ float fa_packed(const uint32_t (&a)[4], int n, int e) {
    const uint32_t r = a[2 * (n & 1) + fa_c_half(e)];
    return __uint_as_float((e & 1) ? r & 0xffff0000u : r << 16);
}

// dS^T = P^T (dP^T - D) in place of dp, with the bf16 P^T of pa (the P that dV += P^T dO uses:
// holding it packed instead of in fp32 across the dP^T product saves 8 MK QN / 2 registers).
template <int MK, int QN>
__device__ __forceinline__ void fa_dkv_dsoft(float (&dp)[MK][QN][4], const uint32_t (&pa)[MK][QN / 2][4], const float* sd,
                                             int qs) {
FA_UNROLL
    for (int mk = 0; mk < MK; mk++)
FA_UNROLL
        for (int n = 0; n < QN; n++)
FA_UNROLL
            for (int e = 0; e < 4; e++) dp[mk][n][e] = fa_packed(pa[mk][n / 2], n, e) * (dp[mk][n][e] - sd[qs + 8 * n + fa_c_col(e)]);
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

// dK, dV of the block's BK keys (fa_block's rank; 16 MK a warp) of head bh0 + fa_block().head, over the
// query tiles from the diagonal on that its keys are visible to, the next one copied into the
// other stage under the current one's math; dS^T tiles to a.dS for the dQ kernel.
template <int HS>
__global__ void __launch_bounds__(FA_THREADS, 2) flash_attention_backward_dkv_kernel(FaBwdArgs a) {
    typedef FaCfg<HS> Cf;
    const FaBlock blk = fa_block();   // rank 0: keys 0.., the most query tiles
    const FaHead hd = fa_head<HS>(a.qkv, a.T, a.NH, a.bh0 + blk.head);
    const int k0 = blk.rank * Cf::BK, kw = k0 + 16 * Cf::MK * (threadIdx.x / 32), nqt = a.Tpad / FA_BN;
    const int qt0 = k0 / FA_BN;
    const int* ds = a.doc_start ? a.doc_start + (size_t)hd.b * a.T : NULL;
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
        // a query tile whose first row's record starts after these keys sees none of them (starts never decrease)
        const bool next = qt + 1 < nqt && (!ds || ds[(qt + 1) * FA_BN] < k0 + Cf::BK);
        if (next) fa_dkv_load_q<HS>(fa_dkv_smem<HS>((qt + 1 - qt0) & 1), a, hd, qt + 1, cp);
        if (kw < q0 + FA_BN) {   // warp-uniform: keys above the tile's diagonal have no dS tile here
            bf16* dst = fa_ds_tile(a, hd.bh - a.bh0, qt, kw / FA_BN) + (kw % FA_BN) * FA_BN;
FA_NO_UNROLL
            for (int qs = 0; qs < FA_BN; qs += Cf::QH) {   // (not unrolled: the sub-steps would share registers)
                // masked: the diagonal, queries past T, or a record start after some of these keys
                const int qe = q0 + qs + Cf::QH;
                const bool mask = q0 + qs < kw + 16 * Cf::MK - 1 || qe > a.T || (ds && ds[min(qe, a.T) - 1] > kw);
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
// warp) of head bh0 + fa_block().head: dQ = sum over its key tiles, in order, of dS K, dS from the dK/dV
// kernel's tiles (ldmatrix .trans of the stored dS^T), K via ldmatrix .trans; double-buffered
// like the forward. (Min blocks 5 for HS <= 48: fa_block's division took HS 48 from 96 to 104
// registers, 5 blocks an SM to 4; bounded, it is back at 96 with no spill.)
template <int HS>
__global__ void __launch_bounds__(FA_THREADS, HS <= 48 ? 5 : 3) flash_attention_backward_dq_kernel(FaBwdArgs a) {
    typedef FaCfg<HS> Cf;
    bf16* sm = reinterpret_cast<bf16*>(fa_smem());   // stage s at s (DS_TILE + TILE): dS^T, then K
    const FaBlock blk = fa_block();
    const FaHead hd = fa_head<HS>(a.qkv, a.T, a.NH, a.bh0 + blk.head);
    const int qt = (int)gridDim.x - 1 - blk.rank, q0 = qt * FA_BN, warp = threadIdx.x / 32, row0 = q0 + 16 * warp;
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

// ---------------------------------------------------------------------------------------------
// host side

int attention_flash_supported(int HS) { return ops_cuda_flash_supported(HS); }

// ops_set_deterministic lives here, not in backend.cu: attention backward was the only op with a
// non-deterministic variant (dQ by fp32 atomics), which was slower than the deterministic one on
// an H100 and is gone; every op of this backend is now deterministic, so the flag changes nothing.
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
// launch takes at most FA_MAX_GRID_Y heads (grid y). B 16, NH 12, T 1024: 136 tiles a head, 192
// heads, 214 MB, one chunk. The arithmetic is llmc/ops/sizes.h's, which the memory plan uses too.
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

// Grids are (tiles, heads): blocks are issued x fastest, so a head's tiles run together.
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
// size 64 only, for attention_bench to time both and for the test to check both.
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
