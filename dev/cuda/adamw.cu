// AdamW with fp32 master weights and stochastic rounding to bf16 params: CPU reference (fp32,
// PyTorch semantics), version 1 (one thread per element, round-to-nearest bf16), version 2 (the
// production kernel of llmc/cuda/ops_cuda.cu via ops.h: 8 elements per thread, 128-bit accesses,
// stochastic rounding). Check (master exactly-ish, params within one bf16 ulp) + timing.
//   make bench-cuda && build/cuda/dev/cuda/adamw [n]
#include "common.cuh"

__global__ void adamw_v1(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                         float lr, float b1, float b2, float eps, float wd, float bc1, float bc2) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = __bfloat162float(grads[i]);
    float mi = b1 * m[i] + (1.0f - b1) * g, vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi; v[i] = vi;
    float p = master[i];
    p -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p);
    master[i] = p;
    params[i] = __float2bfloat16(p);
}

int main(int argc, char** argv) {
    size_t n = argc > 1 ? (size_t)atoll(argv[1]) : (size_t)124 << 20;
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    const int t = 3;
    ops_init(0);
    report_begin("adamw", ops_backend_name(), "n=%zu", n);
    vecf p = dev_rand(n, 0.2f, 1), g = dev_rand(n, 0.02f, 2), m0 = dev_rand(n, 0.01f, 3), v0 = dev_rand(n, 1e-4f, 4);
    for (size_t i = 0; i < n; i++) v0[i] = fabsf(v0[i]);
    float bc1 = (float)(1.0 - pow(b1, t)), bc2 = (float)(1.0 - pow(b2, t));
    vecf master_ref(n), p_bf(n);
    for (size_t i = 0; i < n; i++) {
        float mi = b1 * m0[i] + (1.0f - b1) * g[i], vi = b2 * v0[i] + (1.0f - b2) * g[i] * g[i];
        master_ref[i] = p[i] - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p[i]);
    }
    floatX *d_p = to_dev_bf16(p), *d_g = to_dev_bf16(g);
    float *d_master = to_dev_f32(p), *d_m = to_dev_f32(m0), *d_v = to_dev_f32(v0);
    bool ok = true;
    const int block = 256, grid = (int)ceil_div(n, (size_t)block);
    LAUNCH(adamw_v1, grid, block, 0, 0, d_p, d_master, d_g, d_m, d_v, n, lr, b1, b2, eps, wd, bc1, bc2);
    cudaCheck(cudaGetLastError());
    ok &= dev_check("v1 master", from_dev_f32(d_master, n), master_ref, 1e-5);
    ok &= dev_check("v1 params (bf16)", from_dev_bf16(d_p, n), master_ref, 1e-2);
    // reset the state and run the production kernel
    ops_upload_f32(d_p, p.data(), n);
    ops_to_device(d_master, p.data(), n * sizeof(float));
    ops_to_device(d_m, m0.data(), n * sizeof(float));
    ops_to_device(d_v, v0.data(), n * sizeof(float));
    adamw_update(d_p, d_master, d_g, d_m, d_v, n, lr, b1, b2, eps, wd, 1.0f, t, 1234u);
    ok &= dev_check("v2 master (production)", from_dev_f32(d_master, n), master_ref, 1e-5);
    ok &= dev_check("v2 params (production, stochastic)", from_dev_bf16(d_p, n), master_ref, 1e-2);
    double bytes = (double)n * (2 * sizeof(floatX) + 6 * sizeof(float)); // params, grads in/out; master, m, v in/out
    dev_report("v1", dev_time_ms([&] { LAUNCH(adamw_v1, grid, block, 0, 0, d_p, d_master, d_g, d_m, d_v, n, lr, b1, b2, eps, wd, bc1, bc2); }), bytes);
    dev_report("v2 (production)", dev_time_ms([&] { adamw_update(d_p, d_master, d_g, d_m, d_v, n, lr, b1, b2, eps, wd, 1.0f, t, 1234u); }), bytes);
    ops_free(d_p); ops_free(d_g); ops_free(d_master); ops_free(d_m); ops_free(d_v);
    printf("%s\n", ok ? "all versions match the CPU reference" : "MISMATCH");
    return ok ? 0 : 1;
}
