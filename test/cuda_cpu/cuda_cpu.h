// CUDA-on-CPU harness: compile ordinary CUDA kernel source with g++/clang++ and run it on the CPU.
// Test code only: it exists so that every kernel runs in CI, where there is no GPU.
//
// Use: g++ -std=gnu++17 -x c++ -include test/cuda_cpu/cuda_cpu.h -isystem /usr/local/cuda/include k.cu
//      and link test/cuda_cpu/cuda_cpu.cpp (the runtime). mk/harness.mk has the rules.
//
// Model (test/cuda_cpu/README.md says how to write kernels for it and what it catches):
//  - every CUDA thread of a block is a fiber (hand-written x86-64 stack switch, ~0.07 us; ucontext
//    elsewhere); the blocks of a grid run one after another on each OS thread. CUDA_CPU_THREADS=N
//    OS threads take blocks k, k+N, ... (use 2 under TSan: races between blocks);
//  - __syncthreads() is a counting barrier over the block's live (not exited) fibers; warp
//    shuffles / votes / __syncwarp are rendezvous points where the last lane to arrive computes
//    every lane's result; reading a lane that does not take part (not in the mask, exited, beyond
//    blockDim) yields poison (all bits set: NaN for float/bf16); a block where no fiber can go on
//    is reported as a DEADLOCK with every thread's wait;
//  - __shared__ is (constinit) thread_local (per OS thread, so per running block; static shared memory keeps
//    the previous block's values, it is not poisoned); `extern __shared__ T name[]` resolves to one
//    per-OS-thread 227 KB buffer under a fixed list of names (smem, shared, sdata, shmem, smem_buf,
//    shared_mem, shared_memory, dyn_smem, dynamic_smem, s_data, sbuf: see cuda_cpu.cpp), filled
//    with 0xFF at each block start; under ASan the bytes past the launch's size are poisoned;
//  - device memory is host memory (cudaMalloc = malloc filled with 0xFF = NaN); the runtime keeps a
//    table of allocations, checks every cudaMemcpy/cudaMemset range against it and fails the
//    process at exit if device memory leaked;
//  - the fiber scheduling order is CUDA_CPU_ORDER=forward|reverse|random:<seed>; a data race that
//    a missing barrier causes shows up as a wrong result in some orders and as a TSan report in all;
//  - launch errors (too many threads, too much dynamic smem without cudaFuncSetAttribute, bad
//    grid, unknown stream) are reported by cudaGetLastError() like the real runtime;
//  - a launch running longer than CUDA_CPU_TIMEOUT seconds (default 300) stops the process: a
//    thread spinning on memory that another thread writes never yields its fiber;
//  - streams and events are synchronous: work runs when it is issued;
//  - WMMA (nvcuda::wmma, bf16/fp16 inputs, fp32/fp16 accumulator): cuda_cpu_wmma.h;
//  - inline PTX only through llmc/cuda/ptx.cuh's wrappers (mma.m16n8k16 bf16, ldmatrix,
//    cp.async, cvt to bf16x2): cuda_cpu_ptx.h.
// Numerics are CPU numerics (libm, no fast-math approximations, FMA contraction as g++ decides):
// compare with tolerances. Not supported (compile or link error, or a hang caught by the timeout):
// other inline PTX, cooperative_groups, texture objects, spin-waits between threads or blocks,
// dynamic parallelism. Kernels are launched with LAUNCH() from llmc/cuda/launch.cuh (g++ cannot
// parse the triple-chevron launch syntax). Kernel-side code that must differ (library calls)
// can test CUDA_CPU_HARNESS.
#ifndef CUDA_CPU_H
#define CUDA_CPU_H

#if !defined(__cplusplus) || __cplusplus < 201703L
#error "cuda_cpu.h: compile kernel sources as C++17 (g++ -std=gnu++17 -x c++)"
#endif
#if defined(__CUDACC__)
#error "cuda_cpu.h is the CUDA-on-CPU harness; do not include it when compiling with nvcc"
#endif

#define CUDA_CPU_HARNESS 1

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <cmath>
#include <type_traits>
#include <tuple>
#include <utility>

// The toolkit headers work on the host: types (dim3, uint3, float4, cudaError_t ...), the runtime
// API declarations (which cuda_cpu.cpp implements) and the bf16/fp16 types with host arithmetic.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// ---------------------------------------------------------------------------------------------
// execution-space qualifiers: gone. __shared__ becomes per-OS-thread storage.
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __managed__
#undef __launch_bounds__
#undef __grid_constant__
#define __global__
#define __device__
#define __host__
// __shared__ variables must not need dynamic initialization (CUDA forbids it too): __constinit
// (a g++ extension before C++20) makes g++ check that and skip the per-OS-thread init guard that
// it would otherwise emit for arrays of bf16 / fp16 (the guard, written by the first fiber and
// read by the others, would be a false race for TSan). clang needs no guard for these.
#if defined(__clang__)
#define __shared__ thread_local
#else
#define __shared__ __constinit thread_local
#endif
#define __constant__
#define __managed__
#define __launch_bounds__(...)
#define __grid_constant__

#if defined(__SANITIZE_THREAD__)
#define CUDA_CPU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CUDA_CPU_TSAN 1
#endif
#endif

// ---------------------------------------------------------------------------------------------
// per-fiber / per-block builtins
namespace cuda_cpu {
struct FiberHead { uint3 tid; };  // first member of the runtime's fiber record
}
// __thread (not thread_local): plain TLS, no init wrappers, so builtins cost one TLS load
extern __thread cuda_cpu::FiberHead* cuda_cpu_cur;  // the running CUDA thread
extern __thread uint3 cuda_cpu_blockIdx;
extern __thread uint3 cuda_cpu_blockDim;
extern __thread uint3 cuda_cpu_gridDim;

#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
// Values, not references: read-only like the CUDA builtins, and no reference to a TLS variable
// (g++ 12 with -fsanitize=undefined miscompiles the null check of such a reference).
static inline uint3 cuda_cpu_threadIdx() { return cuda_cpu_cur->tid; }
static inline uint3 cuda_cpu_blockIdx_v() { return cuda_cpu_blockIdx; }
static inline uint3 cuda_cpu_blockDim_v() { return cuda_cpu_blockDim; }
static inline uint3 cuda_cpu_gridDim_v() { return cuda_cpu_gridDim; }
#define threadIdx (cuda_cpu_threadIdx())
#define blockIdx (cuda_cpu_blockIdx_v())
#define blockDim (cuda_cpu_blockDim_v())
#define gridDim (cuda_cpu_gridDim_v())
// warpSize: the toolkit header declares it as extern "C" const int; cuda_cpu.cpp defines it (32)

// ---------------------------------------------------------------------------------------------
// runtime entry points (cuda_cpu.cpp)
namespace cuda_cpu {
// (W_MMA_16816 .. W_LDS128: the collective PTX instructions of cuda_cpu_ptx.h, a rendezvous of
// the whole warp that returns the mask of the lanes that took part)
enum WarpOp { W_SYNC = 1, W_SHFL_IDX, W_SHFL_UP, W_SHFL_DOWN, W_SHFL_XOR, W_BALLOT, W_ALL, W_ANY,
              W_RED_ADD, W_RED_MIN, W_RED_MAX, W_RED_AND, W_RED_OR, W_RED_XOR, W_MATCH_ANY,
              W_MMA_16816, W_LDSM_X1, W_LDSM_X2, W_LDSM_X4, W_LDSM_X1_T, W_LDSM_X2_T, W_LDSM_X4_T,
              W_STS32, W_LDS128 };
void syncthreads();
// barrier + vote: (threads at the barrier << 32) | (how many of them have pred != 0)
uint64_t syncthreads_vote(int pred);
// One warp rendezvous; bits holds the value (zero-extended), nbytes its size (for poison).
uint64_t warp_op(int op, unsigned mask, uint64_t bits, int nbytes, int arg, int width);
unsigned activemask();
[[noreturn]] void trap(const char* what);
typedef void (*KernelThunk)(const void* ctx);
void launch(const char* name, const void* kernel_id, KernelThunk thunk, const void* ctx,
            dim3 grid, dim3 block, size_t smem, cudaStream_t stream);

template <typename T>
static inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "warp shuffle of a type larger than 8 bytes: shuffle its parts");
    uint64_t b = 0; memcpy(&b, (const void*)&v, sizeof(T)); return b;
}
template <typename T>
static inline T from_bits(uint64_t b) { T v; memcpy((void*)&v, &b, sizeof(T)); return v; }

// Launch: arguments are converted to the kernel's parameter types once (as the CUDA runtime
// does), and every CUDA thread gets its own copy of the parameters when its fiber calls the kernel.
template <typename... P>
struct LaunchCtx {
    void (*fn)(P...);
    std::tuple<typename std::decay<P>::type...> args;
    static void thunk(const void* c) {
        const LaunchCtx* self = static_cast<const LaunchCtx*>(c);
        std::apply(self->fn, self->args);
    }
};
template <typename... P, typename... A>
static inline void launch_kernel(const char* name, void (*fn)(P...), dim3 grid, dim3 block,
                                 size_t smem, cudaStream_t stream, A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "LAUNCH: wrong number of kernel arguments");
    LaunchCtx<P...> ctx{fn, {std::forward<A>(args)...}};
    launch(name, reinterpret_cast<const void*>(fn), &LaunchCtx<P...>::thunk, &ctx, grid, block,
           smem, stream);
}
}  // namespace cuda_cpu

// Host stalls: the runtime calls that make the host wait for the GPU on a real device (CUDA's
// "API synchronization behavior"), counted since the process started. A test reads them around
// the code it measures; CUDA_CPU_SYNC_REPORT=FILE appends the totals to FILE at exit, one line
// "d2h N h2d N sync N alloc N memset N" (for tests that run a whole program).
struct CudaCpuSyncCounts {
    long d2h;    // device->host copies the host waits for: cudaMemcpy, cudaMemcpyAsync into
                 // pageable memory, cudaMemcpyFromSymbol
    long h2d;    // synchronous host->device copies: cudaMemcpy (a stream sync first from pageable
                 // memory), cudaMemcpyAsync from pageable memory, cudaMemcpyToSymbol
    long sync;   // cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, and
                 // cudaFree / cudaFreeHost (an implicit device synchronization)
    long alloc;  // cudaMalloc / cudaMallocHost (may synchronize; never wanted inside a step)
    long memset; // cudaMemset / cudaMemsetAsync: not a stall, but a pass over memory that a
                 // write-not-accumulate op makes unneeded (counted so a test can show they are gone)
};
extern "C" CudaCpuSyncCounts cuda_cpu_sync_counts(void);

// Shared-memory bank conflicts of ldmatrix, cp.async and the warp-wide 4-byte stores and 16-byte
// loads of ptx.cuh (the accesses the PTX wrappers make; plain C++ loads and stores are not counted): each warp-instruction's wavefronts as the hardware
// would serve them (cuda_cpu.cpp, "bank conflicts", says how), and the wavefronts it would take
// without conflicts. A GPU-less stand-in for Nsight Compute's shared-memory conflict counters.
// Counted since the last reset, over all launches (kernel NULL) or the launches of one kernel,
// by its LAUNCH name without a template kernel's parentheses (e.g. "flash_attention_backward_
// dkv_kernel<HS, true>": the template arguments as written at the launch).
struct CudaCpuSmemStats {
    long ldsm;             // ldmatrix warp-instructions
    long ldsm_ideal;       // their wavefronts without conflicts: one per 8x8 matrix
    long ldsm_wavefronts;  // their wavefronts: extra ones = ldsm_wavefronts - ldsm_ideal
    long cp;               // cp.async warp-instructions (one copy from each lane that issued it)
    long cp_ideal;         // one wavefront per quarter-warp (8 lanes) that issued a copy
    long cp_wavefronts;    // extra ones = cp_wavefronts - cp_ideal
    long st;               // st.shared.b32 warp-instructions (ptx_st_shared_b32)
    long st_ideal;         // one wavefront each (32 lanes, 32 banks)
    long st_wavefronts;    // the most distinct words in one bank, per instruction
    long ld;               // ld.shared.v4.b32 warp-instructions (ptx_ld_shared_v4)
    long ld_ideal;         // one wavefront per quarter-warp
    long ld_wavefronts;    // extra ones = ld_wavefronts - ld_ideal
};
extern "C" void cuda_cpu_smem_stats_reset(void);
extern "C" CudaCpuSmemStats cuda_cpu_smem_stats(const char* kernel);

// The C++ runtime API templates of cuda_runtime.h exist only under nvcc: the ones kernels use.
template <typename... P>
static inline cudaError_t cudaFuncSetAttribute(void (*f)(P...), cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(f), attr, value);
}
template <typename... P>
static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, void (*f)(P...)) {
    return ::cudaFuncGetAttributes(a, reinterpret_cast<const void*>(f));
}
template <typename... P>
static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, void (*f)(P...), int block, size_t smem) {
    return ::cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, reinterpret_cast<const void*>(f), block, smem);
}
template <typename T>
static inline cudaError_t cudaMemcpyToSymbol(const T& symbol, const void* src, size_t count, size_t offset = 0,
                                             cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    return ::cudaMemcpyToSymbol((const void*)&symbol, src, count, offset, kind);
}
template <typename T>
static inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t count, size_t offset = 0,
                                               cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
    return ::cudaMemcpyFromSymbol(dst, (const void*)&symbol, count, offset, kind);
}

#define CUDA_CPU_LAUNCH(kernel, grid, block, smem, stream, ...) \
    cuda_cpu::launch_kernel(#kernel, kernel, dim3(grid), dim3(block), (size_t)(smem), stream, ##__VA_ARGS__)

// ---------------------------------------------------------------------------------------------
// synchronization and warp intrinsics
static inline void __syncthreads() { cuda_cpu::syncthreads(); }
static inline int __syncthreads_count(int p) { return (int)(uint32_t)cuda_cpu::syncthreads_vote(p); }
static inline int __syncthreads_and(int p) {
    uint64_t v = cuda_cpu::syncthreads_vote(p);
    return (uint32_t)v == (uint32_t)(v >> 32);
}
static inline int __syncthreads_or(int p) { return (uint32_t)cuda_cpu::syncthreads_vote(p) != 0; }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    cuda_cpu::warp_op(cuda_cpu::W_SYNC, mask, 0, 0, 0, 32);
}
static inline unsigned __activemask() { return cuda_cpu::activemask(); }
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return cuda_cpu::from_bits<T>(cuda_cpu::warp_op(cuda_cpu::W_SHFL_IDX, mask, cuda_cpu::to_bits(v), sizeof(T), src, width));
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return cuda_cpu::from_bits<T>(cuda_cpu::warp_op(cuda_cpu::W_SHFL_UP, mask, cuda_cpu::to_bits(v), sizeof(T), (int)d, width));
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return cuda_cpu::from_bits<T>(cuda_cpu::warp_op(cuda_cpu::W_SHFL_DOWN, mask, cuda_cpu::to_bits(v), sizeof(T), (int)d, width));
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lm, int width = 32) {
    return cuda_cpu::from_bits<T>(cuda_cpu::warp_op(cuda_cpu::W_SHFL_XOR, mask, cuda_cpu::to_bits(v), sizeof(T), lm, width));
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)cuda_cpu::warp_op(cuda_cpu::W_BALLOT, mask, pred != 0, 4, 0, 32);
}
static inline int __all_sync(unsigned mask, int pred) {
    return (int)cuda_cpu::warp_op(cuda_cpu::W_ALL, mask, pred != 0, 4, 0, 32);
}
static inline int __any_sync(unsigned mask, int pred) {
    return (int)cuda_cpu::warp_op(cuda_cpu::W_ANY, mask, pred != 0, 4, 0, 32);
}
static inline unsigned __reduce_add_sync(unsigned mask, unsigned v) { return (unsigned)cuda_cpu::warp_op(cuda_cpu::W_RED_ADD, mask, v, 4, 0, 32); }
static inline int __reduce_add_sync(unsigned mask, int v) { return (int)cuda_cpu::warp_op(cuda_cpu::W_RED_ADD, mask, (uint32_t)v, 4, 0, 32); }
static inline unsigned __reduce_min_sync(unsigned mask, unsigned v) { return (unsigned)cuda_cpu::warp_op(cuda_cpu::W_RED_MIN, mask, v, 4, 0, 32); }
static inline unsigned __reduce_max_sync(unsigned mask, unsigned v) { return (unsigned)cuda_cpu::warp_op(cuda_cpu::W_RED_MAX, mask, v, 4, 0, 32); }
static inline unsigned __reduce_and_sync(unsigned mask, unsigned v) { return (unsigned)cuda_cpu::warp_op(cuda_cpu::W_RED_AND, mask, v, 4, 0, 32); }
static inline unsigned __reduce_or_sync(unsigned mask, unsigned v) { return (unsigned)cuda_cpu::warp_op(cuda_cpu::W_RED_OR, mask, v, 4, 0, 32); }
static inline unsigned __reduce_xor_sync(unsigned mask, unsigned v) { return (unsigned)cuda_cpu::warp_op(cuda_cpu::W_RED_XOR, mask, v, 4, 0, 32); }
template <typename T> static inline unsigned __match_any_sync(unsigned mask, T v) {
    return (unsigned)cuda_cpu::warp_op(cuda_cpu::W_MATCH_ANY, mask, cuda_cpu::to_bits(v), sizeof(T), 0, 32);
}
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __nanosleep(unsigned) {}
[[noreturn]] static inline void __trap() { cuda_cpu::trap("__trap() called"); }
static inline long long clock64() {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static inline int __mul24(int a, int b) { return a * b; }

// ---------------------------------------------------------------------------------------------
// atomics: real atomics, so blocks on different OS threads are correct and TSan sees them as such
template <typename T, typename F>
static inline T cuda_cpu_atomic_cas_loop(T* addr, F f) {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "atomic on odd size");
    typedef typename std::conditional<sizeof(T) == 2, uint16_t,
            typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type>::type U;
    U* ua = reinterpret_cast<U*>(addr);
    U old = __atomic_load_n(ua, __ATOMIC_RELAXED), nw;
    for (;;) {
        T o; memcpy((void*)&o, &old, sizeof(T));
        T n = f(o); memcpy(&nw, (const void*)&n, sizeof(T));
        if (__atomic_compare_exchange_n(ua, &old, nw, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return o;
    }
}
#define CUDA_CPU_INT_ATOMICS(T)                                                                   \
    static inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }   \
    static inline T atomicSub(T* a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }   \
    static inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }   \
    static inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }     \
    static inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }   \
    static inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); } \
    static inline T atomicMax(T* a, T v) { return cuda_cpu_atomic_cas_loop(a, [v](T o) { return o > v ? o : v; }); } \
    static inline T atomicMin(T* a, T v) { return cuda_cpu_atomic_cas_loop(a, [v](T o) { return o < v ? o : v; }); } \
    static inline T atomicCAS(T* a, T cmp, T v) {                                                 \
        __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); return cmp; }
CUDA_CPU_INT_ATOMICS(int)
CUDA_CPU_INT_ATOMICS(unsigned int)
CUDA_CPU_INT_ATOMICS(unsigned long long)
CUDA_CPU_INT_ATOMICS(long long)
#undef CUDA_CPU_INT_ATOMICS
static inline float atomicAdd(float* a, float v) { return cuda_cpu_atomic_cas_loop(a, [v](float o) { return o + v; }); }
static inline double atomicAdd(double* a, double v) { return cuda_cpu_atomic_cas_loop(a, [v](double o) { return o + v; }); }
static inline float atomicExch(float* a, float v) { return cuda_cpu_atomic_cas_loop(a, [v](float) { return v; }); }
static inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, __nv_bfloat16 v) {
    return cuda_cpu_atomic_cas_loop(a, [v](__nv_bfloat16 o) { return __float2bfloat16(__bfloat162float(o) + __bfloat162float(v)); });
}
static inline __nv_bfloat162 atomicAdd(__nv_bfloat162* a, __nv_bfloat162 v) {
    return cuda_cpu_atomic_cas_loop(a, [v](__nv_bfloat162 o) {
        return __floats2bfloat162_rn(__low2float(o) + __low2float(v), __high2float(o) + __high2float(v)); });
}
static inline __half atomicAdd(__half* a, __half v) {
    return cuda_cpu_atomic_cas_loop(a, [v](__half o) { return __float2half(__half2float(o) + __half2float(v)); });
}

// ---------------------------------------------------------------------------------------------
// cache-hinted loads / stores: plain memory accesses here
template <typename T> static inline T __ldg(const T* p) { return *p; }
template <typename T> static inline T __ldcg(const T* p) { return *p; }
template <typename T> static inline T __ldca(const T* p) { return *p; }
template <typename T> static inline T __ldcs(const T* p) { return *p; }
template <typename T> static inline T __ldlu(const T* p) { return *p; }
template <typename T> static inline T __ldcv(const T* p) { return *p; }
template <typename T> static inline void __stcg(T* p, T v) { *p = v; }
template <typename T> static inline void __stcs(T* p, T v) { *p = v; }
template <typename T> static inline void __stwb(T* p, T v) { *p = v; }
template <typename T> static inline void __stwt(T* p, T v) { *p = v; }

// ---------------------------------------------------------------------------------------------
// math intrinsics: CPU libm (no fast-math approximations: compare against the GPU with tolerances)
// glibc declares (but does not export) __expf, __logf, ... itself: ours get their own names
static inline float cuda_cpu_expf(float x) { return expf(x); }
static inline float cuda_cpu_exp10f(float x) { return exp10f(x); }
static inline float cuda_cpu_logf(float x) { return logf(x); }
static inline float cuda_cpu_log2f(float x) { return log2f(x); }
static inline float cuda_cpu_log10f(float x) { return log10f(x); }
static inline float cuda_cpu_sinf(float x) { return sinf(x); }
static inline float cuda_cpu_cosf(float x) { return cosf(x); }
static inline float cuda_cpu_tanf(float x) { return tanf(x); }
static inline void cuda_cpu_sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
static inline float cuda_cpu_powf(float a, float b) { return powf(a, b); }
static inline float cuda_cpu_tanhf(float x) { return tanhf(x); }
#define __expf cuda_cpu_expf
#define __exp10f cuda_cpu_exp10f
#define __logf cuda_cpu_logf
#define __log2f cuda_cpu_log2f
#define __log10f cuda_cpu_log10f
#define __sinf cuda_cpu_sinf
#define __cosf cuda_cpu_cosf
#define __tanf cuda_cpu_tanf
#define __sincosf cuda_cpu_sincosf
#define __powf cuda_cpu_powf
#define __tanhf cuda_cpu_tanhf
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x != x ? 0.0f : x)); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
static inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
static inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
static inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
static inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
    unsigned r = 0; for (int i = 0; i < 32; i++) { r = (r << 1) | (x & 1u); x >>= 1; } return r;
}
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    s &= 31; return s ? (hi << s) | (lo >> (32 - s)) : hi;
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    s &= 31; return s ? (lo >> s) | (hi << (32 - s)) : lo;
}
// CUDA's min/max overloads (device and host): integer and floating, mixed types promote as in C++.
template <typename A, typename B>
static inline typename std::common_type<A, B>::type min(A a, B b) {
    typedef typename std::common_type<A, B>::type C;
    if constexpr (std::is_floating_point<C>::value) return std::fmin((C)a, (C)b);
    else return (C)a < (C)b ? (C)a : (C)b;
}
template <typename A, typename B>
static inline typename std::common_type<A, B>::type max(A a, B b) {
    typedef typename std::common_type<A, B>::type C;
    if constexpr (std::is_floating_point<C>::value) return std::fmax((C)a, (C)b);
    else return (C)a > (C)b ? (C)a : (C)b;
}

// bf16 / fp16 intrinsics the toolkit header declares for the device only
static inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return __float2bfloat16(fmaf(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c)));
}
static inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    return __floats2bfloat162_rn(fmaf(__low2float(a), __low2float(b), __low2float(c)),
                                 fmaf(__high2float(a), __high2float(b), __high2float(c)));
}
static inline __nv_bfloat16 hexp(__nv_bfloat16 a) { return __float2bfloat16(expf(__bfloat162float(a))); }
static inline __nv_bfloat16 hsqrt(__nv_bfloat16 a) { return __float2bfloat16(sqrtf(__bfloat162float(a))); }
static inline __nv_bfloat16 hrsqrt(__nv_bfloat16 a) { return __float2bfloat16(1.0f / sqrtf(__bfloat162float(a))); }
static inline __nv_bfloat16 __ldg(const __nv_bfloat16* p) { return *p; }

#include "cuda_cpu_wmma.h"
#include "cuda_cpu_ptx.h"

#endif  // CUDA_CPU_H
