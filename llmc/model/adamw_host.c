#include "model/adamw_host.h"
#include "base/bf16.h"
#include "base/check.h"
#include "base/sround.h"
#include <math.h>

#define ADAMW_HOST_CHUNK 16384 // elements per OpenMP chunk (results do not depend on it)

static void adamw_host_bf16(uint16_t* params, float* master, const uint16_t* grads, float* m, float* v, size_t n,
                            float lr, float beta1, float beta2, float eps, float wd, float grad_scale, int t, uint32_t seed,
                            size_t idx0) {
    const float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    #pragma omp parallel for schedule(static, ADAMW_HOST_CHUNK) if (n > ADAMW_HOST_CHUNK)
    for (size_t i = 0; i < n; i++) {
        const float g = bf16_to_f32(grads[i]) * grad_scale;
        const float mi = beta1 * m[i] + (1.0f - beta1) * g;
        const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        const float p = master[i] - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * master[i]);
        master[i] = p;
        params[i] = sround_bf16(p, sround_hash(seed, idx0 + i));   // as the CUDA kernel rounds element idx0 + i
    }
}

static void adamw_host_f32(float* params, const float* grads, float* m, float* v, size_t n,
                           float lr, float beta1, float beta2, float eps, float wd, float grad_scale, int t) {
    const float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    const float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
    #pragma omp parallel for simd schedule(static, ADAMW_HOST_CHUNK) if (n > ADAMW_HOST_CHUNK)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        float pi = params[i];
        pi -= lr * (mhat / (sqrtf(vhat) + eps) + wd * pi);
        params[i] = pi;
    }
}

void adamw_host_update(void* params, float* master, const void* grads, float* m, float* v, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay,
                       float grad_scale, int t, uint32_t seed, size_t idx0, int bf16) {
    if (!n) return;
    if (bf16) {
        if (!master) fatal("this is a bug in llmc", "adamw_host_update: bf16 parameters need fp32 master weights");
        adamw_host_bf16((uint16_t*)params, master, (const uint16_t*)grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t, seed,
                        idx0);
    } else
        adamw_host_f32((float*)params, (const float*)grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t);
}
