// The CUDA backend's flash attention (llmc/cuda/attention.cu: WMMA tensor-core kernels),
// run on the CPU through the CUDA-on-CPU harness, against the CPU backend's attention
// (llmc/cpu/attention.c, fp32; itself checked against double-precision references and finite
// differences in test_ops), on the same bf16-exact inputs:
//   forward out and lse, backward dQ, dK, dV (accumulated into a non-zero dqkv), for every
//   combination of T in {1, 17, 64, 130} (one row; ragged tile; one whole tile; three tiles, the
//   last ragged), HS in {16, 64}, NH in {1, 3}, B in {1, 2}; plus HS 128 and HS 32 shapes,
//   misaligned buffers (the scalar load/store paths) and sharply peaked scores (the online
//   softmax's rescaling); then the non-deterministic backward (dQ by atomics) on a subset.
// Each side runs its own backward from its own forward outputs, as training does.
//
// Tolerances (bf16 outputs and bf16 tensor-core operands P, dS): out |d| <= 1e-2 + 1.6e-2 |ref|;
// lse |d| <= 2e-4 + 1e-5 |ref| (fp32 all the way); dqkv |d| <= 2e-2 max|ref| + 2e-2 |ref| per
// section (dQ, dK, dV scale differently). The worst error found is printed relative to them.
//
// Both backends live in this program, each through its own header: cuda_attention_* on bf16
// device buffers, cpu_attention_* on fp32 host buffers (the harness' device memory is host memory).
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <vector>
#include <algorithm>
#include "ops/ops.h"
#include "cpu/ops_cpu.h"
#include "cuda/ops_cuda.h"
#include "cuda/attention.cuh"
#include "test/cuda_test.h"
#include "base/timer.h"

static TestRng g_rng = { 0x9E3779B97F4A7C15ull, 0 };
static vecf rnd_vec(size_t n, float scale) { return cuda_test_rnd_vec(&g_rng, n, scale); }

// one section (0 q, 1 k, 2 v) of a (B, T, 3, C) tensor
static vecf section(const vecf& x, int B, int T, int C, int sec) {
    vecf s((size_t)B * T * C);
    for (size_t bt = 0; bt < (size_t)B * T; bt++)
        for (int c = 0; c < C; c++) s[bt * C + c] = x[bt * 3 * C + (size_t)sec * C + c];
    return s;
}
static double max_abs(const vecf& x) {
    double m = 0.0;
    for (float v : x) m = std::max(m, (double)fabs(v));
    return m;
}

static void test_case(int B, int T, int HS, int NH, float in_scale, int offset) {
    char name[200], cfg[120];
    snprintf(cfg, sizeof(cfg), "B=%d T=%d HS=%d NH=%d%s%s%s", B, T, HS, NH, in_scale > 2.0f ? " peaked" : "",
             offset ? " misaligned" : "", attention_get_deterministic() ? "" : " atomic-dQ");
    int C = NH * HS;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    vecf qkv = rnd_vec(nqkv, in_scale), dout = rnd_vec(nout, 1.0f), acc0 = rnd_vec(nqkv, 0.5f);

    // CPU backend, fp32
    vecf r_out(nout), r_lse(nlse), r_dqkv = acc0;
    cpu_attention_forward(r_out.data(), r_lse.data(), qkv.data(), NULL, B, T, C, NH);
    cpu_attention_backward(r_dqkv.data(), dout.data(), qkv.data(), r_out.data(), r_lse.data(), NULL, B, T, C, NH, 1);

    // CUDA backend under the harness
    Dev d_qkv(qkv, offset), d_out(nout, offset), d_dout(dout, offset), d_dqkv(acc0, offset);
    float* d_lse = (float*)cuda_ops_alloc(nlse * sizeof(float));
    cuda_attention_forward(d_out.p, d_lse, d_qkv.p, B, T, C, NH);
    vecf g_lse(nlse);
    cuda_ops_to_host(g_lse.data(), d_lse, nlse * sizeof(float));
    snprintf(name, sizeof(name), "flash forward out (%s)", cfg);
    check(name, d_out.get(), r_out, 1.6e-2, 1e-2);
    snprintf(name, sizeof(name), "flash forward lse (%s)", cfg);
    check(name, g_lse, r_lse, 1e-5, 2e-4);

    cuda_attention_backward(d_dqkv.p, d_dout.p, d_qkv.p, d_out.p, d_lse, B, T, C, NH, 1);
    vecf g_dqkv = d_dqkv.get();
    static const char* sec_name[3] = {"dQ", "dK", "dV"};
    for (int sec = 0; sec < 3; sec++) {
        vecf g = section(g_dqkv, B, T, C, sec), w = section(r_dqkv, B, T, C, sec);
        vecf delta = section(r_dqkv, B, T, C, sec), a0 = section(acc0, B, T, C, sec);
        for (size_t i = 0; i < delta.size(); i++) delta[i] -= a0[i];   // the gradient alone sets the scale
        snprintf(name, sizeof(name), "flash backward %s += (%s)", sec_name[sec], cfg);
        check(name, g, w, 2e-2, 2e-2 * std::max(max_abs(delta), 1e-3));
    }
    // accumulate 0: written over acc0 (the device buffer is not read), against the CPU's write
    Dev d_w(acc0, offset);
    vecf r_w = acc0;
    cpu_attention_backward(r_w.data(), dout.data(), qkv.data(), r_out.data(), r_lse.data(), NULL, B, T, C, NH, 0);
    cuda_attention_backward(d_w.p, d_dout.p, d_qkv.p, d_out.p, d_lse, B, T, C, NH, 0);
    vecf g_w = d_w.get();
    for (int sec = 0; sec < 3; sec++) {
        vecf g = section(g_w, B, T, C, sec), w = section(r_w, B, T, C, sec);
        snprintf(name, sizeof(name), "flash backward %s written (%s)", sec_name[sec], cfg);
        check(name, g, w, 2e-2, 2e-2 * std::max(max_abs(w), 1e-3));
    }
    cuda_ops_free(d_lse);
}

#include <time.h>

int main(void) {
    cuda_ops_init(0);
    double t0 = timer_now_s();
    TEST_CHECK(attention_flash_supported(16) && attention_flash_supported(64) && attention_flash_supported(128),
               "flash kernels must serve head sizes 16, 64, 128");
    TEST_CHECK(!attention_flash_supported(8) && !attention_flash_supported(72) && !attention_flash_supported(144),
               "head sizes not a multiple of 16, or above 128, go to the simple kernels");
    if (getenv("FLASH_TEST_QUICK")) {   // one shape (the mutation checks of check_flash_mutants.sh)
        test_case(1, 130, 64, 1, 1.5f, 0);
        return test_finish("test_cuda_flash_attention (quick)");
    }
    const int Ts[] = {1, 17, 64, 130}, HSs[] = {16, 64}, NHs[] = {1, 3}, Bs[] = {1, 2};
    for (int T : Ts)
        for (int HS : HSs)
            for (int NH : NHs)
                for (int B : Bs) test_case(B, T, HS, NH, 1.5f, 0);
    test_case(1, 70, 128, 1, 1.5f, 0);    // largest head size
    test_case(2, 33, 32, 2, 1.5f, 1);     // misaligned: scalar loads and stores
    test_case(1, 130, 64, 2, 4.0f, 0);    // peaked scores: the running max moves a lot
    // non-deterministic mode: dQ by fp32 atomics from the dK/dV kernel
    TEST_CHECK(attention_get_deterministic() == 1, "the deterministic backward must be the default");
    attention_set_deterministic(0);
    for (int T : {1, 17, 64, 130})
        for (int HS : {16, 64}) test_case(2, T, HS, 3, 1.5f, 0);
    test_case(1, 70, 128, 1, 1.5f, 0);
    test_case(2, 33, 32, 2, 1.5f, 1);
    attention_set_deterministic(1);
    printf("worst error over all checks: %.3f of tolerance, in %s\n", g_worst_rel, g_worst_name);
    printf("time %.2fs\n", timer_now_s() - t0);
    return test_finish("test_cuda_flash_attention");
}
