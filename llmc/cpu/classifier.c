// CPU backend: the fused classifier (softmax + cross-entropy + dlogits in place), one row per
// iteration.
#include <math.h>
#include <string.h>
#include "cpu/ops_cpu.h"
#include "cpu/vecmath.h"
#include "check.h"

#define CLS_BLOCK 2048   // floats: 8 KB, stays in L1 between the max and the exp-sum loops

void cpu_fused_classifier(float* losses, float* logits, const int* targets, float dloss,
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
            float s = (float)((double)dloss / sum);
            #pragma omp simd
            for (int i = 0; i < V; i++) x[i] = vm_expf(x[i] - mx) * s;
            x[tgt] -= dloss;
            for (int i = V; i < Vp; i++) x[i] = 0.0f;
        }
    }
}
