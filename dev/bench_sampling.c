// Generation speed with and without the key/value cache at GPT-2 124M shape (a randomly
// initialised d12 model: speed does not depend on the weights). Not a test.
//   make bench-cpu && build/cpu/dev/bench_sampling [--dtype fp32|bf16] [prompt_tokens] [new_tokens] [threads] [kv-only]
// --dtype as generate's (default fp32 here), spelled the same so that the CPU backend's start-up
// picks the same OpenMP wait policy (llmc/cpu/backend.c); bf16: the linear weights held in bf16.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../llmc/model/model.h"
#include "../llmc/model/sampler.h"
#include "../llmc/base/check.h"
#include "../llmc/base/timer.h"

int main(int argc, char** argv) {
    int bf16 = 0;
    if (argc > 2 && strcmp(argv[1], "--dtype") == 0) { bf16 = strcmp(argv[2], "bf16") == 0; argc -= 2; argv += 2; }
    int np = argc > 1 ? atoi(argv[1]) : 16, n = argc > 2 ? atoi(argv[2]) : 64, threads = argc > 3 ? atoi(argv[3]) : 0;
    ops_init(threads);
    ops_set_gemm_dtype(bf16 ? OPS_BF16 : OPS_F32);
    ModelSpec spec;
    memset(&spec, 0, sizeof(spec));
    spec.path = "d12"; spec.seed = 1; spec.B = 1; spec.T = np + n - 1; spec.base_bf16 = bf16;
    Model model;
    model_assemble(&model, &spec);
    GPT2* m = &model.gpt;
    const GPT2Config cfg = m->cfg;
    int* prompt = (int*)mallocCheck((size_t)np * sizeof(int));
    for (int i = 0; i < np; i++) prompt[i] = (i * 7919 + 13) % cfg.vocab_size;
    int* a = (int*)mallocCheck((size_t)n * sizeof(int));
    int* b = (int*)mallocCheck((size_t)n * sizeof(int));
    SampleParams sp = { 1.0f, 40, 1, 1.0f, 0.0f, 1.0f }; // (top-p, min-p, the repetition penalty off)
    printf("backend: %s | d12 (124M) | %s GEMMs | prompt %d tokens, %d new tokens, top-k 40\n", ops_backend_name(), bf16 ? "bf16" : "fp32", np, n);
    KVCache kv;
    kv_init(&kv, m, 1, np + n - 1);
    double t0 = timer_now_s();
    sample_generate(m, &kv, prompt, np, n, &sp, -1, a, NULL, NULL);
    double t_kv = timer_now_s() - t0;
    if (argc > 4) { // kv-only: for profiling the cached path
        printf("kv cache:      %.2f s, %.1f tokens/s (incl. the %d-token prompt pass)\n", t_kv, n / t_kv, np);
        kv_free(&kv); model_free(&model); free(prompt); free(a); free(b);
        return 0;
    }
    t0 = timer_now_s();
    sample_generate(m, NULL, prompt, np, n, &sp, -1, b, NULL, NULL);
    double t_full = timer_now_s() - t0;
    int same = 1;
    for (int i = 0; i < n; i++) same &= a[i] == b[i];
    printf("kv cache:      %.2f s, %.1f tokens/s (incl. the %d-token prompt pass)\n", t_kv, n / t_kv, np);
    printf("no kv cache:   %.2f s, %.1f tokens/s\n", t_full, n / t_full);
    // in bf16 the two paths' fp32 sums (attention over the cache vs the whole sequence) differ in
    // the last bits, which the next GEMM's rounding can turn into a bf16 ulp: with the flat
    // logits of random weights, a draw near a boundary may go the other way
    printf("same tokens: %s | speed-up %.1fx | cache %.1f MiB\n", same ? "yes" : bf16 ? "no (bf16 rounding)" : "NO",
           t_full / t_kv, kv_bytes(&kv) / 1048576.0);
    kv_free(&kv);
    model_free(&model);
    free(prompt); free(a); free(b);
    return same || bf16 ? 0 : 1;
}
