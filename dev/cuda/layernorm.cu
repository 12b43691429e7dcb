// Layernorm forward and backward: CPU reference (double), version 1 (forward: one thread per row),
// version 2 (production kernels of llmc/cuda/layernorm.cu via ops_cuda.h: a warp per row, 128-bit loads;
// backward with deterministic column sums for dweight / dbias). Check + timing.
//   make bench-cuda && build/cuda/dev/cuda/layernorm [N]
#include "common.cuh"

__global__ void layernorm_forward_v1(floatX* out, float* mean, float* rstd, const floatX* inp,
                                     const floatX* w, const floatX* b, int N, int C) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const floatX* x = inp + (size_t)n * C;
    float m = 0.0f, v = 0.0f;
    for (int c = 0; c < C; c++) m += __bfloat162float(x[c]);
    m /= C;
    for (int c = 0; c < C; c++) { float d = __bfloat162float(x[c]) - m; v += d * d; }
    float rs = rsqrtf(v / C + 1e-5f);
    for (int c = 0; c < C; c++)
        out[(size_t)n * C + c] = __float2bfloat16((__bfloat162float(x[c]) - m) * rs * __bfloat162float(w[c]) + __bfloat162float(b[c]));
    mean[n] = m; rstd[n] = rs;
}

int main(int argc, char** argv) {
    int N = argc > 1 ? atoi(argv[1]) : 8 * 1024;
    const int C = 768;
    cuda_ops_init(0);
    report_begin("layernorm", cuda_ops_backend_name(), "N=%d C=%d", N, C);
    vecf x = dev_rand((size_t)N * C, 4.0f, 1), w = dev_rand(C, 2.0f, 2), b = dev_rand(C, 0.5f, 3), dy = dev_rand((size_t)N * C, 1.0f, 4);
    vecf y_ref((size_t)N * C), dx_ref((size_t)N * C), dw_ref(C, 0.0f), db_ref(C, 0.0f);
    std::vector<double> dw(C, 0.0), db(C, 0.0);
    for (int n = 0; n < N; n++) {
        const float* xr = &x[(size_t)n * C];
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += xr[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
        double rs = 1.0 / sqrt(v / C + 1e-5);
        double sg = 0, sgx = 0;
        for (int c = 0; c < C; c++) {
            double xh = (xr[c] - m) * rs, g = (double)w[c] * dy[(size_t)n * C + c];
            y_ref[(size_t)n * C + c] = (float)(xh * w[c] + b[c]);
            sg += g; sgx += g * xh;
            dw[c] += dy[(size_t)n * C + c] * xh; db[c] += dy[(size_t)n * C + c];
        }
        for (int c = 0; c < C; c++) {
            double xh = (xr[c] - m) * rs, g = (double)w[c] * dy[(size_t)n * C + c];
            dx_ref[(size_t)n * C + c] = (float)(rs * (g - sg / C - xh * sgx / C));
        }
    }
    for (int c = 0; c < C; c++) { dw_ref[c] = (float)dw[c]; db_ref[c] = (float)db[c]; }
    floatX *d_x = to_dev_bf16(x), *d_w = to_dev_bf16(w), *d_b = to_dev_bf16(b), *d_dy = to_dev_bf16(dy);
    floatX* d_y = (floatX*)cuda_ops_alloc((size_t)N * C * sizeof(floatX));
    floatX* d_dx = (floatX*)cuda_ops_alloc((size_t)N * C * sizeof(floatX));
    floatX* d_dw = (floatX*)cuda_ops_alloc(C * sizeof(floatX));
    floatX* d_db = (floatX*)cuda_ops_alloc(C * sizeof(floatX));
    float* d_mean = (float*)cuda_ops_alloc(N * sizeof(float));
    float* d_rstd = (float*)cuda_ops_alloc(N * sizeof(float));
    bool ok = true;
    const int block = 128, grid = (int)ceil_div(N, block);
    LAUNCH(layernorm_forward_v1, grid, block, 0, 0, d_y, d_mean, d_rstd, d_x, d_w, d_b, N, C);
    cudaCheck(cudaGetLastError());
    ok &= dev_check("forward v1", from_dev_bf16(d_y, (size_t)N * C), y_ref, 1e-2);
    cuda_layernorm_forward(d_y, d_mean, d_rstd, d_x, d_w, d_b, N, C);
    ok &= dev_check("forward v2 (production)", from_dev_bf16(d_y, (size_t)N * C), y_ref, 1e-2);
    cuda_ops_zero(d_dx, (size_t)N * C * sizeof(floatX)); cuda_ops_zero(d_dw, C * sizeof(floatX)); cuda_ops_zero(d_db, C * sizeof(floatX));
    cuda_layernorm_backward(d_dx, d_dw, d_db, d_dy, d_x, d_w, d_mean, d_rstd, N, C, 1);
    ok &= dev_check("backward dinp (production)", from_dev_bf16(d_dx, (size_t)N * C), dx_ref, 2e-2);
    ok &= dev_check("backward dweight (production)", from_dev_bf16(d_dw, C), dw_ref, 2e-2);
    ok &= dev_check("backward dbias (production)", from_dev_bf16(d_db, C), db_ref, 2e-2);
    double fb = 2.0 * N * C * sizeof(floatX);
    dev_report("forward v1", dev_time_ms([&] { LAUNCH(layernorm_forward_v1, grid, block, 0, 0, d_y, d_mean, d_rstd, d_x, d_w, d_b, N, C); }), fb);
    dev_report("forward v2 (production)", dev_time_ms([&] { cuda_layernorm_forward(d_y, d_mean, d_rstd, d_x, d_w, d_b, N, C); }), fb);
    dev_report("backward (production)", dev_time_ms([&] { cuda_layernorm_backward(d_dx, d_dw, d_db, d_dy, d_x, d_w, d_mean, d_rstd, N, C, 1); }), 3.0 * N * C * sizeof(floatX));
    cuda_ops_free(d_x); cuda_ops_free(d_w); cuda_ops_free(d_b); cuda_ops_free(d_dy); cuda_ops_free(d_y); cuda_ops_free(d_dx); cuda_ops_free(d_dw); cuda_ops_free(d_db);
    cuda_ops_free(d_mean); cuda_ops_free(d_rstd);
    printf("%s\n", ok ? "all versions match the CPU reference" : "MISMATCH");
    return ok ? 0 : 1;
}
