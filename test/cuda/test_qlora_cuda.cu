// The CUDA backend's NF4 ops (llmc/cuda/nf4_ops.cu: nf4_op_upload / nf4_dequantize_op, the
// ops.h interface QLoRA uses for its frozen weights) against the CPU dequantization: for row
// ranges of double-quantized [out, in] weights, the bf16 output equals nf4_dequantize_rows
// rounded to nearest even, bit for bit. Runs under the CUDA-on-CPU harness in CI and as-is on a GPU.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "llmc/cuda/nf4.cuh"
#include "ops/ops.h"
#include "base/bf16.h"
#include "base/rand.h"
#include "test/test.h"

static void check_rows(const NF4Tensor* t, const Nf4Op* op, int64_t r0, int64_t rows) {
    const int64_t cols = t->n / t->shape[0], count = rows * cols;
    float* want = (float*)mallocCheck((size_t)count * sizeof(float));
    nf4_dequantize_rows(t, r0, r0 + rows, want);
    floatX* d = NULL;
    cudaCheck(cudaMalloc((void**)&d, (size_t)count * sizeof(floatX)));
    nf4_dequantize_op(d, op, (size_t)r0, (size_t)rows);
    cudaCheck(cudaDeviceSynchronize());
    uint16_t* got = (uint16_t*)mallocCheck((size_t)count * sizeof(uint16_t));
    cudaCheck(cudaMemcpy(got, d, (size_t)count * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    for (int64_t i = 0; i < count; i++) bad += got[i] != bf16_from_f32(want[i]);
    TEST_CHECK(bad == 0, "[%lld x %lld] rows [%lld, +%lld): %lld of %lld bf16 values differ", (long long)t->shape[0],
               (long long)cols, (long long)r0, (long long)rows, (long long)bad, (long long)count);
    if (!bad) printf("ok   [%lld x %lld] rows [%lld, +%lld): bf16 == CPU dequant rounded\n", (long long)t->shape[0],
                     (long long)cols, (long long)r0, (long long)rows);
    cudaCheck(cudaFree(d));
    free(want); free(got);
}

int main(void) {
    // shapes of the tiny model's qkvw and fcprojw, and one whose row is not a whole block
    const int64_t shapes[3][2] = {{192, 64}, {64, 256}, {40, 72}};
    for (int s = 0; s < 3; s++) {
        const int64_t n = shapes[s][0] * shapes[s][1];
        float* w = (float*)mallocCheck((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) w[i] = 0.02f * (2.0f * rand_uniform(11, (uint64_t)s, (uint64_t)i) - 1.0f) * (1.0f + (float)(i % 97) / 13.0f);
        NF4Tensor t;
        nf4_quantize(&t, w, 2, shapes[s], 1);
        Nf4Op* op = nf4_op_upload(&t);
        TEST_CHECK(nf4_op_bytes(op) >= nf4_bytes(&t), "device bytes %zu >= %zu", nf4_op_bytes(op), nf4_bytes(&t));
        check_rows(&t, op, 0, shapes[s][0]);
        check_rows(&t, op, 1, shapes[s][0] / 2);
        check_rows(&t, op, shapes[s][0] - 1, 1);
        nf4_op_free(op);
        nf4_free(&t);
        free(w);
    }
    return test_finish("test_qlora_cuda");
}
