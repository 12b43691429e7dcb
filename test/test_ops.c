// Op tests for the backend in llmc/ops/ops.h (the CPU backend when built here). Every op is compared
// with a straightforward double-precision reference written below (naive attention with the
// full T x T matrix, two-pass softmax, textbook layernorm ...). Each reference backward is itself
// checked against central finite differences of the reference forward, so the gradients are
// pinned to the forward definitions, not to a second copy of the same derivation. Backward ops
// are called with random non-zero gradient buffers to check that they accumulate (+=), and with
// NULL gradients to check that those are skipped.
//
// The cases are one table (CASES, at the end): `test_ops` runs them all, `test_ops --op NAME` one
// op's (again for more), `test_ops --list` names the ops.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "ops/ops.h"
#include "cpu/gemm.h"
#include "cpu/vecmath.h"
#include "base/bf16.h"
#include "base/gguf.h"
#include "cpu/ops_cpu.h"
#include "test/test.h"
#include "test/ref_ops.h"

// ----------------------------------------------------------------------------
// helpers

static TestRng g_rng = { 0x9E3779B97F4A7C15ull, 0 };
static double urand(void) { return test_rand_uniform(&g_rng); }
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)urand(); }

static float* fbuf(size_t n) { return (float*)ops_alloc((n ? n : 1) * sizeof(float)); }
static float* frandbuf(size_t n, float lo, float hi) {
    float* p = fbuf(n);
    for (size_t i = 0; i < n; i++) p[i] = frand(lo, hi);
    return p;
}
static double* dbuf(size_t n) { return (double*)calloc(n ? n : 1, sizeof(double)); }
static float* fcopy(const float* src, size_t n) { float* p = fbuf(n); memcpy(p, src, n * sizeof(float)); return p; }
static double* to_d(const float* x, size_t n) { double* d = dbuf(n); for (size_t i = 0; i < n; i++) d[i] = x[i]; return d; }
// want_f[i] = base[i] + (float)add[i] (what an accumulating backward must produce)
static float* expect_acc(const float* base, const double* add, size_t n) {
    float* p = fbuf(n);
    for (size_t i = 0; i < n; i++) p[i] = (float)((double)base[i] + add[i]);
    return p;
}
static double maxabs_d(const double* x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}
static double maxabs_f(const float* x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fabs((double)x[i]) > m ? fabs((double)x[i]) : m;
    return m;
}
// got (fp32 op) vs want (double reference): |got - want| <= rtol*|want| + atol_rel*max|want|
static int close_fd(const char* what, const float* got, const double* want, size_t n, double rtol, double atol_rel) {
    float* w = fbuf(n);
    for (size_t i = 0; i < n; i++) w[i] = (float)want[i];
    int ok = test_allclose(what, got, w, n, rtol, atol_rel * maxabs_d(want, n) + 1e-30);
    ops_free(w);
    return ok;
}
static int bitwise_equal(const float* a, const float* b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

// Finite differences: grad[i] = d/dx_i sum(G .* f(x)) by central differences, with f given as
// a closure over the rest of the inputs. Relative step keeps the truncation error ~1e-10.
typedef void (*fwd_fn)(void* ctx, double* out);
static void fd_grad(fwd_fn f, void* ctx, double* x, size_t nx, const double* G, size_t nout, double* grad) {
    double* o1 = dbuf(nout);
    double* o2 = dbuf(nout);
    for (size_t i = 0; i < nx; i++) {
        double x0 = x[i], h = 1e-5 * (fabs(x0) > 1.0 ? fabs(x0) : 1.0);
        x[i] = x0 + h; f(ctx, o1);
        x[i] = x0 - h; f(ctx, o2);
        x[i] = x0;
        double s = 0.0;
        for (size_t k = 0; k < nout; k++) s += G[k] * (o1[k] - o2[k]);
        grad[i] = s / (2.0 * h);
    }
    free(o1); free(o2);
}
// reference analytic gradient vs finite differences (both double)
static int close_dd(const char* what, const double* got, const double* want, size_t n, double tol_rel) {
    double scale = maxabs_d(want, n) + 1e-300, worst = 0.0; size_t wi = 0;
    for (size_t i = 0; i < n; i++) { double d = fabs(got[i] - want[i]); if (d > worst) { worst = d; wi = i; } }
    TEST_CHECK(worst <= tol_rel * scale, "%s: reference gradient disagrees with finite differences at [%zu]: %.12g vs %.12g",
               what, wi, n ? got[wi] : 0.0, n ? want[wi] : 0.0);
    if (worst <= tol_rel * scale) printf("ok   %s (finite differences, max rel err %.2g)\n", what, worst / scale);
    return worst <= tol_rel * scale;
}

// ----------------------------------------------------------------------------
// double-precision references

// Mean and 1 / sqrt(biased variance + 1e-5) of one row, as layernorm normalizes it.
static double ref_row_stats(const double* x, int C, double* rstd) {
    double m = 0.0, v = 0.0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    v /= C;
    *rstd = 1.0 / sqrt(v + 1e-5);
    return m;
}

static void ref_layernorm(double* out, double* mean, double* rstd, const double* x, const double* w,
                          const double* b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double* xn = x + (size_t)n * C;
        double rs, m = ref_row_stats(xn, C, &rs);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (xn[c] - m) * rs * w[c] + b[c];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = rs;
    }
}
static void ref_layernorm_backward(double* dx, double* dw, double* db, const double* dy, const double* x,
                                   const double* w, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double* xn = x + (size_t)n * C;
        const double* g = dy + (size_t)n * C;
        double rs, m = ref_row_stats(xn, C, &rs), a = 0.0, bsum = 0.0;
        for (int c = 0; c < C; c++) { double xh = (xn[c] - m) * rs; a += w[c] * g[c]; bsum += w[c] * g[c] * xh; }
        for (int c = 0; c < C; c++) {
            double xh = (xn[c] - m) * rs;
            dx[(size_t)n * C + c] = rs * (w[c] * g[c] - a / C - xh * bsum / C);
            dw[c] += xh * g[c];
            db[c] += g[c];
        }
    }
}

static void ref_matmul(double* out, const double* inp, const double* w, const double* bias, int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += inp[(size_t)n * C + c] * w[(size_t)o * C + c];
            out[(size_t)n * OC + o] = s;
        }
}

// Naive causal attention with the full (T, T) probability matrix. att (B,NH,T,T) and lse are
// optional outputs. doc_start (B, T) or NULL: query i sees keys doc_start[i] <= j <= i.
static void ref_attention(double* out, double* lse, double* att, const double* qkv, const int* doc_start, int B, int T, int C, int NH) {
    int HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    double* row = dbuf((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double* q = qkv + ((size_t)b * T + i) * 3 * C + (size_t)h * HS;
                const int j0 = doc_start ? doc_start[b * T + i] : 0;
                double mx = -INFINITY;
                for (int j = j0; j <= i; j++) {
                    const double* k = qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * HS;
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) s += q[d] * k[d];
                    row[j] = s * scale;
                    if (row[j] > mx) mx = row[j];
                }
                double sum = 0.0;
                for (int j = j0; j <= i; j++) { row[j] = exp(row[j] - mx); sum += row[j]; }
                double* o = out + ((size_t)b * T + i) * C + (size_t)h * HS;
                for (int d = 0; d < HS; d++) o[d] = 0.0;
                if (att) for (int j = 0; j < j0; j++) att[(((size_t)b * NH + h) * T + i) * T + j] = 0.0;
                for (int j = j0; j <= i; j++) {
                    double p = row[j] / sum;
                    const double* v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * HS;
                    for (int d = 0; d < HS; d++) o[d] += p * v[d];
                    if (att) att[(((size_t)b * NH + h) * T + i) * T + j] = p;
                }
                if (att) for (int j = i + 1; j < T; j++) att[(((size_t)b * NH + h) * T + i) * T + j] = 0.0;
                if (lse) lse[((size_t)b * NH + h) * T + i] = mx + log(sum);
            }
    free(row);
}

// Textbook backward through the materialised attention matrix (softmax Jacobian row by row).
static void ref_attention_backward(double* dqkv, const double* dout, const double* qkv, const int* doc_start, int B, int T, int C, int NH) {
    int HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    double* out = dbuf((size_t)B * T * C);
    double* att = dbuf((size_t)B * NH * T * T);
    ref_attention(out, NULL, att, qkv, doc_start, B, T, C, NH);
    double* dp = dbuf((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double* p = att + (((size_t)b * NH + h) * T + i) * T;
                const double* g = dout + ((size_t)b * T + i) * C + (size_t)h * HS;
                double dot = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double* v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * HS;
                    double* dv = dqkv + ((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * HS;
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) { s += g[d] * v[d]; dv[d] += p[j] * g[d]; }
                    dp[j] = s;
                    dot += p[j] * s;
                }
                const double* q = qkv + ((size_t)b * T + i) * 3 * C + (size_t)h * HS;
                double* dq = dqkv + ((size_t)b * T + i) * 3 * C + (size_t)h * HS;
                for (int j = 0; j <= i; j++) {
                    double ds = p[j] * (dp[j] - dot) * scale;
                    const double* k = qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * HS;
                    double* dk = dqkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * HS;
                    for (int d = 0; d < HS; d++) { dq[d] += ds * k[d]; dk[d] += ds * q[d]; }
                }
            }
    free(out); free(att); free(dp);
}

// ----------------------------------------------------------------------------
// the CPU backend's vectorisable exp (softmax, classifier and GELU all go through it)

static void test_vm_expf(void) {
    double worst = 0.0, wx = 0.0;
    for (double x = -87.2; x < 88.0; x += 0.000731) {
        float f = (float)x;
        double want = exp((double)f), e = fabs((double)vm_expf(f) - want) / want;
        if (e > worst) { worst = e; wx = f; }
    }
    TEST_CHECK(worst < 1.5e-7, "vm_expf max relative error %.3g at x=%g (want < 1.5e-7, ~2.5 ulp)", worst, wx);
    TEST_CHECK(vm_expf(-INFINITY) == 0.0f && vm_expf(-100.0f) == 0.0f && vm_expf(0.0f) == 1.0f &&
               isnan(vm_expf(NAN)) && vm_expf(100.0f) > 1e38f, "vm_expf special values");
    printf("ok   vm_expf (max rel err %.3g)\n", worst);
}

// ----------------------------------------------------------------------------
// encoder

// pos: NULL (positions t), or given per row: packed records restart at 0 (row 0 holds records of
// 2 and 3 tokens, row 1 one of 5, so positions 0 and 1 collect three rows each).
static void test_encoder(const int* pos, const char* tag) {
    const int B = 2, T = 5, C = 70, V = 4;   // V < B*T: tokens repeat, so dwte rows collect several positions;
    int inp[10];                             // C > COLBLOCK: two column blocks
    char what[160];
    for (int i = 0; i < B * T; i++) inp[i] = (int)(urand() * V);
    inp[3] = inp[7] = 2;
    float* wte = frandbuf((size_t)V * C, -1, 1);
    float* wpe = frandbuf((size_t)T * C, -1, 1);
    float* out = fbuf((size_t)B * T * C);
    encoder_forward(out, inp, wte, wpe, pos, B, T, C);
    double* want = dbuf((size_t)B * T * C);
    for (int bt = 0; bt < B * T; bt++)
        for (int c = 0; c < C; c++)
            want[(size_t)bt * C + c] = (double)wte[inp[bt] * C + c] + wpe[(pos ? pos[bt] : bt % T) * C + c];
    snprintf(what, sizeof(what), "encoder_forward%s", tag);
    close_fd(what, out, want, (size_t)B * T * C, 1e-7, 0);

    float* dout = frandbuf((size_t)B * T * C, -1, 1);
    float* dwte = frandbuf((size_t)V * C, -1, 1);
    float* dwpe = frandbuf((size_t)T * C, -1, 1);
    double* gwte = dbuf((size_t)V * C);
    double* gwpe = dbuf((size_t)T * C);
    for (int bt = 0; bt < B * T; bt++)
        for (int c = 0; c < C; c++) {
            gwte[inp[bt] * C + c] += dout[bt * C + c];
            gwpe[(pos ? pos[bt] : bt % T) * C + c] += dout[bt * C + c];
        }
    float* wte_want = expect_acc(dwte, gwte, (size_t)V * C);
    float* wpe_want = expect_acc(dwpe, gwpe, (size_t)T * C);
    float* dwte0 = fcopy(dwte, (size_t)V * C);
    encoder_backward(dwte, dwpe, dout, inp, inp, pos, pos, B, T, C);
    snprintf(what, sizeof(what), "encoder_backward dwte (+=)%s", tag);
    test_allclose(what, dwte, wte_want, (size_t)V * C, 1e-6, 1e-6);
    snprintf(what, sizeof(what), "encoder_backward dwpe (+=)%s", tag);
    test_allclose(what, dwpe, wpe_want, (size_t)T * C, 1e-6, 1e-6);
    // NULL dwte: dwpe still accumulates, nothing else touched
    encoder_backward(NULL, dwpe, dout, inp, inp, pos, pos, B, T, C);
    for (size_t i = 0; i < (size_t)T * C; i++) wpe_want[i] = (float)((double)wpe_want[i] + gwpe[i]);
    snprintf(what, sizeof(what), "encoder_backward NULL dwte%s", tag);
    test_allclose(what, dwpe, wpe_want, (size_t)T * C, 1e-6, 1e-6);
    encoder_backward(dwte0, NULL, dout, inp, inp, pos, pos, B, T, C);
    snprintf(what, sizeof(what), "encoder_backward NULL dwpe%s", tag);
    test_allclose(what, dwte0, wte_want, (size_t)V * C, 1e-6, 1e-6);
    ops_free(wte); ops_free(wpe); ops_free(out); ops_free(dout); ops_free(dwte); ops_free(dwpe);
    ops_free(wte_want); ops_free(wpe_want); ops_free(dwte0);
    free(want); free(gwte); free(gwpe);
}

// ----------------------------------------------------------------------------
// layernorm

struct ln_ctx { double *x, *w, *b; int N, C; };
static void ln_fwd_cb(void* p, double* out) {
    struct ln_ctx* c = (struct ln_ctx*)p;
    ref_layernorm(out, NULL, NULL, c->x, c->w, c->b, c->N, c->C);
}

static void test_layernorm_shape(int N, int C, float offset) {
    char what[128];
    size_t NC = (size_t)N * C;
    float* x = frandbuf(NC, -2 + offset, 2 + offset);
    float* w = frandbuf(C, 0.5f, 1.5f);
    float* b = frandbuf(C, -0.5f, 0.5f);
    float* out = fbuf(NC);
    float* mean = fbuf(N);
    float* rstd = fbuf(N);
    layernorm_forward(out, mean, rstd, x, w, b, N, C);
    double *xd = to_d(x, NC), *wd = to_d(w, C), *bd = to_d(b, C);
    double* want = dbuf(NC);
    double* wmean = dbuf(N);
    double* wrstd = dbuf(N);
    ref_layernorm(want, wmean, wrstd, xd, wd, bd, N, C);
    snprintf(what, sizeof(what), "layernorm_forward N=%d C=%d", N, C);
    close_fd(what, out, want, NC, 1e-5, 1e-6);
    snprintf(what, sizeof(what), "layernorm_forward mean/rstd N=%d C=%d", N, C);
    close_fd(what, mean, wmean, N, 1e-5, 1e-6);
    close_fd(what, rstd, wrstd, N, 1e-5, 0);

    // fused residual + layernorm on random a, b
    float* a = frandbuf(NC, -1, 1);
    float* bb = fbuf(NC);
    for (size_t i = 0; i < NC; i++) bb[i] = frand(-1, 1);
    float* res = fbuf(NC);
    float* out2 = fbuf(NC);
    fused_residual_layernorm_forward(res, out2, mean, rstd, a, bb, w, b, N, C);
    double* ab = dbuf(NC);
    for (size_t i = 0; i < NC; i++) ab[i] = (double)a[i] + (double)bb[i];
    double* want2 = dbuf(NC);
    ref_layernorm(want2, NULL, NULL, ab, wd, bd, N, C);
    snprintf(what, sizeof(what), "fused_residual_layernorm_forward residual N=%d C=%d", N, C);
    close_fd(what, res, ab, NC, 1e-7, 0);
    snprintf(what, sizeof(what), "fused_residual_layernorm_forward ln N=%d C=%d", N, C);
    close_fd(what, out2, want2, NC, 1e-5, 1e-6);

    // backward: reference vs finite differences, then the op vs the reference (accumulating)
    layernorm_forward(out, mean, rstd, x, w, b, N, C);
    float* dy = frandbuf(NC, -1, 1);
    double* dyd = to_d(dy, NC);
    double* gx = dbuf(NC);
    double* gw = dbuf(C);
    double* gb = dbuf(C);
    ref_layernorm_backward(gx, gw, gb, dyd, xd, wd, N, C);
    if (NC <= 200) {
        struct ln_ctx ctx = {xd, wd, bd, N, C};
        double* fd = dbuf(NC);
        fd_grad(ln_fwd_cb, &ctx, xd, NC, dyd, NC, fd);
        close_dd("layernorm reference dx", gx, fd, NC, 1e-7);
        fd_grad(ln_fwd_cb, &ctx, wd, C, dyd, NC, fd);
        close_dd("layernorm reference dweight", gw, fd, C, 1e-7);
        fd_grad(ln_fwd_cb, &ctx, bd, C, dyd, NC, fd);
        close_dd("layernorm reference dbias", gb, fd, C, 1e-7);
        free(fd);
    }
    float* dx = frandbuf(NC, -1, 1);
    float* dw = frandbuf(C, -1, 1);
    float* db = frandbuf(C, -1, 1);
    float* dx_want = expect_acc(dx, gx, NC);
    float* dw_want = expect_acc(dw, gw, C);
    float* db_want = expect_acc(db, gb, C);
    layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C, 1);
    double sx = maxabs_d(gx, NC), sw = maxabs_d(gw, C);
    snprintf(what, sizeof(what), "layernorm_backward dinp (+=) N=%d C=%d", N, C);
    test_allclose(what, dx, dx_want, NC, 1e-5, 2e-6 * sx);
    snprintf(what, sizeof(what), "layernorm_backward dweight (+=) N=%d C=%d", N, C);
    test_allclose(what, dw, dw_want, C, 1e-5, 2e-6 * sw * sqrt((double)N));
    snprintf(what, sizeof(what), "layernorm_backward dbias (+=) N=%d C=%d", N, C);
    test_allclose(what, db, db_want, C, 1e-5, 2e-6 * sqrt((double)N));
    // NULL parameter gradients (frozen layernorm): dinp only, written over what it held
    float* dx2 = fcopy(dx, NC);
    layernorm_backward(dx2, NULL, NULL, dy, x, w, mean, rstd, N, C, 0);
    snprintf(what, sizeof(what), "layernorm_backward NULL dweight/dbias, dinp written (accumulate 0) N=%d C=%d", N, C);
    close_fd(what, dx2, gx, NC, 1e-5, 2e-6);
    float* dw2 = fcopy(dw, C);
    layernorm_backward(NULL, dw2, NULL, dy, x, w, mean, rstd, N, C, 1);
    for (int c = 0; c < C; c++) dw_want[c] = (float)((double)dw[c] + gw[c]);
    snprintf(what, sizeof(what), "layernorm_backward NULL dinp N=%d C=%d", N, C);
    test_allclose(what, dw2, dw_want, C, 1e-5, 2e-6 * sw * sqrt((double)N));

    float* bufs[] = {x, w, b, out, mean, rstd, a, bb, res, out2, dy, dx, dw, db, dx_want, dw_want, db_want, dx2, dw2};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) ops_free(bufs[i]);
    double* dbufs[] = {xd, wd, bd, want, wmean, wrstd, ab, want2, dyd, gx, gw, gb};
    for (size_t i = 0; i < sizeof(dbufs) / sizeof(dbufs[0]); i++) free(dbufs[i]);
}

// ----------------------------------------------------------------------------
// matmul

struct mm_ctx { double *inp, *w, *bias; int N, C, OC; };
static void mm_fwd_cb(void* p, double* out) {
    struct mm_ctx* c = (struct mm_ctx*)p;
    ref_matmul(out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
}

// The gradients of a matmul backward call against their expected values (a NULL one is not
// checked): rtol 1e-5, atol growing with the length of the sum behind each element (OC terms for
// dinp, N for dweight and dbias). Named "<op> dinp|dweight|dbias <tag> N=.. C=.. OC=..".
static void mm_grads_close(const char* op, const char* tag, int N, int C, int OC, const float* di, const float* di_want,
                           const float* dw, const float* dw_want, const float* db, const float* db_want) {
    char what[160];
    if (di) {
        snprintf(what, sizeof(what), "%s dinp %s N=%d C=%d OC=%d", op, tag, N, C, OC);
        test_allclose(what, di, di_want, (size_t)N * C, 1e-5, 1e-6 * sqrt((double)OC));
    }
    if (dw) {
        snprintf(what, sizeof(what), "%s dweight %s N=%d C=%d OC=%d", op, tag, N, C, OC);
        test_allclose(what, dw, dw_want, (size_t)OC * C, 1e-5, 1e-6 * sqrt((double)N));
    }
    if (db) {
        snprintf(what, sizeof(what), "%s dbias %s N=%d C=%d OC=%d", op, tag, N, C, OC);
        test_allclose(what, db, db_want, OC, 1e-5, 1e-6 * sqrt((double)N));
    }
}

// accumulate 0: dinp is written over whatever it held (di0: random), the parameter gradients
// still accumulate; and matmul_backward_gelu: dpre = (dout W) * gelu'(pre), written.
static void test_matmul_backward_write(int N, int C, int OC, const float* dout, const float* inp, const float* w,
                                       const double* gi, const double* gw, const double* gb,
                                       const float* di0, const float* dw0, const float* db0) {
    char what[128];
    const size_t NC = (size_t)N * C;
    float* di = fcopy(di0, NC);
    matmul_backward(di, NULL, NULL, dout, inp, w, N, C, OC, 0);
    snprintf(what, sizeof(what), "matmul_backward dinp written (accumulate 0) N=%d C=%d OC=%d", N, C, OC);
    close_fd(what, di, gi, NC, 1e-5, 1e-6 * sqrt((double)OC));

    float* pre = frandbuf(NC, -4, 4);
    double* gpre = dbuf(NC);
    for (size_t i = 0; i < NC; i++) gpre[i] = gi[i] * ref_gelu_grad(pre[i]);
    float* dpre = fcopy(di0, NC);
    float* dw = fcopy(dw0, (size_t)OC * C);
    float* db = fcopy(db0, OC);
    float* dw_want = expect_acc(dw0, gw, (size_t)OC * C);
    float* db_want = expect_acc(db0, gb, OC);
    matmul_backward_gelu(dpre, dw, db, dout, inp, pre, w, N, C, OC);
    snprintf(what, sizeof(what), "matmul_backward_gelu dpre N=%d C=%d OC=%d", N, C, OC);
    close_fd(what, dpre, gpre, NC, 1e-5, 1e-6 * sqrt((double)OC));
    mm_grads_close("matmul_backward_gelu", "(+=)", N, C, OC, NULL, NULL, dw, dw_want, db, db_want);
    float* bufs[] = {di, pre, dpre, dw, db, dw_want, db_want};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) ops_free(bufs[i]);
    free(gpre);
}

// a forward matmul's N x OC output against its double reference: fp32 sums of C products
static void close_mm(const char* op, const float* got, const double* want, int N, int C, int OC) {
    char what[128];
    const size_t NO = (size_t)N * OC;
    snprintf(what, sizeof(what), "%s N=%d C=%d OC=%d", op, N, C, OC);
    close_fd(what, got, want, NO, 1e-5, 1e-6 * sqrt((double)C) / (maxabs_d(want, NO) + 1e-30));
}

static void test_matmul_shape(int N, int C, int OC) {
    float* inp = frandbuf((size_t)N * C, -1, 1);
    float* w = frandbuf((size_t)OC * C, -1, 1);
    float* bias = frandbuf(OC, -1, 1);
    size_t NO = (size_t)N * OC;
    double *ind = to_d(inp, (size_t)N * C), *wd = to_d(w, (size_t)OC * C), *bd = to_d(bias, OC);
    double* want = dbuf(NO);
    double* want_nb = dbuf(NO);
    ref_matmul(want, ind, wd, bd, N, C, OC);
    ref_matmul(want_nb, ind, wd, NULL, N, C, OC);
    double* want_gelu = dbuf(NO);
    for (size_t i = 0; i < NO; i++) want_gelu[i] = ref_gelu(want[i]);
    float* out = fbuf(NO);
    float* gout = fbuf(NO);
    matmul_forward(out, NULL, inp, w, bias, N, C, OC);
    close_mm("matmul_forward bias", out, want, N, C, OC);
    matmul_forward(out, NULL, inp, w, NULL, N, C, OC);
    close_mm("matmul_forward no bias", out, want_nb, N, C, OC);
    matmul_forward(out, gout, inp, w, bias, N, C, OC);
    close_mm("matmul_forward +gelu pre-activation", out, want, N, C, OC);
    close_mm("matmul_forward +gelu output", gout, want_gelu, N, C, OC);

    // backward
    float* dout = frandbuf(NO, -1, 1);
    double* doutd = to_d(dout, NO);
    double* gi = dbuf((size_t)N * C);
    double* gw = dbuf((size_t)OC * C);
    double* gb = dbuf(OC);
    ref_matmul_backward(gi, gw, gb, dout, inp, w, N, C, OC);
    if ((size_t)N * C + (size_t)OC * C <= 400) {
        struct mm_ctx ctx = {ind, wd, bd, N, C, OC};
        double* fd = dbuf((size_t)OC * C + (size_t)N * C);
        fd_grad(mm_fwd_cb, &ctx, ind, (size_t)N * C, doutd, NO, fd);
        close_dd("matmul reference dinp", gi, fd, (size_t)N * C, 1e-8);
        fd_grad(mm_fwd_cb, &ctx, wd, (size_t)OC * C, doutd, NO, fd);
        close_dd("matmul reference dweight", gw, fd, (size_t)OC * C, 1e-8);
        fd_grad(mm_fwd_cb, &ctx, bd, OC, doutd, NO, fd);
        close_dd("matmul reference dbias", gb, fd, OC, 1e-8);
        free(fd);
    }
    float* di = frandbuf((size_t)N * C, -1, 1);
    float* dw = frandbuf((size_t)OC * C, -1, 1);
    float* db = frandbuf(OC, -1, 1);
    float* di_want = expect_acc(di, gi, (size_t)N * C);
    float* dw_want = expect_acc(dw, gw, (size_t)OC * C);
    float* db_want = expect_acc(db, gb, OC);
    float* di0 = fcopy(di, (size_t)N * C);
    float* dw0 = fcopy(dw, (size_t)OC * C);
    float* db0 = fcopy(db, OC);
    matmul_backward(di, dw, db, dout, inp, w, N, C, OC, 1);
    mm_grads_close("matmul_backward", "(+=)", N, C, OC, di, di_want, dw, dw_want, db, db_want);
    // NULL combinations: the requested gradient is right, the others stay untouched
    float* di1 = fcopy(di0, (size_t)N * C);
    float* dw1 = fcopy(dw0, (size_t)OC * C);
    float* db1 = fcopy(db0, OC);
    matmul_backward(di1, NULL, NULL, dout, inp, w, N, C, OC, 1);
    mm_grads_close("matmul_backward", "only", N, C, OC, di1, di_want, NULL, NULL, NULL, NULL);
    matmul_backward(NULL, dw1, NULL, dout, inp, w, N, C, OC, 1);
    mm_grads_close("matmul_backward", "only", N, C, OC, NULL, NULL, dw1, dw_want, NULL, NULL);
    matmul_backward(NULL, NULL, db1, dout, inp, w, N, C, OC, 1);
    mm_grads_close("matmul_backward", "only", N, C, OC, NULL, NULL, NULL, NULL, db1, db_want);
    matmul_backward(NULL, NULL, NULL, dout, inp, w, N, C, OC, 1);   // all frozen: must be a no-op
    test_matmul_backward_write(N, C, OC, dout, inp, w, gi, gw, gb, di0, dw0, db0);

    float* bufs[] = {inp, w, bias, out, gout, dout, di, dw, db, di_want, dw_want, db_want, di0, dw0, db0, di1, dw1, db1};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) ops_free(bufs[i]);
    double* dbufs[] = {ind, wd, bd, want, want_nb, want_gelu, doutd, gi, gw, gb};
    for (size_t i = 0; i < sizeof(dbufs) / sizeof(dbufs[0]); i++) free(dbufs[i]);
}

// ----------------------------------------------------------------------------
// elementwise

static void test_elementwise(void) {
    const size_t n = 40009;   // > one parallel chunk, not a multiple of any vector width
    float* x = fbuf(n);
    for (size_t i = 0; i < n; i++) {
        // cover the tails (|x| up to 12, where tanh saturates), tiny values and exact zero
        double u = urand();
        x[i] = i % 7 == 0 ? frand(-1e-3f, 1e-3f) : (float)(24.0 * u - 12.0);
    }
    x[0] = 0.0f;
    float* y = fbuf(n);
    double* want = dbuf(n);
    double* wantg = dbuf(n);
    for (size_t i = 0; i < n; i++) { want[i] = ref_gelu(x[i]); wantg[i] = ref_gelu_grad(x[i]); }
    gelu_forward(y, x, n);
    close_fd("gelu_forward", y, want, n, 1e-5, 2e-8 / 12.0);
    // reference gradient vs finite differences of the reference forward
    double worst = 0.0;
    for (size_t i = 0; i < n; i += 97) {
        double h = 1e-6, fd = (ref_gelu(x[i] + h) - ref_gelu(x[i] - h)) / (2 * h);
        double e = fabs(fd - wantg[i]);
        worst = e > worst ? e : worst;
    }
    TEST_CHECK(worst < 1e-8, "gelu reference gradient vs finite differences: %g", worst);
    float* dout = frandbuf(n, -1, 1);
    float* dinp = frandbuf(n, -1, 1);
    double* add = dbuf(n);
    for (size_t i = 0; i < n; i++) add[i] = wantg[i] * dout[i];
    float* dwant = expect_acc(dinp, add, n);
    gelu_backward(dinp, x, dout, n, 1);
    test_allclose("gelu_backward (+=)", dinp, dwant, n, 1e-5, 3e-7);   // |dinp| ~ 1: 3 ulp
    gelu_backward(dinp, x, dout, n, 0);   // written over the sum above
    close_fd("gelu_backward written (accumulate 0)", dinp, add, n, 1e-5, 3e-7);
    float* dalias = fcopy(dout, n);
    gelu_backward(dalias, x, dalias, n, 0);   // in place: dinp aliasing dout
    close_fd("gelu_backward in place (dinp == dout)", dalias, add, n, 1e-5, 3e-7);
    ops_free(dalias);

    float* a = frandbuf(n, -1, 1);
    float* b = frandbuf(n, -1, 1);
    float* o = fbuf(n);
    residual_forward(o, a, b, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= o[i] == a[i] + b[i];
    TEST_CHECK(ok, "residual_forward: out != a + b");
    float* a0 = fcopy(a, n);
    add_inplace(a, b, n);
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= a[i] == a0[i] + b[i];
    TEST_CHECK(ok, "add_inplace: dst != dst + src");
    scale_copy(o, b, 0.37f, n);
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= o[i] == b[i] * 0.37f;
    TEST_CHECK(ok, "scale_copy: dst != src * scale");
    float* b0 = fcopy(b, n);
    scale_copy(b, b, -2.5f, n);   // aliasing allowed
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= b[i] == b0[i] * -2.5f;
    TEST_CHECK(ok, "scale_copy in place");
    ops_free(b0);
    float* bufs[] = {x, y, dout, dinp, dwant, a, b, o, a0};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) ops_free(bufs[i]);
    free(want); free(wantg); free(add);
}

// bf16 GEMMs (--dtype bf16): one row, as token-by-token generation runs them (llmc/cpu/gemv.c on
// AVX512-BF16), and several rows (oneDNN); matmul_forward rounding an fp32 weight and
// matmul_forward_acc: out += inp w^T on top of what out holds (fp32 BLAS, its one-row GEMV, or
// the bf16 GEMM with the operands rounded), against a double reference
static void test_matmul_forward_acc(int N, int C, int OC, int bf16) {
    const size_t nx = (size_t)N * C, nw = (size_t)OC * C, NO = (size_t)N * OC;
    float *inp = frandbuf(nx, -1, 1), *w = frandbuf(nw, -1, 1), *out = frandbuf(NO, -1, 1);
    double *ind = dbuf(nx), *wd = dbuf(nw), *want = dbuf(NO);
    for (size_t i = 0; i < nx; i++) ind[i] = bf16 ? bf16_to_f32(bf16_from_f32(inp[i])) : inp[i];
    for (size_t i = 0; i < nw; i++) wd[i] = bf16 ? bf16_to_f32(bf16_from_f32(w[i])) : w[i];
    ref_matmul(want, ind, wd, NULL, N, C, OC);
    for (size_t i = 0; i < NO; i++) want[i] += out[i];
    if (bf16) ops_set_gemm_dtype(OPS_BF16);
    matmul_forward_acc(out, inp, w, N, C, OC);
    ops_set_gemm_dtype(OPS_F32);
    close_mm(bf16 ? "matmul_forward_acc bf16" : "matmul_forward_acc", out, want, N, C, OC);
    ops_free(inp); ops_free(w); ops_free(out);
    free(ind); free(wd); free(want);
}

// matmul_forward_w16 with a bf16 one, against a double reference of the rounded operands
// (products of bf16 values are exact in fp32: only the order of the fp32 sums differs). C not a
// multiple of 32 (the masked tail), OC not of 4 (the one-row loop). Then matmul_forward under
// OPS_F16 against the fp16-rounded operands (fp16 products are exact in fp32 too), within one
// fp16 step: the product is rounded to fp16 before the bias joins it.
static void test_matmul_bf16(int N, int C, int OC) {
    const size_t nx = (size_t)N * C, nw = (size_t)OC * C, NO = (size_t)N * OC;
    float* inp = frandbuf(nx, -1, 1);
    float* w = frandbuf(nw, -1, 1);
    float* bias = frandbuf(OC, -1, 1);
    uint16_t* w16 = (uint16_t*)ops_alloc(nw * sizeof(uint16_t));
    double *ind = dbuf(nx), *wd = dbuf(nw), *bd = to_d(bias, OC), *want = dbuf(NO);
    for (size_t i = 0; i < nx; i++) ind[i] = bf16_to_f32(bf16_from_f32(inp[i]));
    for (size_t i = 0; i < nw; i++) { w16[i] = bf16_from_f32(w[i]); wd[i] = bf16_to_f32(w16[i]); }
    ref_matmul(want, ind, wd, bd, N, C, OC);
    float* out = fbuf(NO);
    ops_set_gemm_dtype(OPS_BF16);
    matmul_forward(out, NULL, inp, w, bias, N, C, OC);
    close_mm("matmul_forward bf16", out, want, N, C, OC);
    matmul_forward_w16(out, NULL, inp, w16, bias, N, C, OC);
    close_mm("matmul_forward_w16", out, want, N, C, OC);
    for (size_t i = 0; i < nx; i++) ind[i] = fp16_to_f32(fp16_from_f32(inp[i]));
    for (size_t i = 0; i < nw; i++) wd[i] = fp16_to_f32(fp16_from_f32(w[i]));
    ref_matmul(want, ind, wd, bd, N, C, OC);
    ops_set_gemm_dtype(OPS_F16);
    matmul_forward(out, NULL, inp, w, bias, N, C, OC);
    char what[96];
    snprintf(what, sizeof(what), "matmul_forward fp16 N=%d C=%d OC=%d", N, C, OC);
    close_fd(what, out, want, NO, 0.0, ldexp(1.0, -10));
    ops_set_gemm_dtype(OPS_F32);
    float* bufs[] = {inp, w, bias, out};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) ops_free(bufs[i]);
    ops_free(w16);
    free(ind); free(wd); free(bd); free(want);
}

// matmul_forward_q8 against a double reference on the exact values d * q of the blocks that
// gguf_quantize_q8_0 (ggml's reference quantizer) makes of random weights: bias, GELU, the few-row
// kernel (AVX-512 where the CPU has it, and the plain C one every CPU without it runs) and the
// many-row one (dequantized panels), OC past one panel and not a multiple of 4.
static void test_matmul_q8(int N, int C, int OC) {
    const size_t nx = (size_t)N * C, nw = (size_t)OC * C, NO = (size_t)N * OC;
    float* inp = frandbuf(nx, -1, 1);
    float* w = frandbuf(nw, -1, 1);
    float* bias = frandbuf(OC, -1, 1);
    uint8_t* q = (uint8_t*)ops_alloc(nw / OPS_Q8_BLOCK * OPS_Q8_BLOCK_BYTES);
    gguf_quantize_q8_0(w, q, nw);
    gguf_dequantize_q8_0(q, w, nw);
    double *ind = to_d(inp, nx), *wd = to_d(w, nw), *bd = to_d(bias, OC), *want = dbuf(NO), *want_gelu = dbuf(NO);
    ref_matmul(want, ind, wd, bd, N, C, OC);
    for (size_t i = 0; i < NO; i++) want_gelu[i] = ref_gelu(want[i]);
    float *out = fbuf(NO), *gout = fbuf(NO);
    for (int scalar = 0; scalar < 2; scalar++) {
        cpu_q8_force_scalar(scalar);
        matmul_forward_q8(out, gout, inp, q, bias, N, C, OC);
        close_mm(scalar ? "matmul_forward_q8 (plain C) pre-activation" : "matmul_forward_q8 pre-activation", out, want, N, C, OC);
        close_mm(scalar ? "matmul_forward_q8 (plain C) +gelu" : "matmul_forward_q8 +gelu", gout, want_gelu, N, C, OC);
    }
    cpu_q8_force_scalar(0);
    ref_matmul(want, ind, wd, NULL, N, C, OC);
    matmul_forward_q8(out, NULL, inp, q, NULL, N, C, OC);
    close_mm("matmul_forward_q8 no bias", out, want, N, C, OC);
    float* bufs[] = {inp, w, bias, out, gout};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) ops_free(bufs[i]);
    ops_free(q);
    free(ind); free(wd); free(bd); free(want); free(want_gelu);
}

// cpu_gemm_widen (the bf16 GEMM of a CPU without a bf16 matmul, and every fp16 GEMM) with a
// buffer small enough to split K, N and M into several panels, every orientation, with and
// without accumulating, against a double reference of the 16-bit operands; then cpu_gemm_16
// itself (oneDNN's bf16, or the widened one) on the same operands: in fp16 its product is
// rounded to fp16 before it joins C (within one fp16 step of the reference's product). f16:
// fp16 operands, with values up to `amp` (past 65504 they are inf, and so is the product).
static void test_gemm_widen(int f16, int M, int N, int K, size_t buf_floats, float amp) {
    const size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *a = frandbuf(na, -amp, amp), *b = frandbuf(nb, -1, 1), *c0 = frandbuf(nc, -1, 1);
    uint16_t *a16 = malloc(na * sizeof(uint16_t)), *b16 = malloc(nb * sizeof(uint16_t));
    for (size_t i = 0; i < na; i++) a16[i] = f16 ? fp16_from_f32(a[i]) : bf16_from_f32(a[i]);
    for (size_t i = 0; i < nb; i++) b16[i] = f16 ? fp16_from_f32(b[i]) : bf16_from_f32(b[i]);
#define W16(x) (f16 ? fp16_to_f32(x) : bf16_to_f32(x))
    float *buf = malloc(buf_floats * sizeof(float)), *got = malloc(nc * sizeof(float));
    float* want16 = malloc(nc * sizeof(float));
    double *want = dbuf(nc), *prod = dbuf(nc);
    for (int o = 0; o < 8; o++) {
        const int ta = o & 1, tb = o >> 1 & 1, acc = o >> 2;
        const int lda = ta ? M : K, ldb = tb ? K : N;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double sum = 0.0;
                for (int k = 0; k < K; k++)
                    sum += (double)W16(ta ? a16[(size_t)k * lda + m] : a16[(size_t)m * lda + k]) *
                           W16(tb ? b16[(size_t)n * ldb + k] : b16[(size_t)k * ldb + n]);
                const size_t i = (size_t)m * N + n;
                prod[i] = sum;
                want[i] = (acc ? c0[i] : 0.0) + sum;
                want16[i] = (acc ? c0[i] : 0.0f) + fp16_to_f32(fp16_from_f32((float)sum));
            }
        char what[128];
        for (int way = 0; way < 2; way++) {
            memcpy(got, c0, nc * sizeof(float));
            if (way) cpu_gemm_16(f16, ta, tb, M, N, K, a16, lda, b16, ldb, acc, got);
            else cpu_gemm_widen(f16, ta, tb, M, N, K, a16, lda, b16, ldb, acc, got, buf, buf_floats);
            snprintf(what, sizeof(what), "%s %s M=%d N=%d K=%d ta=%d tb=%d acc=%d", way ? "cpu_gemm_16" : "cpu_gemm_widen",
                     f16 ? "fp16" : "bf16", M, N, K, ta, tb, acc);
            if (amp > 65504.0f) { // an inf operand: the rows it meets are inf or NaN, as in the reference
                int same = 1;
                for (size_t i = 0; i < nc; i++) same &= isfinite(got[i]) == isfinite(want[i]);
                TEST_CHECK(same, "%s: the non-finite outputs differ from the reference's", what);
            } else if (way && f16) test_allclose(what, got, want16, nc, 0.0, ldexp(maxabs_d(prod, nc), -10) + 1e-30);
            else close_fd(what, got, want, nc, 1e-5, 1e-6 * amp * sqrt((double)K) / (maxabs_d(want, nc) + 1e-30));
        }
    }
#undef W16
    free(a16); free(b16); free(buf); free(got); free(want); free(want16); free(prod);
    ops_free(a); ops_free(b); ops_free(c0);
}

// ----------------------------------------------------------------------------
// attention

struct att_ctx { double* qkv; const int* doc_start; int B, T, C, NH; };
static void att_fwd_cb(void* p, double* out) {
    struct att_ctx* c = (struct att_ctx*)p;
    ref_attention(out, NULL, NULL, c->qkv, c->doc_start, c->B, c->T, c->C, c->NH);
}

// One shape, plain causal (doc_start NULL) or over packed records (doc_start (B, T), host memory
// on this backend); tag names the case in the messages.
static void test_attention_case(int B, int T, int NH, int HS, int check_fd, const int* doc_start, const char* tag) {
    char what[200];
    int C = NH * HS;
    size_t n3 = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float* qkv = frandbuf(n3, -1.5f, 1.5f);
    double* qkvd = to_d(qkv, n3);
    float* out = fbuf(nout);
    float* lse = fbuf(nl);
    attention_forward(out, lse, qkv, doc_start, B, T, C, NH);
    double* want = dbuf(nout);
    double* wlse = dbuf(nl);
    ref_attention(want, wlse, NULL, qkvd, doc_start, B, T, C, NH);
    snprintf(what, sizeof(what), "attention_forward out%s B=%d T=%d NH=%d HS=%d", tag, B, T, NH, HS);
    close_fd(what, out, want, nout, 1e-5, 2e-6);
    snprintf(what, sizeof(what), "attention_forward lse%s B=%d T=%d NH=%d HS=%d", tag, B, T, NH, HS);
    close_fd(what, lse, wlse, nl, 1e-5, 1e-6);

    float* dout = frandbuf(nout, -1, 1);
    double* doutd = to_d(dout, nout);
    double* g = dbuf(n3);
    ref_attention_backward(g, doutd, qkvd, doc_start, B, T, C, NH);
    if (check_fd) {
        struct att_ctx ctx = {qkvd, doc_start, B, T, C, NH};
        double* fd = dbuf(n3);
        fd_grad(att_fwd_cb, &ctx, qkvd, n3, doutd, nout, fd);
        snprintf(what, sizeof(what), "attention reference backward%s B=%d T=%d NH=%d HS=%d", tag, B, T, NH, HS);
        close_dd(what, g, fd, n3, 1e-7);
        free(fd);
    }
    float* dqkv = frandbuf(n3, -1, 1);
    float* dwant = expect_acc(dqkv, g, n3);
    attention_backward(dqkv, dout, qkv, out, lse, doc_start, B, T, C, NH, 1);
    snprintf(what, sizeof(what), "attention_backward dqkv (+=)%s B=%d T=%d NH=%d HS=%d", tag, B, T, NH, HS);
    test_allclose(what, dqkv, dwant, n3, 1e-5, 4e-6 * maxabs_d(g, n3));
    attention_backward(dqkv, dout, qkv, out, lse, doc_start, B, T, C, NH, 0);   // written over the sum above
    snprintf(what, sizeof(what), "attention_backward dqkv written (accumulate 0)%s B=%d T=%d NH=%d HS=%d", tag, B, T, NH, HS);
    close_fd(what, dqkv, g, n3, 1e-5, 4e-6);

    // thread-count independence: forward and backward are bitwise identical on 1 thread
    int nthr = omp_get_max_threads();
    if (nthr > 1) {
        float* out1 = fbuf(nout);
        float* lse1 = fbuf(nl);
        float* dq1 = fbuf(n3);
        float* dq2 = fbuf(n3);
        memset(dq1, 0, n3 * sizeof(float));
        memset(dq2, 0, n3 * sizeof(float));
        attention_backward(dq2, dout, qkv, out, lse, doc_start, B, T, C, NH, 1);
        omp_set_num_threads(1);
        attention_forward(out1, lse1, qkv, doc_start, B, T, C, NH);
        attention_backward(dq1, dout, qkv, out, lse, doc_start, B, T, C, NH, 1);
        omp_set_num_threads(nthr);
        TEST_CHECK(bitwise_equal(out, out1, nout) && bitwise_equal(lse, lse1, nl) && bitwise_equal(dq1, dq2, n3),
                   "attention%s B=%d T=%d NH=%d HS=%d differs between 1 and %d threads", tag, B, T, NH, HS, nthr);
        ops_free(out1); ops_free(lse1); ops_free(dq1); ops_free(dq2);
    }
    ops_free(qkv); ops_free(out); ops_free(lse); ops_free(dout); ops_free(dqkv); ops_free(dwant);
    free(qkvd); free(want); free(wlse); free(doutd); free(g);
}

static void test_attention_shape(int B, int T, int NH, int HS, int check_fd) {
    test_attention_case(B, T, NH, HS, check_fd, NULL, "");
}

// Packed records: lens lists the record lengths of row 0, then row 1, ... (each row's sum T).
// Each query must see its own record's keys only, as the reference with doc_start computes.
static void test_attention_docs(int B, int T, int NH, int HS, int check_fd, const int* lens, int nlens, const char* tag) {
    int* doc_start = (int*)ops_alloc((size_t)B * T * sizeof(int));
    int r = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; r++) {
            TEST_CHECK(r < nlens, "test_attention_docs: record lengths do not fill %d rows of %d", B, T);
            for (int k = 0; k < lens[r]; k++) doc_start[b * T + t + k] = t;
            t += lens[r];
        }
    test_attention_case(B, T, NH, HS, check_fd, doc_start, tag);
    ops_free(doc_start);
}

// ----------------------------------------------------------------------------
// fused classifier

struct cls_ctx { double* logits; const int* targets; int N, V, Vp; };
static void ref_losses(const double* logits, const int* targets, int N, int V, int Vp, double* losses) {
    for (int n = 0; n < N; n++) {
        const double* x = logits + (size_t)n * Vp;
        if (targets[n] < 0) { losses[n] = 0.0; continue; }
        double mx = -INFINITY, s = 0.0;
        for (int i = 0; i < V; i++) mx = x[i] > mx ? x[i] : mx;
        for (int i = 0; i < V; i++) s += exp(x[i] - mx);
        losses[n] = log(s) + mx - x[targets[n]];
    }
}

// The reference gradient of dloss * sum(losses) with respect to the logits: dloss * (softmax -
// onehot) on rows with a target; out (zeroed by the caller) keeps zeros elsewhere.
static void ref_dlogits(const double* logits, const int* targets, int N, int V, int Vp, float dloss, double* out) {
    for (int r = 0; r < N; r++) {
        if (targets[r] < 0) continue;
        const double* x = logits + (size_t)r * Vp;
        double mx = -INFINITY, s = 0.0;
        for (int i = 0; i < V; i++) mx = x[i] > mx ? x[i] : mx;
        for (int i = 0; i < V; i++) s += exp(x[i] - mx);
        for (int i = 0; i < V; i++) out[(size_t)r * Vp + i] = (double)dloss * (exp(x[i] - mx) / s - (i == targets[r]));
    }
}

static void cls_cb(void* p, double* out) {
    struct cls_ctx* c = (struct cls_ctx*)p;
    ref_losses(c->logits, c->targets, c->N, c->V, c->Vp, out);
}

static void test_classifier_shape(int N, int V, int Vp, float amp) {
    char what[128];
    size_t n = (size_t)N * Vp;
    float* logits = frandbuf(n, -amp, amp);
    for (int r = 0; r < N; r++)
        for (int i = V; i < Vp; i++) logits[(size_t)r * Vp + i] = 1000.0f;   // padding must be ignored
    int* targets = (int*)malloc((size_t)N * sizeof(int));
    for (int r = 0; r < N; r++)
        targets[r] = r % 3 == 1 ? -1 : (int)(urand() * V);   // every third position is masked
    targets[N - 1] = V - 1;                                   // the last real column is a target
    int valid = 0;
    for (int r = 0; r < N; r++) valid += targets[r] >= 0;
    double* ld = to_d(logits, n);
    double* wl = dbuf(N);
    ref_losses(ld, targets, N, V, Vp, wl);
    float* losses = fbuf(N);
    for (int r = 0; r < N; r++) losses[r] = 123.0f;

    // dloss = 0: losses only, logits untouched
    float* lg = fcopy(logits, n);
    fused_classifier(losses, lg, targets, 0.0f, N, V, Vp);
    snprintf(what, sizeof(what), "fused_classifier losses (no grad) N=%d V=%d Vp=%d", N, V, Vp);
    close_fd(what, losses, wl, N, 1e-5, 1e-6);
    TEST_CHECK(bitwise_equal(lg, logits, n), "fused_classifier with dloss=0 modified the logits");

    // with gradient: dloss * (softmax - onehot), zero for ignored rows and padded columns
    float dloss = 1.0f / (float)(valid > 0 ? valid : 1);
    fused_classifier(losses, lg, targets, dloss, N, V, Vp);
    snprintf(what, sizeof(what), "fused_classifier losses N=%d V=%d Vp=%d", N, V, Vp);
    close_fd(what, losses, wl, N, 1e-5, 1e-6);
    double* gw = dbuf(n);
    ref_dlogits(ld, targets, N, V, Vp, dloss, gw);
    if (n <= 400) {   // the analytic gradient is d(dloss * sum(losses)) / dlogits
        struct cls_ctx ctx = {ld, targets, N, V, Vp};
        double* G = dbuf(N);
        for (int r = 0; r < N; r++) G[r] = dloss;
        double* fd = dbuf(n);
        fd_grad(cls_cb, &ctx, ld, n, G, N, fd);
        close_dd("fused_classifier reference dlogits", gw, fd, n, 1e-7);
        free(G); free(fd);
    }
    snprintf(what, sizeof(what), "fused_classifier dlogits N=%d V=%d Vp=%d", N, V, Vp);
    close_fd(what, lg, gw, n, 1e-5, 1e-6);
    int zero_ok = 1;
    for (int r = 0; r < N; r++)
        for (int i = 0; i < Vp; i++)
            if ((targets[r] < 0 || i >= V) && lg[(size_t)r * Vp + i] != 0.0f) zero_ok = 0;
    TEST_CHECK(zero_ok, "fused_classifier: ignored rows / padded columns must get exactly zero gradient");
    ops_free(logits); ops_free(losses); ops_free(lg);
    free(targets); free(ld); free(wl); free(gw);
}

// classifier_train with the weight's owner giving it in bf16 (w16), in bf16 GEMMs: w16 is used in
// w's place, so with w16 = bf16(w2) of another weight w2 the losses, dx and dw are bit for bit
// those of classifier_train on w2 (which differ from w's: the test sees w16 read by the logits' and
// dx's GEMMs). x, w, targets, dloss, scratch: the caller's.
static void classifier_train_w16(int N, int C, int V, int Vp, const float* x, const float* w, const int* targets, float dloss,
                                 float* scratch) {
    const size_t nx = (size_t)N * C, nw = (size_t)Vp * C;
    float* w2 = fcopy(w, nw);
    for (size_t i = 0; i < nw; i++) w2[i] = w2[i] * 0.5f + 0.25f;
    uint16_t* w16 = (uint16_t*)ops_alloc(nw * sizeof(uint16_t));
    for (size_t i = 0; i < nw; i++) w16[i] = bf16_from_f32(w2[i]);
    float *l[2], *dx[2], *dw[2];
    for (int k = 0; k < 2; k++) {
        l[k] = fbuf(N); dx[k] = fbuf(nx); dw[k] = fbuf(nw);
        memset(dx[k], 0, nx * sizeof(float)); memset(dw[k], 0, nw * sizeof(float));
    }
    classifier_train(l[0], dx[0], dw[0], scratch, x, w, w16, targets, dloss, N, C, V, Vp);
    classifier_train(l[1], dx[1], dw[1], scratch, x, w2, NULL, targets, dloss, N, C, V, Vp);
    TEST_CHECK(bitwise_equal(l[0], l[1], N) && bitwise_equal(dx[0], dx[1], nx) && bitwise_equal(dw[0], dw[1], nw),
               "classifier_train bf16 with w16 = bf16(w2): losses, dx, dw not bit for bit those on w2 (N=%d)", N);
    for (int k = 0; k < 2; k++) { ops_free(l[k]); ops_free(dx[k]); ops_free(dw[k]); }
    ops_free(w2); ops_free(w16);
}

// classifier_train: lm_head + fused classifier + lm_head backward in row blocks (N > the CPU's
// 512-row block, with a ragged last block), against a double reference of the three ops; in fp32
// GEMMs, bf16 GEMMs (bf16 operands: 1e-2 of max |ref|) and fp16 GEMMs (2e-3: fp16's 11 bits; the
// dlogits of 1 / N-weighted rows fall in its subnormal range, as without loss scaling). dx and
// dw accumulate; NULL dx / dw are skipped.
static void test_classifier_train(int N, int C, int V, int Vp, OpsDtype dtype) {
    const int bf16 = dtype == OPS_BF16;
    char what[160];
    const size_t nx = (size_t)N * C, nw = (size_t)Vp * C, nl = (size_t)N * Vp;
    float* x = frandbuf(nx, -1.0f, 1.0f);
    float* w = frandbuf(nw, -1.0f, 1.0f);
    int* targets = (int*)malloc((size_t)N * sizeof(int));
    for (int r = 0; r < N; r++) targets[r] = r % 5 == 2 ? -1 : (int)(urand() * V);
    const float dloss = 1.0f / (float)N;
    // reference: logits, losses, dlogits, then dx = dlogits w and dw = dlogits^T x (double)
    double* lg = dbuf(nl);
    for (int r = 0; r < N; r++)
        for (int v = 0; v < Vp; v++) {
            double acc = 0.0;
            for (int c = 0; c < C; c++) acc += (double)x[(size_t)r * C + c] * w[(size_t)v * C + c];
            lg[(size_t)r * Vp + v] = acc;
        }
    double* wl = dbuf(N);
    ref_losses(lg, targets, N, V, Vp, wl);
    double* dlg = dbuf(nl);
    ref_dlogits(lg, targets, N, V, Vp, dloss, dlg);
    double* dxw = dbuf(nx);
    double* dww = dbuf(nw);
    for (int r = 0; r < N; r++)
        for (int v = 0; v < V; v++) {
            const double g = dlg[(size_t)r * Vp + v];
            if (g == 0.0) continue;
            for (int c = 0; c < C; c++) {
                dxw[(size_t)r * C + c] += g * w[(size_t)v * C + c];
                dww[(size_t)v * C + c] += g * x[(size_t)r * C + c];
            }
        }
    float* dx0 = frandbuf(nx, -0.01f, 0.01f);
    float* dw0 = frandbuf(nw, -0.01f, 0.01f);
    float* dx = fcopy(dx0, nx);
    float* dw = fcopy(dw0, nw);
    float* losses = fbuf(N);
    float* scratch = fbuf((size_t)classifier_rows(N) * Vp);
    ops_set_gemm_dtype(dtype);
    const double tol = bf16 ? 1e-2 : dtype == OPS_F16 ? 2e-3 : 1e-5;
    const char* mode = bf16 ? "bf16" : dtype == OPS_F16 ? "fp16" : "fp32";
    classifier_train(losses, dx, dw, scratch, x, w, NULL, targets, dloss, N, C, V, Vp);
    snprintf(what, sizeof(what), "classifier_train %s losses N=%d C=%d V=%d", mode, N, C, V);
    close_fd(what, losses, wl, N, tol, tol);
    float* want = expect_acc(dx0, dxw, nx);
    snprintf(what, sizeof(what), "classifier_train %s dx (accumulated) N=%d", mode, N);
    test_allclose(what, dx, want, nx, 0.0, tol * maxabs_d(dxw, nx));
    ops_free(want);
    want = expect_acc(dw0, dww, nw);
    snprintf(what, sizeof(what), "classifier_train %s dw (accumulated) N=%d", mode, N);
    test_allclose(what, dw, want, nw, 0.0, tol * maxabs_d(dww, nw));
    ops_free(want);
    // losses only (dloss 0) and NULL gradients leave dx / dw alone
    memcpy(dx, dx0, nx * sizeof(float));
    classifier_train(losses, dx, NULL, scratch, x, w, NULL, targets, 0.0f, N, C, V, Vp);
    snprintf(what, sizeof(what), "classifier_train %s losses without gradient N=%d", mode, N);
    close_fd(what, losses, wl, N, tol, tol);
    TEST_CHECK(bitwise_equal(dx, dx0, nx), "classifier_train with dloss 0 changed dx");
    classifier_train(losses, NULL, NULL, scratch, x, w, NULL, targets, dloss, N, C, V, Vp);
    if (bf16) classifier_train_w16(N, C, V, Vp, x, w, targets, dloss, scratch);
    ops_set_gemm_dtype(OPS_F32);
    ops_free(x); ops_free(w); ops_free(dx0); ops_free(dw0); ops_free(dx); ops_free(dw);
    ops_free(losses); ops_free(scratch);
    free(targets); free(lg); free(wl); free(dlg); free(dxw); free(dww);
}

// ----------------------------------------------------------------------------
// AdamW and reductions

static void test_adamw(int with_master) {
    const size_t n = 20011;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    float* p = frandbuf(n, -1, 1);
    float* m = fbuf(n);
    float* v = fbuf(n);
    memset(m, 0, n * sizeof(float));
    memset(v, 0, n * sizeof(float));
    float* master = with_master ? fcopy(p, n) : NULL;
    double *pd = to_d(p, n), *md = dbuf(n), *vd = dbuf(n);
    float* g = fbuf(n);
    for (int t = 1; t <= 5; t++) {
        for (size_t i = 0; i < n; i++) g[i] = frand(-1, 1) * (i % 5 == 0 ? 1e-3f : 1.0f);
        adamw_update(p, master, g, m, v, n, lr, b1, b2, eps, wd, gs, t, 1234u + (uint32_t)t);
        double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gs;
            md[i] = b1 * md[i] + (1.0 - b1) * gi;
            vd[i] = b2 * vd[i] + (1.0 - b2) * gi * gi;
            pd[i] -= lr * ((md[i] / bc1) / (sqrt(vd[i] / bc2) + eps) + wd * pd[i]);
        }
    }
    const char* tag = with_master ? " (master weights)" : "";
    char what[96];
    snprintf(what, sizeof(what), "adamw_update params after 5 steps%s", tag);
    close_fd(what, p, pd, n, 1e-5, 1e-6);
    snprintf(what, sizeof(what), "adamw_update m%s", tag);
    close_fd(what, m, md, n, 1e-5, 1e-6);
    snprintf(what, sizeof(what), "adamw_update v%s", tag);
    close_fd(what, v, vd, n, 1e-5, 1e-6);
    if (master) {
        TEST_CHECK(bitwise_equal(master, p, n), "adamw_update with master: params must equal master on fp32");
        ops_free(master);
    }
    ops_free(p); ops_free(m); ops_free(v); ops_free(g);
    free(pd); free(md); free(vd);
}

static void test_reductions(void) {
    const size_t n = 100003;
    float* x = frandbuf(n, -3, 3);
    double ss = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) { ss += (double)x[i] * x[i]; s += x[i]; }
    double got = sum_squares(x, n);
    TEST_CHECK(fabs(got - ss) <= 1e-12 * ss, "sum_squares %.17g want %.17g", got, ss);
    double got2 = sum_f32(x, n);
    TEST_CHECK(fabs(got2 - s) <= 1e-12 * maxabs_f(x, n) * n, "sum_f32 %.17g want %.17g", got2, s);
    TEST_CHECK(sum_squares(x, 0) == 0.0 && sum_f32(x, 0) == 0.0, "empty sums must be 0");
    TEST_CHECK(sum_squares(x, 3) == (double)x[0] * x[0] + (double)x[1] * x[1] + (double)x[2] * x[2], "sum_squares n=3");
    double* acc = (double*)ops_alloc(2 * sizeof(double));
    const double init[2] = {0.5, -2.0};
    ops_to_device_async(acc, init, sizeof(init));
    sum_squares_acc(acc, x, n);
    sum_f32_acc(acc + 1, x, n);
    sum_f32_acc(acc + 1, x, 0);
    double h[2];
    ops_to_host(h, acc, sizeof(h));
    TEST_CHECK(h[0] == 0.5 + got && h[1] == -2.0 + got2, "sum_squares_acc / sum_f32_acc add onto the accumulator");
    printf("ok   sum_squares / sum_f32 (n=%zu), and their accumulating forms\n", n);
    ops_free(acc);
    ops_free(x);
}

// ----------------------------------------------------------------------------
// thread-count independence of the row reductions (deterministic by design)

static void test_determinism(void) {
    int nthr = omp_get_max_threads();
    if (nthr < 2) { printf("note: determinism across thread counts not checked (1 thread)\n"); return; }
    const int N = 300, C = 200, V = 37;
    float* x = frandbuf((size_t)N * C, -1, 1);
    float* w = frandbuf(C, 0.5f, 1.5f);
    float* dy = frandbuf((size_t)N * C, -1, 1);
    float* mean = fbuf(N);
    float* rstd = fbuf(N);
    float* y = fbuf((size_t)N * C);
    layernorm_forward(y, mean, rstd, x, w, w, N, C);
    int inp[300];
    for (int i = 0; i < N; i++) inp[i] = (int)(urand() * V);
    float* r[2][4];
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(k == 0 ? 1 : nthr);
        r[k][0] = fbuf(C); memset(r[k][0], 0, C * sizeof(float));
        r[k][1] = fbuf(C); memset(r[k][1], 0, C * sizeof(float));
        r[k][2] = fbuf((size_t)V * C); memset(r[k][2], 0, (size_t)V * C * sizeof(float));
        r[k][3] = fbuf(C); memset(r[k][3], 0, C * sizeof(float));
        layernorm_backward(NULL, r[k][0], r[k][1], dy, x, w, mean, rstd, N, C, 1);
        encoder_backward(r[k][2], NULL, dy, inp, inp, NULL, NULL, 1, N, C);
        matmul_backward(NULL, NULL, r[k][3], dy, x, w, N, 1, C, 1);
    }
    omp_set_num_threads(nthr);
    TEST_CHECK(bitwise_equal(r[0][0], r[1][0], C) && bitwise_equal(r[0][1], r[1][1], C),
               "layernorm_backward dweight/dbias differ between 1 and %d threads", nthr);
    TEST_CHECK(bitwise_equal(r[0][2], r[1][2], (size_t)V * C), "encoder_backward differs between 1 and %d threads", nthr);
    TEST_CHECK(bitwise_equal(r[0][3], r[1][3], C), "matmul_backward dbias differs between 1 and %d threads", nthr);
    printf("ok   row reductions bitwise identical on 1 and %d threads\n", nthr);
    for (int k = 0; k < 2; k++) for (int j = 0; j < 4; j++) ops_free(r[k][j]);
    ops_free(x); ops_free(w); ops_free(dy); ops_free(mean); ops_free(rstd); ops_free(y);
}

// The OpenMP wait setting the CPU backend's start-up chose from this program's --dtype (as the
// trainers' and generate's; test_cpu_bf16.sh runs this test again with --dtype fp32): passive
// threads where OpenBLAS runs the GEMMs (fp32), a short spin where every GEMM is on OpenMP (bf16).
static void test_wait_policy(int argc, char** argv) {
    int fp32 = 0;
    for (int i = 1; i < argc; i++)
        fp32 |= strcmp(argv[i], "--dtype=fp32") == 0 || (i + 1 < argc && strcmp(argv[i], "--dtype") == 0 && strcmp(argv[i + 1], "fp32") == 0);
    const char* why;
    const int bf16 = !fp32 && ops_bf16_native(&why);
    const char* policy = getenv("OMP_WAIT_POLICY");
    const char* spin = getenv("GOMP_SPINCOUNT");
    if (bf16) TEST_CHECK(policy == NULL && spin != NULL, "bf16 GEMMs: GOMP_SPINCOUNT set, OMP_WAIT_POLICY not (got %s / %s)", spin, policy);
    else TEST_CHECK(policy != NULL && strcmp(policy, "passive") == 0 && spin == NULL, "fp32 GEMMs: OMP_WAIT_POLICY=passive (got %s / %s)", policy, spin);
    printf("ok   before main(): %s=%s (%s GEMMs)\n", bf16 ? "GOMP_SPINCOUNT" : "OMP_WAIT_POLICY", bf16 ? spin : policy, bf16 ? "bf16" : "fp32");
}

// ----------------------------------------------------------------------------
// the cases: one table, in the order the full run goes through them (the inputs come from one
// random stream, g_rng); `test_ops --op NAME` runs one op's rows, `--list` names the ops

static void case_alloc(void) {
    void* p = ops_alloc(1000);
    TEST_CHECK(((uintptr_t)p & 63) == 0, "ops_alloc must return 64-byte aligned memory");
    ops_free(p);
}

static void case_encoder(void) {
    test_encoder(NULL, "");
    static const int packed_pos[10] = {0, 1, 0, 1, 2, 0, 1, 2, 3, 4};
    test_encoder(packed_pos, " with positions");
}

static void case_layernorm(void) {
    test_layernorm_shape(5, 7, 0.0f);
    test_layernorm_shape(3, 768, 30.0f);   // large mean: two-pass variance needed
    test_layernorm_shape(67, 129, 0.0f);
}

static void case_matmul(void) {
    test_matmul_shape(5, 7, 9);
    test_matmul_shape(67, 129, 250);
    test_matmul_forward_acc(1, 8, 2304, 0);   // one row (decoding): the GEMV
    test_matmul_forward_acc(67, 8, 250, 0);   // a LoRA branch's shape: rank 8 in
}

// ragged T around the 64-row tiles, vector (16, 64) and plain-loop (24) head sizes; packed records
static void case_attention(void) {
    test_attention_shape(1, 5, 1, 16, 1);
    test_attention_shape(2, 17, 3, 16, 1);
    test_attention_shape(1, 9, 2, 24, 1);
    test_attention_shape(1, 3, 1, 64, 1);
    static const int Ts[] = {1, 17, 64, 130};
    static const int HSs[] = {16, 64};
    for (int a = 0; a < 4; a++)
        for (int hsi = 0; hsi < 2; hsi++)
            for (int nh = 1; nh <= 3; nh += 2)
                for (int b = 1; b <= 2; b++)
                    test_attention_shape(b, Ts[a], nh, HSs[hsi], 0);
    test_attention_shape(1, 70, 2, 24, 0);
    test_attention_shape(1, 200, 1, 32, 0);
    test_attention_shape(1, 66, 1, 128, 0);
    // packed records: a record of one position, records across the 64-position tiles, a start
    // exactly on a tile edge, a row without a boundary, a record that fills a row
    static const int small[] = {1, 3, 5, 4, 2, 3};
    test_attention_docs(2, 9, 2, 16, 1, small, 6, " [records 1 3 5 | 4 2 3]");
    static const int tiles[] = {1, 70, 30, 49, 64, 64, 22, 150};
    test_attention_docs(3, 150, 2, 64, 0, tiles, 8, " [records 1 70 30 49 | 64 64 22 | 150]");
    test_attention_docs(3, 150, 1, 24, 0, tiles, 8, " [records 1 70 30 49 | 64 64 22 | 150]");
    static const int ends[] = {100, 29, 1, 1};
    test_attention_docs(1, 131, 3, 16, 0, ends, 4, " [records 100 29 1 1]");
}

static void case_classifier(void) {
    test_classifier_shape(5, 7, 9, 3.0f);
    test_classifier_shape(3, 1, 4, 3.0f);        // V = 1: loss 0, gradient 0
    test_classifier_shape(37, 1000, 1024, 8.0f);
    test_classifier_shape(7, 50257, 50304, 20.0f);
    test_classifier_train(3, 8, 50, 64, OPS_F32);       // one block
    test_classifier_train(1100, 24, 500, 512, OPS_F32); // blocks of 512, 512 and 76 rows
}

// bf16 GEMMs run on every CPU: oneDNN's where it has a bf16 matmul, widened to fp32 elsewhere;
// fp16 GEMMs are always widened
static void case_gemm_16(void) {
    const char* why;
    printf("bf16 GEMMs: %s (%s)\n", cpu_gemm_bf16_widened() ? "widened to fp32" : "oneDNN", ops_bf16_native(&why) ? "native" : why);
    test_gemm_widen(0, 37, 45, 600, 1024, 1);  // K panels of 256, 256, 88; N and M blocks of 2
    test_gemm_widen(0, 5, 300, 7, 1024, 1);    // one K panel of 7; N blocks of 73
    test_gemm_widen(0, 3, 4, 0, 1024, 1);      // K = 0: C zeroed, or kept when accumulating
    test_gemm_widen(1, 37, 45, 600, 1024, 1);  // fp16: the same panels
    test_gemm_widen(1, 5, 300, 7, 1024, 1000); // fp16: values up to 1000 (fp16's steps of 0.5 there)
    test_gemm_widen(1, 6, 9, 40, 1024, 1e5f);  // fp16: operands past 65504 are inf
}

static void case_classifier_16(void) {
    test_classifier_train(1100, 24, 500, 512, OPS_BF16);
    test_classifier_train(1100, 24, 500, 512, OPS_F16);
}

static void case_matmul_16(void) {
    test_matmul_bf16(1, 100, 131);  // one row: tail of 4 and a one-row remainder
    for (int n = 1; n <= 5; n++) test_matmul_q8(n, 96, 7); // the few-row tiles, OC % 4 = 3
    test_matmul_q8(1, 768, 2304);   // one row, threaded
    test_matmul_q8(9, 64, 300);     // two passes of four rows and one
    test_matmul_q8(16, 96, 300);    // the panels: one full, one of 44 rows
    test_matmul_q8(40, 32, 513);
    test_matmul_bf16(1, 768, 2304); // one row, threaded
    test_matmul_bf16(3, 100, 131);  // rows: a GEMM
    test_matmul_forward_acc(1, 8, 2304, 1);
    test_matmul_forward_acc(67, 8, 250, 1);
}

static void case_adamw(void) { test_adamw(0); test_adamw(1); }

// attention_forward_kv over caches fed in pieces (a prompt of 5, then one token at a time) equals
// the causal attention of the whole sequence (fp32 caches); with bf16 caches
// (attention_forward_kv16) it equals that of the sequence whose keys and values are rounded to
// bf16, and the caches hold those bits.
static void test_attention_kv(int B, int T, int NH, int HS, int k16) {
    const int C = NH * HS, maxT = T + 3;
    float *qkv = fbuf((size_t)B * T * 3 * C), *full = fbuf((size_t)B * T * C), *lse = fbuf((size_t)B * NH * T);
    float *part = fbuf((size_t)B * T * 3 * C), *out = fbuf((size_t)B * T * C);
    const size_t nc = (size_t)B * NH * maxT * HS;
    float *k32 = fbuf(nc), *v32 = fbuf(nc);
    uint16_t* k16c = (uint16_t*)ops_alloc(nc * sizeof(uint16_t));
    uint16_t* v16c = (uint16_t*)ops_alloc(nc * sizeof(uint16_t));
    for (size_t i = 0; i < (size_t)B * T * 3 * C; i++) {
        const float x = (float)(2.0 * urand() - 1.0);
        const int kv_part = (int)((i % (3 * (size_t)C)) / (size_t)C) > 0; // keys and values
        qkv[i] = k16 && kv_part ? bf16_to_f32(bf16_from_f32(x)) : x;
        part[i] = x;
    }
    attention_forward(full, lse, qkv, NULL, B, T, C, NH);
    double err = 0;
    for (int t0 = 0; t0 < T;) {
        const int Tn = t0 == 0 ? (T < 5 ? T : 5) : 1;
        float* in = fbuf((size_t)B * Tn * 3 * C);
        float* o = fbuf((size_t)B * Tn * C);
        for (int b = 0; b < B; b++) memcpy(in + (size_t)b * Tn * 3 * C, part + ((size_t)b * T + t0) * 3 * C, (size_t)Tn * 3 * C * sizeof(float));
        if (k16) attention_forward_kv16(o, in, k16c, v16c, B, t0, Tn, maxT, C, NH);
        else attention_forward_kv(o, in, k32, v32, B, t0, Tn, maxT, C, NH);
        for (int b = 0; b < B; b++)
            for (size_t i = 0; i < (size_t)Tn * C; i++) err = fmax(err, fabs(o[(size_t)b * Tn * C + i] - full[((size_t)b * T + t0) * C + i]));
        ops_free(in); ops_free(o);
        t0 += Tn;
    }
    size_t wrong = 0; // the cache's keys: the sequence's, rounded to bf16 with k16
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int i = 0; i < HS; i++) {
                    const size_t c = (((size_t)b * NH + h) * maxT + t) * HS + i;
                    const float want = qkv[((size_t)b * T + t) * 3 * C + C + h * HS + i];
                    wrong += (k16 ? bf16_to_f32(k16c[c]) : k32[c]) != want;
                }
    TEST_CHECK(err < 1e-5 && wrong == 0, "attention_forward_kv%s (B=%d T=%d NH=%d HS=%d): max error %.2g against the whole sequence's, %zu cached keys wrong",
               k16 ? "16" : "", B, T, NH, HS, err, wrong);
    ops_free(qkv); ops_free(full); ops_free(lse); ops_free(part); ops_free(out); ops_free(k32); ops_free(v32); ops_free(k16c); ops_free(v16c);
}

static void case_attention_kv(void) {
    for (int k16 = 0; k16 <= 1; k16++) { test_attention_kv(1, 9, 2, 16, k16); test_attention_kv(2, 17, 3, 24, k16); }
}

// DoRA's ops against their definitions in double: the row norms of W + scaling B A (fp32 and bf16
// weights; C past one 256-column chunk), every form of dora_scale (in place too), and the
// magnitude's gradient (more rows than a thread's column block walks at once, the same sums twice).
static void test_dora(int OC, int C, int R, int N) {
    float *W = fbuf((size_t)OC * C), *A = fbuf((size_t)R * C), *B = fbuf((size_t)OC * R), *m = fbuf(OC), *bias = fbuf(OC);
    float *nrm = fbuf(OC), *nrm16 = fbuf(OC), *x = fbuf((size_t)N * OC), *y = fbuf((size_t)N * OC), *dm = fbuf(OC), *dm2 = fbuf(OC);
    uint16_t* W16 = (uint16_t*)ops_alloc((size_t)OC * C * sizeof(uint16_t));
    double* want = (double*)malloc((size_t)N * OC * sizeof(double));
    for (size_t i = 0; i < (size_t)OC * C; i++) { W[i] = (float)(urand() - 0.5); W16[i] = bf16_from_f32(W[i]); }
    for (size_t i = 0; i < (size_t)R * C; i++) A[i] = (float)(urand() - 0.5);
    for (size_t i = 0; i < (size_t)OC * R; i++) B[i] = (float)(urand() - 0.5);
    for (int o = 0; o < OC; o++) { m[o] = (float)(0.5 + urand()); bias[o] = (float)(urand() - 0.5); dm[o] = dm2[o] = 0.25f; }
    for (size_t i = 0; i < (size_t)N * OC; i++) { x[i] = (float)(urand() - 0.5); y[i] = (float)(urand() - 0.5); }
    const float s = 0.75f;
    dora_norm(nrm, W, A, B, s, OC, C, R);
    dora_norm_w16(nrm16, W16, A, B, s, OC, C, R);
    double err = 0, err16 = 0;
    for (int o = 0; o < OC; o++) {
        double ss = 0, ss16 = 0;
        for (int c = 0; c < C; c++) {
            double ba = 0;
            for (int j = 0; j < R; j++) ba += (double)B[(size_t)o * R + j] * A[(size_t)j * C + c];
            const double v = W[(size_t)o * C + c] + s * ba, v16 = bf16_to_f32(W16[(size_t)o * C + c]) + s * ba;
            ss += v * v; ss16 += v16 * v16;
        }
        err = fmax(err, fabs(nrm[o] - sqrt(ss)) / sqrt(ss));
        err16 = fmax(err16, fabs(nrm16[o] - sqrt(ss16)) / sqrt(ss16));
    }
    TEST_CHECK(err < 1e-6 && err16 < 1e-6, "dora_norm (%d x %d, R=%d): relative error %.2g (bf16 weights %.2g)", OC, C, R, err, err16);
    // dora_scale: shift 0 / -1, bias or not, accumulate or not, and in place
    for (int form = 0; form < 8; form++) {
        const float shift = form & 1 ? -1.0f : 0.0f;
        const float* b = form & 2 ? bias : NULL;
        const int acc = (form >> 2) & 1;
        for (size_t i = 0; i < (size_t)N * OC; i++) {
            const int o = (int)(i % (size_t)OC);
            want[i] = (acc ? y[i] : 0.0) + ((double)m[o] / nrm[o] + shift) * x[i] + (b ? b[o] : 0.0);
        }
        float* out = fbuf((size_t)N * OC);
        memcpy(out, y, (size_t)N * OC * sizeof(float));
        dora_scale(out, x, m, nrm, shift, b, N, OC, acc);
        double e = 0;
        for (size_t i = 0; i < (size_t)N * OC; i++) e = fmax(e, fabs(out[i] - want[i]));
        TEST_CHECK(e < 1e-5, "dora_scale (N=%d OC=%d shift %g%s%s): max error %.2g", N, OC, shift, b ? ", bias" : "", acc ? ", accumulate" : "", e);
        ops_free(out);
    }
    float* inplace = fbuf((size_t)N * OC);
    memcpy(inplace, x, (size_t)N * OC * sizeof(float));
    dora_scale(inplace, inplace, m, nrm, -1.0f, bias, N, OC, 0);
    double e = 0;
    for (size_t i = 0; i < (size_t)N * OC; i++) {
        const int o = (int)(i % (size_t)OC);
        e = fmax(e, fabs(inplace[i] - (((double)m[o] / nrm[o] - 1.0) * x[i] + bias[o])));
    }
    TEST_CHECK(e < 1e-5, "dora_scale in place (N=%d OC=%d): max error %.2g", N, OC, e);
    // the magnitude's gradient, added to what dm holds
    dora_magnitude_backward(dm, x, y, nrm, N, OC);
    dora_magnitude_backward(dm2, x, y, nrm, N, OC);
    double eg = 0;
    for (int o = 0; o < OC; o++) {
        double g = 0;
        for (int n = 0; n < N; n++) g += (double)x[(size_t)n * OC + o] * y[(size_t)n * OC + o];
        eg = fmax(eg, fabs(dm[o] - (0.25 + g / nrm[o])));
    }
    TEST_CHECK(eg < 1e-5 && memcmp(dm, dm2, (size_t)OC * sizeof(float)) == 0,
               "dora_magnitude_backward (N=%d OC=%d): max error %.2g, the same sums twice", N, OC, eg);
    ops_free(W); ops_free(A); ops_free(B); ops_free(m); ops_free(bias); ops_free(nrm); ops_free(nrm16); ops_free(x);
    ops_free(y); ops_free(dm); ops_free(dm2); ops_free(W16); ops_free(inplace); free(want);
}

static void case_dora(void) { test_dora(37, 53, 3, 7); test_dora(130, 600, 9, 300); }

static const TestCase CASES[] = {
    {"ops_alloc", case_alloc, 0, NULL},
    {"vm_expf", test_vm_expf, 0, NULL},
    {"encoder", case_encoder, 0, NULL},
    {"layernorm", case_layernorm, 0, NULL},
    {"matmul", case_matmul, 0, NULL},
    {"elementwise", test_elementwise, 0, NULL},
    {"attention", case_attention, 0, NULL},
    {"attention_kv", case_attention_kv, 0, NULL},
    {"classifier", case_classifier, 0, NULL},
    {"gemm_16", case_gemm_16, 0, NULL},
    {"classifier", case_classifier_16, 0, NULL},
    {"matmul", case_matmul_16, 0, NULL},
    {"adamw", case_adamw, 0, NULL},
    {"dora", case_dora, 0, NULL},
    {"reductions", test_reductions, 0, NULL},
    {"determinism", test_determinism, 0, NULL},
};
#define N_CASES ((int)(sizeof(CASES) / sizeof(CASES[0])))

int main(int argc, char** argv) {
    static const char* const backend_flags[] = {"--dtype", NULL};   // read by the CPU backend's start-up
    unsigned char selected[N_CASES];
    const int args = test_cases_select("test_ops", CASES, N_CASES, argc, argv, backend_flags, selected);
    if (args) return args == 1 ? 0 : 2;
    ops_init(0);
    printf("backend: %s\n", ops_backend_name());
    TEST_CHECK(strncmp(ops_backend_name(), "cpu", 3) == 0, "backend name '%s'", ops_backend_name());
#if defined(__linux__)
    // the pre-main re-exec of the CPU backend (llmc/cpu/backend.c) put its settings in place
    if (getenv("LLMC_NO_REEXEC") == NULL && strncmp(ops_backend_name(), "cpu", 3) == 0) {
        test_wait_policy(argc, argv);
#if defined(__x86_64__)
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
            TEST_CHECK(getenv("OPENBLAS_CORETYPE") != NULL, "OPENBLAS_CORETYPE was not set before main() on an AVX-512 CPU");
#endif
    }
#endif
    for (int i = 0; i < N_CASES; i++) if (selected[i]) CASES[i].run();
    return test_finish("test_ops");
}
