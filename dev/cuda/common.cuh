// Shared helpers of the kernel programs in dev/cuda/ (one program per kernel: a CPU reference, the
// kernel version(s), a correctness check of each against the reference, and cudaEvent timing).
// Inputs are rounded to bf16 before the CPU reference sees them, so differences are the kernels'
// fp32 arithmetic and the bf16 rounding of their outputs. Needs a GPU to run; compiled in CI.
#ifndef DEV_CUDA_COMMON_CUH
#define DEV_CUDA_COMMON_CUH

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <vector>
#include "ops.h"
#include "cuda/common.cuh"
#include "report.cuh"

typedef std::vector<float> vecf;

static inline float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

// n pseudo-random values in [-scale/2, scale/2), rounded to bf16 (deterministic per seed)
static inline vecf dev_rand(size_t n, float scale, uint32_t seed) {
    vecf h(n);
    uint32_t s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        h[i] = bf16_round(scale * ((float)(s >> 8) * (1.0f / 16777216.0f) - 0.5f));
    }
    return h;
}

static inline floatX* to_dev_bf16(const vecf& h) {
    floatX* d = (floatX*)ops_alloc(h.size() * sizeof(floatX));
    ops_upload_f32(d, h.data(), h.size());
    return d;
}
static inline float* to_dev_f32(const vecf& h) {
    float* d = (float*)ops_alloc(h.size() * sizeof(float));
    ops_to_device(d, h.data(), h.size() * sizeof(float));
    return d;
}
static inline vecf from_dev_bf16(const floatX* d, size_t n) { vecf h(n); ops_download_f32(h.data(), d, n); return h; }
static inline vecf from_dev_f32(const float* d, size_t n) { vecf h(n); ops_to_host(h.data(), d, n * sizeof(float)); return h; }

// max |got - want| relative to max |want|; reports it (a `check` line, report.cuh) and returns
// whether it is within tol
static inline bool dev_check(const char* what, const vecf& got, const vecf& want, double tol) {
    double maxd = 0.0, maxw = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < want.size(); i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= maxd)) { maxd = d; worst = i; }   // NaN counts as worst
        maxw = fmax(maxw, fabs((double)want[i]));
    }
    double rel = maxw > 0 ? maxd / maxw : maxd;
    bool ok = rel <= tol;
    report_check(what, rel, tol, ok);
    if (!ok) printf("      worst at [%zu]: got %.6g want %.6g\n", worst, got[worst], want[worst]);
    return ok;
}

// milliseconds per call of fn (one warm-up call, then reps timed with CUDA events)
template <typename F>
static float dev_time_ms(F fn, int reps = 20) {
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    fn();
    cudaCheck(cudaEventRecord(e0));
    for (int i = 0; i < reps; i++) fn();
    cudaCheck(cudaEventRecord(e1));
    cudaCheck(cudaEventSynchronize(e1));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    return ms / (float)reps;
}

// one line of timing: ms per call and the bandwidth of `bytes` (each byte the op must move once)
static inline void dev_report(const char* version, float ms, double bytes) { report_time(version, ms, bytes, 0.0); }

#endif // DEV_CUDA_COMMON_CUH
