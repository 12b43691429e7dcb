// Faulty kernels, one per scenario (argv[1]), for test/cuda_cpu/faults.sh: each must be caught
// by the CUDA-on-CPU harness (or by ASan / TSan in the sanitizer builds) with a message that
// names the problem. Not a test by itself (most scenarios abort on purpose).
#include <stdio.h>
#include <string.h>
#include <math.h>
#include <cuda_runtime.h>
#include "llmc/cuda/common.cuh"

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
    } else {
        fprintf(stderr, "usage: harness_faults deadlock|bad_mask|mixed_ops|exited_lane|smem_overrun|"
                        "global_overrun|cross_block_race|warp_race|spin|leak\n");
        rc = 2;
    }
    cudaCheckLast();
    cudaCheck(cudaFree(d));
    return rc;
}
