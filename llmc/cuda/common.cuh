// Common helpers for the CUDA kernels. Compiles under nvcc and under the CUDA-on-CPU harness
// (g++ with test/cuda_cpu/cuda_cpu.h force-included), so kernels written with these run in CI.
//
//   cudaCheck(expr)            stop with file:line, the CUDA error name/string and a hint
//   cudaCheckLast()            cudaCheck(cudaGetLastError()) after a LAUNCH
//   ceil_div(a, b)             integer ceil(a / b)
//   WARP_SIZE                  32
//   warp_reduce_sum(float)     sum over the 32 lanes (every lane gets the result), __shfl_xor_sync
//   warp_reduce_max(float)     max over the 32 lanes
//   block_reduce<warp_reduce_sum>(val, final_sync = false, out_of_range = 0.0f)
//                              reduce over a 1-D block whose blockDim.x is a multiple of 32 and
//                              <= 1024; every thread gets the result. Pass final_sync = true when
//                              the block calls block_reduce again right away (it reuses the same
//                              shared scratch).
//   bf16                       __nv_bfloat16
//   Packed128<T>               16 bytes of T (8 bf16, 4 float) for 128-bit loads and stores
//   x128 / f128                Packed128<bf16> / Packed128<float>
//   load128(p) / load128cs(p)  128-bit load (cs: streaming, evict-first: data read once)
//   store128(p, v) / store128cs(p, v) / store128cg(p, v)   128-bit stores (cg: bypass L1)
//                              p must be 16-byte aligned (cudaMalloc gives 256-byte alignment).
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "../check.h"
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
// shared memory, then every warp reduces the partials (so all threads hold the result).
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

// ---------------------------------------------------------------------------------------------
// 128-bit vectors

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

#endif // LLMC_CUDA_COMMON_CUH
