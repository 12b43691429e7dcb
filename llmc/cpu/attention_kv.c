// Attention over a key/value cache for the CPU backend (sampling; contract in ops.h).
// Decoding adds one token at a time, so the work per call is small: one (batch, head, new
// token) item computes its scores against the cached keys into a row buffer, a softmax, and
// the weighted sum of cached values. The cache layout (B, NH, maxT, HS) keeps each head's keys
// contiguous, so the score loop streams through memory. The caches are fp32, or bf16 (--dtype
// bf16: half the bytes a token reads), whose rows are widened to fp32 one at a time.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu/ops_cpu.h"
#include "base/bf16.h"
#include "base/check.h"

// Row j (HS values) of a cache: the fp32 row itself, or the bf16 row widened into buf.
static const float* kv_row(const float* c32, const uint16_t* c16, size_t j, int HS, float* buf) {
    if (c32) return c32 + j * HS;
    const uint16_t* r = c16 + j * HS;
    for (int i = 0; i < HS; i++) buf[i] = bf16_to_f32(r[i]);
    return buf;
}

// The new keys and values (HS of them for head h of row) into cache row dst.
static void kv_store(float* k32, float* v32, uint16_t* k16, uint16_t* v16, size_t dst, const float* row, int C, int h, int HS) {
    if (k32) {
        memcpy(k32 + dst, row + C + h * HS, (size_t)HS * sizeof(float));
        memcpy(v32 + dst, row + 2 * C + h * HS, (size_t)HS * sizeof(float));
        return;
    }
    for (int i = 0; i < HS; i++) {
        k16[dst + i] = bf16_from_f32(row[C + h * HS + i]);
        v16[dst + i] = bf16_from_f32(row[2 * C + h * HS + i]);
    }
}

void cpu_attention_forward_kv(float* out, const float* qkv_new, float* k32, float* v32, uint16_t* k16, uint16_t* v16,
                              int B, int pos, int Tn, int maxT, int C, int NH) {
    if (pos < 0 || Tn < 1 || pos + Tn > maxT || C % NH != 0 || !k32 == !k16)
        fatal("this is a bug in llmc", "attention_forward_kv: pos %d + %d new tokens beyond the cache of %d (C %d, NH %d)",
              pos, Tn, maxT, C, NH);
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    // 1. append the new keys and values
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tn; t++) {
            const float* row = qkv_new + ((size_t)b * Tn + t) * 3 * C;
            for (int h = 0; h < NH; h++)
                kv_store(k32, v32, k16, v16, (((size_t)b * NH + h) * maxT + pos + t) * HS, row, C, h, HS);
        }
    // 2. attend
    #pragma omp parallel
    {
        float* s = (float*)mallocCheck((size_t)maxT * sizeof(float));
        float* buf = (float*)mallocCheck((size_t)HS * sizeof(float));
        #pragma omp for collapse(3) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < Tn; t++) {
                    const float* q = qkv_new + ((size_t)b * Tn + t) * 3 * C + h * HS;
                    const size_t head = ((size_t)b * NH + h) * maxT; // the head's first cache row
                    const int n = pos + t + 1; // keys this query sees
                    float mx = -INFINITY;
                    for (int j = 0; j < n; j++) {
                        const float* k = kv_row(k32, k16, head + j, HS, buf);
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
                        const float* v = kv_row(v32, v16, head + j, HS, buf);
                        for (int i = 0; i < HS; i++) o[i] += p * v[i];
                    }
                }
        free(s);
        free(buf);
    }
}
