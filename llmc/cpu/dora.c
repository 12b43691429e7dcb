// CPU backend: DoRA's ops (llmc/ops/ops.h): the row norms of the adapted weight W + scaling B A,
// the magnitude's scale on the layer's rows, and the magnitude's gradient.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "cpu/ops_cpu.h"
#include "cpu/parallel.h"
#include "base/bf16.h"

#define DORA_CHUNK 256 // columns of one row built at a time on the stack

// Row o of W + scaling B A, DORA_CHUNK columns at a time, its squares summed in double.
static float dora_row_norm(const float* W, const uint16_t* W16, const float* A, const float* B, float scaling,
                           int o, int C, int R) {
    float row[DORA_CHUNK];
    double sum = 0.0;
    const size_t base = (size_t)o * C;
    for (int c0 = 0; c0 < C; c0 += DORA_CHUNK) {
        const int n = C - c0 < DORA_CHUNK ? C - c0 : DORA_CHUNK;
        for (int i = 0; i < n; i++) row[i] = W ? W[base + c0 + i] : bf16_to_f32(W16[base + c0 + i]);
        for (int j = 0; j < R; j++) {
            const float b = scaling * B[(size_t)o * R + j];
            const float* a = A + (size_t)j * C + c0;
            for (int i = 0; i < n; i++) row[i] += b * a[i];
        }
        for (int i = 0; i < n; i++) sum += (double)row[i] * row[i];
    }
    return (float)sqrt(sum);
}

void cpu_dora_norm(float* norm, const float* W, const uint16_t* W16, const float* A, const float* B, float scaling,
                   int OC, int C, int R) {
    #pragma omp parallel for schedule(static) if ((size_t)OC * C * (R + 1) > EW_CHUNK)
    for (int o = 0; o < OC; o++) norm[o] = dora_row_norm(W, W16, A, B, scaling, o, C, R);
}

void cpu_dora_scale(float* out, const float* in, const float* m, const float* norm, float shift, const float* bias,
                    int N, int OC, int accumulate) {
    #pragma omp parallel for schedule(static) if ((size_t)N * OC > EW_CHUNK)
    for (int n = 0; n < N; n++) {
        float* y = out + (size_t)n * OC;
        const float* x = in + (size_t)n * OC;
        for (int o = 0; o < OC; o++) {
            const float v = (m[o] / norm[o] + shift) * x[o] + (bias ? bias[o] : 0.0f);
            y[o] = accumulate ? y[o] + v : v;
        }
    }
}

// A thread owns COLBLOCK columns and walks the rows in order (llmc/cpu/parallel.h: the same sums
// whatever the thread count).
void cpu_dora_magnitude_backward(float* dm, const float* dout, const float* z, const float* norm, int N, int OC) {
    const int nblk = (OC + COLBLOCK - 1) / COLBLOCK;
    #pragma omp parallel for schedule(static) if ((size_t)N * OC > EW_CHUNK)
    for (int blk = 0; blk < nblk; blk++) {
        const int o0 = blk * COLBLOCK, o1 = o0 + COLBLOCK < OC ? o0 + COLBLOCK : OC;
        double acc[COLBLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * OC;
            const float* zz = z + (size_t)n * OC;
            for (int o = o0; o < o1; o++) acc[o - o0] += (double)d[o] * zz[o];
        }
        for (int o = o0; o < o1; o++) dm[o] += (float)(acc[o - o0] / norm[o]);
    }
}
