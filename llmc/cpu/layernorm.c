// CPU backend: layernorm forward (plain and fused with the residual add) and backward; row
// statistics in double, weight/bias gradients as deterministic column-block sums.
#include <math.h>
#include <stddef.h>
#include "cpu/ops_cpu.h"
#include "cpu/parallel.h"

#define LN_EPS 1e-5f   // PyTorch / HF GPT-2 default

static inline void layernorm_row(float* out, float* mean, float* rstd, const float* x,
                                 const float* w, const float* b, int C) {
    // Sums in double: rows of fine-tuned models can carry a mean that is large against their
    // spread, and an fp32 mean error then shows up directly in x - mean. Costs nothing here.
    double s = 0.0;
    #pragma omp simd reduction(+:s)
    for (int c = 0; c < C; c++) s += x[c];
    float m = (float)(s / C);
    double v = 0.0;   // two-pass variance: no cancellation
    #pragma omp simd reduction(+:v)
    for (int c = 0; c < C; c++) { float d = x[c] - m; v += (double)d * d; }
    float rs = (float)(1.0 / sqrt(v / C + (double)LN_EPS));
    #pragma omp simd
    for (int c = 0; c < C; c++) out[c] = (x[c] - m) * rs * w[c] + b[c];
    *mean = m;
    *rstd = rs;
}

void cpu_layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                           const float* weight, const float* bias, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        layernorm_row(out + (size_t)n * C, mean + n, rstd + n, inp + (size_t)n * C, weight, bias, C);
}

void cpu_fused_residual_layernorm_forward(float* residual_out, float* ln_out, float* mean, float* rstd,
                                          const float* a, const float* b, const float* weight,
                                          const float* bias, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* r = residual_out + (size_t)n * C;
        const float* an = a + (size_t)n * C;
        const float* bn = b + (size_t)n * C;
        #pragma omp simd
        for (int c = 0; c < C; c++) r[c] = an[c] + bn[c];
        layernorm_row(ln_out + (size_t)n * C, mean + n, rstd + n, r, weight, bias, C);
    }
}

void cpu_layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, const float* mean, const float* rstd,
                            int N, int C, int accumulate) {
    if (dinp != NULL) {
        // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = w * dout
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* dy = dout + (size_t)n * C;
            float* dx = dinp + (size_t)n * C;
            float m = mean[n], rs = rstd[n];
            float sg = 0.0f, sgx = 0.0f;
            #pragma omp simd reduction(+:sg, sgx)
            for (int c = 0; c < C; c++) {
                float g = weight[c] * dy[c];
                sg += g;
                sgx += g * (x[c] - m) * rs;
            }
            sg /= (float)C;
            sgx /= (float)C;
            #pragma omp simd
            for (int c = 0; c < C; c++) {
                float xhat = (x[c] - m) * rs;
                dx[c] = (accumulate ? dx[c] : 0.0f) + rs * (weight[c] * dy[c] - sg - xhat * sgx);
            }
        }
    }
    if (dweight != NULL || dbias != NULL) {
        int nblk = (C + COLBLOCK - 1) / COLBLOCK;
        #pragma omp parallel for schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * COLBLOCK, c1 = c0 + COLBLOCK < C ? c0 + COLBLOCK : C;
            float dw[COLBLOCK], db[COLBLOCK];
            for (int c = 0; c < COLBLOCK; c++) { dw[c] = 0.0f; db[c] = 0.0f; }
            for (int n = 0; n < N; n++) {
                const float* x = inp + (size_t)n * C;
                const float* dy = dout + (size_t)n * C;
                float m = mean[n], rs = rstd[n];
                #pragma omp simd
                for (int c = c0; c < c1; c++) {
                    dw[c - c0] += (x[c] - m) * rs * dy[c];
                    db[c - c0] += dy[c];
                }
            }
            for (int c = c0; c < c1; c++) {
                if (dweight != NULL) dweight[c] += dw[c - c0];
                if (dbias != NULL) dbias[c] += db[c - c0];
            }
        }
    }
}
