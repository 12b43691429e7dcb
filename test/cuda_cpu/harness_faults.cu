// Faulty kernels, one per scenario (argv[1]), for test/cuda_cpu/faults.sh: each must be caught
// by the CUDA-on-CPU harness (or by ASan / TSan in the sanitizer builds) with a message that
// names the problem. Not a test by itself (most scenarios abort on purpose).
#include <stdio.h>
#include <string.h>
#include <math.h>
#include <cuda_runtime.h>
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"

// lanes 0-15 wait in a shuffle for lanes 16-31, which wait at the block barrier
__global__ void deadlock_kernel(float* out) {
    float v = threadIdx.x;
    if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
    else __syncthreads();
    out[threadIdx.x] = v;
}

// a shuffle whose mask leaves out the calling lane
__global__ void bad_mask_kernel(float* out) {
    out[threadIdx.x] = __shfl_down_sync(0x0000ffffu, 1.0f, 1);
}

// two halves of a warp meet with the same mask in different intrinsics
__global__ void mixed_ops_kernel(unsigned* out) {
    unsigned r;
    if (threadIdx.x < 16) r = __ballot_sync(0xffffffffu, 1);
    else r = (unsigned)__shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
    out[threadIdx.x] = r;
}

// the lanes of the upper half exit before the shuffle: reading them gives poison (NaN)
__global__ void exited_lane_kernel(float* out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_down_sync(0x0000ffffu | 0xffff0000u, 1.0f, 8);
}

// writes one float past the dynamic shared memory the launch asked for (ASan)
__global__ void smem_overrun_kernel(float* out, int n) {
    extern __shared__ float smem[];
    smem[threadIdx.x + 1] = 1.0f;  // thread n-1 writes smem[n]
    __syncthreads();
    out[threadIdx.x] = smem[threadIdx.x];
}

// writes one element past the end of a cudaMalloc buffer (ASan)
__global__ void global_overrun_kernel(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f;  // off by one
}

// every block adds to the same counter without an atomic (TSan, 2 OS threads)
__global__ void cross_block_race_kernel(float* sum, const float* in) {
    float s = block_reduce<warp_reduce_sum>(in[blockIdx.x * blockDim.x + threadIdx.x]);
    if (threadIdx.x == 0) *sum += s;
}

// reads shared memory written by another warp without a barrier in between (TSan)
__global__ void warp_race_kernel(float* out) {
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    out[threadIdx.x] = s[63 - threadIdx.x];
}

// ---- ptx.cuh (the harness' emulation of inline PTX)
__device__ __forceinline__ uint4* ptx_fault_smem() {
    extern __shared__ float smem[];
    return (uint4*)smem;
}

// reads its cp.async destination before the wait_group: the data is not there yet
__global__ void cp_async_early_read_kernel(uint4* out, const uint4* src) {
    uint4* s = ptx_fault_smem();
    ptx_cp_async_16(&s[threadIdx.x], &src[threadIdx.x]);
    ptx_cp_async_commit();
    out[threadIdx.x] = s[threadIdx.x];  // should come after the wait
    ptx_cp_async_wait<0>();
}

// reads the chunk another thread copied, after its own wait but with no __syncthreads (TSan)
__global__ void cp_async_no_barrier_kernel(uint4* out, const uint4* src) {
    uint4* s = ptx_fault_smem();
    ptx_cp_async_16(&s[threadIdx.x], &src[threadIdx.x]);
    ptx_cp_async_commit();
    ptx_cp_async_wait<0>();
    out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

// returns with a copy that no wait_group completed
__global__ void cp_async_pending_exit_kernel(const uint4* src) {
    ptx_cp_async_16(&ptx_fault_smem()[threadIdx.x], &src[threadIdx.x]);
    ptx_cp_async_commit();
}

// lane 3 gives a row address 8 bytes into a row
__global__ void ldmatrix_misaligned_kernel(uint32_t* out) {
    const unsigned char* s = (const unsigned char*)ptx_fault_smem();
    uint32_t r[1];
    ptx_ldmatrix_x1(r, s + 16 * (threadIdx.x % 8) + (threadIdx.x == 3 ? 8 : 0));
    out[threadIdx.x] = r[0];
}

// warp 1 writes the 8x8 tile that warp 0 loads with ldmatrix, with no __syncthreads (TSan)
__global__ void ldmatrix_no_barrier_kernel(uint32_t* out) {
    uint32_t* s = (uint32_t*)ptx_fault_smem();
    if (threadIdx.x >= 32) s[threadIdx.x - 32] = threadIdx.x;  // 32 words = 8 rows of 16 bytes
    uint32_t r[1] = {0u};
    if (threadIdx.x < 32) ptx_ldmatrix_x1(r, s + 4 * (threadIdx.x % 8));
    out[threadIdx.x] = r[0];
}

// ldmatrix from global memory (it reads shared memory only)
__global__ void ldmatrix_global_kernel(uint32_t* out, const uint4* rows) {
    uint32_t r[2];
    ptx_ldmatrix_x2(r, &rows[threadIdx.x % 16]);
    out[threadIdx.x] = r[0] + r[1];
}

// the upper half of the warp has returned before the mma
__global__ void mma_exited_lanes_kernel(float* out) {
    if (threadIdx.x >= 16) return;
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    uint32_t a[4] = {0u, 0u, 0u, 0u}, b[2] = {0u, 0u};
    ptx_mma_bf16_16816(d, a, b);
    out[threadIdx.x] = d[0];
}

// The ptx.cuh scenarios (d: 4096 floats of zeros); returns the exit code, -1 for another name.
static int ptx_fault(const char* what, float* d) {
    uint4* src = (uint4*)d;  // 1024 chunks of 16 bytes: zeros, which 0xFF poison is not
    uint4* out = (uint4*)d + 512;
    if (!strcmp(what, "cp_async_early_read")) {
        LAUNCH(cp_async_early_read_kernel, 1, 64, 64 * sizeof(uint4), 0, out, src);
        uint4 h[64];
        cudaCheck(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
        int stale = 0;
        for (int i = 0; i < 64; i++) stale += h[i].x != 0u || h[i].w != 0u;
        printf("cp_async_early_read: %d of 64 threads read their cp.async destination before the wait and got %s\n",
               stale, stale ? "poison, not the data: check failed" : "the data (NOT caught)");
        return stale ? 1 : 0;
    }
    if (!strcmp(what, "cp_async_no_barrier")) LAUNCH(cp_async_no_barrier_kernel, 1, 64, 64 * sizeof(uint4), 0, out, src);
    else if (!strcmp(what, "cp_async_pending_exit")) LAUNCH(cp_async_pending_exit_kernel, 1, 32, 32 * sizeof(uint4), 0, src);
    else if (!strcmp(what, "ldmatrix_misaligned")) LAUNCH(ldmatrix_misaligned_kernel, 1, 32, 256, 0, (uint32_t*)out);
    else if (!strcmp(what, "ldmatrix_no_barrier")) LAUNCH(ldmatrix_no_barrier_kernel, 1, 64, 128, 0, (uint32_t*)out);
    else if (!strcmp(what, "ldmatrix_global")) LAUNCH(ldmatrix_global_kernel, 1, 32, 0, 0, (uint32_t*)out, src);
    else if (!strcmp(what, "mma_exited_lanes")) LAUNCH(mma_exited_lanes_kernel, 1, 32, 0, 0, (float*)out);
    else return -1;
    return 0;
}

// spins on a flag that no other thread will ever set (watchdog)
__global__ void spin_kernel(volatile int* flag) {
    while (*flag == 0) {}
}

int main(int argc, char** argv) {
    const char* what = argc > 1 ? argv[1] : "";
    float* d;
    cudaCheck(cudaMalloc(&d, 4096 * sizeof(float)));
    cudaCheck(cudaMemset(d, 0, 4096 * sizeof(float)));
    int rc = 0;
    if (!strcmp(what, "deadlock")) {
        LAUNCH(deadlock_kernel, 1, 64, 0, 0, d);
    } else if (!strcmp(what, "bad_mask")) {
        LAUNCH(bad_mask_kernel, 1, 32, 0, 0, d);
    } else if (!strcmp(what, "mixed_ops")) {
        LAUNCH(mixed_ops_kernel, 1, 32, 0, 0, (unsigned*)d);
    } else if (!strcmp(what, "exited_lane")) {
        LAUNCH(exited_lane_kernel, 1, 32, 0, 0, d);
        float h[16];
        cudaCheck(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
        // lanes 0-7 read lanes 8-15 (present): 1.0; lanes 8-15 read lanes 16-23 (exited): poison
        int ok = 1;
        for (int i = 0; i < 8; i++) ok &= h[i] == 1.0f;
        for (int i = 8; i < 16; i++) ok &= isnan(h[i]);
        printf("exited_lane: %s\n", ok ? "reads of exited lanes are NaN, present lanes read fine" : "WRONG");
        rc = ok ? 0 : 1;
    } else if (!strcmp(what, "smem_overrun")) {
        LAUNCH(smem_overrun_kernel, 1, 64, 64 * sizeof(float), 0, d, 64);
    } else if (!strcmp(what, "global_overrun")) {
        float* small;
        cudaCheck(cudaMalloc(&small, 100 * sizeof(float)));
        LAUNCH(global_overrun_kernel, 1, 128, 0, 0, small, 100);
        cudaCheck(cudaFree(small));
    } else if (!strcmp(what, "cross_block_race")) {
        LAUNCH(cross_block_race_kernel, 8, 64, 0, 0, d + 4000, d);
    } else if (!strcmp(what, "warp_race")) {
        LAUNCH(warp_race_kernel, 1, 64, 0, 0, d);
    } else if (!strcmp(what, "spin")) {
        LAUNCH(spin_kernel, 1, 32, 0, 0, (volatile int*)d);
    } else if (!strcmp(what, "leak")) {
        float* lost;
        cudaCheck(cudaMalloc(&lost, 1000));
    } else if ((rc = ptx_fault(what, d)) < 0) {
        fprintf(stderr, "usage: harness_faults deadlock|bad_mask|mixed_ops|exited_lane|smem_overrun|"
                        "global_overrun|cross_block_race|warp_race|spin|leak|cp_async_early_read|"
                        "cp_async_no_barrier|cp_async_pending_exit|ldmatrix_misaligned|ldmatrix_no_barrier|"
                        "ldmatrix_global|"
                        "mma_exited_lanes\n");
        rc = 2;
    }
    cudaCheckLast();
    cudaCheck(cudaFree(d));
    return rc;
}
