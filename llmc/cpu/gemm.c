// CPU backend: bf16 GEMMs with fp32 accumulation through oneDNN's matmul primitive.
//
// Why oneDNN: on the step's GEMM shapes its bf16 matmul (brgemm avx512_core_bf16 kernels) is the
// fastest GEMM this system's libraries offer, where Debian's OpenBLAS has no sbgemm and BLIS and
// libxsmm no usable bf16 GEMM (the measurements: docs/CPU.md, "Which GEMM library"). oneDNN is
// also what PyTorch calls for bf16 on the CPU, and Debian's build uses the OpenMP runtime: its
// threads are our OpenMP threads, so it never competes with the other ops' parallel loops for the
// cores (OpenBLAS' pthreads pool is the fp32 path's only).
//
// Primitives are created once per shape and orientation and kept (a training step has ~15
// distinct GEMMs); the accumulating ones (backward: += into gradients) use oneDNN's sum post-op.
// On a CPU where oneDNN has no bf16 matmul (no AVX-512: it reports "unimplemented"), the bf16
// operands are widened to fp32 in panels and multiplied by OpenBLAS' sgemm: bf16 products are
// exact in fp32, so the result is the same bf16-operand, fp32-accumulate GEMM.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include "cpu/gemm.h"
#include "cpu/gemv.h"
#include "cpu/ops_cpu.h"
#include "base/bf16.h"
#include "base/check.h"

#define dnnlCheck(x) dnnl_check((x), #x, __FILE__, __LINE__)
static void dnnl_check(dnnl_status_t s, const char* what, const char* file, int line) {
    if (s == dnnl_success) return;
    fatal("this is a bug in llmc, or oneDNN cannot run on this CPU (run with --dtype fp32)",
          "oneDNN call %s failed with status %d at %s:%d", what, (int)s, file, line);
}

typedef struct {
    int ta, tb, M, N, K, lda, ldb, acc;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a, b, c;
} GemmPrim;

#define GEMM_CACHE 64
static GemmPrim cache[GEMM_CACHE];
static int n_cached;
static dnnl_engine_t engine;
static dnnl_stream_t stream;

static void gemm_descs(GemmPrim* g) {
    dnnl_dims_t ad = {g->M, g->K}, bd = {g->K, g->N}, cd = {g->M, g->N};
    // a transposed operand is the same memory read with swapped strides
    dnnl_dims_t as = {g->ta ? 1 : g->lda, g->ta ? g->lda : 1};
    dnnl_dims_t bs = {g->tb ? 1 : g->ldb, g->tb ? g->ldb : 1};
    dnnlCheck(dnnl_memory_desc_init_by_strides(&g->a, 2, ad, dnnl_bf16, as));
    dnnlCheck(dnnl_memory_desc_init_by_strides(&g->b, 2, bd, dnnl_bf16, bs));
    dnnlCheck(dnnl_memory_desc_init_by_tag(&g->c, 2, cd, dnnl_f32, dnnl_ab));
}

static void gemm_engine(void) {
    if (engine) return;
    dnnlCheck(dnnl_engine_create(&engine, dnnl_cpu, 0));
    dnnlCheck(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
}

int cpu_gemm_bf16_widened(void) {
    static int probed = -1;
    if (probed >= 0) return probed;
    gemm_engine();
    GemmPrim g = {0, 0, 16, 16, 16, 16, 16, 0, NULL, {0}, {0}, {0}};
    gemm_descs(&g);
    dnnl_matmul_desc_t md;
    dnnlCheck(dnnl_matmul_desc_init(&md, &g.a, &g.b, NULL, &g.c));
    dnnl_primitive_desc_t pd;
    const dnnl_status_t st = dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL);
    if (st == dnnl_success) dnnl_primitive_desc_destroy(pd);
    else if (st != dnnl_unimplemented) dnnlCheck(st);
    probed = st == dnnl_unimplemented;
    return probed;
}

static void gemm_create(GemmPrim* g) {
    gemm_engine();
    gemm_descs(g);
    dnnl_matmul_desc_t md;
    dnnlCheck(dnnl_matmul_desc_init(&md, &g->a, &g->b, NULL, &g->c));
    dnnl_primitive_attr_t attr;
    dnnlCheck(dnnl_primitive_attr_create(&attr));
    if (g->acc) {
        dnnl_post_ops_t po;
        dnnlCheck(dnnl_post_ops_create(&po));
        dnnlCheck(dnnl_post_ops_append_sum(po, 1.0f));
        dnnlCheck(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    dnnlCheck(dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL));
    dnnlCheck(dnnl_primitive_create(&g->prim, pd));
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
}

static GemmPrim* gemm_lookup(int ta, int tb, int M, int N, int K, int lda, int ldb, int acc) {
    for (int i = 0; i < n_cached; i++) {
        GemmPrim* g = &cache[i];
        if (g->ta == ta && g->tb == tb && g->M == M && g->N == N && g->K == K && g->lda == lda &&
            g->ldb == ldb && g->acc == acc) return g;
    }
    // a full cache (shapes of many batch sizes: generation) starts over
    if (n_cached == GEMM_CACHE) {
        for (int i = 0; i < n_cached; i++) dnnl_primitive_destroy(cache[i].prim);
        n_cached = 0;
    }
    GemmPrim* g = &cache[n_cached];
    *g = (GemmPrim){ta, tb, M, N, K, lda, ldb, acc, NULL, {0}, {0}, {0}};
    gemm_create(g);
    n_cached++;
    return g;
}

// op(X)[r, c] of a bf16 (or fp16) matrix X with leading dimension ld, widened to fp32
static inline float gemm_at(const uint16_t* X, int ld, int t, int f16, int r, int c) {
    const uint16_t h = t ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
    return f16 ? fp16_to_f32(h) : bf16_to_f32(h);
}

// Widens op(X)[r0 + i, c0 + j] for i < rows, j < cols into out (row-major, rows x cols)
static void gemm_widen_block(const uint16_t* X, int ld, int t, int f16, int r0, int c0, int rows, int cols, float* out) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) out[(size_t)i * cols + j] = gemm_at(X, ld, t, f16, r0 + i, c0 + j);
}

void cpu_gemm_widen(int f16, int ta, int tb, int M, int N, int K, const uint16_t* A, int lda,
                    const uint16_t* B, int ldb, int accumulate, float* C, float* buf, size_t buf_floats) {
    if (K == 0) {
        if (!accumulate) for (int m = 0; m < M; m++) memset(C + (size_t)m * N, 0, (size_t)N * sizeof(float));
        return;
    }
    // the buffer's halves: a B panel of kb x nb, an A block of mb x kb
    const size_t half = buf_floats / 2;
    const int kb = K < 256 ? K : 256;
    if (half < (size_t)kb) fatal("this is a bug in llmc", "a bf16 widening buffer of %zu floats", buf_floats);
    const int nb = (size_t)N < half / kb ? N : (int)(half / kb), mb = (size_t)M < half / kb ? M : (int)(half / kb);
    float* bp = buf;
    float* ap = buf + half;
    for (int k0 = 0; k0 < K; k0 += kb) {
        const int kn = K - k0 < kb ? K - k0 : kb;
        const float beta = accumulate || k0 > 0 ? 1.0f : 0.0f;
        for (int n0 = 0; n0 < N; n0 += nb) {
            const int nn = N - n0 < nb ? N - n0 : nb;
            gemm_widen_block(B, ldb, tb, f16, k0, n0, kn, nn, bp);
            for (int m0 = 0; m0 < M; m0 += mb) {
                const int mm = M - m0 < mb ? M - m0 : mb;
                gemm_widen_block(A, lda, ta, f16, m0, k0, mm, kn, ap);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mm, nn, kn, 1.0f, ap, kn, bp, nn, beta,
                            C + (size_t)m0 * N + n0, N);
            }
        }
    }
}

// The widened path's buffer: allocated and written once, so it is resident from the first GEMM
// on, as the memory plan counts it
static float* widen_buf(void) {
    static float* buf;
    if (!buf) {
        buf = malloc(CPU_GEMM_WIDEN_BYTES);
        if (!buf) fatal("free memory or run with --dtype fp32", "out of memory: %d MiB for the bf16 GEMMs' fp32 panels", (int)(CPU_GEMM_WIDEN_BYTES >> 20));
        memset(buf, 0, CPU_GEMM_WIDEN_BYTES);
    }
    return buf;
}

void cpu_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t* A, int lda,
                   const uint16_t* B, int ldb, int accumulate, float* C) {
    if (M == 0 || N == 0) return;
    // one row times a weight held [N, K] (generation with the KV cache): llmc/cpu/gemv.c
    if (M == 1 && !ta && tb && !accumulate && cpu_gemv_bf16(N, K, A, B, ldb, C)) return;
    if (K == 0) { // (oneDNN divides by K): C = 0, or C as it is
        cpu_gemm_widen(0, ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, NULL, 0);
        return;
    }
    if (cpu_gemm_bf16_widened()) {
        cpu_gemm_widen(0, ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, widen_buf(), CPU_GEMM_WIDEN_BYTES / sizeof(float));
        return;
    }
    GemmPrim* g = gemm_lookup(ta, tb, M, N, K, lda, ldb, accumulate ? 1 : 0);
    dnnl_memory_t ma, mb, mc;
    dnnlCheck(dnnl_memory_create(&ma, &g->a, engine, (void*)A));
    dnnlCheck(dnnl_memory_create(&mb, &g->b, engine, (void*)B));
    dnnlCheck(dnnl_memory_create(&mc, &g->c, engine, C));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    dnnlCheck(dnnl_primitive_execute(g->prim, stream, 3, args));
    dnnlCheck(dnnl_stream_wait(stream));
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
}

// The fp16 product before it joins an accumulating C: grown to the largest and kept
static float* f16_sum;
static size_t f16_sum_n;

static inline float round_f16(float x) { return fp16_to_f32(fp16_from_f32(x)); }

void cpu_gemm_16(int f16, int ta, int tb, int M, int N, int K, const uint16_t* A, int lda,
                 const uint16_t* B, int ldb, int accumulate, float* C) {
    if (!f16) { cpu_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C); return; }
    if (M == 0 || N == 0) return;
    const size_t n = (size_t)M * N;
    float* P = C;
    if (accumulate) {
        if (f16_sum_n < n) {
            cpu_ops_free(f16_sum);
            f16_sum = (float*)cpu_ops_alloc(n * sizeof(float));
            f16_sum_n = n;
        }
        P = f16_sum;
    }
    cpu_gemm_widen(1, ta, tb, M, N, K, A, lda, B, ldb, 0, P, K ? widen_buf() : NULL, K ? CPU_GEMM_WIDEN_BYTES / sizeof(float) : 0);
    // the product as fp16 holds it (an fp16 GEMM's output: inf past 65504, where the loss
    // scaling's overflow shows), then added in fp32 (the gradients accumulate in fp32)
    if (accumulate) {
        #pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) C[i] += round_f16(P[i]);
    } else {
        #pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) C[i] = round_f16(C[i]);
    }
}
