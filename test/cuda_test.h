// Helpers of the host C++ tests that drive both backends side by side (test_cuda_ops.cpp,
// test_cuda_flash_attention.cpp): bf16-exact random inputs, bf16 device buffers built from host
// vectors, and a tolerance check that remembers the worst error relative to its tolerance.
// Built under the CUDA-on-CPU harness (mk/harness.mk) and for a GPU (mk/cuda.mk, mk/gpucheck.mk).
#ifndef LLMC_TEST_CUDA_TEST_H
#define LLMC_TEST_CUDA_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include <cuda_runtime.h>
#include "ops/ops.h"
#include "cuda/ops_cuda.h"
#include "test/test.h"

typedef std::vector<float> vecf;

static inline float cuda_test_bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }
// uniform in (-1, 1)
static inline float cuda_test_uniform(TestRng* r) { return (float)(2.0 * test_rand_uniform(r) - 1.0); }
// n values uniform in (-scale, scale), rounded to bf16 so both backends see the same numbers
static inline vecf cuda_test_rnd_vec(TestRng* r, size_t n, float scale) {
    vecf v(n);
    for (size_t i = 0; i < n; i++) v[i] = cuda_test_bf16_round(scale * cuda_test_uniform(r));
    return v;
}

// Every byte of a test's device buffer that no upload writes starts as 0xFF, so an element an op
// leaves unwritten reads back as NaN and fails its check (test_allclose fails on NaN). The
// CUDA-on-CPU harness poisons every cudaMalloc the same way; on a GPU fresh memory holds whatever
// was there before (often the same test's previous results), so the tests do it themselves there.
static inline void cuda_test_poison(void* p, size_t bytes) {
    if (cudaMemset(p, 0xFF, bytes) != cudaSuccess) { fprintf(stderr, "cudaMemset failed\n"); exit(1); }
}

// device bf16 copy of a host vector (or a poisoned buffer of count elements); `offset` elements of
// slack in front misalign it, for the kernels' scalar load/store paths
struct Dev {
    void* base = NULL;
    floatX* p = NULL;
    size_t n = 0;
    Dev(const vecf& h, int offset = 0) : n(h.size()) {
        base = cuda_ops_alloc((h.size() + offset + 8) * sizeof(floatX));
        p = (floatX*)base + offset;
        cuda_ops_upload_f32(p, h.data(), h.size());
    }
    explicit Dev(size_t count, int offset = 0) : n(count) {
        base = cuda_ops_alloc((count + offset + 8) * sizeof(floatX));
        p = (floatX*)base + offset;
        cuda_test_poison(base, (count + offset + 8) * sizeof(floatX));
    }
    vecf get() const { vecf h(n); cuda_ops_download_f32(h.data(), p, n); return h; }
    ~Dev() { cuda_ops_free(base); }
    Dev(const Dev&) = delete;
    Dev& operator=(const Dev&) = delete;
};

// the summary line: the worst |diff| / (atol + rtol |ref|) over all checks, and which check
static double g_worst_rel = 0.0;
static char g_worst_name[256];
static inline void check(const char* what, const vecf& got, const vecf& want, double rtol, double atol) {
    double worst = 0.0;
    for (size_t i = 0; i < want.size(); i++) {
        double d = fabs((double)got[i] - want[i]), tol = atol + rtol * fabs((double)want[i]);
        double r = tol > 0.0 ? d / tol : (d == 0.0 ? 0.0 : INFINITY);
        if (!(r <= worst)) worst = r;   // NaN sticks
    }
    if (worst > g_worst_rel || worst != worst) { g_worst_rel = worst; snprintf(g_worst_name, sizeof(g_worst_name), "%s", what); }
    test_allclose(what, got.data(), want.data(), want.size(), rtol, atol);
}

#endif // LLMC_TEST_CUDA_TEST_H
