// Encoder (token + position embedding) forward and backward: CPU reference, version 1 (forward:
// one thread per element), version 2 (production kernels of llmc/cuda/encoder.cu via ops_cuda.h; the
// backward is deterministic: tokens bucketed per vocabulary row, no atomics). Check + timing.
//   make bench-cuda && build/cuda/dev/cuda/encoder [B T]
#include "common.cuh"

__global__ void encoder_forward_v1(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    int c = (int)(i % C);
    size_t bt = i / C;
    int t = (int)(bt % T);
    out[i] = __float2bfloat16(__bfloat162float(wte[(size_t)inp[bt] * C + c]) + __bfloat162float(wpe[(size_t)t * C + c]));
}

int main(int argc, char** argv) {
    int B = argc > 2 ? atoi(argv[1]) : 8, T = argc > 2 ? atoi(argv[2]) : 1024;
    const int C = 768, V = 50257, Vp = 50304;
    const size_t N = (size_t)B * T;
    cuda_ops_init(0);
    report_begin("encoder", cuda_ops_backend_name(), "B=%d T=%d C=%d", B, T, C);
    vecf wte = dev_rand((size_t)Vp * C, 0.2f, 1), wpe = dev_rand((size_t)T * C, 0.2f, 2), dout = dev_rand(N * C, 1.0f, 3);
    std::vector<int> tok(N);
    uint32_t s = 7;
    for (size_t i = 0; i < N; i++) { s = s * 1664525u + 1013904223u; tok[i] = (int)((s >> 8) % (uint32_t)(i % 3 ? V : 100)); } // repeats
    vecf out_ref(N * C), dwte_ref((size_t)Vp * C, 0.0f), dwpe_ref((size_t)T * C, 0.0f);
    for (size_t bt = 0; bt < N; bt++) {
        int t = (int)(bt % T);
        for (int c = 0; c < C; c++) {
            out_ref[bt * C + c] = wte[(size_t)tok[bt] * C + c] + wpe[(size_t)t * C + c];
            dwte_ref[(size_t)tok[bt] * C + c] += dout[bt * C + c];
            dwpe_ref[(size_t)t * C + c] += dout[bt * C + c];
        }
    }
    floatX *d_wte = to_dev_bf16(wte), *d_wpe = to_dev_bf16(wpe), *d_dout = to_dev_bf16(dout);
    floatX* d_out = (floatX*)cuda_ops_alloc(N * C * sizeof(floatX));
    floatX* d_dwte = (floatX*)cuda_ops_alloc((size_t)Vp * C * sizeof(floatX));
    floatX* d_dwpe = (floatX*)cuda_ops_alloc((size_t)T * C * sizeof(floatX));
    int* d_tok = (int*)cuda_ops_alloc(N * sizeof(int));
    cuda_ops_to_device(d_tok, tok.data(), N * sizeof(int));
    bool ok = true;
    const int block = 256, grid = (int)ceil_div(N * C, (size_t)block);
    LAUNCH(encoder_forward_v1, grid, block, 0, 0, d_out, d_tok, d_wte, d_wpe, B, T, C);
    cudaCheck(cudaGetLastError());
    ok &= dev_check("forward v1", from_dev_bf16(d_out, N * C), out_ref, 1e-2);
    cuda_encoder_forward(d_out, d_tok, d_wte, d_wpe, NULL, B, T, C);
    ok &= dev_check("forward v2 (production)", from_dev_bf16(d_out, N * C), out_ref, 1e-2);
    cuda_ops_zero(d_dwte, (size_t)Vp * C * sizeof(floatX));
    cuda_ops_zero(d_dwpe, (size_t)T * C * sizeof(floatX));
    cuda_encoder_backward(d_dwte, d_dwpe, d_dout, tok.data(), NULL, B, T, C);
    ok &= dev_check("backward dwte (production)", from_dev_bf16(d_dwte, (size_t)Vp * C), dwte_ref, 2e-2);
    ok &= dev_check("backward dwpe (production)", from_dev_bf16(d_dwpe, (size_t)T * C), dwpe_ref, 2e-2);
    double fb = 3.0 * N * C * sizeof(floatX);
    dev_report("forward v1", dev_time_ms([&] { LAUNCH(encoder_forward_v1, grid, block, 0, 0, d_out, d_tok, d_wte, d_wpe, B, T, C); }), fb);
    dev_report("forward v2 (production)", dev_time_ms([&] { cuda_encoder_forward(d_out, d_tok, d_wte, d_wpe, NULL, B, T, C); }), fb);
    dev_report("backward (production)", dev_time_ms([&] { cuda_encoder_backward(d_dwte, d_dwpe, d_dout, tok.data(), NULL, B, T, C); }), 3.0 * N * C * sizeof(floatX));
    cuda_ops_free(d_wte); cuda_ops_free(d_wpe); cuda_ops_free(d_dout); cuda_ops_free(d_out); cuda_ops_free(d_dwte); cuda_ops_free(d_dwpe); cuda_ops_free(d_tok);
    printf("%s\n", ok ? "all versions match the CPU reference" : "MISMATCH");
    return ok ? 0 : 1;
}
