// CPU backend: the AdamW update. Parameters are fp32, so no master copy is needed and nothing is
// rounded; a master copy, when a caller passes one, is updated and copied to the parameters.
// Two loops without a branch inside, so that both vectorise (a loop with the master test in it
// runs scalar: docs/CPU.md, "Threading"); sqrtf vectorises because mk/cpu.mk compiles this file
// with -fno-math-errno.
#include <math.h>
#include "cpu/ops_cpu.h"
#include "cpu/parallel.h"

// The new value of one parameter p with gradient g; updates m and v.
// (The same operations in the same order as llmc/model/adamw_host.c's fp32 update: --offload-optimizer
// gives the same parameters bit for bit.)
static inline float adamw_step(float p, float g, float* m, float* v, float beta1, float beta2, float bc1,
                               float bc2, float lr, float eps, float weight_decay) {
    float mi = beta1 * *m + (1.0f - beta1) * g;
    float vi = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mi;
    *v = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    return p - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
}

void cpu_adamw_update(float* params, float* master, const float* grads, float* m, float* v, size_t n,
                      float lr, float beta1, float beta2, float eps, float weight_decay,
                      float grad_scale, int t, uint32_t seed) {
    (void)seed; // fp32 parameters: nothing to round
    const float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    const float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
    if (master == NULL) {
        #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
        for (size_t i = 0; i < n; i++)
            params[i] = adamw_step(params[i], grads[i] * grad_scale, &m[i], &v[i], beta1, beta2, bc1, bc2, lr, eps, weight_decay);
        return;
    }
    #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) {
        const float p = adamw_step(master[i], grads[i] * grad_scale, &m[i], &v[i], beta1, beta2, bc1, bc2, lr, eps, weight_decay);
        master[i] = p;
        params[i] = p;
    }
}
