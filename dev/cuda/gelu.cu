// GELU (tanh approximation) forward and backward: CPU reference, version 1 (one thread per
// element, scalar bf16 loads), version 2 (the production kernels of llmc/cuda/elementwise.cu through
// ops_cuda.h: 128-bit loads/stores). Check + timing. `make bench-cuda && build/cuda/dev/cuda/gelu [n]`
#include "common.cuh"

static float gelu_ref(float x) {
    const float s = 0.7978845608028654f; // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(s * (x + 0.044715f * x * x * x)));
}
static float gelu_grad_ref(float x) {
    const float s = 0.7978845608028654f;
    float u = s * (x + 0.044715f * x * x * x), t = tanhf(u);
    float du = s * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

__global__ void gelu_forward_v1(floatX* out, const floatX* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = __bfloat162float(inp[i]);
        float s = 0.7978845608028654f;
        out[i] = __float2bfloat16(0.5f * x * (1.0f + tanhf(s * (x + 0.044715f * x * x * x))));
    }
}

int main(int argc, char** argv) {
    size_t n = argc > 1 ? (size_t)atoll(argv[1]) : (size_t)8 * 1024 * 3072; // GPT-2 124M fch, B=8 T=1024
    cuda_ops_init(0);
    report_begin("gelu", cuda_ops_backend_name(), "n=%zu", n);
    vecf x = dev_rand(n, 8.0f, 1), dy = dev_rand(n, 2.0f, 2);
    vecf y_ref(n), dx_ref(n);
    for (size_t i = 0; i < n; i++) { y_ref[i] = gelu_ref(x[i]); dx_ref[i] = gelu_grad_ref(x[i]) * dy[i]; }
    floatX* d_x = to_dev_bf16(x);
    floatX* d_dy = to_dev_bf16(dy);
    floatX* d_y = (floatX*)cuda_ops_alloc(n * sizeof(floatX));
    floatX* d_dx = (floatX*)cuda_ops_alloc(n * sizeof(floatX));
    bool ok = true;
    const int block = 256;
    const int grid = (int)ceil_div(n, (size_t)block);
    LAUNCH(gelu_forward_v1, grid, block, 0, 0, d_y, d_x, n);
    cudaCheck(cudaGetLastError());
    ok &= dev_check("forward v1", from_dev_bf16(d_y, n), y_ref, 1e-2);
    cuda_gelu_forward(d_y, d_x, n);
    ok &= dev_check("forward v2 (production)", from_dev_bf16(d_y, n), y_ref, 1e-2);
    cuda_gelu_backward(d_dx, d_x, d_dy, n, 0);   // writes: d_dx is not zeroed first
    ok &= dev_check("backward (production)", from_dev_bf16(d_dx, n), dx_ref, 1e-2);
    double fb = 2.0 * n * sizeof(floatX);
    dev_report("forward v1", dev_time_ms([&] { LAUNCH(gelu_forward_v1, grid, block, 0, 0, d_y, d_x, n); }), fb);
    dev_report("forward v2 (production)", dev_time_ms([&] { cuda_gelu_forward(d_y, d_x, n); }), fb);
    dev_report("backward (production)", dev_time_ms([&] { cuda_gelu_backward(d_dx, d_x, d_dy, n, 0); }), 4.0 * n * sizeof(floatX));
    cuda_ops_free(d_x); cuda_ops_free(d_dy); cuda_ops_free(d_y); cuda_ops_free(d_dx);
    printf("%s\n", ok ? "all versions match the CPU reference" : "MISMATCH");
    return ok ? 0 : 1;
}
