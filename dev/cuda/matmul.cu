// Matmul forward (+ bias, + GELU epilogue) and backward: CPU reference (double, small slice of rows
// checked to keep the CPU side quick), version 1 (one thread per output element, fp32
// accumulation), version 2 (production: cuBLASLt through llmc/cuda/matmul.cu + gemm.cu, with the
// BIAS / GELU_AUX_BIAS epilogues). Check + timing in TFLOP/s.
//   make bench-cuda && build/cuda/dev/cuda/matmul [N C OC]
#include "common.cuh"

__global__ void matmul_forward_v1(floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int C, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x, n = blockIdx.y;
    if (o >= OC) return;
    float s = bias ? __bfloat162float(bias[o]) : 0.0f;
    for (int c = 0; c < C; c++) s += __bfloat162float(inp[(size_t)n * C + c]) * __bfloat162float(w[(size_t)o * C + c]);
    out[(size_t)n * OC + o] = __float2bfloat16(s);
}

static float gelu_ref(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))); }

int main(int argc, char** argv) {
    int N = argc > 3 ? atoi(argv[1]) : 8 * 1024, C = argc > 3 ? atoi(argv[2]) : 768, OC = argc > 3 ? atoi(argv[3]) : 3072;
    const int NCHK = 64; // rows checked against the CPU
    cuda_ops_init(0);
    report_begin("matmul", cuda_ops_backend_name(), "N=%d C=%d OC=%d", N, C, OC);
    vecf x = dev_rand((size_t)N * C, 2.0f, 1), w = dev_rand((size_t)OC * C, 0.1f, 2), b = dev_rand(OC, 0.2f, 3);
    vecf dy = dev_rand((size_t)N * OC, 1.0f, 4);
    vecf y_ref((size_t)NCHK * OC), g_ref((size_t)NCHK * OC), dx_ref((size_t)NCHK * C), dw_ref((size_t)OC * 8), db_ref(OC);
    for (int n = 0; n < NCHK; n++)
        for (int o = 0; o < OC; o++) {
            double s = b[o];
            for (int c = 0; c < C; c++) s += (double)x[(size_t)n * C + c] * w[(size_t)o * C + c];
            y_ref[(size_t)n * OC + o] = (float)s; g_ref[(size_t)n * OC + o] = gelu_ref((float)s);
        }
    for (int n = 0; n < NCHK; n++)
        for (int c = 0; c < C; c++) {
            double s = 0; for (int o = 0; o < OC; o++) s += (double)dy[(size_t)n * OC + o] * w[(size_t)o * C + c];
            dx_ref[(size_t)n * C + c] = (float)s;
        }
    for (int o = 0; o < OC; o++) {   // dweight: the first 8 input columns of every row; dbias
        double sb = 0;
        for (int n = 0; n < N; n++) sb += dy[(size_t)n * OC + o];
        db_ref[o] = (float)sb;
        for (int c = 0; c < 8; c++) {
            double s = 0; for (int n = 0; n < N; n++) s += (double)dy[(size_t)n * OC + o] * x[(size_t)n * C + c];
            dw_ref[(size_t)o * 8 + c] = (float)s;
        }
    }
    floatX *d_x = to_dev_bf16(x), *d_w = to_dev_bf16(w), *d_b = to_dev_bf16(b), *d_dy = to_dev_bf16(dy);
    floatX* d_y = (floatX*)cuda_ops_alloc((size_t)N * OC * sizeof(floatX));
    floatX* d_g = (floatX*)cuda_ops_alloc((size_t)N * OC * sizeof(floatX));
    floatX* d_dx = (floatX*)cuda_ops_alloc((size_t)N * C * sizeof(floatX));
    floatX* d_dw = (floatX*)cuda_ops_alloc((size_t)OC * C * sizeof(floatX));
    floatX* d_db = (floatX*)cuda_ops_alloc(OC * sizeof(floatX));
    auto rows = [&](const floatX* d, int nrows, int cols) { return from_dev_bf16(d, (size_t)nrows * cols); };
    bool ok = true;
    dim3 grid((unsigned)ceil_div(OC, 256), (unsigned)N);
    LAUNCH(matmul_forward_v1, grid, 256, 0, 0, d_y, d_x, d_w, d_b, N, C, OC);
    cudaCheck(cudaGetLastError());
    ok &= dev_check("forward v1", rows(d_y, NCHK, OC), y_ref, 1e-2);
    cuda_matmul_forward(d_y, NULL, d_x, d_w, d_b, N, C, OC);
    ok &= dev_check("forward v2 (cuBLASLt, bias epilogue)", rows(d_y, NCHK, OC), y_ref, 1e-2);
    cuda_matmul_forward(d_y, d_g, d_x, d_w, d_b, N, C, OC);
    ok &= dev_check("forward v2 pre-GELU output", rows(d_y, NCHK, OC), y_ref, 1e-2);
    ok &= dev_check("forward v2 GELU epilogue", rows(d_g, NCHK, OC), g_ref, 1e-2);
    cuda_ops_zero(d_dx, (size_t)N * C * sizeof(floatX)); cuda_ops_zero(d_dw, (size_t)OC * C * sizeof(floatX)); cuda_ops_zero(d_db, OC * sizeof(floatX));
    cuda_matmul_backward(d_dx, d_dw, d_db, d_dy, d_x, d_w, N, C, OC, 1);
    ok &= dev_check("backward dinp (production)", rows(d_dx, NCHK, C), dx_ref, 2e-2);
    vecf dw_all = from_dev_bf16(d_dw, (size_t)OC * C), dw8((size_t)OC * 8);
    for (int o = 0; o < OC; o++) for (int c = 0; c < 8; c++) dw8[(size_t)o * 8 + c] = dw_all[(size_t)o * C + c];
    ok &= dev_check("backward dweight (production)", dw8, dw_ref, 2e-2);
    ok &= dev_check("backward dbias (production)", from_dev_bf16(d_db, OC), db_ref, 2e-2);
    double flops = 2.0 * N * C * OC;
    auto tf = [&](const char* what, float ms, double f) { report_time(what, ms, 0.0, f); };
    tf("forward v1", dev_time_ms([&] { LAUNCH(matmul_forward_v1, grid, 256, 0, 0, d_y, d_x, d_w, d_b, N, C, OC); }, 3), flops);
    tf("forward v2 (cuBLASLt + bias)", dev_time_ms([&] { cuda_matmul_forward(d_y, NULL, d_x, d_w, d_b, N, C, OC); }), flops);
    tf("forward v2 (cuBLASLt + bias + GELU)", dev_time_ms([&] { cuda_matmul_forward(d_y, d_g, d_x, d_w, d_b, N, C, OC); }), flops);
    tf("backward (dinp + dweight + dbias)", dev_time_ms([&] { cuda_matmul_backward(d_dx, d_dw, d_db, d_dy, d_x, d_w, N, C, OC, 0); }), 2.0 * flops);
    cuda_ops_free(d_x); cuda_ops_free(d_w); cuda_ops_free(d_b); cuda_ops_free(d_dy); cuda_ops_free(d_y); cuda_ops_free(d_g); cuda_ops_free(d_dx); cuda_ops_free(d_dw); cuda_ops_free(d_db);
    printf("%s\n", ok ? "all versions match the CPU reference" : "MISMATCH");
    return ok ? 0 : 1;
}
