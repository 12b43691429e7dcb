// CUDA-on-CPU harness: the instructions behind llmc/cuda/ptx.cuh's wrappers (the only inline PTX
// the harness runs). Included by cuda_cpu.h; implemented in cuda_cpu.cpp. Layouts, per lane, are
// the PTX ISA's (the table in llmc/cuda/README.md); test/cuda_cpu/test_ptx.cu checks each one
// against a reference written from the ISA's tables on its own.
//
//  - mma.m16n8k16 (bf16 in, fp32 accumulate) and ldmatrix are collective: a rendezvous of the
//    warp's 32 lanes (a missing lane deadlocks and is reported; a lane that has exited is an
//    error). Each lane publishes its registers / row address, then computes its own result from
//    the whole warp's. mma accumulates in fp32 in k order on top of C (the tensor cores' order
//    and rounding within a step are not specified: compare with tolerances, or with inputs whose
//    products and sums are exact).
//  - ldmatrix reads 16-byte, 16-byte aligned rows; a misaligned row or one inside a cudaMalloc
//    allocation (ldmatrix reads shared memory only) stops the kernel with an error.
//  - cp.async: each CUDA thread keeps a queue of its pending 16-byte copies. commit_group closes
//    a group; wait_group N performs every copy of all but the newest N committed groups, in
//    order, in the issuing thread. A copy is performed no earlier than the wait that completes
//    it, so a kernel that reads the destination before the right wait (or, in another thread,
//    without a __syncthreads after it) reads the 0xFF poison of shared memory or stale data,
//    and TSan sees the copy's write race with that read. __syncthreads completes nothing, as on
//    the GPU. A thread that exits with copies not waited for is an error (they would land at an
//    unknown time in shared memory that other threads may be using).
//  - st.shared.b32 / ld.shared.v4.b32 (ptx.cuh's warp-wide shared store and load): a rendezvous
//    of the warp's 32 lanes here (not on the GPU, where they need no convergence: the kernels
//    call them from whole warps), so that the access's banks can be scored; each lane then
//    stores or loads its own word(s) in instrumented code. The meeting orders no memory: a
//    lane's store read by another lane without a __syncwarp between them is a TSan race.
//  - pack_bf16x2: round to nearest even; a NaN gives the canonical bf16 NaN 0x7FFF.
//  - ex2.approx.ftz.f32: the C library's exp2f (glibc's is within 1 ulp, nearly always correctly
//    rounded) with the instruction's special cases: a subnormal input counts as 0 (exp2f of one
//    rounds to 1 anyway), a subnormal result becomes +0 (results are positive), exp2f(-inf) = +0,
//    NaN stays NaN. The hardware's result may differ by up to the PTX ISA's documented 2 ulp from
//    the correctly rounded one, so a kernel's results on a GPU may differ in the last bits.
#ifndef CUDA_CPU_PTX_H
#define CUDA_CPU_PTX_H

namespace cuda_cpu {
void ptx_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]);
void ptx_ldmatrix(uint32_t* r, const void* smem_row, int nmat, bool trans);
void ptx_cp_async_16(void* smem, const void* gmem, int src_bytes);
void ptx_st_shared_b32(void* smem, uint32_t v);
void ptx_ld_shared_v4(uint32_t r[4], const void* smem);
void ptx_cp_async_commit();
void ptx_cp_async_wait(int n);

static inline uint32_t ptx_bf16_rn(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    x += 0x7fffu + ((x >> 16) & 1u);  // to nearest, ties to the even upper half
    return x >> 16;
}
static inline uint32_t ptx_pack_bf16x2(float lo, float hi) { return ptx_bf16_rn(lo) | ptx_bf16_rn(hi) << 16; }
static inline float ptx_ex2_approx_ftz(float x) {
    if (fpclassify(x) == FP_SUBNORMAL) x = 0.0f;
    const float r = exp2f(x);
    return fpclassify(r) == FP_SUBNORMAL ? 0.0f : r;
}
}  // namespace cuda_cpu

#endif  // CUDA_CPU_PTX_H
