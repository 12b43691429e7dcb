// Generation speed with and without the key/value cache at GPT-2 124M shape (a randomly
// initialised d12 model: speed does not depend on the weights). Not a test.
//   make bench-cpu && build/cpu/dev/bench_sampling [prompt_tokens] [new_tokens] [threads] [kv-only]
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "../llmc/gpt2.h"
#include "../llmc/model_io.h"
#include "../llmc/sampler.h"
#include "../llmc/check.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char** argv) {
    int np = argc > 1 ? atoi(argv[1]) : 16, n = argc > 2 ? atoi(argv[2]) : 64, threads = argc > 3 ? atoi(argv[3]) : 0;
    ops_init(threads);
    GPT2Config cfg;
    gpt2_config_from_descriptor(&cfg, "d12");
    ParamTable pt;
    params_build(&pt, &cfg);
    float* host = (float*)mallocCheck(pt.total * sizeof(float));
    model_init_gpt2(&pt, host, 1);
    GPT2 m;
    gpt2_init(&m, &cfg, 0);
    gpt2_set_params(&m, host);
    free(host);
    gpt2_alloc_acts(&m, 1, np + n - 1);
    int* prompt = (int*)mallocCheck((size_t)np * sizeof(int));
    for (int i = 0; i < np; i++) prompt[i] = (i * 7919 + 13) % cfg.vocab_size;
    int* a = (int*)mallocCheck((size_t)n * sizeof(int));
    int* b = (int*)mallocCheck((size_t)n * sizeof(int));
    SampleParams sp = { 1.0f, 40, 1 };
    printf("backend: %s | d12 (124M) | prompt %d tokens, %d new tokens, top-k 40\n", ops_backend_name(), np, n);
    KVCache kv;
    kv_init(&kv, &m, 1, np + n - 1);
    double t0 = now_s();
    sample_generate(&m, &kv, prompt, np, n, &sp, -1, a, NULL, NULL);
    double t_kv = now_s() - t0;
    if (argc > 4) { // kv-only: for profiling the cached path
        printf("kv cache:      %.2f s, %.1f tokens/s (incl. the %d-token prompt pass)\n", t_kv, n / t_kv, np);
        kv_free(&kv); gpt2_free(&m); free(prompt); free(a); free(b);
        return 0;
    }
    t0 = now_s();
    sample_generate(&m, NULL, prompt, np, n, &sp, -1, b, NULL, NULL);
    double t_full = now_s() - t0;
    int same = 1;
    for (int i = 0; i < n; i++) same &= a[i] == b[i];
    printf("kv cache:      %.2f s, %.1f tokens/s (incl. the %d-token prompt pass)\n", t_kv, n / t_kv, np);
    printf("no kv cache:   %.2f s, %.1f tokens/s\n", t_full, n / t_full);
    printf("same tokens: %s | speed-up %.1fx | cache %.1f MiB\n", same ? "yes" : "NO", t_full / t_kv, kv_bytes(&kv) / 1048576.0);
    kv_free(&kv);
    gpt2_free(&m);
    free(prompt); free(a); free(b);
    return same ? 0 : 1;
}
