// Shared helpers of the CUDA op kernels (llmc/cuda/*.cu): warp/block reductions, 8-wide bf16
// packs (128-bit loads/stores), stochastic rounding, per-purpose scratch buffers.
//
// The same source is compiled two ways:
// - nvcc -DLLMC_CUDA: the production kernels (floatX = __nv_bfloat16).
// - g++ -DLLMC_CUDA -DLLMC_CUDA_EMULATED with the CUDA-on-CPU harness (test/cuda_cpu/): every
//   kernel runs on the CPU, each CUDA thread a fiber. So kernels here stick to what the harness
//   emulates: 1-D blocks whose size is a multiple of 32, static __shared__ arrays (no dynamic
//   shared memory), __syncthreads, full-warp shuffles. No inline PTX, no atomics, no
//   device-only intrinsics without a host fallback.
#ifndef LLMC_CUDA_OPS_COMMON_CUH
#define LLMC_CUDA_OPS_COMMON_CUH

// Everything under llmc/cuda/ is the CUDA backend: floatX is bf16 there (llmc/ops.h), whatever
// the command line says.
#ifndef LLMC_CUDA
#define LLMC_CUDA 1
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include "ops.h"
#include "launch.cuh"
#include "common.cuh"

#define OPS_WARP 32
#define OPS_FULL_MASK 0xffffffffu

static inline unsigned ops_blocks(size_t work, size_t per_block) {
    return (unsigned)((work + per_block - 1) / per_block);
}
// 16-byte alignment test for the 128-bit (8 x bf16) paths.
static inline int ops_aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

// ----------------------------------------------------------------------------
// reductions (all lanes of the warp / all threads of the block must call them)

__device__ inline float ops_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(OPS_FULL_MASK, v, o);
    return v;
}
__device__ inline float ops_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(OPS_FULL_MASK, v, o));
    return v;
}
// Sum over a 1-D block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. The leading barrier lets callers use it several times in one kernel.
__device__ inline float ops_block_sum(float v) {
    __shared__ float ops_block_partial[32];
    int lane = threadIdx.x % OPS_WARP, warp = threadIdx.x / OPS_WARP;
    int nwarps = blockDim.x / OPS_WARP;
    v = ops_warp_sum(v);
    __syncthreads();
    if (lane == 0) ops_block_partial[warp] = v;
    __syncthreads();
    v = lane < nwarps ? ops_block_partial[lane] : 0.0f;
    return ops_warp_sum(v);
}

// ----------------------------------------------------------------------------
// 8 x bf16 = 128-bit packs: x128 / load128 / store128 from common.cuh

// Load elements [c, c+8) of a row of length C into fp32 (zeros past the end). vec != 0 means
// the row is 16-byte aligned and C % 8 == 0, so one 128-bit load does it.
__device__ inline void load8f(float* dst, const floatX* row, int c, int C, int vec) {
    if (vec) {
        x128 p = load128(row + c);
        for (int k = 0; k < 8; k++) dst[k] = __bfloat162float(p[k]);
    } else {
        for (int k = 0; k < 8; k++) dst[k] = c + k < C ? __bfloat162float(row[c + k]) : 0.0f;
    }
}
__device__ inline void store8f(floatX* row, const float* src, int c, int C, int vec) {
    if (vec) {
        x128 p;
        for (int k = 0; k < 8; k++) p[k] = __float2bfloat16(src[k]);
        store128(row + c, p);
    } else {
        for (int k = 0; k < 8; k++) if (c + k < C) row[c + k] = __float2bfloat16(src[k]);
    }
}

// ----------------------------------------------------------------------------
// stochastic rounding fp32 -> bf16, deterministic given (seed, index)

__device__ inline uint32_t ops_hash(uint32_t seed, uint64_t idx) {
    uint32_t h = seed * 0x9E3779B1u ^ (uint32_t)idx ^ ((uint32_t)(idx >> 32) * 0x85EBCA77u);
    h ^= h >> 16; h *= 0x7FEB352Du;
    h ^= h >> 15; h *= 0x846CA68Bu;
    h ^= h >> 16;
    return h;
}
__device__ inline uint32_t ops_f2u(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u; memcpy(&u, &x, 4); return u;
#endif
}
__device__ inline float ops_u2f(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x; memcpy(&x, &u, 4); return x;
#endif
}
// Adds 16 random bits below the bf16 mantissa and truncates: rounds up with probability equal
// to the discarded fraction, so the expected value is x (small AdamW steps are not lost).
__device__ inline floatX ops_round_stochastic(float x, uint32_t rnd) {
    uint32_t u = ops_f2u(x);
    if ((u & 0x7F800000u) == 0x7F800000u) return __float2bfloat16(x);   // inf / nan unchanged
    u = (u + (rnd & 0xFFFFu)) & 0xFFFF0000u;
    return __float2bfloat16(ops_u2f(u));   // exact: the low bits are zero
}

// tanh-approximation GELU ("gelu_new"), shared by the kernels and the emulated GEMM epilogue
#define OPS_GELU_SCALE 0.7978845608028654f   // sqrt(2/pi)
__host__ __device__ inline float ops_gelu(float x) {
    float u = OPS_GELU_SCALE * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

// ----------------------------------------------------------------------------
// scratch device buffers, one per purpose, grown on demand and kept for the process lifetime
// (the model allocates everything up front; these are the few op-internal temporaries).
enum {
    OPS_SCRATCH_REDUCE = 0,   // per-block partial sums (sum_squares, sum_f32)
    OPS_SCRATCH_COLSUM,       // per-chunk column partials (layernorm dweight/dbias, matmul dbias)
    OPS_SCRATCH_ENCODER,      // encoder backward buckets
    OPS_SCRATCH_ATTN,         // attention backward row terms
    OPS_SCRATCH_CAST,         // fp32 staging of ops_upload_f32 / ops_download_f32
    OPS_SCRATCH_COUNT
};
void* ops_scratch(int slot, size_t bytes);

// Column sums in fixed order (deterministic): partial[chunk][c] for nchunks chunks of rows,
// then out[c] += sum over chunks. Shared by layernorm_backward and matmul_backward's dbias.
// Blocks of 256 threads: each lane owns 8 adjacent columns (one 128-bit load per row when the
// rows are aligned), the 8 warps split the chunk's rows and are combined in a fixed order.
#define OPS_COLSUM_ROWS 64    // rows per chunk
#define OPS_COLSUM_COLS 256   // columns per block (32 lanes x 8)
void ops_colsum_finalize(floatX* out, const float* partial, int nchunks, int C);

#endif // LLMC_CUDA_OPS_COMMON_CUH
