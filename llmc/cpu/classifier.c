// CPU backend: the fused classifier (softmax + cross-entropy + dlogits in place), one row per
// iteration; and the classifier of a training forward in row blocks (lm_head GEMM, the fused
// classifier, the lm_head's dx and dw GEMMs), so that the [N, Vp] logits never exist whole.
#include <math.h>
#include <string.h>
#include "cpu/ops_cpu.h"
#include "cpu/vecmath.h"
#include "base/bf16.h"
#include "base/check.h"
#include "ops/sizes.h"

// Rows per block of classifier_train: 512 x 50304 logits = 103 MB of scratch, a fraction of the
// whole batch's logits. Below 512 rows the weight gradient's GEMMs (K = rows) and the passes over
// the whole dw they each make start to cost (the timings: docs/CPU.md, "The classifier").
#define CLS_ROWS OPS_CPU_CLS_ROWS // 512 (llmc/ops/sizes.h: the memory plan counts the scratch)

#define CLS_BLOCK 2048   // floats: 8 KB, stays in L1 between the max and the exp-sum loops

// dloss_rows (NULL: dloss for every row): each row's own weight of its gradient
static void fused_classifier_rows(float* losses, float* logits, const int* targets, float dloss, const float* dloss_rows,
                                  int N, int V, int Vp) {
    for (int n = 0; n < N; n++)
        if (targets[n] >= V)
            fatal("the data or tokenizer does not match the model's vocabulary",
                  "target token id %d at position %d is >= the vocabulary size %d", targets[n], n, V);
    #pragma omp parallel for schedule(dynamic, 4)
    for (int n = 0; n < N; n++) {
        float* x = logits + (size_t)n * Vp;
        int tgt = targets[n];
        if (tgt < 0) { // ignored position: no loss, zero gradient
            losses[n] = 0.0f;
            if (dloss != 0.0f) memset(x, 0, (size_t)Vp * sizeof(float));
            continue;
        }
        // One pass over memory for max and sum: blocks small enough to stay in L1 get their own
        // max and exp-sum, merged into the running (mx, sum) online-softmax style.
        float mx = -INFINITY;
        double sum = 0.0;
        for (int i0 = 0; i0 < V; i0 += CLS_BLOCK) {
            int i1 = i0 + CLS_BLOCK < V ? i0 + CLS_BLOCK : V;
            float bm = -INFINITY;
            #pragma omp simd reduction(max:bm)
            for (int i = i0; i < i1; i++) bm = x[i] > bm ? x[i] : bm;
            float bs = 0.0f;
            #pragma omp simd reduction(+:bs)
            for (int i = i0; i < i1; i++) bs += vm_expf(x[i] - bm);
            if (bm > mx) { sum = sum * exp((double)mx - (double)bm) + bs; mx = bm; }
            else sum += (double)bs * exp((double)bm - (double)mx);
        }
        float xt = x[tgt];
        losses[n] = (float)(log(sum) + (double)mx - (double)xt);
        if (dloss != 0.0f) {
            const float d = dloss_rows ? dloss_rows[n] : dloss;
            float s = (float)((double)d / sum);
            #pragma omp simd
            for (int i = 0; i < V; i++) x[i] = vm_expf(x[i] - mx) * s;
            x[tgt] -= d;
            for (int i = V; i < Vp; i++) x[i] = 0.0f;
        }
    }
}

void cpu_fused_classifier(float* losses, float* logits, const int* targets, float dloss, int N, int V, int Vp) {
    fused_classifier_rows(losses, logits, targets, dloss, NULL, N, V, Vp);
}

int cpu_classifier_rows(int N) { return N < CLS_ROWS ? N : CLS_ROWS; }

// The bf16 copy of the classifier's weight (wte) when its owner has none: rounded once per call,
// not once per block (Vp x C elements: 38.6M at GPT-2 small, 12-30 ms on 2 cores).
static uint16_t* w16;
static size_t w16_n;

size_t cpu_classifier_scratch_bytes(void) { return w16_n * sizeof(uint16_t); }

static const uint16_t* classifier_w16(const float* w, size_t n) {
    if (w16_n < n) {
        cpu_ops_free(w16);
        w16 = (uint16_t*)cpu_ops_alloc(n * sizeof(uint16_t));
        w16_n = n;
    }
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) w16[i] = bf16_from_f32(w[i]);
    return w16;
}

// classifier_train, with each row's weight from dloss_rows when it is given (dloss 1: backward on)
static void classifier_blocks(float* losses, float* dx, float* dw, float* logits, const float* x, const float* w,
                              const uint16_t* w16, const int* targets, float dloss, const float* dloss_rows, int N, int C, int V,
                              int Vp) {
    const uint16_t* wb = w16 ? w16 : cpu_ops_gemm_dtype() == OPS_BF16 ? classifier_w16(w, (size_t)Vp * C) : NULL;
    for (int r0 = 0; r0 < N; r0 += CLS_ROWS) {
        const int rows = N - r0 < CLS_ROWS ? N - r0 : CLS_ROWS;
        const float* xb = x + (size_t)r0 * C;
        if (wb) cpu_matmul_forward_w16(logits, NULL, xb, wb, NULL, rows, C, Vp);
        else cpu_matmul_forward(logits, NULL, xb, w, NULL, rows, C, Vp);
        fused_classifier_rows(losses + r0, logits, targets + r0, dloss, dloss_rows ? dloss_rows + r0 : NULL, rows, V, Vp);
        if (dloss == 0.0f) continue;
        float* dxb = dx ? dx + (size_t)r0 * C : NULL;
        if (wb) {
            if (dxb) cpu_matmul_backward_w16(dxb, NULL, logits, wb, rows, C, Vp, 1);
            if (dw) cpu_matmul_backward(NULL, dw, NULL, logits, xb, w, rows, C, Vp, 1);
        } else cpu_matmul_backward(dxb, dw, NULL, logits, xb, w, rows, C, Vp, 1);
    }
}

void cpu_classifier_train(float* losses, float* dx, float* dw, float* logits, const float* x, const float* w,
                          const uint16_t* w16, const int* targets, float dloss, int N, int C, int V, int Vp) {
    classifier_blocks(losses, dx, dw, logits, x, w, w16, targets, dloss, NULL, N, C, V, Vp);
}

void cpu_classifier_train_rows(float* losses, float* dx, float* dw, float* logits, const float* x, const float* w,
                               const uint16_t* w16, const int* targets, const float* dloss_rows, int N, int C, int V, int Vp) {
    classifier_blocks(losses, dx, dw, logits, x, w, w16, targets, 1.0f, dloss_rows, N, C, V, Vp);
}
