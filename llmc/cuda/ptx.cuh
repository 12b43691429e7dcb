// Tensor-core, async-copy and the softmax's conversion and exponential instructions as inline
// PTX, for kernels that work on the tensor cores' documented register layouts (the
// FlashAttention-2 style attention): one wrapper per instruction, nothing more. Under nvcc each is
// one `asm` (volatile, but for the pure arithmetic of cvt); under the CUDA-on-CPU harness
// (CUDA_CPU_HARNESS, test/cuda_cpu/cuda_cpu.h force-included) each forwards to the harness
// emulation (test/cuda_cpu/cuda_cpu_ptx.h: the same per-lane layouts and group semantics,
// collective like the hardware), so the kernels that use them run in CI. sm_80 or newer.
//
//   wrapper                      PTX                                                  SASS (sm_80 and sm_90)
//   ptx_mma_bf16_16816(d, a, b)  mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32  HMMA.16816.F32.BF16
//   ptx_ldmatrix_x{1,2,4}(r, p)  ldmatrix.sync.aligned.m8n8.x{1,2,4}.shared.b16      LDSM.16.M88, .M88.2, .M88.4
//   ptx_ldmatrix_x{1,2,4}_trans  ldmatrix.sync.aligned.m8n8.x{1,2,4}.trans.shared.b16 LDSM.16.MT88, .MT88.2, .MT88.4
//   ptx_ldmatrix_x4[_trans]_at   the same .x4, from a ptx_saddr (below)
//   ptx_cp_async_16[_at](s, g, n) cp.async.cg.shared.global [s], [g], 16, n           LDGSTS.E.BYPASS.128 (n known
//                                                                                     16), .128.ZFILL (n a variable)
//   ptx_st_shared_b32(a, v)      st.shared.b32 [a], v                                 STS
//   ptx_ld_shared_v4(r, a)       ld.shared.v4.b32 {r0..r3}, [a]                       LDS.128
//   ptx_cp_async_commit()        cp.async.commit_group                                LDGDEPBAR
//   ptx_cp_async_wait<N>()       cp.async.wait_group N                                DEPBAR.LE SB0, N
//   ptx_pack_bf16x2(lo, hi)      cvt.rn.bf16x2.f32 d, hi, lo                          F2FP.BF16.PACK_AB (sm_80),
//                                                                                     F2FP.BF16.F32.PACK_AB (sm_90)
//   ptx_ex2_approx_ftz(x)        ex2.approx.ftz.f32                                   MUFU.EX2 (alone)
// (cuobjdump -sass of test/cuda_cpu/test_ptx.cu built by `make cuda-check`, nvcc 13.0.)
//
// Per-lane fragment layouts (PTX ISA 9.0, "Matrix Fragments for mma.m16n8k16 with floating point
// type" and "Warp-level matrix load instruction: ldmatrix"). g = lane >> 2 (groupID),
// t = lane & 3 (threadID_in_group); every bf16x2 register holds two elements, "lo" in bits 0-15
// (the lower address when it came from memory), "hi" in bits 16-31; (row, col) of the operand:
//
//   operand                   register      lo (row, col)    hi (row, col)
//   A 16x16 bf16, row         a[0]          (g,    2t)       (g,    2t+1)
//                             a[1]          (g+8,  2t)       (g+8,  2t+1)
//                             a[2]          (g,    2t+8)     (g,    2t+9)
//                             a[3]          (g+8,  2t+8)     (g+8,  2t+9)
//   B 16x8 bf16 (k, n), col   b[0]          (2t,   g)        (2t+1, g)
//                             b[1]          (2t+8, g)        (2t+9, g)
//   C/D 16x8 fp32             d[0], d[1]    (g, 2t), (g, 2t+1)
//                             d[2], d[3]    (g+8, 2t), (g+8, 2t+1)
//   ldmatrix, matrix j        r[j]          (g,    2t)       (g,    2t+1)
//   ldmatrix .trans, matrix j r[j]          (2t,   g)        (2t+1, g)
//
// ldmatrix: lane 8j+i gives the shared-memory address of row i of 8x8 matrix j (x1: lanes 0-7,
// x2: 0-15, x4: all; the other lanes' addresses are ignored); a row is 8 bf16 = 16 bytes, 16-byte
// aligned; rows need not be contiguous (swizzled tiles). What that gives, by the table (each
// recipe runs in test/cuda_cpu/test_ptx.cu):
//  - A from a row-major tile: lane l points at row (l & 15), column 8 (l >> 4) of the 16x16
//    tile; x4 returns exactly a[0..3].
//  - B when the tile is stored n-major (each n a row of k, e.g. K for S = Q K^T): lane l
//    (0-15) points at row n = (l & 7), column k = 8 ((l >> 3) & 1); x2 returns b[0..1].
//  - B when the tile is stored k-major (each k a row of n, e.g. V for O = P V): lane l (0-15)
//    points at row k = (l & 15), column n = 0; x2.trans returns b[0..1].
//  - C/D to A without memory (P of FlashAttention): the two 16x8 accumulators c0, c1 of columns
//    0-7 and 8-15 are the A fragment a = {pack(c0[0], c0[1]), pack(c0[2], c0[3]),
//    pack(c1[0], c1[1]), pack(c1[2], c1[3])} (ptx_pack_bf16x2).
//
// cp.async (PTX ISA "cp.async", "cp.async.wait_group"): copies 16 bytes global -> shared in the
// background; src_bytes < 16 copies that many and zero-fills the rest (0: reads nothing, the
// edge-tile zero fill). Both addresses 16-byte aligned. The data is there for the issuing thread
// only after the wait_group that completes its group, and for other threads only after a
// __syncthreads that follows that wait; __syncthreads alone completes nothing.
//
// Shared addresses (ptx_saddr): ptx_saddr_of(p) is p's byte address in the shared window (32
// bits, cvta.to.shared) under nvcc and p itself under the harness; + and ^ on byte offsets mean
// the same in both, so a kernel can step through a swizzled tile with 32-bit arithmetic (an XOR
// of a chunk index's address bits) and hand the result to the _at forms of ldmatrix, st.shared
// and ld.shared. (The harness' dynamic shared memory is 256-byte aligned, like the GPU's
// window offsets that such XORs rely on.)
//
// st.shared.b32 / ld.shared.v4.b32: plain shared-memory accesses, as wrappers so that the harness
// scores their banks like ldmatrix's (it meets the warp for that): call them from all 32 lanes of
// a warp together. A lane's store is seen by another lane after a __syncwarp, as usual.
//
// ex2.approx.ftz.f32 (PTX ISA "ex2"): 2^x on the special function unit, at most 2 ulp from the
// correctly rounded result over the whole range (the ISA's documented bound); subnormal inputs
// count as 0 (2^x = 1) and subnormal results are flushed to +0; -inf gives +0, +inf +inf, NaN NaN.
// exp2f without fast math compiles to the same MUFU.EX2 wrapped in a range test and two predicated
// multiplies (scaling an input below -126 by 1/2 and squaring the result, to keep subnormal
// results): three instructions per exponential that the softmax does not need, since a
// probability below 2^-126 is 0 for every later use (bf16 P, fp32 sums).
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

// ldmatrix writes no memory, so no "memory" clobber; `asm volatile` keeps it in program order
// with the __syncthreads / __syncwarp that publishes the tile it reads.
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
// __syncwarp that publishes or retires what they touch).
__device__ __forceinline__ void ptx_st_shared_b32(ptx_saddr a, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ void ptx_ld_shared_v4(uint32_t r[4], ptx_saddr a) {
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}

// The copy writes shared memory behind the compiler's back: "memory" on the issue (earlier plain
// reads of the destination stay before it) and on the wait (later reads stay after it).
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

// A pure function of x, but volatile all the same: without it NVVM copies the exponential into
// both sides of the backward's mask test (dK/dV HS 64: 94 MUFU.EX2 instead of 64, 70-170 more
// instructions, 11-13 more registers in the atomic variant); ptxas still schedules it freely.
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
