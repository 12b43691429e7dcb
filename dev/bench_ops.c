// Times the CPU backend's ops at GPT-2 124M training shapes (B=4, T=256, C=768, NH=12,
// V=50257, Vp=50304) and prints ms per call and per training step (x12 layers where the op runs
// per layer). Not a test. Build: make bench-cpu; run: build/cpu/dev/bench_ops [threads] [B] [T] [fp32|bf16]
// (the last: the GEMM precision, ops_set_gemm_dtype; the matmuls and classifier_train use it)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops/ops.h"
#include "../llmc/base/timer.h"
#include "../llmc/base/rand.h"

#define BENCH_SEED 1

// Uniform in [-amp/2, amp/2), each buffer from its own stream of llmc/base/rand.h.
static float* rand_buf(size_t n, float amp) {
    static uint64_t stream = 0;
    stream++;
    float* p = (float*)ops_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = amp * (float)(rand_uniform(BENCH_SEED, stream, i) - 0.5);
    return p;
}

#define TIME_BEST(label, per_step, reps, stmt) do { \
        double best_ = 1e30; \
        for (int r_ = 0; r_ < (reps) + 1; r_++) { \
            double t0_ = timer_now_s(); stmt; double dt_ = timer_now_s() - t0_; \
            if (r_ > 0 && dt_ < best_) best_ = dt_; } \
        printf("%-34s %9.3f ms   x%-2d = %8.1f ms/step\n", label, best_ * 1e3, per_step, best_ * 1e3 * (per_step)); \
        total_ms += best_ * 1e3 * (per_step); } while (0)

int main(int argc, char** argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    int B = argc > 2 ? atoi(argv[2]) : 4;
    int T = argc > 3 ? atoi(argv[3]) : 256;
    const int C = 768, NH = 12, V = 50257, Vp = 50304, L = 12, reps = 5;
    ops_init(threads);
    if (argc > 4 && strcmp(argv[4], "bf16") == 0) ops_set_gemm_dtype(OPS_BF16);
    printf("backend: %s, B=%d T=%d C=%d NH=%d, %s GEMMs\n", ops_backend_name(), B, T, C, NH,
           ops_gemm_dtype() == OPS_BF16 ? "bf16" : "fp32");
    size_t N = (size_t)B * T;
    double total_ms = 0.0;
    float* qkv = rand_buf(N * 3 * C, 4.0f);
    float* out = rand_buf(N * C, 1.0f);
    float* dout = rand_buf(N * C, 1.0f);
    float* dqkv = rand_buf(N * 3 * C, 1.0f);
    float* lse = (float*)ops_alloc((size_t)B * NH * T * sizeof(float));
    TIME_BEST("attention_forward", L, reps, attention_forward(out, lse, qkv, NULL, B, T, C, NH));
    TIME_BEST("attention_backward", L, reps, attention_backward(dqkv, dout, qkv, out, lse, NULL, B, T, C, NH, 0));
    double att_flop = 4.0 * B * NH * (double)T * T / 2 * (C / NH);   // causal half, fwd
    printf("  (attention fwd ~%.2f GFLOP useful per call)\n", att_flop * 1e-9);

    float* x = rand_buf(N * C, 2.0f);
    float* y = rand_buf(N * C, 2.0f);
    float* w = rand_buf(C, 1.0f);
    float* bb = rand_buf(C, 1.0f);
    float* mean = (float*)ops_alloc(N * sizeof(float));
    float* rstd = (float*)ops_alloc(N * sizeof(float));
    float* dw = rand_buf(C, 1.0f);
    float* db = rand_buf(C, 1.0f);
    TIME_BEST("layernorm_forward", 2 * L + 1, reps, layernorm_forward(y, mean, rstd, x, w, bb, (int)N, C));
    TIME_BEST("fused_residual_layernorm_forward", 2 * L, reps,
              fused_residual_layernorm_forward(out, y, mean, rstd, x, dout, w, bb, (int)N, C));
    TIME_BEST("layernorm_backward", 2 * L + 1, reps,
              layernorm_backward(dqkv, dw, db, dout, x, w, mean, rstd, (int)N, C, 1));

    float* h = rand_buf(N * 4 * C, 4.0f);
    float* gh = rand_buf(N * 4 * C, 1.0f);
    float* dh = rand_buf(N * 4 * C, 1.0f);
    TIME_BEST("gelu_forward", L, reps, gelu_forward(gh, h, N * 4 * C));
    TIME_BEST("gelu_backward", L, reps, gelu_backward(dh, h, gh, N * 4 * C, 0));
    float* bias4 = rand_buf(4 * C, 1.0f);
    float* wfc = rand_buf((size_t)4 * C * C, 0.1f);
    TIME_BEST("matmul_forward fc +bias +gelu", L, reps, matmul_forward(h, gh, x, wfc, bias4, (int)N, C, 4 * C));
    TIME_BEST("matmul_forward fc +bias", 0, reps, matmul_forward(h, NULL, x, wfc, bias4, (int)N, C, 4 * C));
    TIME_BEST("matmul_backward fc (all grads)", L, reps,
              matmul_backward(x, wfc, bias4, gh, y, wfc, (int)N, C, 4 * C, 0));
    TIME_BEST("residual_forward", 2 * L, reps, residual_forward(out, x, y, N * C));

    float* logits = rand_buf(N * Vp, 8.0f);
    float* logits0 = (float*)ops_alloc(N * Vp * sizeof(float));
    memcpy(logits0, logits, N * Vp * sizeof(float));
    float* losses = (float*)ops_alloc(N * sizeof(float));
    int* targets = (int*)malloc(N * sizeof(int));
    for (size_t i = 0; i < N; i++) targets[i] = (int)(rand_u64(BENCH_SEED, 0, i) % (uint64_t)V);
    TIME_BEST("fused_classifier (with dlogits)", 1, reps,
              (memcpy(logits, logits0, N * Vp * sizeof(float)),
               fused_classifier(losses, logits, targets, 1.0f / (float)N, (int)N, V, Vp)));
    float* xcls = rand_buf(N * C, 2.0f);
    float* wte = rand_buf((size_t)Vp * C, 0.1f);
    float* dwte = rand_buf((size_t)Vp * C, 0.0f);
    float* scratch = (float*)ops_alloc((size_t)classifier_rows((int)N) * Vp * sizeof(float));
    TIME_BEST("classifier_train (lm_head fwd+bwd)", 1, reps,
              classifier_train(losses, dout, dwte, scratch, xcls, wte, NULL, targets, 1.0f / (float)N, (int)N, C, V, Vp));
    ops_free(xcls); ops_free(wte); ops_free(dwte); ops_free(scratch);
    size_t nparam = 124475904;
    float* p = rand_buf(nparam, 0.1f);
    float* g = rand_buf(nparam, 0.1f);
    float* m = rand_buf(nparam, 0.0f);
    float* v = rand_buf(nparam, 0.0f);
    TIME_BEST("adamw_update (124M)", 1, 2, adamw_update(p, NULL, g, m, v, nparam, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, 0));
    TIME_BEST("sum_squares (124M)", 1, 2, (void)sum_squares(g, nparam));
    printf("total of the ops above per step (fc matmul only, no other GEMMs): %.1f ms\n", total_ms);

    float* bufs[] = {qkv, out, dout, dqkv, lse, x, y, w, bb, mean, rstd, dw, db, h, gh, dh, bias4, wfc,
                     logits, logits0, losses, p, g, m, v};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) ops_free(bufs[i]);
    free(targets);
    return 0;
}
