// Fused classifier (softmax + cross-entropy + dlogits in place): CPU reference (double), version 1
// (one thread per row, three passes), version 2 (the production kernel of llmc/cuda/classifier.cu
// via ops.h: one block per row, online log-sum-exp). Check of losses and dlogits + timing.
//   make bench-cuda && build/cuda/dev/cuda/classifier [N]
#include "common.cuh"

__global__ void classifier_v1(float* losses, floatX* logits, const int* targets, float dloss, int N, int V, int Vp) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    floatX* row = logits + (size_t)n * Vp;
    float mx = -INFINITY, s = 0.0f;
    for (int i = 0; i < V; i++) mx = fmaxf(mx, __bfloat162float(row[i]));
    for (int i = 0; i < V; i++) s += expf(__bfloat162float(row[i]) - mx);
    int t = targets[n];
    losses[n] = t < 0 ? 0.0f : logf(s) + mx - __bfloat162float(row[t]);
    for (int i = 0; i < Vp; i++) {
        float p = i < V ? expf(__bfloat162float(row[i]) - mx) / s : 0.0f;
        float d = t < 0 || i >= V ? 0.0f : dloss * (p - (i == t ? 1.0f : 0.0f));
        row[i] = __float2bfloat16(d);
    }
}

int main(int argc, char** argv) {
    int N = argc > 1 ? atoi(argv[1]) : 1024;
    const int V = 50257, Vp = 50304;
    const float dloss = 1.0f / (float)N;
    ops_init(0);
    report_begin("classifier", ops_backend_name(), "N=%d V=%d Vp=%d", N, V, Vp);
    vecf logits = dev_rand((size_t)N * Vp, 16.0f, 1);
    std::vector<int> tgt(N);
    for (int n = 0; n < N; n++) tgt[n] = n % 17 == 0 ? -1 : (int)(((uint32_t)n * 2654435761u) % (uint32_t)V);
    vecf loss_ref(N), dl_ref((size_t)N * Vp, 0.0f);
    for (int n = 0; n < N; n++) {
        const float* r = &logits[(size_t)n * Vp];
        double mx = -1e30, s = 0;
        for (int i = 0; i < V; i++) mx = fmax(mx, r[i]);
        for (int i = 0; i < V; i++) s += exp(r[i] - mx);
        loss_ref[n] = tgt[n] < 0 ? 0.0f : (float)(log(s) + mx - r[tgt[n]]);
        if (tgt[n] >= 0)
            for (int i = 0; i < V; i++) dl_ref[(size_t)n * Vp + i] = (float)(dloss * (exp(r[i] - mx) / s - (i == tgt[n])));
    }
    floatX* d_logits = to_dev_bf16(logits);
    float* d_losses = (float*)ops_alloc(N * sizeof(float));
    int* d_tgt = (int*)ops_alloc(N * sizeof(int));
    ops_to_device(d_tgt, tgt.data(), N * sizeof(int));
    bool ok = true;
    const int block = 64, grid = (int)ceil_div(N, block);
    LAUNCH(classifier_v1, grid, block, 0, 0, d_losses, d_logits, d_tgt, dloss, N, V, Vp);
    cudaCheck(cudaGetLastError());
    ok &= dev_check("v1 losses", from_dev_f32(d_losses, N), loss_ref, 1e-4);
    ok &= dev_check("v1 dlogits", from_dev_bf16(d_logits, (size_t)N * Vp), dl_ref, 1e-2);
    ops_upload_f32(d_logits, logits.data(), (size_t)N * Vp);
    fused_classifier(d_losses, d_logits, d_tgt, dloss, N, V, Vp);
    ok &= dev_check("v2 losses (production)", from_dev_f32(d_losses, N), loss_ref, 1e-4);
    ok &= dev_check("v2 dlogits (production)", from_dev_bf16(d_logits, (size_t)N * Vp), dl_ref, 1e-2);
    // timing on logits that are already gradients: same work per row, values don't matter
    double bytes = 2.0 * N * Vp * sizeof(floatX);
    dev_report("v1", dev_time_ms([&] { LAUNCH(classifier_v1, grid, block, 0, 0, d_losses, d_logits, d_tgt, dloss, N, V, Vp); }, 3), bytes);
    dev_report("v2 (production)", dev_time_ms([&] { fused_classifier(d_losses, d_logits, d_tgt, dloss, N, V, Vp); }), bytes);
    ops_free(d_logits); ops_free(d_losses); ops_free(d_tgt);
    printf("%s\n", ok ? "all versions match the CPU reference" : "MISMATCH");
    return ok ? 0 : 1;
}
