// Every CUDA-backend op (llmc/cuda/*.cu), run on the CPU through the CUDA-on-CPU harness
// (test/cuda_cpu/), checked against a straightforward double-precision reference written here
// from the definitions in llmc/ops/ops.h and against the CPU backend's op ("vs cpu:"), at small shapes: ragged ones (scalar paths: sizes not a
// multiple of 8, misaligned pointers) and aligned ones (128-bit paths).
//
// Inputs are rounded to bf16 before both sides see them, so the only differences are the
// kernels' fp32 arithmetic and the bf16 rounding of their outputs: tolerances are a few bf16
// ulps (2^-8 relative) plus an absolute term for values that cancel.
//
// Built by mk/harness.mk with g++ -include test/cuda_cpu/cuda_cpu.h -DLLMC_CUDA
// -DLLMC_CUDA_EMULATED (and by mk/cuda.mk for a GPU: test_cuda_ops_gpu); the kernel names the
// harness launched are checked against every __global__ in llmc/cuda/*.cu by
// test/check_cuda_kernels_ran.sh.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include <algorithm>
// Both backends live in this program, each through its own header and element type: the CUDA
// backend (cuda_*, bf16 device buffers: under the harness, or on a GPU) and the CPU backend's
// implementation (cpu_*, fp32 host buffers), linked as a library of its own (mk/cpu.mk).
#include "ops/ops.h"
#include "cpu/ops_cpu.h"
#include "cuda/ops_cuda.h"
#include "cuda/attention.cuh"
#include "cuda/gemm.cuh"
#include "test/cuda_test.h"
#include "test/ref_ops.h"
#include "base/timer.h"
#include "base/gguf.h"

// ---------------------------------------------------------------------------- helpers

static TestRng g_rng = { 0x243F6A8885A308D3ull, 0 };
static float rnd_uniform(void) { return cuda_test_uniform(&g_rng); }
static float bf16_round(float x) { return cuda_test_bf16_round(x); }
static vecf rnd_vec(size_t n, float scale) { return cuda_test_rnd_vec(&g_rng, n, scale); }
struct DevF {   // fp32 device buffer
    float* p = NULL;
    size_t n = 0;
    explicit DevF(size_t count) : n(count) {
        p = (float*)cuda_ops_alloc((count ? count : 1) * sizeof(float));
        cuda_test_poison(p, (count ? count : 1) * sizeof(float));
    }
    DevF(const vecf& h) : DevF(h.size()) { cuda_ops_to_device(p, h.data(), h.size() * sizeof(float)); }
    vecf get() const { vecf h(n); cuda_ops_to_host(h.data(), p, n * sizeof(float)); return h; }
    ~DevF() { cuda_ops_free(p); }
    DevF(const DevF&) = delete;
    DevF& operator=(const DevF&) = delete;
};
struct DevI {
    int* p = NULL;
    DevI(const std::vector<int>& h) {
        p = (int*)cuda_ops_alloc(h.size() * sizeof(int) + 4);
        cuda_ops_to_device(p, h.data(), h.size() * sizeof(int));
    }
    ~DevI() { cuda_ops_free(p); }
    DevI(const DevI&) = delete;
    DevI& operator=(const DevI&) = delete;
};

// bf16 outputs: a few ulps of 2^-8 relative
#define RT 1.6e-2

// ---------------------------------------------------------------------------- tests

static void test_casts(void) {
    vecf h(19);
    for (size_t i = 0; i < h.size(); i++) h[i] = 3.0f * rnd_uniform();
    Dev d(h);
    vecf back = d.get(), want(h.size());
    for (size_t i = 0; i < h.size(); i++) want[i] = bf16_round(h[i]);   // round to nearest even
    check("cast f32->bf16->f32 (n=19)", back, want, 0.0, 0.0);
}

static void test_elementwise(size_t n, int off) {
    char name[128];
    vecf a = rnd_vec(n, 3.0f), b = rnd_vec(n, 2.0f), g = rnd_vec(n, 1.0f), acc = rnd_vec(n, 0.5f);
    Dev da(a, off), db(b, off), dg(g, off), dacc(acc, off), dout(n, off);
    vecf want(n);

    cuda_gelu_forward(dout.p, da.p, n);
    for (size_t i = 0; i < n; i++) want[i] = (float)ref_gelu(a[i]);
    snprintf(name, sizeof(name), "gelu_forward (n=%zu, offset %d)", n, off);
    check(name, dout.get(), want, RT, 1e-3);

    cuda_gelu_backward(dacc.p, da.p, dg.p, n, 1);   // accumulates
    for (size_t i = 0; i < n; i++) want[i] = (float)(acc[i] + ref_gelu_grad(a[i]) * g[i]);
    snprintf(name, sizeof(name), "gelu_backward += (n=%zu, offset %d)", n, off);
    check(name, dacc.get(), want, RT, 1e-2);
    {
        Dev dw(acc, off), dalias(g, off);   // written over acc; and in place over g (dinp == dout)
        cuda_gelu_backward(dw.p, da.p, dg.p, n, 0);
        cuda_gelu_backward(dalias.p, da.p, dalias.p, n, 0);
        vecf c0 = acc;
        cpu_gelu_backward(c0.data(), a.data(), g.data(), n, 0);
        for (size_t i = 0; i < n; i++) want[i] = (float)(ref_gelu_grad(a[i]) * g[i]);
        snprintf(name, sizeof(name), "gelu_backward written (accumulate 0, n=%zu, offset %d)", n, off);
        check(name, dw.get(), want, RT, 1e-2);
        snprintf(name, sizeof(name), "gelu_backward in place (n=%zu, offset %d)", n, off);
        check(name, dalias.get(), want, RT, 1e-2);
        snprintf(name, sizeof(name), "vs cpu: gelu_backward written (n=%zu)", n);
        check(name, dw.get(), c0, RT, 1e-2);
    }

    cuda_residual_forward(dout.p, da.p, db.p, n);
    for (size_t i = 0; i < n; i++) want[i] = a[i] + b[i];
    snprintf(name, sizeof(name), "residual_forward (n=%zu, offset %d)", n, off);
    check(name, dout.get(), want, 8e-3, 1e-6);

    cuda_add_inplace(da.p, db.p, n);   // da = a + b
    snprintf(name, sizeof(name), "add_inplace (n=%zu, offset %d)", n, off);
    check(name, da.get(), want, 8e-3, 1e-6);

    cuda_scale_copy(db.p, db.p, -0.37f, n);   // in place
    for (size_t i = 0; i < n; i++) want[i] = b[i] * -0.37f;
    snprintf(name, sizeof(name), "scale_copy in place (n=%zu, offset %d)", n, off);
    check(name, db.get(), want, 8e-3, 1e-6);
    // the CPU backend on the same inputs
    vecf c1(n), c2 = acc;
    cpu_gelu_forward(c1.data(), a.data(), n);
    snprintf(name, sizeof(name), "vs cpu: gelu_backward (n=%zu)", n);
    cpu_gelu_backward(c2.data(), a.data(), g.data(), n, 1);
    check(name, dacc.get(), c2, RT, 1e-2);
    vecf c3(n), c4 = a, c5(n);
    cpu_residual_forward(c3.data(), a.data(), b.data(), n);
    cpu_add_inplace(c4.data(), b.data(), n);
    cpu_scale_copy(c5.data(), b.data(), -0.37f, n);
    snprintf(name, sizeof(name), "vs cpu: residual_forward, add_inplace, scale_copy (n=%zu)", n);
    check(name, dout.get(), c3, 8e-3, 1e-6);
    check(name, da.get(), c4, 8e-3, 1e-6);
    check(name, db.get(), c5, 8e-3, 1e-6);
    Dev dgl(a, off);
    cuda_gelu_forward(dgl.p, dgl.p, n);   // in place
    snprintf(name, sizeof(name), "vs cpu: gelu_forward in place (n=%zu)", n);
    check(name, dgl.get(), c1, RT, 1e-3);
}

static void test_encoder(int B, int T, int C, int V) {
    char name[128];
    vecf wte = rnd_vec((size_t)V * C, 1.0f), wpe = rnd_vec((size_t)T * C, 1.0f);
    std::vector<int> tok(B * T);
    for (int i = 0; i < B * T; i++) tok[i] = (int)((rnd_uniform() + 1.0f) * 0.5f * V) % V;
    tok[B * T - 1] = tok[0];   // repeated tokens exercise the buckets
    Dev dwte(wte), dwpe(wpe), dout((size_t)B * T * C);
    DevI dtok(tok);
    cuda_encoder_forward(dout.p, dtok.p, dwte.p, dwpe.p, NULL, B, T, C);
    vecf want((size_t)B * T * C);
    for (int bt = 0; bt < B * T; bt++)
        for (int c = 0; c < C; c++) want[(size_t)bt * C + c] = wte[(size_t)tok[bt] * C + c] + wpe[(size_t)(bt % T) * C + c];
    snprintf(name, sizeof(name), "encoder_forward (B=%d T=%d C=%d)", B, T, C);
    check(name, dout.get(), want, 8e-3, 1e-6);

    vecf g = rnd_vec((size_t)B * T * C, 1.0f), gwte = rnd_vec((size_t)V * C, 0.5f), gwpe = rnd_vec((size_t)T * C, 0.5f);
    Dev dg(g), dgwte(gwte), dgwpe(gwpe);
    cuda_encoder_backward(dgwte.p, dgwpe.p, dg.p, tok.data(), NULL, B, T, C);
    std::vector<double> rw(gwte.begin(), gwte.end()), rp(gwpe.begin(), gwpe.end());
    for (int bt = 0; bt < B * T; bt++)
        for (int c = 0; c < C; c++) {
            rw[(size_t)tok[bt] * C + c] += g[(size_t)bt * C + c];
            rp[(size_t)(bt % T) * C + c] += g[(size_t)bt * C + c];
        }
    snprintf(name, sizeof(name), "encoder_backward dwte += (B=%d T=%d C=%d)", B, T, C);
    check(name, dgwte.get(), vecf(rw.begin(), rw.end()), RT, 1e-2);
    snprintf(name, sizeof(name), "encoder_backward dwpe += (B=%d T=%d C=%d)", B, T, C);
    check(name, dgwpe.get(), vecf(rp.begin(), rp.end()), RT, 1e-2);
    vecf co((size_t)B * T * C), cw = gwte, cp = gwpe;
    cpu_encoder_forward(co.data(), tok.data(), wte.data(), wpe.data(), NULL, B, T, C);
    snprintf(name, sizeof(name), "vs cpu: encoder_forward (B=%d T=%d C=%d)", B, T, C);
    check(name, dout.get(), co, 8e-3, 1e-6);
    cpu_encoder_backward(cw.data(), cp.data(), g.data(), tok.data(), NULL, B, T, C);
    snprintf(name, sizeof(name), "vs cpu: encoder_backward dwte, dwpe (B=%d T=%d C=%d)", B, T, C);
    vecf gotw = dgwte.get(), gotp = dgwpe.get();
    gotw.insert(gotw.end(), gotp.begin(), gotp.end());
    cw.insert(cw.end(), cp.begin(), cp.end());
    check(name, gotw, cw, RT, 1e-2);
}

// Positions of packed records (restarting at 0 with each record; here records of 1..5 tokens):
// the forward reads their wpe rows, the backward buckets dwpe by position on the host as it does
// dwte by token. Against the CPU backend's encoder with the same positions.
static void test_encoder_positions(int B, int T, int C, int V) {
    char name[128];
    vecf wte = rnd_vec((size_t)V * C, 1.0f), wpe = rnd_vec((size_t)T * C, 1.0f);
    std::vector<int> tok(B * T), pos(B * T);
    for (int i = 0, p = 0, len = 1; i < B * T; i++) {
        if (i % T == 0 || p == len) { p = 0; len = 1 + i % 5; }
        pos[i] = p++;
        tok[i] = (int)((rnd_uniform() + 1.0f) * 0.5f * V) % V;
    }
    Dev dwte(wte), dwpe(wpe), dout((size_t)B * T * C);
    DevI dtok(tok), dpos(pos);
    cuda_encoder_forward(dout.p, dtok.p, dwte.p, dwpe.p, dpos.p, B, T, C);
    vecf co((size_t)B * T * C);
    cpu_encoder_forward(co.data(), tok.data(), wte.data(), wpe.data(), pos.data(), B, T, C);
    snprintf(name, sizeof(name), "vs cpu: encoder_forward with positions (B=%d T=%d C=%d)", B, T, C);
    check(name, dout.get(), co, 8e-3, 1e-6);
    vecf g = rnd_vec((size_t)B * T * C, 1.0f), gwte = rnd_vec((size_t)V * C, 0.5f), gwpe = rnd_vec((size_t)T * C, 0.5f);
    Dev dg(g), dgwte(gwte), dgwpe(gwpe);
    cuda_encoder_backward(dgwte.p, dgwpe.p, dg.p, tok.data(), pos.data(), B, T, C);
    vecf cw = gwte, cp = gwpe;
    cpu_encoder_backward(cw.data(), cp.data(), g.data(), tok.data(), pos.data(), B, T, C);
    snprintf(name, sizeof(name), "vs cpu: encoder_backward with positions dwte (B=%d T=%d C=%d)", B, T, C);
    check(name, dgwte.get(), cw, RT, 1e-2);
    snprintf(name, sizeof(name), "vs cpu: encoder_backward with positions dwpe (B=%d T=%d C=%d)", B, T, C);
    check(name, dgwpe.get(), cp, RT, 1e-2);
}

// reference layernorm of one row, double
static void ln_ref(const float* x, const float* w, const float* b, int C, float* out, float* mean, float* rstd) {
    double m = 0.0, v = 0.0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    double rs = 1.0 / sqrt(v / C + 1e-5);
    for (int c = 0; c < C; c++) out[c] = (float)((x[c] - m) * rs * w[c] + b[c]);
    *mean = (float)m; *rstd = (float)rs;
}

static void test_layernorm(int N, int C) {
    char name[128];
    vecf x = rnd_vec((size_t)N * C, 2.0f), y = rnd_vec((size_t)N * C, 1.0f), w = rnd_vec(C, 1.0f), b = rnd_vec(C, 0.5f);
    for (int i = 0; i < N * C; i++) x[i] = bf16_round(x[i] + 0.5f);   // nonzero mean
    Dev dx(x), dy(y), dw(w), db(b), dout((size_t)N * C), dres((size_t)N * C);
    DevF dmean(N), drstd(N);
    vecf want((size_t)N * C), wmean(N), wrstd(N);
    for (int n = 0; n < N; n++) ln_ref(&x[(size_t)n * C], w.data(), b.data(), C, &want[(size_t)n * C], &wmean[n], &wrstd[n]);
    cuda_layernorm_forward(dout.p, dmean.p, drstd.p, dx.p, dw.p, db.p, N, C);
    snprintf(name, sizeof(name), "layernorm_forward out (N=%d C=%d)", N, C);
    check(name, dout.get(), want, RT, 1e-2);
    snprintf(name, sizeof(name), "layernorm_forward mean (N=%d C=%d)", N, C);
    check(name, dmean.get(), wmean, 1e-5, 1e-6);
    snprintf(name, sizeof(name), "layernorm_forward rstd (N=%d C=%d)", N, C);
    check(name, drstd.get(), wrstd, 1e-4, 1e-6);

    // fused residual: the residual is rounded to bf16 first, then normalised
    vecf res((size_t)N * C);
    for (size_t i = 0; i < res.size(); i++) res[i] = bf16_round(x[i] + y[i]);
    for (int n = 0; n < N; n++) ln_ref(&res[(size_t)n * C], w.data(), b.data(), C, &want[(size_t)n * C], &wmean[n], &wrstd[n]);
    cuda_fused_residual_layernorm_forward(dres.p, dout.p, dmean.p, drstd.p, dx.p, dy.p, dw.p, db.p, N, C);
    snprintf(name, sizeof(name), "fused_residual_layernorm_forward residual (N=%d C=%d)", N, C);
    check(name, dres.get(), res, 0.0, 0.0);
    snprintf(name, sizeof(name), "fused_residual_layernorm_forward out (N=%d C=%d)", N, C);
    check(name, dout.get(), want, RT, 1e-2);
    snprintf(name, sizeof(name), "fused_residual_layernorm_forward rstd (N=%d C=%d)", N, C);
    check(name, drstd.get(), wrstd, 1e-4, 1e-6);

    // backward from the stats of x
    for (int n = 0; n < N; n++) ln_ref(&x[(size_t)n * C], w.data(), b.data(), C, &want[(size_t)n * C], &wmean[n], &wrstd[n]);
    DevF smean(wmean), srstd(wrstd);
    vecf g = rnd_vec((size_t)N * C, 1.0f), gi = rnd_vec((size_t)N * C, 0.5f), gw = rnd_vec(C, 0.5f), gb = rnd_vec(C, 0.5f);
    Dev dg(g), dgi(gi), dgw(gw), dgb(gb);
    cuda_layernorm_backward(dgi.p, dgw.p, dgb.p, dg.p, dx.p, dw.p, smean.p, srstd.p, N, C, 1);
    std::vector<double> ri(gi.begin(), gi.end()), rw(gw.begin(), gw.end()), rb(gb.begin(), gb.end());
    for (int n = 0; n < N; n++) {
        const float* xr = &x[(size_t)n * C]; const float* gr = &g[(size_t)n * C];
        double m = wmean[n], rs = wrstd[n], s1 = 0.0, s2 = 0.0;
        for (int c = 0; c < C; c++) { double dn = w[c] * gr[c]; s1 += dn; s2 += dn * (xr[c] - m) * rs; }
        s1 /= C; s2 /= C;
        for (int c = 0; c < C; c++) {
            double norm = (xr[c] - m) * rs;
            ri[(size_t)n * C + c] += (w[c] * gr[c] - s1 - norm * s2) * rs;
            rw[c] += gr[c] * norm;
            rb[c] += gr[c];
        }
    }
    snprintf(name, sizeof(name), "layernorm_backward dinp += (N=%d C=%d)", N, C);
    check(name, dgi.get(), vecf(ri.begin(), ri.end()), RT, 2e-2);
    snprintf(name, sizeof(name), "layernorm_backward dweight += (N=%d C=%d)", N, C);
    check(name, dgw.get(), vecf(rw.begin(), rw.end()), RT, 2e-2);
    snprintf(name, sizeof(name), "layernorm_backward dbias += (N=%d C=%d)", N, C);
    check(name, dgb.get(), vecf(rb.begin(), rb.end()), RT, 2e-2);
    {   // accumulate 0: dinp written over what it held
        Dev dw0(gi);
        cuda_layernorm_backward(dw0.p, NULL, NULL, dg.p, dx.p, dw.p, smean.p, srstd.p, N, C, 0);
        vecf r0((size_t)N * C), c0 = gi;
        for (size_t i = 0; i < r0.size(); i++) r0[i] = (float)(ri[i] - gi[i]);
        snprintf(name, sizeof(name), "layernorm_backward dinp written (accumulate 0, N=%d C=%d)", N, C);
        check(name, dw0.get(), r0, RT, 2e-2);
        cpu_layernorm_backward(c0.data(), NULL, NULL, g.data(), x.data(), w.data(), wmean.data(), wrstd.data(), N, C, 0);
        snprintf(name, sizeof(name), "vs cpu: layernorm_backward dinp written (N=%d C=%d)", N, C);
        check(name, dw0.get(), c0, RT, 2e-2);
    }
    vecf co((size_t)N * C), cm(N), cr(N), cres((size_t)N * C), ci = gi, cw = gw, cb = gb;
    cpu_layernorm_forward(co.data(), cm.data(), cr.data(), x.data(), w.data(), b.data(), N, C);
    snprintf(name, sizeof(name), "vs cpu: layernorm_forward out, rstd (N=%d C=%d)", N, C);
    cuda_layernorm_forward(dout.p, dmean.p, drstd.p, dx.p, dw.p, db.p, N, C);
    check(name, dout.get(), co, RT, 1e-2);
    check(name, drstd.get(), cr, 1e-4, 1e-6);
    cpu_fused_residual_layernorm_forward(cres.data(), co.data(), cm.data(), cr.data(), x.data(), y.data(), w.data(), b.data(), N, C);
    cuda_fused_residual_layernorm_forward(dres.p, dout.p, dmean.p, drstd.p, dx.p, dy.p, dw.p, db.p, N, C);
    snprintf(name, sizeof(name), "vs cpu: fused_residual_layernorm_forward (N=%d C=%d)", N, C);
    check(name, dout.get(), co, RT, 2e-2);   // CPU normalises the unrounded fp32 residual
    cpu_layernorm_backward(ci.data(), cw.data(), cb.data(), g.data(), x.data(), w.data(), wmean.data(), wrstd.data(), N, C, 1);
    snprintf(name, sizeof(name), "vs cpu: layernorm_backward dinp, dweight, dbias (N=%d C=%d)", N, C);
    vecf got = dgi.get(), t1 = dgw.get(), t2 = dgb.get();
    got.insert(got.end(), t1.begin(), t1.end()); got.insert(got.end(), t2.begin(), t2.end());
    ci.insert(ci.end(), cw.begin(), cw.end()); ci.insert(ci.end(), cb.begin(), cb.end());
    check(name, got, ci, RT, 2e-2);
}

// accumulate 0 (dinp written over what it held), and matmul_backward_gelu: dpre = (dout W) *
// gelu'(pre), through cuBLASLt's DGELU epilogue when C % 8 == 0 (the emulated GEMM applies the
// same derivative), else GEMM + gelu_backward in place. dweight / dbias still accumulate.
static void test_matmul_backward_write(int N, int C, int OC, const vecf& x, const vecf& w, const vecf& g,
                                       const vecf& gi, const vecf& gw, const vecf& gb) {
    char name[160];
    const size_t NC = (size_t)N * C;
    vecf pre = rnd_vec(NC, 3.0f);
    Dev dx(x), dw(w), dg(g), dgi(gi), dpre(pre), dgp(gi), dgw(gw), dgb(gb);
    cuda_matmul_backward(dgi.p, NULL, NULL, dg.p, dx.p, dw.p, N, C, OC, 0);
    cuda_matmul_backward_gelu(dgp.p, dgw.p, dgb.p, dg.p, dx.p, dpre.p, dw.p, N, C, OC);
    std::vector<double> ri(NC, 0.0), rw(gw.begin(), gw.end()), rb(gb.begin(), gb.end());
    ref_matmul_backward(ri.data(), rw.data(), rb.data(), g.data(), x.data(), w.data(), N, C, OC);
    vecf rp(NC);
    for (size_t i = 0; i < NC; i++) rp[i] = (float)(ri[i] * ref_gelu_grad(pre[i]));
    snprintf(name, sizeof(name), "matmul_backward dinp written (accumulate 0, N=%d C=%d OC=%d)", N, C, OC);
    check(name, dgi.get(), vecf(ri.begin(), ri.end()), RT, 2e-2);
    snprintf(name, sizeof(name), "matmul_backward_gelu dpre (N=%d C=%d OC=%d)", N, C, OC);
    check(name, dgp.get(), rp, RT, 2e-2);
    snprintf(name, sizeof(name), "matmul_backward_gelu dweight, dbias += (N=%d C=%d OC=%d)", N, C, OC);
    check(name, dgw.get(), vecf(rw.begin(), rw.end()), RT, 2e-2);
    check(name, dgb.get(), vecf(rb.begin(), rb.end()), RT, 2e-2);
    vecf ci = gi, cp = gi, cw = gw, cb = gb;
    cpu_matmul_backward(ci.data(), NULL, NULL, g.data(), x.data(), w.data(), N, C, OC, 0);
    cpu_matmul_backward_gelu(cp.data(), cw.data(), cb.data(), g.data(), x.data(), pre.data(), w.data(), N, C, OC);
    snprintf(name, sizeof(name), "vs cpu: matmul_backward written, matmul_backward_gelu (N=%d C=%d OC=%d)", N, C, OC);
    check(name, dgi.get(), ci, RT, 2e-2);
    check(name, dgp.get(), cp, RT, 2e-2);
    check(name, dgw.get(), cw, RT, 2e-2);
    check(name, dgb.get(), cb, RT, 2e-2);
}

// matmul_forward_acc: out += inp w^T on top of what out holds (cuBLASLt beta = 1), against a
// double reference and the CPU backend's
static void test_matmul_forward_acc(int N, int C, int OC) {
    char name[160];
    vecf x = rnd_vec((size_t)N * C, 1.0f), w = rnd_vec((size_t)OC * C, 0.5f), o = rnd_vec((size_t)N * OC, 1.0f);
    Dev dx(x), dw(w), dout(o);
    vecf want((size_t)N * OC), co = o;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < OC; k++) {
            double s = o[(size_t)n * OC + k];
            for (int c = 0; c < C; c++) s += (double)x[(size_t)n * C + c] * w[(size_t)k * C + c];
            want[(size_t)n * OC + k] = (float)s;
        }
    cuda_matmul_forward_acc(dout.p, dx.p, dw.p, N, C, OC);
    snprintf(name, sizeof(name), "matmul_forward_acc out += (N=%d C=%d OC=%d)", N, C, OC);
    check(name, dout.get(), want, RT, 1e-2);
    cpu_matmul_forward_acc(co.data(), x.data(), w.data(), N, C, OC);
    snprintf(name, sizeof(name), "vs cpu: matmul_forward_acc (N=%d C=%d OC=%d)", N, C, OC);
    check(name, dout.get(), co, RT, 1e-2);
}

static void test_matmul(int N, int C, int OC, int with_bias, int with_gelu) {
    char name[160];
    vecf x = rnd_vec((size_t)N * C, 1.0f), w = rnd_vec((size_t)OC * C, 0.5f), b = rnd_vec(OC, 0.5f);
    Dev dx(x), dw(w), db(b), dout((size_t)N * OC), dgelu((size_t)N * OC);
    vecf want((size_t)N * OC), wgelu((size_t)N * OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = with_bias ? b[o] : 0.0;
            for (int c = 0; c < C; c++) s += (double)x[(size_t)n * C + c] * w[(size_t)o * C + c];
            want[(size_t)n * OC + o] = (float)s;
            wgelu[(size_t)n * OC + o] = (float)ref_gelu(s);
        }
    cuda_matmul_forward(dout.p, with_gelu ? dgelu.p : NULL, dx.p, dw.p, with_bias ? db.p : NULL, N, C, OC);
    snprintf(name, sizeof(name), "matmul_forward out (N=%d C=%d OC=%d bias=%d gelu=%d)", N, C, OC, with_bias, with_gelu);
    check(name, dout.get(), want, RT, 1e-2);
    if (with_gelu) {
        snprintf(name, sizeof(name), "matmul_forward gelu_out (N=%d C=%d OC=%d bias=%d)", N, C, OC, with_bias);
        check(name, dgelu.get(), wgelu, RT, 1e-2);
    }

    vecf g = rnd_vec((size_t)N * OC, 1.0f), gi = rnd_vec((size_t)N * C, 0.5f), gw = rnd_vec((size_t)OC * C, 0.5f),
         gb = rnd_vec(OC, 0.5f);
    Dev dg(g), dgi(gi), dgw(gw), dgb(gb);
    cuda_matmul_backward(dgi.p, dgw.p, with_bias ? dgb.p : NULL, dg.p, dx.p, dw.p, N, C, OC, 1);
    std::vector<double> ri(gi.begin(), gi.end()), rw(gw.begin(), gw.end()), rb(gb.begin(), gb.end());
    ref_matmul_backward(ri.data(), rw.data(), rb.data(), g.data(), x.data(), w.data(), N, C, OC);
    snprintf(name, sizeof(name), "matmul_backward dinp += (N=%d C=%d OC=%d)", N, C, OC);
    check(name, dgi.get(), vecf(ri.begin(), ri.end()), RT, 2e-2);
    snprintf(name, sizeof(name), "matmul_backward dweight += (N=%d C=%d OC=%d)", N, C, OC);
    check(name, dgw.get(), vecf(rw.begin(), rw.end()), RT, 2e-2);
    if (with_bias) {
        snprintf(name, sizeof(name), "matmul_backward dbias += (N=%d C=%d OC=%d)", N, C, OC);
        check(name, dgb.get(), vecf(rb.begin(), rb.end()), RT, 2e-2);
    } else {
        TEST_CHECK(dgb.get() == gb, "matmul_backward changed a dbias it was not given");
    }
    vecf co((size_t)N * OC), cg((size_t)N * OC), ci = gi, cw = gw, cb = gb;
    cpu_matmul_forward(co.data(), with_gelu ? cg.data() : NULL, x.data(), w.data(), with_bias ? b.data() : NULL, N, C, OC);
    snprintf(name, sizeof(name), "vs cpu: matmul_forward (N=%d C=%d OC=%d bias=%d gelu=%d)", N, C, OC, with_bias, with_gelu);
    check(name, dout.get(), co, RT, 1e-2);
    if (with_gelu) check(name, dgelu.get(), cg, RT, 1e-2);
    cpu_matmul_backward(ci.data(), cw.data(), with_bias ? cb.data() : NULL, g.data(), x.data(), w.data(), N, C, OC, 1);
    snprintf(name, sizeof(name), "vs cpu: matmul_backward (N=%d C=%d OC=%d)", N, C, OC);
    check(name, dgi.get(), ci, RT, 2e-2);
    check(name, dgw.get(), cw, RT, 2e-2);
    check(name, dgb.get(), cb, RT, 2e-2);
    test_matmul_backward_write(N, C, OC, x, w, g, gi, gw, gb);
}

// matmul_forward_q8 on blocks that gguf_quantize_q8_0 (ggml's reference quantizer) made: against a
// double reference on their exact values d * q and against the CPU backend's op. C of 1 to 5
// blocks (a warp step covers 4: idle lanes), N past one pass of 4 rows, OC not a multiple of the
// block's 4 warps.
static void test_matmul_q8(int N, int C, int OC, int with_bias, int with_gelu) {
    char name[160];
    vecf x = rnd_vec((size_t)N * C, 1.0f), w = rnd_vec((size_t)OC * C, 0.5f), b = rnd_vec(OC, 0.5f);
    std::vector<uint8_t> q((size_t)OC * C / OPS_Q8_BLOCK * OPS_Q8_BLOCK_BYTES);
    gguf_quantize_q8_0(w.data(), q.data(), w.size());
    gguf_dequantize_q8_0(q.data(), w.data(), w.size());
    vecf want((size_t)N * OC), wgelu((size_t)N * OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double sum = with_bias ? b[o] : 0.0;
            for (int c = 0; c < C; c++) sum += (double)x[(size_t)n * C + c] * w[(size_t)o * C + c];
            want[(size_t)n * OC + o] = (float)sum;
            wgelu[(size_t)n * OC + o] = (float)ref_gelu(sum);
        }
    uint8_t* dq = (uint8_t*)cuda_ops_alloc(q.size());
    cuda_ops_to_device(dq, q.data(), q.size());
    Dev dx(x), db(b), dout((size_t)N * OC), dgelu((size_t)N * OC);
    cuda_matmul_forward_q8(dout.p, with_gelu ? dgelu.p : NULL, dx.p, dq, with_bias ? db.p : NULL, N, C, OC);
    snprintf(name, sizeof(name), "matmul_forward_q8 out (N=%d C=%d OC=%d bias=%d gelu=%d)", N, C, OC, with_bias, with_gelu);
    check(name, dout.get(), want, RT, 1e-2);
    if (with_gelu) check(name, dgelu.get(), wgelu, RT, 1e-2);
    vecf co((size_t)N * OC), cg((size_t)N * OC);
    cpu_matmul_forward_q8(co.data(), with_gelu ? cg.data() : NULL, x.data(), q.data(), with_bias ? b.data() : NULL, N, C, OC);
    snprintf(name, sizeof(name), "vs cpu: matmul_forward_q8 (N=%d C=%d OC=%d bias=%d gelu=%d)", N, C, OC, with_bias, with_gelu);
    check(name, dout.get(), co, RT, 1e-2);
    if (with_gelu) check(name, dgelu.get(), cg, RT, 1e-2);
    cuda_ops_free(dq);
}

static void test_attention(int B, int T, int C, int NH) {
    char name[160];
    int HS = C / NH;
    vecf qkv = rnd_vec((size_t)B * T * 3 * C, 1.5f);
    Dev dqkv(qkv), dout((size_t)B * T * C);
    DevF dlse((size_t)B * NH * T);
    cuda_attention_forward(dout.p, dlse.p, dqkv.p, NULL, B, T, C, NH);
    vecf want((size_t)B * T * C), wlse((size_t)B * NH * T);
    // reference probabilities P[b][h][t][s], double
    std::vector<double> P((size_t)B * NH * T * T, 0.0);
    double sc = 1.0 / sqrt((double)HS);
    auto Q = [&](int b, int t, int h, int d) { return (double)qkv[((size_t)b * T + t) * 3 * C + (size_t)h * HS + d]; };
    auto K = [&](int b, int t, int h, int d) { return (double)qkv[((size_t)b * T + t) * 3 * C + C + (size_t)h * HS + d]; };
    auto Vv = [&](int b, int t, int h, int d) { return (double)qkv[((size_t)b * T + t) * 3 * C + 2 * C + (size_t)h * HS + d]; };
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double* p = &P[(((size_t)b * NH + h) * T + t) * T];
                double mx = -1e300, sum = 0.0;
                for (int s = 0; s <= t; s++) {
                    double a = 0.0;
                    for (int d = 0; d < HS; d++) a += Q(b, t, h, d) * K(b, s, h, d);
                    p[s] = a * sc; mx = std::max(mx, p[s]);
                }
                for (int s = 0; s <= t; s++) sum += exp(p[s] - mx);
                wlse[((size_t)b * NH + h) * T + t] = (float)(mx + log(sum));
                for (int s = 0; s <= t; s++) p[s] = exp(p[s] - mx) / sum;
                for (int d = 0; d < HS; d++) {
                    double o = 0.0;
                    for (int s = 0; s <= t; s++) o += p[s] * Vv(b, s, h, d);
                    want[((size_t)b * T + t) * C + (size_t)h * HS + d] = (float)o;
                }
            }
    snprintf(name, sizeof(name), "attention_forward out (B=%d T=%d C=%d NH=%d)", B, T, C, NH);
    check(name, dout.get(), want, RT, 1e-2);
    snprintf(name, sizeof(name), "attention_forward lse (B=%d T=%d C=%d NH=%d)", B, T, C, NH);
    check(name, dlse.get(), wlse, 1e-4, 1e-4);

    // backward; the kernel gets its own (bf16) out and lse, as in training
    vecf g = rnd_vec((size_t)B * T * C, 1.0f), acc = rnd_vec((size_t)B * T * 3 * C, 0.5f);
    Dev dg(g), dacc(acc);
    vecf out_bf = dout.get();
    cuda_attention_backward(dacc.p, dg.p, dqkv.p, dout.p, dlse.p, NULL, B, T, C, NH, 1);
    std::vector<double> r(acc.begin(), acc.end());
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double* p = &P[(((size_t)b * NH + h) * T + t) * T];
                const float* go = &g[((size_t)b * T + t) * C + (size_t)h * HS];
                double Dt = 0.0;
                for (int d = 0; d < HS; d++) Dt += go[d] * (double)out_bf[((size_t)b * T + t) * C + (size_t)h * HS + d];
                for (int s = 0; s <= t; s++) {
                    double dp = 0.0;
                    for (int d = 0; d < HS; d++) dp += go[d] * Vv(b, s, h, d);
                    double ds = p[s] * (dp - Dt);
                    for (int d = 0; d < HS; d++) {
                        r[((size_t)b * T + t) * 3 * C + (size_t)h * HS + d] += sc * ds * K(b, s, h, d);
                        r[((size_t)b * T + s) * 3 * C + C + (size_t)h * HS + d] += sc * ds * Q(b, t, h, d);
                        r[((size_t)b * T + s) * 3 * C + 2 * C + (size_t)h * HS + d] += p[s] * go[d];
                    }
                }
            }
    snprintf(name, sizeof(name), "attention_backward dqkv += (B=%d T=%d C=%d NH=%d)", B, T, C, NH);
    check(name, dacc.get(), vecf(r.begin(), r.end()), RT, 2e-2);
    Dev dwr(acc);   // accumulate 0: written over acc
    cuda_attention_backward(dwr.p, dg.p, dqkv.p, dout.p, dlse.p, NULL, B, T, C, NH, 0);
    vecf r0(r.size());
    for (size_t i = 0; i < r0.size(); i++) r0[i] = (float)(r[i] - acc[i]);
    snprintf(name, sizeof(name), "attention_backward dqkv written (accumulate 0, B=%d T=%d C=%d NH=%d)", B, T, C, NH);
    check(name, dwr.get(), r0, RT, 2e-2);
    // the CPU backend end to end (its own out / lse feed its backward)
    vecf co((size_t)B * T * C), cl((size_t)B * NH * T), cd = acc;
    cpu_attention_forward(co.data(), cl.data(), qkv.data(), NULL, B, T, C, NH);
    snprintf(name, sizeof(name), "vs cpu: attention_forward out, lse (B=%d T=%d C=%d NH=%d)", B, T, C, NH);
    check(name, dout.get(), co, RT, 1e-2);
    check(name, dlse.get(), cl, 1e-4, 1e-4);
    cpu_attention_backward(cd.data(), g.data(), qkv.data(), co.data(), cl.data(), NULL, B, T, C, NH, 1);
    snprintf(name, sizeof(name), "vs cpu: attention_backward (B=%d T=%d C=%d NH=%d)", B, T, C, NH);
    check(name, dacc.get(), cd, RT, 2e-2);
    vecf cw = acc;
    cpu_attention_backward(cw.data(), g.data(), qkv.data(), co.data(), cl.data(), NULL, B, T, C, NH, 0);
    snprintf(name, sizeof(name), "vs cpu: attention_backward written (B=%d T=%d C=%d NH=%d)", B, T, C, NH);
    check(name, dwr.get(), cw, RT, 2e-2);
}

// classifier_train: lm_head, fused classifier and the lm_head's dx / dw (accumulated) against the
// CPU backend's, which goes through the rows in blocks (N = 600: blocks of 512 and 88 rows there).
static void test_classifier_train(int N, int C, int V, int Vp) {
    char name[160];
    vecf x = rnd_vec((size_t)N * C, 1.0f), w = rnd_vec((size_t)Vp * C, 1.0f);
    vecf gx = rnd_vec((size_t)N * C, 0.01f), gw = rnd_vec((size_t)Vp * C, 0.01f);
    std::vector<int> tgt(N);
    for (int n = 0; n < N; n++) tgt[n] = n % 5 == 2 ? -1 : (n * 7 + 3) % V;
    const float dscale = 1.0f / N;
    Dev dx(x), dw(w), dgx(gx), dgw(gw), dlog((size_t)cuda_classifier_rows(N) * Vp);
    DevI dt(tgt);
    DevF dloss(N);
    cuda_classifier_train(dloss.p, dgx.p, dgw.p, dlog.p, dx.p, dw.p, dt.p, dscale, N, C, V, Vp);
    vecf cl(N), cgx = gx, cgw = gw, clog((size_t)cpu_classifier_rows(N) * Vp);
    cpu_classifier_train(cl.data(), cgx.data(), cgw.data(), clog.data(), x.data(), w.data(), nullptr, tgt.data(), dscale, N, C, V, Vp);
    snprintf(name, sizeof(name), "vs cpu: classifier_train loss (N=%d C=%d V=%d Vp=%d)", N, C, V, Vp);
    check(name, dloss.get(), cl, 2e-2, 2e-2);
    snprintf(name, sizeof(name), "vs cpu: classifier_train dx += (N=%d C=%d V=%d Vp=%d)", N, C, V, Vp);
    check(name, dgx.get(), cgx, RT, 2e-2 * dscale);
    snprintf(name, sizeof(name), "vs cpu: classifier_train dw += (N=%d C=%d V=%d Vp=%d)", N, C, V, Vp);
    check(name, dgw.get(), cgw, RT, 2e-2 * dscale);
}

// classifier_train_rows: a weight per row (the preference objectives) against the CPU backend's;
// its dx / dw also against classifier_train's with that weight folded into rows of equal weight
// (the weights here are one of three values, so each weight's rows give classifier_train's
// gradient of those rows times it), and rows of weight 0 get no gradient.
static void test_classifier_train_rows(int N, int C, int V, int Vp) {
    char name[160];
    vecf x = rnd_vec((size_t)N * C, 1.0f), w = rnd_vec((size_t)Vp * C, 1.0f);
    vecf gx((size_t)N * C, 0.0f), gw((size_t)Vp * C, 0.0f), rows(N);
    std::vector<int> tgt(N);
    const float wts[3] = { 0.0f, 0.125f, -0.375f };
    for (int n = 0; n < N; n++) { tgt[n] = n % 5 == 2 ? -1 : (n * 7 + 3) % V; rows[n] = wts[n % 3]; }
    Dev dx(x), dw(w), dgx(gx), dgw(gw), dlog((size_t)cuda_classifier_rows(N) * Vp);
    DevI dt(tgt);
    DevF dloss(N), drows(rows);
    cuda_classifier_train_rows(dloss.p, dgx.p, dgw.p, dlog.p, dx.p, dw.p, dt.p, drows.p, N, C, V, Vp);
    vecf cl(N), cgx = gx, cgw = gw, clog((size_t)cpu_classifier_rows(N) * Vp);
    cpu_classifier_train_rows(cl.data(), cgx.data(), cgw.data(), clog.data(), x.data(), w.data(), nullptr, tgt.data(), rows.data(), N, C, V, Vp);
    snprintf(name, sizeof(name), "vs cpu: classifier_train_rows loss (N=%d C=%d V=%d Vp=%d)", N, C, V, Vp);
    check(name, dloss.get(), cl, 2e-2, 2e-2);
    snprintf(name, sizeof(name), "vs cpu: classifier_train_rows dx (N=%d C=%d V=%d Vp=%d)", N, C, V, Vp);
    check(name, dgx.get(), cgx, RT, 2e-2 * 0.375f);
    snprintf(name, sizeof(name), "vs cpu: classifier_train_rows dw (N=%d C=%d V=%d Vp=%d)", N, C, V, Vp);
    check(name, dgw.get(), cgw, RT, 2e-2 * 0.375f);
    // the CPU reference: classifier_train on each weight's rows alone (other rows' targets -1)
    vecf sx((size_t)N * C, 0.0f), sw((size_t)Vp * C, 0.0f);
    for (int k = 1; k < 3; k++) {
        std::vector<int> tk(tgt);
        for (int n = 0; n < N; n++) if (n % 3 != k) tk[n] = -1;
        vecf l2(N), lg2((size_t)cpu_classifier_rows(N) * Vp);
        cpu_classifier_train(l2.data(), sx.data(), sw.data(), lg2.data(), x.data(), w.data(), nullptr, tk.data(), wts[k], N, C, V, Vp);
    }
    snprintf(name, sizeof(name), "cpu: classifier_train_rows dx, dw == classifier_train per weight (N=%d)", N);
    sx.insert(sx.end(), sw.begin(), sw.end());
    cgx.insert(cgx.end(), cgw.begin(), cgw.end());
    check(name, cgx, sx, 1e-5, 1e-6);
    int zero = 1;
    for (int n = 0; n < N; n += 3) for (int c = 0; c < C; c++) zero &= cgx[(size_t)n * C + c] == 0.0f;
    TEST_CHECK(zero, "classifier_train_rows: rows of weight 0 got an input gradient");
}

// seq_logp_sums: minus the sums of ranges of per-token losses, in double; empty and long ranges,
// ranges that overlap or repeat (ORPO sums a chosen record's completion and its whole record)
static void test_seq_logp_sums(int N) {
    char name[128];
    vecf l = rnd_vec((size_t)N, 3.0f);
    for (auto& v : l) v = fabsf(v);
    std::vector<int> r = { 0, 0, 0, 1, 3, 7, 5, 300, 0, N, 5, 300, N - 2, N };
    const int S = (int)r.size() / 2;
    DevF dl(l);
    DevI dr(r);
    double* dout = (double*)cuda_ops_alloc((size_t)S * sizeof(double));
    cuda_seq_logp_sums(dout, dl.p, dr.p, S);
    std::vector<double> got(S), cpu(S);
    cuda_ops_to_host(got.data(), dout, (size_t)S * sizeof(double));
    cpu_seq_logp_sums(cpu.data(), l.data(), r.data(), S);
    int ok = 1, same = 1;
    for (int s = 0; s < S; s++) {
        double want = 0;
        for (int i = r[2 * s]; i < r[2 * s + 1]; i++) want -= l[i];
        ok &= fabs(got[s] - want) <= 1e-12 * (1 + fabs(want));
        same &= fabs(cpu[s] - want) <= 1e-12 * (1 + fabs(want));
    }
    snprintf(name, sizeof(name), "seq_logp_sums (N=%d, %d ranges)", N, S);
    TEST_CHECK(ok && same, "%s: a sum differs from the double reference (cuda %d, cpu %d)", name, ok, same);
    if (ok && same) printf("ok   %s and vs cpu\n", name);
    cuda_seq_logp_sums(dout, dl.p, dr.p, S);
    std::vector<double> again(S);
    cuda_ops_to_host(again.data(), dout, (size_t)S * sizeof(double));
    TEST_CHECK(again == got, "seq_logp_sums is not deterministic");
    cuda_ops_free(dout);
}

static void test_classifier(int N, int V, int Vp) {
    char name[160];
    vecf logits = rnd_vec((size_t)N * Vp, 4.0f);
    std::vector<int> tgt(N);
    for (int n = 0; n < N; n++) tgt[n] = (n * 7 + 3) % V;
    tgt[1 % N] = -1;   // ignored row
    DevI dt(tgt);
    DevF dloss(N);
    Dev dl(logits);
    vecf wloss(N), wgrad((size_t)N * Vp, 0.0f);
    float dscale = 1.0f / N;
    for (int n = 0; n < N; n++) {
        const float* x = &logits[(size_t)n * Vp];
        double mx = -1e300, s = 0.0;
        for (int v = 0; v < V; v++) mx = std::max(mx, (double)x[v]);
        for (int v = 0; v < V; v++) s += exp(x[v] - mx);
        double lse = mx + log(s);
        wloss[n] = tgt[n] < 0 ? 0.0f : (float)(lse - x[tgt[n]]);
        if (tgt[n] >= 0)
            for (int v = 0; v < V; v++) wgrad[(size_t)n * Vp + v] = (float)(dscale * (exp(x[v] - lse) - (v == tgt[n])));
    }
    cuda_fused_classifier(dloss.p, dl.p, dt.p, 0.0f, N, V, Vp);   // loss only: logits untouched
    snprintf(name, sizeof(name), "fused_classifier loss, dloss=0 (N=%d V=%d Vp=%d)", N, V, Vp);
    check(name, dloss.get(), wloss, 1e-5, 1e-5);
    snprintf(name, sizeof(name), "fused_classifier dloss=0 leaves logits (N=%d V=%d Vp=%d)", N, V, Vp);
    check(name, dl.get(), logits, 0.0, 0.0);
    cuda_fused_classifier(dloss.p, dl.p, dt.p, dscale, N, V, Vp);
    snprintf(name, sizeof(name), "fused_classifier loss (N=%d V=%d Vp=%d)", N, V, Vp);
    check(name, dloss.get(), wloss, 1e-5, 1e-5);
    snprintf(name, sizeof(name), "fused_classifier dlogits, padded cols zero (N=%d V=%d Vp=%d)", N, V, Vp);
    check(name, dl.get(), wgrad, RT, 1e-4 * dscale);
    vecf cl(N), cx = logits;
    cpu_fused_classifier(cl.data(), cx.data(), tgt.data(), dscale, N, V, Vp);
    snprintf(name, sizeof(name), "vs cpu: fused_classifier loss, dlogits (N=%d V=%d Vp=%d)", N, V, Vp);
    check(name, dloss.get(), cl, 1e-5, 1e-5);
    check(name, dl.get(), cx, RT, 1e-4 * dscale);
    // a target outside the vocabulary: NaN loss (caught by the trainer), zero gradient, no
    // out-of-row read
    std::vector<int> tbad(tgt);
    tbad[0] = V;
    DevI dtb(tbad);
    Dev dl2(logits);
    cuda_fused_classifier(dloss.p, dl2.p, dtb.p, dscale, N, V, Vp);
    vecf lb = dloss.get(), gb = dl2.get();
    int zero_row = 1;
    for (int v = 0; v < Vp; v++) zero_row &= gb[v] == 0.0f;
    TEST_CHECK(std::isnan(lb[0]) && zero_row, "fused_classifier: target %d >= V gave loss %g (want NaN) / nonzero grads", V, lb[0]);
}

static void test_adamw(size_t n, int with_master) {
    char name[160];
    vecf p = rnd_vec(n, 1.0f), g = rnd_vec(n, 1.0f), m = rnd_vec(n, 0.1f), v(n);
    for (size_t i = 0; i < n; i++) v[i] = 0.01f * (1.5f + rnd_uniform());
    float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    int t = 3;
    Dev dp(p), dg(g), dp2(p);
    DevF dmaster(p), dm(m), dv(v), dmaster2(p), dm2(m), dv2(v);
    cuda_adamw_update(dp.p, with_master ? dmaster.p : NULL, dg.p, dm.p, dv.p, n, lr, b1, b2, eps, wd, gs, t, 1234u);
    vecf wp(n), wm(n), wv(n);
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (size_t i = 0; i < n; i++) {
        double gg = (double)g[i] * gs;
        double mi = b1 * (double)m[i] + (1.0 - b1) * gg, vi = b2 * (double)v[i] + (1.0 - b2) * gg * gg;
        wm[i] = (float)mi; wv[i] = (float)vi;
        wp[i] = (float)(p[i] - lr * ((mi / bc1) / (sqrt(vi / bc2) + eps) + wd * p[i]));
    }
    snprintf(name, sizeof(name), "adamw m (n=%zu master=%d)", n, with_master);
    check(name, dm.get(), wm, 1e-5, 1e-7);
    snprintf(name, sizeof(name), "adamw v (n=%zu master=%d)", n, with_master);
    check(name, dv.get(), wv, 1e-5, 1e-9);
    if (with_master) {
        snprintf(name, sizeof(name), "adamw master (n=%zu)", n);
        check(name, dmaster.get(), wp, 1e-5, 1e-6);
    }
    // params: stochastic rounding of the fp32 result, so within one bf16 ulp of the exact value
    vecf got = dp.get();
    snprintf(name, sizeof(name), "adamw params, stochastic rounding (n=%zu master=%d)", n, with_master);
    check(name, got, wp, 8e-3, 1e-6);
    if (with_master) {
        // exactly: the bf16 just below or just above the device's fp32 master value
        vecf mst = dmaster.get();
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t u; memcpy(&u, &mst[i], 4);
            uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;   // toward / away from zero
            float flo, fhi; memcpy(&flo, &lo, 4); memcpy(&fhi, &hi, 4);
            if (!(got[i] == flo || (got[i] == fhi && lo != u))) bad++;
        }
        TEST_CHECK(bad == 0, "adamw: %zu of %zu params are not a bf16 neighbour of their fp32 master", bad, n);
    }
    // deterministic given the seed; a different seed rounds differently somewhere
    cuda_adamw_update(dp2.p, with_master ? dmaster2.p : NULL, dg.p, dm2.p, dv2.p, n, lr, b1, b2, eps, wd, gs, t, 1234u);
    TEST_CHECK(dp2.get() == got, "adamw: same seed gave different params");
    Dev dp3(p);
    DevF dmaster3(p), dm3(m), dv3(v);
    cuda_adamw_update(dp3.p, with_master ? dmaster3.p : NULL, dg.p, dm3.p, dv3.p, n, lr, b1, b2, eps, wd, gs, t, 99u);
    TEST_CHECK(!(dp3.get() == got), "adamw: a different seed gave identical rounding of %zu values", n);
    // unbiased: over all elements, rounding up happens in proportion to the discarded fraction
    double bias = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) { bias += got[i] - wp[i]; mag += fabs(bf16_round(wp[i]) - wp[i]); }
    TEST_CHECK(fabs(bias) < 0.5 * mag + 1e-6, "adamw: stochastic rounding looks biased (%g vs %g)", bias, mag);
    // the scalar path (misaligned params) rounds exactly like the 128-bit path: same random bits
    Dev dp4(p, 1);
    DevF dmaster4(p), dm4(m), dv4(v);
    cuda_adamw_update(dp4.p, with_master ? dmaster4.p : NULL, dg.p, dm4.p, dv4.p, n, lr, b1, b2, eps, wd, gs, t, 1234u);
    snprintf(name, sizeof(name), "adamw scalar path vs 128-bit path (n=%zu master=%d)", n, with_master);
#ifdef LLMC_CUDA_EMULATED
    check(name, dp4.get(), got, 0.0, 0.0);   // same CPU arithmetic on both paths
#else
    check(name, dp4.get(), got, 8e-3, 1e-6);   // the GPU may contract the two paths differently
#endif
    if (with_master) {
        vecf cp = p, cm = m, cv = v, cmaster = p;
        cpu_adamw_update(cp.data(), cmaster.data(), g.data(), cm.data(), cv.data(), n, lr, b1, b2, eps, wd, gs, t, 1234u);
        snprintf(name, sizeof(name), "vs cpu: adamw master, m, v (n=%zu)", n);
        check(name, dmaster.get(), cmaster, 1e-5, 1e-6);
        check(name, dm.get(), cm, 1e-5, 1e-7);
        check(name, dv.get(), cv, 1e-5, 1e-9);
    }
}

// NULL gradient outputs mean "not needed" (frozen tensors): the others must still be right and
// nothing may be written for the NULL ones
static void test_null_grads(void) {
    const int N = 9, C = 16, OC = 24, B = 3, T = 3, V = 6;
    vecf x = rnd_vec((size_t)N * C, 1.0f), w = rnd_vec((size_t)OC * C, 0.5f), g = rnd_vec((size_t)N * OC, 1.0f);
    vecf gi = rnd_vec((size_t)N * C, 0.5f), gw = rnd_vec((size_t)OC * C, 0.5f), gb = rnd_vec(OC, 0.5f);
    Dev dx(x), dw(w), dg(g), dgi(gi), dgw(gw), dgb(gb);
    vecf ci = gi, cw = gw, cb = gb;
    // dinp only (a frozen linear layer inside the network)
    cuda_matmul_backward(dgi.p, NULL, NULL, dg.p, dx.p, dw.p, N, C, OC, 1);
    cpu_matmul_backward(ci.data(), NULL, NULL, g.data(), x.data(), w.data(), N, C, OC, 1);
    check("matmul_backward dinp only (dweight, dbias NULL)", dgi.get(), ci, RT, 2e-2);
    // dweight only (first layer: no dinp), then dbias only
    cuda_matmul_backward(NULL, dgw.p, NULL, dg.p, dx.p, dw.p, N, C, OC, 1);
    cpu_matmul_backward(NULL, cw.data(), NULL, g.data(), x.data(), w.data(), N, C, OC, 1);
    check("matmul_backward dweight only", dgw.get(), cw, RT, 2e-2);
    cuda_matmul_backward(NULL, NULL, dgb.p, dg.p, dx.p, dw.p, N, C, OC, 1);
    cpu_matmul_backward(NULL, NULL, cb.data(), g.data(), x.data(), w.data(), N, C, OC, 1);
    check("matmul_backward dbias only", dgb.get(), cb, RT, 2e-2);

    // layernorm: dinp only, then dweight/dbias only
    vecf lw = rnd_vec(C, 1.0f), lb = rnd_vec(C, 0.5f), lg = rnd_vec((size_t)N * C, 1.0f);
    vecf lo((size_t)N * C), mean(N), rstd(N);
    cpu_layernorm_forward(lo.data(), mean.data(), rstd.data(), x.data(), lw.data(), lb.data(), N, C);
    Dev dlw(lw), dlg(lg), dli(gi), dlww(gw), dlbb(gb);
    DevF dmean(mean), drstd(rstd);
    vecf li = gi, lww(gw.begin(), gw.begin() + C), lbb(gb.begin(), gb.begin() + C);
    cuda_layernorm_backward(dli.p, NULL, NULL, dlg.p, dx.p, dlw.p, dmean.p, drstd.p, N, C, 1);
    cpu_layernorm_backward(li.data(), NULL, NULL, lg.data(), x.data(), lw.data(), mean.data(), rstd.data(), N, C, 1);
    check("layernorm_backward dinp only", dli.get(), li, RT, 2e-2);
    cuda_layernorm_backward(NULL, dlww.p, dlbb.p, dlg.p, dx.p, dlw.p, dmean.p, drstd.p, N, C, 1);
    cpu_layernorm_backward(NULL, lww.data(), lbb.data(), lg.data(), x.data(), lw.data(), mean.data(), rstd.data(), N, C, 1);
    vecf got_w = dlww.get(), got_b = dlbb.get();
    check("layernorm_backward dweight only", vecf(got_w.begin(), got_w.begin() + C), lww, RT, 2e-2);
    check("layernorm_backward dbias only", vecf(got_b.begin(), got_b.begin() + C), lbb, RT, 2e-2);

    // encoder: dwpe only, then dwte only
    std::vector<int> tok(B * T);
    for (int i = 0; i < B * T; i++) tok[i] = (i * 5) % V;
    DevI dtok(tok);
    vecf eg = rnd_vec((size_t)B * T * C, 1.0f), ew = rnd_vec((size_t)V * C, 0.5f), ep = rnd_vec((size_t)T * C, 0.5f);
    Dev deg(eg), dew(ew), dep(ep);
    vecf cw2 = ew, cp2 = ep;
    cuda_encoder_backward(NULL, dep.p, deg.p, tok.data(), NULL, B, T, C);
    cpu_encoder_backward(NULL, cp2.data(), eg.data(), tok.data(), NULL, B, T, C);
    check("encoder_backward dwpe only", dep.get(), cp2, RT, 1e-2);
    cuda_encoder_backward(dew.p, NULL, deg.p, tok.data(), NULL, B, T, C);
    cpu_encoder_backward(cw2.data(), NULL, eg.data(), tok.data(), NULL, B, T, C);
    check("encoder_backward dwte only", dew.get(), cw2, RT, 1e-2);
}

static void test_reductions(size_t n) {
    char name[128];
    vecf x = rnd_vec(n, 2.0f);
    Dev dx(x);
    DevF df(x);
    double ss = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) { ss += (double)x[i] * x[i]; s += x[i]; }
    double got_ss = cuda_sum_squares(dx.p, n), got_s = cuda_sum_f32(df.p, n);
    snprintf(name, sizeof(name), "sum_squares (n=%zu)", n);
    vecf a1{(float)got_ss}, w1{(float)ss};
    check(name, a1, w1, 1e-5, 1e-5);
    snprintf(name, sizeof(name), "sum_f32 (n=%zu)", n);
    vecf a2{(float)got_s}, w2{(float)s};
    check(name, a2, w2, 1e-5, 1e-4);
    TEST_CHECK(cuda_sum_squares(dx.p, n) == got_ss, "sum_squares not deterministic");
    snprintf(name, sizeof(name), "vs cpu: sum_squares, sum_f32 (n=%zu)", n);
    vecf a3{(float)got_ss, (float)got_s}, w3{(float)cpu_sum_squares(x.data(), n), (float)cpu_sum_f32(x.data(), n)};
    check(name, a3, w3, 1e-5, 1e-4);
    // the accumulating forms: added onto what the accumulator holds, nothing read back until the
    // end, and the same value as the reading forms (which are built on them)
    double init[2] = {0.25, -1.5}, acc[2];
    double* dacc = (double*)cuda_ops_alloc(sizeof(init));
    cuda_ops_to_device_async(dacc, init, sizeof(init));
    cuda_sum_squares_acc(dacc, dx.p, n);
    cuda_sum_squares_acc(dacc, dx.p, n);
    cuda_sum_f32_acc(dacc + 1, df.p, n);
    cuda_ops_to_host(acc, dacc, sizeof(acc));
    TEST_CHECK(acc[0] == (0.25 + got_ss) + got_ss && acc[1] == -1.5 + got_s,
               "sum_squares_acc / sum_f32_acc (n=%zu): %.17g %.17g, want %.17g %.17g", n, acc[0], acc[1],
               (0.25 + got_ss) + got_ss, -1.5 + got_s);
    cuda_ops_free(dacc);
}

// GEMM plans are built once per shape and epilogue, then reused (gemm.cu's cache)
static void test_gemm_plans(void) {
    const int N = 5, C = 24, OC = 40; // a shape no other test uses
    Dev inp(rnd_vec((size_t)N * C, 1.0f)), w(rnd_vec((size_t)OC * C, 1.0f)), b(rnd_vec(OC, 1.0f)), out((size_t)N * OC);
    const long p0 = gemm_plans_built();
    cuda_matmul_forward(out.p, NULL, inp.p, w.p, b.p, N, C, OC);
    const long p1 = gemm_plans_built();
    cuda_matmul_forward(out.p, NULL, inp.p, w.p, b.p, N, C, OC);
    const long p2 = gemm_plans_built();
    cuda_matmul_forward(out.p, NULL, inp.p, w.p, NULL, N, C, OC); // another epilogue: another plan
    const long p3 = gemm_plans_built();
    TEST_CHECK(p1 - p0 == 1 && p2 == p1 && p3 - p2 == 1,
               "GEMM plans built: %ld for a new shape (want 1), %ld for it again (want 0), %ld without bias (want 1)",
               p1 - p0, p2 - p1, p3 - p2);
    printf("ok   gemm plan cache (%ld plans built so far)\n", p3);
}

// The LoRA branch's element-wise ops: the dropout mask must be the CPU backend's, element for
// element (same counter-based RNG), so both backends drop the same inputs.
static void test_lora_ops(size_t n) {
    char name[128];
    vecf a = rnd_vec(n, 2.0f), m(n);
    for (size_t i = 0; i < n; i++) m[i] = (i % 3) ? 1.0f : 0.0f;
    Dev da(a, 0), dout(n, 0), dm(m, 0);
    const float p = 0.3f;
    cuda_dropout_forward(dout.p, da.p, n, p, 1234, 7);
    vecf want(n);
    cpu_dropout_forward(want.data(), a.data(), n, p, 1234, 7);
    for (size_t i = 0; i < n; i++) want[i] = bf16_round(want[i]);
    snprintf(name, sizeof(name), "vs cpu: dropout_forward (n=%zu, p=%.1f)", n, p);
    check(name, dout.get(), want, 8e-3, 1e-6);
    vecf got = dout.get();
    size_t zeros_ok = 0;
    for (size_t i = 0; i < n; i++) zeros_ok += (got[i] == 0.0f) == (want[i] == 0.0f);
    TEST_CHECK(zeros_ok == n, "dropout masks differ between backends at %zu of %zu elements", n - zeros_ok, n);
    cuda_mul_inplace(da.p, dm.p, n);
    vecf c = a;
    cpu_mul_inplace(c.data(), m.data(), n);
    snprintf(name, sizeof(name), "vs cpu: mul_inplace (n=%zu)", n);
    check(name, da.get(), c, 0.0, 0.0);
}

// rows_gather / rows_scatter: K of N rows of W floats (4 W bytes) in a scrambled order, against
// the CPU backend and the definition, exactly; scatter leaves the other rows as they were. off:
// the buffers start a float past 16-byte alignment (the 4-byte path for any W).
static void test_rows_copy(int N, int K, int W, int off) {
    char name[128];
    std::vector<int> perm(N);
    for (int i = 0; i < N; i++) perm[i] = i;
    for (int i = N - 1; i > 0; i--) std::swap(perm[i], perm[(size_t)i * 2654435761u % (size_t)(i + 1)]);
    std::vector<int> idx(perm.begin(), perm.begin() + K);
    const size_t rb = (size_t)W * sizeof(float);
    vecf src = rnd_vec((size_t)N * W + off, 1.0f), dst0 = rnd_vec((size_t)N * W + off, 1.0f);
    DevF ds(src), dd(dst0);
    DevI di(idx);
    cuda_rows_copy(dd.p + off, ds.p + off, di.p, K, rb, 0);
    vecf want = dst0, cpu = dst0;
    for (int k = 0; k < K; k++) memcpy(&want[off + (size_t)k * W], &src[off + (size_t)idx[k] * W], rb);
    cpu_rows_copy(cpu.data() + off, src.data() + off, idx.data(), K, rb, 0);
    snprintf(name, sizeof(name), "rows_gather (%d of %d rows of %zu bytes%s)", K, N, rb, off ? ", misaligned" : "");
    TEST_CHECK(dd.get() == want && cpu == want, "%s: rows differ from the definition (cuda %d, cpu %d)", name,
               dd.get() == want, cpu == want);
    if (dd.get() == want && cpu == want) printf("ok   %s and vs cpu\n", name);
    DevF dd2(dst0);
    cuda_rows_copy(dd2.p + off, ds.p + off, di.p, K, rb, 1);
    want = dst0; cpu = dst0;
    for (int k = 0; k < K; k++) memcpy(&want[off + (size_t)idx[k] * W], &src[off + (size_t)k * W], rb);
    cpu_rows_copy(cpu.data() + off, src.data() + off, idx.data(), K, rb, 1);
    snprintf(name, sizeof(name), "rows_scatter (%d of %d rows of %zu bytes%s)", K, N, rb, off ? ", misaligned" : "");
    TEST_CHECK(dd2.get() == want && cpu == want, "%s: rows differ from the definition (cuda %d, cpu %d)", name,
               dd2.get() == want, cpu == want);
    if (dd2.get() == want && cpu == want) printf("ok   %s and vs cpu\n", name);
}

// DoRA (llmc/ops/ops.h): the row norms of W + scaling B A, the magnitude's scale and its
// gradient, against double references from the definitions and against the CPU backend's. off:
// the buffers start an element past 16-byte alignment (scalar paths).

// norm[o] of W + scaling B A, in double
static vecf dora_norm_ref(const vecf& W, const vecf& A, const vecf& B, float scaling, int OC, int C, int R) {
    vecf norm(OC);
    for (int o = 0; o < OC; o++) {
        double ss = 0.0;
        for (int c = 0; c < C; c++) {
            double v = W[(size_t)o * C + c];
            for (int j = 0; j < R; j++) v += (double)scaling * B[(size_t)o * R + j] * A[(size_t)j * C + c];
            ss += v * v;
        }
        norm[o] = (float)sqrt(ss);
    }
    return norm;
}

// Positive norms near the magnitudes (m / norm near 1, as after DoRA's initialisation).
static vecf dora_rnd_norm(const vecf& m) {
    vecf norm(m.size());
    for (size_t i = 0; i < m.size(); i++) norm[i] = fabsf(m[i]) * (1.0f + 0.25f * rnd_uniform()) + 0.05f;
    return norm;
}

// dora_norm, and dora_norm_w16 (the same kernel on W's bf16 bits; the neutral name, from the CUDA
// dispatch); R > 256 takes B into shared memory in chunks.
static void test_dora_norm(int OC, int C, int R, int off) {
    char name[160];
    const float scaling = 2.0f;   // alpha 16 / rank 8
    vecf W = rnd_vec((size_t)OC * C, 1.0f), A = rnd_vec((size_t)R * C, 0.5f), B = rnd_vec((size_t)OC * R, 0.5f);
    Dev dW(W, off), dA(A, off), dB(B, off);
    DevF dn(OC), dn16(OC);
    const vecf want = dora_norm_ref(W, A, B, scaling, OC, C, R);
    cuda_dora_norm(dn.p, dW.p, dA.p, dB.p, scaling, OC, C, R);
    dora_norm_w16(dn16.p, (const uint16_t*)dW.p, dA.p, dB.p, scaling, OC, C, R);
    snprintf(name, sizeof(name), "dora_norm (OC=%d C=%d R=%d, offset %d)", OC, C, R, off);
    check(name, dn.get(), want, 1e-5, 1e-6);
    vecf got = dn.get(), got16 = dn16.get();
    TEST_CHECK(got == got16, "%s: dora_norm_w16 differs from dora_norm on the same bf16 weight", name);
    std::vector<uint16_t> W16(W.size());
    for (size_t i = 0; i < W.size(); i++) { uint32_t u; memcpy(&u, &W[i], 4); W16[i] = (uint16_t)(u >> 16); }   // W is bf16-exact
    vecf c(OC), c16(OC);
    cpu_dora_norm(c.data(), W.data(), NULL, A.data(), B.data(), scaling, OC, C, R);
    cpu_dora_norm(c16.data(), NULL, W16.data(), A.data(), B.data(), scaling, OC, C, R);
    snprintf(name, sizeof(name), "vs cpu: dora_norm, dora_norm_w16 (OC=%d C=%d R=%d)", OC, C, R);
    check(name, got, c, 1e-5, 1e-6);
    check(name, got16, c16, 1e-5, 1e-6);
}

// dora_scale with shift 0 and -1, bias and none, accumulate 0 and 1, and in place (out = in).
static void test_dora_scale(int N, int OC, int off) {
    char name[160];
    const size_t n = (size_t)N * OC;
    vecf x = rnd_vec(n, 2.0f), y0 = rnd_vec(n, 1.0f), m = rnd_vec(OC, 1.0f), bias = rnd_vec(OC, 0.5f);
    const vecf norm = dora_rnd_norm(m);
    Dev dx(x, off), dm(m, off), db(bias, off);
    DevF dnorm(norm);
    for (int form = 0; form < 8; form++) {
        const float shift = form & 1 ? -1.0f : 0.0f;
        const int with_bias = (form >> 1) & 1, acc = (form >> 2) & 1;
        const float* b = with_bias ? bias.data() : NULL;
        Dev dy(y0, off);
        cuda_dora_scale(dy.p, dx.p, dm.p, dnorm.p, shift, with_bias ? db.p : NULL, N, OC, acc);
        vecf want(n), cpu = y0;
        for (size_t i = 0; i < n; i++) {
            const int o = (int)(i % OC);
            const double v = ((double)m[o] / norm[o] + shift) * x[i] + (b ? b[o] : 0.0);
            want[i] = (float)(acc ? y0[i] + v : v);
        }
        cpu_dora_scale(cpu.data(), x.data(), m.data(), norm.data(), shift, b, N, OC, acc);
        snprintf(name, sizeof(name), "dora_scale (N=%d OC=%d shift %g, %s, accumulate %d, offset %d)", N, OC, shift,
                 with_bias ? "bias" : "no bias", acc, off);
        check(name, dy.get(), want, RT, 1e-3);
        snprintf(name, sizeof(name), "vs cpu: dora_scale (N=%d OC=%d shift %g, %s, accumulate %d)", N, OC, shift,
                 with_bias ? "bias" : "no bias", acc);
        check(name, dy.get(), cpu, RT, 1e-3);
        if (acc) continue;
        Dev dio(x, off);   // in place
        cuda_dora_scale(dio.p, dio.p, dm.p, dnorm.p, shift, with_bias ? db.p : NULL, N, OC, 0);
        snprintf(name, sizeof(name), "dora_scale in place (N=%d OC=%d shift %g, %s, offset %d)", N, OC, shift,
                 with_bias ? "bias" : "no bias", off);
        check(name, dio.get(), want, RT, 1e-3);
    }
}

// dora_magnitude_backward: dm += sum_n dout z / norm, accumulated onto dm's values, and the same
// bits when run again (a fixed order of the sums).
static void test_dora_magnitude_backward(int N, int OC, int off) {
    char name[160];
    const size_t n = (size_t)N * OC;
    vecf g = rnd_vec(n, 1.0f), z = rnd_vec(n, 2.0f), dm0 = rnd_vec(OC, 0.5f), m = rnd_vec(OC, 1.0f);
    const vecf norm = dora_rnd_norm(m);
    Dev dg(g, off), dz(z, off), ddm(dm0, off), ddm2(dm0, off);
    DevF dnorm(norm);
    cuda_dora_magnitude_backward(ddm.p, dg.p, dz.p, dnorm.p, N, OC);
    cuda_dora_magnitude_backward(ddm2.p, dg.p, dz.p, dnorm.p, N, OC);
    vecf want(OC), cpu = dm0;
    for (int o = 0; o < OC; o++) {
        double s = 0.0;
        for (int r = 0; r < N; r++) s += (double)g[(size_t)r * OC + o] * z[(size_t)r * OC + o];
        want[o] = (float)(dm0[o] + s / norm[o]);
    }
    cpu_dora_magnitude_backward(cpu.data(), g.data(), z.data(), norm.data(), N, OC);
    snprintf(name, sizeof(name), "dora_magnitude_backward += (N=%d OC=%d, offset %d)", N, OC, off);
    const vecf got = ddm.get();
    check(name, got, want, RT, 2e-2);
    TEST_CHECK(got == ddm2.get(), "%s: a second run gives other bits", name);
    snprintf(name, sizeof(name), "vs cpu: dora_magnitude_backward (N=%d OC=%d)", N, OC);
    check(name, got, cpu, RT, 2e-2);
}

// ---------------------------------------------------------------------------- the cases

// One table, in the order the full run goes through them (the inputs come from one random stream,
// g_rng). A row: its op, whether it is in the TEST_QUICK subset, the call. The subset (for
// compute-sanitizer's initcheck) is one case of each op, the GEMMs at shapes whose rows are
// 16-byte aligned (the GPU's fast path) and not. `test_cuda_ops --op NAME` runs one op's rows
// (again for more), `--list` names the ops.
#define OP_CASE(op, quick, call) { op, [] { call; }, quick, #call }
static const TestCase CASES[] = {
    OP_CASE("casts", 1, test_casts()),
    OP_CASE("elementwise", 0, test_elementwise(13, 0)),     // ragged tail
    OP_CASE("elementwise", 0, test_elementwise(64, 0)),     // 128-bit path
    OP_CASE("elementwise", 1, test_elementwise(40, 1)),     // misaligned: scalar path
    OP_CASE("encoder", 0, test_encoder(2, 3, 7, 5)),
    OP_CASE("encoder", 1, test_encoder(2, 5, 24, 4)),
    OP_CASE("encoder", 0, test_encoder_positions(3, 17, 72, 11)),
    OP_CASE("layernorm", 0, test_layernorm(5, 7)),
    OP_CASE("layernorm", 1, test_layernorm(11, 40)),
    OP_CASE("layernorm", 0, test_layernorm(3, 264)),      // several chunks per lane
    OP_CASE("layernorm", 0, test_layernorm(130, 768)),    // GPT-2 width, three column-sum chunks
    OP_CASE("matmul", 1, test_matmul(5, 7, 9, 1, 1)),  // unaligned OC: GEMM + separate gelu
    OP_CASE("matmul", 1, test_matmul_forward_acc(70, 8, 24)),   // a LoRA branch: rank 8 in
    OP_CASE("matmul", 0, test_matmul_forward_acc(1, 8, 40)),    // one row
    OP_CASE("matmul", 0, test_matmul(5, 7, 9, 0, 0)),
    OP_CASE("matmul", 1, test_matmul(70, 16, 24, 1, 1)),   // fused GELU epilogue; N > one column-sum chunk
    OP_CASE("matmul", 0, test_matmul(6, 8, 16, 0, 1)),
    OP_CASE("matmul", 0, test_matmul(129, 64, 256, 1, 1)),
    // more row chunks than 2 x SMs (the harness reports 132): each block of the column sums strides
    // over several chunks (ops_colsum_chunks; layernorm's dweight/dbias loop is the same)
    OP_CASE("matmul", 0, test_matmul(17000, 8, 8, 1, 0)),
    OP_CASE("matmul_q8", 1, test_matmul_q8(1, 96, 7, 1, 0)),     // one row (sampling), idle lanes
    OP_CASE("matmul_q8", 1, test_matmul_q8(9, 160, 37, 1, 1)),   // passes of 4, 4, 1 rows; GELU
    OP_CASE("matmul_q8", 0, test_matmul_q8(4, 32, 64, 0, 0)),    // one block a row
    OP_CASE("attention", 0, test_attention(2, 5, 8, 2)),      // HS 4
    OP_CASE("attention", 0, test_attention(1, 35, 48, 1)),    // HS 48: two key tiles, two dims per lane
    OP_CASE("attention", 1, test_attention(2, 70, 128, 2)),   // HS 64 (GPT-2), three key tiles
    OP_CASE("attention", 0, test_attention(1, 9, 128, 1)),    // HS 128: the largest supported
    OP_CASE("attention", 0, test_attention(2, 70, 96, 3)),    // HS 32, two tiles
    OP_CASE("classifier", 1, test_classifier(4, 37, 40)),      // vector path, padded columns
    OP_CASE("classifier", 0, test_classifier(3, 13, 13)),      // scalar path
    OP_CASE("classifier", 0, test_classifier(2, 3000, 3008)),  // several chunks per thread
    OP_CASE("classifier", 1, test_classifier_train(600, 32, 200, 256)),
    OP_CASE("classifier", 1, test_classifier_train_rows(600, 32, 200, 256)),
    OP_CASE("classifier", 0, test_classifier_train_rows(7, 16, 13, 13)),   // scalar path
    OP_CASE("seq_logp_sums", 1, test_seq_logp_sums(1000)),
    OP_CASE("adamw", 0, test_adamw(1000, 1)),
    OP_CASE("adamw", 1, test_adamw(333, 0)),
    OP_CASE("null_grads", 1, test_null_grads()),
    OP_CASE("attention", 0, test_attention(2, 1, 8, 2)),      // T = 1
    OP_CASE("gemm_plans", 0, test_gemm_plans()),
    OP_CASE("reductions", 1, test_reductions(7)),
    OP_CASE("lora", 1, test_lora_ops(1000)),
    OP_CASE("rows_copy", 1, test_rows_copy(50, 20, 384, 0)),   // 16-byte units (a row of 768 bf16 is 1536 bytes)
    OP_CASE("rows_copy", 0, test_rows_copy(50, 20, 384, 1)),   // the same rows misaligned: 4-byte units
    OP_CASE("rows_copy", 0, test_rows_copy(300, 299, 1, 0)),   // a float a row (the losses)
    OP_CASE("rows_copy", 0, test_rows_copy(9, 0, 3, 0)),       // no rows
    OP_CASE("reductions", 0, test_reductions(300000)),         // more than the fixed grid: grid-stride loop
    OP_CASE("dora", 1, test_dora_norm(37, 53, 3, 1)),               // ragged, misaligned; a block's rows past OC
    OP_CASE("dora", 0, test_dora_norm(64, 128, 8, 0)),
    OP_CASE("dora", 0, test_dora_norm(6, 300, 300, 0)),             // R > 256: B in shared memory in chunks
    OP_CASE("dora", 0, test_dora_scale(5, 37, 0)),                  // ragged: rows wrap within a thread's 8
    OP_CASE("dora", 1, test_dora_scale(9, 64, 0)),                  // 128-bit path
    OP_CASE("dora", 0, test_dora_scale(9, 64, 1)),                  // misaligned: scalar path
    OP_CASE("dora", 1, test_dora_magnitude_backward(300, 37, 1)),   // 5 row slices, a partial column block
    OP_CASE("dora", 0, test_dora_magnitude_backward(300, 128, 0)),
    OP_CASE("dora", 0, test_dora_magnitude_backward(4500, 70, 0)),  // the most slices (64) of 71 rows
};
#define N_CASES ((int)(sizeof(CASES) / sizeof(CASES[0])))

int main(int argc, char** argv) {
    unsigned char selected[N_CASES];
    const int args = test_cases_select("test_cuda_ops", CASES, N_CASES, argc, argv, NULL, selected);
    if (args) return args == 1 ? 0 : 2;
    cpu_ops_init(1);
    cuda_ops_init(0);
    printf("backend: %s\n", cuda_ops_backend_name());
    const int quick = test_quick();
    for (int i = 0; i < N_CASES; i++) {
        if (!selected[i] || (quick && !CASES[i].quick)) continue;
        // how long each case takes under the harness (CI time is budgeted)
        const double t0 = timer_now_s();
        CASES[i].run();
        printf("time %-40s %.2fs\n", CASES[i].what, timer_now_s() - t0);
    }
    if (!quick) printf("worst error over all checks: %.3f of tolerance, in %s\n", g_worst_rel, g_worst_name);
    return test_finish("test_cuda_ops");
}
