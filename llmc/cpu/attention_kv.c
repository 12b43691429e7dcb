// Attention over a key/value cache for the CPU backend (sampling; contract in ops.h).
// Decoding adds one token at a time, so the work per call is small: one (batch, head, new
// token) item computes its scores against the cached keys into a row buffer, a softmax, and
// the weighted sum of cached values. The cache layout (B, NH, maxT, HS) keeps each head's keys
// contiguous, so the score loop streams through memory.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu/ops_cpu.h"
#include "base/check.h"

void cpu_attention_forward_kv(float* out, const float* qkv_new, float* kcache, float* vcache,
                              int B, int pos, int Tn, int maxT, int C, int NH) {
    if (pos < 0 || Tn < 1 || pos + Tn > maxT || C % NH != 0)
        fatal("this is a bug in llmc", "attention_forward_kv: pos %d + %d new tokens beyond the cache of %d (C %d, NH %d)",
              pos, Tn, maxT, C, NH);
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    // 1. append the new keys and values
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tn; t++) {
            const float* row = qkv_new + ((size_t)b * Tn + t) * 3 * C;
            for (int h = 0; h < NH; h++) {
                size_t dst = (((size_t)b * NH + h) * maxT + pos + t) * HS;
                memcpy(kcache + dst, row + C + h * HS, (size_t)HS * sizeof(float));
                memcpy(vcache + dst, row + 2 * C + h * HS, (size_t)HS * sizeof(float));
            }
        }
    // 2. attend
    #pragma omp parallel
    {
        float* s = (float*)mallocCheck((size_t)maxT * sizeof(float));
        #pragma omp for collapse(3) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < Tn; t++) {
                    const float* q = qkv_new + ((size_t)b * Tn + t) * 3 * C + h * HS;
                    const float* K = kcache + ((size_t)b * NH + h) * maxT * HS;
                    const float* V = vcache + ((size_t)b * NH + h) * maxT * HS;
                    const int n = pos + t + 1; // keys this query sees
                    float mx = -INFINITY;
                    for (int j = 0; j < n; j++) {
                        const float* k = K + (size_t)j * HS;
                        float d = 0.0f;
                        for (int i = 0; i < HS; i++) d += q[i] * k[i];
                        s[j] = d * scale;
                        if (s[j] > mx) mx = s[j];
                    }
                    float sum = 0.0f;
                    for (int j = 0; j < n; j++) { s[j] = expf(s[j] - mx); sum += s[j]; }
                    const float inv = 1.0f / sum;
                    float* o = out + ((size_t)b * Tn + t) * C + h * HS;
                    for (int i = 0; i < HS; i++) o[i] = 0.0f;
                    for (int j = 0; j < n; j++) {
                        const float p = s[j] * inv;
                        const float* v = V + (size_t)j * HS;
                        for (int i = 0; i < HS; i++) o[i] += p * v[i];
                    }
                }
        free(s);
    }
}
