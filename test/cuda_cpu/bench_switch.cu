// Cost of the harness' fiber switches (make cuda-cpu-bench): a block barrier loop, a warp-shuffle
// reduction loop and a kernel without synchronization, timed on the CPU. Compare
// CUDA_CPU_UCONTEXT=1 (swapcontext) with the default hand-written switch. Not a test.
#include <stdio.h>
#include <chrono>
#include "llmc/cuda/common.cuh"

__global__ void barrier_loop_kernel(float* out, int iters) {
    __shared__ float s[1024];
    float acc = 0.0f;
    for (int i = 0; i < iters; i++) {
        s[threadIdx.x] = acc + i;
        __syncthreads();
        acc += s[(threadIdx.x + 1) % blockDim.x];
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__global__ void shuffle_loop_kernel(float* out, int iters) {
    float acc = threadIdx.x;
    for (int i = 0; i < iters; i++) acc = warp_reduce_sum(acc) * 1e-3f;
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__global__ void no_sync_kernel(float* out, int iters) {
    float acc = threadIdx.x;
    for (int i = 0; i < iters; i++) acc = acc * 0.999f + 1.0f;
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int main(void) {
    const int blocks = 4, threads = 256;
    float* d;
    cudaCheck(cudaMalloc(&d, 64 * threads * sizeof(float)));
    LAUNCH(no_sync_kernel, 1, threads, 0, 0, d, 1);  // creates the fibers
    cudaCheckLast();
    auto t0 = std::chrono::steady_clock::now();
    LAUNCH(barrier_loop_kernel, blocks, threads, 0, 0, d, 500);
    cudaCheckLast();
    double t = seconds_since(t0), switches = 2.0 * blocks * threads * 500 * 2;  // to the fiber and back
    printf("__syncthreads loop: %.3f s, %.3f us per fiber switch\n", t, t / switches * 1e6);
    t0 = std::chrono::steady_clock::now();
    LAUNCH(shuffle_loop_kernel, blocks, threads, 0, 0, d, 100);
    cudaCheckLast();
    t = seconds_since(t0); switches = 2.0 * blocks * threads * 100 * 5;
    printf("__shfl_xor_sync loop: %.3f s, %.3f us per fiber switch\n", t, t / switches * 1e6);
    t0 = std::chrono::steady_clock::now();
    LAUNCH(no_sync_kernel, 64, threads, 0, 0, d, 10);
    cudaCheckLast();
    printf("kernel without synchronization: %.3f us per CUDA thread\n", seconds_since(t0) / (64.0 * threads) * 1e6);
    cudaCheck(cudaFree(d));
    return 0;
}
