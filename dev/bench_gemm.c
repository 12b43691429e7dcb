// GEMM throughput on the GPT-2 124M training step's shapes (B*T = 1024 rows: c_attn, attn.c_proj,
// mlp.c_fc, mlp.c_proj, lm_head; forward, dinp and dweight orientations), for every library the
// CPU backend could call: OpenBLAS sgemm (fp32), oneDNN's sgemm (fp32) and oneDNN's matmul
// primitive in bf16 (bf16 in, fp32 accumulate and out). Not a
// test: the measurement behind llmc/cpu/gemm.c's choice. Build: make bench-cpu (mk/bench.mk).
//   build/cpu/dev/bench_gemm [threads] [reps]
// The bf16 columns time the GEMM alone on inputs already in bf16 (the backend converts an
// activation once per matmul, a pass over N*K floats: reported on its own line).
// Not measured here, and why: Debian's OpenBLAS 0.3.21 is built without BUILD_BFLOAT16 (no
// cblas_sbgemm in libopenblas.so); BLIS 0.9 (Debian) has no bf16 GEMM; libxsmm 1.17 has bf16 only as
// small-matrix JIT kernels, which a large GEMM would drive with blocking and threading of our
// own (the hand-written GEMM the backend avoids).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include "ops/ops.h"
#include "base/bf16.h"
#include "base/timer.h"
#include "base/rand.h"

#define DNNL_OK(x) do { dnnl_status_t s_ = (x); if (s_ != dnnl_success) { \
    fprintf(stderr, "oneDNN error %d at %s:%d\n", (int)s_, __FILE__, __LINE__); exit(1); } } while (0)

enum { LIB_SGEMM, LIB_DNNL_F32, LIB_DNNL_BF16, N_LIBS };
static const char* LIB_NAME[N_LIBS] = {"openblas sgemm", "onednn sgemm", "onednn bf16"};

// Uniform in [-0.5, 0.5), each buffer from its own stream of llmc/base/rand.h.
static float* rand_f32(size_t n) {
    static uint64_t stream = 0;
    stream++;
    float* p = (float*)ops_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = (float)(rand_uniform(1, stream, i) - 0.5);
    return p;
}
static uint16_t* to_bf16(const float* x, size_t n) {
    uint16_t* p = (uint16_t*)ops_alloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) p[i] = bf16_from_f32(x[i]);
    return p;
}

// The three orientations as one row-major C[M,N] (+)= op(A)[M,K] op(B)[K,N]:
// kind 0 forward  out[N,OC]  = inp[N,C] W[OC,C]^T
// kind 1 dinp     dinp[N,C] += dout[N,OC] W[OC,C]
// kind 2 dweight  dW[OC,C]  += dout[N,OC]^T inp[N,C]
typedef struct { int M, Nn, K, ta, tb, lda, ldb; float beta; } Gemm;
static Gemm gemm_of(int kind, int N, int C, int OC) {
    Gemm g;
    if (kind == 0) g = (Gemm){N, OC, C, 0, 1, C, C, 0.0f};
    else if (kind == 1) g = (Gemm){N, C, OC, 0, 0, OC, C, 1.0f};
    else g = (Gemm){OC, C, N, 1, 0, OC, C, 1.0f};
    return g;
}

static dnnl_engine_t engine;
static dnnl_stream_t stream;

// The memory descriptors of g: A and B bf16 (transposes as strides), C fp32 row-major.
static void dnnl_descs(const Gemm* g, dnnl_memory_desc_t* a, dnnl_memory_desc_t* b, dnnl_memory_desc_t* c) {
    dnnl_dims_t ad = {g->M, g->K}, bd = {g->K, g->Nn}, cd = {g->M, g->Nn};
    dnnl_dims_t as = {g->ta ? 1 : g->lda, g->ta ? g->lda : 1};
    dnnl_dims_t bs = {g->tb ? 1 : g->ldb, g->tb ? g->ldb : 1};
    DNNL_OK(dnnl_memory_desc_init_by_strides(a, 2, ad, dnnl_bf16, as));
    DNNL_OK(dnnl_memory_desc_init_by_strides(b, 2, bd, dnnl_bf16, bs));
    DNNL_OK(dnnl_memory_desc_init_by_tag(c, 2, cd, dnnl_f32, dnnl_ab));
}

// A oneDNN bf16 matmul primitive for g (transposes as strides), accumulating with a sum post-op.
static dnnl_primitive_t dnnl_matmul_bf16(const Gemm* g) {
    dnnl_memory_desc_t a, b, c;
    dnnl_descs(g, &a, &b, &c);
    dnnl_matmul_desc_t md;
    DNNL_OK(dnnl_matmul_desc_init(&md, &a, &b, NULL, &c));
    dnnl_primitive_attr_t attr;
    DNNL_OK(dnnl_primitive_attr_create(&attr));
    if (g->beta != 0.0f) {
        dnnl_post_ops_t po;
        DNNL_OK(dnnl_post_ops_create(&po));
        DNNL_OK(dnnl_post_ops_append_sum(po, 1.0f));
        DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    DNNL_OK(dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL));
    const char* impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    static int shown = 0;
    if (!shown++) printf("oneDNN matmul implementation: %s\n", impl ? impl : "?");
    dnnl_primitive_t p;
    DNNL_OK(dnnl_primitive_create(&p, pd));
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    return p;
}

static void dnnl_run(dnnl_primitive_t p, const Gemm* g, void* A, void* B, float* C) {
    dnnl_memory_desc_t a, b, c;
    dnnl_descs(g, &a, &b, &c);
    dnnl_memory_t ma, mb, mc;
    DNNL_OK(dnnl_memory_create(&ma, &a, engine, A));
    DNNL_OK(dnnl_memory_create(&mb, &b, engine, B));
    DNNL_OK(dnnl_memory_create(&mc, &c, engine, C));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    DNNL_OK(dnnl_primitive_execute(p, stream, 3, args));
    DNNL_OK(dnnl_stream_wait(stream));
    dnnl_memory_destroy(ma); dnnl_memory_destroy(mb); dnnl_memory_destroy(mc);
}

// Seconds of the best of reps calls (after one warm-up) of library lib on gemm g.
static double bench(int lib, const Gemm* g, int reps) {
    size_t na = (size_t)g->M * g->K, nb = (size_t)g->K * g->Nn, nc = (size_t)g->M * g->Nn;
    float* A = rand_f32(na); float* B = rand_f32(nb); float* C = rand_f32(nc);
    uint16_t* A16 = to_bf16(A, na); uint16_t* B16 = to_bf16(B, nb);
    dnnl_primitive_t p = lib == LIB_DNNL_BF16 ? dnnl_matmul_bf16(g) : NULL;
    CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans, tb = g->tb ? CblasTrans : CblasNoTrans;
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = timer_now_s();
        switch (lib) {
        case LIB_SGEMM:
            cblas_sgemm(CblasRowMajor, ta, tb, g->M, g->Nn, g->K, 1.0f, A, g->lda, B, g->ldb, g->beta, C, g->Nn);
            break;
        case LIB_DNNL_F32:
            DNNL_OK(dnnl_sgemm(g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', g->M, g->Nn, g->K, 1.0f, A, g->lda,
                               B, g->ldb, g->beta, C, g->Nn));
            break;
        default: dnnl_run(p, g, A16, B16, C); break;
        }
        double dt = timer_now_s() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    if (p) dnnl_primitive_destroy(p);
    ops_free(A); ops_free(B); ops_free(C); ops_free(A16); ops_free(B16);
    return best;
}

int main(int argc, char** argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    ops_init(threads);
    DNNL_OK(dnnl_engine_create(&engine, dnnl_cpu, 0));
    DNNL_OK(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
    const dnnl_version_t* v = dnnl_version();
    printf("backend: %s; oneDNN %d.%d.%d (%s runtime)\n", ops_backend_name(), v->major, v->minor,
           v->patch, v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
    static const struct { const char* name; int C, OC; } shapes[] = {
        {"c_attn  768->2304", 768, 2304}, {"c_proj  768->768", 768, 768},
        {"c_fc    768->3072", 768, 3072}, {"fc_proj 3072->768", 3072, 768},
        {"lm_head 768->50304", 768, 50304},
    };
    static const char* KIND[3] = {"fwd", "dinp", "dW"};
    const int N = 1024;
    double step_s[N_LIBS] = {0}, step_flop = 0, kind_s[N_LIBS][3] = {{0}};
    printf("GFLOP/s, best of %d, N=%d\n%-20s %-5s", reps, N, "shape", "");
    for (int l = 0; l < N_LIBS; l++) printf(" %16s", LIB_NAME[l]);
    printf("\n");
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (int k = 0; k < 3; k++) {
            Gemm g = gemm_of(k, N, shapes[s].C, shapes[s].OC);
            double flop = 2.0 * N * shapes[s].C * shapes[s].OC;
            double mult = s == 4 ? 1.0 : 12.0;   // 12 layers of block matmuls, one lm_head
            step_flop += mult * flop;
            printf("%-20s %-5s", shapes[s].name, KIND[k]);
            for (int l = 0; l < N_LIBS; l++) {
                double t = bench(l, &g, reps);
                step_s[l] += mult * t;
                kind_s[l][k] += mult * t;
                printf(" %16.0f", flop / t * 1e-9);
            }
            printf("\n");
            fflush(stdout);
        }
    printf("%-26s", "step (12 layers + head)");
    for (int l = 0; l < N_LIBS; l++) printf(" %16.0f", step_flop / step_s[l] * 1e-9);
    printf("\n%-26s", "step GEMM seconds");
    for (int l = 0; l < N_LIBS; l++) printf(" %16.2f", step_s[l]);
    // LoRA / QLoRA: the frozen weights (wte included) get no gradient, so no dW GEMMs
    printf("\n%-26s", "LoRA step GEMM seconds");
    for (int l = 0; l < N_LIBS; l++) printf(" %16.2f", kind_s[l][0] + kind_s[l][1]);
    // the conversion the bf16 path adds per matmul: one activation (N x 3072 at most) to bf16
    size_t n = (size_t)N * 3072;
    float* x = rand_f32(n);
    uint16_t* y = (uint16_t*)ops_alloc(n * sizeof(uint16_t));
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = timer_now_s();
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) y[i] = bf16_from_f32(x[i]);
        double dt = timer_now_s() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    printf("\nfp32 -> bf16 conversion of a %d x 3072 activation: %.2f ms\n", N, best * 1e3);
    ops_free(x); ops_free(y);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(engine);
    return 0;
}
