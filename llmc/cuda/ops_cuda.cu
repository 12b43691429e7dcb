// CUDA backend: lifetime, memory, dtype casts, elementwise ops, AdamW and reductions.
// See ops_common.cuh for the rules every kernel here follows (they also run under the
// CUDA-on-CPU test harness).
#include <stdio.h>
#include <stdlib.h>
#include "cuda/ops_common.cuh"
#include "cuda/gemm.cuh"

#define EW_BLOCK 256   // threads per block of the elementwise kernels; each thread does 8 elements

// ----------------------------------------------------------------------------
// lifetime and memory

static void* g_scratch[OPS_SCRATCH_COUNT];
static size_t g_scratch_size[OPS_SCRATCH_COUNT];

// ops.h has no shutdown call, so the scratch buffers (and the GEMM workspace) are released at
// exit. The handler is registered after the first scratch cudaMalloc, so it runs before the
// CUDA runtime's / the harness' own exit handlers (the harness reports device memory never freed).
static void scratch_release(void) {
    for (int i = 0; i < OPS_SCRATCH_COUNT; i++) {
        if (g_scratch[i]) (void)cudaFree(g_scratch[i]);
        g_scratch[i] = NULL;
        g_scratch_size[i] = 0;
    }
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

extern "C" void ops_init(int threads) {
    (void)threads;
#ifndef LLMC_CUDA_EMULATED
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0)
        fatal("this binary is the CUDA build; on a machine without a GPU build with `make BACKEND=cpu`",
              "no usable CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
#endif
    gemm_init();
}

extern "C" const char* ops_backend_name(void) {
#ifdef LLMC_CUDA_EMULATED
    return "cuda (emulated on CPU by the test harness)";
#else
    static char name[320];
    int dev = 0;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    snprintf(name, sizeof(name), "cuda (%s, bf16, cuBLASLt)", prop.name);
    return name;
#endif
}

extern "C" void* ops_alloc(size_t bytes) {
    void* p = NULL;
    cudaCheck(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}
extern "C" void ops_free(void* p) { if (p) cudaCheck(cudaFree(p)); }
extern "C" void ops_zero(void* p, size_t bytes) { if (bytes) cudaCheck(cudaMemset(p, 0, bytes)); }
extern "C" void ops_to_device(void* dst, const void* src_host, size_t bytes) {
    if (bytes) cudaCheck(cudaMemcpy(dst, src_host, bytes, cudaMemcpyHostToDevice));
}
extern "C" void ops_to_host(void* dst_host, const void* src, size_t bytes) {
    if (bytes) cudaCheck(cudaMemcpy(dst_host, src, bytes, cudaMemcpyDeviceToHost));
}
extern "C" void ops_synchronize(void) { cudaCheck(cudaDeviceSynchronize()); }

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
// CAST_CHUNK * 4 bytes of scratch memory.
#define CAST_CHUNK ((size_t)1 << 24)

extern "C" void ops_upload_f32(floatX* dst, const float* src_host, size_t n) {
    for (size_t off = 0; off < n; off += CAST_CHUNK) {
        size_t len = n - off < CAST_CHUNK ? n - off : CAST_CHUNK;
        float* tmp = (float*)ops_scratch(OPS_SCRATCH_CAST, len * sizeof(float));
        cudaCheck(cudaMemcpy(tmp, src_host + off, len * sizeof(float), cudaMemcpyHostToDevice));
        LAUNCH(cast_f32_to_bf16_kernel, ops_blocks(len, EW_BLOCK * 8), EW_BLOCK, 0, 0, dst + off, tmp, len);
        cudaCheck(cudaGetLastError());
    }
}
extern "C" void ops_download_f32(float* dst_host, const floatX* src, size_t n) {
    for (size_t off = 0; off < n; off += CAST_CHUNK) {
        size_t len = n - off < CAST_CHUNK ? n - off : CAST_CHUNK;
        float* tmp = (float*)ops_scratch(OPS_SCRATCH_CAST, len * sizeof(float));
        LAUNCH(cast_bf16_to_f32_kernel, ops_blocks(len, EW_BLOCK * 8), EW_BLOCK, 0, 0, tmp, src + off, len);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaMemcpy(dst_host + off, tmp, len * sizeof(float), cudaMemcpyDeviceToHost));
    }
}

// ----------------------------------------------------------------------------
// elementwise ops: each thread handles 8 consecutive elements, with one 128-bit load/store per
// operand when every pointer is 16-byte aligned (vec), else (and for the ragged tail) one by one.
// In-place use (out aliasing an input) is fine: each element is read before it is written by
// the same thread.

__device__ inline float ops_gelu_grad(float x) {
    float x3 = 0.044715f * x * x * x;
    float u = OPS_GELU_SCALE * (x + x3);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * OPS_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t n, int vec) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    if (vec && i + 8 <= n) {
        x128 x = load128(inp + i), o;
        for (int k = 0; k < 8; k++) o[k] = __float2bfloat16(ops_gelu(__bfloat162float(x[k])));
        store128(out + i, o);
    } else {
        for (size_t k = i; k < i + 8 && k < n; k++) out[k] = __float2bfloat16(ops_gelu(__bfloat162float(inp[k])));
    }
}

// dinp += gelu'(inp) * dout
__global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t n, int vec) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    if (vec && i + 8 <= n) {
        x128 x = load128(inp + i), g = load128(dout + i), d = load128(dinp + i);
        for (int k = 0; k < 8; k++) {
            float v = __bfloat162float(d[k]) + ops_gelu_grad(__bfloat162float(x[k])) * __bfloat162float(g[k]);
            d[k] = __float2bfloat16(v);
        }
        store128(dinp + i, d);
    } else {
        for (size_t k = i; k < i + 8 && k < n; k++) {
            float v = __bfloat162float(dinp[k]) + ops_gelu_grad(__bfloat162float(inp[k])) * __bfloat162float(dout[k]);
            dinp[k] = __float2bfloat16(v);
        }
    }
}

__global__ void residual_forward_kernel(floatX* out, const floatX* a, const floatX* b, size_t n, int vec) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    if (vec && i + 8 <= n) {
        x128 x = load128(a + i), y = load128(b + i), o;
        for (int k = 0; k < 8; k++) o[k] = __float2bfloat16(__bfloat162float(x[k]) + __bfloat162float(y[k]));
        store128(out + i, o);
    } else {
        for (size_t k = i; k < i + 8 && k < n; k++) out[k] = __float2bfloat16(__bfloat162float(a[k]) + __bfloat162float(b[k]));
    }
}

__global__ void scale_copy_kernel(floatX* dst, const floatX* src, float scale, size_t n, int vec) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    if (vec && i + 8 <= n) {
        x128 x = load128(src + i), o;
        for (int k = 0; k < 8; k++) o[k] = __float2bfloat16(__bfloat162float(x[k]) * scale);
        store128(dst + i, o);
    } else {
        for (size_t k = i; k < i + 8 && k < n; k++) dst[k] = __float2bfloat16(__bfloat162float(src[k]) * scale);
    }
}

extern "C" void gelu_forward(floatX* out, const floatX* inp, size_t n) {
    if (!n) return;
    int vec = ops_aligned16(out) && ops_aligned16(inp);
    LAUNCH(gelu_forward_kernel, ops_blocks(n, EW_BLOCK * 8), EW_BLOCK, 0, 0, out, inp, n, vec);
    cudaCheck(cudaGetLastError());
}
extern "C" void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    if (!n) return;
    int vec = ops_aligned16(dinp) && ops_aligned16(inp) && ops_aligned16(dout);
    LAUNCH(gelu_backward_kernel, ops_blocks(n, EW_BLOCK * 8), EW_BLOCK, 0, 0, dinp, inp, dout, n, vec);
    cudaCheck(cudaGetLastError());
}
extern "C" void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n) {
    if (!n) return;
    int vec = ops_aligned16(out) && ops_aligned16(a) && ops_aligned16(b);
    LAUNCH(residual_forward_kernel, ops_blocks(n, EW_BLOCK * 8), EW_BLOCK, 0, 0, out, a, b, n, vec);
    cudaCheck(cudaGetLastError());
}
extern "C" void add_inplace(floatX* dst, const floatX* src, size_t n) {
    residual_forward(dst, dst, src, n);
}
extern "C" void scale_copy(floatX* dst, const floatX* src, float scale, size_t n) {
    if (!n) return;
    int vec = ops_aligned16(dst) && ops_aligned16(src);
    LAUNCH(scale_copy_kernel, ops_blocks(n, EW_BLOCK * 8), EW_BLOCK, 0, 0, dst, src, scale, n, vec);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// AdamW (PyTorch semantics, decoupled weight decay) on fp32 master weights; the bf16 params are
// written with stochastic rounding seeded by (seed, index), so a run is reproducible.

__device__ inline float adamw_one(float p, float g, float* mi, float* vi, float lr, float beta1, float beta2,
                                  float eps, float wd, float bc1, float bc2) {
    float m = beta1 * *mi + (1.0f - beta1) * g;
    float v = beta2 * *vi + (1.0f - beta2) * g * g;
    *mi = m;
    *vi = v;
    return p - lr * ((m / bc1) / (sqrtf(v / bc2) + eps) + wd * p);
}

// 8 consecutive elements per thread: 128-bit loads of params/grads (x128) and m/v/master (two f128
// each) when every pointer is 16-byte aligned (vec), scalar otherwise and for the tail. The random
// bits depend only on (seed, element index), so both paths round identically.
__global__ void adamw_kernel(floatX* params, float* master, const floatX* grads, float* m, float* v,
                             size_t n, float lr, float beta1, float beta2, float eps, float wd,
                             float grad_scale, float bc1, float bc2, uint32_t seed, int vec) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n) return;
    if (vec && i0 + 8 <= n) {
        x128 g8 = load128(grads + i0), p8 = load128(params + i0);
        f128 m8[2] = {load128(m + i0), load128(m + i0 + 4)}, v8[2] = {load128(v + i0), load128(v + i0 + 4)};
        f128 w8[2];
        if (master) { w8[0] = load128(master + i0); w8[1] = load128(master + i0 + 4); }
        for (int k = 0; k < 8; k++) {
            float p = master ? w8[k / 4][k % 4] : __bfloat162float(p8[k]);
            p = adamw_one(p, __bfloat162float(g8[k]) * grad_scale, &m8[k / 4][k % 4], &v8[k / 4][k % 4],
                          lr, beta1, beta2, eps, wd, bc1, bc2);
            if (master) w8[k / 4][k % 4] = p;
            p8[k] = ops_round_stochastic(p, ops_hash(seed, i0 + k));
        }
        store128(params + i0, p8);
        for (int h = 0; h < 2; h++) {
            store128(m + i0 + 4 * h, m8[h]);
            store128(v + i0 + 4 * h, v8[h]);
            if (master) store128(master + i0 + 4 * h, w8[h]);
        }
    } else {
        for (size_t i = i0; i < i0 + 8 && i < n; i++) {
            float p = master ? master[i] : __bfloat162float(params[i]);
            p = adamw_one(p, __bfloat162float(grads[i]) * grad_scale, &m[i], &v[i], lr, beta1, beta2, eps, wd, bc1, bc2);
            if (master) master[i] = p;
            params[i] = ops_round_stochastic(p, ops_hash(seed, i));
        }
    }
}

extern "C" void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, int t, uint32_t seed) {
    if (!n) return;
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    int vec = ops_aligned16(params) && ops_aligned16(grads) && ops_aligned16(m) && ops_aligned16(v) &&
              (master == NULL || ops_aligned16(master));
    LAUNCH(adamw_kernel, ops_blocks(n, EW_BLOCK * 8), EW_BLOCK, 0, 0, params, master, grads, m, v, n, lr, beta1, beta2,
           eps, weight_decay, grad_scale, bc1, bc2, seed, vec);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// reductions: a fixed grid of blocks writes one fp32 partial each (grid-stride loop, then a block
// tree), the host adds the partials in double in order. The grid does not depend on the device,
// so the result is bit-identical from run to run and GPU to GPU.

#define RED_THREADS 256
#define RED_BLOCKS 512

__global__ void sum_squares_partial_kernel(float* partial, const floatX* x, size_t n) {
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = __bfloat162float(x[i]);
        acc += v * v;
    }
    acc = ops_block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
__global__ void sum_f32_partial_kernel(float* partial, const float* x, size_t n) {
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc += x[i];
    acc = ops_block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

static double sum_partials(const float* partial_dev, unsigned nblocks) {
    float host[RED_BLOCKS];
    cudaCheck(cudaMemcpy(host, partial_dev, nblocks * sizeof(float), cudaMemcpyDeviceToHost));
    double s = 0.0;
    for (unsigned i = 0; i < nblocks; i++) s += host[i];
    return s;
}

extern "C" double sum_squares(const floatX* x, size_t n) {
    if (!n) return 0.0;
    unsigned nb = ops_blocks(n, RED_THREADS);
    if (nb > RED_BLOCKS) nb = RED_BLOCKS;
    float* partial = (float*)ops_scratch(OPS_SCRATCH_REDUCE, RED_BLOCKS * sizeof(float));
    LAUNCH(sum_squares_partial_kernel, nb, RED_THREADS, 0, 0, partial, x, n);
    cudaCheck(cudaGetLastError());
    return sum_partials(partial, nb);
}
extern "C" double sum_f32(const float* x, size_t n) {
    if (!n) return 0.0;
    unsigned nb = ops_blocks(n, RED_THREADS);
    if (nb > RED_BLOCKS) nb = RED_BLOCKS;
    float* partial = (float*)ops_scratch(OPS_SCRATCH_REDUCE, RED_BLOCKS * sizeof(float));
    LAUNCH(sum_f32_partial_kernel, nb, RED_THREADS, 0, 0, partial, x, n);
    cudaCheck(cudaGetLastError());
    return sum_partials(partial, nb);
}

// ----------------------------------------------------------------------------
// deterministic column sums, second pass: out[c] += sum over chunks of partial[chunk][c]

__global__ void colsum_finalize_kernel(floatX* out, const float* partial, int nchunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int k = 0; k < nchunks; k++) acc += partial[(size_t)k * C + c];
    out[c] = __float2bfloat16(__bfloat162float(out[c]) + acc);
}

void ops_colsum_finalize(floatX* out, const float* partial, int nchunks, int C) {
    LAUNCH(colsum_finalize_kernel, ops_blocks(C, 256), 256, 0, 0, out, partial, nchunks, C);
    cudaCheck(cudaGetLastError());
}
