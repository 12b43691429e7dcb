// Tensor-core, async-copy and the softmax's conversion and exponential instructions as inline
// PTX, for kernels that work on the tensor cores' documented register layouts (the
// FlashAttention-2 style attention): one wrapper per instruction, nothing more. Under nvcc each is
// one `asm` (volatile, but for the pure arithmetic of cvt); under the CUDA-on-CPU harness
// (CUDA_CPU_HARNESS, test/cuda_cpu/cuda_cpu.h force-included) each forwards to the harness
// emulation (test/cuda_cpu/cuda_cpu_ptx.h: the same per-lane layouts and group semantics,
// collective like the hardware), so the kernels that use them run in CI. sm_80 or newer.
//
// The per-lane fragment layouts of mma.m16n8k16 and ldmatrix (PTX ISA 9.0), the ldmatrix address
// recipes for A, n-major B and k-major B tiles, how an accumulator becomes the next A fragment
// without memory, and the SASS each wrapper becomes are in llmc/cuda/README.md ("Inline PTX:
// ptx.cuh"); test/cuda_cpu/test_ptx.cu runs each recipe.
#ifndef LLMC_CUDA_PTX_CUH
#define LLMC_CUDA_PTX_CUH

#include <stdint.h>

#if defined(__CUDACC__)

// d = a * b + d in fp32 (d is both C and D). Reads no memory: no clobber.
__device__ __forceinline__ void ptx_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ldmatrix: lane 8j+i gives the shared-memory address of row i of 8x8 matrix j (x1: lanes 0-7,
// x2: 0-15, x4: all; the other lanes' addresses are ignored); a row is 8 bf16 = 16 bytes, 16-byte
// aligned, and rows need not be contiguous (swizzled tiles). It writes no memory, so no "memory"
// clobber; `asm volatile` keeps it in program order with the __syncthreads / __syncwarp that
// publishes the tile it reads.
__device__ __forceinline__ uint32_t ptx_smem_addr(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void ptx_ldmatrix_x1(uint32_t r[1], const void* smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0]) : "r"(ptx_smem_addr(smem_row)));
}
__device__ __forceinline__ void ptx_ldmatrix_x2(uint32_t r[2], const void* smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(ptx_smem_addr(smem_row)));
}
__device__ __forceinline__ void ptx_ldmatrix_x4(uint32_t r[4], const void* smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(ptx_smem_addr(smem_row)));
}
__device__ __forceinline__ void ptx_ldmatrix_x1_trans(uint32_t r[1], const void* smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0]) : "r"(ptx_smem_addr(smem_row)));
}
__device__ __forceinline__ void ptx_ldmatrix_x2_trans(uint32_t r[2], const void* smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(ptx_smem_addr(smem_row)));
}
__device__ __forceinline__ void ptx_ldmatrix_x4_trans(uint32_t r[4], const void* smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(ptx_smem_addr(smem_row)));
}

// Shared addresses: ptx_saddr_of(p) is p's byte address in the shared window (32 bits,
// cvta.to.shared) under nvcc and p itself under the harness; + and ^ on byte offsets mean the same
// in both, so a kernel steps through a swizzled tile with 32-bit arithmetic (an XOR of a chunk
// index's address bits) and hands the result to the _at forms. (The harness' dynamic shared
// memory is 256-byte aligned, like the GPU's window offsets that such XORs rely on.)
typedef uint32_t ptx_saddr;
__device__ __forceinline__ ptx_saddr ptx_saddr_of(const void* p) { return ptx_smem_addr(p); }
__device__ __forceinline__ void ptx_ldmatrix_x4_at(uint32_t r[4], ptx_saddr a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ptx_ldmatrix_x4_trans_at(uint32_t r[4], ptx_saddr a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ptx_cp_async_16_at(ptx_saddr a, const void* gmem, int src_bytes = 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(a), "l"(gmem), "r"(src_bytes) : "memory");
}
// A whole warp's 4-byte shared store / 16-byte shared load ("memory": ordered with the
// __syncwarp that publishes or retires what they touch). Wrappers so that the harness scores their
// banks like ldmatrix's: call them from all 32 lanes of a warp together. A lane's store is seen by
// another lane after a __syncwarp.
__device__ __forceinline__ void ptx_st_shared_b32(ptx_saddr a, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ void ptx_ld_shared_v4(uint32_t r[4], ptx_saddr a) {
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}

// cp.async copies 16 bytes global -> shared in the background; src_bytes < 16 copies that many
// and zero-fills the rest (0: reads nothing, the edge-tile zero fill). Both addresses are 16-byte
// aligned. The data is there for the issuing thread after the wait_group that completes its group,
// and for other threads after a __syncthreads that follows that wait; __syncthreads alone
// completes nothing. The copy writes shared memory behind the compiler's back: "memory" on the
// issue (earlier plain reads of the destination stay before it) and on the wait (later reads stay
// after it).
__device__ __forceinline__ void ptx_cp_async_16(void* smem, const void* gmem, int src_bytes = 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(ptx_smem_addr(smem)), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void ptx_cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void ptx_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

// The first source operand of cvt.rn.bf16x2.f32 goes to the upper half.
__device__ __forceinline__ uint32_t ptx_pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// 2^x on the special function unit (one MUFU.EX2), at most 2 ulp from the correctly rounded
// result; subnormal inputs count as 0 and subnormal results flush to +0, which the softmax does
// not mind (a probability below 2^-126 is 0 for every later use). exp2f adds a range test and two
// multiplies to keep subnormal results. A pure function of x, but volatile all the same: without it
// NVVM copies the exponential into both sides of the backward's mask test; ptxas still schedules
// it freely (the instruction counts are in llmc/cuda/README.md, "Inline PTX: ptx.cuh").
__device__ __forceinline__ float ptx_ex2_approx_ftz(float x) {
    float r;
    asm volatile("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}

#elif defined(CUDA_CPU_HARNESS)

// The harness' emulation (test/cuda_cpu/cuda_cpu_ptx.h, runtime in cuda_cpu.cpp).
__device__ __forceinline__ void ptx_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    cuda_cpu::ptx_mma_bf16_16816(d, a, b);
}
__device__ __forceinline__ void ptx_ldmatrix_x1(uint32_t r[1], const void* smem_row) { cuda_cpu::ptx_ldmatrix(r, smem_row, 1, false); }
__device__ __forceinline__ void ptx_ldmatrix_x2(uint32_t r[2], const void* smem_row) { cuda_cpu::ptx_ldmatrix(r, smem_row, 2, false); }
__device__ __forceinline__ void ptx_ldmatrix_x4(uint32_t r[4], const void* smem_row) { cuda_cpu::ptx_ldmatrix(r, smem_row, 4, false); }
__device__ __forceinline__ void ptx_ldmatrix_x1_trans(uint32_t r[1], const void* smem_row) { cuda_cpu::ptx_ldmatrix(r, smem_row, 1, true); }
__device__ __forceinline__ void ptx_ldmatrix_x2_trans(uint32_t r[2], const void* smem_row) { cuda_cpu::ptx_ldmatrix(r, smem_row, 2, true); }
__device__ __forceinline__ void ptx_ldmatrix_x4_trans(uint32_t r[4], const void* smem_row) { cuda_cpu::ptx_ldmatrix(r, smem_row, 4, true); }
__device__ __forceinline__ void ptx_cp_async_16(void* smem, const void* gmem, int src_bytes = 16) {
    cuda_cpu::ptx_cp_async_16(smem, gmem, src_bytes);
}
__device__ __forceinline__ void ptx_cp_async_commit() { cuda_cpu::ptx_cp_async_commit(); }
typedef uintptr_t ptx_saddr;
__device__ __forceinline__ ptx_saddr ptx_saddr_of(const void* p) { return (uintptr_t)p; }
__device__ __forceinline__ void ptx_ldmatrix_x4_at(uint32_t r[4], ptx_saddr a) { cuda_cpu::ptx_ldmatrix(r, (const void*)a, 4, false); }
__device__ __forceinline__ void ptx_ldmatrix_x4_trans_at(uint32_t r[4], ptx_saddr a) { cuda_cpu::ptx_ldmatrix(r, (const void*)a, 4, true); }
__device__ __forceinline__ void ptx_cp_async_16_at(ptx_saddr a, const void* gmem, int src_bytes = 16) {
    cuda_cpu::ptx_cp_async_16((void*)a, gmem, src_bytes);
}
__device__ __forceinline__ void ptx_st_shared_b32(ptx_saddr a, uint32_t v) { cuda_cpu::ptx_st_shared_b32((void*)a, v); }
__device__ __forceinline__ void ptx_ld_shared_v4(uint32_t r[4], ptx_saddr a) { cuda_cpu::ptx_ld_shared_v4(r, (const void*)a); }
template <int N> __device__ __forceinline__ void ptx_cp_async_wait() {
    static_assert(N >= 0, "cp.async.wait_group N: N >= 0");
    cuda_cpu::ptx_cp_async_wait(N);
}
__device__ __forceinline__ uint32_t ptx_pack_bf16x2(float lo, float hi) { return cuda_cpu::ptx_pack_bf16x2(lo, hi); }
__device__ __forceinline__ float ptx_ex2_approx_ftz(float x) { return cuda_cpu::ptx_ex2_approx_ftz(x); }

#else
#error "llmc/cuda/ptx.cuh: compile with nvcc, or with g++ -include test/cuda_cpu/cuda_cpu.h (the CUDA-on-CPU harness)"
#endif

#endif  // LLMC_CUDA_PTX_CUH
