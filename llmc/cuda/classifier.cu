// Fused classifier: softmax + cross-entropy + dlogits in place, one block per row (targets < 0:
// no loss, zero gradient row; padded columns V..Vp get zero gradient); the gradient scaled by
// dloss, or by each row's own weight (classifier_train_rows: the preference objectives). Two passes over
// the row: an online max/sum (log-sum-exp), then the gradient written over the logits.
// classifier_train (ops.h): the lm_head GEMM, this kernel and the lm_head's backward GEMMs over
// all N rows at once.
#include "cuda/common.cuh"
#include "cuda/ops_cuda.h"

#define CLS_THREADS 512

// combine two (max, sum-of-exp relative to max) pairs
__device__ inline void lse_combine(float& m, float& s, float om, float os) {
    float mn = fmaxf(m, om);
    s = s * expf(m - mn) + os * expf(om - mn);
    m = mn;
}

// dloss_rows (NULL: dloss for every row): each row's weight of its gradient (preference objectives)
__global__ void fused_classifier_kernel(float* losses, floatX* logits, const int* targets, float dloss, const float* dloss_rows,
                                        int V, int Vp, int vec) {
    __shared__ float sm[CLS_THREADS / WARP_SIZE], ss[CLS_THREADS / WARP_SIZE];
    int row = blockIdx.x;
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE, nwarps = blockDim.x / WARP_SIZE;
    floatX* x = logits + (size_t)row * Vp;
    int target = targets[row];
    // A target >= V (data that does not match the vocabulary) must not index past the row; it
    // gets a NaN loss and a zero gradient, so the trainer's non-finite-loss check reports it
    // (the CPU backend stops with a message; here the targets live on the device).
    int bad_target = target >= V;
    if (bad_target) target = -1;
    // -FLT_MAX rather than -inf: a thread without elements then combines as (m, 0) without NaN
    float m = -FLT_MAX, s = 0.0f;
    for (int c = threadIdx.x * 8; c < V; c += blockDim.x * 8) {
        float v[8];
        load8f(v, x, c, Vp, vec);
        for (int k = 0; k < 8 && c + k < V; k++) {
            if (v[k] > m) { s = s * expf(m - v[k]) + 1.0f; m = v[k]; }
            else s += expf(v[k] - m);
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(FULL_MASK, m, o), os = __shfl_xor_sync(FULL_MASK, s, o);
        lse_combine(m, s, om, os);
    }
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    // the target logit is read before the barrier: after it, other threads overwrite the row
    float xt = (threadIdx.x == 0 && target >= 0) ? __bfloat162float(x[target]) : 0.0f;
    __syncthreads();
    m = -FLT_MAX; s = 0.0f;
    for (int w = 0; w < nwarps; w++) lse_combine(m, s, sm[w], ss[w]);   // same order in every thread
    float lse = m + logf(s);
    if (threadIdx.x == 0) losses[row] = bad_target ? NAN : (target >= 0 ? lse - xt : 0.0f);
    if (dloss == 0.0f) return;
    const float d = dloss_rows ? dloss_rows[row] : dloss;
    for (int c = threadIdx.x * 8; c < Vp; c += blockDim.x * 8) {
        float v[8];
        load8f(v, x, c, Vp, vec);
        for (int k = 0; k < 8; k++) {
            int i = c + k;
            float g = 0.0f;
            if (target >= 0 && i < V) g = d * (expf(v[k] - lse) - (i == target ? 1.0f : 0.0f));
            v[k] = g;
        }
        store8f(x, v, c, Vp, vec);
    }
}

extern "C" void cuda_fused_classifier(float* losses, floatX* logits, const int* targets, float dloss,
                                      int N, int V, int Vp) {
    if (N <= 0) return;
    int vec = Vp % 8 == 0 && ops_aligned16(logits);
    LAUNCH(fused_classifier_kernel, N, CLS_THREADS, 0, 0, losses, logits, targets, dloss, (const float*)NULL, V, Vp, vec);
    cudaCheck(cudaGetLastError());
}

extern "C" int cuda_classifier_rows(int N) { return N; }

extern "C" void cuda_classifier_train(float* losses, floatX* dx, floatX* dw, floatX* logits, const floatX* x,
                                      const floatX* w, const int* targets, float dloss, int N, int C, int V, int Vp) {
    cuda_matmul_forward(logits, NULL, x, w, NULL, N, C, Vp);
    cuda_fused_classifier(losses, logits, targets, dloss, N, V, Vp);
    if (dloss != 0.0f && (dx || dw)) cuda_matmul_backward(dx, dw, NULL, logits, x, w, N, C, Vp, 1);
}

extern "C" void cuda_classifier_train_rows(float* losses, floatX* dx, floatX* dw, floatX* logits, const floatX* x, const floatX* w,
                                           const int* targets, const float* dloss_rows, int N, int C, int V, int Vp) {
    if (N <= 0) return;
    cuda_matmul_forward(logits, NULL, x, w, NULL, N, C, Vp);
    const int vec = Vp % 8 == 0 && ops_aligned16(logits);
    LAUNCH(fused_classifier_kernel, N, CLS_THREADS, 0, 0, losses, logits, targets, 1.0f, dloss_rows, V, Vp, vec);
    cudaCheck(cudaGetLastError());
    if (dx || dw) cuda_matmul_backward(dx, dw, NULL, logits, x, w, N, C, Vp, 1);
}
