// CPU backend: the element-wise ops LoRA needs (declared in llmc/ops.h).
#include "../ops.h"
#include "../rand.h"

void dropout_forward(floatX* out, const floatX* inp, size_t n, float p, uint64_t seed, uint64_t stream) {
    const float scale = 1.0f / (1.0f - p);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = rand_uniform(seed, stream, i) >= (double)p ? inp[i] * scale : 0.0f;
}

void mul_inplace(floatX* dst, const floatX* mask, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] *= mask[i];
}
