// NF4 dequantization kernels (llmc/cuda/nf4.cu) against the CPU op (llmc/ops/nf4.c), bit for bit:
// fp32 output equal to nf4_dequantize_range, bf16 output equal to that value rounded to nearest
// even. Inputs are the bitsandbytes reference cases (test/ref/nf4), quantized on the CPU with and
// without double quantization; ranges exercise the vectorised path, its tail, unaligned starts
// and an unaligned output pointer. Runs under the CUDA-on-CPU harness in CI and as-is on a GPU.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "llmc/cuda/nf4.cuh"
#include "ops/ops.h"
#include "base/bf16.h"
#include "base/safetensors.h"
#include "test/test.h"

static void check_range(const NF4Tensor* t, const NF4Device* d, int64_t begin, int64_t end, int out_shift,
                        const char* label) {
    const int64_t count = end - begin;
    float* want = (float*)mallocCheck((size_t)(count + 1) * sizeof(float));
    nf4_dequantize_range(t, begin, end, want);

    float* d_out = NULL;
    bf16* d_out16 = NULL;
    cudaCheck(cudaMalloc((void**)&d_out, (size_t)(count + 1) * sizeof(float)));
    cudaCheck(cudaMalloc((void**)&d_out16, (size_t)(count + 1) * sizeof(bf16)));
    nf4_dequantize_cuda(d_out + out_shift, d, begin, end, 0);
    nf4_dequantize_cuda(d_out16 + out_shift, d, begin, end, 0);
    cudaCheck(cudaDeviceSynchronize());
    float* got = (float*)mallocCheck((size_t)count * sizeof(float));
    uint16_t* got16 = (uint16_t*)mallocCheck((size_t)count * sizeof(uint16_t));
    cudaCheck(cudaMemcpy(got, d_out + out_shift, (size_t)count * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(got16, d_out16 + out_shift, (size_t)count * sizeof(bf16), cudaMemcpyDeviceToHost));

    int64_t bad = 0, bad16 = 0, first = -1, first16 = -1;
    for (int64_t i = 0; i < count; i++) {
        uint32_t a, b;
        memcpy(&a, &got[i], 4);
        memcpy(&b, &want[i], 4);
        if (a != b) { if (first < 0) first = i; bad++; }
        if (got16[i] != bf16_from_f32(want[i])) { if (first16 < 0) first16 = i; bad16++; }
    }
    TEST_CHECK(bad == 0, "%s fp32 [%lld, %lld): %lld differ, first [%lld] got %.9g want %.9g", label,
               (long long)begin, (long long)end, (long long)bad, (long long)first,
               first >= 0 ? got[first] : 0.0, first >= 0 ? want[first] : 0.0);
    TEST_CHECK(bad16 == 0, "%s bf16 [%lld, %lld): %lld differ, first [%lld]", label, (long long)begin,
               (long long)end, (long long)bad16, (long long)first16);
    if (!bad && !bad16)
        printf("ok   %s [%lld, %lld)%s: fp32 and bf16 bit-identical to the CPU\n", label, (long long)begin,
               (long long)end, out_shift ? " (unaligned output)" : "");
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_out16));
    free(want);
    free(got);
    free(got16);
}

// ZeRO 3 (llmc/dist/fsdp_nf4.c): the tensor's packed image (llmc/ops/nf4.h) gathered into a buffer after
// another tensor's image, and viewed there: by nf4_device_view (the kernels' arguments) and by the
// backend handle of nf4_op_view / nf4_op_bind (what the linear layers dequantize through).
static void check_image_view(const NF4Tensor* t, const char* label) {
    const size_t bytes = nf4_device_bytes(t), at = 48; // images in a slot start at multiples of 16
    uint8_t* host = (uint8_t*)mallocCheck(bytes);
    nf4_image_pack(t, host);
    uint8_t* slot = NULL;
    cudaCheck(cudaMalloc((void**)&slot, at + bytes));
    cudaCheck(cudaMemcpy(slot + at, host, bytes, cudaMemcpyHostToDevice));
    NF4Device v;
    nf4_device_view(&v, t, slot + at);
    char vlabel[128];
    snprintf(vlabel, sizeof(vlabel), "%s, viewed in a gathered image", label);
    check_range(t, &v, 0, t->n, 0, vlabel);
    // the op: rows of the tensor as [shape[0], n / shape[0]], in bf16
    const int64_t rows = t->ndim >= 1 && t->shape[0] > 0 ? t->shape[0] : 1, cols = t->n / rows;
    Nf4Op* op = nf4_op_view(t);
    nf4_op_bind(op, slot + at);
    bf16* d_out = NULL;
    cudaCheck(cudaMalloc((void**)&d_out, (size_t)t->n * sizeof(bf16)));
    nf4_dequantize_op(d_out, op, 0, (size_t)rows);
    cudaCheck(cudaDeviceSynchronize());
    uint16_t* got = (uint16_t*)mallocCheck((size_t)t->n * sizeof(uint16_t));
    float* want = (float*)mallocCheck((size_t)t->n * sizeof(float));
    cudaCheck(cudaMemcpy(got, d_out, (size_t)t->n * sizeof(bf16), cudaMemcpyDeviceToHost));
    nf4_dequantize_range(t, 0, rows * cols, want);
    int64_t bad = 0;
    for (int64_t i = 0; i < rows * cols; i++) bad += got[i] != bf16_from_f32(want[i]);
    TEST_CHECK(bad == 0, "%s: nf4_op_view / nf4_op_bind: %lld of %lld weights differ", label, (long long)bad, (long long)(rows * cols));
    TEST_CHECK(nf4_op_bytes(op) == 0, "%s: a view owns %zu device bytes", label, nf4_op_bytes(op));
    nf4_op_free(op);
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(slot));
    free(host); free(got); free(want);
}

static void test_case(StFile* f, const char* name) {
    char key[128];
    snprintf(key, sizeof(key), "%s.input", name);
    const StTensor* in = st_find(f, key);
    if (!in) { fprintf(stderr, "FAIL reference lacks %s\n", key); exit(1); }
    float* x = (float*)mallocCheck(in->numel * sizeof(float));
    st_read_f32(f, in, x);
    int64_t shape[NF4_MAX_DIMS];
    for (int d = 0; d < in->ndim; d++) shape[d] = in->shape[d];
    for (int dq = 0; dq <= 1; dq++) {
        char label[96];
        snprintf(label, sizeof(label), "%s %s", name, dq ? "double-quant" : "plain");
        NF4Tensor t;
        NF4Device d;
        nf4_quantize(&t, x, in->ndim, shape, dq);
        nf4_device_upload(&d, &t);
        const int64_t n = t.n;
        check_range(&t, &d, 0, n, 0, label);
        const int small = n <= 50000;  // keeps the harness run short: the big case does less
        if (n > 20 && small) check_range(&t, &d, 8, n - 5, 0, label);   // vector path + scalar tail
        if (n > 400) check_range(&t, &d, 37, 337, 0, label);            // start inside a byte and a block
        if (n > 100 && small) check_range(&t, &d, 16, n, 1, label);     // output not 16-byte aligned
        if (t.ndim == 2 && t.shape[0] >= 48) {                    // a row range, as per-layer dequant
            const int64_t row = t.n / t.shape[0];
            check_range(&t, &d, 16 * row, 48 * row, 0, label);
        }
        // tied directly to bitsandbytes' own dequantization too
        snprintf(key, sizeof(key), dq ? "%s.dq.dequant" : "%s.dequant", name);
        const StTensor* rt = st_find(f, key);
        if (rt) {
            float* ref = (float*)mallocCheck(rt->numel * sizeof(float));
            st_read_f32(f, rt, ref);
            float* d_out = NULL;
            cudaCheck(cudaMalloc((void**)&d_out, (size_t)rt->numel * sizeof(float)));
            nf4_dequantize_cuda(d_out, &d, 0, (int64_t)rt->numel, 0);
            float* got = (float*)mallocCheck(rt->numel * sizeof(float));
            cudaCheck(cudaMemcpy(got, d_out, rt->numel * sizeof(float), cudaMemcpyDeviceToHost));
            TEST_CHECK(memcmp(got, ref, rt->numel * sizeof(float)) == 0, "%s: kernel output differs from bitsandbytes' dequantize_4bit", label);
            cudaCheck(cudaFree(d_out));
            free(ref);
            free(got);
        }
        check_image_view(&t, label);
        nf4_device_free(&d);
        nf4_free(&t);
    }
    free(x);
}

int main(void) {
    StFile f;
    st_open(&f, "test/ref/nf4/nf4_ref.safetensors");
    static const char* cases[] = {"normal", "edge", "len1", "len63", "len65", "len1000", "real"};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) test_case(&f, cases[i]);
    st_close(&f);
    return test_finish("test_nf4_cuda");
}
