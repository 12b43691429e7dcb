// Times every op of the CUDA backend at GPT-2 124M training shapes (B=8, T=1024 by default) and
// prints milliseconds per call and the effective memory bandwidth (bytes each op must move at
// least once / time) or TFLOP/s for the GEMMs. Needs a GPU; not a test. `--small` runs tiny
// shapes once each: `make test` runs it that way under the CUDA-on-CPU harness with ASan, so every
// buffer here is known to be large enough before the program meets a GPU.
//
//   make bench-cuda && build/cuda/dev/cuda/bench_ops [--batch B] [--seq T] [--small]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <cuda_runtime.h>
#include "common.cuh"   // dev/cuda: dev_time_ms, report.cuh

static int g_reps;   // --reps / --small: the same count for every op (0: each op's default)

// milliseconds per call of fn: one warm-up call, then `reps` timed ones (--reps overrides)
template <typename F>
static float time_ms(F fn, int reps = 20) { return dev_time_ms(fn, g_reps > 0 ? g_reps : reps); }

// one `time` line (report.cuh): the GEMMs by their FLOPs, the other ops by their bytes
static void report(const char* name, float ms, double bytes, double flops) { report_time(name, ms, bytes, flops); }

static floatX* rand_bf16(size_t n, float scale) {
    std::vector<float> h(n);
    uint32_t s = 12345u + (uint32_t)n;
    for (size_t i = 0; i < n; i++) { s = s * 1664525u + 1013904223u; h[i] = scale * ((s >> 8) * (1.0f / 16777216.0f) - 0.5f); }
    floatX* d = (floatX*)cuda_ops_alloc(n * sizeof(floatX));
    cuda_ops_upload_f32(d, h.data(), n);
    return d;
}

static void usage(int code) {
    printf("usage: bench_ops [--batch B] [--seq T] [--small] [--reps N]\n"
           "  --batch B   batch size (default 8)\n"
           "  --seq T     sequence length (default 1024)\n"
           "  --small     tiny shapes (B=2 T=64 C=64 NH=4 V=1000, AdamW over 64Ki elements), one call each\n"
           "  --reps N    timed calls per op (default 20, 3-5 for the slow ones)\n");
    exit(code);
}

static int int_arg(int argc, char** argv, int* i) {
    if (*i + 1 >= argc) { fprintf(stderr, "bench_ops: %s needs a value\n", argv[*i]); usage(2); }
    int v = atoi(argv[++*i]);
    if (v <= 0) { fprintf(stderr, "bench_ops: %s %s: expected a positive integer\n", argv[*i - 1], argv[*i]); usage(2); }
    return v;
}

int main(int argc, char** argv) {
    int B = 8, T = 1024, C = 768, NH = 12, V = 50257, Vp = 50304;
    size_t np = (size_t)124 << 20;   // AdamW over ~124M parameters
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch")) B = int_arg(argc, argv, &i);
        else if (!strcmp(argv[i], "--seq")) T = int_arg(argc, argv, &i);
        else if (!strcmp(argv[i], "--reps")) g_reps = int_arg(argc, argv, &i);
        else if (!strcmp(argv[i], "--small")) { B = 2; T = 64; C = 64; NH = 4; V = 1000; Vp = 1024; np = (size_t)1 << 16; g_reps = 1; }
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) usage(0);
        else { fprintf(stderr, "bench_ops: unknown argument %s\n", argv[i]); usage(2); }
    }
    const int N = B * T;
    cuda_ops_init(0);
    report_begin("bench_ops", cuda_ops_backend_name(), "B=%d T=%d C=%d NH=%d Vp=%d, AdamW over %zu", B, T, C, NH, Vp, np);
    const double bf = sizeof(floatX);

    floatX* wte = rand_bf16((size_t)Vp * C, 0.1f);
    floatX* wpe = rand_bf16((size_t)T * C, 0.1f);
    floatX* x = rand_bf16((size_t)N * C, 1.0f);
    floatX* y = rand_bf16((size_t)N * C, 1.0f);
    floatX* out = rand_bf16((size_t)N * 4 * C, 1.0f);
    floatX* out2 = rand_bf16((size_t)N * 4 * C, 1.0f);
    floatX* qkv = rand_bf16((size_t)N * 3 * C, 1.0f);
    floatX* dqkv = rand_bf16((size_t)N * 3 * C, 0.0f);
    floatX* w = rand_bf16((size_t)4 * C * C, 0.02f);
    floatX* dw = rand_bf16((size_t)4 * C * C, 0.0f);
    floatX* dwte = rand_bf16((size_t)Vp * C, 0.0f);   // token ids reach V - 1: a row per vocab entry
    floatX* dwpe = rand_bf16((size_t)T * C, 0.0f);
    floatX* bias = rand_bf16(4 * C, 0.02f);
    floatX* dbias = rand_bf16(4 * C, 0.0f);
    floatX* lnw = rand_bf16(C, 1.0f);
    floatX* lnb = rand_bf16(C, 0.1f);
    floatX* logits = rand_bf16((size_t)N * Vp, 1.0f);
    float* mean = (float*)cuda_ops_alloc(N * sizeof(float));
    float* rstd = (float*)cuda_ops_alloc(N * sizeof(float));
    float* lse = (float*)cuda_ops_alloc((size_t)B * NH * T * sizeof(float));
    float* losses = (float*)cuda_ops_alloc(N * sizeof(float));
    floatX* params = (floatX*)cuda_ops_alloc(np * sizeof(floatX));
    floatX* grads = (floatX*)cuda_ops_alloc(np * sizeof(floatX));
    float* master = (float*)cuda_ops_alloc(np * sizeof(float));
    float* m = (float*)cuda_ops_alloc(np * sizeof(float));
    float* v = (float*)cuda_ops_alloc(np * sizeof(float));
    cuda_ops_zero(params, np * sizeof(floatX)); cuda_ops_zero(grads, np * sizeof(floatX));
    cuda_ops_zero(master, np * sizeof(float)); cuda_ops_zero(m, np * sizeof(float)); cuda_ops_zero(v, np * sizeof(float));
    std::vector<int> tok(N);
    for (int i = 0; i < N; i++) tok[i] = (i * 7919) % V;
    int* dtok = (int*)cuda_ops_alloc(N * sizeof(int));
    cuda_ops_to_device(dtok, tok.data(), N * sizeof(int));

    const double act = (double)N * C * bf;
    report("encoder_forward", time_ms([&] { cuda_encoder_forward(x, dtok, wte, wpe, NULL, B, T, C); }), 3 * act, 0);
    report("encoder_backward (dwte, dwpe)", time_ms([&] { cuda_encoder_backward(dwte, dwpe, x, tok.data(), NULL, B, T, C); }, 5), 3 * act, 0);
    report("layernorm_forward", time_ms([&] { cuda_layernorm_forward(y, mean, rstd, x, lnw, lnb, N, C); }), 2 * act, 0);
    report("fused_residual_layernorm_forward", time_ms([&] {
        cuda_fused_residual_layernorm_forward(out, y, mean, rstd, x, out2, lnw, lnb, N, C); }), 4 * act, 0);
    report("layernorm_backward", time_ms([&] {
        cuda_layernorm_backward(out, dbias, dbias + C, y, x, lnw, mean, rstd, N, C, 1); }), 4 * act, 0);
    report("matmul_forward c_fc (+bias +gelu)", time_ms([&] {
        cuda_matmul_forward(out, out2, x, w, bias, N, C, 4 * C); }), 0, 2.0 * N * C * 4 * C);
    report("matmul_backward c_fc (dinp dweight dbias)", time_ms([&] {
        cuda_matmul_backward(y, dw, dbias, out, x, w, N, C, 4 * C, 0); }), 0, 4.0 * N * C * 4 * C);
    // c_proj's backward through the GELU: dpre (N x 4C) from dout (N x C), DGELU epilogue
    report("matmul_backward_gelu c_proj (DGELU)", time_ms([&] {
        cuda_matmul_backward_gelu(out2, dw, dbias, y, out, out, w, N, 4 * C, C); }), 0, 4.0 * N * C * 4 * C);
    report("matmul_forward lm_head", time_ms([&] { cuda_matmul_forward(logits, NULL, x, wte, NULL, N, C, Vp); }, 5),
           0, 2.0 * N * C * Vp);
    report("gelu_forward (4C)", time_ms([&] { cuda_gelu_forward(out2, out, (size_t)N * 4 * C); }), 8 * act, 0);
    report("gelu_backward (4C)", time_ms([&] { cuda_gelu_backward(out2, out, out2, (size_t)N * 4 * C, 0); }), 12 * act, 0);
    report("residual_forward", time_ms([&] { cuda_residual_forward(y, x, y, (size_t)N * C); }), 3 * act, 0);
    report("attention_forward", time_ms([&] { cuda_attention_forward(y, lse, qkv, NULL, B, T, C, NH); }, 3), 4 * act, 0);
    report("attention_backward", time_ms([&] { cuda_attention_backward(dqkv, x, qkv, y, lse, NULL, B, T, C, NH, 0); }, 3), 8 * act, 0);
    report("fused_classifier (loss + dlogits)", time_ms([&] {
        cuda_fused_classifier(losses, logits, dtok, 1.0f / N, N, V, Vp); }, 5), 2.0 * N * Vp * bf, 0);
    report("adamw_update (all parameters, master)", time_ms([&] {
        cuda_adamw_update(params, master, grads, m, v, np, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, 7u); }, 5),
           np * (2 * bf + 2 * bf + 6 * 4.0), 0);
    report("sum_squares (all parameters)", time_ms([&] { (void)cuda_sum_squares(params, np); }, 5), np * bf, 0);

    floatX* bufs[] = {wte, wpe, x, y, out, out2, qkv, dqkv, w, dw, dwte, dwpe, bias, dbias, lnw, lnb, logits, params, grads};
    for (floatX* p : bufs) cuda_ops_free(p);
    float* fbufs[] = {mean, rstd, lse, losses, master, m, v};
    for (float* p : fbufs) cuda_ops_free(p);
    cuda_ops_free(dtok);
    return 0;
}
