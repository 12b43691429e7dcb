// CPU backend: the AdamW update. Parameters are fp32, so no master copy is needed and nothing is
// rounded; a master copy, when a caller passes one, is updated and copied to the parameters.
#include <math.h>
#include "cpu/ops_cpu.h"
#include "cpu/parallel.h"

void cpu_adamw_update(float* params, float* master, const float* grads, float* m, float* v, size_t n,
                      float lr, float beta1, float beta2, float eps, float weight_decay,
                      float grad_scale, int t, uint32_t seed) {
    (void)seed; // fp32 parameters: nothing to round
    float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
    float* p = master != NULL ? master : params;
    #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        float pi = p[i];
        pi -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * pi);
        p[i] = pi;
        if (master != NULL) params[i] = pi;
    }
}
