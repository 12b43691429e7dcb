// CUDA backend: the AdamW update.
#include "cuda/common.cuh"
#include "cuda/ops_cuda.h"

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
            p8[k] = ops_round_stochastic(p, sround_hash(seed, i0 + k));
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
            params[i] = ops_round_stochastic(p, sround_hash(seed, i));
        }
    }
}

extern "C" void cuda_adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
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

