// The key/value-cache attention kernels (llmc/cuda/attention_kv.cu) against the CPU op
// (llmc/cpu/attention_kv.c): a sequence of calls that fill a cache (a prompt, then single
// tokens, then a few at once) for several head sizes, in fp32 (outputs within 1e-5, caches
// bit-identical) and bf16 storage (the CPU op run on the bf16-rounded inputs; outputs within
// bf16 rounding, caches bit-identical). Runs under the CUDA-on-CPU harness in CI and as-is on a GPU.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "llmc/cuda/attention_kv.cuh"
#include "llmc/cpu/ops_cpu.h"
#include "base/rand.h"
#include "base/bf16.h"
#include "test/test.h"

static float bf16_round(float x) { return bf16_to_f32(bf16_from_f32(x)); }

template <typename T> static T to_t(float x);
template <> float to_t<float>(float x) { return x; }
template <> bf16 to_t<bf16>(float x) { return __float2bfloat16_rn(x); }
static float to_f(float x) { return x; }
static float to_f(bf16 x) { return __bfloat162float(x); }

template <typename T>
static void run_case(int B, int C, int NH, int maxT, const int* steps, int nsteps, const char* label) {
    const int is_bf16 = sizeof(T) == 2;
    const size_t cache_n = (size_t)B * maxT * C;
    float* kc = (float*)mallocCheck(cache_n * sizeof(float));   // CPU caches
    float* vc = (float*)mallocCheck(cache_n * sizeof(float));
    T *d_k, *d_v, *d_qkv, *d_out;
    cudaCheck(cudaMalloc((void**)&d_k, cache_n * sizeof(T)));   // poisoned (NaN) by the harness:
    cudaCheck(cudaMalloc((void**)&d_v, cache_n * sizeof(T)));   // rows not yet written must never be read
    int maxTn = 0;
    for (int i = 0; i < nsteps; i++) if (steps[i] > maxTn) maxTn = steps[i];
    cudaCheck(cudaMalloc((void**)&d_qkv, (size_t)B * maxTn * 3 * C * sizeof(T)));
    cudaCheck(cudaMalloc((void**)&d_out, (size_t)B * maxTn * C * sizeof(T)));
    float* qkv = (float*)mallocCheck((size_t)B * maxTn * 3 * C * sizeof(float));
    T* qkv_t = (T*)mallocCheck((size_t)B * maxTn * 3 * C * sizeof(T));
    float* want = (float*)mallocCheck((size_t)B * maxTn * C * sizeof(float));
    T* got_t = (T*)mallocCheck(cache_n * sizeof(T));
    float* got = (float*)mallocCheck(cache_n * sizeof(float));
    int pos = 0;
    for (int s = 0; s < nsteps; s++) {
        const int Tn = steps[s];
        const size_t nq = (size_t)B * Tn * 3 * C;
        for (size_t i = 0; i < nq; i++) {
            float x = (float)rand_normal(11, (uint64_t)s, i) * 1.5f;
            qkv[i] = is_bf16 ? bf16_round(x) : x;   // both sides see the same stored inputs
            qkv_t[i] = to_t<T>(x);
        }
        cpu_attention_forward_kv(want, qkv, kc, vc, NULL, NULL, B, pos, Tn, maxT, C, NH);
        cudaCheck(cudaMemcpy(d_qkv, qkv_t, nq * sizeof(T), cudaMemcpyHostToDevice));
        attention_forward_kv_cuda(d_out, d_qkv, d_k, d_v, B, pos, Tn, maxT, C, NH, 0);
        cudaCheck(cudaDeviceSynchronize());
        const size_t no = (size_t)B * Tn * C;
        cudaCheck(cudaMemcpy(got_t, d_out, no * sizeof(T), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < no; i++) got[i] = to_f(got_t[i]);
        char what[160];
        snprintf(what, sizeof(what), "%s %s: call %d (pos %d, %d new) output", label, is_bf16 ? "bf16" : "fp32", s, pos, Tn);
        // bf16: the CPU result is exact for the rounded inputs, the kernel's is rounded once more
        test_allclose(what, got, want, no, is_bf16 ? 8e-3 : 1e-5, is_bf16 ? 8e-3 : 1e-5);
        pos += Tn;
    }
    // the caches: rows [0, pos) of every head equal the CPU's (copies of the stored values)
    int bad = 0;
    for (int which = 0; which < 2; which++) {
        cudaCheck(cudaMemcpy(got_t, which ? d_v : d_k, cache_n * sizeof(T), cudaMemcpyDeviceToHost));
        const float* ref = which ? vc : kc;
        const int HS = C / NH;
        for (int bh = 0; bh < B * NH; bh++)
            for (int j = 0; j < pos; j++)
                for (int d = 0; d < HS; d++) {
                    size_t i = ((size_t)bh * maxT + j) * HS + d;
                    if (to_f(got_t[i]) != ref[i]) bad++;
                }
    }
    TEST_CHECK(bad == 0, "%s: %d cache values differ from the CPU op", label, bad);
    if (!bad) printf("ok   %s %s: K and V caches (%d rows) equal the CPU op's\n", label, is_bf16 ? "bf16" : "fp32", pos);
    cudaCheck(cudaFree(d_k)); cudaCheck(cudaFree(d_v)); cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_out));
    free(kc); free(vc); free(qkv); free(qkv_t); free(want); free(got_t); free(got);
}

int main(void) {
    cpu_ops_init(1);
    const int steps_a[] = { 5, 1, 1, 3, 1 };     // prompt, decode, a chunk, decode
    const int steps_b[] = { 1, 1, 2 };
    const int steps_c[] = { 17, 1 };             // more keys than 16 lanes of a group
    run_case<float>(2, 64, 4, 16, steps_a, 5, "HS 16 B 2");
    run_case<bf16>(2, 64, 4, 16, steps_a, 5, "HS 16 B 2");
    run_case<float>(1, 128, 2, 8, steps_b, 3, "HS 64 B 1");
    run_case<bf16>(1, 128, 2, 8, steps_b, 3, "HS 64 B 1");
    run_case<float>(1, 160, 1, 20, steps_c, 2, "HS 160 (> block) B 1");
    run_case<float>(1, 24, 3, 20, steps_c, 2, "HS 8 B 1");
    return test_finish("test_attention_kv_cuda");
}
