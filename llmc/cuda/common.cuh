// The CUDA backend's helper library: everything the kernels of llmc/cuda/ share. Compiles under
// nvcc and under the CUDA-on-CPU harness (g++ with test/cuda_cpu/cuda_cpu.h force-included), so
// kernels written with these run in CI. Kernels stick to what the harness emulates: inline PTX
// only through ptx.cuh's wrappers, no device-only intrinsics without a host fallback
// (test/cuda_cpu/README.md).
//
//   cudaCheck(expr), cudaCheckLast()   stop with file:line, the CUDA error and a hint
//   ceil_div, ops_blocks; WARP_SIZE, FULL_MASK
//   warp_reduce_sum/max, block_reduce<op>, block_sum   reductions over a warp or a 1-D block;
//                                      every thread gets the result
//   bf16 (= floatX: everything under llmc/cuda is the bf16 backend, compiled with -DLLMC_CUDA)
//   Packed128<T> (x128, f128), load128[cs], store128[cs|cg], ops_aligned16, load8f / store8f
//                                      128-bit loads and stores, and the scalar path of ragged rows
//   ops_round_stochastic (llmc/base/sround.h), ops_gelu / ops_gelu_grad (kernels and the emulated
//                                      GEMM's epilogues)
//   ops_scratch (backend.cu), ops_colsum_finalize (reduce.cu)
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#ifndef LLMC_CUDA
#error "llmc/cuda is the CUDA backend: compile it with -DLLMC_CUDA (floatX = bf16), as mk/*.mk does"
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "ops/ops.h"
#include "base/check.h"
#include "base/sround.h"
#include "launch.cuh"

// ---------------------------------------------------------------------------------------------
// error checking

static inline void cuda_check_at(cudaError_t err, const char* expr, const char* file, int line) {
    if (err == cudaSuccess) return;
    llmc_fatal_at(file, line,
                  "a kernel error shows up at the next CUDA call: rerun with CUDA_LAUNCH_BLOCKING=1 "
                  "(or under compute-sanitizer) to find the failing kernel; 'out of memory' means a "
                  "smaller batch size / sequence length",
                  "CUDA error %s (%s) from %s", cudaGetErrorName(err), cudaGetErrorString(err), expr);
}
#define cudaCheck(expr) cuda_check_at((expr), #expr, __FILE__, __LINE__)
#define cudaCheckLast() cuda_check_at(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

template <typename A, typename B>
__host__ __device__ constexpr auto ceil_div(A a, B b) -> decltype(a + b) { return (a + b - 1) / b; }

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu

typedef __nv_bfloat16 bf16;

// ---------------------------------------------------------------------------------------------
// reductions

__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int off = WARP_SIZE / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float warp_reduce_max(float v) {
    for (int off = WARP_SIZE / 2; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

typedef float (*warp_reduce_fn)(float);

// Two-level reduction: each warp reduces in registers, lane 0 of every warp parks its partial in
// shared memory, then every warp reduces the partials (so all threads hold the result). blockDim.x
// is a multiple of 32 and <= 1024. Pass final_sync = true when the block calls block_reduce again
// right away (it reuses the same shared scratch).
template <warp_reduce_fn warp_reduce>
__device__ inline float block_reduce(float val, bool final_sync = false, float out_of_range = 0.0f) {
    __shared__ float partials[WARP_SIZE];
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    const int nwarps = blockDim.x / WARP_SIZE;
    float w = warp_reduce(val);
    if (lane == 0) partials[warp] = w;
    __syncthreads();
    float r = warp_reduce(lane < nwarps ? partials[lane] : out_of_range);
    if (final_sync) __syncthreads();  // nobody may overwrite partials until everyone has read them
    return r;
}

// Sum over the block; the leading barrier lets callers use it several times in one kernel.
__device__ inline float block_sum(float v) {
    __syncthreads();
    return block_reduce<warp_reduce_sum>(v);
}

// ---------------------------------------------------------------------------------------------
// 128-bit vectors: 16 bytes of T (8 bf16, 4 float). p is 16-byte aligned (cudaMalloc gives
// 256-byte alignment). cs: streaming, evict-first (data read once); cg: the store bypasses L1.

template <typename T>
struct alignas(16) Packed128 {
    static constexpr int size = 16 / sizeof(T);
    T payload[size];

    Packed128() = default;
    __device__ __forceinline__ explicit Packed128(int4 bits) { memcpy((void*)payload, &bits, sizeof(bits)); }
    __device__ __forceinline__ static Packed128 constant(T v) {
        Packed128 r;
        for (int k = 0; k < size; k++) r.payload[k] = v;
        return r;
    }
    __device__ __forceinline__ static Packed128 zeros() { return constant((T)0.0f); }
    __device__ __forceinline__ T& operator[](int i) { return payload[i]; }
    __device__ __forceinline__ const T& operator[](int i) const { return payload[i]; }
    __device__ __forceinline__ int4 get_bits() const {
        int4 bits;
        memcpy(&bits, (const void*)payload, sizeof(bits));
        return bits;
    }
};

typedef Packed128<bf16> x128;
typedef Packed128<float> f128;

template <typename T>
__device__ __forceinline__ Packed128<T> load128(const T* p) {
    return Packed128<T>(*reinterpret_cast<const int4*>(p));
}
template <typename T>
__device__ __forceinline__ Packed128<T> load128cs(const T* p) {
    return Packed128<T>(__ldcs(reinterpret_cast<const int4*>(p)));
}
template <typename T>
__device__ __forceinline__ void store128(T* p, Packed128<T> v) {
    *reinterpret_cast<int4*>(p) = v.get_bits();
}
template <typename T>
__device__ __forceinline__ void store128cs(T* p, Packed128<T> v) {
    __stcs(reinterpret_cast<int4*>(p), v.get_bits());
}
template <typename T>
__device__ __forceinline__ void store128cg(T* p, Packed128<T> v) {
    __stcg(reinterpret_cast<int4*>(p), v.get_bits());
}

// ---------------------------------------------------------------------------------------------
// grid sizes and alignment

#define EW_BLOCK 256   // threads per block of the element-wise kernels

static inline unsigned ops_blocks(size_t work, size_t per_block) {
    return (unsigned)((work + per_block - 1) / per_block);
}
// 16-byte alignment test for the 128-bit (8 x bf16) paths.
static inline int ops_aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

// ---------------------------------------------------------------------------------------------
// rows of 8 x bf16 (one 128-bit pack)

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

// ---------------------------------------------------------------------------------------------
// stochastic rounding fp32 -> bf16, deterministic given (seed, index): llmc/base/sround.h, shared with
// the host AdamW of the optimizer offload

__device__ inline floatX ops_round_stochastic(float x, uint32_t rnd) {
    return __ushort_as_bfloat16(sround_bf16(x, rnd));
}

// tanh-approximation GELU ("gelu_new"), shared by the kernels and the emulated GEMM epilogue
#define OPS_GELU_SCALE 0.7978845608028654f   // sqrt(2/pi)
__host__ __device__ inline float ops_gelu(float x) {
    float u = OPS_GELU_SCALE * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
// its derivative, shared by gelu_backward and the emulated GEMM's DGELU epilogue
__host__ __device__ inline float ops_gelu_grad(float x) {
    float x3 = 0.044715f * x * x * x;
    float u = OPS_GELU_SCALE * (x + x3);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * OPS_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

// ---------------------------------------------------------------------------------------------
// scratch device buffers, one per purpose, grown on demand and kept for the process lifetime
// (the model allocates everything up front; these are the few op-internal temporaries).
enum {
    OPS_SCRATCH_REDUCE = 0,   // per-block partial sums (sum_squares, sum_f32)
    OPS_SCRATCH_COLSUM,       // per-chunk column partials (layernorm dweight/dbias, matmul dbias, DoRA dm)
    OPS_SCRATCH_ENCODER,      // encoder backward buckets
    OPS_SCRATCH_ATTN,         // attention backward row terms
    OPS_SCRATCH_CAST,         // fp32 staging of ops_upload_f32 / ops_download_f32
    OPS_SCRATCH_COUNT
};
void* ops_scratch(int slot, size_t bytes);
// Pinned host memory for an asynchronous upload (cudaMemcpyAsync on the default stream), valid
// until the host next waits for the device (backend.cu says how).
void* ops_stage_host(size_t bytes);

// Column sums in fixed order (deterministic): partial[chunk][c] for nchunks chunks of rows,
// then out[c] += sum over chunks. Shared by layernorm_backward and matmul_backward's dbias.
// Blocks of 256 threads: each lane owns 8 adjacent columns (one 128-bit load per row when the
// rows are aligned), the 8 warps split the chunk's rows and are combined in a fixed order.
#define OPS_COLSUM_ROWS 64    // rows per chunk
#define OPS_COLSUM_COLS 256   // columns per block (32 lanes x 8)
void ops_colsum_finalize(floatX* out, const float* partial, int nchunks, int C);
// The device's SM count (queried once).
int ops_sm_count(void);
// The number of CUDA devices, at least 1: none stops the program naming the CPU build
// (backend.cu; not in the emulated backend).
int ops_device_count(void);
// Row chunks (grid.y) of a column sum over N rows and C columns: one per OPS_COLSUM_ROWS rows, but
// no more than fill the GPU twice over (each block then strides over several chunks), so the
// partials and the finalize's work scale with the SMs, not with the batch. Deterministic on a
// given device (the grid depends on its SM count).
int ops_colsum_chunks(int N, int C);

#endif // LLMC_CUDA_COMMON_CUH
