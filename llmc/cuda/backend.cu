// CUDA backend: lifetime, capabilities, memory, host <-> device copies and dtype casts, and the
// op-internal scratch buffers.
#include <stdio.h>
#include <stdlib.h>
#include "cuda/common.cuh"
#include "cuda/gemm.cuh"
#include "cuda/ops_cuda.h"
#include "ops/sizes.h"

// ----------------------------------------------------------------------------
// lifetime and memory

static void* g_scratch[OPS_SCRATCH_COUNT];
static size_t g_scratch_size[OPS_SCRATCH_COUNT];
// pinned host staging (ops_stage_host)
static char* g_stage;
static size_t g_stage_cap, g_stage_used;

// ops.h has no shutdown call, so the scratch buffers (and the GEMM workspace) are released at
// exit. The handler is registered after the first scratch cudaMalloc, so it runs before the
// CUDA runtime's / the harness' own exit handlers (the harness reports device memory never freed).
static void scratch_release(void) {
    for (int i = 0; i < OPS_SCRATCH_COUNT; i++) {
        if (g_scratch[i]) (void)cudaFree(g_scratch[i]);
        g_scratch[i] = NULL;
        g_scratch_size[i] = 0;
    }
    if (g_stage) (void)cudaFreeHost(g_stage);
    g_stage = NULL;
    g_stage_cap = g_stage_used = 0;
    gemm_release();
}

static void register_release(void) {
    static int registered = 0;
    if (!registered) { registered = 1; atexit(scratch_release); }
}

void* ops_scratch(int slot, size_t bytes) {
    if (bytes > g_scratch_size[slot]) {
        if (g_scratch[slot]) cudaCheck(cudaFree(g_scratch[slot]));   // synchronises: no user left
        g_scratch[slot] = NULL;
        cudaCheck(cudaMalloc(&g_scratch[slot], bytes));
        g_scratch_size[slot] = bytes;
        register_release();
    }
    return g_scratch[slot];
}

// A bump allocator over one pinned buffer. Everything handed out stays valid until the host next
// waits for the device (stage_drained: a read back or ops_synchronize; every copy out of the
// buffer, issued on the default stream, has run by then). When the uploads issued between two
// such waits do not fit, it waits once and grows to hold them all, so a training loop (which
// reads back once per step) stops waiting here after its first step.
void* ops_stage_host(size_t bytes) {
    bytes = (bytes + 255) & ~(size_t)255;
    if (g_stage_used + bytes > g_stage_cap) {
        size_t want = g_stage_used + bytes, cap = g_stage_cap ? 2 * g_stage_cap : ((size_t)1 << 20);
        while (cap < want) cap *= 2;
        cudaCheck(cudaDeviceSynchronize()); // the buffer's copies have run: it can go
        if (g_stage) cudaCheck(cudaFreeHost(g_stage));
        cudaCheck(cudaMallocHost((void**)&g_stage, cap));
        g_stage_cap = cap;
        g_stage_used = 0;
        register_release();
    }
    void* p = g_stage + g_stage_used;
    g_stage_used += bytes;
    return p;
}
static void stage_drained(void) { g_stage_used = 0; }

#ifndef LLMC_CUDA_EMULATED
int ops_device_count(void) {
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0)
        fatal("this binary is the CUDA build; on a machine without a GPU build with `make BACKEND=cpu`",
              "no usable CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return ndev;
}
#endif

extern "C" void cuda_ops_init(int threads) {
    (void)threads;
#ifndef LLMC_CUDA_EMULATED
    (void)ops_device_count();
    // the kernels use bf16 tensor cores and cp.async (sm_80): an older GPU would fail at its
    // first launch with "no kernel image", so it is refused here by name
    int dev = 0;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    if (prop.major < 8)
        fatal("use a GPU of compute capability 8.0 or newer (A100, RTX 30 / 40, A10, L4, H100), or the CPU build (make BACKEND=cpu)",
              "GPU %d, %s, is sm_%d%d: this build's kernels need sm_80 or newer (bf16 tensor cores)", dev, prop.name, prop.major, prop.minor);
#endif
    gemm_init();
}

extern "C" OpsCaps cuda_ops_caps(void) {
    // bf16 parameters: fp32 master weights; the attention kernels keep packed records apart
    OpsCaps caps = { OPS_BF16, sizeof(floatX), 1, 1, 0 };
    return caps;
}

extern "C" const char* cuda_ops_backend_name(void) {
#ifdef LLMC_CUDA_EMULATED
    return "cuda (emulated on CPU by the test harness)";
#else
    static char name[320];
    int dev = 0;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    snprintf(name, sizeof(name), "cuda (GPU %d: %s, sm_%d%d, %.1f GiB, %d SMs; bf16, cuBLASLt)", dev, prop.name,
             prop.major, prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.multiProcessorCount);
    return name;
#endif
}

extern "C" void* cuda_ops_alloc(size_t bytes) {
    void* p = NULL;
    cudaCheck(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}
extern "C" void cuda_ops_free(void* p) { if (p) cudaCheck(cudaFree(p)); }
extern "C" void* cuda_ops_alloc_host(size_t bytes) {
    void* p = NULL;
    cudaCheck(cudaMallocHost(&p, bytes ? bytes : 1));
    return p;
}
extern "C" void cuda_ops_free_host(void* p) { if (p) cudaCheck(cudaFreeHost(p)); }
extern "C" void cuda_ops_zero(void* p, size_t bytes) { if (bytes) cudaCheck(cudaMemset(p, 0, bytes)); }
extern "C" void cuda_ops_to_device(void* dst, const void* src_host, size_t bytes) {
    if (bytes) cudaCheck(cudaMemcpy(dst, src_host, bytes, cudaMemcpyHostToDevice));
}
extern "C" void cuda_ops_to_host(void* dst_host, const void* src, size_t bytes) {
    if (!bytes) return;
    cudaCheck(cudaMemcpy(dst_host, src, bytes, cudaMemcpyDeviceToHost)); // waits for the default stream
    stage_drained();
}
extern "C" void cuda_ops_memcpy(void* dst, const void* src, size_t bytes) {
    if (bytes) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
}
extern "C" void cuda_ops_to_device_async(void* dst, const void* src_host, size_t bytes) {
    if (!bytes) return;
    void* staged = ops_stage_host(bytes);
    memcpy(staged, src_host, bytes);
    cudaCheck(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, 0));
}
// The offload's copy stream (ops_copy_*): non-blocking, so that it does not wait for the default
// stream's kernels implicitly; the events order it against them where the interface says so.
static cudaStream_t g_copy;
static cudaEvent_t g_copy_fence, g_copy_marks[OPS_COPY_MARKS];
static int g_copy_next;
static void copy_stream_init(void) {
    if (g_copy) return;
    cudaCheck(cudaStreamCreateWithFlags(&g_copy, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&g_copy_fence, cudaEventDisableTiming));
    for (int k = 0; k < OPS_COPY_MARKS; k++) cudaCheck(cudaEventCreateWithFlags(&g_copy_marks[k], cudaEventDisableTiming));
}
extern "C" void cuda_ops_copy_begin(void) {
    copy_stream_init();
    cudaCheck(cudaEventRecord(g_copy_fence, 0));
    cudaCheck(cudaStreamWaitEvent(g_copy, g_copy_fence, 0));
}
extern "C" void cuda_ops_copy(void* dst, const void* src, size_t bytes, int to_host) {
    copy_stream_init();
    if (bytes) cudaCheck(cudaMemcpyAsync(dst, src, bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, g_copy));
}
extern "C" int cuda_ops_copy_mark(void) {
    copy_stream_init();
    const int k = g_copy_next;
    g_copy_next = (g_copy_next + 1) % OPS_COPY_MARKS;
    cudaCheck(cudaEventRecord(g_copy_marks[k], g_copy));
    return k;
}
extern "C" void cuda_ops_copy_wait(int mark) { cudaCheck(cudaEventSynchronize(g_copy_marks[mark])); }
extern "C" void cuda_ops_copy_end(void) {
    copy_stream_init();
    cudaCheck(cudaEventRecord(g_copy_fence, g_copy));
    cudaCheck(cudaStreamWaitEvent(0, g_copy_fence, 0));
}

extern "C" void cuda_ops_synchronize(void) {
    cudaCheck(cudaDeviceSynchronize());
    stage_drained();
}

// ----------------------------------------------------------------------------
// casts (round to nearest even on the way to bf16)

__global__ void cast_f32_to_bf16_kernel(floatX* out, const float* inp, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    for (size_t k = i; k < i + 8 && k < n; k++) out[k] = __float2bfloat16(inp[k]);
}
__global__ void cast_bf16_to_f32_kernel(float* out, const floatX* inp, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    for (size_t k = i; k < i + 8 && k < n; k++) out[k] = __bfloat162float(inp[k]);
}

// Staged through a fp32 device buffer in chunks, so converting a whole model costs at most
// CAST_CHUNK * 4 bytes of scratch memory (the memory plan counts it: llmc/ops/sizes.h).
#define CAST_CHUNK OPS_CUDA_CAST_CHUNK

extern "C" void cuda_ops_upload_f32(floatX* dst, const float* src_host, size_t n) {
    for (size_t off = 0; off < n; off += CAST_CHUNK) {
        size_t len = n - off < CAST_CHUNK ? n - off : CAST_CHUNK;
        float* tmp = (float*)ops_scratch(OPS_SCRATCH_CAST, len * sizeof(float));
        cudaCheck(cudaMemcpy(tmp, src_host + off, len * sizeof(float), cudaMemcpyHostToDevice));
        LAUNCH(cast_f32_to_bf16_kernel, ops_blocks(len, EW_BLOCK * 8), EW_BLOCK, 0, 0, dst + off, tmp, len);
        cudaCheck(cudaGetLastError());
    }
}
extern "C" void cuda_ops_download_f32(float* dst_host, const floatX* src, size_t n) {
    for (size_t off = 0; off < n; off += CAST_CHUNK) {
        size_t len = n - off < CAST_CHUNK ? n - off : CAST_CHUNK;
        float* tmp = (float*)ops_scratch(OPS_SCRATCH_CAST, len * sizeof(float));
        LAUNCH(cast_bf16_to_f32_kernel, ops_blocks(len, EW_BLOCK * 8), EW_BLOCK, 0, 0, tmp, src + off, len);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaMemcpy(dst_host + off, tmp, len * sizeof(float), cudaMemcpyDeviceToHost));
    }
}

