// One GPT-2 124M training step (forward, loss, backward, grad norm, AdamW) built from nothing
// but the op interface, with random weights and tokens, in the op order of an llm.c-style
// trainer. It measures what the backend contributes to a real step (the model code adds only
// pointer arithmetic), e.g. to compare with PyTorch eager on the same machine:
//   build/dev/bench_step [threads] [B] [T] [steps]
// Not a test. Build: make bench-cpu.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ops.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rs = 88172645463325252ull;
static float frand(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)(rs >> 40) / 16777216.0f - 0.5f; }

enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPW, FCPB, LNFW, LNFB, NPT };

int main(int argc, char** argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    int B = argc > 2 ? atoi(argv[2]) : 4;
    int T = argc > 3 ? atoi(argv[3]) : 256;
    int steps = argc > 4 ? atoi(argv[4]) : 3;
    const int L = 12, C = 768, NH = 12, V = 50257, Vp = 50304, N = B * T;
    ops_init(threads);
    printf("backend: %s\nGPT-2 124M, B=%d T=%d\n", ops_backend_name(), B, T);

    size_t sizes[NPT] = {(size_t)Vp * C, (size_t)1024 * C, (size_t)L * C, (size_t)L * C,
                         (size_t)L * 3 * C * C, (size_t)L * 3 * C, (size_t)L * C * C, (size_t)L * C,
                         (size_t)L * C, (size_t)L * C, (size_t)L * 4 * C * C, (size_t)L * 4 * C,
                         (size_t)L * C * 4 * C, (size_t)L * C, C, C};
    size_t np = 0;
    for (int i = 0; i < NPT; i++) np += sizes[i];
    float* params = (float*)ops_alloc(np * sizeof(float));
    float* grads = (float*)ops_alloc(np * sizeof(float));
    float* m = (float*)ops_alloc(np * sizeof(float));
    float* v = (float*)ops_alloc(np * sizeof(float));
    for (size_t i = 0; i < np; i++) params[i] = 0.04f * frand();
    ops_zero(m, np * sizeof(float));
    ops_zero(v, np * sizeof(float));
    float *p[NPT], *g[NPT];
    size_t off = 0;
    for (int i = 0; i < NPT; i++) { p[i] = params + off; g[i] = grads + off; off += sizes[i]; }
    for (size_t i = 0; i < sizes[LN1W]; i++) { p[LN1W][i] = 1.0f; p[LN2W][i] = 1.0f; }
    for (int i = 0; i < C; i++) p[LNFW][i] = 1.0f;

    // activations (per layer where backward needs them)
    size_t NC = (size_t)N * C;
    float* encoded = (float*)ops_alloc(NC * sizeof(float));
    float* ln1 = (float*)ops_alloc(L * NC * sizeof(float));
    float* ln1_mean = (float*)ops_alloc((size_t)L * N * sizeof(float));
    float* ln1_rstd = (float*)ops_alloc((size_t)L * N * sizeof(float));
    float* qkv = (float*)ops_alloc(L * 3 * NC * sizeof(float));
    float* atty = (float*)ops_alloc(L * NC * sizeof(float));
    float* lse = (float*)ops_alloc((size_t)L * B * NH * T * sizeof(float));
    float* attproj = (float*)ops_alloc(L * NC * sizeof(float));
    float* res2 = (float*)ops_alloc(L * NC * sizeof(float));
    float* ln2 = (float*)ops_alloc(L * NC * sizeof(float));
    float* ln2_mean = (float*)ops_alloc((size_t)L * N * sizeof(float));
    float* ln2_rstd = (float*)ops_alloc((size_t)L * N * sizeof(float));
    float* fch = (float*)ops_alloc(L * 4 * NC * sizeof(float));
    float* fchg = (float*)ops_alloc(L * 4 * NC * sizeof(float));
    float* fcproj = (float*)ops_alloc(L * NC * sizeof(float));
    float* res3 = (float*)ops_alloc(L * NC * sizeof(float));   // input of layer l+1 / final
    float* lnf = (float*)ops_alloc(NC * sizeof(float));
    float* lnf_mean = (float*)ops_alloc((size_t)N * sizeof(float));
    float* lnf_rstd = (float*)ops_alloc((size_t)N * sizeof(float));
    float* logits = (float*)ops_alloc((size_t)N * Vp * sizeof(float));
    float* losses = (float*)ops_alloc((size_t)N * sizeof(float));
    // gradient scratch
    float* dres = (float*)ops_alloc(NC * sizeof(float));
    float* dbuf1 = (float*)ops_alloc(NC * sizeof(float));
    float* dqkv = (float*)ops_alloc(3 * NC * sizeof(float));
    float* dfch = (float*)ops_alloc(4 * NC * sizeof(float));
    float* dfchg = (float*)ops_alloc(4 * NC * sizeof(float));
    int* inp = (int*)malloc((size_t)N * sizeof(int));
    int* tgt = (int*)malloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) { inp[i] = (int)((frand() + 0.5f) * (V - 1)); tgt[i] = (int)((frand() + 0.5f) * (V - 1)); }

    double tf_best = 1e30, tb_best = 1e30, to_best = 1e30, tot_best = 1e30;
    for (int step = 0; step < steps; step++) {
        double t0 = now_s();
        encoder_forward(encoded, inp, p[WTE], p[WPE], B, T, C);
        for (int l = 0; l < L; l++) {
            float* x = l == 0 ? encoded : res3 + (l - 1) * NC;
            float* l_ln1 = ln1 + l * NC;
            float* l_qkv = qkv + l * 3 * NC;
            if (l == 0) layernorm_forward(l_ln1, ln1_mean + l * N, ln1_rstd + l * N, x, p[LN1W] + l * C, p[LN1B] + l * C, N, C);
            matmul_forward(l_qkv, NULL, l_ln1, p[QKVW] + (size_t)l * 3 * C * C, p[QKVB] + l * 3 * C, N, C, 3 * C);
            attention_forward(atty + l * NC, lse + (size_t)l * B * NH * T, l_qkv, B, T, C, NH);
            matmul_forward(attproj + l * NC, NULL, atty + l * NC, p[PROJW] + (size_t)l * C * C, p[PROJB] + l * C, N, C, C);
            fused_residual_layernorm_forward(res2 + l * NC, ln2 + l * NC, ln2_mean + l * N, ln2_rstd + l * N, x,
                                             attproj + l * NC, p[LN2W] + l * C, p[LN2B] + l * C, N, C);
            matmul_forward(fch + l * 4 * NC, fchg + l * 4 * NC, ln2 + l * NC, p[FCW] + (size_t)l * 4 * C * C,
                           p[FCB] + l * 4 * C, N, C, 4 * C);
            matmul_forward(fcproj + l * NC, NULL, fchg + l * 4 * NC, p[FCPW] + (size_t)l * 4 * C * C, p[FCPB] + l * C, N, 4 * C, C);
            if (l + 1 < L)
                fused_residual_layernorm_forward(res3 + l * NC, ln1 + (l + 1) * NC, ln1_mean + (l + 1) * N,
                                                 ln1_rstd + (l + 1) * N, res2 + l * NC, fcproj + l * NC,
                                                 p[LN1W] + (l + 1) * C, p[LN1B] + (l + 1) * C, N, C);
            else
                fused_residual_layernorm_forward(res3 + l * NC, lnf, lnf_mean, lnf_rstd, res2 + l * NC, fcproj + l * NC,
                                                 p[LNFW], p[LNFB], N, C);
        }
        matmul_forward(logits, NULL, lnf, p[WTE], NULL, N, C, Vp);
        fused_classifier(losses, logits, tgt, 1.0f / N, N, V, Vp);
        double loss = sum_f32(losses, N) / N;
        double t1 = now_s();

        ops_zero(grads, np * sizeof(float));
        ops_zero(dbuf1, NC * sizeof(float));
        matmul_backward(dbuf1, g[WTE], NULL, logits, lnf, p[WTE], N, C, Vp);
        ops_zero(dres, NC * sizeof(float));
        layernorm_backward(dres, g[LNFW], g[LNFB], dbuf1, res3 + (L - 1) * NC, p[LNFW], lnf_mean, lnf_rstd, N, C);
        for (int l = L - 1; l >= 0; l--) {
            float* x = l == 0 ? encoded : res3 + (l - 1) * NC;
            ops_zero(dfchg, 4 * NC * sizeof(float));
            matmul_backward(dfchg, g[FCPW] + (size_t)l * 4 * C * C, g[FCPB] + l * C, dres, fchg + l * 4 * NC,
                            p[FCPW] + (size_t)l * 4 * C * C, N, 4 * C, C);
            ops_zero(dfch, 4 * NC * sizeof(float));
            gelu_backward(dfch, fch + l * 4 * NC, dfchg, 4 * NC);
            ops_zero(dbuf1, NC * sizeof(float));
            matmul_backward(dbuf1, g[FCW] + (size_t)l * 4 * C * C, g[FCB] + l * 4 * C, dfch, ln2 + l * NC,
                            p[FCW] + (size_t)l * 4 * C * C, N, C, 4 * C);
            layernorm_backward(dres, g[LN2W] + l * C, g[LN2B] + l * C, dbuf1, res2 + l * NC, p[LN2W] + l * C,
                               ln2_mean + l * N, ln2_rstd + l * N, N, C);
            ops_zero(dbuf1, NC * sizeof(float));
            matmul_backward(dbuf1, g[PROJW] + (size_t)l * C * C, g[PROJB] + l * C, dres, atty + l * NC,
                            p[PROJW] + (size_t)l * C * C, N, C, C);
            ops_zero(dqkv, 3 * NC * sizeof(float));
            attention_backward(dqkv, dbuf1, qkv + l * 3 * NC, atty + l * NC, lse + (size_t)l * B * NH * T, B, T, C, NH);
            ops_zero(dbuf1, NC * sizeof(float));
            matmul_backward(dbuf1, g[QKVW] + (size_t)l * 3 * C * C, g[QKVB] + l * 3 * C, dqkv, ln1 + l * NC,
                            p[QKVW] + (size_t)l * 3 * C * C, N, C, 3 * C);
            layernorm_backward(dres, g[LN1W] + l * C, g[LN1B] + l * C, dbuf1, x, p[LN1W] + l * C,
                               ln1_mean + l * N, ln1_rstd + l * N, N, C);
        }
        encoder_backward(g[WTE], g[WPE], dres, inp, B, T, C);
        double t2 = now_s();
        double norm2 = sum_squares(grads, np);
        adamw_update(params, NULL, grads, m, v, np, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step + 1, 0);
        double t3 = now_s();
        printf("step %d: loss %.4f |g|^2 %.3g  forward %.0f ms, backward %.0f ms, norm+adamw %.0f ms, total %.0f ms\n",
               step, loss, norm2, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, (t3 - t0) * 1e3);
        if (t1 - t0 < tf_best) tf_best = t1 - t0;
        if (t2 - t1 < tb_best) tb_best = t2 - t1;
        if (t3 - t2 < to_best) to_best = t3 - t2;
        if (t3 - t0 < tot_best) tot_best = t3 - t0;
    }
    // 6 flop per parameter and token for the matmuls, causal attention 2 T^2 C per sequence and
    // layer forward, twice that backward
    double flop = 6.0 * (double)N * (double)(np - sizes[WPE]) + 6.0 * L * (double)B * T * T * C;
    printf("best: forward %.0f ms, backward %.0f ms, norm+adamw %.0f ms, step %.0f ms (%.0f tokens/s, ~%.0f GFLOP/s)\n",
           tf_best * 1e3, tb_best * 1e3, to_best * 1e3, tot_best * 1e3, N / tot_best, flop / tot_best * 1e-9);

    float* all[] = {params, grads, m, v, encoded, ln1, ln1_mean, ln1_rstd, qkv, atty, lse, attproj, res2, ln2,
                    ln2_mean, ln2_rstd, fch, fchg, fcproj, res3, lnf, lnf_mean, lnf_rstd, logits, losses,
                    dres, dbuf1, dqkv, dfch, dfchg};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) ops_free(all[i]);
    free(inp); free(tgt);
    return 0;
}
