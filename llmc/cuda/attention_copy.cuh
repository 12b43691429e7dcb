// Flash attention (attention.cu): data between global memory and a block. FaHead places a head
// in qkv; fa_load_tile copies a tile into shared memory (cp.async, 16 bytes a thread, rows past T
// zero-filled and never read; element loads and plain shared stores for misaligned tensors); a
// warp's fp32 accumulators leave as bf16 rows (fa_store_rows, added to the output when it
// accumulates, rounded once). A thread's part of a tile copy is a plan made once a kernel
// (fa_copy_plan), so each chunk it copies costs one address step and one cp.async.
// llmc/cuda/README.md ("Flash attention") has the copies' figures.
#ifndef LLMC_CUDA_ATTENTION_COPY_CUH
#define LLMC_CUDA_ATTENTION_COPY_CUH

#include "cuda/attention_traits.cuh"

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
// rows address them all: per chunk one address step and the cp.async with an immediate shared
// offset, and whole tiles (every tile but the last) copy without the zero-fill test.
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
// unrolling and remainder handling).
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

#endif // LLMC_CUDA_ATTENTION_COPY_CUH
