// The GPU and library facts the GPU check (scripts/gpu_check.sh) records and divides by: one
// `key=value` line each. Versions come from the libraries actually loaded (cudaRuntimeGetVersion,
// cudaDriverGetVersion, cublasLtGetVersion, ncclGetVersion), the peaks from the device: memory
// bandwidth = 2 (DDR) x memory clock x bus width, bf16 tensor-core FLOP/s from llmc/base/mfu.c's table.
// Under the CUDA-on-CPU harness (the check's --emulated mode) there are no libraries to ask and
// the device is the harness' stand-in: the lines say so.
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include "base/mfu.h"
#if !defined(CUDA_CPU_HARNESS)
#include <cublasLt.h>
#include <nccl.h>
#endif

static void cuda_ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) { printf("error=%s: %s\n", what, cudaGetErrorString(e)); exit(1); }
}

static int attr(cudaDeviceAttr a, int dev) {
    int v = 0;
    return cudaDeviceGetAttribute(&v, a, dev) == cudaSuccess ? v : -1;
}

int main(void) {
    int n = 0, dev = 0;
    cuda_ok(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
    printf("device_count=%d\n", n);
    cudaDeviceProp p;
    cuda_ok(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
    printf("device=%s\n", p.name);
    printf("compute_capability=%d.%d\n", p.major, p.minor);
    printf("sms=%d\n", p.multiProcessorCount);
    printf("memory_gib=%.2f\n", (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    printf("l2_mib=%.1f\n", (double)p.l2CacheSize / (1024.0 * 1024.0));
    printf("smem_per_block_optin_kib=%zu\n", p.sharedMemPerBlockOptin / 1024);
    const char* model = NULL;
    double peak = mfu_peak_bf16_flops(p.name, &model);
    if (peak > 0) printf("peak_bf16_tflops=%.1f\npeak_model=%s\n", peak / 1e12, model);
    else printf("peak_bf16_tflops=n/a\n");
#if defined(CUDA_CPU_HARNESS)
    printf("emulated=1\n");
    printf("peak_mem_gbps=n/a\n");
    printf("runtime=n/a (emulated)\ndriver=n/a (emulated)\ncublaslt=n/a (emulated)\nnccl=n/a (emulated)\n");
#else
    int mem_khz = attr(cudaDevAttrMemoryClockRate, dev), bus_bits = attr(cudaDevAttrGlobalMemoryBusWidth, dev);
    int sm_khz = attr(cudaDevAttrClockRate, dev);
    printf("sm_clock_mhz=%d\nmem_clock_mhz=%d\nmem_bus_bits=%d\n", sm_khz / 1000, mem_khz / 1000, bus_bits);
    if (mem_khz > 0 && bus_bits > 0) printf("peak_mem_gbps=%.1f\n", 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9);
    else printf("peak_mem_gbps=n/a\n");
    int rt = 0, drv = 0, nccl = 0;
    cuda_ok(cudaRuntimeGetVersion(&rt), "cudaRuntimeGetVersion");
    cuda_ok(cudaDriverGetVersion(&drv), "cudaDriverGetVersion");
    printf("runtime=%d.%d\ndriver=%d.%d\n", rt / 1000, (rt % 1000) / 10, drv / 1000, (drv % 1000) / 10);
    size_t lt = cublasLtGetVersion();
    printf("cublaslt=%zu.%zu.%zu\n", lt / 10000, (lt / 100) % 100, lt % 100);
    if (ncclGetVersion(&nccl) == ncclSuccess) printf("nccl=%d.%d.%d\n", nccl / 10000, (nccl / 100) % 100, nccl % 100);
    else printf("nccl=unknown\n");
#endif
    return 0;
}
